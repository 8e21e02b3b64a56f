// The metric registry: every measured field named once. Frame member, storage column and type, unit, Prometheus
// family and kind, help, display name and scale, charted or not. The stores' columns and row filling, `/metrics`,
// the JSON API, serve's history ring, the report's series and the benchmarks' frames are all generated from these
// lists, so a value can never appear under two spellings (STYLE 21).
//
// Adding a GPU metric: one X(...) line below (the compiler then wants the GpuSample member), one read in a source
// (NvmlSource checks at compile time that every GPU metric is read or declared derived), one value in the fake NVML.
// Append new entries at the end of a list: stored tables gain the column at the end (a forward migration).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "core/frame.hpp"

namespace wattscope {

enum class ColType { Int, Real, Text };
enum class PromKind { Gauge, Counter };

// Flags of a metric.
inline constexpr unsigned kChart = 1u << 0;   // the report and the dashboard chart it
inline constexpr unsigned kHistory = 1u << 1; // serve keeps it in its in-memory history (kept small: a few per device)
inline constexpr unsigned kPeak = 1u << 2; // history also keeps the bucket's peak (`<column>` with _peak before unit)
inline constexpr unsigned kMethodLabel = 1u << 3; // Prometheus: add method="<the device's energy_method>"
inline constexpr unsigned kNoZones = 1u << 4; // Prometheus: exported only where no RAPL zone is (zones say it better)
// serve's fine ring (the last hour, frame by frame) also keeps it for the live advice (/api/v1/advice); it is not in
// /api/v1/history nor in the coarse ring. Stored as a float like the history values, unless kExact.
inline constexpr unsigned kAdvice = 1u << 5;
// With kAdvice: kept as a double, not a float. For counters since the run started, which the advice differences
// tick by tick: a float's 24-bit mantissa steps by 2 J past 16.8 MJ (a 700 W GPU gets there in under 7 h).
inline constexpr unsigned kExact = 1u << 6;

struct MetricInfo {
  std::string_view column;       // SQL/CSV column and JSON key; units in the name
  ColType type;                  // Int or Real
  std::string_view unit;         // of the stored value: W, J, %, bytes, C, MHz, B/s, lanes, ...
  std::string_view prom_family;  // empty: not exported
  PromKind prom_kind;            //
  double prom_scale;             // stored value x prom_scale = the family's base unit (% -> ratio, MHz -> Hz)
  std::string_view prom_labels;  // constant labels of this member of a shared family, e.g. clock="sm"
  std::string_view help;         // HELP text, also the report's tooltip
  std::string_view display;      // what a person reads: "Power", "SM clock"
  std::string_view display_unit; // unit after display_scale
  double display_scale;          // stored value x display_scale = displayed value
  unsigned flags;
};

// A registry entry bound to its frame member: exactly one of the two member pointers is set.
template <class S> struct MetricDef {
  MetricInfo info;
  OptF S::*real;
  OptI S::*integer;
  std::optional<double> get(const S& s) const {
    if (real) return s.*real;
    if (const OptI& v = s.*integer) return static_cast<double>(*v);
    return std::nullopt;
  }
  bool has(const S& s) const { return real ? (s.*real).has_value() : (s.*integer).has_value(); }
};

// X(member, F|I, unit, prom_family, prom_kind, prom_scale, prom_labels, help, display, display_unit, display_scale,
//   flags). F: an OptF member stored as REAL; I: an OptI member stored as INTEGER.
#define WATTSCOPE_GPU_METRICS(X)                                                                                       \
  X(power_w, F, "W", "wattscope_gpu_power_watts", Gauge, 1, "",                                                        \
    "GPU power draw (instantaneous where the driver has it).", "Power", "W", 1, kChart | kHistory | kPeak | kAdvice)   \
  X(power_avg_w, F, "W", "wattscope_gpu_power_average_watts", Gauge, 1, "",                                            \
    "GPU power averaged by the driver (1 s window).", "Power (driver average)", "W", 1, 0)                             \
  X(energy_j, F, "J", "wattscope_gpu_energy_joules_total", Counter, 1, "",                                             \
    "GPU energy since the run started: hardware counter (method=\"counter\") or integrated power.", "Energy", "J", 1,  \
    kMethodLabel | kAdvice | kExact)                                                                                   \
  X(util_gpu_pct, F, "%", "wattscope_gpu_utilization_ratio", Gauge, 0.01, "",                                          \
    "Share of time a kernel ran (NVML GPU utilisation).", "GPU utilisation", "%", 1, kChart | kHistory | kAdvice)      \
  X(util_mem_pct, F, "%", "wattscope_gpu_memory_utilization_ratio", Gauge, 0.01, "",                                   \
    "Share of time device memory was read or written.", "Memory-bus utilisation", "%", 1, kChart)                      \
  X(mem_used_bytes, I, "bytes", "wattscope_gpu_memory_used_bytes", Gauge, 1, "", "Device memory in use.",              \
    "Memory used", "GiB", 1.0 / (1 << 30), kChart | kHistory | kAdvice)                                                \
  X(mem_total_bytes, I, "bytes", "wattscope_gpu_memory_total_bytes", Gauge, 1, "", "Device memory size.",              \
    "Memory total", "GiB", 1.0 / (1 << 30), 0)                                                                         \
  X(temp_gpu_c, F, "C", "wattscope_gpu_temperature_celsius", Gauge, 1, "", "GPU die temperature.", "GPU temperature",  \
    "°C", 1, kChart | kHistory | kAdvice)                                                                              \
  X(temp_mem_c, F, "C", "wattscope_gpu_memory_temperature_celsius", Gauge, 1, "", "GPU memory temperature.",           \
    "Memory temperature", "°C", 1, kChart)                                                                             \
  X(clock_sm_mhz, I, "MHz", "wattscope_gpu_clock_hertz", Gauge, 1e6, "clock=\"sm\"", "GPU clocks.", "SM clock", "MHz", \
    1, kChart | kAdvice)                                                                                               \
  X(clock_gfx_mhz, I, "MHz", "wattscope_gpu_clock_hertz", Gauge, 1e6, "clock=\"graphics\"", "GPU clocks.",             \
    "Graphics clock", "MHz", 1, 0)                                                                                     \
  X(clock_mem_mhz, I, "MHz", "wattscope_gpu_clock_hertz", Gauge, 1e6, "clock=\"memory\"", "GPU clocks.",               \
    "Memory clock", "MHz", 1, kChart)                                                                                  \
  X(pcie_link_width, I, "lanes", "wattscope_gpu_pcie_link_width", Gauge, 1, "",                                        \
    "PCIe link width in lanes now (a link narrows on errors or to save power; the most it can run at is "              \
    "wattscope_gpu_pcie_link_width_max).",                                                                             \
    "PCIe link width", "lanes", 1, 0)                                                                                  \
  X(pcie_link_width_max, I, "lanes", "wattscope_gpu_pcie_link_width_max", Gauge, 1, "",                                \
    "Most PCIe lanes the GPU's link can run at.", "PCIe link width (max)", "lanes", 1, 0)                              \
  X(pcie_tx_bytes_per_s, I, "B/s", "wattscope_gpu_pcie_transmit_bytes_per_second", Gauge, 1, "",                       \
    "PCIe TX throughput (NVML's KB/s x 1024).", "PCIe TX", "MB/s", 1e-6, kChart | kAdvice)                             \
  X(pcie_rx_bytes_per_s, I, "B/s", "wattscope_gpu_pcie_receive_bytes_per_second", Gauge, 1, "",                        \
    "PCIe RX throughput (NVML's KB/s x 1024).", "PCIe RX", "MB/s", 1e-6, kChart | kAdvice)                             \
  X(fan_pct, F, "%", "wattscope_gpu_fan_speed_ratio", Gauge, 0.01, "", "Fan speed as a share of its maximum.", "Fan",  \
    "%", 1, 0)                                                                                                         \
  X(pstate, I, "", "wattscope_gpu_performance_state", Gauge, 1, "", "P-state (0 is the fastest).", "P-state", "", 1,   \
    0)                                                                                                                 \
  X(power_limit_w, F, "W", "wattscope_gpu_power_limit_watts", Gauge, 1, "", "Enforced power limit.", "Power limit",    \
    "W", 1, kAdvice)                                                                                                   \
  X(throttle_reasons, I, "", "wattscope_gpu_throttle_reasons", Gauge, 1, "",                                           \
    "NVML clock-event (throttle) reason bit mask.", "Throttle reasons", "", 1, kAdvice)                                \
  X(util_enc_pct, F, "%", "wattscope_gpu_encoder_utilization_ratio", Gauge, 0.01, "",                                  \
    "Share of time the video encoder was busy.", "Encoder utilisation", "%", 1, kChart)                                \
  X(util_dec_pct, F, "%", "wattscope_gpu_decoder_utilization_ratio", Gauge, 0.01, "",                                  \
    "Share of time the video decoder was busy.", "Decoder utilisation", "%", 1, kChart)                                \
  X(mem_reserved_bytes, I, "bytes", "wattscope_gpu_memory_reserved_bytes", Gauge, 1, "",                               \
    "Device memory the driver reserves (NVML memory v2; missing on older drivers).", "Memory reserved", "GiB",         \
    1.0 / (1024.0 * 1024 * 1024), 0)                                                                                   \
  X(mem_free_bytes, I, "bytes", "wattscope_gpu_memory_free_bytes", Gauge, 1, "",                                       \
    "Device memory free for allocations.", "Memory free", "GiB", 1.0 / (1024.0 * 1024 * 1024), 0)                      \
  X(clock_video_mhz, I, "MHz", "wattscope_gpu_clock_hertz", Gauge, 1e6, "clock=\"video\"", "GPU clocks.",              \
    "Video clock", "MHz", 1, 0)                                                                                        \
  WATTSCOPE_GPU_HEALTH_METRICS(X)

// ---- issue 17: NVIDIA health and throughput (docs/nvidia.md). Counters NVML keeps since the driver loaded are stored
// as NVML gives them; the throttle times are since the run started. /metrics gathers a family's members wherever
// they are listed (issue 32).
#define WATTSCOPE_GPU_HEALTH_METRICS(X)                                                                                \
  X(mig_mode, I, "", "wattscope_gpu_mig_mode", Gauge, 1, "",                                                           \
    "1 when MIG is enabled (power and energy stay the whole GPU's, shared by its instances).", "MIG mode", "", 1, 0)   \
  X(ecc_corrected_errors, I, "errors", "wattscope_gpu_ecc_errors_total", Counter, 1, "error=\"corrected\"",            \
    "ECC errors since the driver loaded (NVML volatile counters).", "ECC errors (corrected)", "", 1, 0)                \
  X(ecc_uncorrected_errors, I, "errors", "wattscope_gpu_ecc_errors_total", Counter, 1, "error=\"uncorrected\"",        \
    "ECC errors since the driver loaded (NVML volatile counters).", "ECC errors (uncorrected)", "", 1, 0)              \
  X(remapped_rows_correctable, I, "rows", "wattscope_gpu_remapped_rows", Gauge, 1, "cause=\"correctable\"",            \
    "Memory rows remapped to spares, by the kind of error that caused it.", "Remapped rows (correctable)", "", 1, 0)   \
  X(remapped_rows_uncorrectable, I, "rows", "wattscope_gpu_remapped_rows", Gauge, 1, "cause=\"uncorrectable\"",        \
    "Memory rows remapped to spares, by the kind of error that caused it.", "Remapped rows (uncorrectable)", "", 1, 0) \
  X(remap_pending, I, "", "wattscope_gpu_remapped_rows_pending", Gauge, 1, "",                                         \
    "1 when a row remap waits for the next GPU reset.", "Remap pending", "", 1, 0)                                     \
  X(remap_failed, I, "", "wattscope_gpu_remapped_rows_failed", Gauge, 1, "",                                           \
    "1 when a row remap failed (the GPU needs service).", "Remap failed", "", 1, 0)                                    \
  X(pcie_replays, I, "", "wattscope_gpu_pcie_replays_total", Counter, 1, "",                                           \
    "PCIe link-level replays since the driver loaded.", "PCIe replays", "", 1, 0)                                      \
  X(nvlink_tx_bytes_per_s, I, "B/s", "", Gauge, 1, "",                                                                 \
    "NVLink data sent, summed over links, over the last interval (NVML's KiB counter as a rate).", "NVLink TX",        \
    "MB/s", 1e-6, 0)                                                                                                   \
  X(nvlink_rx_bytes_per_s, I, "B/s", "", Gauge, 1, "",                                                                 \
    "NVLink data received, summed over links, over the last interval (NVML's KiB counter as a rate).", "NVLink RX",    \
    "MB/s", 1e-6, 0)                                                                                                   \
  X(throttle_power_s, F, "s", "wattscope_gpu_throttle_seconds_total", Counter, 1, "reason=\"power\"",                  \
    "Time the GPU was held below its application clocks since the run started (NVML violation status).",               \
    "Throttled (power)", "s", 1, 0)                                                                                    \
  X(throttle_thermal_s, F, "s", "wattscope_gpu_throttle_seconds_total", Counter, 1, "reason=\"thermal\"",              \
    "Time the GPU was held below its application clocks since the run started (NVML violation status).",               \
    "Throttled (thermal)", "s", 1, 0)                                                                                  \
  X(nvlink_tx_bytes, I, "bytes", "wattscope_gpu_nvlink_transmit_bytes_total", Counter, 1, "",                          \
    "NVLink data sent since the driver loaded, summed over links (NVML's KiB counter x 1024); rate() of it is the "    \
    "throughput over any window, where a per-tick rate showed one tick in each scrape interval.",                      \
    "NVLink TX total", "GiB", 1.0 / (1 << 30), 0)                                                                      \
  X(nvlink_rx_bytes, I, "bytes", "wattscope_gpu_nvlink_receive_bytes_total", Counter, 1, "",                           \
    "NVLink data received since the driver loaded, summed over links (NVML's KiB counter x 1024).", "NVLink RX total", \
    "GiB", 1.0 / (1 << 30), 0)
// ---- end issue 17

// Host CPU and memory, one row per tick (cpu_samples). Prometheus samples carry the host label.
#define WATTSCOPE_CPU_METRICS(X)                                                                                       \
  X(util_pct, F, "%", "wattscope_cpu_utilization_ratio", Gauge, 0.01, "",                                              \
    "Host CPU busy share over the last interval.", "CPU utilisation", "%", 1, kChart | kHistory | kAdvice)             \
  X(mem_used_bytes, I, "bytes", "wattscope_memory_used_bytes", Gauge, 1, "",                                           \
    "Host memory in use (total minus available).", "Host memory used", "GiB", 1.0 / (1 << 30), kChart)                 \
  X(mem_total_bytes, I, "bytes", "wattscope_memory_total_bytes", Gauge, 1, "", "Host memory size.",                    \
    "Host memory total", "GiB", 1.0 / (1 << 30), 0)                                                                    \
  X(package_power_w, F, "W", "wattscope_cpu_package_power_watts", Gauge, 1, "",                                        \
    "CPU package power, method as a label.", "CPU package power", "W", 1, kChart | kHistory | kMethodLabel | kNoZones) \
  X(dram_power_w, F, "W", "", Gauge, 1, "", "DRAM power (RAPL).", "DRAM power", "W", 1, kChart)                        \
  X(package_energy_j, F, "J", "", Counter, 1, "", "CPU package energy since the run started.", "CPU package energy",   \
    "J", 1, kAdvice | kExact)                                                                                          \
  X(dram_energy_j, F, "J", "", Counter, 1, "", "DRAM energy since the run started.", "DRAM energy", "J", 1,            \
    kAdvice | kExact)                                                                                                  \
  X(busy_s, F, "s", "wattscope_cpu_busy_seconds_total", Counter, 1, "",                                                \
    "Busy CPU time summed over every logical CPU since boot (/proc/stat: user, nice, system, irq, softirq, steal); "   \
    "rate() of it is the busy CPUs over any window.",                                                                  \
    "CPU busy time", "s", 1, 0)

// One RAPL powercap zone per tick (cpu_power_samples). Labels: host, zone, domain, socket.
#define WATTSCOPE_ZONE_METRICS(X)                                                                                      \
  X(power_w, F, "W", "wattscope_cpu_power_watts", Gauge, 1, "", "RAPL zone power over the last interval.",             \
    "Zone power", "W", 1, 0)                                                                                           \
  X(energy_j, F, "J", "wattscope_cpu_energy_joules_total", Counter, 1, "", "RAPL zone energy since the run started.",  \
    "Zone energy", "J", 1, 0)

#define WATTSCOPE_METRIC_COLTYPE_F ColType::Real
#define WATTSCOPE_METRIC_COLTYPE_I ColType::Int
#define WATTSCOPE_METRIC_PTRS_F(S, m) &S::m, nullptr
#define WATTSCOPE_METRIC_PTRS_I(S, m) nullptr, &S::m

#define WATTSCOPE_METRIC_ENUM(m, ...) m,
enum class GpuMetric : size_t { WATTSCOPE_GPU_METRICS(WATTSCOPE_METRIC_ENUM) Count };
enum class CpuMetric : size_t { WATTSCOPE_CPU_METRICS(WATTSCOPE_METRIC_ENUM) Count };
enum class ZoneMetric : size_t { WATTSCOPE_ZONE_METRICS(WATTSCOPE_METRIC_ENUM) Count };
#undef WATTSCOPE_METRIC_ENUM

namespace metrics_detail {
#define WATTSCOPE_METRIC_DEF(S, m, t, unit, fam, kind, pscale, plabels, help, disp, dunit, dscale, flags)              \
  MetricDef<S>{{#m, WATTSCOPE_METRIC_COLTYPE_##t, unit, fam, PromKind::kind, pscale, plabels, help, disp, dunit,       \
                dscale, flags},                                                                                        \
               WATTSCOPE_METRIC_PTRS_##t(S, m)},
#define WATTSCOPE_GPU_DEF(...) WATTSCOPE_METRIC_DEF(GpuSample, __VA_ARGS__)
#define WATTSCOPE_CPU_DEF(...) WATTSCOPE_METRIC_DEF(CpuSample, __VA_ARGS__)
#define WATTSCOPE_ZONE_DEF(...) WATTSCOPE_METRIC_DEF(PowerZoneSample, __VA_ARGS__)
inline constexpr MetricDef<GpuSample> kGpu[] = {WATTSCOPE_GPU_METRICS(WATTSCOPE_GPU_DEF)};
inline constexpr MetricDef<CpuSample> kCpu[] = {WATTSCOPE_CPU_METRICS(WATTSCOPE_CPU_DEF)};
inline constexpr MetricDef<PowerZoneSample> kZone[] = {WATTSCOPE_ZONE_METRICS(WATTSCOPE_ZONE_DEF)};
#undef WATTSCOPE_GPU_DEF
#undef WATTSCOPE_CPU_DEF
#undef WATTSCOPE_ZONE_DEF
#undef WATTSCOPE_METRIC_DEF
} // namespace metrics_detail

inline constexpr std::span<const MetricDef<GpuSample>> kGpuMetrics{metrics_detail::kGpu};
inline constexpr std::span<const MetricDef<CpuSample>> kCpuMetrics{metrics_detail::kCpu};
inline constexpr std::span<const MetricDef<PowerZoneSample>> kZoneMetrics{metrics_detail::kZone};
static_assert(std::size(metrics_detail::kGpu) == static_cast<size_t>(GpuMetric::Count));
static_assert(std::size(metrics_detail::kCpu) == static_cast<size_t>(CpuMetric::Count));
static_assert(std::size(metrics_detail::kZone) == static_cast<size_t>(ZoneMetric::Count));

constexpr const MetricDef<GpuSample>& gpu_metric(GpuMetric m) {
  return metrics_detail::kGpu[static_cast<size_t>(m)];
}
constexpr const MetricDef<CpuSample>& cpu_metric(CpuMetric m) {
  return metrics_detail::kCpu[static_cast<size_t>(m)];
}

// A set of GPU metrics, for sources to declare what each of their reads fills.
using GpuMetricSet = uint64_t;
static_assert(static_cast<size_t>(GpuMetric::Count) <= 64, "GpuMetricSet holds 64 metrics");
constexpr GpuMetricSet metric_bit(GpuMetric m) {
  return GpuMetricSet{1} << static_cast<size_t>(m);
}
inline constexpr GpuMetricSet kAllGpuMetrics = (GpuMetricSet{1} << static_cast<size_t>(GpuMetric::Count)) - 1;

} // namespace wattscope
