// issue 33 on Level Zero: each group of per-tick calls (every handle's call of one kind) timed over its first reads; a
// group over the budget read at most once a second, the energy counters (whose differences are the power) at most
// every 100 ms, the ticks between carrying the values with their age; --max-read-cost 0 reads every group every tick.
// The fake loader spends the costs the scenario gives; a value that rises by one a read counts the reads.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "core/instrumented.hpp"
#include "sources/levelzero/level_zero_source.hpp"

namespace unit_level_zero_cost { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wstest;
using json = nlohmann::json;

namespace {

constexpr int kTicks = 300; // 3 s of a 10 ms grid
constexpr auto kInterval = std::chrono::milliseconds(10);

json scenario() {
  const json ts = {{"linear", {5'000'000, 10'000}}}; // the driver's timestamps, 10 ms a read
  json d = {{"name", "Intel(R) Data Center GPU Max 1550"},
            {"pci", {0, 0x3a, 0, 0}},
            {"power_domains",
             {{{"domain", "card"}, {"card", true}, {"energy_uj", {{"linear", {1e9, 3e6}}}}, {"timestamp_us", ts}}}},
            {"engines", {{{"type", "all"}, {"active_us", {{"linear", {0, 5000}}}}, {"timestamp_us", ts}}}},
            {"memory", {{{"location", "device"}, {"size", 68'719'476'736LL}, {"free", {{"linear", {6e10, -1e6}}}}}}},
            {"frequency", {{{"domain", "gpu"}, {"actual_mhz", {{"linear", {900, 1}}}}, {"max_mhz", 1600}}}},
            {"temperature", {{{"sensor", "gpu"}, {"celsius", {{"linear", {40, 1}}}}}}}};
  // Assumed, not measured (no Intel figures at hand): the counter and the temperature well over the 50 us budget, the
  // rest free. An instrumented build's budget is kInstrumentedCostFactor times larger: so are the costs.
  return {{"devices", json::array({d})},
          {"call_cost_us",
           {{"energy_counter", 300 * kInstrumentedCostFactor}, {"temperature_state", 200 * kInstrumentedCostFactor}}}};
}

struct CostRun {
  std::vector<Frame> frames;
  json report;
};

// kTicks ticks on a synthetic 10 ms grid (the calls spend real time; the grid's clock is the frames' own).
CostRun run(std::optional<std::chrono::nanoseconds> budget) {
  TempDir dir;
  write_file(dir / "scenario.json", scenario().dump());
  ::setenv("WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO", (dir / "scenario.json").c_str(), 1);
  LevelZeroSource::Options o;
  o.library_path = fake_level_zero();
  if (budget) o.cost.max_read_cost = *budget;
  CostRun r;
  LevelZeroSource src(o);
  EXPECT_TRUE(src.open()) << src.status().line();
  const auto t0 = SteadyClock::now();
  for (int k = 0; k < kTicks; ++k) {
    Frame f;
    f.tick = k;
    f.ts_ms = 10 * k;
    f.mono = t0 + k * kInterval;
    f.last = k == kTicks - 1;
    src.sample(f);
    r.frames.push_back(std::move(f));
  }
  r.report = src.report();
  ::unsetenv("WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO");
  return r;
}

std::optional<int32_t> age(const GpuSample& s, GpuMetric m) {
  for (const auto& [i, a] : s.age_ms)
    if (i == static_cast<uint16_t>(m)) return a;
  return std::nullopt;
}

} // namespace

TEST(LevelZeroCost, ACostlyGroupIsReadAboutOnceASecondACheapOneEveryTick) {
  const CostRun r = run(std::nullopt); // the default budget
  ASSERT_EQ(r.frames.size(), static_cast<size_t>(kTicks));
  std::set<double> temps;
  std::set<int64_t> free_bytes;
  std::vector<int> counter_ticks;
  for (const auto& f : r.frames) {
    ASSERT_EQ(f.gpus.size(), 1u) << "tick " << f.tick;
    const GpuSample& s = f.gpus[0];
    ASSERT_TRUE(s.temp_gpu_c) << "carried between reads, never missing: tick " << f.tick;
    temps.insert(*s.temp_gpu_c);
    ASSERT_TRUE(s.mem_free_bytes);
    free_bytes.insert(*s.mem_free_bytes);
    if (s.energy_counter_uj) counter_ticks.push_back(static_cast<int>(f.tick));
  }
  // Temperature: five timed reads (ticks 0-4), then once a second less a tenth: ticks 94, 184, 274.
  EXPECT_EQ(temps.size(), 8u);
  // Memory costs nothing: read every tick (its free bytes fall by 1e6 a read).
  EXPECT_EQ(free_bytes.size(), static_cast<size_t>(kTicks));
  // The counters: five timed reads, then every 90 ms (9 ticks), and the run's last tick whatever its schedule.
  ASSERT_FALSE(counter_ticks.empty());
  EXPECT_EQ(counter_ticks.back(), kTicks - 1);
  EXPECT_EQ(counter_ticks.size(), 5u + (kTicks - 1 - 4) / 9 + 1) << "ticks 0-4, 13, 22, ... 292, and 299";
  const json& reads = r.report["devices"][0]["reads"];
  EXPECT_EQ(reads["zesTemperatureGetState"]["period_ms"].get<double>(), 1000);
  EXPECT_GE(reads["zesTemperatureGetState"]["cost_us"].get<double>(), 200);
  EXPECT_EQ(reads["zesPowerGetEnergyCounter"]["period_ms"].get<double>(), 100);
  EXPECT_EQ(reads["zesMemoryGetState"]["period_ms"].get<double>(), 0);
}

TEST(LevelZeroCost, TheTicksBetweenCarryTheLastValueWithItsAge) {
  const CostRun r = run(std::nullopt);
  for (int k : {5, 50, 93}) {
    const GpuSample& s = r.frames[static_cast<size_t>(k)].gpus[0];
    EXPECT_EQ(*s.temp_gpu_c, 44) << "the fifth read's value, tick " << k;
    EXPECT_EQ(age(s, GpuMetric::temp_gpu_c), (k - 4) * 10) << "tick " << k;
    EXPECT_FALSE(age(s, GpuMetric::mem_free_bytes)) << "read this tick";
  }
  const GpuSample& fresh = r.frames[94].gpus[0];
  EXPECT_EQ(*fresh.temp_gpu_c, 45);
  EXPECT_FALSE(age(fresh, GpuMetric::temp_gpu_c));
  // Between two counter reads the power is the last interval's, carried with its age.
  const GpuSample& between = r.frames[8].gpus[0];
  EXPECT_FALSE(between.energy_counter_uj);
  ASSERT_TRUE(between.power_w);
  EXPECT_EQ(age(between, GpuMetric::power_w), 40);
}

TEST(LevelZeroCost, ABudgetOfZeroReadsEveryGroupEveryTick) {
  const CostRun r = run(std::chrono::nanoseconds(0));
  std::set<double> temps;
  int counters = 0;
  for (const auto& f : r.frames) {
    temps.insert(*f.gpus[0].temp_gpu_c);
    counters += f.gpus[0].energy_counter_uj.has_value();
    EXPECT_TRUE(f.gpus[0].age_ms.empty()) << "tick " << f.tick;
  }
  EXPECT_EQ(temps.size(), static_cast<size_t>(kTicks));
  EXPECT_EQ(counters, kTicks);
}

} // namespace unit_level_zero_cost
