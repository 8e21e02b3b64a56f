// CPU package / core / uncore / DRAM / psys energy from RAPL through powercap sysfs, on every socket (Intel, and
// AMD through the same driver). energy_uj files stay open and are pread each tick; wrap-around is corrected with
// max_energy_range_uj. When --interval is long enough for a counter to wrap twice between ticks at the zone's maximum
// power, a keeper thread reads the counters more often so that no wrap is missed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fd.hpp"
#include "sources/source.hpp"

namespace wattscope {

// The exact commands that let a non-root user read the counters (shown by `run` and `doctor`).
std::string rapl_permission_fix(const std::string& sysfs_root);

class RaplSource final : public Source {
public:
  // estimate_asked: --cpu-tdp was given, so where RAPL is absent the status says an estimate stands in.
  RaplSource(std::string sysfs_root, std::chrono::nanoseconds interval, bool estimate_asked = false);
  ~RaplSource() override;
  std::string_view name() const override { return "rapl"; }
  bool open() override;
  void sample(Frame& frame) noexcept override;
  SourceStatus status() const override { return status_; }
  nlohmann::json report() const override;
  std::vector<std::string> doctor_lines() const override;
  std::chrono::nanoseconds keeper_period() const { return keeper_period_; } // zero when no keeper runs

  struct Zone {
    std::string domain; // intel-rapl:0:2
    std::string path;
    std::string raw_name; // the kernel's name file: package-0, core, dram, psys, ...
    std::string zone;     // package, core, uncore, dram, psys, or raw_name
    OptI socket;
    int64_t max_range_uj = 0;
    double max_power_w = 0; // from constraint_*_max_power_uw, 0 when unknown
    UniqueFd fd;            // energy_uj, kept open and read with pread
    std::string problem;    // empty when readable
    // Guarded by mu_: updated by every poll, from the tick or the keeper.
    int64_t last_raw = -1;
    int64_t total_uj = 0;
    int64_t wraps = 0;
    // Tick-side state for power over the interval.
    int64_t prev_tick_uj = -1;
    SteadyClock::time_point prev_tick{};
  };
  const std::vector<Zone>& zones() const { return zones_; }

private:
  void poll_locked();
  void keeper_loop();

  std::string root_;
  std::chrono::nanoseconds interval_;
  bool estimate_asked_ = false;
  std::chrono::nanoseconds keeper_period_{0};
  SourceStatus status_;
  std::vector<Zone> zones_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread keeper_;
};

// A labelled utilisation-based estimate of CPU package power, only with --cpu-tdp and only where RAPL measured
// nothing: package_power_w = TDP × utilisation. Energy is integrated and marked "estimated" everywhere. A tick's
// utilisation is the mean over the time since the previous /proc/stat read, so its power holds over that whole
// interval: energy grows by power × interval (the first tick's interval starts when the source opened, as a RAPL
// counter's does, so the first estimated tick is not 0 J, issue 29).
class CpuEstimateSource final : public Source {
public:
  explicit CpuEstimateSource(double tdp_w) : tdp_w_(tdp_w), last_(SteadyClock::now()) {}
  std::string_view name() const override { return "cpu-estimate"; }
  bool open() override {
    last_ = SteadyClock::now();
    return true;
  }
  void sample(Frame& frame) noexcept override;
  SourceStatus status() const override;

private:
  double tdp_w_;
  SteadyClock::time_point last_; // the start of the interval the next utilisation covers
  double energy_j_ = 0;
};

} // namespace wattscope
