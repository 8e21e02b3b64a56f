// --simulate's scenario timeline (issue 19): the markers it sends, looped, and the checks a scenario goes through.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "simulation/simulate.hpp"

namespace unit_simulate { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using json = nlohmann::json;

namespace {

struct Seen {
  double t;
  Marker::Kind kind;
  std::string name;
  std::optional<int64_t> index;
};
std::vector<Seen> phase_markers_until(const Simulation& sim, double until_s) {
  std::vector<Seen> out;
  for (size_t n = 0;; ++n) {
    auto m = sim.marker(n);
    if (!m || m->first > until_s) break;
    if (m->second.kind != Marker::Kind::Work)
      out.push_back({m->first, m->second.kind, m->second.name, m->second.index});
  }
  return out;
}

TEST(Simulate, TheBuiltInTimelineSendsItsPhasesThenLoopsFromEpochOneWithIndicesGoingOn) {
  auto sim = Simulation::load("");
  EXPECT_EQ(sim->name(), "training (built-in)");
  EXPECT_EQ(sim->gpu_count(), 4);
  EXPECT_TRUE(sim->library_path().starts_with("/proc/self/fd/"));
  const auto seen = phase_markers_until(*sim, 40);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].kind, Marker::Kind::Begin);
  EXPECT_EQ(seen[0].name, "warmup");
  EXPECT_EQ(seen[0].t, 0.0);
  // Times never go back, and at one instant an end comes before a begin (consecutive phases, never nested).
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].t, seen[i - 1].t);
    if (seen[i].t == seen[i - 1].t) {
      EXPECT_FALSE(seen[i - 1].kind == Marker::Kind::Begin);
    }
  }
  std::vector<std::pair<std::string, int64_t>> begins;
  for (const auto& s : seen)
    if (s.kind == Marker::Kind::Begin && s.index) begins.emplace_back(s.name, *s.index);
  // First pass: epochs 1-3 and evaluations 1-2; the loop (from epoch 1, every 18.5 s) goes on with epoch 4.
  const std::vector<std::pair<std::string, int64_t>> want = {{"epoch", 1}, {"epoch", 2},    {"evaluate", 1},
                                                             {"epoch", 3}, {"evaluate", 2}, {"epoch", 4},
                                                             {"epoch", 5}, {"evaluate", 3}, {"epoch", 6}};
  ASSERT_GE(begins.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(begins[i], want[i]) << i;
  int warmups = 0;
  for (const auto& s : seen)
    warmups += s.kind == Marker::Kind::Begin && s.name == "warmup";
  EXPECT_EQ(warmups, 1); // the warm-up is not repeated
  // Epoch 4 begins when the first pass ends (20 s).
  for (const auto& s : seen)
    if (s.kind == Marker::Kind::Begin && s.name == "epoch" && s.index == 4) {
      EXPECT_DOUBLE_EQ(s.t, 20.0);
    }
}

TEST(Simulate, WorkIsSentWhileTheTimelineSaysSo) {
  auto sim = Simulation::load("");
  double samples = 0;
  for (size_t n = 0;; ++n) {
    auto m = sim->marker(n);
    if (!m || m->first > 20.0 + 1e-9) break;
    if (m->second.kind == Marker::Kind::Work) {
      EXPECT_EQ(m->second.unit, "samples");
      samples += m->second.amount;
    }
  }
  // 2,400 a second over 9 s of training, 2,100 over 2.5 s power-capped, 300 over the 2 s stall.
  EXPECT_DOUBLE_EQ(samples, 2400 * 9.0 + 2100 * 2.5 + 300 * 2.0);
}

TEST(Simulate, ATimelineThatDoesNotLoopEnds) {
  json sc = {{"timeline",
              {{"loop", false},
               {"segments", {{{"label", "a"}, {"s", 1}}}},
               {"phases", {{{"name", "only"}, {"from_s", 0}, {"to_s", 1}}}}}},
             {"devices", {{{"name", "x"}, {"uuid", "GPU-x"}, {"metrics", {{"power_mw", 1}}}}}}};
  EXPECT_NO_THROW(check_scenario(sc));
}

TEST(Simulate, ScenarioChecksNameTheField) {
  auto says = [](const json& sc) {
    try {
      check_scenario(sc);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const json dev = {{"name", "x"}, {"uuid", "GPU-x"}, {"metrics", {{"power_mw", 1}}}};
  EXPECT_EQ(says(json::array()), "the scenario: expected a JSON object with \"devices\"");
  EXPECT_EQ(says({{"devices", {dev}}, {"timeline", {{"segments", {{{"label", "a"}, {"s", 1}}}}, {"loop_from", 3}}}}),
            "timeline.loop_from: expected the index of a segment, 0 to 0");
  json bad_metric = dev;
  bad_metric["metrics"]["util_gpu"] = {{"sine", {{"base", 1}}}};
  EXPECT_EQ(says({{"devices", {dev, bad_metric}}}),
            "devices[1].metrics.util_gpu.sine: expected {\"base\": N, \"amp\": N, \"period_s\": N > 0}");
  json noise = dev;
  noise["metrics"]["power_mw"] = {{"timeline", {{"a", 1}}}, {"noise", "loud"}};
  EXPECT_EQ(says({{"devices", {noise}}, {"timeline", {{"segments", {{{"label", "a"}, {"s", 1}}}}}}}),
            "devices[0].metrics.power_mw.noise: expected a number (the amplitude) or [amplitude, seed]");
  json phase_name = {{"devices", {dev}},
                     {"timeline",
                      {{"segments", {{{"label", "a"}, {"s", 1}}}},
                       {"phases", {{{"name", "bad\nname"}, {"from_s", 0}, {"to_s", 1}}}}}}};
  EXPECT_TRUE(says(phase_name).starts_with("timeline.phases[0].name: ")) << says(phase_name);
}

} // namespace
} // namespace unit_simulate
