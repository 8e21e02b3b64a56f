// Phase accounting: turns begin/end/work markers into `phases` and `work` rows with the energy each phase used.
//
// A phase's energy per device is the difference of the device's energy counter (energy_j since run start, as
// accounting computed it: a hardware counter delta, or the trapezoid integral where there is none, labelled) between
// the two ticks that bracket it: start_tick, the last tick at or before its `begin`, and end_tick, the first tick at
// or after its `end`. So a phase is measured "to the tick", never interpolated; a phase shorter than a tick still
// gets the energy of the tick(s) around it. Markers are time-stamped on arrival and queued; the sampler thread
// settles them at the next frame, so a marker can never delay a tick by more than the handful of microseconds the
// queue hand-off takes.
#pragma once

#include <cstdint>
#include <deque>
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

  // Thread-safe (the marker listener's thread). Only Begin, End and Work matter here; others are ignored. `ts_ms`
  // (wall clock) is what is stored; `at` (steady clock) decides which tick settles it, so a wall-clock step (NTP)
  // can neither hold markers back nor settle them early.
  void push(Marker m, int64_t ts_ms, SteadyClock::time_point at = SteadyClock::now());
  // Sampler thread, after accounting set each device's energy_j: settles the markers that arrived before the tick
  // began (f.mono) and
  // adds the phases that ended and the work reported to the frame.
  void process(Frame& f);
  // At the run's end, after the last frame: settles what is left at the last tick and closes phases still open
  // (closed_by_run_end). Returns a markers-only frame (empty phases/work when there is nothing).
  Frame finish(int64_t end_ms);

  int64_t dropped() const;
  // Thread-safe: markers wait for a tick (adaptive sampling takes the next tick in full for them, issue 18).
  bool has_pending() const;
  int64_t unmatched_ends() const { return unmatched_ends_; }

private:
  struct Open {
    PhaseRecord rec;
    std::map<std::string, double> start_energy;
  };
  void settle(const Marker& m, int64_t ts_ms, Frame& out, int64_t tick, const std::map<std::string, double>& now);
  void close(Open& o, int64_t ts_ms, int64_t tick, const std::map<std::string, double>& now, Frame& out);

  mutable std::mutex mu_;
  struct Pending {
    Marker m;
    int64_t ts_ms;
    SteadyClock::time_point at;
  };
  std::deque<Pending> pending_;
  int64_t dropped_ = 0;

  // Sampler-thread state.
  std::vector<Open> open_; // innermost last
  int64_t next_phase_id_ = 0;
  int64_t next_work_seq_ = 0;
  int64_t unmatched_ends_ = 0;
  std::optional<int64_t> last_tick_;
  std::map<std::string, double> last_energy_;        // device -> energy_j since run start at last_tick_
  std::map<std::string, std::string> energy_method_; // device -> counter | integrated | estimated
};

} // namespace wattscope
