// issue 33 on ROCm SMI: each call's cost timed over its first reads; a call over the budget read at most once a
// second (its natural period), the ticks between carrying its value with its age; --max-read-cost 0 reads every call
// every tick. The fake library spends the costs the scenario gives and counts every entry point's calls.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "core/instrumented.hpp"
#include "sources/rocm/rocm_smi_source.hpp"

namespace unit_rocm_cost { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wstest;
using json = nlohmann::json;

namespace {

constexpr int kTicks = 300; // 3 s of a 10 ms grid
constexpr auto kInterval = std::chrono::milliseconds(10);

json scenario() {
  json m;
  m["energy_count"] = {{"linear", {1000, 650}}}; // 650 counts (~10 mJ) a read
  m["energy_resolution_uj"] = 15.2587890625;
  m["socket_power_uw"] = {{"linear", {300e6, 1e6}}};
  m["busy_pct"] = {{"linear", {0, 1}}};
  m["fan_speed"] = {{"linear", {50, 1}}};
  m["fan_max"] = 255;
  return {{"version", {6, 1, 2}},
          {"devices", json::array({{{"name", "AMD Instinct MI300X"}, {"unique_id", 7}, {"metrics", m}}})},
          // Assumed, not measured (no AMD figures at hand): the counter and the fan well over the 50 us budget, the
          // rest free.
          // An instrumented build's budget is kInstrumentedCostFactor times larger: so are the costs.
          {"call_cost_us",
           {{"rsmi_dev_energy_count_get", 300 * kInstrumentedCostFactor},
            {"rsmi_dev_fan_speed_get", 200 * kInstrumentedCostFactor}}}};
}

struct CostRun {
  std::vector<Frame> frames;
  json calls;
  json report;
};

// kTicks ticks on a synthetic 10 ms grid (the calls spend real time; the grid's clock is the frames' own).
CostRun run(std::optional<std::chrono::nanoseconds> budget) {
  TempDir dir;
  write_file(dir / "scenario.json", scenario().dump());
  ::setenv("WATTSCOPE_FAKE_ROCM_SMI_SCENARIO", (dir / "scenario.json").c_str(), 1);
  ::setenv("WATTSCOPE_FAKE_ROCM_SMI_CALLS", (dir / "calls.json").c_str(), 1);
  RocmSmiSource::Options o;
  o.library_path = std::string(WATTSCOPE_FAKES_DIR) + "/librocm_smi64-fake.so";
  if (budget) o.cost.max_read_cost = *budget;
  CostRun r;
  {
    RocmSmiSource src(o);
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
  } // rsmi_shut_down writes the call counts
  ::unsetenv("WATTSCOPE_FAKE_ROCM_SMI_SCENARIO");
  ::unsetenv("WATTSCOPE_FAKE_ROCM_SMI_CALLS");
  r.calls = json::parse(read_file(dir / "calls.json"));
  return r;
}

std::optional<int32_t> age(const GpuSample& s, GpuMetric m) {
  for (const auto& [i, a] : s.age_ms)
    if (i == static_cast<uint16_t>(m)) return a;
  return std::nullopt;
}

} // namespace

TEST(RocmCost, ACostlyCallIsReadAboutOnceASecondACheapOneEveryTick) {
  const CostRun r = run(std::nullopt); // the default budget, 50 us
  // Five timed reads, then at most one a period (less a tenth for jitter): ticks 0-4, 94, 184, 274.
  EXPECT_EQ(r.calls.value("rsmi_dev_fan_speed_get", 0), 8) << r.calls.dump();
  // The same for the counter, which is also read on the run's last tick (the run ends on a counter reading).
  EXPECT_EQ(r.calls.value("rsmi_dev_energy_count_get", 0), 9) << r.calls.dump();
  EXPECT_EQ(r.calls.value("rsmi_dev_busy_percent_get", 0), kTicks);
  EXPECT_EQ(r.calls.value("rsmi_dev_current_socket_power_get", 0), kTicks);
  const json& reads = r.report["devices"][0]["reads"];
  EXPECT_EQ(reads["fan_speed"]["period_ms"].get<double>(), 1000);
  EXPECT_GE(reads["fan_speed"]["cost_us"].get<double>(), 200);
  EXPECT_EQ(reads["energy_count"]["period_ms"].get<double>(), 1000) << "shaped by the instant socket power between";
  EXPECT_EQ(reads["busy_percent"]["period_ms"].get<double>(), 0);
}

TEST(RocmCost, TheTicksBetweenCarryTheLastValueWithItsAge) {
  const CostRun r = run(std::nullopt);
  ASSERT_EQ(r.frames.size(), static_cast<size_t>(kTicks));
  const GpuSample& read = r.frames[4].gpus.at(0); // the fifth timed read, the last before the schedule
  ASSERT_TRUE(read.fan_pct);
  EXPECT_FALSE(age(read, GpuMetric::fan_pct));
  for (int k : {5, 50, 93}) {
    SCOPED_TRACE(k);
    const GpuSample& s = r.frames[static_cast<size_t>(k)].gpus.at(0);
    EXPECT_EQ(s.fan_pct, read.fan_pct) << "the last value carried";
    EXPECT_EQ(age(s, GpuMetric::fan_pct), (k - 4) * 10) << "its age: ms since that read";
    EXPECT_FALSE(s.energy_counter_uj) << "no counter reading on a tick it is not read: accounting shapes the energy";
    EXPECT_FALSE(age(s, GpuMetric::util_gpu_pct)) << "a cheap call is this tick's";
    EXPECT_TRUE(s.power_instant);
  }
  const GpuSample& again = r.frames[94].gpus.at(0);
  EXPECT_NE(again.fan_pct, read.fan_pct) << "read again a period (less a tenth) later";
  EXPECT_FALSE(age(again, GpuMetric::fan_pct));
  EXPECT_TRUE(r.frames.back().gpus.at(0).energy_counter_uj) << "the last tick reads the counter";
}

TEST(RocmCost, ABudgetOfZeroReadsEveryCallEveryTick) {
  const CostRun r = run(std::chrono::nanoseconds{0});
  EXPECT_EQ(r.calls.value("rsmi_dev_fan_speed_get", 0), kTicks);
  EXPECT_EQ(r.calls.value("rsmi_dev_energy_count_get", 0), kTicks);
  for (const auto& f : r.frames)
    EXPECT_TRUE(f.gpus.at(0).age_ms.empty());
}

} // namespace unit_rocm_cost
