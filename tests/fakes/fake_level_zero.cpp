// A stand-in libze_loader.so for tests. It exports the Level Zero entry points from the same X-macro list the loader
// uses (src/sources/levelzero/ze_api.hpp) and answers from a scenario file (WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO, JSON):
//
//   {"init_error": 0, "devices": [{
//      "name": "Intel(R) Data Center GPU Max 1550", "pci": [0, 58, 0, 0] (domain, bus, device, function),
//      "uuid": [16 bytes] (optional), "lost_at_tick": 5, "unsupported": ["engine_activity", ...],
//      "power_domains": [{"domain": "card" | "package" | "stack" | "unknown", "subdevice": 1 (absent: the device),
//                         "card": true (zesDeviceGetCardPowerDomain answers it), "energy_uj": V, "timestamp_us": V}],
//      "engines": [{"type": "all" | "compute_all" | "render_all" | "media_all" | "compute" | "render" |
//                   "media_decode" | "media_encode" | "copy", "subdevice": 0, "active_us": V, "timestamp_us": V}],
//      "memory": [{"location": "device" | "system", "size": V, "free": V, "physical_size": N}],
//      "frequency": [{"domain": "gpu" | "memory", "actual_mhz": V, "max_mhz": N}],
//      "temperature": [{"sensor": "gpu" | "memory" | "global", "celsius": V}],
//      "processes": [{"pid": 1234, "mem_bytes": N, "shared_bytes": N}]}]}
//
// A value V is a number (constant), a [list] (the k-th, the last repeats) or {"linear": [a, b]} (a + b*k), k counting
// that handle's reads from 0 (so, in a run, its tick). A read whose name is in the device's "unsupported" list
// ("energy_counter", "engine_activity", "memory_state", "frequency_state", "temperature_state", "processes",
// "pci_properties", "device_properties", "card_power_domain") answers ZE_RESULT_ERROR_UNSUPPORTED_FEATURE. From the
// first per-tick read with k = lost_at_tick on, every read of that device answers ZE_RESULT_ERROR_DEVICE_LOST.
// "errors":
// {"energy_counter": {"code": N, "ticks": [2]}} on a device makes those reads answer `code`.
// "call_cost_us": {"energy_counter": 300, ...} (top level) makes each per-tick read of that name spend that long, as a
// driver call does (issue 33: cost-aware reads): under 1000 us spinning on the CPU, longer asleep. No costs measured
// on an Intel driver are at hand: tests state the costs they assume.
//
// Sysman comes up through zesInit, or (as older loaders do) through zeInit with ZES_ENABLE_SYSMAN=1 in the
// environment: without it every zes* call after zeInit answers ZE_RESULT_ERROR_UNINITIALIZED, as the real driver does.
// The builds in tests/fakes/CMakeLists.txt differ only in the symbols they export.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sources/levelzero/ze_api.hpp"

using namespace wattscope::ze;
using json = nlohmann::json;

namespace {

// One component (power domain, engine group, ...) of a device: its spec and how often it was read.
struct Part {
  json spec;
  size_t device = 0;
  std::map<std::string, long long, std::less<>> reads;
};

struct FakeDevice {
  json spec;
  std::deque<Part> power, engines, memory, frequency, temperature; // deque: handles (pointers) stay valid
  std::map<std::string, long long, std::less<>> reads;
  bool lost = false; // a per-tick read answered DEVICE_LOST: so does everything after it
};

struct State {
  std::mutex mu;
  bool initialised = false;
  bool sysman = false; // zesInit, or zeInit with ZES_ENABLE_SYSMAN=1
  json scenario;
  std::deque<FakeDevice> devices;
  int driver_token = 0; // the one driver's handle points here
} g;

double eval(const json& v, long long k) {
  if (v.is_number()) return v.get<double>();
  if (v.is_array())
    return v.empty()
               ? 0
               : v[static_cast<size_t>(std::min<long long>(k, static_cast<long long>(v.size()) - 1))].get<double>();
  if (v.is_object() && v.contains("linear"))
    return v["linear"][0].get<double>() + v["linear"][1].get<double>() * static_cast<double>(k);
  return 0;
}
// Large counters (a wrap near 2^64) need more than a double's 53 bits: integers are read as such.
uint64_t eval_u64(const json& v, long long k) {
  const json* e = &v;
  if (v.is_array() && !v.empty())
    e = &v[static_cast<size_t>(std::min<long long>(k, static_cast<long long>(v.size()) - 1))];
  if (e->is_number_unsigned()) return e->get<uint64_t>();
  if (e->is_number_integer()) return static_cast<uint64_t>(e->get<int64_t>());
  return static_cast<uint64_t>(std::llround(eval(*e, k)));
}

FakeDevice* dev(Device d) {
  for (auto& fd : g.devices)
    if (reinterpret_cast<Device>(&fd) == d) return &fd;
  return nullptr;
}
template <class H> Part* part(H h, std::deque<Part> FakeDevice::*list) {
  for (auto& fd : g.devices)
    for (auto& p : fd.*list)
      if (reinterpret_cast<H>(&p) == h) return &p;
  return nullptr;
}

bool ready() {
  return g.initialised && g.sysman;
}

bool listed(const json& spec, const char* key, std::string_view name) {
  auto it = spec.find(key);
  if (it == spec.end() || !it->is_array()) return false;
  for (const auto& u : *it)
    if (u.is_string() && u.get_ref<const std::string&>() == name) return true;
  return false;
}

// The outcome of a per-tick read `name` on device fd, counted in `reads` (the component's, or the device's): lost,
// unsupported, a scripted error, or success with k, the read's number.
Result per_tick(FakeDevice& fd, std::map<std::string, long long, std::less<>>& reads, std::string_view name,
                long long& k) {
  if (auto costs = g.scenario.find("call_cost_us"); costs != g.scenario.end() && costs->is_object())
    if (auto c = costs->find(name); c != costs->end() && c->is_number()) {
      const auto us = std::chrono::duration<double, std::micro>(c->get<double>());
      if (us.count() >= 1000) {
        std::this_thread::sleep_for(us);
      } else {
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(us);
        while (std::chrono::steady_clock::now() < end) {
        }
      }
    }
  auto it = reads.find(name);
  if (it == reads.end()) it = reads.emplace(std::string(name), 0).first;
  k = it->second++;
  if (auto lost = fd.spec.find("lost_at_tick"); lost != fd.spec.end() && k >= lost->get<long long>()) fd.lost = true;
  if (fd.lost) return kErrorDeviceLost;
  if (auto errs = fd.spec.find("errors"); errs != fd.spec.end())
    if (auto e = errs->find(name); e != errs->end()) {
      bool hit = e->contains("from_tick") && k >= e->at("from_tick").get<long long>();
      for (const auto& t : e->value("ticks", json::array()))
        hit = hit || t.get<long long>() == k;
      if (hit) return e->value("code", kErrorUnknown);
    }
  if (listed(fd.spec, "unsupported", name)) return kErrorUnsupportedFeature;
  return kSuccess;
}

template <class H> Result list_parts(Device d, uint32_t* count, H* out, std::deque<Part> FakeDevice::*list) {
  std::lock_guard lock(g.mu);
  if (!ready()) return kErrorUninitialized;
  FakeDevice* fd = dev(d);
  if (!fd) return kErrorInvalidNullHandle;
  if (!count) return kErrorInvalidNullPointer;
  auto& parts = fd->*list;
  if (!out) {
    *count = static_cast<uint32_t>(parts.size());
    return kSuccess;
  }
  const uint32_t n = std::min<uint32_t>(*count, static_cast<uint32_t>(parts.size()));
  for (uint32_t i = 0; i < n; ++i)
    out[i] = reinterpret_cast<H>(&parts[i]);
  *count = n;
  return kSuccess;
}

Result load_scenario() {
  const char* path = std::getenv("WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO");
  if (!path) return kErrorUninitialized; // like a loader with no GPU driver
  std::ifstream in(path);
  if (!in) return kErrorUninitialized;
  g.scenario = json::parse(in, nullptr, false);
  if (g.scenario.is_discarded()) return kErrorUnknown;
  if (const Result e = g.scenario.value("init_error", 0u)) return e;
  g.devices.clear();
  size_t i = 0;
  for (const auto& d : g.scenario.value("devices", json::array())) {
    FakeDevice& fd = g.devices.emplace_back();
    fd.spec = d;
    auto fill = [&](const char* key, std::deque<Part>& out) {
      for (const auto& p : d.value(key, json::array()))
        out.push_back({p, i, {}});
    };
    fill("power_domains", fd.power);
    fill("engines", fd.engines);
    fill("memory", fd.memory);
    fill("frequency", fd.frequency);
    fill("temperature", fd.temperature);
    ++i;
  }
  g.initialised = true;
  return kSuccess;
}

void copy_str(char* dst, size_t n, const std::string& s) {
  std::memset(dst, 0, n);
  std::memcpy(dst, s.data(), std::min(n - 1, s.size()));
}

uint32_t engine_type(const std::string& t) {
  static const std::map<std::string, uint32_t> kTypes = {{"all", kEngineAll},
                                                         {"compute_all", kEngineComputeAll},
                                                         {"media_all", kEngineMediaAll},
                                                         {"copy_all", kEngineCopyAll},
                                                         {"compute", kEngineComputeSingle},
                                                         {"render", kEngineRenderSingle},
                                                         {"render_all", kEngineRenderAll},
                                                         {"media_decode", kEngineMediaDecodeSingle},
                                                         {"media_encode", kEngineMediaEncodeSingle},
                                                         {"copy", kEngineCopySingle},
                                                         {"3d", kEngine3dSingle}};
  auto it = kTypes.find(t);
  return it == kTypes.end() ? kEngineCopySingle : it->second;
}

// ---- implementations, one per entry-point member ----
namespace impl {
Result ses_init(uint32_t /*flags*/) {
  std::lock_guard lock(g.mu);
  const Result rc = load_scenario();
  g.sysman = rc == kSuccess;
  return rc;
}
Result core_init(uint32_t /*flags*/) {
  std::lock_guard lock(g.mu);
  const Result rc = load_scenario();
  const char* e = std::getenv("ZES_ENABLE_SYSMAN");
  g.sysman = rc == kSuccess && e && std::string_view(e) == "1";
  return rc;
}
Result driver_get(uint32_t* count, Driver* drivers) {
  std::lock_guard lock(g.mu);
  if (!g.initialised) return kErrorUninitialized;
  if (!count) return kErrorInvalidNullPointer;
  if (!drivers || *count == 0) {
    *count = 1;
    return kSuccess;
  }
  drivers[0] = reinterpret_cast<Driver>(&g.driver_token);
  *count = 1;
  return kSuccess;
}
Result device_get(Driver driver, uint32_t* count, Device* devices) {
  std::lock_guard lock(g.mu);
  if (!g.initialised) return kErrorUninitialized;
  if (driver != reinterpret_cast<Driver>(&g.driver_token)) return kErrorInvalidNullHandle;
  if (!count) return kErrorInvalidNullPointer;
  if (!devices) {
    *count = static_cast<uint32_t>(g.devices.size());
    return kSuccess;
  }
  const uint32_t n = std::min<uint32_t>(*count, static_cast<uint32_t>(g.devices.size()));
  for (uint32_t i = 0; i < n; ++i)
    devices[i] = reinterpret_cast<Device>(&g.devices[i]);
  *count = n;
  return kSuccess;
}
Result ses_driver_get(uint32_t* count, Driver* drivers) {
  return driver_get(count, drivers);
}
Result core_driver_get(uint32_t* count, Driver* drivers) {
  return driver_get(count, drivers);
}
Result ses_device_get(Driver driver, uint32_t* count, Device* devices) {
  return device_get(driver, count, devices);
}
Result core_device_get(Driver driver, uint32_t* count, Device* devices) {
  return device_get(driver, count, devices);
}
Result device_properties(Device d, DeviceProperties* p) {
  std::lock_guard lock(g.mu);
  if (!ready()) return kErrorUninitialized;
  FakeDevice* fd = dev(d);
  if (!fd || !p) return kErrorInvalidNullPointer;
  if (listed(fd->spec, "unsupported", "device_properties")) return kErrorUnsupportedFeature;
  p->core.vendorId = 0x8086;
  p->core.deviceId = fd->spec.value("device_id", 0x0bd5u);
  const std::string name = fd->spec.value("name", std::string("Intel(R) Graphics"));
  copy_str(p->core.name, sizeof p->core.name, name);
  copy_str(p->modelName, sizeof p->modelName, name);
  copy_str(p->vendorName, sizeof p->vendorName, "Intel(R) Corporation");
  const json uuid = fd->spec.value("uuid", json::array());
  for (size_t i = 0; i < sizeof p->core.uuid; ++i)
    p->core.uuid[i] = static_cast<uint8_t>(i < uuid.size() ? uuid[i].get<int>() : static_cast<int>(i + 1));
  return kSuccess;
}
Result device_pci_properties(Device d, PciProperties* p) {
  std::lock_guard lock(g.mu);
  if (!ready()) return kErrorUninitialized;
  FakeDevice* fd = dev(d);
  if (!fd || !p) return kErrorInvalidNullPointer;
  if (listed(fd->spec, "unsupported", "pci_properties") || !fd->spec.contains("pci")) return kErrorUnsupportedFeature;
  const json& a = fd->spec["pci"];
  p->address = {a[0].get<uint32_t>(), a[1].get<uint32_t>(), a[2].get<uint32_t>(), a[3].get<uint32_t>()};
  p->maxSpeed = {4, 16, -1};
  return kSuccess;
}
Result enum_power_domains(Device d, uint32_t* count, Power* handles) {
  return list_parts(d, count, handles, &FakeDevice::power);
}
Result card_power_domain(Device d, Power* handle) {
  std::lock_guard lock(g.mu);
  if (!ready()) return kErrorUninitialized;
  FakeDevice* fd = dev(d);
  if (!fd || !handle) return kErrorInvalidNullPointer;
  if (listed(fd->spec, "unsupported", "card_power_domain")) return kErrorUnsupportedFeature;
  for (auto& p : fd->power)
    if (p.spec.value("card", false)) {
      *handle = reinterpret_cast<Power>(&p);
      return kSuccess;
    }
  return kErrorUnsupportedFeature; // as the driver answers for a device with no card-level domain
}
Result power_properties(Power h, PowerProperties* p) {
  std::lock_guard lock(g.mu);
  Part* pt = part(h, &FakeDevice::power);
  if (!pt || !p) return kErrorInvalidNullHandle;
  p->onSubdevice = pt->spec.contains("subdevice");
  p->subdeviceId = pt->spec.value("subdevice", 0u);
  p->defaultLimit = p->minLimit = p->maxLimit = -1;
  // The extension structure (spec 1.4+) tells the domain, where the caller chained one.
  if (auto* ext = static_cast<PowerExtProperties*>(p->pNext); ext && ext->stype == kStypePowerExtProperties) {
    const std::string dom = pt->spec.value("domain", std::string("unknown"));
    ext->domain = dom == "card"      ? kPowerDomainCard
                  : dom == "package" ? kPowerDomainPackage
                  : dom == "stack"   ? kPowerDomainStack
                                     : kPowerDomainUnknown;
  }
  return kSuccess;
}
Result power_energy_counter(Power h, PowerEnergyCounter* e) {
  std::lock_guard lock(g.mu);
  if (!ready()) return kErrorUninitialized;
  Part* pt = part(h, &FakeDevice::power);
  if (!pt || !e) return kErrorInvalidNullHandle;
  long long k = 0;
  if (Result rc = per_tick(g.devices[pt->device], pt->reads, "energy_counter", k); rc != kSuccess) return rc;
  e->energy = eval_u64(pt->spec.value("energy_uj", json(0)), k);
  e->timestamp = eval_u64(pt->spec.value("timestamp_us", json({{"linear", {1000000, 100000}}})), k);
  return kSuccess;
}
Result enum_engine_groups(Device d, uint32_t* count, Engine* handles) {
  return list_parts(d, count, handles, &FakeDevice::engines);
}
Result engine_properties(Engine h, EngineProperties* p) {
  std::lock_guard lock(g.mu);
  Part* pt = part(h, &FakeDevice::engines);
  if (!pt || !p) return kErrorInvalidNullHandle;
  p->type = engine_type(pt->spec.value("type", std::string("all")));
  p->onSubdevice = pt->spec.contains("subdevice");
  p->subdeviceId = pt->spec.value("subdevice", 0u);
  return kSuccess;
}
Result engine_activity(Engine h, EngineStats* s) {
  std::lock_guard lock(g.mu);
  if (!ready()) return kErrorUninitialized;
  Part* pt = part(h, &FakeDevice::engines);
  if (!pt || !s) return kErrorInvalidNullHandle;
  long long k = 0;
  if (Result rc = per_tick(g.devices[pt->device], pt->reads, "engine_activity", k); rc != kSuccess) return rc;
  s->activeTime = eval_u64(pt->spec.value("active_us", json(0)), k);
  s->timestamp = eval_u64(pt->spec.value("timestamp_us", json({{"linear", {1000000, 100000}}})), k);
  return kSuccess;
}
Result enum_memory_modules(Device d, uint32_t* count, Memory* handles) {
  return list_parts(d, count, handles, &FakeDevice::memory);
}
Result memory_properties(Memory h, MemProperties* p) {
  std::lock_guard lock(g.mu);
  Part* pt = part(h, &FakeDevice::memory);
  if (!pt || !p) return kErrorInvalidNullHandle;
  p->location = pt->spec.value("location", std::string("device")) == "device" ? kMemLocDevice : 0;
  p->physicalSize = pt->spec.value("physical_size", uint64_t{0});
  p->onSubdevice = pt->spec.contains("subdevice");
  p->subdeviceId = pt->spec.value("subdevice", 0u);
  return kSuccess;
}
Result memory_state(Memory h, MemState* s) {
  std::lock_guard lock(g.mu);
  if (!ready()) return kErrorUninitialized;
  Part* pt = part(h, &FakeDevice::memory);
  if (!pt || !s) return kErrorInvalidNullHandle;
  long long k = 0;
  if (Result rc = per_tick(g.devices[pt->device], pt->reads, "memory_state", k); rc != kSuccess) return rc;
  s->size = eval_u64(pt->spec.value("size", json(0)), k);
  s->free = eval_u64(pt->spec.value("free", json(0)), k);
  return kSuccess;
}
Result enum_frequency_domains(Device d, uint32_t* count, Frequency* handles) {
  return list_parts(d, count, handles, &FakeDevice::frequency);
}
Result frequency_properties(Frequency h, FreqProperties* p) {
  std::lock_guard lock(g.mu);
  Part* pt = part(h, &FakeDevice::frequency);
  if (!pt || !p) return kErrorInvalidNullHandle;
  p->type = pt->spec.value("domain", std::string("gpu")) == "memory" ? kFreqMemory : kFreqGpu;
  p->onSubdevice = pt->spec.contains("subdevice");
  p->subdeviceId = pt->spec.value("subdevice", 0u);
  p->min = 300;
  p->max = pt->spec.value("max_mhz", -1.0);
  return kSuccess;
}
Result frequency_state(Frequency h, FreqState* s) {
  std::lock_guard lock(g.mu);
  if (!ready()) return kErrorUninitialized;
  Part* pt = part(h, &FakeDevice::frequency);
  if (!pt || !s) return kErrorInvalidNullHandle;
  long long k = 0;
  if (Result rc = per_tick(g.devices[pt->device], pt->reads, "frequency_state", k); rc != kSuccess) return rc;
  s->actual = eval(pt->spec.value("actual_mhz", json(-1)), k);
  s->request = s->actual;
  s->currentVoltage = s->tdp = s->efficient = -1;
  return kSuccess;
}
Result enum_temperature_sensors(Device d, uint32_t* count, Temperature* handles) {
  return list_parts(d, count, handles, &FakeDevice::temperature);
}
Result temperature_properties(Temperature h, TempProperties* p) {
  std::lock_guard lock(g.mu);
  Part* pt = part(h, &FakeDevice::temperature);
  if (!pt || !p) return kErrorInvalidNullHandle;
  const std::string s = pt->spec.value("sensor", std::string("gpu"));
  p->type = s == "memory" ? kTempMemory : s == "global" ? kTempGlobal : kTempGpu;
  p->onSubdevice = pt->spec.contains("subdevice");
  p->subdeviceId = pt->spec.value("subdevice", 0u);
  p->maxTemperature = 105;
  return kSuccess;
}
Result temperature_state(Temperature h, double* c) {
  std::lock_guard lock(g.mu);
  if (!ready()) return kErrorUninitialized;
  Part* pt = part(h, &FakeDevice::temperature);
  if (!pt || !c) return kErrorInvalidNullHandle;
  long long k = 0;
  if (Result rc = per_tick(g.devices[pt->device], pt->reads, "temperature_state", k); rc != kSuccess) return rc;
  *c = eval(pt->spec.value("celsius", json(0)), k);
  return kSuccess;
}
Result processes_state(Device d, uint32_t* count, ProcessState* procs) {
  std::lock_guard lock(g.mu);
  if (!ready()) return kErrorUninitialized;
  FakeDevice* fd = dev(d);
  if (!fd || !count) return kErrorInvalidNullPointer;
  if (fd->lost) return kErrorDeviceLost;
  if (listed(fd->spec, "unsupported", "processes")) return kErrorUnsupportedFeature;
  const json list = fd->spec.value("processes", json::array());
  if (!procs) {
    *count = static_cast<uint32_t>(list.size());
    return kSuccess;
  }
  if (*count < list.size()) {
    *count = static_cast<uint32_t>(list.size());
    return kErrorInvalidSize;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    procs[i].processId = list[i].value("pid", 0u);
    procs[i].memSize = list[i].value("mem_bytes", uint64_t{0});
    procs[i].sharedSize = list[i].value("shared_bytes", uint64_t{0});
    procs[i].engines = 2; // ZES_ENGINE_TYPE_FLAG_COMPUTE
  }
  *count = static_cast<uint32_t>(list.size());
  return kSuccess;
}
} // namespace impl

} // namespace

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))
#define FAKE_X(member, params, args, sym)                                                                              \
  FAKE_EXPORT Result sym params {                                                                                      \
    return impl::member args;                                                                                          \
  }
WATTSCOPE_ZE_ENTRY_POINTS(FAKE_X)
