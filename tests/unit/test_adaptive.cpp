// Adaptive sampling (issue 18): the activity rule and the idle schedule tick by tick, then the sampler with sources
// whose probe and sample are counted.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "sampler/adaptive.hpp"
#include "sampler/sampler.hpp"

namespace unit_adaptive { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace std::chrono_literals;

namespace {

// A frame of `cores` logical CPUs at `busy_cores` of busy time, and GPUs at the given utilisations.
Frame tick_frame(double busy_cores, std::vector<OptF> gpu_util, int cores = 8) {
  Frame f;
  f.cpu.util_pct = 100.0 * busy_cores / cores;
  f.cpu.core_util_pct.assign(static_cast<size_t>(cores), OptF(0.0));
  for (size_t i = 0; i < gpu_util.size(); ++i) {
    GpuSample g;
    g.gpu_index = static_cast<int>(i);
    g.util_gpu_pct = gpu_util[i];
    f.gpus.push_back(g);
  }
  return f;
}

} // namespace

TEST(ActivityRule, QuietBelowFivePercentOnEveryGpuAndTheCpuAtItsBaseline) {
  ActivityRule rule(2);
  EXPECT_TRUE(rule.quiet(tick_frame(0.10, {0.0, 4.9})));
  std::string why;
  EXPECT_FALSE(rule.quiet(tick_frame(0.10, {0.0, 5.0}), &why));
  EXPECT_EQ(why, "gpu1 at 5 % utilisation");
  // On 8 cores the margin is 15 % of them (1.2 cores, issue 33): 1.15 above the 0.10 floor is noise, 1.25 activity.
  EXPECT_TRUE(rule.quiet(tick_frame(1.25, {0.0, 0.0})));
  EXPECT_FALSE(rule.quiet(tick_frame(1.35, {0.0, 0.0}), &why));
  EXPECT_NE(why.find("CPU busy 1.35 cores"), std::string::npos) << why;
  EXPECT_NEAR(*rule.baseline_cores(), 0.10, 1e-9);
}

TEST(ActivityRule, NotKnowingIsNotQuiet) {
  ActivityRule rule(2);
  std::string why;
  EXPECT_FALSE(rule.quiet(tick_frame(0.1, {0.0}), &why)); // one GPU did not answer
  EXPECT_EQ(why, "1 of 2 GPUs did not answer");
  EXPECT_FALSE(rule.quiet(tick_frame(0.1, {0.0, std::nullopt}), &why));
  EXPECT_EQ(why, "gpu1 utilisation unknown");
  Frame no_cpu = tick_frame(0.1, {0.0, 0.0});
  no_cpu.cpu.util_pct.reset();
  EXPECT_FALSE(rule.quiet(no_cpu, &why));
  EXPECT_EQ(why, "CPU utilisation unknown");
}

TEST(ActivityRule, ALostGpuNoLongerKeepsTheFullRate) {
  ActivityRule rule(2);
  Frame lost = tick_frame(0.1, {0.0});
  EXPECT_FALSE(rule.quiet(lost)); // one of two GPUs silent: not quiet
  lost.events.push_back({0, 0, "device-lost", "gpu1", "stopped answering"});
  EXPECT_TRUE(rule.quiet(lost)); // it is gone for the rest of the run
  EXPECT_TRUE(rule.quiet(tick_frame(0.1, {0.0})));
  EXPECT_FALSE(rule.quiet(tick_frame(0.1, {})));
}

TEST(ActivityRule, ABusyStartDoesNotBecomeTheBaseline) {
  ActivityRule rule(0);
  // A job keeps two cores busy from the first tick: the baseline is capped at half a core, so it stays activity.
  EXPECT_FALSE(rule.quiet(tick_frame(2.0, {})));
  EXPECT_FALSE(rule.quiet(tick_frame(2.0, {})));
  EXPECT_NEAR(*rule.baseline_cores(), kCpuBaselineCapCores, 1e-9);
  // It ends: the machine's floor is learnt and quiet is quiet.
  EXPECT_TRUE(rule.quiet(tick_frame(0.02, {})));
  EXPECT_NEAR(*rule.baseline_cores(), 0.02, 1e-9);
}

TEST(IdleSchedule, TakesOverAfterIdleAfterOfQuietAndGivesWayOnTheFirstBusyTick) {
  const auto t0 = SteadyClock::time_point{} + 1h;
  IdleSchedule s({10s, 60s}, 1s);
  EXPECT_EQ(s.slots_per_full_while_idle(), 10);
  using Sw = IdleSchedule::Switch;
  // Busy for 5 ticks, then quiet: idle 60 s after the first quiet tick, not before.
  int64_t slot = 0;
  for (; slot < 5; ++slot)
    EXPECT_EQ(s.observe(slot, t0 + slot * 1s, false, true), Sw::None);
  for (; slot < 65; ++slot) {
    ASSERT_TRUE(s.full_due(slot));
    ASSERT_EQ(s.observe(slot, t0 + slot * 1s, true, true), Sw::None) << slot;
  }
  EXPECT_EQ(s.observe(65, t0 + 65s, true, true), Sw::ToIdle);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.interval_in_force(), 10s);
  // Idle: slots 66..74 only probe, 75 is full; quiet probes change nothing.
  for (slot = 66; slot < 75; ++slot) {
    ASSERT_FALSE(s.full_due(slot)) << slot;
    ASSERT_EQ(s.observe(slot, t0 + slot * 1s, true, false), Sw::None);
  }
  EXPECT_TRUE(s.full_due(75));
  EXPECT_EQ(s.observe(75, t0 + 75s, true, true), Sw::None);
  EXPECT_FALSE(s.full_due(76));
  // A probe sees activity at 78: that tick is stored in full and the schedule is back at 1 s at once.
  EXPECT_EQ(s.observe(78, t0 + 78s, false, true), Sw::ToActive);
  EXPECT_FALSE(s.idle());
  EXPECT_EQ(s.interval_in_force(), 1s);
  EXPECT_TRUE(s.full_due(79));
  // And it takes another full --idle-after of quiet to slow down again.
  for (slot = 79; slot < 139; ++slot)
    ASSERT_EQ(s.observe(slot, t0 + slot * 1s, true, true), Sw::None) << slot;
  EXPECT_EQ(s.observe(139, t0 + 139s, true, true), Sw::ToIdle);
}

TEST(IdleSchedule, AStallCountsTowardsTheNextFullSample) {
  const auto t0 = SteadyClock::time_point{} + 1h;
  IdleSchedule s({10s, 1s}, 1s);
  EXPECT_EQ(s.observe(0, t0, true, true), IdleSchedule::Switch::None);
  EXPECT_EQ(s.observe(1, t0 + 1s, true, true), IdleSchedule::Switch::ToIdle);
  EXPECT_FALSE(s.full_due(5));
  EXPECT_TRUE(s.full_due(14)); // slots 2..13 skipped by a stall: the next tick is full
}

TEST(IdleSchedule, IdleIntervalIsAWholeNumberOfSlots) {
  EXPECT_EQ(IdleSchedule({1s, 1s}, 300ms).slots_per_full_while_idle(), 4);
  EXPECT_EQ(IdleSchedule({1s, 1s}, 300ms).interval_in_force(), 300ms); // not idle yet
  IdleSchedule off({}, 1s);
  EXPECT_EQ(off.observe(0, SteadyClock::time_point{}, true, true), IdleSchedule::Switch::None);
  for (int64_t slot = 1; slot < 1000; ++slot)
    ASSERT_EQ(off.observe(slot, SteadyClock::time_point{} + slot * 1h, true, true), IdleSchedule::Switch::None);
  EXPECT_TRUE(off.full_due(1000));
}

namespace {

// One GPU whose utilisation the test sets; counts full samples and probes. Inline (may_block false) or on a worker.
class CountingGpu final : public Source {
public:
  explicit CountingGpu(bool blocks) : blocks_(blocks) {}
  std::string_view name() const override { return "counting-gpu"; }
  bool open() override { return true; }
  bool may_block() const override { return blocks_; }
  SourceStatus status() const override { return SourceStatus::ok("test", true); }
  void sample(Frame& f) noexcept override {
    ++samples;
    GpuSample s;
    s.gpu_index = 0;
    s.util_gpu_pct = util.load();
    s.power_w = 100;
    s.energy_counter_uj = samples.load() * 1000;
    f.gpus.push_back(s);
  }
  void probe(Frame& f) noexcept override {
    ++probes;
    GpuSample s;
    s.gpu_index = 0;
    s.util_gpu_pct = util.load();
    f.gpus.push_back(s);
  }
  std::atomic<double> util{0};
  std::atomic<int> samples{0}, probes{0};

private:
  bool blocks_;
};

// The CPU at a constant, quiet utilisation; records whether a full sample followed a probe on the same tick.
class QuietCpu final : public Source {
public:
  std::string_view name() const override { return "quiet-cpu"; }
  bool open() override { return true; }
  SourceStatus status() const override { return SourceStatus::ok("test", false); }
  void sample(Frame& f) noexcept override {
    if (f.tick != probed_) fill(f);
  }
  void probe(Frame& f) noexcept override {
    probed_ = f.tick;
    fill(f);
  }

private:
  static void fill(Frame& f) {
    f.cpu.util_pct = 1.0;
    f.cpu.core_util_pct.assign(4, OptF(1.0));
  }
  int64_t probed_ = -1;
};

struct Handed {
  std::mutex mu;
  std::vector<Frame> frames;
  void operator()(Frame& f) {
    std::lock_guard lock(mu);
    frames.push_back(f);
  }
  std::vector<Frame> copy() {
    std::lock_guard lock(mu);
    return frames;
  }
};

bool has_event(const Frame& f, const std::string& kind) {
  for (const auto& e : f.events)
    if (e.kind == kind) return true;
  return false;
}

void idle_then_busy(bool gpu_on_worker) {
  auto gpu = std::make_shared<CountingGpu>(gpu_on_worker);
  auto cpu = std::make_shared<QuietCpu>();
  Handed handed;
  // 20 ms grid, full samples every 100 ms once quiet for 60 ms.
  Sampler sampler(
      {cpu, gpu}, 20ms, [&](Frame& f) { handed(f); }, AdaptiveOptions{100ms, 60ms}, 1);
  sampler.start();
  // Wait until it is idle and has probed for a while.
  for (int i = 0; i < 500 && sampler.stats().probe_ticks.load() < 15; ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_GE(sampler.stats().probe_ticks.load(), 15);
  EXPECT_EQ(sampler.stats().interval_ns.load(), std::chrono::nanoseconds(100ms).count());
  const size_t before_busy = handed.copy().size();
  gpu->util = 60;
  for (int i = 0; i < 300 && sampler.stats().interval_ns.load() != std::chrono::nanoseconds(20ms).count(); ++i)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(sampler.stats().interval_ns.load(), std::chrono::nanoseconds(20ms).count());
  std::this_thread::sleep_for(100ms); // busy: every tick stored again
  sampler.stop();
  const auto frames = handed.copy();
  ASSERT_GT(frames.size(), before_busy + 3);

  // The switch to idle is an event on a stored frame; after it, stored frames are 5 slots apart (probes between).
  size_t idle_at = frames.size();
  for (size_t i = 0; i < frames.size(); ++i)
    if (has_event(frames[i], "sampling-idle")) idle_at = i;
  ASSERT_LT(idle_at, frames.size());
  ASSERT_LT(idle_at + 2, before_busy);
  // Tick gaps while idle: whole idle intervals, the probe ticks between them said by probe_ticks, never "skipped".
  // (More than 5 slots, and fewer probes, only where a loaded machine stalled the grid.)
  EXPECT_GE(frames[idle_at + 1].tick - frames[idle_at].tick, 5);
  EXPECT_GE(frames[idle_at + 1].probe_ticks, 1);
  EXPECT_LE(frames[idle_at + 1].probe_ticks, frames[idle_at + 1].tick - frames[idle_at].tick - 1);
  EXPECT_GE(gpu->probes.load(), 15);

  // The first busy tick is stored in full (power and the energy counter, not the probe's utilisation alone) and says
  // why it switched; the next frame is one slot later.
  size_t active_at = frames.size();
  for (size_t i = before_busy; i < frames.size(); ++i)
    if (has_event(frames[i], "sampling-active")) {
      active_at = i;
      break;
    }
  ASSERT_LT(active_at + 1, frames.size());
  const Frame& first_busy = frames[active_at];
  ASSERT_EQ(first_busy.gpus.size(), 1u) << "the probe's reading and the full one, or neither";
  EXPECT_TRUE(first_busy.gpus[0].power_w.has_value());
  EXPECT_TRUE(first_busy.gpus[0].energy_counter_uj.has_value());
  EXPECT_EQ(*first_busy.gpus[0].util_gpu_pct, 60);
  ASSERT_TRUE(first_busy.cpu.util_pct.has_value()); // the probe's CPU reading kept
  for (const auto& e : first_busy.events)
    if (e.kind == "sampling-active") {
      EXPECT_NE(e.detail.find("gpu0 at 60 %"), std::string::npos) << e.detail;
    }
  EXPECT_EQ(frames[active_at + 1].probe_ticks, 0); // every tick stored again
}

} // namespace

TEST(AdaptiveSampler, IdleTakesOverThenTheFirstBusyTickIsStoredInFull) {
  idle_then_busy(false);
}

TEST(AdaptiveSampler, SameWithTheGpuOnAWorkerThread) {
  idle_then_busy(true);
}

TEST(AdaptiveSampler, ARunEndingWhileIdleTakesALastFullSample) {
  auto gpu = std::make_shared<CountingGpu>(false);
  auto cpu = std::make_shared<QuietCpu>();
  Handed handed;
  Sampler sampler(
      {cpu, gpu}, 20ms, [&](Frame& f) { handed(f); }, AdaptiveOptions{1h, 20ms}, 1);
  sampler.start();
  for (int i = 0; i < 500 && sampler.stats().probe_ticks.load() < 3; ++i)
    std::this_thread::sleep_for(10ms);
  sampler.stop();
  const auto frames = handed.copy();
  ASSERT_GE(frames.size(), 2u);
  // Without it, the counters would close an idle interval (here an hour) before the end of the run.
  EXPECT_GT(frames.back().probe_ticks, 0);
  ASSERT_EQ(frames.back().gpus.size(), 1u);
  EXPECT_TRUE(frames.back().gpus[0].energy_counter_uj.has_value());
}

TEST(AdaptiveSampler, OffByDefaultEveryTickIsFull) {
  auto gpu = std::make_shared<CountingGpu>(false);
  auto cpu = std::make_shared<QuietCpu>();
  Handed handed;
  Sampler sampler({cpu, gpu}, 10ms, [&](Frame& f) { handed(f); });
  sampler.start();
  std::this_thread::sleep_for(200ms);
  sampler.stop();
  EXPECT_EQ(gpu->probes.load(), 0);
  EXPECT_EQ(sampler.stats().probe_ticks.load(), 0);
  for (const auto& f : handed.copy())
    EXPECT_FALSE(has_event(f, "sampling-idle"));
}
} // namespace unit_adaptive
