// Adaptive sampling (issue 18, docs/sampling.md): after --idle-after of quiet, full samples only every
// --idle-interval, while a cheap probe (GPU utilisation, /proc/stat) keeps the --interval grid; the first tick that
// sees activity is stored in full and the sampler is back at --interval at once.
//
// The rule and the schedule are plain values (no threads, no clock of their own) so that tests can walk them tick by
// tick; the sampler (sampler.cpp) drives them.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/frame.hpp"

namespace wattscope {

struct AdaptiveOptions {
  std::chrono::nanoseconds idle_interval{0}; // --idle-interval; 0: adaptive sampling off
  std::chrono::nanoseconds idle_after = std::chrono::minutes(1);
  bool enabled() const { return idle_interval.count() > 0; }
};

// A GPU is quiet below this utilisation (NVML's "percent of time over the past sample period during which one or more
// kernels was executing").
inline constexpr double kIdleGpuUtilPct = 5.0;
// The CPU is quiet while its busy time, in cores (util_pct x logical CPUs / 100), stays within this much of the idle
// baseline: 5 % of one core's worth.
inline constexpr double kQuietCpuCores = 0.05;
// The idle baseline is the lowest busy time seen in the run (the machine's daemons and wattscope itself), but never
// above half a core: a job that keeps a core busy from the start is never taken for the machine's floor.
inline constexpr double kCpuBaselineCapCores = 0.5;

// Whether one tick (a full frame, or the probe's partial one) shows activity.
class ActivityRule {
public:
  explicit ActivityRule(size_t gpus) : gpus_(gpus) {}
  // true when every expected GPU answered below kIdleGpuUtilPct and the CPU is within kQuietCpuCores of the baseline.
  // Not knowing is not quiet: a GPU that did not answer or has no utilisation reading, or a CPU utilisation that is
  // missing, keeps the full rate. `why`, when given, receives the first reason the tick is not quiet.
  bool quiet(const Frame& f, std::string* why = nullptr);
  // The CPU idle baseline in cores so far; missing before the first CPU reading.
  OptF baseline_cores() const { return baseline_cores_; }

private:
  size_t gpus_;
  size_t lost_ = 0; // GPUs a device-lost event took out of the run
  OptF baseline_cores_;
};

// Which slots take a full sample, and when the mode changes. Slots are the --interval grid's (GridSchedule).
class IdleSchedule {
public:
  enum class Switch { None, ToIdle, ToActive };
  IdleSchedule(AdaptiveOptions opts, std::chrono::nanoseconds interval);
  bool idle() const { return idle_; }
  // Whether `slot` takes a full sample: every slot at full rate; while idle, the first slot at least idle_interval
  // after the previous full one (slots skipped by a stall count towards it).
  bool full_due(int64_t slot) const;
  // After a tick: `quiet` as the ActivityRule judged the tick (full frame or probe), `full` whether it was stored in
  // full. Returns the change of mode this tick makes.
  Switch observe(int64_t slot, SteadyClock::time_point mono, bool quiet, bool full);
  // The interval full samples are taken at now: --interval, or the idle interval while idle.
  std::chrono::nanoseconds interval_in_force() const { return idle_ ? idle_interval_ : interval_; }
  int64_t slots_per_full_while_idle() const { return idle_every_; }

private:
  AdaptiveOptions opts_;
  std::chrono::nanoseconds interval_;
  std::chrono::nanoseconds idle_interval_; // idle_every_ x interval: what the idle stretches really sample at
  int64_t idle_every_ = 1;
  bool idle_ = false;
  bool quiet_run_ = false; // the ticks since quiet_since_ were all quiet
  SteadyClock::time_point quiet_since_{};
  int64_t last_full_slot_ = -1;
};

} // namespace wattscope
