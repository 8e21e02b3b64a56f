#include "sources/counter_clock.hpp"

#include <algorithm>
#include <cmath>

namespace wattscope {

namespace {
constexpr int kContinuousReads = 4;                              // changes in a row: no period
constexpr auto kLeastHalfWidth = std::chrono::microseconds(100); // a confirmed update is never known closer
} // namespace

void CounterClock::start_learning(Time now) {
  state_ = State::learning;
  learn_started_ = now;
  learn_reads_ = 0;
  prev_t0_.reset();
  changes_in_a_row_ = 0;
  c1_.reset();
  first_update_.reset();
  wait_for_second_ = true;
  after_wait_ = false;
  held_ = false;
}

std::optional<CounterClock::Time> CounterClock::learn(Time t0, Time t1, int64_t value) {
  if (state_ != State::learning) return std::nullopt;
  ++learn_reads_;
  const auto give_up = [&]() -> std::optional<Time> {
    state_ = State::unknown;
    retry_at_ = t1 + o_.retry_after;
    return std::nullopt;
  };
  const Time after = std::max(t1, t0 + o_.min_spacing); // the next read starts no sooner
  if (!prev_t0_) {
    prev_t0_ = t0;
    prev_value_ = value;
    return after;
  }
  const Time before = *prev_t0_;
  const bool changed = value != prev_value_;
  const bool first_after_wait = after_wait_;
  after_wait_ = false;
  prev_t0_ = t0;
  prev_value_ = value;
  changes_in_a_row_ = changed ? changes_in_a_row_ + 1 : 0;
  held_ = held_ || !changed;
  if (changes_in_a_row_ >= kContinuousReads) {
    state_ = State::continuous;
    return std::nullopt;
  }
  if (changed) {
    const Time c = before + (t1 - before) / 2;
    const Dur h = (t1 - before) / 2;
    if (!held_) return after; // no read saw it hold yet: a continuous counter changes at every one
    if (!c1_) {
      c1_ = c;
      h1_ = h;
      v1_ = value;
      // The next update is expected a period later: wait for most of it (the reads in between would see nothing),
      // reading again a read's length before the earliest it may come (reads stretched to 25 ms on a loaded machine
      // place an update only within 25 ms: waiting from the middle, the next one was missed a time in two).
      if (wait_for_second_) {
        const Time resume = c - h + o_.nominal_period * 9 / 10 - (t1 - t0);
        if (resume > after) {
          after_wait_ = true;
          return resume;
        }
      }
      return after;
    }
    if (first_after_wait || h > o_.nominal_period / 2) {
      // The update came while waiting (a period shorter than 90 % of the nominal one), or between reads far apart (a
      // reader not scheduled for 100 ms): this change is too loosely placed to time it. Start again from it, reading
      // back to back.
      c1_.reset();
      wait_for_second_ = false;
      return after;
    }
    const Dur gap = c - *c1_;
    // Within 5 % of the nominal period, or as near it as the two changes' own widths allow (reads late on a loaded
    // machine place a change late: 109 ms was learnt once from two reads 10 ms apart): the nominal one.
    const auto off = std::chrono::abs(gap - o_.nominal_period);
    if (off <= o_.nominal_period / 20 + h1_ + h) {
      period_ = o_.nominal_period;
      period_h_ = std::chrono::duration_cast<Dur>(o_.nominal_period * (o_.drift_ppm * 1e-6));
    } else {
      period_ = gap;
      period_h_ = h1_ + h;
    }
    if (period_ <= Dur{0}) return give_up();
    first_update_ = std::make_pair(*c1_, v1_);
    ref_ = c;
    ref_h_ = std::max<Dur>(h, kLeastHalfWidth);
    state_ = State::periodic;
    return std::nullopt;
  }
  if (t1 - learn_started_ > o_.max_learn || learn_reads_ >= o_.max_learn_reads) return give_up();
  return after;
}

void CounterClock::observe_tick(Time t0, Time t1, int64_t value) {
  constexpr int kContinuousTicks = 8;
  const Time t = t0 + (t1 - t0) / 2;
  // Ticks closer than two periods that see the value change confirm the update predicted between them, for free: the
  // updates' times stay known at 10 and 100 ms without a read of their own.
  if (state_ == State::periodic && last_tick_ && t > *last_tick_ && t - *last_tick_ < period_ * 2 &&
      value != last_tick_value_) {
    const Time u = next_update(*last_tick_t0_);
    if (u <= t1 && next_update(u) > t1) confirm(u, *last_tick_t0_, t1);
  }
  if (last_tick_ && t > *last_tick_ && t - *last_tick_ < o_.nominal_period * 6 / 10) {
    if (value == last_tick_value_) {
      seen_holding_ = true;
      tick_changes_ = 0;
    } else if (++tick_changes_ >= kContinuousTicks && state_ == State::unknown && !seen_holding_) {
      state_ = State::continuous;
    }
  } else {
    tick_changes_ = 0;
  }
  last_tick_ = t;
  last_tick_t0_ = t0;
  last_tick_value_ = value;
}

CounterClock::Time CounterClock::next_update(Time t) const {
  const auto k = static_cast<int64_t>(std::floor(std::chrono::duration<double>(t - ref_).count() /
                                                 std::chrono::duration<double>(period_).count())) +
                 1;
  return ref_ + period_ * k;
}

CounterClock::Dur CounterClock::uncertainty(Time t) const {
  const double periods = std::abs(std::chrono::duration<double>(t - ref_) / std::chrono::duration<double>(period_));
  return ref_h_ + std::chrono::duration_cast<Dur>(period_h_ * periods);
}

void CounterClock::confirm(Time u, Time lo, Time hi) {
  if (state_ != State::periodic) return;
  const Dur d = uncertainty(u);
  Time a = std::max(lo, u - d), b = std::min(hi, u + d);
  if (a > b) { // the reads say where it was, whatever the prediction said
    a = lo;
    b = hi;
  }
  const Time c = a + (b - a) / 2;
  const Dur h = std::max<Dur>((b - a) / 2, kLeastHalfWidth);
  const double n = std::round(std::chrono::duration<double>(u - ref_) / std::chrono::duration<double>(period_));
  if (n >= 1) {
    // The period this update says (the time from the reference over n periods), weighed against the one held by
    // their uncertainties: one period later it says little, a minute later a great deal.
    const double t_held = std::chrono::duration<double>(period_).count();
    const double s_held = std::max(1e-9, std::chrono::duration<double>(period_h_).count());
    const double t_seen = std::chrono::duration<double>(c - ref_).count() / n;
    const double s_seen = std::chrono::duration<double>(ref_h_ + h).count() / n;
    const double w_held = 1 / (s_held * s_held), w_seen = 1 / (s_seen * s_seen);
    period_ = std::chrono::duration_cast<Dur>(
        std::chrono::duration<double>((t_held * w_held + t_seen * w_seen) / (w_held + w_seen)));
    period_h_ = std::chrono::duration_cast<Dur>(std::chrono::duration<double>(1 / std::sqrt(w_held + w_seen)));
  }
  ref_ = c;
  ref_h_ = h;
}

void CounterClock::miss(Time now) {
  state_ = State::unknown;
  retry_at_ = now + o_.relearn_after;
}

} // namespace wattscope
