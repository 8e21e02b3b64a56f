#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "sampler/sampler.hpp"

using namespace wattscope;
using namespace std::chrono_literals;

TEST(GridSchedule, WaitsForTheNextSlotWhenOnTime) {
  const auto t0 = SteadyClock::time_point{} + 1h;
  GridSchedule g(t0, 100ms);
  EXPECT_EQ(g.due(3), t0 + 300ms);
  EXPECT_EQ(g.next_slot(0, t0 + 20ms), 1);
  EXPECT_EQ(g.next_slot(4, t0 + 450ms), 5);
}

TEST(GridSchedule, LateTickDoesNotShiftLaterOnes) {
  const auto t0 = SteadyClock::time_point{} + 1h;
  GridSchedule g(t0, 100ms);
  // Tick 1 (due at 100 ms) finished at 150 ms: tick 2 stays due at 200 ms.
  EXPECT_EQ(g.next_slot(1, t0 + 150ms), 2);
  EXPECT_EQ(g.due(2), t0 + 200ms);
  // Tick 1 overran to 430 ms: slots 2 and 3 are skipped, slot 4 (due 400 ms) runs now, 5 stays at 500 ms.
  EXPECT_EQ(g.next_slot(1, t0 + 430ms), 4);
}

namespace {
class SleepySource final : public Source {
public:
  std::string_view name() const override { return "sleepy"; }
  bool open() override { return true; }
  SourceStatus status() const override { return SourceStatus::ok("test source", false); }
  void sample(Frame& f) noexcept override {
    if (f.tick == stall_at) std::this_thread::sleep_for(stall);
  }
  int64_t stall_at = -1;
  std::chrono::milliseconds stall{0};
};
} // namespace

TEST(Sampler, TicksOnTheGridAndSkipsSlotsAfterAStall) {
  SleepySource src;
  src.stall_at = 2;
  src.stall = 75ms; // 3.75 intervals
  std::mutex mu;
  std::vector<std::pair<int64_t, SteadyClock::time_point>> ticks;
  Sampler s({&src}, 20ms, [&](Frame& f) {
    std::lock_guard lock(mu);
    ticks.emplace_back(f.tick, f.mono);
  });
  const auto before = SteadyClock::now();
  s.start();
  std::this_thread::sleep_for(400ms);
  s.stop();
  std::lock_guard lock(mu);
  ASSERT_GE(ticks.size(), 8u);
  EXPECT_EQ(ticks[0].first, 0);
  EXPECT_EQ(ticks[1].first, 1);
  EXPECT_EQ(ticks[2].first, 2);
  // After the 75 ms stall at tick 2 (due 40 ms, done ~115 ms) the next tick is slot 5 (due 100 ms): 3 and 4 skipped.
  EXPECT_EQ(ticks[3].first, 5);
  EXPECT_EQ(s.stats().skipped.load(), 2);
  // No tick runs before its grid time, and no drift accumulates: each tick k starts at t0 + k*20ms or later,
  // and within one interval of it (generous: shared CI machines).
  const auto t0 = ticks[0].second;
  EXPECT_LT(t0 - before, 20ms);
  for (size_t i = 4; i < ticks.size(); ++i) {
    const auto due = t0 + ticks[i].first * 20ms;
    EXPECT_GE(ticks[i].second + 1ms, due) << "tick " << ticks[i].first;
    EXPECT_LT(ticks[i].second - due, 20ms) << "tick " << ticks[i].first;
  }
  for (size_t i = 1; i < ticks.size(); ++i)
    EXPECT_GT(ticks[i].first, ticks[i - 1].first);
}

TEST(Sampler, StopIsPromptEvenWithALongInterval) {
  SleepySource src;
  std::atomic<int> n{0};
  Sampler s({&src}, 1h, [&](Frame&) { n++; });
  s.start();
  std::this_thread::sleep_for(20ms);
  const auto t = SteadyClock::now();
  s.stop();
  EXPECT_LT(SteadyClock::now() - t, 1s);
  EXPECT_EQ(n.load(), 1); // the first tick is immediate
}

TEST(Sampler, StoppedAtOnceStillTakesTheStartingSample) {
  // A command that exits at once (`true`) stops the sampler before its thread first runs: tick 0 must still happen.
  for (int i = 0; i < 20; ++i) {
    SleepySource src;
    std::atomic<int> n{0};
    Sampler s({&src}, 1s, [&](Frame&) { n++; });
    s.start();
    s.stop();
    EXPECT_EQ(n.load(), 1);
  }
}
