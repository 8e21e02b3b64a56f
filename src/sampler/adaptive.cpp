#include "sampler/adaptive.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace wattscope {

double ActivityRule::cpu_margin_cores(size_t cores, bool idle) {
  const double n = static_cast<double>(cores);
  return idle ? std::max(kActiveCpuCores, kActiveCpuShare * n) : std::max(kQuietCpuCores, kQuietCpuShare * n);
}

bool ActivityRule::cpu_quiet(const Frame& f, std::string* why, bool idle) {
  if (scope_) {
    const OptF busy = scope_();
    if (!busy) {
      if (why) *why = "CPU time of the command's processes not known yet";
      return false;
    }
    const double limit = idle ? kActiveScopeCores : kQuietScopeCores;
    if (*busy > limit) {
      if (why) *why = fmt::format("the command's processes busy {:.2f} cores", *busy);
      return false;
    }
    return true;
  }
  OptF busy_cores;
  if (f.cpu.util_pct && !f.cpu.core_util_pct.empty())
    busy_cores = *f.cpu.util_pct / 100.0 * static_cast<double>(f.cpu.core_util_pct.size());
  if (busy_cores) {
    const double floor = std::min(*busy_cores, kCpuBaselineCapCores);
    if (!baseline_cores_ || floor < *baseline_cores_) baseline_cores_ = floor;
  }
  // The first reason is enough: it goes into the `sampling-active` event. Formatted only when asked for.
  if (!busy_cores) {
    if (why) *why = "CPU utilisation unknown";
    return false;
  }
  const double margin = cpu_margin_cores(f.cpu.core_util_pct.size(), idle);
  if (*busy_cores > *baseline_cores_ + margin) {
    if (why)
      *why = fmt::format("CPU busy {:.2f} cores, more than {:.2f} above the idle baseline of {:.2f}", *busy_cores,
                         margin, *baseline_cores_);
    return false;
  }
  return true;
}

bool ActivityRule::quiet(const Frame& f, std::string* why, bool idle) {
  for (const auto& e : f.events) // a lost GPU never answers again: it no longer keeps the machine at full rate
    if (e.kind == "device-lost" && lost_ < gpus_) ++lost_;
  // The CPU first, so the baseline learns from every tick whatever the GPUs say.
  if (!cpu_quiet(f, why, idle)) return false;
  const size_t expected = gpus_ - lost_;
  if (f.gpus.size() < expected) {
    if (why) *why = fmt::format("{} of {} GPUs did not answer", expected - f.gpus.size(), expected);
    return false;
  }
  for (const auto& g : f.gpus) {
    if (!g.util_gpu_pct) {
      if (why) *why = fmt::format("gpu{} utilisation unknown", g.gpu_index);
      return false;
    }
    if (*g.util_gpu_pct >= kIdleGpuUtilPct) {
      if (why) *why = fmt::format("gpu{} at {:.0f} % utilisation", g.gpu_index, *g.util_gpu_pct);
      return false;
    }
  }
  return true;
}

IdleSchedule::IdleSchedule(AdaptiveOptions opts, std::chrono::nanoseconds interval)
    : opts_(opts), interval_(interval), idle_interval_(interval) {
  if (opts_.enabled() && interval_.count() > 0) {
    // A whole number of grid slots, rounded up: full samples stay on the grid the probe keeps.
    idle_every_ = std::max<int64_t>(1, (opts_.idle_interval.count() + interval_.count() - 1) / interval_.count());
    idle_interval_ = interval_ * idle_every_;
  }
}

bool IdleSchedule::full_due(int64_t slot) const {
  if (!idle_) return true;
  return last_full_slot_ < 0 || slot - last_full_slot_ >= idle_every_;
}

IdleSchedule::Switch IdleSchedule::observe(int64_t slot, SteadyClock::time_point mono, bool quiet, bool full) {
  if (full) last_full_slot_ = slot;
  if (!opts_.enabled()) return Switch::None;
  if (!quiet) {
    quiet_run_ = false;
    if (!idle_) return Switch::None;
    idle_ = false;
    return Switch::ToActive;
  }
  if (idle_) return Switch::None;
  if (!quiet_run_) {
    quiet_run_ = true;
    quiet_since_ = mono;
  }
  if (mono - quiet_since_ < opts_.idle_after) return Switch::None;
  idle_ = true;
  return Switch::ToIdle;
}

} // namespace wattscope
