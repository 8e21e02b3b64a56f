// Phase accounting: turns begin/end/work markers into `phases` and `work` rows with the energy each phase used.
//
// Energy between ticks (/work/shared/DESIGN.md, docs/markers.md "How a phase's energy is measured"): each device's
// cumulative energy E(t) (energy_j since run start, as accounting set it in the frame: a hardware counter delta, or
// the trapezoid integral of power where there is none, labelled) is known at the ticks. A marker's energy position is
// E interpolated linearly, in steady-clock time, at the marker's own arrival between the tick before it and the tick
// after it; a phase's energy is the difference of the positions of its `begin` and its `end`. So adjacent phases
// share nothing, nested phases add up within their parent, and the top-level phases plus the time outside them sum
// to the run's energy. A marker before the first tick sits at the first tick (E = 0); one after the last tick at the
// last tick, where the run's own total ends too. start_tick/end_tick name the ticks the begin's and the end's
// positions were interpolated from (the one at or before the begin, the one at or after the end).
//
// Markers are time-stamped on arrival and queued; the sampler thread settles them at the next frame (the first tick
// after them is what their interpolation needs), so a marker can never delay a tick by more than the handful of
// microseconds the queue hand-off takes.
//
// Bounds (issue 31): at most kMaxPending markers wait for one tick, and work/point markers stop kReservedForPhases
// short of that, so a flood of work never pushes out a phase's begin or end; at most kMaxOpenPhases phases are open at
// once. Everything refused is counted (dropped_counts()): the run then says its work and phases are incomplete.
//
// Readings at the phase edges (issue 33): between two ticks the power is not known, so a phase's edge interpolated
// there can be off by up to a quarter of a power step times the interval (2.65 % on a 1.1 s phase at 100 ms,
// docs/nvidia.md). A begin or end therefore asks for a reading of the devices at once (the edge hook: the session's
// asks the sampler, Sampler::request_counter_reading; at most one per edge gap and within the edge budget, so a flood
// of phase markers costs a bounded number of reads and the rest are interpolated as before), and
// the reading (add_reading(): energy_j per device at the steady time it was read) becomes one more known point of E(t)
// beside the ticks. A marker's position is then E interpolated between the nearest known points around its own time:
// the reading follows the marker's arrival by the hand-off and the read itself (microseconds to a few ms), so the
// marker lies between the point before it and that reading, almost on the reading. Readings are kept for the phase
// figures only: they are no sample rows, so the grid's samples, interval stats and rates are untouched.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/frame.hpp"
#include "phases/marker.hpp"

namespace wattscope {

class PhaseTracker {
public:
  // Markers waiting for the next tick beyond this are dropped (counted): a flood cannot grow memory or stall a tick.
  static constexpr size_t kMaxPending = 10000;
  // Work, point and model markers are refused once this few places are left, which only begin/end may take.
  static constexpr size_t kReservedForPhases = 1000;
  // Phases open at once (nested, or begun and never ended); a begin past it is dropped and its end matched to it.
  static constexpr size_t kMaxOpenPhases = 1000;

  struct Dropped {
    int64_t work = 0;        // work markers (their amounts are missing from the totals)
    int64_t phase = 0;       // begin/end markers refused by the waiting queue's cap
    int64_t points = 0;      // mark/model markers (events) over the per-tick cap
    int64_t open_phases = 0; // begins past kMaxOpenPhases
    int64_t total() const { return work + phase + points + open_phases; }
  };

  // Thread-safe (the marker listener's thread). Only Begin, End and Work matter here; others are ignored. `ts_ms`
  // (wall clock) is what is stored; `at` (steady clock) decides which tick settles it and where between the ticks
  // around it its energy position lies, so a wall-clock step (NTP) can neither hold markers back nor move them.
  void push(Marker m, int64_t ts_ms, SteadyClock::time_point at = SteadyClock::now());
  // Thread-safe: a point or model marker (stored as an event, not queued here) takes a place of this tick's budget.
  // False when it is to be dropped (counted).
  bool admit_event_marker();
  // Sampler thread, after accounting set each device's energy_j: settles the markers that arrived before the tick
  // began (f.mono) and adds the phases that ended and the work reported to the frame.
  void process(Frame& f);
  // At the run's end, after the last frame: settles what is left at the last tick and closes phases still open
  // (closed_by_run_end). Returns a markers-only frame (empty phases/work when there is nothing).
  Frame finish(int64_t end_ms);

  // ---- issue 33: readings at the phase edges
  using Energies = std::map<std::string, double>; // device -> energy_j since run start
  // Default: phase markers closer than this to the last requested reading are interpolated (the sampler sets a quarter
  // of its interval when that is longer).
  static constexpr std::chrono::nanoseconds kMinEdgeGap = std::chrono::milliseconds(5);
  // Readings kept between two ticks (a bound whatever the gap: the rest wait for the tick).
  static constexpr size_t kMaxReadings = 256;
  // Thread-safe.
  void set_edge_gap(std::chrono::nanoseconds gap) {
    std::lock_guard lock(mu_);
    edge_gap_ = std::max(gap, kMinEdgeGap);
  }
  // Thread-safe: besides the gap, at most `burst` readings back to back, then one per `period` (a token bucket), so a
  // phase per training step costs at most one reading per period however fast the steps go. A period of 0: no bound
  // but the gap.
  void set_edge_budget(std::chrono::nanoseconds period, int burst) {
    std::lock_guard lock(mu_);
    edge_period_ = period;
    edge_burst_ = std::max(1, burst);
    edge_tokens_ = edge_burst_;
  }
  // Before the run: called (on the marker's thread, outside the tracker's lock) when a begin or end asks for a reading,
  // with the marker's arrival.
  void set_edge_hook(std::function<void(SteadyClock::time_point)> hook) { edge_hook_ = std::move(hook); }
  // Before the run: markers wait this long after their arrival before they are settled, for a reading that is made
  // after the counter's next update (up to a period and the read later, sources/counter_clock.hpp) to reach the
  // tracker. 0: settled at the first tick after them.
  void set_hold(std::chrono::nanoseconds hold) { hold_ = hold; }
  // The ticks kept for markers that wait (a bound whatever the interval).
  static constexpr size_t kMaxHeldTicks = 2048;
  // Sampler thread, before the next tick's process(): the devices' energy_j read at `at` (a device absent: no reading).
  void add_reading(SteadyClock::time_point at, Energies energies);
  // The same for one GPU (its energy_j, keyed as the ticks key it).
  void add_gpu_reading(int gpu_index, SteadyClock::time_point at, double energy_j);
  int64_t edge_requests() const;
  // ---- end issue 33

  int64_t dropped() const { return dropped_counts().total(); }
  Dropped dropped_counts() const;
  // Thread-safe: markers wait for a tick (adaptive sampling takes the next tick in full for them, issue 18).
  bool has_pending() const;
  int64_t unmatched_ends() const { return unmatched_ends_; }
  // Sampler thread: begins and ends settled so far (issue 36: the anomaly detector's phase boundaries).
  int64_t boundaries() const { return boundaries_; }
  // Sampler thread (issue 36): the innermost open phase that has an index (an epoch), as (name, index, start_ms).
  struct IndexedPhase {
    std::string name;
    int64_t index = 0;
    int64_t start_ms = 0;
  };
  std::optional<IndexedPhase> open_indexed_phase() const;

private:
  struct Open {
    PhaseRecord rec;
    Energies start_energy;
  };
  struct Pending {
    Marker m;
    int64_t ts_ms;
    SteadyClock::time_point at;
  };
  // A known point of E(t): a tick, or a reading at a phase edge.
  struct Point {
    SteadyClock::time_point at;
    const Energies* energies = nullptr;
  };
  // Where the marker lies: the ticks around it and the known points from the tick before it to the tick after it (in
  // time order); E is interpolated at `at` between the nearest two that have the device.
  struct Position {
    int64_t tick_before = 0;
    int64_t tick_after = 0;
    std::vector<Point> points;
    // The readings within kNearReadings of `at`, before and after it (past the ticks around it too): a device that
    // has one on each side is interpolated between those, not the ticks between, whose figures may be older than their
    // time (a counter that moves every 100 ms is up to that old at every tick; a reading is placed at the counter's
    // update, sources/counter_clock.hpp).
    std::vector<Point> near_readings;
    SteadyClock::time_point at{};
    Energies energies() const;
    Energies ticks_energies() const; // between the known points alone
  };
  // A tick as a known point (the ticks a waiting marker may lie between are kept, history_).
  struct TickPoint {
    int64_t tick = 0;
    SteadyClock::time_point mono{};
    Energies energies;
  };
  // The marker at `at` between the kept ticks around it and the readings between those.
  Position position_at(SteadyClock::time_point at) const;
  void settle(const Pending& p, const Position& pos, Frame& out);
  void close(Open& o, int64_t ts_ms, int64_t tick, const Energies& end, Frame& out);

  mutable std::mutex mu_;
  std::deque<Pending> pending_;
  size_t events_this_tick_ = 0; // points admitted since the last tick
  Dropped dropped_;

  // Sampler-thread state.
  std::vector<Open> open_; // innermost last
  int64_t lost_depth_ = 0; // begins dropped past kMaxOpenPhases and not yet ended
  int64_t next_phase_id_ = 0;
  int64_t next_work_seq_ = 0;
  int64_t unmatched_ends_ = 0;
  int64_t boundaries_ = 0;                           // issue 36
  std::map<std::string, std::string> energy_method_; // device -> counter | integrated | estimated
  // issue 33: readings at phase edges
  std::chrono::nanoseconds edge_gap_ = kMinEdgeGap;
  std::chrono::nanoseconds edge_period_{0};              // guarded by mu_: the budget's refill period
  int edge_burst_ = 1;                                   // guarded by mu_
  double edge_tokens_ = 1;                               // guarded by mu_
  std::optional<SteadyClock::time_point> edge_refilled_; // guarded by mu_
  std::function<void(SteadyClock::time_point)> edge_hook_;
  std::chrono::nanoseconds hold_{0};
  // sampler thread: the last ticks, oldest first; the newest is the last tick's (its energies are what a device that
  // does not answer keeps)
  std::deque<TickPoint> history_;
  std::optional<SteadyClock::time_point> last_edge_; // guarded by mu_: the arrival that last asked for a reading
  int64_t edge_requests_ = 0;                        // guarded by mu_
  // sampler thread, in time order: from kNearReadings before history_'s oldest tick on
  std::vector<std::pair<SteadyClock::time_point, Energies>> readings_;
};

} // namespace wattscope
