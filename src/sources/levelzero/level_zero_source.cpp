#include "sources/levelzero/level_zero_source.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sources/dl_open.hpp"

namespace wattscope {

using namespace ze;

namespace {

using Dev = LevelZeroSource::Dev;

std::string cstr(const char* buf, size_t n) {
  return std::string(buf, strnlen(buf, n));
}

bool lost_code(Result rc) {
  return rc == kErrorDeviceLost || rc == kErrorDeviceRequiresReset;
}
// A property of the device or driver, not of the moment: the handle is not asked again.
bool property_error(Result rc) {
  return rc == kErrorUnsupportedFeature || rc == kErrorUnsupportedVersion || rc == kErrorInsufficientPermissions ||
         rc == kErrorUnsupportedEnumeration || rc == kErrorInvalidArgument || rc == kErrorInvalidNullHandle ||
         rc == kErrorInvalidEnumeration || rc == kErrorDependencyUnavailable;
}

// The two-call idiom of Level Zero's enumerations: the count first, then the handles.
template <class H, class Fn> Result enumerate(Fn&& fn, std::vector<H>& out) {
  out.clear();
  uint32_t count = 0;
  Result rc = fn(&count, nullptr);
  if (rc != kSuccess || count == 0) return rc;
  out.resize(std::min<uint32_t>(count, 256));
  count = static_cast<uint32_t>(out.size());
  rc = fn(&count, out.data());
  out.resize(rc == kSuccess ? std::min<size_t>(count, out.size()) : 0);
  return rc;
}

const char* domain_word(uint32_t kind) {
  switch (kind) {
  case kPowerDomainCard:
    return "card";
  case kPowerDomainPackage:
    return "package";
  case kPowerDomainStack:
    return "stack";
  default:
    return "unknown";
  }
}
// power_source strings live for the run: one per kind of domain the device's energy comes from.
const char* power_source_of(uint32_t kind, bool stacks) {
  if (stacks) return "level zero energy counter (sum of stacks)";
  switch (kind) {
  case kPowerDomainCard:
    return "level zero energy counter (card)";
  case kPowerDomainPackage:
    return "level zero energy counter (package)";
  default:
    return "level zero energy counter";
  }
}

const char* engine_word(uint32_t type) {
  switch (type) {
  case kEngineAll:
    return "all";
  case kEngineComputeAll:
    return "compute_all";
  case kEngineMediaAll:
    return "media_all";
  case kEngineCopyAll:
    return "copy_all";
  case kEngineComputeSingle:
    return "compute";
  case kEngineRenderSingle:
    return "render";
  case kEngineMediaDecodeSingle:
    return "media_decode";
  case kEngineMediaEncodeSingle:
    return "media_encode";
  case kEngineCopySingle:
    return "copy";
  case kEngineMediaEnhancementSingle:
    return "media_enhancement";
  case kEngine3dSingle:
    return "3d";
  case kEngine3dRenderComputeAll:
    return "3d_render_compute_all";
  case kEngineRenderAll:
    return "render_all";
  case kEngine3dAll:
    return "3d_all";
  default:
    return "other";
  }
}

struct Busy {
  uint32_t type;
  bool on_subdevice;
  uint32_t subdevice;
  double pct;
};
// One figure for a set of engine groups: where the device itself reports a group, the busiest of those; where only its
// stacks (sub-devices) do, the busiest group per stack averaged over the stacks (the device's share of busy time).
OptF combine(const std::vector<Busy>& busy, std::span<const uint32_t> types) {
  auto wanted = [&](const Busy& b) { return std::find(types.begin(), types.end(), b.type) != types.end(); };
  OptF device;
  std::map<uint32_t, double> per_stack;
  for (const auto& b : busy) {
    if (!wanted(b)) continue;
    if (!b.on_subdevice)
      device = std::max(device.value_or(0.0), b.pct);
    else
      per_stack[b.subdevice] = std::max(per_stack[b.subdevice], b.pct);
  }
  if (device) return device;
  if (per_stack.empty()) return std::nullopt;
  double sum = 0;
  for (const auto& [stack, pct] : per_stack)
    sum += pct;
  return sum / static_cast<double>(per_stack.size());
}
// The tier of groups utilisation is read from: the engines-all group where the driver has it, else compute and render
// together, else the single compute/render engines.
constexpr uint32_t kAll[] = {kEngineAll};
constexpr uint32_t kGroups[] = {kEngineComputeAll, kEngineRenderAll, kEngine3dRenderComputeAll, kEngine3dAll};
constexpr uint32_t kSingles[] = {kEngineComputeSingle, kEngineRenderSingle, kEngine3dSingle};
constexpr uint32_t kEncode[] = {kEngineMediaEncodeSingle};
constexpr uint32_t kDecode[] = {kEngineMediaDecodeSingle};
std::span<const uint32_t> util_tier(const std::vector<LevelZeroSource::EngineGroup>& engines) {
  auto has = [&](std::span<const uint32_t> types) {
    for (const auto& e : engines)
      if (e.on && std::find(types.begin(), types.end(), e.type) != types.end()) return true;
    return false;
  };
  if (has(kAll)) return kAll;
  if (has(kGroups)) return kGroups;
  return kSingles;
}

} // namespace

// ---- EnergyCounter ----
EnergyCounter::Step EnergyCounter::add(uint64_t energy_uj, uint64_t ts_us, double elapsed_s) {
  Step st;
  if (!seen_) {
    seen_ = true;
    last_uj_ = energy_uj;
    last_ts_us_ = ts_us;
    return st;
  }
  const double dt_s = ts_us > last_ts_us_ ? static_cast<double>(ts_us - last_ts_us_) / 1e6 : elapsed_s;
  // The most a card could draw in the interval (and at least a second of it): a wrap's remainder is far below.
  const double bound_uj = kMaxPlausibleW * std::max(dt_s, 1.0) * 1e6;
  if (energy_uj >= last_uj_) {
    st.delta_uj = energy_uj - last_uj_;
  } else if (const uint64_t d64 = energy_uj - last_uj_; static_cast<double>(d64) <= bound_uj) {
    st.delta_uj = d64; // unsigned arithmetic: the 64-bit wrap's exact remainder
    st.wrapped = true;
  } else if (const uint64_t d32 = energy_uj + (uint64_t{1} << 32) - last_uj_;
             last_uj_ < (uint64_t{1} << 32) && static_cast<double>(d32) <= bound_uj) {
    st.delta_uj = d32;
    st.wrapped = true;
  } else {
    st.reset = true;
  }
  if (!st.reset && dt_s > 0) st.power_w = static_cast<double>(st.delta_uj) / 1e6 / dt_s;
  total_uj_ += static_cast<int64_t>(st.delta_uj);
  last_uj_ = energy_uj;
  last_ts_us_ = ts_us;
  return st;
}

// ---- LevelZeroSource ----
LevelZeroSource::Options LevelZeroSource::Options::from_env() {
  Options o;
  if (const char* p = std::getenv("WATTSCOPE_LEVEL_ZERO_LIBRARY")) o.library_path = p;
  return o;
}

LevelZeroSource::LevelZeroSource(Options opts) : opts_(std::move(opts)) {}
LevelZeroSource::~LevelZeroSource() = default; // Level Zero has no shutdown call; dlclose happens in ~Library

bool LevelZeroSource::open() {
  // Issue 30: the system loader only where an Intel display controller is on the PCI bus. Initialising it elsewhere
  // (Debian's libze1 is often installed without an Intel GPU) makes its driver complain on stderr.
  if (opts_.library_path.empty() && pci_bus_has_gpu(opts_.sysfs_root, 0x8086, false) == false) {
    status_ = SourceStatus::missing("no Intel GPU on the PCI bus", "none needed unless this machine has an Intel GPU");
    return false;
  }
  std::string why;
  bool not_found = false;
  lib_ = Library::load(opts_.library_path, why, not_found);
  const std::string fix_install =
      "none needed unless this machine has an Intel GPU; then install the Level Zero loader (Debian: libze1) and "
      "Intel's GPU driver for it (intel-level-zero-gpu from Intel's compute-runtime), or set "
      "WATTSCOPE_LEVEL_ZERO_LIBRARY to the loader's path";
  if (!lib_) {
    // Named by the variable, or found but not a usable loader: said; none installed: quiet.
    status_ = SourceStatus::not_loaded(fmt::format("no Intel GPU recorded through Level Zero: {}", why), fix_install,
                                       !not_found);
    return false;
  }
  for (const auto& m : lib_->missing())
    spdlog::debug("level-zero: {} lacks {}; what it reads is missing", lib_->path(), m);
  // zesInit brings up Sysman alone; older loaders have only zeInit, which enables Sysman when ZES_ENABLE_SYSMAN=1 is
  // set before it. Issue 30: set for that call only (unless the user set it) and taken away again at once, so the
  // recorded command runs with exactly the environment it was given: the loader and the GPU driver read it in zeInit.
  Result rc;
  std::vector<Driver> drivers;
  StderrToDebugLog quiet("level-zero"); // issue 30: a driver's own complaints while it starts go to the debug log
  if (lib_->has_sysman_init()) {
    init_call_ = "zesInit";
    rc = lib_->ses_init(0);
    if (rc == kSuccess)
      rc = enumerate<Driver>([&](uint32_t* n, Driver* d) { return lib_->ses_driver_get(n, d); }, drivers);
  } else {
    init_call_ = "zeInit";
    const bool set_here = std::getenv("ZES_ENABLE_SYSMAN") == nullptr;
    if (set_here) ::setenv("ZES_ENABLE_SYSMAN", "1", 0);
    rc = lib_->core_init(1); // ZE_INIT_FLAG_GPU_ONLY
    if (set_here) ::unsetenv("ZES_ENABLE_SYSMAN");
    if (rc == kSuccess)
      rc = enumerate<Driver>([&](uint32_t* n, Driver* d) { return lib_->core_driver_get(n, d); }, drivers);
  }
  quiet.finish();
  if (rc != kSuccess) {
    // The loader without a GPU driver answers UNINITIALIZED: the machine has no Level Zero GPU, the usual case.
    status_ = SourceStatus::missing(
        fmt::format("no Intel GPU recorded through Level Zero: {} failed with {}{}", init_call_, error_name(rc),
                    rc == kErrorUninitialized ? " (the loader found no GPU driver)" : ""),
        rc == kErrorUninitialized ? fix_install
                                  : "check the Intel GPU driver installation (the compute runtime and the i915 or xe "
                                    "kernel driver); the user needs access to /dev/dri/renderD*");
    if (rc != kErrorUninitialized) status_.state = SourceStatus::State::Error;
    return false;
  }
  for (Driver drv : drivers) {
    std::vector<Device> devices;
    const Result drc = enumerate<Device>(
        [&](uint32_t* n, Device* d) {
          return lib_->has_sysman_init() ? lib_->ses_device_get(drv, n, d) : lib_->core_device_get(drv, n, d);
        },
        devices);
    if (drc != kSuccess) {
      spdlog::warn("level-zero: listing a driver's devices failed with {}; they are not recorded", error_name(drc));
      continue;
    }
    for (Device h : devices)
      open_device(h);
  }
  if (devs_.empty()) {
    status_ = SourceStatus::missing("Level Zero found no GPU", "none needed unless this machine has an Intel GPU");
    return false;
  }
  bool power = false;
  for (const auto& d : devs_)
    power = power || !d->energy_domains.empty();
  status_ = SourceStatus::ok(
      fmt::format("{} Intel GPU(s) via Level Zero Sysman ({}, {})", devs_.size(), lib_->path(), init_call_), power);
  return true;
}

namespace {

// The device's name, uuid and PCI bus id, from its properties where the driver answers them.
void describe_device(const Library& lib, Device h, GpuDevice& info) {
  if (lib.device_properties) {
    DeviceProperties p{};
    p.stype = kStypeDeviceProperties;
    p.core.stype = kStypeCoreDeviceProperties;
    if (lib.device_properties(h, &p) == kSuccess) {
      std::string model = cstr(p.modelName, sizeof p.modelName);
      info.name = !model.empty() ? model : cstr(p.core.name, sizeof p.core.name);
      std::string uuid = "L0-";
      for (size_t i = 0; i < sizeof p.core.uuid; ++i)
        uuid += fmt::format("{:02x}{}", p.core.uuid[i], i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
      info.uuid = uuid;
    }
  }
  if (lib.device_pci_properties) {
    PciProperties p{};
    p.stype = kStypePciProperties;
    if (lib.device_pci_properties(h, &p) == kSuccess)
      info.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", p.address.domain, p.address.bus, p.address.device,
                                    p.address.function);
  }
  if (info.uuid.empty()) info.uuid = info.pci_bus_id.empty() ? "" : "PCI-" + info.pci_bus_id;
  if (info.name.empty()) info.name = "Intel GPU (Level Zero)";
}

// Every power domain of the device, with the card's marked where the driver names it.
void find_power_domains(const Library& lib, Device h, Dev& d) {
  if (lib.enum_power_domains) {
    std::vector<Power> hs;
    enumerate<Power>([&](uint32_t* n, Power* p) { return lib.enum_power_domains(h, n, p); }, hs);
    for (Power ph : hs) {
      LevelZeroSource::PowerDomain pd;
      pd.h = ph;
      if (lib.power_properties) {
        PowerExtProperties ext{};
        ext.stype = kStypePowerExtProperties;
        PowerProperties p{};
        p.stype = kStypePowerProperties;
        p.pNext = &ext;
        if (lib.power_properties(ph, &p) == kSuccess) {
          pd.on_subdevice = p.onSubdevice != 0;
          pd.subdevice = p.subdeviceId;
          pd.kind = ext.domain; // drivers before spec 1.4 ignore pNext: unknown
        }
      }
      d.domains.push_back(pd);
    }
  }
  Power card = nullptr;
  if (lib.card_power_domain && lib.card_power_domain(h, &card) == kSuccess && card) {
    auto it = std::find_if(d.domains.begin(), d.domains.end(),
                           [&](const LevelZeroSource::PowerDomain& p) { return p.h == card; });
    if (it == d.domains.end()) {
      LevelZeroSource::PowerDomain pd;
      pd.h = card;
      d.domains.push_back(pd);
      it = d.domains.end() - 1;
    }
    it->kind = kPowerDomainCard;
    it->on_subdevice = false;
  }
}

// The domains whose counters are the device's energy: the card's where the driver names it, else the device-level
// package domain, else any device-level one, else every stack's summed.
void choose_energy_domains(const Library& lib, Dev& d) {
  if (!lib.power_energy_counter || d.domains.empty()) return;
  using PD = LevelZeroSource::PowerDomain;
  auto pick = [&](auto&& pred) {
    for (size_t i = 0; i < d.domains.size(); ++i)
      if (pred(d.domains[i])) return static_cast<int>(i);
    return -1;
  };
  int i = pick([](const PD& p) { return p.kind == kPowerDomainCard; });
  if (i < 0) i = pick([](const PD& p) { return !p.on_subdevice && p.kind == kPowerDomainPackage; });
  if (i < 0) i = pick([](const PD& p) { return !p.on_subdevice; });
  if (i >= 0) {
    d.energy_domains.push_back(static_cast<size_t>(i));
    d.power_source = power_source_of(d.domains[static_cast<size_t>(i)].kind, false);
  } else {
    for (size_t k = 0; k < d.domains.size(); ++k)
      d.energy_domains.push_back(k);
    d.power_source = power_source_of(kPowerDomainStack, true);
  }
  d.info.power_source = d.power_source;
}

// The engine groups whose activity is read, each of a kind the driver names.
void find_engine_groups(const Library& lib, Device h, Dev& d) {
  if (!lib.enum_engine_groups || !lib.engine_activity) return;
  std::vector<Engine> hs;
  enumerate<Engine>([&](uint32_t* n, Engine* p) { return lib.enum_engine_groups(h, n, p); }, hs);
  for (Engine eh : hs) {
    LevelZeroSource::EngineGroup e;
    e.h = eh;
    EngineProperties p{};
    p.stype = kStypeEngineProperties;
    if (!lib.engine_properties || lib.engine_properties(eh, &p) != kSuccess) continue; // a group of no known kind
    e.type = p.type;
    e.on_subdevice = p.onSubdevice != 0;
    e.subdevice = p.subdeviceId;
    d.engines.push_back(e);
  }
}

// The device-local memory modules, and the device's memory size where every module tells its own.
void find_memory_modules(const Library& lib, Device h, Dev& d) {
  if (!lib.enum_memory_modules || !lib.memory_state) return;
  std::vector<Memory> hs;
  enumerate<Memory>([&](uint32_t* n, Memory* p) { return lib.enum_memory_modules(h, n, p); }, hs);
  int64_t total = 0;
  bool sized = true;
  for (Memory mh : hs) {
    LevelZeroSource::Handle<Memory> m;
    m.h = mh;
    MemProperties p{};
    p.stype = kStypeMemProperties;
    if (lib.memory_properties && lib.memory_properties(mh, &p) == kSuccess) {
      if (p.location != kMemLocDevice) continue; // system memory a module maps is not the GPU's
      m.on_subdevice = p.onSubdevice != 0;
      m.subdevice = p.subdeviceId;
      total += static_cast<int64_t>(p.physicalSize);
      sized = sized && p.physicalSize > 0;
    } else {
      sized = false;
    }
    m.type = kMemLocDevice;
    d.memory.push_back(m);
  }
  if (!d.memory.empty() && sized) d.info.mem_total_bytes = total;
}

// The frequency domains, and the device's maximum clocks from them.
void find_frequency_domains(const Library& lib, Device h, Dev& d) {
  if (!lib.enum_frequency_domains || !lib.frequency_state) return;
  std::vector<Frequency> hs;
  enumerate<Frequency>([&](uint32_t* n, Frequency* p) { return lib.enum_frequency_domains(h, n, p); }, hs);
  for (Frequency fh : hs) {
    LevelZeroSource::Handle<Frequency> f;
    f.h = fh;
    FreqProperties p{};
    p.stype = kStypeFreqProperties;
    if (!lib.frequency_properties || lib.frequency_properties(fh, &p) != kSuccess) continue;
    f.type = p.type;
    f.on_subdevice = p.onSubdevice != 0;
    f.subdevice = p.subdeviceId;
    if (p.type == kFreqMemory && p.max > 0) d.info.clock_mem_max_mhz = static_cast<int64_t>(p.max);
    // Issue 30: the GPU domain's maximum is the device's maximum shader clock (the highest of its stacks').
    if (p.type == kFreqGpu && p.max > 0 && p.max < 1e6)
      d.info.clock_sm_max_mhz =
          std::max<int64_t>(d.info.clock_sm_max_mhz.value_or(0), static_cast<int64_t>(std::llround(p.max)));
    d.frequency.push_back(f);
  }
}

// The temperature sensors, each of a type the driver names.
void find_temperature_sensors(const Library& lib, Device h, Dev& d) {
  if (!lib.enum_temperature_sensors || !lib.temperature_state) return;
  std::vector<Temperature> hs;
  enumerate<Temperature>([&](uint32_t* n, Temperature* p) { return lib.enum_temperature_sensors(h, n, p); }, hs);
  for (Temperature th : hs) {
    LevelZeroSource::Handle<Temperature> t;
    t.h = th;
    TempProperties p{};
    p.stype = kStypeTempProperties;
    if (!lib.temperature_properties || lib.temperature_properties(th, &p) != kSuccess) continue;
    t.type = p.type;
    t.on_subdevice = p.onSubdevice != 0;
    t.subdevice = p.subdeviceId;
    // The GPU sensor's maximum (zes_temp_properties_t.maxTemperature) is where the device starts to throttle.
    if (p.type == kTempGpu && !p.onSubdevice && p.maxTemperature > 0 && p.maxTemperature < 200)
      d.info.slowdown_temp_c = p.maxTemperature;
    d.temperature.push_back(t);
  }
}

} // namespace

void LevelZeroSource::open_device(Device h) {
  auto d = std::make_unique<Dev>();
  d->h = h;
  d->info.vendor = "intel";
  d->info.gpu_index = static_cast<int>(devs_.size());
  describe_device(*lib_, h, d->info);
  find_power_domains(*lib_, h, *d);
  choose_energy_domains(*lib_, *d);
  find_engine_groups(*lib_, h, *d);
  find_memory_modules(*lib_, h, *d);
  find_frequency_domains(*lib_, h, *d);
  find_temperature_sensors(*lib_, h, *d);
  devs_.push_back(std::move(d));
}

std::vector<GpuDevice> LevelZeroSource::devices() const {
  std::vector<GpuDevice> out;
  for (const auto& d : devs_)
    out.push_back(d->info);
  return out;
}

void LevelZeroSource::set_first_index(int first) {
  for (size_t i = 0; i < devs_.size(); ++i)
    devs_[i]->info.gpu_index = first + static_cast<int>(i);
}

// Only a GPU some backend before this one (NVML) records: no Intel GPU in practice, but one rule for all backends.
size_t LevelZeroSource::release_claimed(const std::vector<std::string>& bus_ids) {
  const size_t before = devs_.size();
  std::erase_if(devs_, [&](const std::unique_ptr<Dev>& d) {
    const std::string id = normalize_pci_bus_id(d->info.pci_bus_id);
    return !id.empty() && std::find(bus_ids.begin(), bus_ids.end(), id) != bus_ids.end();
  });
  return before - devs_.size();
}

const char* LevelZeroSource::group_call(Group g) {
  switch (g) {
  case gEnergy:
    return "zesPowerGetEnergyCounter";
  case gEngine:
    return "zesEngineGetActivity";
  case gMemory:
    return "zesMemoryGetState";
  case gFrequency:
    return "zesFrequencyGetState";
  default:
    return "zesTemperatureGetState";
  }
}

GpuMetricSet LevelZeroSource::fills(Group g) {
  using M = GpuMetric;
  switch (g) {
  case gEnergy: // the counters feed accounting (not a registry member); their differences are the power
    return metric_bit(M::power_w);
  case gEngine:
    return metric_bit(M::util_gpu_pct) | metric_bit(M::util_enc_pct) | metric_bit(M::util_dec_pct);
  case gMemory:
    return metric_bit(M::mem_total_bytes) | metric_bit(M::mem_free_bytes) | metric_bit(M::mem_used_bytes);
  case gFrequency:
    return metric_bit(M::clock_gfx_mhz) | metric_bit(M::clock_mem_mhz);
  default:
    return metric_bit(M::temp_gpu_c) | metric_bit(M::temp_mem_c);
  }
}

namespace {

// Whether a call's answer may be used. A lost device is marked (with an event, once); a property error switches `on`
// off; anything else (NOT_AVAILABLE, UNKNOWN, ...) is missing this tick and asked again next tick.
bool answered(Dev& d, Result rc, const char* call, bool& on, Frame& frame) {
  if (rc == kSuccess) return true;
  if (lost_code(rc)) {
    if (!d.lost.exchange(true)) {
      frame.events.push_back({0, frame.ts_ms, "device-lost", fmt::format("gpu{}", d.info.gpu_index),
                              fmt::format("Intel GPU {} ({}) stopped answering: {} returned {}; no further samples "
                                          "from it in this run",
                                          d.info.gpu_index, d.info.pci_bus_id, call, error_name(rc))});
      spdlog::warn("GPU {} is lost ({}); the other devices keep recording", d.info.gpu_index, error_name(rc));
    }
    return false;
  }
  if (property_error(rc)) {
    on = false;
    spdlog::debug("GPU {}: {} answered {}; recorded as missing", d.info.gpu_index, call, error_name(rc));
  }
  return false;
}

// issue 33: a group of calls is read when due (every tick while it costs less than the budget), else its metrics are
// carried with their age. The run's last tick reads the counters whether due or not, so the run ends on a counter
// reading. False when the device was lost during the group's calls.
template <class Read>
bool read_group(Dev& d, LevelZeroSource::Group g, const LevelZeroSource::Options& opts, Frame& frame, GpuSample& s,
                Read&& read) {
  using LZ = LevelZeroSource;
  ReadCost& cost = d.cost[g];
  if (!cost.due(frame.mono) && !(g == LZ::gEnergy && frame.last)) {
    carry_metrics(d.held, LZ::fills(g), cost.last, frame.mono, s);
    return true;
  }
  const bool timing = cost.timing();
  const auto t0 = timing ? SteadyClock::now() : SteadyClock::time_point{};
  read();
  if (d.lost) return false;
  const auto natural = g == LZ::gEnergy ? opts.energy_period : opts.cost.costly_period;
  if (timing && cost.time(SteadyClock::now() - t0, frame.mono, opts.cost, natural)) {
    const double us = std::chrono::duration<double, std::micro>(cost.measured).count();
    if (cost.period.count() > 0)
      spdlog::info("Intel GPU {}: {} costs {:.0f} us a tick (budget {} us); read at most every {} ms, the ticks "
                   "between carry the last reading with its age",
                   d.info.gpu_index, LZ::group_call(g), us,
                   std::chrono::duration_cast<std::chrono::microseconds>(opts.cost.max_read_cost).count(),
                   std::chrono::duration_cast<std::chrono::milliseconds>(cost.period).count());
    else
      spdlog::info("Intel GPU {}: {} now costs {:.0f} us a tick; read every tick again", d.info.gpu_index,
                   LZ::group_call(g), us);
  }
  cost.read_at(frame.mono);
  hold_metrics(d.held, LZ::fills(g), s);
  return true;
}

// Energy: every domain's counter (doctor shows each); the device's from its chosen domains, missing unless each of
// them answered this tick.
void read_energy(const Library& lib, Dev& d, Frame& frame, GpuSample& s) {
  for (auto& pd : d.domains) {
    pd.power_w.reset();
    if (!pd.on || !lib.power_energy_counter) continue;
    PowerEnergyCounter e{};
    const Result rc = lib.power_energy_counter(pd.h, &e);
    if (!answered(d, rc, "zesPowerGetEnergyCounter", pd.on, frame)) {
      if (d.lost) return;
      continue;
    }
    const double elapsed = pd.last_read == SteadyClock::time_point{}
                               ? 0
                               : std::chrono::duration<double>(frame.mono - pd.last_read).count();
    const auto step = pd.counter.add(e.energy, e.timestamp, elapsed);
    pd.read_uj = e.energy;
    pd.last_read = frame.mono;
    pd.power_w = step.power_w;
    if (step.reset)
      frame.events.push_back(
          {0, frame.ts_ms, "device-error", fmt::format("gpu{}", d.info.gpu_index),
           fmt::format("Intel GPU {}: the {} energy counter went back ({} µJ); counted on from there "
                       "(a driver reload?)",
                       d.info.gpu_index, domain_word(pd.kind), e.energy)});
  }
  if (d.energy_domains.empty()) return;
  int64_t total = 0;
  double power = 0;
  bool all = true, powered = true;
  for (size_t i : d.energy_domains) {
    const auto& pd = d.domains[i];
    // A domain that did not answer this tick (pd.last_read is this tick's mono when it did) leaves both missing.
    all = all && pd.on && pd.counter.seen() && pd.last_read == frame.mono;
    powered = powered && pd.power_w.has_value();
    total += pd.counter.total_uj();
    power += pd.power_w.value_or(0);
  }
  if (all) s.energy_counter_uj = total;
  if (all && powered) {
    s.power_w = power;
    s.power_source = d.power_source;
  }
}

// Engine utilisation: busy time over elapsed time between two readings of each group.
void read_engines(const Library& lib, Dev& d, Frame& frame, GpuSample& s) {
  std::vector<Busy> busy;
  for (auto& e : d.engines) {
    if (!e.on) continue;
    EngineStats st{};
    const Result rc = lib.engine_activity(e.h, &st);
    if (!answered(d, rc, "zesEngineGetActivity", e.on, frame)) {
      if (d.lost) return;
      continue;
    }
    if (e.seen && st.timestamp > e.last_ts_us && st.activeTime >= e.last_active_us) {
      const double pct = 100.0 * static_cast<double>(st.activeTime - e.last_active_us) /
                         static_cast<double>(st.timestamp - e.last_ts_us);
      busy.push_back({e.type, e.on_subdevice, e.subdevice, std::clamp(pct, 0.0, 100.0)});
    }
    e.seen = true;
    e.last_active_us = st.activeTime;
    e.last_ts_us = st.timestamp;
  }
  s.util_gpu_pct = combine(busy, util_tier(d.engines));
  s.util_enc_pct = combine(busy, kEncode);
  s.util_dec_pct = combine(busy, kDecode);
}

// Device memory: every device-local module together; missing unless each answered.
void read_memory(const Library& lib, Dev& d, Frame& frame, GpuSample& s) {
  int64_t size = 0, free = 0;
  bool all = true;
  for (auto& m : d.memory) {
    if (!m.on) {
      all = false;
      continue;
    }
    MemState st{};
    st.stype = kStypeMemState;
    const Result rc = lib.memory_state(m.h, &st);
    if (!answered(d, rc, "zesMemoryGetState", m.on, frame)) {
      if (d.lost) return;
      all = false;
      continue;
    }
    size += static_cast<int64_t>(st.size);
    free += static_cast<int64_t>(st.free);
  }
  if (all) {
    s.mem_total_bytes = size;
    s.mem_free_bytes = free;
    s.mem_used_bytes = size - free;
  }
}

// Frequencies: the device's own domain where it has one, else the fastest stack.
void read_frequencies(const Library& lib, Dev& d, Frame& frame, GpuSample& s) {
  OptF gpu_dev, gpu_stack, mem_dev, mem_stack;
  for (auto& f : d.frequency) {
    if (!f.on) continue;
    FreqState st{};
    st.stype = kStypeFreqState;
    const Result rc = lib.frequency_state(f.h, &st);
    if (!answered(d, rc, "zesFrequencyGetState", f.on, frame)) {
      if (d.lost) return;
      continue;
    }
    if (st.actual < 0 || (f.type != kFreqGpu && f.type != kFreqMemory)) continue; // negative: the driver cannot tell
    OptF& slot = f.type == kFreqGpu ? (f.on_subdevice ? gpu_stack : gpu_dev) : (f.on_subdevice ? mem_stack : mem_dev);
    slot = std::max(slot.value_or(0.0), st.actual);
  }
  if (auto g = gpu_dev ? gpu_dev : gpu_stack) s.clock_gfx_mhz = static_cast<int64_t>(*g + 0.5);
  if (auto m = mem_dev ? mem_dev : mem_stack) s.clock_mem_mhz = static_cast<int64_t>(*m + 0.5);
}

// Temperatures: the hottest GPU sensor (the global one where there is none), the hottest memory sensor.
void read_temperatures(const Library& lib, Dev& d, Frame& frame, GpuSample& s) {
  OptF t_gpu, t_global, t_mem;
  for (auto& t : d.temperature) {
    if (!t.on || (t.type != kTempGpu && t.type != kTempGlobal && t.type != kTempMemory)) continue;
    double c = 0;
    const Result rc = lib.temperature_state(t.h, &c);
    if (!answered(d, rc, "zesTemperatureGetState", t.on, frame)) {
      if (d.lost) return;
      continue;
    }
    OptF& slot = t.type == kTempGpu ? t_gpu : t.type == kTempGlobal ? t_global : t_mem;
    slot = std::max(slot.value_or(-1e9), c);
  }
  s.temp_gpu_c = t_gpu ? t_gpu : t_global;
  s.temp_mem_c = t_mem;
}

} // namespace

void LevelZeroSource::sample_device(Dev& d, Frame& frame) {
  GpuSample s;
  s.gpu_index = d.info.gpu_index;
  const Library& lib = *lib_;
  if (!read_group(d, gEnergy, opts_, frame, s, [&] { read_energy(lib, d, frame, s); })) return;
  if (!read_group(d, gEngine, opts_, frame, s, [&] { read_engines(lib, d, frame, s); })) return;
  if (!d.memory.empty() && !read_group(d, gMemory, opts_, frame, s, [&] { read_memory(lib, d, frame, s); })) return;
  if (!read_group(d, gFrequency, opts_, frame, s, [&] { read_frequencies(lib, d, frame, s); })) return;
  if (!read_group(d, gTemperature, opts_, frame, s, [&] { read_temperatures(lib, d, frame, s); })) return;
  frame.gpus.push_back(std::move(s));
}

void LevelZeroSource::sample(Frame& frame) noexcept {
  try {
    for (auto& d : devs_)
      if (!d->lost) sample_device(*d, frame);
  } catch (...) {
    // allocation failure: the tick keeps what it has
  }
}

bool LevelZeroSource::lists_gpu_processes() const {
  return lib_ && lib_->processes_state;
}

void LevelZeroSource::gpu_processes(std::vector<GpuProcessSample>& out, std::vector<int>& listed) noexcept {
  try {
    std::lock_guard lock(proc_mu_);
    if (!lib_ || !lib_->processes_state) return;
    for (auto& dp : devs_) {
      Dev& d = *dp;
      if (d.lost || !d.processes_on) continue;
      std::vector<ProcessState> procs;
      Result rc = kSuccess;
      for (int attempt = 0; attempt < 3; ++attempt) { // a process may start between the count and the list
        uint32_t count = 0;
        rc = lib_->processes_state(d.h, &count, nullptr);
        if (rc != kSuccess) break;
        procs.assign(count + 4, ProcessState{});
        for (auto& p : procs)
          p.stype = kStypeProcessState;
        uint32_t room = static_cast<uint32_t>(procs.size());
        rc = lib_->processes_state(d.h, &room, procs.data());
        if (rc == kSuccess) {
          procs.resize(std::min<size_t>(room, procs.size()));
          break;
        }
        if (rc != kErrorInvalidSize) break;
      }
      if (rc != kSuccess) {
        if (property_error(rc)) d.processes_on = false; // lost is the sampler's to find and say
        continue;
      }
      for (const auto& p : procs) {
        GpuProcessSample g;
        g.id.pid = p.processId;
        g.gpu_index = d.info.gpu_index;
        g.mem_used_bytes = static_cast<int64_t>(p.memSize);
        out.push_back(g);
      }
      listed.push_back(d.info.gpu_index);
    }
  } catch (...) {
  }
}

nlohmann::json LevelZeroSource::report() const {
  nlohmann::json devs = nlohmann::json::array();
  for (const auto& d : devs_) {
    nlohmann::json domains = nlohmann::json::array();
    for (size_t i = 0; i < d->domains.size(); ++i) {
      const auto& pd = d->domains[i];
      domains.push_back({{"domain", domain_word(pd.kind)},
                         {"subdevice", pd.on_subdevice ? nlohmann::json(pd.subdevice) : nlohmann::json()},
                         {"energy_counter", pd.on && lib_->power_energy_counter},
                         {"device_energy",
                          std::find(d->energy_domains.begin(), d->energy_domains.end(), i) != d->energy_domains.end()},
                         // issue 30: the counter as read (µJ since the driver's own origin), not the energy
                         // counted since open (0 after doctor's single read)
                         {"energy_uj", pd.read_uj ? nlohmann::json(*pd.read_uj) : nlohmann::json()}});
    }
    nlohmann::json engines = nlohmann::json::array();
    for (const auto& e : d->engines)
      if (e.on) engines.push_back(engine_word(e.type));
    auto any_on = [](const auto& v) { return std::any_of(v.begin(), v.end(), [](const auto& h) { return h.on; }); };
    nlohmann::json reads = nlohmann::json::object(); // issue 33: each timed group's cost a tick and period
    for (size_t g = 0; g < kGroupCount; ++g)
      if (const ReadCost& r = d->cost[g]; r.measured.count() >= 0)
        reads[group_call(static_cast<Group>(g))] = {
            {"cost_us", std::chrono::duration<double, std::micro>(r.measured).count()},
            {"period_ms", std::chrono::duration<double, std::milli>(r.period).count()}};
    devs.push_back({{"index", d->info.gpu_index},
                    {"reads", reads},
                    {"name", d->info.name},
                    {"uuid", d->info.uuid},
                    {"pci_bus_id", d->info.pci_bus_id},
                    {"lost", d->lost.load()},
                    {"power_domains", domains},
                    {"engine_groups", engines},
                    {"metrics",
                     {{"energy_counter", !d->energy_domains.empty()},
                      {"utilization", !engines.empty()},
                      {"memory", any_on(d->memory)},
                      {"frequency", any_on(d->frequency)},
                      {"temperature", any_on(d->temperature)},
                      {"processes", lib_->processes_state != nullptr && d->processes_on}}}});
  }
  return {{"library", lib_ ? lib_->path() : ""},
          {"init", init_call_},
          {"devices", devs},
          {"missing_functions", lib_ ? nlohmann::json(lib_->missing()) : nlohmann::json::array()}};
}

std::vector<std::string> LevelZeroSource::doctor_lines() const {
  std::vector<std::string> out;
  if (!lib_) return out;
  out.push_back(fmt::format("library {} · Sysman through {}", lib_->path(), init_call_));
  for (const auto& d : devs_) {
    std::string domains;
    for (size_t i = 0; i < d->domains.size(); ++i) {
      const auto& pd = d->domains[i];
      const bool used = std::find(d->energy_domains.begin(), d->energy_domains.end(), i) != d->energy_domains.end();
      domains += fmt::format("{}{}{}{}", domains.empty() ? "" : ", ", domain_word(pd.kind),
                             pd.on_subdevice ? fmt::format(" (stack {})", pd.subdevice) : "", used ? " [energy]" : "");
    }
    std::string engines;
    for (const auto& e : d->engines)
      if (e.on) engines += (engines.empty() ? "" : ", ") + std::string(engine_word(e.type));
    out.push_back(fmt::format("GPU {} {} {} · power domains: {} · engines: {}", d->info.gpu_index, d->info.name,
                              d->info.pci_bus_id, domains.empty() ? "none" : domains,
                              engines.empty() ? "none" : engines));
    // issue 33 (doctor -v): what each group of calls costs a tick on this machine and how often it is read
    if (spdlog::should_log(spdlog::level::debug))
      for (size_t g = 0; g < kGroupCount; ++g) {
        const ReadCost& r = d->cost[g];
        if (r.measured.count() < 0) continue;
        out.push_back(fmt::format(
            "  {:<26} {:>9.1f} us a tick · {}", group_call(static_cast<Group>(g)),
            std::chrono::duration<double, std::micro>(r.measured).count(),
            r.period.count() > 0
                ? fmt::format("read every {} ms (over the {} us budget)",
                              std::chrono::duration_cast<std::chrono::milliseconds>(r.period).count(),
                              std::chrono::duration_cast<std::chrono::microseconds>(opts_.cost.max_read_cost).count())
                : std::string("read every tick")));
      }
  }
  return out;
}

} // namespace wattscope
