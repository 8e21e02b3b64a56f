// The Level Zero (oneAPI) Sysman types and entry points wattscope uses, declared here: no ze_api.h/zes_api.h is needed
// to build. Layouts and values follow the documented headers (Debian's libze-dev 1.8: level_zero/zes_api.h). One list
// of entry points (an X-macro, as for NVML) generates both the loader's pointer table and the fake library's exports.
#pragma once

#include <cstdint>

namespace wattscope::ze {

using Result = uint32_t; // ze_result_t
inline constexpr Result kSuccess = 0;
inline constexpr Result kErrorDeviceLost = 0x70000001;          // device hung, reset, removed, or a driver update
inline constexpr Result kErrorDeviceRequiresReset = 0x70000006; //
inline constexpr Result kErrorDeviceInLowPowerState = 0x70000007;
inline constexpr Result kErrorInsufficientPermissions = 0x70010000; // Sysman: access denied
inline constexpr Result kErrorNotAvailable = 0x70010001;            // Sysman: resource in use
inline constexpr Result kErrorDependencyUnavailable = 0x70020000;
inline constexpr Result kErrorUninitialized = 0x78000001;
inline constexpr Result kErrorUnsupportedVersion = 0x78000002;
inline constexpr Result kErrorUnsupportedFeature = 0x78000003;
inline constexpr Result kErrorInvalidArgument = 0x78000004;
inline constexpr Result kErrorInvalidNullHandle = 0x78000005;
inline constexpr Result kErrorInvalidNullPointer = 0x78000007;
inline constexpr Result kErrorInvalidSize = 0x78000008;
inline constexpr Result kErrorInvalidEnumeration = 0x7800000c;
inline constexpr Result kErrorUnsupportedEnumeration = 0x7800000d;
inline constexpr Result kErrorUnknown = 0x7ffffffe;

// Opaque handles (zes_*_handle_t). A Sysman device handle is a core device handle where Sysman came up through
// zeInit with ZES_ENABLE_SYSMAN=1.
struct DriverSt;
struct DeviceSt;
struct PowerSt;
struct EngineSt;
struct MemorySt;
struct FrequencySt;
struct TemperatureSt;
using Driver = DriverSt*;
using Device = DeviceSt*;
using Power = PowerSt*;
using Engine = EngineSt*;
using Memory = MemorySt*;
using Frequency = FrequencySt*;
using Temperature = TemperatureSt*;

using Bool = uint8_t; // ze_bool_t

// zes_structure_type_t / ze_structure_type_t values of the structs below.
inline constexpr uint32_t kStypeCoreDeviceProperties = 0x3; // ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES
inline constexpr uint32_t kStypeDeviceProperties = 0x1;     // ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES
inline constexpr uint32_t kStypePciProperties = 0x2;
inline constexpr uint32_t kStypeEngineProperties = 0x5;
inline constexpr uint32_t kStypeFreqProperties = 0x9;
inline constexpr uint32_t kStypeMemProperties = 0xb;
inline constexpr uint32_t kStypePowerProperties = 0xd;
inline constexpr uint32_t kStypeTempProperties = 0x14;
inline constexpr uint32_t kStypeProcessState = 0x16;
inline constexpr uint32_t kStypeFreqState = 0x1b;
inline constexpr uint32_t kStypeMemState = 0x1e;
inline constexpr uint32_t kStypePowerExtProperties = 0x28;

inline constexpr int kMaxDeviceName = 256; // ZE_MAX_DEVICE_NAME
inline constexpr int kStringProperty = 64; // ZES_STRING_PROPERTY_SIZE

struct CoreDeviceProperties { // ze_device_properties_t
  uint32_t stype;
  void* pNext;
  uint32_t type;
  uint32_t vendorId;
  uint32_t deviceId;
  uint32_t flags;
  uint32_t subdeviceId;
  uint32_t coreClockRate;
  uint64_t maxMemAllocSize;
  uint32_t maxHardwareContexts;
  uint32_t maxCommandQueuePriority;
  uint32_t numThreadsPerEU;
  uint32_t physicalEUSimdWidth;
  uint32_t numEUsPerSubslice;
  uint32_t numSubslicesPerSlice;
  uint32_t numSlices;
  uint64_t timerResolution;
  uint32_t timestampValidBits;
  uint32_t kernelTimestampValidBits;
  uint8_t uuid[16]; // ze_device_uuid_t
  char name[kMaxDeviceName];
};

struct DeviceProperties { // zes_device_properties_t
  uint32_t stype;
  void* pNext;
  CoreDeviceProperties core;
  uint32_t numSubdevices;
  char serialNumber[kStringProperty];
  char boardNumber[kStringProperty];
  char brandName[kStringProperty];
  char modelName[kStringProperty];
  char vendorName[kStringProperty];
  char driverVersion[kStringProperty];
};

struct PciAddress { // zes_pci_address_t
  uint32_t domain;
  uint32_t bus;
  uint32_t device;
  uint32_t function;
};
struct PciSpeed { // zes_pci_speed_t
  int32_t gen;
  int32_t width; // lanes; -1 unknown
  int64_t maxBandwidth;
};
struct PciProperties { // zes_pci_properties_t
  uint32_t stype;
  void* pNext;
  PciAddress address;
  PciSpeed maxSpeed;
  Bool haveBandwidthCounters;
  Bool havePacketCounters;
  Bool haveReplayCounters;
};

struct PowerProperties { // zes_power_properties_t
  uint32_t stype;
  void* pNext; // a PowerExtProperties here tells the domain (drivers for spec 1.4+)
  Bool onSubdevice;
  uint32_t subdeviceId;
  Bool canControl;
  Bool isEnergyThresholdSupported;
  int32_t defaultLimit; // mW
  int32_t minLimit;
  int32_t maxLimit;
};
enum PowerDomain : uint32_t { // zes_power_domain_t
  kPowerDomainUnknown = 0,
  kPowerDomainCard = 1,
  kPowerDomainPackage = 2,
  kPowerDomainStack = 3,
};
struct PowerExtProperties { // zes_power_ext_properties_t
  uint32_t stype;
  void* pNext;
  uint32_t domain;    // PowerDomain
  void* defaultLimit; // zes_power_limit_ext_desc_t*, left null: not read
};
struct PowerEnergyCounter { // zes_power_energy_counter_t
  uint64_t energy;    // µJ, monotonic (wraps only at 2^64, or where a driver exposes a narrower hardware counter)
  uint64_t timestamp; // µs, of the reading
};

enum EngineGroup : uint32_t { // zes_engine_group_t
  kEngineAll = 0,
  kEngineComputeAll = 1,
  kEngineMediaAll = 2,
  kEngineCopyAll = 3,
  kEngineComputeSingle = 4,
  kEngineRenderSingle = 5,
  kEngineMediaDecodeSingle = 6,
  kEngineMediaEncodeSingle = 7,
  kEngineCopySingle = 8,
  kEngineMediaEnhancementSingle = 9,
  kEngine3dSingle = 10,
  kEngine3dRenderComputeAll = 11,
  kEngineRenderAll = 12,
  kEngine3dAll = 13,
};
struct EngineProperties { // zes_engine_properties_t
  uint32_t stype;
  void* pNext;
  uint32_t type; // EngineGroup
  Bool onSubdevice;
  uint32_t subdeviceId;
};
struct EngineStats {   // zes_engine_stats_t
  uint64_t activeTime; // µs the group was busy
  uint64_t timestamp;  // µs, of the reading
};

inline constexpr uint32_t kMemLocDevice = 1; // ZES_MEM_LOC_DEVICE (0 is system memory)
struct MemProperties {                       // zes_mem_properties_t
  uint32_t stype;
  void* pNext;
  uint32_t type;
  Bool onSubdevice;
  uint32_t subdeviceId;
  uint32_t location; // zes_mem_loc_t
  uint64_t physicalSize;
  int32_t busWidth;
  int32_t numChannels;
};
struct MemState { // zes_mem_state_t
  uint32_t stype;
  const void* pNext;
  uint32_t health;
  uint64_t free; // bytes
  uint64_t size; // bytes
};

enum FreqDomain : uint32_t { kFreqGpu = 0, kFreqMemory = 1 }; // zes_freq_domain_t
struct FreqProperties {                                       // zes_freq_properties_t
  uint32_t stype;
  void* pNext;
  uint32_t type; // FreqDomain
  Bool onSubdevice;
  uint32_t subdeviceId;
  Bool canControl;
  Bool isThrottleEventSupported;
  double min; // MHz
  double max; // MHz
};
struct FreqState { // zes_freq_state_t
  uint32_t stype;
  const void* pNext;
  double currentVoltage; // V; negative: unknown
  double request;        // MHz; negative: unknown
  double tdp;
  double efficient;
  double actual; // MHz the hardware runs at; negative: unknown
  uint32_t throttleReasons;
};

enum TempSensor : uint32_t { // zes_temp_sensors_t
  kTempGlobal = 0,
  kTempGpu = 1,
  kTempMemory = 2,
};
struct TempProperties { // zes_temp_properties_t
  uint32_t stype;
  void* pNext;
  uint32_t type; // TempSensor
  Bool onSubdevice;
  uint32_t subdeviceId;
  double maxTemperature;
  Bool isCriticalTempSupported;
  Bool isThreshold1Supported;
  Bool isThreshold2Supported;
};

struct ProcessState { // zes_process_state_t
  uint32_t stype;
  const void* pNext;
  uint32_t processId;
  uint64_t memSize;    // bytes of device memory it allocated
  uint64_t sharedSize; // bytes of it shared with other processes
  uint32_t engines;    // zes_engine_type_flags_t
};

} // namespace wattscope::ze

// X(member, params, args, symbol). Every function returns ze_result_t. None is required on its own: the loader wants
// either zesInit + zesDriverGet + zesDeviceGet (Sysman without the core driver) or zeInit + zeDriverGet +
// zeDeviceGet (older loaders, Sysman through ZES_ENABLE_SYSMAN=1); every other symbol is optional and its metric is
// missing where the library lacks it.
#define WATTSCOPE_ZE_ENTRY_POINTS(X)                                                                                   \
  X(ses_init, (uint32_t flags), (flags), zesInit)                                                                      \
  X(ses_driver_get, (uint32_t * count, Driver * drivers), (count, drivers), zesDriverGet)                              \
  X(ses_device_get, (Driver driver, uint32_t * count, Device * devices), (driver, count, devices), zesDeviceGet)       \
  X(core_init, (uint32_t flags), (flags), zeInit)                                                                      \
  X(core_driver_get, (uint32_t * count, Driver * drivers), (count, drivers), zeDriverGet)                              \
  X(core_device_get, (Driver driver, uint32_t * count, Device * devices), (driver, count, devices), zeDeviceGet)       \
  X(device_properties, (Device d, DeviceProperties * p), (d, p), zesDeviceGetProperties)                               \
  X(device_pci_properties, (Device d, PciProperties * p), (d, p), zesDevicePciGetProperties)                           \
  X(enum_power_domains, (Device d, uint32_t * count, Power * handles), (d, count, handles), zesDeviceEnumPowerDomains) \
  X(card_power_domain, (Device d, Power * handle), (d, handle), zesDeviceGetCardPowerDomain)                           \
  X(power_properties, (Power h, PowerProperties * p), (h, p), zesPowerGetProperties)                                   \
  X(power_energy_counter, (Power h, PowerEnergyCounter * e), (h, e), zesPowerGetEnergyCounter)                         \
  X(enum_engine_groups, (Device d, uint32_t * count, Engine * handles), (d, count, handles),                           \
    zesDeviceEnumEngineGroups)                                                                                         \
  X(engine_properties, (Engine h, EngineProperties * p), (h, p), zesEngineGetProperties)                               \
  X(engine_activity, (Engine h, EngineStats * s), (h, s), zesEngineGetActivity)                                        \
  X(enum_memory_modules, (Device d, uint32_t * count, Memory * handles), (d, count, handles),                          \
    zesDeviceEnumMemoryModules)                                                                                        \
  X(memory_properties, (Memory h, MemProperties * p), (h, p), zesMemoryGetProperties)                                  \
  X(memory_state, (Memory h, MemState * s), (h, s), zesMemoryGetState)                                                 \
  X(enum_frequency_domains, (Device d, uint32_t * count, Frequency * handles), (d, count, handles),                    \
    zesDeviceEnumFrequencyDomains)                                                                                     \
  X(frequency_properties, (Frequency h, FreqProperties * p), (h, p), zesFrequencyGetProperties)                        \
  X(frequency_state, (Frequency h, FreqState * s), (h, s), zesFrequencyGetState)                                       \
  X(enum_temperature_sensors, (Device d, uint32_t * count, Temperature * handles), (d, count, handles),                \
    zesDeviceEnumTemperatureSensors)                                                                                   \
  X(temperature_properties, (Temperature h, TempProperties * p), (h, p), zesTemperatureGetProperties)                  \
  X(temperature_state, (Temperature h, double* celsius), (h, celsius), zesTemperatureGetState)                         \
  X(processes_state, (Device d, uint32_t * count, ProcessState * procs), (d, count, procs), zesDeviceProcessesGetState)
