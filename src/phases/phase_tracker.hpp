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
#include <atomic>
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
  void push(Marker m, int64_t ts_ms, SteadyClock::time_point at, SteadyClock::time_point arrived);
  // Thread-safe: a point or model marker (stored as an event, not queued here) takes a place of this tick's budget.
  // False when it is to be dropped (counted).
  bool admit_event_marker();
  // Sampler thread, after accounting set each device's energy_j: settles the markers that arrived before the tick
  // began (f.mono) and adds the phases that ended and the work reported to the frame.
  void process(Frame& f);
  // At the run's end, after the last frame: settles what is left at the last tick and closes phases still open
  // (closed_by_run_end). Returns a markers-only frame (empty phases/work when there is nothing).
  Frame finish(int64_t end_ms);

  // ---- readings at the phase edges
  using Energies = std::map<std::string, double>; // device -> energy_j since run start
  // Default: phase markers closer than this to the last requested reading share it (the sampler sets a quarter of
  // its interval when that is longer).
  static constexpr std::chrono::nanoseconds kMinEdgeGap = std::chrono::milliseconds(5);
  // Known points kept per device (a bound whatever the interval and however long markers wait).
  static constexpr size_t kMaxPoints = 8192;
  // A marker waits at most this long after its arrival for the known points around it: a reading asked for it, and
  // every device's first counter value past it (a device that hangs is interpolated across its gap when it answers
  // again). Past it, what is known is used and the edge says so (`none` for a device with nothing after it).
  static constexpr std::chrono::nanoseconds kMaxEdgeWait = std::chrono::seconds(10);
  // A marker that arrives later than this after its own time gets its reading at its arrival (and is interpolated
  // up to it), not worked back to a time already past.
  static constexpr std::chrono::nanoseconds kLateMarker = std::chrono::milliseconds(20);
  // A marker may carry its own time up to this long before its arrival (one that waited in a queue, or a scrape's
  // work, stamped before its answer was read): the known points are kept this far back, so that one arriving after
  // the ticks around it still finds them (without them it took the oldest point kept as its edge: in a loaded run a
  // phase ended 1.1 s late, its energy 18 % high).
  static constexpr std::chrono::nanoseconds kMaxMarkerAge = std::chrono::seconds(5);
  // Thread-safe.
  void set_edge_gap(std::chrono::nanoseconds gap) {
    std::lock_guard lock(mu_);
    edge_gap_ = std::max(gap, kMinEdgeGap);
  }
  // Thread-safe: besides the gap, at most `burst` readings back to back, then one per `period` (a token bucket), so a
  // phase per training step costs a bounded number of readings however fast the steps go. A period of 0: no bound
  // but the gap.
  void set_edge_budget(std::chrono::nanoseconds period, int burst) {
    std::lock_guard lock(mu_);
    edge_period_ = period;
    edge_burst_ = std::max(1, burst);
    edge_tokens_ = edge_burst_;
  }
  // Before the run: called (on the marker's thread, outside the tracker's lock) when a begin or end asks for a reading,
  // with the edge's time; returns whether a reading was asked (false: one for an earlier edge is still waiting to
  // start, or nothing reads counters).
  void set_edge_hook(std::function<bool(SteadyClock::time_point)> hook) { edge_hook_ = std::move(hook); }
  // Before the run: the latest edge whose readings have all reached the tracker (Sampler::counter_readings_served); a
  // marker that asked for a reading waits for it (up to kMaxEdgeWait). Unset: nothing is waited for.
  void set_readings_served(std::function<SteadyClock::time_point()> served) { served_ = std::move(served); }
  // Before the run: markers wait at least this long after their arrival before they are settled.
  void set_hold(std::chrono::nanoseconds hold) { hold_ = hold; }

  // ---- measured windows (Marker::window, Marker::reply): the sender of an `end` that asks for a reply waits for the
  // phase's figures. A reply names the phase as closed (stored with the next tick as every phase is), or none when no
  // window of that id (or phase of that name) was open.
  struct WindowReply {
    std::string to;     // the sender's socket address (Marker::reply_to)
    std::string window; // the window's id, as the end gave it
    std::string name;   // the end's name
    std::optional<PhaseRecord> phase;
    std::map<std::string, std::string> methods; // device -> counter | integrated | estimated | simulated
    double duration_s = 0;                      // between the begin's and the end's own times
  };
  // Before the run: called on the sampler thread as each answer is known.
  void set_on_window(std::function<void(const WindowReply&)> f) { on_window_ = std::move(f); }
  // Before the run: called (on the marker's thread, outside the lock) when an `end` asks for a reply, so that the
  // readings of its edge are handed over as soon as they are taken rather than with the next tick.
  void set_prompt_hook(std::function<void()> f) { prompt_hook_ = std::move(f); }
  // Sampler thread, between ticks (after add_gpu_reading of readings handed over early): settles the markers that
  // arrived by `now` and closes the windows that asked for a reply whose edges some device read at them; a device
  // read only at ticks (the CPU) is carried on at its last rate up to the edge, within a bound of its most power over
  // the time since its last tick. Their rows travel with the next tick's frame. Returns whether any reply went out.
  bool place_windows(SteadyClock::time_point now);
  // Sampler thread, before the next tick's process(): the devices' energy_j read at `at`, exact there (a device
  // absent: no reading).
  void add_reading(SteadyClock::time_point at, Energies energies);
  // One GPU's energy_j at `at` (keyed as the ticks key it). err_j < 0: read there, exact; else worked out (a counter
  // read at its next update less the instant power's integral back to the edge) and off by at most err_j.
  // `stale`: the value may be that much older than `at` (a counter whose updates are not timed).
  void add_gpu_reading(int gpu_index, SteadyClock::time_point at, double energy_j, double err_j = -1,
                       std::chrono::nanoseconds stale = {});
  int64_t edge_requests() const;
  // Markers that carried no time of their own (placed at their arrival), and those whose time was refused.
  int64_t at_arrival() const { return at_arrival_.load(std::memory_order_relaxed); }
  void count_at_arrival() { at_arrival_.fetch_add(1, std::memory_order_relaxed); }

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
  // Where E(t) of one device stands at one edge: the best estimate, and how far the truth can be from it.
  struct Edge {
    double e = 0;
    double bound_j = 0; // infinite: nothing bounds it
    enum class Kind { reading, interpolated, none } kind = Kind::interpolated;
  };
  // An edge waiting for the known points around it (its reading, every device's next counter value): a phase is
  // settled at the first tick after its markers (its row begun, its work counted to it), its energy once both edges
  // are placed.
  struct EdgeWait {
    SteadyClock::time_point at{}, arrived{};
    std::optional<SteadyClock::time_point> reading_for;
    std::optional<std::map<std::string, Edge>> edges; // once placed
  };
  struct Open {
    PhaseRecord rec;
    EdgeWait start;
    std::string window; // a measured window's id: only an end with the same id closes it
  };
  struct Closing {
    Open o;
    EdgeWait end;
    int64_t end_ms = 0;
    std::string reply_to; // the sender waits for the figures
    std::string end_name;
  };
  struct Pending {
    Marker m;
    int64_t ts_ms;
    SteadyClock::time_point at;                         // the marker's own time (or its arrival)
    SteadyClock::time_point arrived;                    // when it reached wattscope
    std::optional<SteadyClock::time_point> reading_for; // the edge whose reading it waits for
  };
  // A known point of one device's cumulative energy. A hard point is a counter's value: E was exactly `e` at some
  // time in [lo, hi] (a counter that moves on a period holds an older value), so E is at least `e` after hi and at
  // most `e` before lo. A soft one is an estimate (the instant power's integral between counter reads), off by at
  // most err_j where that is known (infinite where not).
  struct Known {
    SteadyClock::time_point at, lo, hi;
    double e = 0;
    bool hard = true;
    bool reading = false; // read for a phase's edge, not at a tick
    double err_j = 0;
  };
  struct Line {
    std::deque<Known> pts; // in time order
    bool any_hard = false;
    bool any_reading = false;
    double cap_w = 0; // the most power the device can draw over a few ms (0: unknown)
  };
  void add_point(const std::string& device, Known k);
  // `carry_on`: a device with no point after `at` is carried on at its last rate (a window placed between ticks)
  Edge edge_at(const Line& line, SteadyClock::time_point at, bool carry_on = false) const;
  std::map<std::string, Edge> edges_at(SteadyClock::time_point at, bool carry_on = false) const;
  // `between_ticks`: devices read only at ticks are not waited for, but some device must have been read past `e.at`
  bool ready(const EdgeWait& e, SteadyClock::time_point now, SteadyClock::time_point served,
             bool between_ticks = false) const;
  void settle_due(SteadyClock::time_point by, Frame& out);
  void take_between(Frame& f, int64_t tick); // rows settled between ticks, at the front of this tick's
  void end_phase(const Pending& p, std::vector<Open>::iterator it);
  // Places the edges whose points have come (all of them when `force`: the run's end) and closes the phases whose
  // both edges are placed, into `out`.
  void place(Frame& out, SteadyClock::time_point now, SteadyClock::time_point served, bool force);
  std::pair<int64_t, int64_t> ticks_around(SteadyClock::time_point at) const;
  void settle(const Pending& p, Frame& out);
  void close(Closing& c, Frame& out);
  void prune(SteadyClock::time_point horizon);

  mutable std::mutex mu_;
  std::deque<Pending> pending_;
  size_t events_this_tick_ = 0; // points admitted since the last tick
  Dropped dropped_;

  // Sampler-thread state.
  std::vector<Open> open_;      // innermost last
  std::deque<Closing> closing_; // ended, an edge not yet placed
  std::atomic<int64_t> unplaced_{0};
  int64_t lost_depth_ = 0; // begins dropped past kMaxOpenPhases and not yet ended
  int64_t next_phase_id_ = 0;
  int64_t next_work_seq_ = 0;
  int64_t unmatched_ends_ = 0;
  int64_t boundaries_ = 0;                           // issue 36
  std::map<std::string, std::string> energy_method_; // device -> counter | integrated | estimated
  // readings at phase edges
  std::chrono::nanoseconds edge_gap_ = kMinEdgeGap;
  std::chrono::nanoseconds edge_period_{0};              // guarded by mu_: the budget's refill period
  int edge_burst_ = 1;                                   // guarded by mu_
  double edge_tokens_ = 1;                               // guarded by mu_
  std::optional<SteadyClock::time_point> edge_refilled_; // guarded by mu_
  std::function<bool(SteadyClock::time_point)> edge_hook_;
  std::function<SteadyClock::time_point()> served_;
  OptF hottest_c_; // the hottest GPU at the latest tick: a phase's temperatures at its edges
  std::function<void(const WindowReply&)> on_window_;
  std::function<void()> prompt_hook_;
  Frame between_; // sampler thread: rows settled between ticks (place_windows), handed on with the next tick
  std::chrono::nanoseconds hold_{0};
  std::optional<SteadyClock::time_point> last_edge_; // guarded by mu_: the edge that last asked for a reading
  int64_t edge_requests_ = 0;                        // guarded by mu_
  std::atomic<int64_t> at_arrival_{0};
  // sampler thread: each device's known points, and the ticks (number, time) markers may still lie between
  std::map<std::string, Line> lines_;
  std::deque<std::pair<int64_t, SteadyClock::time_point>> ticks_;
  std::optional<SteadyClock::time_point> last_tick_mono_;
};

} // namespace wattscope
