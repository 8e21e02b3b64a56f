// One sampling instant across every device: what the sampler hands to accounting and the bus.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/processes.hpp"

namespace wattscope {

using SteadyClock = std::chrono::steady_clock;
// Missing measurements stay missing: they become SQL NULL / an empty CSV cell, never 0.
using OptF = std::optional<double>;
using OptI = std::optional<int64_t>;

// One RAPL (powercap) zone at one tick. `zone` and `domain` point at strings the source owns for the whole run.
struct PowerZoneSample {
  std::string_view zone;   // package, core, uncore, dram, psys (or the kernel's own name for anything else)
  std::string_view domain; // the powercap directory, e.g. intel-rapl:0:2
  OptI socket;             // package number; missing for psys, which covers the platform
  OptF power_w;            // average over the interval since the previous tick
  OptF energy_j;           // since run start, wrap-around corrected
};

struct CpuSample {
  OptF util_pct;
  std::vector<OptF> core_util_pct; // one per logical CPU, in /proc/stat order
  // issue 33: whether this tick stores cpu_core_samples rows. Per-core rows are most of what a many-core node writes,
  // so by default they are stored once per process-scan period, and on such a tick core_util_pct is each core's mean
  // over the whole period since the last stored one (from /proc/stat's jiffies); on the ticks between, it is the last
  // tick's and is not stored. A frame made by hand stores its cores.
  bool core_rows = true;
  OptI mem_used_bytes;
  OptI mem_total_bytes;
  // Host CPU power, summed over sockets: measured (RAPL) or estimated (--cpu-tdp), as power_method says.
  OptF package_power_w;
  OptF dram_power_w;
  OptF package_energy_j;
  OptF dram_energy_j;
  const char* power_method = nullptr; // "counter" (RAPL) or "estimated"
  std::vector<PowerZoneSample> zones;
  // issue 32: busy CPU time summed over every logical CPU since boot (/proc/stat), so that a scrape every 15 s still
  // sees the whole interval's busy time as a rate, where util_pct is only the last tick's.
  OptF busy_s;
};

// One GPU at one tick. `gpu_index` is the device's index as its vendor library numbers it. Every measured member is
// named in the metric registry (core/metrics.hpp), which drives storage, /metrics, the API and the report.
struct GpuSample {
  int gpu_index = 0;
  OptF power_w;           // instantaneous where the driver has it, else the driver's reading
  OptF power_avg_w;       // the driver's own averaged reading (1 s window on Ampere and newer)
  OptF energy_j;          // since run start: counter delta or trapezoid integral (see GpuDevice::energy_method)
  OptI energy_counter_uj; // raw hardware counter in µJ (NVML's mJ scaled), for accounting; not stored
  OptF util_gpu_pct;
  OptF util_mem_pct;
  OptI mem_used_bytes;
  OptI mem_total_bytes;
  OptF temp_gpu_c;
  OptF temp_mem_c;
  OptI clock_sm_mhz;
  OptI clock_gfx_mhz;
  OptI clock_mem_mhz;
  OptI pcie_link_width;
  OptI pcie_link_width_max;
  OptI pcie_tx_bytes_per_s;
  OptI pcie_rx_bytes_per_s;
  OptF fan_pct;
  OptI pstate;
  OptF power_limit_w;
  OptI throttle_reasons;   // NVML clock-event reason bit mask
  OptF util_enc_pct;       // video encoder busy share
  OptF util_dec_pct;       // video decoder busy share
  OptI mem_reserved_bytes; // driver-reserved device memory (NVML memory v2 only)
  OptI mem_free_bytes;     //
  OptI clock_video_mhz;    //
  // ---- issue 17: health and throughput (NVIDIA; docs/nvidia.md)
  OptI mig_mode;                    // 1 when MIG is enabled
  OptI ecc_corrected_errors;        // volatile ECC counts (since the driver loaded)
  OptI ecc_uncorrected_errors;      //
  OptI remapped_rows_correctable;   // rows remapped for correctable / uncorrectable errors
  OptI remapped_rows_uncorrectable; //
  OptI remap_pending;               // 0/1
  OptI remap_failed;                // 0/1
  OptI pcie_replays;                // since the driver loaded
  OptI nvlink_tx_bytes_per_s;       // summed over links, from NVML's KiB counters
  OptI nvlink_rx_bytes_per_s;       //
  OptF throttle_power_s;            // violation time since the run started
  OptF throttle_thermal_s;          //
  OptI nvlink_tx_bytes;             // since the driver loaded, summed over links (the KiB counters x 1024)
  OptI nvlink_rx_bytes;             //
  // ---- end issue 17
  const char* power_source = nullptr; // static string naming where power_w came from
  // issue 33: power_w is the driver's instantaneous reading (NVML_FI_DEV_POWER_INSTANT), fit to shape the energy
  // between two reads of a counter read on a schedule; an averaged reading is not.
  bool power_instant = false;
  // issue 33: members carried from an earlier read (a costly call read on a schedule), each with that read's age in
  // ms: {index in the GPU metric registry (core/metrics.hpp), age}. Empty when every value is this tick's.
  std::vector<std::pair<uint16_t, int32_t>> age_ms;
  // When energy_j was the energy: the middle of this GPU's own counter read (GPUs are read one after another, each
  // later in the tick), or the counter's update it stands for; unset: the tick's time. A counter that moves on a
  // period holds a value up to energy_stale old (its update times unknown). For phase edges; not stored.
  std::optional<SteadyClock::time_point> energy_at;
  std::chrono::nanoseconds energy_stale{0};
  // The counter's own rise since the run's first reading where this tick read it (accounting): energy_j may be an
  // estimate held above it (a stored total never goes down). Not stored.
  OptF counter_energy_j;
};

// ---- issue 17: one MIG compute instance of a GPU (NVML), as last read (once a second, on the source's slow thread).
// Power and energy are the parent GPU's: NVML measures them per GPU, not per instance.
struct MigSample {
  int gpu_index = 0;        // the parent GPU
  int64_t gpu_instance = 0; // NVML GPU instance id
  int64_t compute_instance = 0;
  std::string uuid;      // MIG-…
  OptI mem_used_bytes;   // of the instance's memory slice
  OptI mem_total_bytes;  //
  OptI processes;        // compute processes running in it
  bool selected = false; // the run's selection named it (CUDA_VISIBLE_DEVICES=MIG-…): attribution is scoped to it
};
// ---- end issue 17

struct Event {
  int64_t seq = 0; // per run, assigned by accounting in order
  int64_t ts_ms = 0;
  std::string kind;   // alert, marker, device-lost, sink-outage, source-missing
  std::string source; // which device or component
  std::string detail;
};

// A GPU as enumerated once at start.
struct GpuDevice {
  int gpu_index = 0;
  std::string vendor; // nvidia, amd, intel
  std::string uuid;
  std::string name;
  std::string pci_bus_id;
  OptI mem_total_bytes;
  OptF power_limit_w;
  OptI clock_sm_max_mhz;
  OptI clock_mem_max_mhz;
  // The device's own temperatures where it slows its clocks down and where it shuts down (the driver's thresholds),
  // which the throttle forecast aims at.
  OptF slowdown_temp_c;
  OptF shutdown_temp_c;
  std::string energy_method; // counter | integrated | simulated (--simulate)
  std::string power_source;  // which reading power_w holds
  bool xid_events = false;   // issue 32: the driver delivers this GPU's Xid errors (serve counts them)
};

// --- Phases and work (issue 15): rows that markers (wattscope mark, the Python helper) produce. The phase tracker
// (phases/phase_tracker.hpp) fills them on the sampler thread; the stores write them to `phases` and `work`.
struct PhaseRecord {
  int64_t phase_id = 0; // per run, in order of `begin`
  std::string name;
  OptI index;  // e.g. the epoch number, when the caller gave one
  OptI parent; // phase_id of the enclosing phase
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  // The ticks the begin's and the end's energy positions were interpolated from (issue 29): the one at or before the
  // begin, the one at or after the end. energy = E(end) - E(begin), E interpolated at each marker's own time.
  int64_t start_tick = 0;
  int64_t end_tick = 0;
  // Per device ("gpu0", "cpu_package", "cpu_dram"), in joules over [start_ms, end_ms].
  std::vector<std::pair<std::string, double>> device_energy_j;
  OptF energy_j;                  // sum of device_energy_j; missing when no device measured energy
  std::string energy_method;      // counter | integrated | mixed (as the devices' methods are) | simulated (any part)
  bool closed_by_run_end = false; // no `end` arrived: the run's end closed it
  // How each edge's energy position was found, over its devices (docs/markers.md, "How true a phase is"): `reading`
  // (every device has a reading at the edge), `interpolated` (some device between known points around it), `none`
  // (some device has no known point after it: its last value is held). Empty on rows of older versions.
  std::string start_edge;
  std::string end_edge;
  // The most energy_j can be off by, in J, from its edges' gaps and the energy seen across them (summed over devices
  // and both edges); missing where the phase has no energy.
  OptF energy_bound_j;
  bool closed_by_repair = false; // the recorder died with it open (or its end not yet stored): `repair` closed it
  // The hottest GPU's temperature at the ticks nearest its begin and its end (a phase begun hot draws more power for
  // the same work); missing without GPU temperatures and on rows of older versions.
  OptF gpu_temp_start_c;
  OptF gpu_temp_end_c;
};
struct WorkRecord {
  int64_t seq = 0; // per run, in arrival order
  int64_t ts_ms = 0;
  double amount = 0;
  std::string unit; // samples, tokens, images, steps, ...
  OptI phase_id;    // innermost phase open when it arrived
  OptF total{};     // issue 36: the run's declared total of this unit, as the marker gave it (latest wins)
};
// --- end phases and work

// issue 33: a GPU's energy counter read off the grid, when a phase began or ended (Sampler::request_counter_reading),
// so that the phase's edge rests on a reading instead of being interpolated between two ticks.
// Where the counter moves on a period (an H100's: every 100 ms, sources/counter_clock.hpp), `at` is the update the
// value stands for, and the reading was made just after the first update following the phase edge it was asked for:
// the energy at the edge (`edge_at`) is then the reading less `edge_back_uj`, the instant power's integral from the
// edge to that update.
struct CounterReading {
  int gpu_index = 0;
  int64_t counter_uj = 0;
  SteadyClock::time_point at{}; // when the value was the energy: the middle of the call, or the update it stands for
  std::optional<SteadyClock::time_point> edge_at;
  int64_t edge_back_uj = 0;
  int64_t edge_err_uj =
      0; // how far edge_back_uj may be off: the power's steps between its reads, and the update's time
  // How much older than `at` the value may be: a counter not known to move at every read holds its last update's
  // value (an H100's: up to 100 ms).
  std::chrono::nanoseconds stale{0};
};

struct Frame {
  int64_t tick = 0;  // grid slot number since run start; gaps mean the sampler skipped late slots
  int64_t ts_ms = 0; // UTC wall clock, milliseconds since the epoch, taken once per tick
  SteadyClock::time_point mono{};
  CpuSample cpu;
  std::vector<GpuSample> gpus; // only devices that answered this tick
  std::vector<Event> events;
  std::vector<MigSample> migs; // issue 17: MIG instances of the recorded GPUs (empty where MIG is off)
  // Devices as finally known (energy method settled on the first tick); set on tick 0 only, stored in gpu_devices.
  std::vector<GpuDevice> device_rows;
  // The process tracker's latest scan, on the first frame after it (at most one a second); accounting fills its
  // attributed energy before the frame is shared. Null on the other frames.
  std::shared_ptr<ProcessSnapshot> processes;
  // The run's last sample (taken when it stops): sources read what they read less often than every tick, so the
  // run's figures close at its end (the NVML energy counter, Options::energy_period).
  bool last = false;
  // The end of a run: a frame that carries only the final `processes` rows (no samples).
  bool rows_only = false;
  // Adaptive sampling (issue 18): grid slots since the previous frame that were only probed (idle, not stored); they
  // are not skipped ticks.
  int64_t probe_ticks = 0;
  // Phases that ended and work reported since the previous tick (issue 15).
  std::vector<PhaseRecord> phases;
  std::vector<WorkRecord> work;
  // A frame that carries only phase/work rows (the run's end closing open phases): no sample rows.
  bool markers_only = false;
  // Phases begun and settled at this tick, still open (end_ms 0, no energy): a store keeps them at once, so that a
  // recorder killed with phases open leaves them for `repair` to close. Their closed row comes in `phases` later.
  std::vector<PhaseRecord> phases_begun;
  // issue 36: (gpu_index, registry column) of each series the anomaly detector holds anomalous at this tick, for the
  // alert rules with `anomaly = true` (forecast/anomaly_monitor.hpp).
  std::vector<std::pair<int, std::string_view>> anomalies;
  // issue 33: energy counters read at phase edges since the previous frame (for the phase tracker only: no rows)
  std::vector<CounterReading> counter_readings;
  // Carbon (g CO2e) and cost charged since the run began, per device, as accounting has them after this frame (serve's
  // /metrics); empty where nothing was charged yet.
  std::vector<std::pair<std::string, double>> carbon_g;
  std::vector<std::pair<std::string, double>> cost;
  std::string currency;
  bool carbon_assumed = false; // charged at the world's yearly figure: no carbon source was given
};

} // namespace wattscope
