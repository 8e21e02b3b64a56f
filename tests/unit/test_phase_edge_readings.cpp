// Issue 33 item 3, "each phase of >= 1 s within 1 %": a phase's edge interpolated between two ticks misplaces up to a
// quarter of the power step there times the interval (2.65 % on a 1.1 s phase at 100 ms, docs/nvidia.md), whoever
// reads the counter however often. A reading taken at each phase mark puts the edge on a known point. Checked here
// against the exact integral of a power curve that steps at the phase edges and ramps inside them, and the bound on
// readings a flood of phase markers may ask for.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "phases/phase_tracker.hpp"

namespace unit_phase_edge_readings {

using namespace wattscope;

namespace {

constexpr int64_t kRunStartMs = 1'700'000'000'000;

SteadyClock::time_point mono_at(int64_t us) {
  return SteadyClock::time_point(std::chrono::microseconds(us));
}

// One tick of GPU 0 at `us` with its counter reading `energy_j`, through the tracker; the phases it settles to `got`.
// With a power limit, the value is the counter's own (hard), and the device's cap 1.5 times that limit.
void tick_gpu0(PhaseTracker& t, int64_t tick, int64_t us, double energy_j, std::vector<PhaseRecord>& got,
               OptF power_limit_w = std::nullopt) {
  Frame f;
  f.tick = tick;
  f.ts_ms = kRunStartMs + us / 1000;
  f.mono = mono_at(us);
  GpuSample g;
  g.gpu_index = 0;
  g.energy_j = energy_j;
  if (power_limit_w) {
    g.counter_energy_j = energy_j;
    g.energy_counter_uj = std::llround(energy_j * 1e6);
    g.power_limit_w = power_limit_w;
  }
  f.gpus.push_back(g);
  t.process(f);
  for (auto& p : f.phases)
    got.push_back(std::move(p));
}

// Power, piecewise linear through (seconds, watts) knots; two knots at one time make a step. Its integral is exact:
// the trapezoid over each linear piece.
struct Curve {
  std::vector<std::pair<double, double>> knots;
  double energy(double t) const { // joules over [0, t]
    double e = 0;
    for (size_t i = 0; i + 1 < knots.size(); ++i) {
      const double a = knots[i].first, b = knots[i + 1].first;
      if (t <= a) break;
      if (b <= a) continue;
      const double end = std::min(t, b);
      const double p_end = knots[i].second + (knots[i + 1].second - knots[i].second) * (end - a) / (b - a);
      e += (knots[i].second + p_end) / 2 * (end - a);
    }
    if (t > knots.back().first) e += knots.back().second * (t - knots.back().first);
    return e;
  }
};

struct Phase {
  std::string name;
  double begin_s, end_s;
};

Marker marker(Marker::Kind kind, std::string name) {
  Marker m;
  m.kind = kind;
  m.name = std::move(name);
  return m;
}

// The run: 6 phases of 1.1-2.5 s, edges off every grid, gaps between them; power steps by 300-450 W at every edge and
// ramps inside the phases.
struct Scenario {
  Curve curve;
  std::vector<Phase> phases;
  double run_s = 0;
};

Scenario scenario() {
  Scenario s;
  const double lengths[] = {1.1, 2.5, 1.337, 1.9, 1.2, 2.25};
  double t = 0.137;
  s.curve.knots.push_back({0, 120});
  s.curve.knots.push_back({t, 120});
  for (int i = 0; i < 6; ++i) {
    const double b = t, e = t + lengths[i];
    const double low = 120 + 10 * i, high = 500 + 35 * i;
    s.curve.knots.push_back({b, high});                     // step up at the begin
    s.curve.knots.push_back({b + (e - b) / 2, high + 150}); // ramp up
    s.curve.knots.push_back({e, high - 100});               // ramp down to the end
    s.curve.knots.push_back({e, low});                      // step down at the end
    s.phases.push_back({"p" + std::to_string(i), b, e});
    t = e + 0.263 + 0.041 * i;
    s.curve.knots.push_back({t, low});
  }
  s.run_s = t + 0.5;
  return s;
}

struct Result {
  double worst_pct = 0;
  size_t phases = 0;
};

// The scenario's begin and end markers at their times (us)
struct Timed {
  int64_t us;
  Marker m;
};
std::vector<Timed> timed_marks(const Scenario& s) {
  std::vector<Timed> marks;
  for (const auto& p : s.phases) {
    marks.push_back({static_cast<int64_t>(std::llround(p.begin_s * 1e6)), marker(Marker::Kind::Begin, p.name)});
    marks.push_back({static_cast<int64_t>(std::llround(p.end_s * 1e6)), marker(Marker::Kind::End, p.name)});
  }
  return marks;
}

// The phases got, against the curve's exact integral over each
Result score(const Scenario& s, const std::vector<PhaseRecord>& got) {
  Result r;
  r.phases = got.size();
  for (const auto& p : got) {
    const auto it = std::find_if(s.phases.begin(), s.phases.end(), [&](const Phase& q) { return q.name == p.name; });
    if (it == s.phases.end() || !p.energy_j) continue;
    const double truth = s.curve.energy(it->end_s) - s.curve.energy(it->begin_s);
    r.worst_pct = std::max(r.worst_pct, std::abs(*p.energy_j - truth) / truth * 100);
  }
  return r;
}

// Drives a tracker as the sampler does at `interval_s`: each marker pushed at its time; with `readings`, the reading
// it asks for taken `latency_us` after it (the hand-off and the read) and added before the next tick.
Result run(const Scenario& s, double interval_s, bool readings, int64_t latency_us = 300) {
  const std::vector<Timed> marks = timed_marks(s);
  auto energy_at = [&](int64_t us) { return std::floor(s.curve.energy(static_cast<double>(us) / 1e6) * 1000) / 1000; };
  PhaseTracker t;
  bool asked = false; // the edge hook, as the session's asks the sampler
  t.set_edge_hook([&](SteadyClock::time_point) { return asked = true; });
  std::vector<PhaseRecord> got;
  size_t next = 0;
  const auto step = static_cast<int64_t>(std::llround(interval_s * 1e6));
  const auto until = static_cast<int64_t>(std::llround(s.run_s * 1e6));
  int64_t tick = 0;
  for (int64_t us = 0; us <= until; us += step, ++tick) {
    while (next < marks.size() && marks[next].us <= us) {
      t.push(marks[next].m, kRunStartMs + marks[next].us / 1000, mono_at(marks[next].us));
      if (readings && std::exchange(asked, false)) {
        const int64_t read_us = marks[next].us + latency_us;
        t.add_reading(mono_at(read_us), {{"gpu0", energy_at(read_us)}});
      }
      ++next;
    }
    tick_gpu0(t, tick, us, energy_at(us), got);
  }
  return score(s, got);
}

} // namespace

TEST(PhaseEdgeReadings, TheCurveIntegratesAsItsTrapezoids) {
  Curve c{{{0, 100}, {1, 100}, {1, 300}, {3, 500}}};
  EXPECT_NEAR(c.energy(1), 100, 1e-9);
  EXPECT_NEAR(c.energy(2), 100 + 350, 1e-9);
  EXPECT_NEAR(c.energy(4), 100 + 800 + 500, 1e-9);
}

TEST(PhaseEdgeReadings, EveryPhaseIsWithinOnePercentAt100msWithAReadingAtEachMark) {
  const Scenario s = scenario();
  const Result with = run(s, 0.1, true);
  ASSERT_EQ(with.phases, 6u);
  EXPECT_LT(with.worst_pct, 1.0);
  // Without the readings the edges are interpolated between ticks: the step there is misplaced (the case the
  // readings exist for; this is what the code before them gave).
  const Result without = run(s, 0.1, false);
  ASSERT_EQ(without.phases, 6u);
  RecordProperty("worst_phase_pct_with_readings", std::to_string(with.worst_pct));
  RecordProperty("worst_phase_pct_interpolated", std::to_string(without.worst_pct));
  EXPECT_GT(without.worst_pct, 1.0);
}

TEST(PhaseEdgeReadings, AtOneSecondTheReadingsHoldTheEdgesToo) {
  // The edges rest on the readings whatever the interval: 1 s ticks change only the points in between.
  const Scenario s = scenario();
  const Result with = run(s, 1.0, true);
  ASSERT_EQ(with.phases, 6u);
  EXPECT_LT(with.worst_pct, 1.0);
  const Result without = run(s, 1.0, false);
  EXPECT_GT(without.worst_pct, 5.0);
  RecordProperty("worst_phase_pct_with_readings", std::to_string(with.worst_pct));
  RecordProperty("worst_phase_pct_interpolated", std::to_string(without.worst_pct));
}

TEST(PhaseEdgeReadings, ALateReadingCostsItsLatencyTimesThePowerStep) {
  // A reading 20 ms after its marker (a loaded machine) puts up to 20 ms of the stepped power on the wrong side.
  const Scenario s = scenario();
  const Result late = run(s, 0.1, true, 20'000);
  RecordProperty("worst_phase_pct_20ms_late", std::to_string(late.worst_pct));
  EXPECT_LT(late.worst_pct, 1.0 + 450.0 * 0.02 * 2 / (1.1 * 500) * 100);
}

TEST(PhaseEdgeReadings, AFloodOfPhaseMarkersAsksForOneReadingPerGap) {
  PhaseTracker t;
  int hooks = 0;
  t.set_edge_hook([&](SteadyClock::time_point) { return ++hooks > 0; });
  // 5000 begin/end pairs over one second (one every 100 us): at most one reading per 5 ms.
  for (int i = 0; i < 10000; ++i)
    t.push(marker(i % 2 ? Marker::Kind::End : Marker::Kind::Begin, "step"), kRunStartMs, mono_at(100 * i));
  EXPECT_LE(t.edge_requests(), 1'000'000 / 5000 + 1);
  EXPECT_GE(t.edge_requests(), 1'000'000 / 5000 - 1);
  EXPECT_EQ(hooks, t.edge_requests());

  // A quarter of a 100 ms interval: one per 25 ms. Work markers never ask.
  PhaseTracker q;
  q.set_edge_gap(std::chrono::milliseconds(25));
  for (int i = 0; i < 10000; ++i) {
    q.push(marker(i % 2 ? Marker::Kind::End : Marker::Kind::Begin, "step"), kRunStartMs, mono_at(100 * i));
    Marker w = marker(Marker::Kind::Work, "");
    w.amount = 1;
    q.push(w, kRunStartMs, mono_at(100 * i + 50));
  }
  EXPECT_LE(q.edge_requests(), 1'000'000 / 25'000 + 1);
}

// A phase per training step: 10,000 edges in a second, with a budget of 4 back to back and one per 100 ms after.
TEST(PhaseEdgeReadings, ABudgetBoundsTheReadingsAFastStepLoopAsksFor) {
  PhaseTracker t;
  t.set_edge_budget(std::chrono::milliseconds(100), 4);
  int hooks = 0;
  t.set_edge_hook([&](SteadyClock::time_point) { return ++hooks > 0; });
  for (int i = 0; i < 10000; ++i)
    t.push(marker(i % 2 ? Marker::Kind::End : Marker::Kind::Begin, "step"), kRunStartMs, mono_at(100 * i));
  EXPECT_GE(t.edge_requests(), 4 + 9);
  EXPECT_LE(t.edge_requests(), 4 + 10);
  EXPECT_EQ(hooks, t.edge_requests());
  // Phases seconds apart are never held back by it: every edge asks
  PhaseTracker slow;
  slow.set_edge_budget(std::chrono::milliseconds(1000), 4);
  for (int i = 0; i < 20; ++i)
    slow.push(marker(i % 2 ? Marker::Kind::End : Marker::Kind::Begin, "epoch"), kRunStartMs, mono_at(1'100'000LL * i));
  EXPECT_EQ(slow.edge_requests(), 20);
}

// However many readings come between two ticks, each device keeps at most kMaxPoints known points (the oldest go),
// and a phase's edges still rest on the newest around them.
TEST(PhaseEdgeReadings, ReadingsAreBoundedPerDevice) {
  PhaseTracker t;
  Frame f0;
  f0.mono = mono_at(0);
  GpuSample g;
  g.gpu_index = 0;
  g.energy_j = 0.0;
  f0.gpus.push_back(g);
  t.process(f0);
  // E(t) = 1 J per ms; three times the cap of readings, every microsecond, then the end at their last.
  const auto n = static_cast<int64_t>(3 * PhaseTracker::kMaxPoints);
  t.push(marker(Marker::Kind::Begin, "a"), kRunStartMs, mono_at(n - 500));
  for (int64_t i = 0; i < n; ++i)
    t.add_reading(mono_at(i), {{"gpu0", static_cast<double>(i) / 1000}});
  t.push(marker(Marker::Kind::End, "a"), kRunStartMs + 1, mono_at(n - 1));
  Frame f1;
  f1.tick = 1;
  f1.mono = mono_at(n + 1000);
  g.energy_j = static_cast<double>(n + 1000) / 1000;
  f1.gpus.push_back(g);
  t.process(f1);
  ASSERT_EQ(f1.phases.size(), 1u);
  ASSERT_TRUE(f1.phases[0].energy_j);
  EXPECT_NEAR(*f1.phases[0].energy_j, 0.499, 1e-9);
  EXPECT_EQ(f1.phases[0].start_edge, "reading");
  EXPECT_EQ(f1.phases[0].end_edge, "reading");
}

// A counter that moves every 100 ms at times not learnt: the reading at each edge, made 5 ms after it, holds the energy
// at some moment of the 100 ms before it, on either side of the edge. That reading bounds the edge both ways by the
// device's cap over its span, and the phase's stated bound is a reading's, not the next counter value's a second on.
TEST(PhaseEdgeReadings, AReadingWhoseMomentMayLieEitherSideOfTheEdgeBoundsIt) {
  const Scenario s = scenario();
  constexpr int64_t kStaleUs = 100'000, kPhaseUs = 37'000, kAfterUs = 5'000;
  const auto update_before = [&](int64_t us) { return us < kPhaseUs ? 0 : us - (us - kPhaseUs) % kStaleUs; };
  const auto exact = [&](int64_t us) { return s.curve.energy(static_cast<double>(us) / 1e6); };
  const std::vector<Timed> marks = timed_marks(s);
  PhaseTracker t;
  bool asked = false;
  t.set_edge_hook([&](SteadyClock::time_point) { return asked = true; });
  std::vector<PhaseRecord> got;
  size_t next = 0;
  const auto until = static_cast<int64_t>(std::llround(s.run_s * 1e6));
  int64_t tick = 0;
  for (int64_t us = 0; us <= until + 1'000'000; us += 1'000'000, ++tick) {
    while (next < marks.size() && marks[next].us <= us) {
      t.push(marks[next].m, kRunStartMs + marks[next].us / 1000, mono_at(marks[next].us));
      if (std::exchange(asked, false)) {
        const int64_t read_us = marks[next].us + kAfterUs;
        t.add_gpu_reading(0, mono_at(read_us), exact(update_before(read_us)), -1, std::chrono::microseconds(kStaleUs));
      }
      ++next;
    }
    tick_gpu0(t, tick, us, exact(us), got, 700.0); // a tick on an update; a cap of 1.5x: 1050 W
  }
  ASSERT_EQ(got.size(), s.phases.size());
  for (const auto& p : got) {
    SCOPED_TRACE(p.name);
    const auto it = std::find_if(s.phases.begin(), s.phases.end(), [&](const Phase& q) { return q.name == p.name; });
    ASSERT_NE(it, s.phases.end());
    ASSERT_TRUE(p.energy_j && p.energy_bound_j);
    const double truth = s.curve.energy(it->end_s) - s.curve.energy(it->begin_s);
    EXPECT_LE(std::abs(*p.energy_j - truth), *p.energy_bound_j);
    // Each edge within the cap over the reading's span (95 ms before the edge, 5 ms after): 1050 W x 95 ms
    EXPECT_LE(*p.energy_bound_j, 2 * 1050 * 0.095 + 1e-6);
  }
}

} // namespace unit_phase_edge_readings

namespace unit_phase_edge_readings {
namespace {
// A counter that moves every 100 ms (an H100's), its updates at 37 ms + k * 100 ms: each tick holds the energy at its
// last update. The reading at an edge (as NvmlSource makes it, sources/counter_clock.hpp) comes after the first update
// past the edge, 2 ms after it, with two known points: the edge (worked back from the update) and the update itself;
// it reaches the tracker with the first tick after it, often after the tick that follows the marker.
Result run_aged(const Scenario& s, double interval_s, std::chrono::nanoseconds hold) {
  const auto update_before = [](int64_t us) { // the last update at or before us
    return 37'000 + (us - 37'000 >= 0 ? (us - 37'000) / 100'000 * 100'000 : -100'000);
  };
  auto exact = [&](int64_t us) { return s.curve.energy(static_cast<double>(us) / 1e6); };
  const std::vector<Timed> marks = timed_marks(s);
  PhaseTracker t;
  t.set_hold(hold);
  std::vector<int64_t> asked;
  std::vector<std::pair<int64_t, int64_t>> in_flight; // (edge, its update): delivered once the update + 2 ms passed
  // As the sampler says it: the readings of every edge before the oldest still in flight have been handed over
  t.set_readings_served([&] {
    auto served = SteadyClock::time_point::max();
    for (const int64_t e : asked)
      served = std::min(served, mono_at(e) - SteadyClock::duration(1));
    for (const auto& r : in_flight)
      served = std::min(served, mono_at(r.first) - SteadyClock::duration(1));
    return served;
  });
  t.set_edge_hook([&](SteadyClock::time_point at) {
    asked.push_back(std::chrono::duration_cast<std::chrono::microseconds>(at.time_since_epoch()).count());
    return true;
  });
  std::vector<PhaseRecord> got;
  size_t next = 0;
  const auto step = static_cast<int64_t>(std::llround(interval_s * 1e6));
  const auto until = static_cast<int64_t>(std::llround((s.run_s + 1) * 1e6));
  int64_t tick = 0;
  for (int64_t us = 0; us <= until; us += step, ++tick) {
    while (next < marks.size() && marks[next].us <= us) {
      t.push(marks[next].m, kRunStartMs + marks[next].us / 1000, mono_at(marks[next].us));
      ++next;
    }
    for (const int64_t e : asked)
      in_flight.emplace_back(e, update_before(e) + 100'000);
    asked.clear();
    std::erase_if(in_flight, [&](const auto& r) {
      if (r.second + 2'000 > us) return false;
      t.add_reading(mono_at(r.second), {{"gpu0", exact(r.second)}});
      t.add_reading(mono_at(r.first), {{"gpu0", exact(r.first)}});
      return true;
    });
    tick_gpu0(t, tick, us, exact(update_before(us)), got); // as old as the counter's last update
  }
  return score(s, got);
}
} // namespace

// A marker waits for the reading at its edge, though it comes after the tick that follows it, and rests between the
// two points it brings rather than the ticks, which are up to 100 ms old: at 10 ms, 100 ms and 1 s every phase within
// 0.1 %, with no hold of its own (the tracker waits for every device's first counter value past the marker).
TEST(PhaseEdgeReadings, MarkersWaitForReadingsThatComeAfterTheNextTick) {
  using namespace std::chrono_literals;
  const Scenario s = scenario();
  for (const double interval : {0.01, 0.1, 1.0})
    for (const auto hold : {0ms, 450ms}) {
      SCOPED_TRACE(interval);
      const Result r = run_aged(s, interval, hold);
      ASSERT_EQ(r.phases, 6u);
      EXPECT_LT(r.worst_pct, 0.1);
    }
}

} // namespace unit_phase_edge_readings
