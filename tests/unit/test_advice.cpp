// The advice estimators (issue 14) on synthetic series: each figure is worked out here from the series' values.
#include <gtest/gtest.h>

#include <cmath>

#include "advice/advice.hpp"

namespace unit_advice { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wattscope::advice;

namespace {

constexpr int64_t kT0 = 1'700'000'000'000;

// n samples 1 s apart; power constant, an energy counter to match, the given utilisation.
GpuSeries steady(int n, double power_w, double util_pct, int index = 0) {
  GpuSeries g;
  g.gpu_index = index;
  g.name = "Test GPU";
  g.mem_total_bytes = 80LL << 30;
  g.power_limit_w = 400;
  g.clock_sm_max_mhz = 2000;
  for (int i = 0; i < n; ++i) {
    GpuPoint p;
    p.ts_ms = kT0 + 1000LL * i;
    p.power_w = power_w;
    p.energy_j = power_w * i;
    p.util_pct = util_pct;
    p.mem_used_bytes = 70LL << 30;
    p.pcie_tx_bytes_per_s = 100'000'000;
    p.pcie_rx_bytes_per_s = 100'000'000;
    p.throttle_reasons = 0;
    p.clock_sm_mhz = 2000;
    g.points.push_back(p);
  }
  return g;
}

std::vector<CpuPoint> cpu(int n, double util_pct) {
  std::vector<CpuPoint> c;
  for (int i = 0; i < n; ++i)
    c.push_back({kT0 + 1000LL * i, util_pct, std::nullopt});
  return c;
}

std::vector<std::string> kinds(const std::vector<Item>& items) {
  std::vector<std::string> out;
  for (const auto& i : items)
    out.push_back(i.kind);
  return out;
}

} // namespace

TEST(AdviceIntervals, CounterEnergyTrapezoidWithoutItGapsSkippedCpuMatched) {
  GpuSeries g = steady(5, 100, 50);
  g.points[2].energy_j.reset(); // intervals 1-2 and 2-3 fall back to the trapezoid of power
  g.points[3].power_w = 300;
  g.points[4].ts_ms += 60'000; // a gap of 61 median intervals: not an interval
  const auto iv = intervals(g, cpu(4, 70));
  ASSERT_EQ(iv.size(), 3u);
  EXPECT_DOUBLE_EQ(*iv[0].energy_j, 100);               // counter: 100 − 0
  EXPECT_DOUBLE_EQ(*iv[1].energy_j, (100 + 100) / 2.0); // no counter at its end: trapezoid
  EXPECT_DOUBLE_EQ(*iv[2].energy_j, (100 + 300) / 2.0);
  EXPECT_DOUBLE_EQ(*iv[0].power_w, 100);
  EXPECT_DOUBLE_EQ(*iv[0].pcie_bytes_per_s, 200e6);
  EXPECT_DOUBLE_EQ(*iv[2].cpu_util_pct, 70);
}

TEST(AdviceIdlePower, MedianOfIdleSamplesThenFitThenFallback) {
  // Idle samples: their median power.
  GpuSeries g = steady(6, 200, 80);
  for (int i : {1, 2, 3}) {
    g.points[i].util_pct = 0;
    g.points[i].power_w = 40 + i; // 41, 42, 43: counter absent so power_w is the sample's
    g.points[i].energy_j.reset();
  }
  for (auto& p : g.points)
    p.energy_j.reset();
  auto idle = estimate_idle_power(intervals(g, {}), 400);
  ASSERT_TRUE(idle);
  // Trapezoids at utilisation 0 (the later sample's): (200+41)/2, (41+42)/2, (42+43)/2 = 120.5, 41.5, 42.5.
  EXPECT_DOUBLE_EQ(idle->watts, 42.5);

  // No idle sample, utilisation spread 20..80 with power = 50 + 2·u: the fit's intercept, 50 W.
  GpuSeries f = steady(7, 0, 0);
  for (int i = 0; i < 7; ++i) {
    f.points[i].util_pct = 20 + 10 * i;
    f.points[i].power_w = 50 + 2 * (20 + 10 * i);
    f.points[i].energy_j.reset();
  }
  // With no counter, an interval's power is the trapezoid of its two samples: 50 + 2·(u − 5) against u.
  idle = estimate_idle_power(intervals(f, {}), 400);
  ASSERT_TRUE(idle);
  EXPECT_NEAR(idle->watts, 40, 1e-9);

  // Steady and never idle: 15 % of the limit, or the lowest power seen when that is lower.
  idle = estimate_idle_power(intervals(steady(5, 250, 95), {}), 400);
  ASSERT_TRUE(idle);
  EXPECT_DOUBLE_EQ(idle->watts, kFallbackIdlePowerShare * 400);
  idle = estimate_idle_power(intervals(steady(5, 30, 95), {}), 400);
  ASSERT_TRUE(idle);
  EXPECT_DOUBLE_EQ(idle->watts, 30);
  GpuSeries nolimit = steady(5, 250, 95);
  nolimit.power_limit_w.reset();
  EXPECT_FALSE(estimate_idle_power(intervals(nolimit, {}), std::nullopt));
}

TEST(AdviceCap, CubeLawOutcomeAndBestCapWithinTheSlowdownBound) {
  const auto iv = intervals(steady(11, 390, 99), {}); // 10 s at 390 W
  const CapOutcome none = cap_outcome(iv, 60, 400);
  EXPECT_DOUBLE_EQ(none.energy_j, 3900);
  EXPECT_DOUBLE_EQ(none.slowdown_pct(), 0);
  const CapOutcome c = cap_outcome(iv, 60, 300);
  const double r = std::cbrt((300.0 - 60) / (390 - 60));
  EXPECT_NEAR(c.time_s, 10 / r, 1e-9);
  EXPECT_NEAR(c.energy_j, 300 * 10 / r, 1e-9);
  const auto best = best_cap(iv, 60, 400);
  ASSERT_TRUE(best);
  EXPECT_LE(best->slowdown_pct(), kMaxSlowdownPct);
  // The next lower step would break the bound: the best is the lowest cap within it (energy falls as the cap does).
  const CapOutcome lower = cap_outcome(iv, 60, best->cap_w - 400 * kCapStepShare);
  EXPECT_GT(lower.slowdown_pct(), kMaxSlowdownPct);
  // A GPU drawing below every cap tried has nothing to gain.
  EXPECT_FALSE(best_cap(intervals(steady(11, 150, 99), {}), 60, 400));
}

TEST(Advise, SteadyBusyGpuGetsNothingEvenWithABusyCpu) {
  Input in;
  in.gpus.push_back(steady(30, 250, 95));
  in.cpu = cpu(30, 100); // a busy host does not make a busy GPU starved
  EXPECT_TRUE(advise(in).empty()) << to_json(advise(in)).dump(2);
}

TEST(Advise, StarvedWhileTheCpuIsBusy) {
  Input in;
  in.gpus.push_back(steady(21, 150, 40));
  for (auto& p : in.gpus[0].points)
    p.pcie_tx_bytes_per_s.reset(), p.pcie_rx_bytes_per_s.reset(); // PCIe not measured: the CPU decides
  in.cpu = cpu(21, 95);
  const auto items = advise(in);
  ASSERT_EQ(kinds(items), std::vector<std::string>{"gpu_starved"});
  // 20 s starved at 40 %: stall = 20·(1 − 40/90); idle power 15 % of 400 W.
  const double expected = kFallbackIdlePowerShare * 400 * 20 * (1 - 40 / kFedUtilPct);
  EXPECT_NEAR(*items[0].saving_j, expected, 1e-9);
  EXPECT_NEAR(*items[0].saving_pct, 100 * expected / (150 * 20), 1e-9);
  EXPECT_NEAR(items[0].evidence["avg_cpu_util_pct"].get<double>(), 95, 1e-9);
  // The same GPU with the CPU idle and PCIe not measured: nothing says it waited for input.
  in.cpu = cpu(21, 10);
  EXPECT_TRUE(advise(in).empty());
}

TEST(Advise, PartlyIdleGpuMeasuredAndCpuEnergyInTheBase) {
  Input in;
  GpuSeries g = steady(21, 250, 95);
  double idle_j = 0;
  for (int i = 15; i <= 20; ++i) { // the last 6 intervals: idle at 50 W
    g.points[i].util_pct = 0;
    g.points[i].power_w = 50;
    g.points[i].energy_j = *g.points[i - 1].energy_j + 50;
    idle_j += 50;
  }
  for (int i = 0; i < 21; ++i)
    in.cpu.push_back({kT0 + 1000LL * i, 10.0, 1000 + 30.0 * i}); // 30 W of CPU package + DRAM
  const double gpu_j = *g.points.back().energy_j;
  in.gpus.push_back(g);
  const auto items = advise(in);
  ASSERT_EQ(kinds(items), std::vector<std::string>{"idle_gpu"});
  EXPECT_DOUBLE_EQ(*items[0].saving_j, idle_j);
  EXPECT_NEAR(*items[0].saving_pct, 100 * idle_j / (gpu_j + 30 * 20), 1e-9);
  EXPECT_EQ(items[0].evidence["estimate"], "measured");
  EXPECT_EQ(items[0].evidence["from"], "2023-11-14T22:13:34.000Z"); // kT0 + 14 s: the first idle interval's start
}

TEST(Advise, TransferBeatsStarvationAndSwPowerCapIsNotThrottling) {
  Input in;
  GpuSeries g = steady(21, 150, 30);
  for (auto& p : g.points) {
    p.pcie_rx_bytes_per_s = 5'000'000'000;
    p.throttle_reasons = kSwPowerCapBit;
  }
  in.gpus.push_back(g);
  in.cpu = cpu(21, 100);
  EXPECT_EQ(kinds(advise(in)), std::vector<std::string>{"transfer_bound"});
}

TEST(Advise, ThrottlingWithoutClocksIsReportedButNotEstimated) {
  Input in;
  GpuSeries g = steady(21, 250, 95);
  for (auto& p : g.points) {
    p.throttle_reasons = 0x20;
    p.clock_sm_mhz.reset();
  }
  in.gpus.push_back(g);
  const auto items = advise(in);
  ASSERT_EQ(kinds(items), std::vector<std::string>{"throttling"});
  EXPECT_FALSE(items[0].saving_j);
  EXPECT_EQ(items[0].evidence["estimate"], "not estimated");
  const auto j = to_json(items);
  EXPECT_TRUE(j[0]["saving_j"].is_null());
  EXPECT_TRUE(j[0]["saving_pct"].is_null());
}

TEST(Advise, MissingUtilisationIsNoEvidence) {
  Input in;
  GpuSeries g = steady(21, 60, 0);
  for (auto& p : g.points)
    p.util_pct.reset(); // not measured is not idle
  in.gpus.push_back(g);
  EXPECT_TRUE(advise(in).empty());
}

TEST(Advise, LargestSavingFirst) {
  Input in;
  GpuSeries idle = steady(21, 60, 0, 1);
  GpuSeries starved = steady(21, 150, 30, 0);
  for (auto& p : starved.points)
    p.pcie_tx_bytes_per_s = 0, p.pcie_rx_bytes_per_s = 0;
  in.gpus = {starved, idle};
  const auto items = advise(in);
  ASSERT_EQ(kinds(items), (std::vector<std::string>{"idle_gpu", "gpu_starved"}));
  EXPECT_GT(*items[0].saving_j, *items[1].saving_j);
  EXPECT_EQ(to_text(items, 1, false).find("gpu_starved"), std::string::npos);
}
} // namespace unit_advice
