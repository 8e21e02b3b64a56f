// issue 33: when a hardware counter that moves on a period last moved. An H100's energy counter moves every 100 ms:
// a value read at t is the energy at its last update, up to 100 ms before t, and a phase edge placed at t is off by
// up to 100 ms of power. Knowing the updates' times (their period and phase on the steady clock) places a reading at
// the update it stands for, and lets a reading be made just after the first update that follows a phase edge.
//
// Learnt from the reads themselves, only when asked for (a phase edge): reads back to back until the value changes
// (the update lies between the two reads around the change), then again just before the next expected update until
// it changes once more. A counter that changes at every read is continuous (no period: a reading stands for its own
// time); one that never changes in the learning's span is left unknown for a while. A period within 5 % of the
// nominal 100 ms is taken as exactly that; any other is used as measured. Every later reading made on both sides of
// a predicted update checks it: a change between them refines the phase (and the period, from the drift), none
// means the prediction was wrong and the counter is learnt again.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "core/frame.hpp"

namespace wattscope {

class CounterClock {
public:
  using Time = SteadyClock::time_point;
  using Dur = std::chrono::nanoseconds;
  enum class State { unknown, learning, continuous, periodic };

  struct Options {
    Dur nominal_period = std::chrono::milliseconds(100); // an H100's (NVIDIA A100/H100/H200, docs/nvidia.md)
    Dur min_spacing = std::chrono::milliseconds(1);      // learning reads are at least this far apart
    Dur max_learn = std::chrono::milliseconds(300);      // a learning gives up after this long...
    int max_learn_reads = 200;                           // ...or this many reads
    Dur retry_after = std::chrono::seconds(30);          // an undecided learning is tried again no sooner
    Dur relearn_after = std::chrono::seconds(1);         // nor a missed prediction learnt again
    double drift_ppm = 100; // the counter's clock against this one, allowed for in a period taken as the nominal
  };

  CounterClock() = default;
  explicit CounterClock(Options o) : o_(o) {}

  State state() const { return state_; }
  // Unknown and allowed to learn now (not within retry_after of an undecided learning).
  bool may_learn(Time now) const { return state_ == State::unknown && (!retry_at_ || now >= *retry_at_); }
  void start_learning(Time now);
  // Every read is the call's start and end: the value was taken somewhere between (a driver's own moment, and on a
  // loaded machine a call of 2.8 ms stretched to 20: placed at the call's middle, an update was placed 10 ms off and a
  // phase edge with it), so an update seen between two reads lies between the first one's start and the second's end.
  //
  // A learning read. Returns when the next read is wanted, or nothing when the learning decided (state() says what)
  // or gave up (unknown).
  std::optional<Time> learn(Time t0, Time t1, int64_t value);
  // A tick's read (passive: no read is made for it). Ticks under 60 % of the nominal period apart tell a counter
  // that changes at every one of 8 in a row (continuous) from one that holds its value across some (moves on a
  // period: worth learning).
  void observe_tick(Time t0, Time t1, int64_t value);
  bool seen_holding() const { return seen_holding_; }
  // After a learning that found a period: the first update it saw, and the value from it on.
  std::optional<std::pair<Time, int64_t>> first_update() const { return first_update_; }

  // ---- periodic only
  Dur period() const { return period_; }
  // The first predicted update strictly after t, and the prediction's half-width there.
  Time next_update(Time t) const;
  Dur uncertainty(Time t) const;
  // The prediction is too vague to place a reading (a quarter of a period): learn again.
  bool stale(Time t) const { return state_ == State::periodic && uncertainty(t) > period_ / 4; }
  // Reads made across the predicted update `u`: the value changed between the start of one read (`lo`) and the end of
  // a later one (`hi`)
  // (confirm: the phase, and over many periods the period, are narrowed to what the reads say), or did not change
  // from before the prediction's window to after it (miss: unknown again, to be learnt again no sooner than
  // Options::relearn_after, so that a machine too loaded to read on time does not learn at every edge).
  void confirm(Time u, Time lo, Time hi);
  void miss(Time now); // also ends a learning cut short (a failed read)
  Time last_confirmed() const { return ref_; }

private:
  Options o_;
  State state_ = State::unknown;
  std::optional<Time> retry_at_;
  // learning
  Time learn_started_{};
  int learn_reads_ = 0;
  std::optional<Time> prev_t0_; // the last learning read's start
  int64_t prev_value_ = 0;
  int changes_in_a_row_ = 0; // reads in a row that saw a change (continuous when it reaches kContinuousReads)
  std::optional<Time> c1_;   // the first update seen: its middle and half-width
  Dur h1_{0};
  int64_t v1_ = 0;
  std::optional<std::pair<Time, int64_t>> first_update_;
  bool held_ = false;           // some read saw the value hold since the one before
  bool wait_for_second_ = true; // after the first change, wait most of a nominal period before reading again
  bool after_wait_ = false;     // the next read is the first after that wait
  // ticks
  std::optional<Time> last_tick_;    // the middle of the last tick's read
  std::optional<Time> last_tick_t0_; // and its start
  int64_t last_tick_value_ = 0;
  int tick_changes_ = 0;
  bool seen_holding_ = false;
  // periodic
  Time ref_{};    // an update's time (the last confirmed)
  Dur ref_h_{0};  // its half-width
  Dur period_{0}; //
  Dur period_h_{0};
};

} // namespace wattscope
