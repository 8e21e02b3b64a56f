// Adaptive sampling (issue 18, docs/sampling.md): after --idle-after of quiet, full samples only every
// --idle-interval, while a cheap probe (GPU utilisation, /proc/stat) keeps the --interval grid; the first tick that
// sees activity is stored in full and the sampler is back at --interval at once.
//
// The rule and the schedule are plain values (no threads, no clock of their own) so that tests can walk them tick by
// tick; the sampler (sampler.cpp) drives them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
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
// `record` and `serve` (the machine is the scope): the CPU is quiet while its busy time, in cores (util_pct x logical
// CPUs / 100), stays within a margin of the idle baseline: 15 % of the machine's cores, at least 0.05 cores. Once idle,
// only 30 % of the cores (at least half a core) above the baseline is activity again: hysteresis. Issue 33: with one
// margin of 0.05 cores both ways, a shared host where other users' work moved the busy time by 0.05-0.26 cores from
// second to second flipped back to the full rate every few seconds (an 8 s idle `record` stored 28 ticks instead of
// ~6). The GPUs, at 5 % utilisation, are the sharp signal on a GPU node; the CPU margin only has to tell a job from
// noise. `run` judges the command's own processes instead (kQuietScopeCores below).
inline constexpr double kQuietCpuCores = 0.05;
inline constexpr double kQuietCpuShare = 0.15;
inline constexpr double kActiveCpuCores = 0.5;
inline constexpr double kActiveCpuShare = 0.30;
// The idle baseline is the lowest busy time seen in the run (the machine's daemons and wattscope itself), but never
// above half a core: a job that keeps a core busy from the start is never taken for the machine's floor.
inline constexpr double kCpuBaselineCapCores = 0.5;

// `run` (issue 33): the monitored scope is the command's own process tree, not the machine: its busy cores, as the
// process tracker's latest scan measured them (a scan every second or more: a command that starts working on the CPU
// while idle is seen at the next scan, a GPU at the next probe). Quiet at or below kQuietScopeCores, activity above
// kActiveScopeCores once idle. Other users' work on a shared host plays no part.
inline constexpr double kQuietScopeCores = 0.05;
inline constexpr double kActiveScopeCores = 0.10;

// Whether one tick (a full frame, or the probe's partial one) shows activity.
class ActivityRule {
public:
  // Busy cores of the monitored scope; missing: not known yet (not quiet).
  using ScopeCores = std::function<OptF()>;
  explicit ActivityRule(size_t gpus, ScopeCores scope = {}) : gpus_(gpus), scope_(std::move(scope)) {}
  // true when every expected GPU answered below kIdleGpuUtilPct and the CPU is within the quiet margin of the
  // baseline (cpu_margin_cores(idle): the wider one while `idle`, the schedule's mode, so that the rule has
  // hysteresis). Not knowing is not quiet: a GPU that did not answer or has no utilisation reading, or a CPU
  // utilisation that is missing, keeps the full rate. `why`, when given, receives the first reason the tick is not
  // quiet.
  bool quiet(const Frame& f, std::string* why = nullptr, bool idle = false);
  // The CPU margin above the baseline, in cores, on a machine of `cores` logical CPUs: to become quiet (idle false),
  // or to stay quiet once idle.
  static double cpu_margin_cores(size_t cores, bool idle);
  // The CPU idle baseline in cores so far; missing before the first CPU reading.
  OptF baseline_cores() const { return baseline_cores_; }

private:
  // The CPU part of quiet(): the machine's busy time against its baseline, or the scope's own.
  bool cpu_quiet(const Frame& f, std::string* why, bool idle);
  size_t gpus_;
  ScopeCores scope_;
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
