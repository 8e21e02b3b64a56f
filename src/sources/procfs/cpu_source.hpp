// CPU utilisation (total and per core) from /proc/stat deltas and memory from /proc/meminfo, under a configurable root.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/fd.hpp"
#include "sources/source.hpp"

namespace wattscope {

struct CpuTimes {
  uint64_t busy = 0;  // user+nice+system+irq+softirq+steal (guest time is already inside user/nice)
  uint64_t total = 0; // busy + idle + iowait
};

struct ProcStat {
  CpuTimes total;
  std::vector<CpuTimes> cores;
};

// Pure parsers, exposed for fixture tests. Return false when the text has no usable "cpu" / MemTotal line.
bool parse_proc_stat(std::string_view text, ProcStat& out);
bool parse_meminfo(std::string_view text, int64_t& total_bytes, int64_t& available_bytes);
std::string parse_cpu_model(std::string_view cpuinfo);
// busy share of the interval in percent; missing when no time passed.
OptF util_between(const CpuTimes& before, const CpuTimes& after);

// The least time between two stored sets of per-core rows by default (Mode::Period).
inline constexpr std::chrono::seconds kPerCorePeriod{5};

// Which ticks store per-core rows (issue 33; Frame's CpuSample::core_rows).
struct PerCoreStorage {
  enum class Mode { Period, EveryTick, Off };
  Mode mode = Mode::EveryTick;
  // Mode::Period: the period (the process-scan period), and the sampling interval: a tick within half an interval of
  // the period's end is due, so that jitter of a few milliseconds never pushes a row to the next tick.
  std::chrono::nanoseconds period{0};
  std::chrono::nanoseconds interval{0};
};

class ProcfsCpuSource final : public Source {
public:
  explicit ProcfsCpuSource(std::string procfs_root, PerCoreStorage per_core = {});
  ~ProcfsCpuSource() override;
  std::string_view name() const override { return "procfs"; }
  bool open() override;
  void sample(Frame& frame) noexcept override;
  // Adaptive sampling (issue 18): /proc/stat only. A full sample on the same tick keeps what the probe read.
  void probe(Frame& frame) noexcept override;
  SourceStatus status() const override { return status_; }
  void describe(RunInfo& run) const override;

private:
  bool read_fd(int fd, std::string& buf) noexcept;
  std::string root_;
  SourceStatus status_;
  UniqueFd stat_fd_;
  UniqueFd meminfo_fd_;
  std::string buf_;
  ProcStat prev_;
  ProcStat cur_;
  bool have_prev_ = false;
  int64_t probed_tick_ = -1; // the tick whose /proc/stat the probe already read
  bool probed_ok_ = false;   // and whether that read gave a reading
  bool read_stat(Frame& frame);
  void per_core_rows(Frame& frame, bool fresh);
  PerCoreStorage per_core_;
  // Mode::Period: the per-core counters when per-core rows were last stored, and when; the next rows are the means
  // between them and the tick they are stored on.
  std::vector<CpuTimes> stored_cores_;
  std::optional<SteadyClock::time_point> stored_at_;
};

} // namespace wattscope
