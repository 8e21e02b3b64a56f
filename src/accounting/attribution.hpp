// Who used the energy (docs/attribution.md). Every tick's energy per device is split by the latest process scan's
// shares: a GPU's by its processes' SM utilisation, else by the memory they hold, else it stays unattributed;
// the CPU's (RAPL package + DRAM) by busy CPU time, idle time unattributed. Per device, attributed + other +
// unattributed equals the measured energy: the unattributed part of each tick is what the other two leave. Of the
// unattributed energy, only what the device's utilisation says was idle is called idle.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/frame.hpp"

namespace wattscope {

struct DeviceAttribution {
  double attributed_j = 0;   // the run's processes (`run`), or every process (`record`, `serve`)
  double other_j = 0;        // other processes: neighbours on the GPU, busy CPU time outside the run
  double unattributed_j = 0; // no process to give it to: none listed, none active, no process figures
  // The part of unattributed_j spent while the device's utilisation said it was idle (issue 29): a GPU under 5 %, the
  // CPU's idle time. The rest had no process to give it to although the device was busy (or its utilisation unknown).
  double idle_j = 0;
  double sm_share_j = 0;     // GPU: split by SM utilisation
  double memory_share_j = 0; // GPU: split by memory held (no process active)
  std::string method;        // "attributed", or "attributed (estimated)" for --cpu-tdp
  double measured_j() const { return attributed_j + other_j + unattributed_j; }
};

// A GPU below this utilisation over a tick is idle: the bar adaptive sampling (kIdleGpuUtilPct) and the advice
// (kIdleUtilPct) set, so "idle" means one thing in every view.
inline constexpr double kAttributionIdleUtilPct = 5.0;

struct ProcessTotals {
  std::string comm;
  std::string unit, unit_kind;
  bool in_run = false;
  double cpu_energy_j = 0;
  std::map<int, double> gpu_energy_j; // per gpu_index
  OptI peak_rss_bytes;
  OptI peak_gpu_mem_bytes; // summed over GPUs at one scan
  int64_t first_tick = 0;
  int64_t last_tick = 0;
  double gpu_total_j() const;
};

// A unit's energy since the run started: the sum of its processes', kept when they exit.
struct UnitTotals {
  std::string kind;
  double cpu_energy_j = 0;
  double gpu_energy_j = 0;
};

struct AttributionSummary {
  bool tracked = false;                             // some process scan reached accounting
  std::map<std::string, DeviceAttribution> devices; // "cpu", "gpu0", ...
  std::map<ProcessId, ProcessTotals> processes;
  std::map<std::string, UnitTotals> units; // by unit name
  nlohmann::json to_json(size_t max_processes = 50) const;
};

class Attributor {
public:
  // Attributes the frame's interval (frame.gpus' energy_j and the CPU energy must already be set), adopting
  // frame.processes first when it carries a new scan, and fills that scan's energy fields and row ticks.
  void process(Frame& frame, const char* cpu_power_method);
  const AttributionSummary& summary() const { return sum_; }
  // Sets first_tick / last_tick of rows of processes gone (or of every process, at the end of a run).
  void resolve_rows(std::vector<ProcessRow>& rows, int64_t tick) const;

private:
  // Shares point at their process's (and unit's) totals: std::map nodes stay put, and a tick then adds its energy
  // without a lookup per process.
  struct Share {
    ProcessId id;
    bool in_run;
    double weight;
    ProcessTotals* totals = nullptr;
    UnitTotals* unit = nullptr; // null: no unit
  };
  struct CpuShare {
    double frac; // of the interval's CPU energy
    ProcessTotals* totals;
    UnitTotals* unit;
  };
  struct GpuShares {
    std::vector<Share> shares;
    double total = 0;
    bool by_sm = false;
  };
  void adopt(ProcessSnapshot& snap, int64_t tick);
  void fill(ProcessSnapshot& snap, const Frame& f);
  UnitTotals* unit_of(const ProcessTotals& t);

  std::shared_ptr<const ProcessSnapshot> current_;
  // CPU: fraction of the interval's energy per process, and the run / other fractions.
  std::vector<CpuShare> cpu_share_; // in the order of the scan's procs
  double cpu_attr_frac_ = 0, cpu_other_frac_ = 0;
  double cpu_busy_frac_ = 0; // busy CPU time / capacity in the last scan's window
  // An estimate (TDP x utilisation) has no idle part: all of it is busy time's, so it is split over the busy time
  // alone. Measured energy (RAPL) includes the idle package's, so it is split over the whole capacity.
  bool cpu_estimated_ = false;
  double cpu_scale() const { return cpu_estimated_ && cpu_busy_frac_ > 0 ? 1.0 / cpu_busy_frac_ : 1.0; }
  bool cpu_known_ = false;
  std::map<int, GpuShares> gpu_;
  OptF last_pkg_j_, last_dram_j_;
  std::map<int, double> last_gpu_j_;
  std::map<int, OptF> gpu_power_w_; // the tick's measured power, for per-process power
  AttributionSummary sum_;
  int64_t prev_adopt_tick_ = -1;
  bool run_mode_ = false;
  void prune(int64_t tick);

public:
  // Per-process totals kept for processes outside `run`'s tree (in record and serve: all): past this many, those gone
  // for two scans with the least energy are dropped (their energy stays in their unit's and the devices' totals), so a
  // serve that runs for months does not grow with every process that ever ran (issue 12).
  static constexpr size_t kMaxKeptProcesses = 4096;
};

} // namespace wattscope
