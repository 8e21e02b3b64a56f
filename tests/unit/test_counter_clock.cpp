// issue 33: learning when an energy counter that moves on a period moves (sources/counter_clock.hpp), on simulated
// counters whose updates are known exactly: the clock's predictions are checked against them.
#include <gtest/gtest.h>

#include <cmath>

#include "sources/counter_clock.hpp"

using namespace wattscope;
using namespace std::chrono_literals;

namespace {

using Time = CounterClock::Time;

// A counter of 100 W (1 J a second, in µJ per second: 1e8) that moves only at phase + k * period; period 0: at
// every instant.
struct SimCounter {
  Time t0;
  std::chrono::nanoseconds phase{37ms}, period{100ms};
  int64_t at(Time t) const {
    double s = std::chrono::duration<double>(t - t0).count();
    if (period.count() > 0) {
      const double p = std::chrono::duration<double>(period).count(), ph = std::chrono::duration<double>(phase).count();
      s = ph + std::floor((s - ph) / p) * p;
    }
    return static_cast<int64_t>(s * 1e8);
  }
  // The true update at or before t
  Time last_update(Time t) const {
    const double s = std::chrono::duration<double>(t - t0).count();
    const double p = std::chrono::duration<double>(period).count(), ph = std::chrono::duration<double>(phase).count();
    return t0 + std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::duration<double>(ph + std::floor((s - ph) / p) * p));
  }
};

// Runs a learning from `start` with reads costing `cost`, the value taken `taken` of the way through the call (0: at
// its start, 1: at its end, as the fake driver does); the reads made.
int learn(CounterClock& c, const SimCounter& sim, Time start, std::chrono::nanoseconds cost, double taken = 0.5) {
  c.start_learning(start);
  Time t = start;
  int reads = 0;
  for (;;) {
    const Time at = t + std::chrono::duration_cast<std::chrono::nanoseconds>(cost * taken);
    ++reads;
    auto next = c.learn(t, t + cost, sim.at(at));
    if (!next) return reads;
    t = std::max(*next, t + cost);
    if (reads > 1000) return reads;
  }
}

double ms(std::chrono::nanoseconds d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

} // namespace

// An H100's counter (every 100 ms, read at 2.8 ms a call): learnt in a few dozen reads, and the updates predicted 10 s
// later within the reads' own resolution.
TEST(CounterClock, LearnsAHundredMillisecondCounterAndPredictsItsUpdates) {
  for (const auto phase : {0ms, 37ms, 99ms})
    for (const double taken : {0.0, 0.5, 1.0}) {
      SCOPED_TRACE(phase.count());
      SCOPED_TRACE(taken);
      SimCounter sim{Time{} + 1000s, phase, 100ms};
      CounterClock c;
      ASSERT_TRUE(c.may_learn(sim.t0));
      const int reads = learn(c, sim, sim.t0 + 5ms, 2800us, taken);
      ASSERT_EQ(c.state(), CounterClock::State::periodic);
      EXPECT_EQ(c.period(), 100ms);
      EXPECT_LE(reads, 60); // up to a period back to back, then a few around the next update
      // the first update it saw is a true one, with the counter's value from it on
      const auto first = c.first_update();
      ASSERT_TRUE(first);
      EXPECT_NEAR(ms(first->first - sim.last_update(first->first + 3000us)), 0, 3);
      for (const auto later : {1s, 10s}) {
        const Time t = sim.t0 + later + 3ms;
        const Time u = c.next_update(t);
        const Time truth = sim.last_update(t) + 100ms;
        // the truth within the prediction's own half-width, whichever moment of the call the value was taken at
        EXPECT_LE(std::abs(ms(u - truth)), ms(c.uncertainty(u))) << later.count();
        // a read's length (the update lies between one read's start and the next one's end, back to back) and the
        // drift allowed for: 100 ppm, 1 ms at 10 s
        EXPECT_LE(c.uncertainty(u), 2800us + std::chrono::duration_cast<std::chrono::nanoseconds>(later) / 10000 + 1us);
      }
    }
}

// Reads stretched to 20-30 ms (2.8 ms of CPU on a loaded machine, or a driver that waits) place each update only within
// two reads' span: still learnt, the prediction as wide as that and true.
TEST(CounterClock, ReadsOfTwentyToThirtyMillisecondsStillLearnTheCounter) {
  for (const auto cost : {20ms, 23ms, 26ms, 30ms})
    for (const auto phase : {0ms, 13ms, 37ms, 61ms, 88ms}) {
      SCOPED_TRACE(cost.count());
      SCOPED_TRACE(phase.count());
      SimCounter sim{Time{} + 1000s, phase, 100ms};
      CounterClock c;
      learn(c, sim, sim.t0 + 5ms, cost);
      ASSERT_EQ(c.state(), CounterClock::State::periodic);
      EXPECT_EQ(c.period(), 100ms);
      // A predicted update a second later is a true one (the nearest), within the prediction's half-width
      const Time u = c.next_update(sim.t0 + 1s + 3ms);
      EXPECT_LE(std::abs(ms(u - sim.last_update(u + 50ms))), ms(c.uncertainty(u)));
      EXPECT_LE(c.uncertainty(u), cost + 1ms);
    }
}

// A counter exact at every instant (or read slower than it moves) is continuous: a reading stands for its own time.
TEST(CounterClock, ACounterThatMovesAtEveryReadIsContinuous) {
  SimCounter sim{Time{} + 1000s, 0ms, 0ms};
  CounterClock c;
  const int reads = learn(c, sim, sim.t0, 2800us);
  EXPECT_EQ(c.state(), CounterClock::State::continuous);
  EXPECT_LE(reads, 5);
}

// A counter that does not move (an idle GPU reporting 0 W) decides nothing and is not learnt again for a while.
TEST(CounterClock, ACounterThatNeverMovesIsLeftUnknownForAWhile) {
  CounterClock c;
  const Time t0 = Time{} + 1000s;
  c.start_learning(t0);
  Time t = t0;
  int reads = 0;
  while (auto next = c.learn(t, t + 2800us, 42)) {
    t = *next;
    ASSERT_LT(++reads, 1000);
  }
  EXPECT_EQ(c.state(), CounterClock::State::unknown);
  EXPECT_LE(t - t0, 400ms); // bounded: the learning's span
  EXPECT_FALSE(c.may_learn(t + 1s));
  EXPECT_TRUE(c.may_learn(t + 31s));
}

// A period far from the nominal 100 ms (here 40 ms, shorter than the wait for a second update) is measured.
TEST(CounterClock, APeriodOtherThanTheNominalOneIsMeasured) {
  SimCounter sim{Time{} + 1000s, 11ms, 40ms};
  CounterClock c;
  learn(c, sim, sim.t0 + 2ms, 1ms);
  ASSERT_EQ(c.state(), CounterClock::State::periodic);
  EXPECT_NEAR(ms(c.period()), 40, 1.5);
  const Time t = sim.t0 + 200ms;
  EXPECT_NEAR(ms(c.next_update(t) - (sim.last_update(t) + 40ms)), 0, 3);
}

// Scans across predicted updates (reads 3.3 ms apart, as the NVML source makes them) keep the prediction true on a
// counter whose period is 100.005 ms of this clock (50 ppm: within the drift allowed for): each narrows the phase, and
// those far apart the period; a prediction that misses sends the clock back to learning, 10 s later.
TEST(CounterClock, ScansFollowADriftingCounterAndAMissIsLearntAgain) {
  SimCounter sim{Time{} + 1000s, 50ms, 100005us};
  CounterClock c;
  learn(c, sim, sim.t0, 2800us);
  ASSERT_EQ(c.state(), CounterClock::State::periodic);
  int reads = 0;
  for (const auto at : {1s, 3s, 7s, 15s, 31s, 63s, 127s}) {
    SCOPED_TRACE(at.count());
    const Time u = c.next_update(sim.t0 + at);
    const auto d = c.uncertainty(u);
    ASSERT_LT(d, 15ms);
    const Time truth = sim.last_update(u + d + 5ms);
    ASSERT_NEAR(ms(u - truth), 0, ms(d)) << "the truth lies in the window";
    Time prev = u - d - 500us - 2800us; // the reads' starts; each takes its value at its end
    int64_t v = sim.at(prev + 2800us);
    for (Time t = prev + 3300us;; t += 3300us) {
      ++reads;
      ASSERT_LT(t, u + d + 5ms) << "no change seen";
      if (sim.at(t + 2800us) != v) {
        c.confirm(u, prev, t + 2800us);
        break;
      }
      prev = t;
    }
    EXPECT_LE(std::abs(ms(c.last_confirmed() - truth)), ms(c.uncertainty(c.last_confirmed())));
    EXPECT_LT(c.uncertainty(c.last_confirmed()), 3.5ms);
  }
  EXPECT_LE(reads, 7 * 5);
  // The period is known closely by now: the prediction a few minutes on holds the truth within its own half-width,
  // still narrow enough to plan reads by
  const Time t = sim.t0 + 300s;
  EXPECT_LE(std::abs(ms(c.next_update(t) - (sim.last_update(t) + sim.period))), ms(c.uncertainty(c.next_update(t))));
  EXPECT_FALSE(c.stale(c.next_update(t)));
  EXPECT_NEAR(ms(c.period()), 100.005, 0.003);
  // A prediction no update follows (after a second window watched: NvmlSource): the clock is unknown again, and learns
  // again a second later, at a later edge (not at every edge of a machine too loaded to read on time, nor 10 s later,
  // when every edge between would stand on its own time)
  c.miss(t);
  EXPECT_EQ(c.state(), CounterClock::State::unknown);
  EXPECT_FALSE(c.may_learn(t + 900ms));
  EXPECT_TRUE(c.may_learn(t + 1s));
}

// Ticks close together that read the counter every time tell, for free, a counter that moves at every one (8 in a row:
// continuous) from one that holds its value across some (to be learnt); ticks 60 ms or more apart tell neither.
TEST(CounterClock, TicksCloseTogetherTellAContinuousCounterFromOneThatHolds) {
  const Time t0 = Time{} + 1000s;
  SimCounter continuous{t0, 0ms, 0ms}, periodic{t0, 37ms, 100ms};
  CounterClock a, b, c;
  for (int k = 0; k < 8; ++k) {
    EXPECT_EQ(a.state(), CounterClock::State::unknown) << k;
    const Time t = t0 + k * 20ms;
    a.observe_tick(t, t, continuous.at(t));
    b.observe_tick(t, t, periodic.at(t));
    c.observe_tick(t0 + k * 100ms, t0 + k * 100ms, continuous.at(t0 + k * 100ms)); // too far apart to say
  }
  a.observe_tick(t0 + 160ms, t0 + 160ms, continuous.at(t0 + 160ms));
  EXPECT_EQ(a.state(), CounterClock::State::continuous);
  EXPECT_FALSE(a.seen_holding());
  EXPECT_EQ(b.state(), CounterClock::State::unknown);
  EXPECT_TRUE(b.seen_holding());
  EXPECT_EQ(c.state(), CounterClock::State::unknown);
  EXPECT_FALSE(c.seen_holding());
}
