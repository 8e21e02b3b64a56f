// What the process tracker (src/processes) saw in one scan, handed to accounting with the next frame. Scans run at
// most once a second, off the sampling thread; accounting attributes every tick's energy by the latest scan's shares
// (docs/attribution.md).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wattscope {

// A process is its pid plus its start time (clock ticks after boot, /proc/PID/stat field 22), so a reused pid is a
// different process. start_time 0: the pid is not visible in this /proc (another pid namespace).
struct ProcessId {
  int64_t pid = 0;
  int64_t start_time = 0;
  auto operator<=>(const ProcessId&) const = default;
};

// One row of the `processes` table, written once: when the process is gone, or when the run ends. (So every store,
// CSV included, holds one row per process; a run wattscope could not finish has its samples but no rows.)
struct ProcessRow {
  ProcessId id;
  std::optional<int64_t> ppid;
  std::string comm;
  std::string cmdline;
  std::optional<int64_t> uid;
  std::string unit;      // e.g. "slurm job 4242", "pod 1f2e…", "docker 3fa9…", "nginx.service", "session-3.scope"
  std::string unit_kind; // slurm-job | k8s-pod | container | systemd-service | user-session | "" (none)
  int64_t first_tick = 0;
  std::optional<int64_t> last_tick;
};

struct ProcessSample {
  ProcessId id;
  std::string comm;
  std::string unit;
  std::string unit_kind;
  bool in_run = false;   // part of the wrapped command's tree (`run`); every process counts as the run's in `record`
  bool sampled = false;  // written to process_samples: every process of a run, or the top N of a machine
  double cpu_time_s = 0; // CPU seconds in the scan window: utime + stime, plus children reaped since the last scan
  std::optional<double> cpu_pct; // cpu_time_s over the window, 100 = one core
  std::optional<int64_t> rss_bytes;
  std::optional<int64_t> pss_bytes;
  std::optional<int64_t> uss_bytes;
  std::optional<double> read_bytes_per_s;
  std::optional<double> write_bytes_per_s;
  std::optional<double> cpu_energy_j; // filled by accounting: attributed CPU energy since the run started
  std::optional<double> cpu_power_w;  // filled by accounting: its share of the CPU's power at that tick
};

struct GpuProcessSample {
  ProcessId id;
  int gpu_index = 0;
  bool in_run = false;
  std::optional<int64_t> mem_used_bytes;
  std::optional<double> sm_pct;
  std::optional<double> mem_pct;
  std::optional<double> enc_pct;
  std::optional<double> dec_pct;
  std::optional<double> power_w;  // filled by accounting: attributed power over the latest tick
  std::optional<double> energy_j; // filled by accounting: attributed energy on this GPU since the run started
};

// A Kubernetes pod's names, from the kubelet (processes/kubelet.hpp); the cgroup path gives only its uid.
struct PodName {
  std::string ns;   // metadata.namespace
  std::string name; // metadata.name
};

// A unit (job, pod, container, service, session) at one scan, filled by accounting: what its processes draw now,
// and what they used since the run started (kept when a process exits, so the total only grows).
struct UnitSample {
  std::string unit;
  std::string unit_kind;
  std::optional<PodName> pod; // k8s-pod units whose names the kubelet gave; nullopt: known by uid only
  size_t processes = 0;       // its processes in this scan
  double cpu_power_w = 0;     // summed over its processes at that tick (0 where the CPU's power is not measured)
  double gpu_power_w = 0;     // summed over its processes and GPUs
  double cpu_energy_j = 0;    // attributed since the run started
  double gpu_energy_j = 0;
};

struct ProcessSnapshot {
  bool run_mode = false; // `run`: in_run marks the command's tree; otherwise the whole machine
  double window_s = 0;   // since the previous scan
  // Host CPU time in the window, summed over CPUs (/proc/stat), for the busy share.
  std::optional<double> cpu_busy_s;
  std::optional<double> cpu_total_s;
  std::vector<ProcessSample> procs;                  // every process the scan covers (the run's tree, or the machine)
  std::vector<GpuProcessSample> gpu_procs;           // one per (process, GPU) NVML listed
  std::vector<int> gpus_listed;                      // GPUs whose process lists answered this scan
  std::vector<ProcessRow> rows;                      // processes first seen or gone since the previous scan
  std::vector<UnitSample> units;                     // filled by accounting: every unit with a process in this scan
  std::vector<std::pair<std::string, PodName>> pods; // unit ("pod <uid>") → names, for this scan's named pods
};

} // namespace wattscope
