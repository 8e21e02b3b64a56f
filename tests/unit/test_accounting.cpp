#include <gtest/gtest.h>

#include "accounting/accounting.hpp"

namespace unit_accounting { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace std::chrono_literals;

namespace {
std::vector<GpuDevice> one_gpu() {
  GpuDevice d;
  d.gpu_index = 0;
  d.uuid = "GPU-a";
  return {d};
}
Frame frame(int64_t tick, SteadyClock::time_point t0, std::chrono::milliseconds step) {
  Frame f;
  f.tick = tick;
  f.mono = t0 + tick * step;
  f.ts_ms = 1000 * tick;
  return f;
}
} // namespace

TEST(Accounting, CounterEnergyIsTheExactDeltaAcrossAReset) {
  Accounting acc(one_gpu());
  const auto t0 = SteadyClock::now();
  const int64_t counter[] = {5'000'000, 5'012'345, 5'024'690, 100, 12'445}; // driver reload after tick 2
  for (int64_t k = 0; k < 5; ++k) {
    Frame f = frame(k, t0, 100ms);
    GpuSample s;
    s.energy_counter_uj = counter[k] * 1000; // mJ, as NVML counts
    s.power_w = 500;                         // ignored when a counter exists
    f.gpus.push_back(s);
    acc.process(f);
    if (k == 0) {
      ASSERT_EQ(f.device_rows.size(), 1u);
      EXPECT_EQ(f.device_rows[0].energy_method, "counter");
    }
    if (k == 2) {
      EXPECT_DOUBLE_EQ(*f.gpus[0].energy_j, 24.690);
    }
  }
  auto s = acc.summary();
  EXPECT_DOUBLE_EQ(s.gpus[0].energy_j, (24'690 + 12'345) / 1000.0);
  EXPECT_EQ(s.gpus[0].device.energy_method, "counter");
}

// issue 33: a counter read off the grid (a phase's edge) stands for the energy the ticks' rule gives that reading:
// the rise since the first reading plus what was counted before a reset.
TEST(Accounting, ACounterReadingOffTheGridIsTheEnergyTheTicksWouldGiveIt) {
  Accounting acc(one_gpu());
  const auto t0 = SteadyClock::now();
  EXPECT_FALSE(acc.counter_energy_j(0, 1'000'000)); // nothing read yet
  const int64_t counter_mj[] = {5'000'000, 5'012'345, 100};
  for (int64_t k = 0; k < 3; ++k) {
    Frame f = frame(k, t0, 100ms);
    GpuSample s;
    s.energy_counter_uj = counter_mj[k] * 1000;
    f.gpus.push_back(s);
    acc.process(f);
    if (k == 1) {
      // between tick 1 and tick 2: 5,012,345 mJ -> 12.345 J; 5,020,000 mJ -> 20 J
      EXPECT_DOUBLE_EQ(*acc.counter_energy_j(0, 5'020'000'000), 20.0);
      EXPECT_DOUBLE_EQ(*acc.counter_energy_j(0, 5'012'345'000), *f.gpus[0].energy_j);
      // Below the last tick's but not the run's first: a reading made in steps that stands for an earlier update
      EXPECT_DOUBLE_EQ(*acc.counter_energy_j(0, 5'012'000'000), 12.0);
      EXPECT_FALSE(acc.counter_energy_j(0, 4'999'000'000)); // below the run's first reading: a reset, left to the tick
      EXPECT_FALSE(acc.counter_energy_j(1, 5'020'000'000)); // no such GPU
    }
  }
  // After the reset at tick 2 (counter 100 mJ): 12.345 J carried, plus the rise from 100 mJ
  EXPECT_DOUBLE_EQ(*acc.counter_energy_j(0, 1'100'000), 12.345 + 1.0);
  // A GPU integrated from power has no counter to read
  Accounting power_only(one_gpu());
  Frame f = frame(0, t0, 100ms);
  GpuSample s;
  s.power_w = 300;
  f.gpus.push_back(s);
  power_only.process(f);
  EXPECT_FALSE(power_only.counter_energy_j(0, 1'000'000));
}

TEST(Accounting, IntegratesPowerWithTheTrapezoidRuleWhenNoCounter) {
  Accounting acc(one_gpu());
  const auto t0 = SteadyClock::now();
  for (int64_t k = 0; k <= 10; ++k) {
    Frame f = frame(k, t0, 100ms);
    GpuSample s;
    s.power_w = 100.0 + 10.0 * static_cast<double>(k); // linear: the trapezoid rule is exact
    f.gpus.push_back(s);
    acc.process(f);
  }
  auto s = acc.summary();
  EXPECT_NEAR(s.gpus[0].energy_j, (100.0 + 200.0) / 2 * 1.0, 1e-9);
  EXPECT_EQ(s.gpus[0].device.energy_method, "integrated");
  EXPECT_DOUBLE_EQ(*s.gpus[0].power_w.peak, 200.0);
}

TEST(Accounting, EnergySpansTicksTheDeviceMissed) {
  // A source that was late (a hung driver) leaves the device out of ticks 3-7: the counter delta on its return covers
  // the gap, and the trapezoid bridges it from the last answered tick (labelled "integrated").
  Accounting counted(one_gpu()), integrated(one_gpu());
  const auto t0 = SteadyClock::now();
  for (int64_t k = 0; k <= 10; ++k) {
    Frame a = frame(k, t0, 100ms), b = frame(k, t0, 100ms);
    if (k < 3 || k > 7) {
      GpuSample s;
      s.energy_counter_uj = 1'000'000 + k * 25'000'000; // 250 W: 25 J per 100 ms
      a.gpus.push_back(s);
      GpuSample p;
      p.power_w = 250;
      b.gpus.push_back(p);
    }
    counted.process(a);
    integrated.process(b);
    if (k == 8) {
      EXPECT_DOUBLE_EQ(*a.gpus[0].energy_j, 200.0);
      EXPECT_NEAR(*b.gpus[0].energy_j, 250 * 0.8, 1e-9);
    }
  }
  EXPECT_DOUBLE_EQ(counted.summary().gpus[0].energy_j, 250.0);
  EXPECT_EQ(counted.summary().gpus[0].samples, 6);
  EXPECT_NEAR(integrated.summary().gpus[0].energy_j, 250 * 1.0, 1e-9);
  EXPECT_EQ(counted.summary().skipped_ticks, 0); // the frames came; only the device was missing
}

TEST(Accounting, EventsAreNumberedInOrder) {
  Accounting acc({});
  acc.add_event({0, 0, "source-missing", "nvml", "no library"});
  Frame f0;
  f0.ts_ms = 42;
  f0.events.push_back({0, 42, "marker", "", ""});
  acc.process(f0);
  ASSERT_EQ(f0.events.size(), 2u);
  EXPECT_EQ(f0.events[0].seq, 0);
  EXPECT_EQ(f0.events[0].ts_ms, 42);
  EXPECT_EQ(f0.events[1].seq, 1);
  Frame f1;
  f1.tick = 1;
  f1.events.push_back({0, 0, "marker", "", ""});
  acc.process(f1);
  EXPECT_EQ(f1.events[0].seq, 2);
}

TEST(Accounting, NothingMeasuredMeansNoEnergyFigure) {
  Accounting acc({});
  Frame f;
  acc.process(f);
  EXPECT_FALSE(acc.summary().total_energy_j());
}
} // namespace unit_accounting
