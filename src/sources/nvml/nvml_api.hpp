// The NVML types and entry points wattscope uses, declared here (no nvml.h is needed to build). Layouts follow
// NVIDIA's documented nvml.h. One list of entry points (an X-macro, as DCGM does) generates both the loader's
// pointer table and the fake library's exports, so the two can never drift apart.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wattscope::nvml {

using Return = int; // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorLibraryNotFound = 12;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorResetRequired = 16;
inline constexpr Return kErrorOperatingSystem = 17;         // often after a driver upgrade without a reboot
inline constexpr Return kErrorLibRmVersionMismatch = 18;    // libnvidia-ml and the kernel module differ
inline constexpr Return kErrorArgumentVersionMismatch = 25; // a versioned struct this driver does not know
inline constexpr Return kErrorUnknown = 999;

struct DeviceSt;
using Device = DeviceSt*; // nvmlDevice_t

struct Utilization { // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};

struct Memory { // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct MemoryV2 { // nvmlMemory_v2_t: `used` excludes driver-reserved memory, as nvidia-smi shows it
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// NVML_STRUCT_VERSION(Memory, 2): the struct size with the version number in the top byte.
inline constexpr unsigned int kMemoryV2Version = static_cast<unsigned int>(sizeof(MemoryV2)) | (2u << 24);

// nvmlDeviceGetPciInfo_v2 fills the legacy 52-byte nvmlPciInfo_t: the bus id first, then the numbers and four
// reserved words (issue 17: reading it as the _v3 layout took the bus id from offset 36).
struct PciInfoLegacy {
  char busId[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  unsigned int reserved[4];
};
static_assert(sizeof(PciInfoLegacy) == 52);

struct PciInfo { // nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

enum ValueType : int { // nvmlValueType_t
  kValueDouble = 0,
  kValueUInt = 1,
  kValueULong = 2,
  kValueULongLong = 3,
  kValueSLongLong = 4,
  kValueSInt = 5,
  kValueUShort = 6,
};

union Value { // nvmlValue_t
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  int siVal;
  unsigned short usVal;
};

struct FieldValue { // nvmlFieldValue_t
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  Return nvmlReturn;
  Value value;
};

// nvmlTemperature_v1_t, for nvmlDeviceGetTemperatureV: first in driver 565.57.01 (the old call is deprecated in NVML
// 13)
struct TemperatureV1 {
  unsigned int version;
  int sensorType; // nvmlTemperatureSensors_t
  int temperature;
};
inline constexpr unsigned int kTemperatureV1Version = static_cast<unsigned int>(sizeof(TemperatureV1)) | (1u << 24);

// Field ids (NVML_FI_DEV_*).
inline constexpr unsigned int kFieldMemoryTemp = 82;
inline constexpr unsigned int kFieldPowerAverage = 185; // 1 s average; Ampere (except GA100) and newer
inline constexpr unsigned int kFieldPowerInstant = 186; // instantaneous; all architectures with field support

// Enumerations passed by value.
inline constexpr int kTemperatureGpu = 0;        // NVML_TEMPERATURE_GPU
inline constexpr int kClockGraphics = 0;         // NVML_CLOCK_GRAPHICS
inline constexpr int kClockSm = 1;               // NVML_CLOCK_SM
inline constexpr int kClockMem = 2;              // NVML_CLOCK_MEM
inline constexpr int kTempThresholdShutdown = 0; // NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
inline constexpr int kTempThresholdSlowdown = 1; // NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
inline constexpr int kClockVideo = 3;            // NVML_CLOCK_VIDEO
inline constexpr int kPcieUtilTx = 0;            // NVML_PCIE_UTIL_TX_BYTES (KB/s)
inline constexpr int kPcieUtilRx = 1;            // NVML_PCIE_UTIL_RX_BYTES (KB/s)

inline constexpr unsigned int kStringBuffer = 96; // >= NVML_DEVICE_NAME_V2_BUFFER_SIZE (96) and UUID/version sizes

// ---- Processes on a device (attribution, issue 13) ----
struct ProcessInfo { // nvmlProcessInfo_t (v2 layout), filled by the _v3 and _v2 running-process calls
  unsigned int pid;
  unsigned long long usedGpuMemory; // kValueNotAvailable where the driver cannot tell (Windows WDDM, some MIG setups)
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
struct ProcessInfoV1 { // nvmlProcessInfo_v1_t, filled by the unversioned calls of older drivers
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
// Drivers 535.43.02 to 535.98 (issue 30): their nvmlDevice{Compute,Graphics}RunningProcesses_v3 fill this 32-byte
// struct (nvmlProcessInfo_t of those headers, with a trailing usedGpuCcProtectedMemory) under the same symbol that
// fills the 24-byte ProcessInfo before and after them; 535.104.05 went back to 24 bytes and moved the 32-byte struct to
// nvmlDeviceGetRunningProcessDetailList. Every layout has pid at offset 0 and usedGpuMemory at offset 8.
struct ProcessInfoR535 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
};
static_assert(sizeof(ProcessInfoV1) == 16 && sizeof(ProcessInfo) == 24 && sizeof(ProcessInfoR535) == 32);
static_assert(offsetof(ProcessInfo, usedGpuMemory) == 8 && offsetof(ProcessInfoR535, usedGpuMemory) == 8 &&
              offsetof(ProcessInfoV1, usedGpuMemory) == 8);
// The largest entry any driver writes into a running-process list: buffers are sized by it whatever the stride
// assumed, so a driver whose struct is larger than wattscope believes still writes inside the buffer.
inline constexpr size_t kProcessInfoMaxBytes = sizeof(ProcessInfoR535);
// Told apart by the symbols (issue 30): nvmlDeviceGetConfComputeMemSizeInfo arrived with 535.43.02, and
// nvmlDeviceGetRunningProcessDetailList with 535.104.05 (which restored the 24-byte _v3 struct). Only their presence
// is used; they are declared as nvml.h has them.
struct ConfComputeMemSizeInfo { // nvmlConfComputeMemSizeInfo_t
  unsigned long long protectedMemSizeKib;
  unsigned long long unprotectedMemSizeKib;
};
struct ProcessDetailList { // nvmlProcessDetailList_v1_t
  unsigned int version;
  unsigned int mode;
  unsigned int numProcArrayEntries;
  ProcessInfoR535* procArray; // nvmlProcessDetail_v1_t: the same five fields
};
inline constexpr unsigned long long kValueNotAvailable = ~0ULL; // NVML_VALUE_NOT_AVAILABLE

struct ProcessUtilizationSample { // nvmlProcessUtilizationSample_t
  unsigned int pid;
  unsigned long long timeStamp; // CPU timestamp in microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};
struct ProcessUtilizationInfoV1 { // nvmlProcessUtilizationInfo_v1_t
  unsigned long long timeStamp;
  unsigned int pid;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
  unsigned int jpgUtil;
  unsigned int ofaUtil;
};
struct ProcessesUtilizationInfo { // nvmlProcessesUtilizationInfo_v1_t
  unsigned int version;
  unsigned int processSamplesCount;
  unsigned long long lastSeenTimeStamp;
  ProcessUtilizationInfoV1* procUtilArray;
};
inline constexpr unsigned int kProcessesUtilizationInfoVersion =
    static_cast<unsigned int>(sizeof(ProcessesUtilizationInfo)) | (1u << 24);

// ---- Health, throughput, events and MIG (issue 17). Checked against NVIDIA's nvml.h of CUDA 12.x (12.4-12.9) and
// 13.0 as mirrored in NVIDIA/go-nvml (pkg/nvml/nvml.h) and NVIDIA/cuda-python's generated bindings (12.9.1-13.0.1):
// signatures, struct layouts, field ids and constants below are those headers' own.
inline constexpr int kMemoryErrorCorrected = 0;   // NVML_MEMORY_ERROR_TYPE_CORRECTED (nvmlMemoryErrorType_t)
inline constexpr int kMemoryErrorUncorrected = 1; // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
inline constexpr int kEccCounterVolatile = 0;     // NVML_VOLATILE_ECC (nvmlEccCounterType_t): since the driver loaded
inline constexpr int kPerfPolicyPower = 0;        // NVML_PERF_POLICY_POWER (nvmlPerfPolicyType_t)
inline constexpr int kPerfPolicyThermal = 1;      // NVML_PERF_POLICY_THERMAL

struct ViolationTime {              // nvmlViolationTime_t
  unsigned long long referenceTime; // CPU timestamp, microseconds
  unsigned long long violationTime; // nanoseconds held below application clocks, since the driver loaded
};

// issue 30: violation (throttle) time through field values, since nvmlDeviceGetViolationStatus is deprecated in CUDA
// 13's nvml.h ("will be removed in CUDA 14.0"). NVML_FI_DEV_PERF_POLICY_POWER (74) and _THERMAL (75) count the same
// nanoseconds as that call's NVML_PERF_POLICY_POWER and _THERMAL, and have these ids in every nvml.h from CUDA 10
// (driver 410) to 13; newer headers also name 74 NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP. (The newer
// _SW_THERM_SLOWDOWN has different ids in different headers, 251 or 269: not used.)
inline constexpr unsigned int kFieldPerfPolicyPower = 74;
inline constexpr unsigned int kFieldPerfPolicyThermal = 75;

// NVLink data throughput counters (KiB, cumulative). scopeId UINT_MAX asks for the sum over every link.
inline constexpr unsigned int kFieldNvlinkDataTx = 138; // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
inline constexpr unsigned int kFieldNvlinkDataRx = 139; // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
inline constexpr unsigned int kScopeAllLinks = 0xFFFFFFFFu;

struct EventSetSt;
using EventSet = EventSetSt*;                                                           // nvmlEventSet_t
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x0000000000000008ULL; // nvmlEventTypeXidCriticalError
struct EventData { // nvmlEventData_t (the _v2 wait fills all five; the older wait the first three)
  Device device;
  unsigned long long eventType;
  unsigned long long eventData; // the Xid; 999 for an unknown one
  unsigned int gpuInstanceId;   // 0xFFFFFFFF when not attributable to a MIG GPU instance
  unsigned int computeInstanceId;
};
inline constexpr unsigned int kNoInstance = 0xFFFFFFFFu;

inline constexpr unsigned int kMigEnabled = 1; // NVML_DEVICE_MIG_ENABLE
// ---- end issue 17

enum class Need { Required, Optional };

} // namespace wattscope::nvml

// X1(member, need, params, args, symbol)            one symbol name
// X2(member, need, params, args, newest, older)     versioned: the loader tries `newest` first
// Every function returns nvmlReturn_t except nvmlErrorString.
#define WATTSCOPE_NVML_ENTRY_POINTS(X1, X2)                                                                            \
  X2(init, Required, (), (), nvmlInit_v2, nvmlInit)                                                                    \
  X1(shutdown, Required, (), (), nvmlShutdown)                                                                         \
  X1(system_driver_version, Optional, (char* buf, unsigned int len), (buf, len), nvmlSystemGetDriverVersion)           \
  X1(system_nvml_version, Optional, (char* buf, unsigned int len), (buf, len), nvmlSystemGetNVMLVersion)               \
  X2(device_count, Required, (unsigned int* n), (n), nvmlDeviceGetCount_v2, nvmlDeviceGetCount)                        \
  X2(device_by_index, Required, (unsigned int i, Device* d), (i, d), nvmlDeviceGetHandleByIndex_v2,                    \
     nvmlDeviceGetHandleByIndex)                                                                                       \
  X1(device_name, Optional, (Device d, char* buf, unsigned int len), (d, buf, len), nvmlDeviceGetName)                 \
  X1(device_uuid, Optional, (Device d, char* buf, unsigned int len), (d, buf, len), nvmlDeviceGetUUID)                 \
  X1(device_pci_info, Optional, (Device d, PciInfo * p), (d, p), nvmlDeviceGetPciInfo_v3)                              \
  X1(device_pci_info_legacy, Optional, (Device d, PciInfoLegacy * p), (d, p), nvmlDeviceGetPciInfo_v2)                 \
  X1(device_max_clock, Optional, (Device d, int type, unsigned int* mhz), (d, type, mhz), nvmlDeviceGetMaxClockInfo)   \
  X1(device_temperature_threshold, Optional, (Device d, int type, unsigned int* c), (d, type, c),                      \
     nvmlDeviceGetTemperatureThreshold)                                                                                \
  X1(device_memory_v2, Optional, (Device d, MemoryV2 * m), (d, m), nvmlDeviceGetMemoryInfo_v2)                         \
  X1(device_memory, Optional, (Device d, Memory * m), (d, m), nvmlDeviceGetMemoryInfo)                                 \
  X1(device_power_usage, Optional, (Device d, unsigned int* mw), (d, mw), nvmlDeviceGetPowerUsage)                     \
  X1(device_total_energy, Optional, (Device d, unsigned long long* mj), (d, mj), nvmlDeviceGetTotalEnergyConsumption)  \
  X1(device_utilization, Optional, (Device d, Utilization * u), (d, u), nvmlDeviceGetUtilizationRates)                 \
  X1(device_temperature_v, Optional, (Device d, TemperatureV1 * t), (d, t), nvmlDeviceGetTemperatureV)                 \
  X1(device_temperature, Optional, (Device d, int sensor, unsigned int* c), (d, sensor, c), nvmlDeviceGetTemperature)  \
  X1(device_clock, Optional, (Device d, int type, unsigned int* mhz), (d, type, mhz), nvmlDeviceGetClockInfo)          \
  X1(device_pcie_width, Optional, (Device d, unsigned int* w), (d, w), nvmlDeviceGetCurrPcieLinkWidth)                 \
  X1(device_pcie_width_max, Optional, (Device d, unsigned int* w), (d, w), nvmlDeviceGetMaxPcieLinkWidth)              \
  X1(device_pcie_throughput, Optional, (Device d, int counter, unsigned int* kbs), (d, counter, kbs),                  \
     nvmlDeviceGetPcieThroughput)                                                                                      \
  X1(device_fan, Optional, (Device d, unsigned int* pct), (d, pct), nvmlDeviceGetFanSpeed)                             \
  X1(device_pstate, Optional, (Device d, int* p), (d, p), nvmlDeviceGetPerformanceState)                               \
  X1(device_enforced_power_limit, Optional, (Device d, unsigned int* mw), (d, mw), nvmlDeviceGetEnforcedPowerLimit)    \
  X2(device_clock_events, Optional, (Device d, unsigned long long* mask), (d, mask),                                   \
     nvmlDeviceGetCurrentClocksEventReasons, nvmlDeviceGetCurrentClocksThrottleReasons)                                \
  X1(device_field_values, Optional, (Device d, int count, FieldValue* values), (d, count, values),                     \
     nvmlDeviceGetFieldValues)                                                                                         \
  X1(device_encoder_utilization, Optional, (Device d, unsigned int* pct, unsigned int* period_us),                     \
     (d, pct, period_us), nvmlDeviceGetEncoderUtilization)                                                             \
  X1(device_decoder_utilization, Optional, (Device d, unsigned int* pct, unsigned int* period_us),                     \
     (d, pct, period_us), nvmlDeviceGetDecoderUtilization)                                                             \
  X2(device_compute_processes, Optional, (Device d, unsigned int* count, ProcessInfo* infos), (d, count, infos),       \
     nvmlDeviceGetComputeRunningProcesses_v3, nvmlDeviceGetComputeRunningProcesses_v2)                                 \
  X1(device_compute_processes_v1, Optional, (Device d, unsigned int* count, ProcessInfoV1* infos), (d, count, infos),  \
     nvmlDeviceGetComputeRunningProcesses)                                                                             \
  X2(device_graphics_processes, Optional, (Device d, unsigned int* count, ProcessInfo* infos), (d, count, infos),      \
     nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlDeviceGetGraphicsRunningProcesses_v2)                               \
  X1(device_graphics_processes_v1, Optional, (Device d, unsigned int* count, ProcessInfoV1* infos), (d, count, infos), \
     nvmlDeviceGetGraphicsRunningProcesses)                                                                            \
  X1(device_conf_compute_mem_size, Optional, (Device d, ConfComputeMemSizeInfo * m), (d, m),                           \
     nvmlDeviceGetConfComputeMemSizeInfo)                                                                              \
  X1(device_process_detail_list, Optional, (Device d, ProcessDetailList * l), (d, l),                                  \
     nvmlDeviceGetRunningProcessDetailList)                                                                            \
  X1(device_process_utilization, Optional,                                                                             \
     (Device d, ProcessUtilizationSample * samples, unsigned int* count, unsigned long long last_seen_us),             \
     (d, samples, count, last_seen_us), nvmlDeviceGetProcessUtilization)                                               \
  X1(device_processes_utilization_info, Optional, (Device d, ProcessesUtilizationInfo * info), (d, info),              \
     nvmlDeviceGetProcessesUtilizationInfo)                                                                            \
  X1(device_max_mig_count, Optional, (Device d, unsigned int* n), (d, n), nvmlDeviceGetMaxMigDeviceCount)              \
  X1(device_mig_by_index, Optional, (Device d, unsigned int index, Device* mig), (d, index, mig),                      \
     nvmlDeviceGetMigDeviceHandleByIndex)                                                                              \
  X1(device_mig_mode, Optional, (Device d, unsigned int* current, unsigned int* pending), (d, current, pending),       \
     nvmlDeviceGetMigMode)                                                                                             \
  X1(device_gpu_instance_id, Optional, (Device d, unsigned int* id), (d, id), nvmlDeviceGetGpuInstanceId)              \
  X1(device_compute_instance_id, Optional, (Device d, unsigned int* id), (d, id), nvmlDeviceGetComputeInstanceId)      \
  X1(device_total_ecc_errors, Optional, (Device d, int error_type, int counter_type, unsigned long long* count),       \
     (d, error_type, counter_type, count), nvmlDeviceGetTotalEccErrors)                                                \
  X1(device_remapped_rows, Optional,                                                                                   \
     (Device d, unsigned int* corrected, unsigned int* uncorrected, unsigned int* pending, unsigned int* failure),     \
     (d, corrected, uncorrected, pending, failure), nvmlDeviceGetRemappedRows)                                         \
  X1(device_pcie_replay_counter, Optional, (Device d, unsigned int* n), (d, n), nvmlDeviceGetPcieReplayCounter)        \
  X1(device_violation_status, Optional, (Device d, int policy, ViolationTime* t), (d, policy, t),                      \
     nvmlDeviceGetViolationStatus)                                                                                     \
  X1(event_set_create, Optional, (EventSet * set), (set), nvmlEventSetCreate)                                          \
  X1(device_register_events, Optional, (Device d, unsigned long long types, EventSet set), (d, types, set),            \
     nvmlDeviceRegisterEvents)                                                                                         \
  X2(event_set_wait, Optional, (EventSet set, EventData * data, unsigned int timeout_ms), (set, data, timeout_ms),     \
     nvmlEventSetWait_v2, nvmlEventSetWait)                                                                            \
  X1(event_set_free, Optional, (EventSet set), (set), nvmlEventSetFree)
