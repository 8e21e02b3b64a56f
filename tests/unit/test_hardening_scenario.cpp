// Issue 31: scenario files bounded (depth, counts, UUIDs, the simulated library's knobs), and the timeline's markers
// computed on demand, checked marker for marker against the eager list they replace.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "simulation/scenario.hpp"

namespace unit_hardening_scenario { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using json = nlohmann::json;

namespace {

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i)
    out += s;
  return out;
}

const json kDevice = {{"name", "x"}, {"uuid", "GPU-x"}, {"metrics", {{"power_mw", 1}}}};

std::string scenario_error(const std::string& text) {
  try {
    check_scenario(parse_scenario_json(text));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(HardeningScenario, AScenarioNestedTwentyThousandDeepIsRefusedWhileParsing) {
  // 460 KB: {"linear":[1,2],"max": ...} 20,000 times crashed `run --simulate` (the checks recursed through "max").
  const std::string value = repeat("{\"linear\":[1,2],\"max\":", 20'000) + "1" + repeat("}", 20'000);
  const std::string text =
      "{\"devices\":[{\"name\":\"x\",\"uuid\":\"GPU-x\",\"metrics\":{\"power_mw\":" + value + "}}]}";
  EXPECT_EQ(scenario_error(text), "objects and lists nested deeper than 32 levels; a scenario needs about 6");
  EXPECT_EQ(scenario_error(repeat("[", 100'000)), "objects and lists nested deeper than 32 levels; a scenario needs "
                                                  "about 6");
  // A "max" chain within the limit is still a scenario.
  const std::string ok = repeat("{\"linear\":[1,2],\"max\":", 20) + "1" + repeat("}", 20);
  EXPECT_EQ(scenario_error("{\"devices\":[{\"name\":\"x\",\"uuid\":\"GPU-x\",\"metrics\":{\"power_mw\":" + ok + "}}]}"),
            "accepted");
  EXPECT_TRUE(scenario_error("{\"devices\": [").starts_with("not valid JSON: ")) << scenario_error("{\"devices\": [");
  // Found by fuzz_scenario: a number past a double's range is the parser's out_of_range, which escaped (an abort).
  EXPECT_EQ(
      scenario_error("{\"devices\": [{\"name\": \"x\", \"uuid\": \"y\", \"metrics\": {\"power_mw\": 654E98251264}}]}"),
      "not valid JSON: [json.exception.out_of_range.406] number overflow parsing '654E98251264'");
}

TEST(HardeningScenario, SimulatedGpusNeedTheirOwnUuidAndBusId) {
  json sc = {{"devices", json::array()}};
  for (int i = 0; i < 64; ++i)
    sc["devices"].push_back(kDevice);
  EXPECT_EQ(scenario_error(sc.dump()),
            "devices[1].uuid: 'GPU-x' is also devices[0].uuid; each simulated GPU needs its own");
  for (int i = 0; i < 64; ++i)
    sc["devices"][i]["uuid"] = fmt::format("GPU-{}", i);
  EXPECT_EQ(scenario_error(sc.dump()), "accepted");
  sc["devices"][5]["pci_bus_id"] = "00000000:05:00.0";
  sc["devices"][9]["pci_bus_id"] = "00000000:05:00.0";
  EXPECT_EQ(scenario_error(sc.dump()),
            "devices[9].pci_bus_id: '00000000:05:00.0' is also devices[5].pci_bus_id; each simulated GPU needs its "
            "own");
  sc["devices"][9].erase("pci_bus_id");
  sc["devices"][3]["name"] = "H100\x1b]0;owned\x07";
  EXPECT_TRUE(scenario_error(sc.dump()).starts_with("devices[3].name: ")) << scenario_error(sc.dump());
}

TEST(HardeningScenario, TheSimulatedLibrarysOtherKnobsAreCheckedBeforeItReadsThem) {
  // The library reads these as it goes: a wrong type threw inside an NVML call ("unsupported": 5 aborted the run), a
  // long hang or cost stalled it, a pid file could be a FIFO it blocks on.
  auto with = [](const std::string& top, const std::string& device) {
    return scenario_error("{" + top + "\"devices\": [{" + device +
                          "\"name\": \"x\", \"uuid\": \"GPU-x\", \"metrics\": {\"power_mw\": 1}}]}");
  };
  EXPECT_EQ(with("", "\"unsupported\": 5,"), "devices[0].unsupported: expected a list of names");
  EXPECT_EQ(with("\"init_error\": \"x\",", ""), "init_error: expected an NVML return code (a whole number)");
  EXPECT_EQ(with("\"driver_version\": 5,", ""), "driver_version: expected a string");
  EXPECT_EQ(with("", "\"mig_mode\": \"x\","), "devices[0].mig_mode: expected a whole number");
  EXPECT_EQ(with("", "\"mig\": [{\"uuid\": 5}],"), "devices[0].mig[0].uuid: expected a string");
  EXPECT_EQ(with("", "\"xid\": [5],"),
            "devices[0].xid[0]: expected {\"after_s\": S, \"xid\": N, \"gpu_instance\": N, \"compute_instance\": N}");
  EXPECT_EQ(with("", "\"errors\": {\"power_mw\": {\"ticks\": [\"a\"]}},"),
            "devices[0].errors.power_mw: expected {\"code\": N, \"ticks\": [N, ...], \"from_tick\": N}");
  EXPECT_EQ(with("\"hang\": {\"at_tick\": 3, \"ms\": 1000000000},", ""),
            "hang: expected {\"at_tick\": N, \"ms\": 0 to 60000}");
  EXPECT_EQ(with("\"call_cost_us\": {\"default\": 1e12},", ""),
            "call_cost_us.default: expected microseconds, 0 to 1e6, or {\"cpu\": US, \"sleep\": US, \"from_s\": S}");
  EXPECT_EQ(with("", "\"processes\": [{\"pid_file\": \"/tmp/fifo\", \"pid\": 1}],"),
            "devices[0].processes[0].pid_file: not for a scenario; use \"pid\"");
  // What the library's header documents still passes.
  EXPECT_EQ(with("\"hang\": [{\"at_tick\": 3, \"ms\": 3000}], \"call_cost_us\": {\"default\": 20, "
                 "\"nvmlDeviceGetPcieThroughput\": {\"cpu\": 650, \"sleep\": 20000, \"from_s\": 2}}, "
                 "\"reject_versions\": [\"nvmlDeviceGetMemoryInfo_v2\"], \"init_error\": 0,",
                 "\"unsupported\": [\"fan_pct\"], \"mig\": [\"MIG-a\", {\"uuid\": \"MIG-b\", \"gpu_instance\": 2, "
                 "\"metrics\": {\"mem_used_bytes\": 5}}], \"xid\": [{\"after_s\": 0.3, \"xid\": 79}], "
                 "\"errors\": {\"util_gpu\": {\"code\": 999, \"ticks\": [3, 4]}}, \"lost_at_tick\": 5,"),
            "accepted");
}

// The markers as the eager code listed them before issue 31 (every marker of a pass in a vector, sorted), for the
// lazy ScenarioTimeline to match marker for marker.
struct Eager {
  struct Timed {
    double t;
    Marker m;
  };
  std::vector<Timed> first, repeated;
  double span = 0;
  std::map<std::string, int64_t> step;

  explicit Eager(const json& sc) {
    const auto& tl = sc["timeline"];
    const auto& segs = tl["segments"];
    const size_t loop_from = tl.value("loop_from", size_t{0});
    double t = 0, loop_start = 0;
    for (size_t i = 0; i < segs.size(); ++i) {
      if (i == loop_from) loop_start = t;
      const double len = segs[i]["s"].get<double>(), rate = segs[i].value("work_per_s", 0.0);
      for (double at = 0; rate > 0 && at < len - 1e-9; at += 0.5) {
        Marker m;
        m.kind = Marker::Kind::Work;
        m.amount = rate * std::min(0.5, len - at);
        m.unit = tl.value("work_unit", std::string("samples"));
        first.push_back({t + std::min(at + 0.5, len), m});
      }
      t += len;
    }
    for (const auto& p : tl.value("phases", json::array())) {
      Marker b, e;
      b.kind = Marker::Kind::Begin;
      b.name = e.name = p["name"].get<std::string>();
      if (p.contains("index")) b.index = p["index"].get<int64_t>();
      if (b.index && p["from_s"].get<double>() >= loop_start) step[b.name] = std::max(step[b.name], *b.index);
      e.kind = Marker::Kind::End;
      first.push_back({p["from_s"].get<double>(), b});
      first.push_back({p["to_s"].get<double>(), e});
    }
    auto rank = [](const Timed& x) { return x.m.kind == Marker::Kind::Begin ? 1 : 0; };
    std::stable_sort(first.begin(), first.end(),
                     [&](const Timed& a, const Timed& b) { return a.t != b.t ? a.t < b.t : rank(a) < rank(b); });
    if (tl.value("loop", true) && t > loop_start) {
      span = t - loop_start;
      for (const auto& x : first)
        if (x.t >= loop_start + 1e-9 || (x.t >= loop_start && x.m.kind == Marker::Kind::Begin)) repeated.push_back(x);
    }
  }
  std::optional<Timed> at(size_t n) const {
    if (n < first.size()) return first[n];
    if (repeated.empty()) return std::nullopt;
    const size_t k = n - first.size(), wraps = k / repeated.size() + 1;
    Timed x = repeated[k % repeated.size()];
    if (x.m.index && step.count(x.m.name)) *x.m.index += static_cast<int64_t>(wraps) * step.at(x.m.name);
    x.t += static_cast<double>(wraps) * span;
    return x;
  }
};

TEST(HardeningScenario, LazyMarkersAreTheEagerListMarkerForMarker) {
  std::mt19937 rng(31);
  auto pick = [&](std::vector<double> v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  for (int round = 0; round < 200; ++round) {
    json segs = json::array(), phases = json::array();
    const int n_segs = 1 + static_cast<int>(rng() % 6);
    double total = 0;
    for (int i = 0; i < n_segs; ++i) {
      json s = {{"label", "s" + std::to_string(i % 3)}, {"s", pick({0.25, 0.5, 1, 1.3, 2, 0.7500000001, 3})}};
      if (rng() % 3) s["work_per_s"] = pick({1, 10, 2400, 0});
      total += s["s"].get<double>();
      segs.push_back(s);
    }
    const int n_phases = static_cast<int>(rng() % 6);
    for (int i = 0; i < n_phases; ++i) {
      // On segment boundaries and half seconds (ties with work markers and other phases), or anywhere.
      double from = pick({0, 0.5, 1, 1.5, 2, total / 3, total / 2});
      double to = from + pick({0.5, 1, 0.25, total / 2});
      json p = {{"name", pick({0, 1}) ? "epoch" : "eval"}, {"from_s", from}, {"to_s", to}};
      if (rng() % 2) p["index"] = 1 + rng() % 3;
      phases.push_back(p);
    }
    json tl = {{"segments", segs}, {"phases", phases}, {"loop", rng() % 4 != 0}};
    if (rng() % 2) tl["loop_from"] = rng() % n_segs;
    const json sc = {{"timeline", tl}, {"devices", json::array({kDevice})}};
    ASSERT_NO_THROW(check_scenario(sc)) << sc.dump();
    const Eager eager(sc);
    const ScenarioTimeline lazy(sc);
    for (size_t n = 0; n < eager.first.size() + 3 * eager.repeated.size() + 3; ++n) {
      const auto want = eager.at(n);
      const auto got = lazy.marker(n);
      ASSERT_EQ(want.has_value(), got.has_value()) << n << " " << sc.dump();
      if (!want) break;
      EXPECT_EQ(want->t, got->first) << n << " " << sc.dump();
      EXPECT_EQ(want->m.kind, got->second.kind) << n << " " << sc.dump();
      EXPECT_EQ(want->m.name, got->second.name) << n;
      EXPECT_EQ(want->m.index, got->second.index) << n;
      EXPECT_EQ(want->m.amount, got->second.amount) << n;
      EXPECT_EQ(want->m.unit, got->second.unit) << n;
    }
  }
}

TEST(HardeningScenario, ATimelineOfCenturiesCostsNoMoreThanASecondLongOne) {
  // 10,000 segments of 999,999 s, one unit of work a second: 2 x 10^10 markers in one pass, which the eager list
  // held in memory (928 bytes of scenario took 1.36 GB for three of them). On demand, any one is a few searches.
  json segs = json::array();
  for (size_t i = 0; i < kMaxScenarioSegments; ++i)
    segs.push_back({{"label", "t"}, {"s", 999999}, {"work_per_s", 1}});
  const json phase = {{"name", "p"}, {"from_s", 3}, {"to_s", 1e9}};
  const json sc = {{"timeline", {{"segments", segs}, {"phases", json::array({phase})}}},
                   {"devices", json::array({kDevice})}};
  ASSERT_NO_THROW(check_scenario(sc));
  const auto t0 = std::chrono::steady_clock::now();
  const ScenarioTimeline tl(sc);
  // The first markers: work at 0.5, 1, 1.5, 2, 2.5, 3, then the phase's begin at 3 (work first at one instant).
  for (size_t n = 0; n < 6; ++n) {
    EXPECT_EQ(tl.marker(n)->first, 0.5 * static_cast<double>(n + 1));
    EXPECT_EQ(tl.marker(n)->second.kind, Marker::Kind::Work);
    EXPECT_EQ(tl.marker(n)->second.amount, 0.5);
  }
  EXPECT_EQ(tl.marker(6)->second.kind, Marker::Kind::Begin);
  EXPECT_EQ(tl.marker(6)->first, 3.0);
  // Far in: marker 10^10 is work number 10^10 - 2 (the phase's begin and end came before it), at 5 x 10^9 - 0.5 s;
  // and the loop goes on.
  const auto far = tl.marker(10'000'000'000);
  EXPECT_EQ(far->second.kind, Marker::Kind::Work);
  EXPECT_DOUBLE_EQ(far->first, 5e9 - 0.5);
  EXPECT_TRUE(tl.marker(100'000'000'000).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

} // namespace
} // namespace unit_hardening_scenario
