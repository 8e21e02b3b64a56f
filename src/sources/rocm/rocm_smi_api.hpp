// The ROCm SMI types and entry points wattscope uses, declared here (no rocm_smi.h is needed to build). Layouts and
// signatures follow AMD's documented rocm_smi.h (Debian's librocm-smi-dev 5.2 and ROCm 6's header where they differ).
// One list of entry points (an X-macro, as for NVML) generates both the loader's pointer table and the fake library's
// exports, so the two can never drift apart.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wattscope::rocm {

using Status = uint32_t; // rsmi_status_t (an enum whose last value is 0xFFFFFFFF)
inline constexpr Status kSuccess = 0;
inline constexpr Status kInvalidArgs = 1;
inline constexpr Status kNotSupported = 2;
// A sysfs file could not be read: absent on this kernel or board, or the GPU is gone.
inline constexpr Status kFileError = 3;
inline constexpr Status kPermission = 4;
inline constexpr Status kOutOfResources = 5;
inline constexpr Status kInternalException = 6;
inline constexpr Status kInputOutOfBounds = 7;
inline constexpr Status kInitError = 8;
inline constexpr Status kNotYetImplemented = 9;
inline constexpr Status kNotFound = 10;
inline constexpr Status kInsufficientSize = 11;
inline constexpr Status kInterrupt = 12;
inline constexpr Status kUnexpectedSize = 13;
inline constexpr Status kNoData = 14;
inline constexpr Status kUnexpectedData = 15;
inline constexpr Status kBusy = 16;
inline constexpr Status kRefcountOverflow = 17;
inline constexpr Status kUnknownError = 0xFFFFFFFF;

// rsmi_frequencies_t changed layout in ROCm 6 (a leading bool and one more slot): the loader reads the library's
// major version (rsmi_version_get) and hands rsmi_dev_gpu_clk_freq_get / rsmi_dev_pci_bandwidth_get a buffer of the
// matching layout. Passing the 5.x struct to a 6.x library would read every frequency 8 bytes off.
struct FrequenciesV5 { // ROCm <= 5.x
  uint32_t num_supported;
  uint32_t current;
  uint64_t frequency[32];
};
struct FrequenciesV6 { // ROCm >= 6.0
  bool has_deep_sleep;
  uint32_t num_supported;
  uint32_t current;
  uint64_t frequency[33];
};
static_assert(sizeof(FrequenciesV5) == 264);
static_assert(sizeof(FrequenciesV6) == 280);
struct PcieBandwidthV5 { // rsmi_pcie_bandwidth_t: the transfer rates, and the lanes of each
  FrequenciesV5 transfer_rate;
  uint32_t lanes[32];
};
struct PcieBandwidthV6 {
  FrequenciesV6 transfer_rate;
  uint32_t lanes[33];
};
// Room for either layout: the entry points take this, the reader interprets it by the library's major version.
union FrequenciesBuf {
  FrequenciesV5 v5;
  FrequenciesV6 v6;
};
union PcieBandwidthBuf {
  PcieBandwidthV5 v5;
  PcieBandwidthV6 v6;
};

struct Version { // rsmi_version_t
  uint32_t major;
  uint32_t minor;
  uint32_t patch;
  const char* build;
};

struct ProcessInfo { // rsmi_process_info_t
  uint32_t process_id;
  uint32_t pasid;
  uint64_t vram_usage;   // bytes
  uint64_t sdma_usage;   // microseconds
  uint32_t cu_occupancy; // percent of the compute units; 0xFFFFFFFF where the kernel cannot tell
};
inline constexpr uint32_t kCuOccupancyInvalid = 0xFFFFFFFF;

// Enumerations passed by value.
inline constexpr uint32_t kClkSys = 0;            // RSMI_CLK_TYPE_SYS: the shader (graphics) clock
inline constexpr uint32_t kClkMem = 4;            // RSMI_CLK_TYPE_MEM
inline constexpr uint32_t kTempEdge = 0;          // RSMI_TEMP_TYPE_EDGE
inline constexpr uint32_t kTempJunction = 1;      // RSMI_TEMP_TYPE_JUNCTION (hotspot)
inline constexpr uint32_t kTempMemory = 2;        // RSMI_TEMP_TYPE_MEMORY (VRAM / HBM)
inline constexpr uint32_t kTempCurrent = 0;       // RSMI_TEMP_CURRENT
inline constexpr uint32_t kTempCritical = 5;      // RSMI_TEMP_CRITICAL: the clocks are slowed from here
inline constexpr uint32_t kTempEmergency = 7;     // RSMI_TEMP_EMERGENCY: the board shuts down from here
inline constexpr uint32_t kMemVram = 0;           // RSMI_MEM_TYPE_VRAM
inline constexpr uint32_t kSwComponentDriver = 0; // RSMI_SW_COMP_DRIVER

inline constexpr size_t kStringBuffer = 256;

enum class Need { Required, Optional };

} // namespace wattscope::rocm

// X(member, need, params, args, symbol). Every function returns rsmi_status_t.
#define WATTSCOPE_ROCM_SMI_ENTRY_POINTS(X)                                                                             \
  X(init, Required, (uint64_t flags), (flags), rsmi_init)                                                              \
  X(shut_down, Required, (), (), rsmi_shut_down)                                                                       \
  X(num_devices, Required, (uint32_t * n), (n), rsmi_num_monitor_devices)                                              \
  X(version, Optional, (Version * v), (v), rsmi_version_get)                                                           \
  X(version_str, Optional, (uint32_t component, char* buf, uint32_t len), (component, buf, len), rsmi_version_str_get) \
  X(dev_name, Optional, (uint32_t dv, char* buf, size_t len), (dv, buf, len), rsmi_dev_name_get)                       \
  X(dev_unique_id, Optional, (uint32_t dv, uint64_t * id), (dv, id), rsmi_dev_unique_id_get)                           \
  X(dev_pci_id, Optional, (uint32_t dv, uint64_t * bdfid), (dv, bdfid), rsmi_dev_pci_id_get)                           \
  X(dev_energy_count, Optional, (uint32_t dv, uint64_t * count, float* resolution_uj, uint64_t* timestamp_ns),         \
    (dv, count, resolution_uj, timestamp_ns), rsmi_dev_energy_count_get)                                               \
  X(dev_power_ave, Optional, (uint32_t dv, uint32_t sensor, uint64_t * uw), (dv, sensor, uw), rsmi_dev_power_ave_get)  \
  X(dev_current_socket_power, Optional, (uint32_t dv, uint64_t * uw), (dv, uw), rsmi_dev_current_socket_power_get)     \
  X(dev_power_cap, Optional, (uint32_t dv, uint32_t sensor, uint64_t * uw), (dv, sensor, uw), rsmi_dev_power_cap_get)  \
  X(dev_busy_percent, Optional, (uint32_t dv, uint32_t * pct), (dv, pct), rsmi_dev_busy_percent_get)                   \
  X(dev_memory_busy_percent, Optional, (uint32_t dv, uint32_t * pct), (dv, pct), rsmi_dev_memory_busy_percent_get)     \
  X(dev_memory_total, Optional, (uint32_t dv, uint32_t type, uint64_t * bytes), (dv, type, bytes),                     \
    rsmi_dev_memory_total_get)                                                                                         \
  X(dev_memory_usage, Optional, (uint32_t dv, uint32_t type, uint64_t * bytes), (dv, type, bytes),                     \
    rsmi_dev_memory_usage_get)                                                                                         \
  X(dev_temp_metric, Optional, (uint32_t dv, uint32_t sensor, uint32_t metric, int64_t * millidegrees),                \
    (dv, sensor, metric, millidegrees), rsmi_dev_temp_metric_get)                                                      \
  X(dev_gpu_clk_freq, Optional, (uint32_t dv, uint32_t clk, FrequenciesBuf * f), (dv, clk, f),                         \
    rsmi_dev_gpu_clk_freq_get)                                                                                         \
  X(dev_fan_speed, Optional, (uint32_t dv, uint32_t sensor, int64_t * speed), (dv, sensor, speed),                     \
    rsmi_dev_fan_speed_get)                                                                                            \
  X(dev_fan_speed_max, Optional, (uint32_t dv, uint32_t sensor, uint64_t * max), (dv, sensor, max),                    \
    rsmi_dev_fan_speed_max_get)                                                                                        \
  X(dev_pci_bandwidth, Optional, (uint32_t dv, PcieBandwidthBuf * b), (dv, b), rsmi_dev_pci_bandwidth_get)             \
  X(dev_pci_throughput, Optional, (uint32_t dv, uint64_t * sent, uint64_t * received, uint64_t * max_pkt_sz),          \
    (dv, sent, received, max_pkt_sz), rsmi_dev_pci_throughput_get)                                                     \
  X(compute_process_info, Optional, (ProcessInfo * procs, uint32_t * n), (procs, n), rsmi_compute_process_info_get)    \
  X(compute_process_gpus, Optional, (uint32_t pid, uint32_t * indices, uint32_t * n), (pid, indices, n),               \
    rsmi_compute_process_gpus_get)                                                                                     \
  X(compute_process_info_by_device, Optional, (uint32_t pid, uint32_t dv, ProcessInfo * p), (pid, dv, p),              \
    rsmi_compute_process_info_by_device_get)                                                                           \
  X(compute_process_info_by_pid, Optional, (uint32_t pid, ProcessInfo * p), (pid, p),                                  \
    rsmi_compute_process_info_by_pid_get)
