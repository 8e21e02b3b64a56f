// Anomalies and stragglers live (issue 36), end to end: `wattscope record` on eight fake GPUs, four of them with a
// fault injected at a known sample (fake NVML "piecewise" values), the other four healthy with noise. Each fault must
// be an `events` row of kind `anomaly` or `straggler` with its onset at the sample the fault began (tolerances stated
// below), and nothing may be flagged on the healthy GPUs.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"

namespace e2e_anomaly { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using json = nlohmann::json;

namespace {

// Fault samples (the fake's call count k: one call per metric per tick).
constexpr int kThrottleAt = 60; // GPU 3: SM clock 1,980 -> 1,410 MHz, HW thermal slowdown, to the end
constexpr int kStallAt = 100;   // GPU 5: utilisation 95 -> 3 %, power 250 -> 60 W, for 40 samples
constexpr int kStallEnd = 140;
constexpr int kRampAt = 80;   // GPU 6: temperature rising 0.5 °C a sample
constexpr int kLevelAt = 120; // GPU 7: power 250 -> 330 W at the same utilisation, no phase change

json pw(std::vector<std::pair<int, double>> points, double noise = 0) {
  json a = json::array();
  for (auto [k, v] : points)
    a.push_back({k, v});
  json o = {{"piecewise", a}};
  if (noise > 0) o["noise"] = json::array({noise, 0.7});
  return o;
}

json metrics(int i) {
  const double seed = i * 1.3;
  auto noisy = [&](std::vector<std::pair<int, double>> p, double amp) {
    json o = pw(std::move(p));
    o["noise"] = json::array({amp, seed});
    return o;
  };
  json m;
  json power = noisy({{0, 250000}}, 6000);
  json util = noisy({{0, 95}}, 2);
  json clock = 1980;
  json temp = noisy({{0, 65}}, 0.8);
  json reasons = 0;
  if (i == 3) {
    clock = pw({{0, 1980}, {kThrottleAt - 1, 1980}, {kThrottleAt, 1410}});
    reasons = pw({{0, 0}, {kThrottleAt - 1, 0}, {kThrottleAt, 0x40}});
  }
  if (i == 5) {
    power = noisy({{0, 250000}, {kStallAt - 1, 250000}, {kStallAt, 60000}, {kStallEnd - 1, 60000}, {kStallEnd, 250000}},
                  6000);
    util = noisy({{0, 95}, {kStallAt - 1, 95}, {kStallAt, 3}, {kStallEnd - 1, 3}, {kStallEnd, 95}}, 2);
  }
  if (i == 6) temp = noisy({{0, 65}, {kRampAt, 65}, {kRampAt + 400, 265}}, 0.8);
  if (i == 7) power = noisy({{0, 250000}, {kLevelAt - 1, 250000}, {kLevelAt, 330000}}, 6000);
  m["power_mw"] = power;
  m["power_instant_mw"] = power;
  m["util_gpu"] = util;
  m["util_mem"] = 40;
  m["mem_used_bytes"] = 70LL << 30;
  m["mem_total_bytes"] = 85899345920LL;
  m["temp_gpu"] = temp;
  m["clock_sm"] = clock;
  m["power_limit_mw"] = 400000;
  m["clock_events"] = reasons;
  return m;
}

json scenario() {
  json s = {{"driver_version", "550.54.15"}, {"nvml_version", "12.550.54.15"}, {"devices", json::array()}};
  for (int i = 0; i < 8; ++i)
    s["devices"].push_back({{"name", "NVIDIA H100 80GB HBM3"},
                            {"uuid", "GPU-" + std::to_string(3000 + i) + "-anomaly"},
                            {"pci_bus_id", "00000000:" + std::to_string(30 + i) + ":00.0"},
                            {"max_clock_sm_mhz", 1980},
                            {"max_clock_mem_mhz", 2619},
                            {"metrics", metrics(i)}});
  return s;
}

struct Found {
  std::string kind, source, state, anomaly, metric, message;
  long long onset = 0; // onset_ms
};

} // namespace

TEST(AnomalyLive, InjectedFaultsFoundHealthyGpusQuiet) {
  TempDir dir;
  write_file(dir / "scenario.json", scenario().dump());
  write_file(dir / "sys/.keep", "");
  write_file(dir / "proc/stat", "cpu  100 0 100 1000 0 0 0 0 0 0\ncpu0 100 0 100 1000 0 0 0 0 0 0\n");
  write_file(dir / "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\n");
  const std::map<std::string, std::string> env = {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                                                  {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                                                  {"CUDA_VISIBLE_DEVICES", "\x01"},
                                                  // The detectors count seconds; a "second" of 50 ms (one sample)
                                                  // runs the same pipeline in 11 s instead of 4 min.
                                                  {"WATTSCOPE_ANOMALY_SECOND_MS", "50"}};
  // 220 samples at 50 ms. Late ticks do not move anything: the faults are placed by sample, not by time. Every call
  // is made every tick (--max-read-cost 0): on a loaded machine the quickest of a call's first reads can pass the
  // 50 us budget, and a call then read once a second would reach its fault's call count ticks later (seen at -j8).
  const auto r = run({wstest::wattscope(), "record", "--interval", "50ms", "--duration", "11s", "--max-read-cost", "0",
                      "--sysfs-root", dir / "sys", "--procfs-root", dir / "proc"},
                     env, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "wattscope.db";
  // The time of each GPU's k-th stored sample (k = the fake's call count).
  auto sample_ts = [&](int gpu, int k) {
    const auto rows = query(db, "SELECT ts_ms FROM gpu_samples WHERE gpu_index = " + std::to_string(gpu) +
                                    " ORDER BY tick LIMIT 1 OFFSET " + std::to_string(k));
    return rows.empty() ? -1LL : std::stoll(*rows.at(0).at(0));
  };
  std::vector<Found> found;
  for (const auto& row : query(db, "SELECT kind, source, detail FROM events WHERE kind IN ('anomaly', 'straggler') "
                                   "ORDER BY seq")) {
    const json d = json::parse(*row.at(2));
    found.push_back({*row.at(0), *row.at(1), d.value("state", ""), d.value("anomaly", ""), d.value("metric", ""),
                     d.value("message", ""), d.value("onset_ms", 0LL)});
  }
  std::string all;
  for (const auto& f : found)
    all += f.kind + " " + f.source + " " + f.state + " " + std::to_string(f.onset) + ": " + f.message + "\n";
  // Nothing on the healthy GPUs.
  for (const auto& f : found)
    EXPECT_TRUE(f.source == "gpu3" || f.source == "gpu5" || f.source == "gpu6" || f.source == "gpu7") << all;
  auto onset_of = [&](const std::string& kind, const std::string& source, const std::string& anomaly,
                      const std::string& metric) -> const Found* {
    for (const auto& f : found)
      if (f.kind == kind && f.source == source && f.state == "onset" && f.anomaly == anomaly &&
          (metric.empty() || f.metric == metric))
        return &f;
    return nullptr;
  };
  // GPU 3: a straggler, onset at the first throttled sample (tolerance 0), in the words.
  const Found* s = onset_of("straggler", "gpu3", "", "");
  ASSERT_NE(s, nullptr) << all;
  EXPECT_EQ(s->onset, sample_ts(3, kThrottleAt)) << all;
  EXPECT_NE(s->message.find("gpu3 at 1,410 MHz"), std::string::npos) << s->message;
  EXPECT_NE(s->message.find("while its 7 siblings ran at 1,980 MHz; its throttle reasons: HW thermal slowdown"),
            std::string::npos)
      << s->message;
  // ... and its clock changed level without a phase change.
  const Found* c = onset_of("anomaly", "gpu3", "level_change", "clock_sm_mhz");
  ASSERT_NE(c, nullptr) << all;
  EXPECT_EQ(c->onset, sample_ts(3, kThrottleAt));
  // GPU 5: a stall, on utilisation and on power, onset at the first stalled sample (tolerance 0); it ended.
  for (const char* metric : {"util_gpu_pct", "power_w"}) {
    const Found* st = onset_of("anomaly", "gpu5", "stall", metric);
    ASSERT_NE(st, nullptr) << metric << "\n" << all;
    EXPECT_EQ(st->onset, sample_ts(5, kStallAt)) << metric;
  }
  EXPECT_TRUE(std::any_of(found.begin(), found.end(), [](const Found& f) {
    return f.source == "gpu5" && f.state == "ended" && f.anomaly == "stall";
  })) << all;
  // GPU 6: a temperature ramp, found within the detector's lag (16 samples) of its start.
  const Found* t = onset_of("anomaly", "gpu6", "temperature_ramp", "temp_gpu_c");
  ASSERT_NE(t, nullptr) << all;
  EXPECT_GE(t->onset, sample_ts(6, kRampAt)) << all;
  EXPECT_LE(t->onset, sample_ts(6, kRampAt + 16)) << all;
  // GPU 7: power changed level at the same utilisation (tolerance 0).
  const Found* l = onset_of("anomaly", "gpu7", "level_change", "power_w");
  ASSERT_NE(l, nullptr) << all;
  EXPECT_EQ(l->onset, sample_ts(7, kLevelAt)) << all;
}

} // namespace e2e_anomaly
