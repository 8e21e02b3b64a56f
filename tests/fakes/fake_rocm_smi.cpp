// A stand-in librocm_smi64.so for tests. It exports the ROCm SMI entry points from the same X-macro list the loader
// uses (src/sources/rocm/rocm_smi_api.hpp), so wattscope loads it through its production dlopen path
// (WATTSCOPE_ROCM_SMI_LIBRARY), and answers from a scenario file (WATTSCOPE_FAKE_ROCM_SMI_SCENARIO, JSON):
//
//   {"version": [6, 1, 2], "driver_version": "6.8.5", "init_error": 0,
//    "devices": [{"name": "AMD Instinct MI210", "unique_id": 123456, "pci_bus_id": "0000:03:00.0",
//                 "lost_at_tick": 5, "lost_code": 3, "unsupported": ["fan_speed"],
//                 "errors": {"busy_pct": {"code": 16, "ticks": [2]}},
//                 "metrics": {"energy_count": [0, 100, 250], "energy_resolution_uj": 15.2587890625,
//                             "socket_power_uw": [...], "power_ave_uw": ..., "power_cap_uw": ..., "busy_pct": ...,
//                             "mem_busy_pct": ..., "vram_used_bytes": ..., "vram_total_bytes": ...,
//                             "temp_edge_mc": ..., "temp_junction_mc": ..., "temp_memory_mc": ...,
//                             "temp_edge_crit_mc": ..., "temp_edge_emergency_mc": ... (RSMI_TEMP_CRITICAL and
//                             _EMERGENCY of a sensor, also _junction_ and _memory_),
//                             "sclk_levels_hz": [500e6, 1700e6], "sclk_level": [0, 1], "mclk_levels_hz": [...],
//                             "mclk_level": ..., "fan_speed": ..., "fan_max": 255, "pcie_lanes": [1, 16],
//                             "pcie_level": ..., "pcie_sent_packets": ..., "pcie_received_packets": ...,
//                             "pcie_max_packet_bytes": 256 (the default)}}],
//    "processes": [{"pid_file": "/tmp/…/w.pid" (or "pid": 1234),
//                   "gpus": {"0": {"vram_bytes": V, "cu_occupancy": V}, "1": {...}}}]}
//
// A per-tick value V is chosen by how many times that metric was asked for on that device (k, from 0): number
// (constant) | [list] (k-th, the last repeats) | {"linear": [a, b]} (a + b*k). Static entries (the *_levels_hz lists,
// pcie_lanes, fan_max, energy_resolution_uj) are read as they are. A metric that is absent or listed in
// "unsupported" answers RSMI_STATUS_NOT_SUPPORTED; "errors" makes the calls with k in "ticks" (or k >= "from_tick")
// answer "code". From the first call with k >= lost_at_tick on, every per-tick call on that device answers lost_code
// (default RSMI_STATUS_FILE_ERROR, as when the GPU's sysfs files vanish). A *_level that is not an index into its
// levels reports "no current level", as the library does. The "version" sets rsmi_version_get's answer and with it the
// layout of rsmi_frequencies_t (ROCm 6 added a leading bool): the fake fills the layout of the version it claims.
//
// Processes: listed by rsmi_compute_process_info_get while their pid file names a live process (not a zombie);
// rsmi_compute_process_gpus_get gives the keys of "gpus"; rsmi_compute_process_info_by_device_get that GPU's values
// (k counting that process's reads on that GPU); rsmi_compute_process_info_by_pid_get their sum over its GPUs.
//
// "init_stderr": "text" at the top level is written to stderr (stdio and fd 2) by rsmi_init, as the real library does
// on a machine it does not like (issue 30).
//
// Functions missing from a library are real dlsym failures: tests/fakes/CMakeLists.txt builds variants of this file
// with symbols hidden. At rsmi_shut_down the call count of every entry point is written as JSON to
// WATTSCOPE_FAKE_ROCM_SMI_CALLS, if set.
//
// issue 33: what calls cost, as fake_nvml's "call_cost_us": a number gives every entry point that cost, or an object
// per symbol ({"rsmi_dev_energy_count_get": 300, "default": 2}); a value is microseconds (under 1 ms spun on the CPU,
// else slept) or {"cpu": us, "sleep": us}. No per-call costs measured on an AMD driver are at hand, so there is no
// built-in "real" profile: a test or benchmark states the costs it assumes.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <time.h>
#include <vector>

#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "sources/rocm/rocm_smi_api.hpp"

using namespace wattscope::rocm;
using json = nlohmann::json;

namespace {

struct State {
  std::mutex mu;
  bool initialised = false;
  json scenario;
  std::string version_build = "fake";
  std::vector<std::map<std::string, long long, std::less<>>> calls; // per device, per metric
  std::vector<bool> lost;                                           // per device: lost_at_tick reached
  std::map<std::string, long long> proc_calls;                      // per "pid/gpu"
  std::map<std::string, long long, std::less<>> symbol_calls;
  struct Cost {
    double cpu_us = 0, sleep_us = 0;
  } default_cost;
  std::map<std::string, Cost, std::less<>> cost_us; // per symbol ("call_cost_us")
} g;

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

State::Cost parse_cost(const json& v) {
  if (v.is_number()) {
    const double us = v.get<double>();
    return us >= 1000 ? State::Cost{0, us} : State::Cost{us, 0};
  }
  State::Cost c;
  if (v.is_object()) {
    if (auto cpu = v.find("cpu"); cpu != v.end() && cpu->is_number()) c.cpu_us = cpu->get<double>();
    if (auto sl = v.find("sleep"); sl != v.end() && sl->is_number()) c.sleep_us = sl->get<double>();
  }
  return c;
}

void count_call(std::string_view symbol) {
  State::Cost cost;
  {
    std::lock_guard lock(g.mu);
    auto it = g.symbol_calls.find(symbol);
    if (it == g.symbol_calls.end()) it = g.symbol_calls.emplace(std::string(symbol), 0).first;
    it->second++;
    auto c = g.cost_us.find(symbol);
    cost = c != g.cost_us.end() ? c->second : g.default_cost;
  }
  // Spent outside the lock, like a driver call: the CPU part spinning, then the sleep.
  if (cost.cpu_us > 0)
    for (const double until = now_s() + cost.cpu_us * 1e-6; now_s() < until;) {
    }
  if (cost.sleep_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long long>(cost.sleep_us)));
}

// A member of a scenario object, or an empty one: by reference, so a pointer or iterator into it outlives the call
// (json::value returns a copy).
const json& member(const json& j, const char* key, bool array) {
  static const json kArray = json::array(), kObject = json::object();
  if (j.is_object())
    if (auto it = j.find(key); it != j.end()) return *it;
  return array ? kArray : kObject;
}

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

const json* device(uint32_t dv) {
  if (!g.initialised) return nullptr;
  const json& devs = g.scenario["devices"];
  return dv < devs.size() ? &devs[dv] : nullptr;
}

// The value of a per-tick metric, advancing its call count; errors as the scenario says. Caller holds g.mu.
Status metric(uint32_t dv, std::string_view name, double& out) {
  if (!g.initialised) return kInitError;
  const json* spec = device(dv);
  if (!spec) return kInvalidArgs;
  auto& counts = g.calls[dv];
  auto c = counts.find(name);
  if (c == counts.end()) c = counts.emplace(std::string(name), 0).first;
  const long long k = c->second++;
  // Lost for good from the first call with k >= lost_at_tick on, whatever metric it asked for: a GPU that fell off
  // the bus does not answer a sensor it was never asked about either.
  if (auto lost = spec->find("lost_at_tick"); lost != spec->end() && k >= lost->get<long long>()) g.lost[dv] = true;
  if (g.lost[dv]) return spec->value("lost_code", kFileError);
  if (auto errs = spec->find("errors"); errs != spec->end())
    if (auto e = errs->find(name); e != errs->end()) {
      bool hit = e->contains("from_tick") && k >= e->at("from_tick").get<long long>();
      for (const auto& t : member(*e, "ticks", true))
        hit = hit || t.get<long long>() == k;
      if (hit) return e->value("code", kUnknownError);
    }
  for (const auto& u : member(*spec, "unsupported", true))
    if (u.get<std::string>() == name) return kNotSupported;
  auto metrics = spec->find("metrics");
  if (metrics == spec->end()) return kNotSupported;
  auto v = metrics->find(name);
  if (v == metrics->end()) return kNotSupported;
  out = eval(*v, k);
  return kSuccess;
}

template <typename T> Status metric_to(uint32_t dv, std::string_view name, T* out) {
  if (!out) return kInvalidArgs;
  std::lock_guard lock(g.mu);
  double v = 0;
  const Status rc = metric(dv, name, v);
  if (rc == kSuccess) *out = static_cast<T>(std::llround(v));
  return rc;
}

// A static entry of a device's metrics (levels, resolution), or null.
const json* static_entry(uint32_t dv, const char* name) {
  const json* spec = device(dv);
  if (!spec || !spec->contains("metrics")) return nullptr;
  auto it = (*spec)["metrics"].find(name);
  return it == (*spec)["metrics"].end() ? nullptr : &*it;
}

bool v6_layout() {
  const json& v = g.scenario.value("version", json::array({6, 0, 0}));
  return v.is_array() && !v.empty() && v[0].get<int>() >= 6;
}

// Fills a frequency table in the layout of the version this fake claims; `current` past the end means none.
template <typename F> void fill_levels(F& f, const json& levels, long long current, size_t cap) {
  f.num_supported = static_cast<uint32_t>(std::min(levels.size(), cap));
  for (size_t i = 0; i < f.num_supported; ++i)
    f.frequency[i] = levels[i].get<uint64_t>();
  f.current = current >= 0 ? static_cast<uint32_t>(current) : 0xFFFFFFFFu;
}

// A process's pid: "pid", or the number in "pid_file" while it names a live, non-zombie process; 0 otherwise.
uint32_t live_pid(const json& p) {
  long long pid = p.value("pid", 0LL);
  if (auto f = p.find("pid_file"); f != p.end()) {
    std::ifstream in(f->get<std::string>());
    if (!(in >> pid)) return 0;
  }
  if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) != 0) return 0;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') return 0;
  return static_cast<uint32_t>(pid);
}

const json* process(uint32_t pid) {
  for (const auto& p : member(g.scenario, "processes", true))
    if (live_pid(p) == pid && pid != 0) return &p;
  return nullptr;
}

Status process_on(uint32_t pid, uint32_t dv, ProcessInfo* out) {
  const json* p = process(pid);
  if (!p) return kNotFound;
  const json& gp = member(*p, "gpus", false);
  auto it = gp.find(std::to_string(dv));
  if (it == gp.end()) return kNotFound;
  const long long k = g.proc_calls[std::to_string(pid) + "/" + std::to_string(dv)]++;
  out->process_id = pid;
  out->pasid = 0;
  out->vram_usage = static_cast<uint64_t>(std::llround(eval(it->value("vram_bytes", json(0)), k)));
  out->sdma_usage = 0;
  out->cu_occupancy = it->contains("cu_occupancy") ? static_cast<uint32_t>(std::llround(eval((*it)["cu_occupancy"], k)))
                                                   : kCuOccupancyInvalid;
  return kSuccess;
}

// ---- implementations, one per entry-point member ----
namespace impl {
Status init(uint64_t) {
  std::lock_guard lock(g.mu);
  const char* path = std::getenv("WATTSCOPE_FAKE_ROCM_SMI_SCENARIO");
  if (!path) return kInitError;
  std::ifstream in(path);
  if (!in) return kInitError;
  g.scenario = json::parse(in, nullptr, false);
  if (g.scenario.is_discarded() || !g.scenario.is_object()) return kInitError;
  // Issue 30: what the real library prints while it starts on a machine it does not like ("Failed to open drm root
  // directory /sys/class/drm.", "Exception caught: rsmi_init."), through stdio and straight to the descriptor.
  if (const std::string say = g.scenario.value("init_stderr", std::string()); !say.empty()) {
    std::fputs(say.c_str(), stderr);
    std::fflush(stderr);
    [[maybe_unused]] const ssize_t n = ::write(2, say.data(), say.size());
  }
  if (const Status e = g.scenario.value("init_error", kSuccess); e != kSuccess) return e;
  g.calls.assign(g.scenario.value("devices", json::array()).size(), {});
  g.lost.assign(g.calls.size(), false);
  g.proc_calls.clear(); // a library that is never unloaded (unique symbols) starts each scenario afresh
  g.symbol_calls.clear();
  g.default_cost = {};
  g.cost_us.clear();
  if (auto c = g.scenario.find("call_cost_us"); c != g.scenario.end()) {
    if (c->is_number()) g.default_cost = parse_cost(*c);
    if (c->is_object())
      for (const auto& [symbol, us] : c->items())
        (symbol == "default" ? g.default_cost : g.cost_us[symbol]) = parse_cost(us);
  }
  if (!g.scenario.contains("devices")) g.scenario["devices"] = json::array();
  g.initialised = true;
  return kSuccess;
}
Status shut_down() {
  std::lock_guard lock(g.mu);
  g.initialised = false;
  if (const char* out = std::getenv("WATTSCOPE_FAKE_ROCM_SMI_CALLS")) {
    json j = json::object();
    for (const auto& [k, v] : g.symbol_calls)
      j[k] = v;
    std::ofstream(out) << j.dump();
  }
  return kSuccess;
}
Status num_devices(uint32_t* n) {
  if (!n) return kInvalidArgs;
  std::lock_guard lock(g.mu);
  if (!g.initialised) return kInitError;
  *n = static_cast<uint32_t>(g.scenario["devices"].size());
  return kSuccess;
}
Status version(Version* v) {
  if (!v) return kInvalidArgs;
  std::lock_guard lock(g.mu);
  const json ver = g.scenario.value("version", json::array({6, 0, 0}));
  v->major = ver.size() > 0 ? ver[0].get<uint32_t>() : 0;
  v->minor = ver.size() > 1 ? ver[1].get<uint32_t>() : 0;
  v->patch = ver.size() > 2 ? ver[2].get<uint32_t>() : 0;
  v->build = g.version_build.c_str();
  return kSuccess;
}
Status copy_string(const std::string& s, char* buf, size_t len) {
  if (!buf) return kInvalidArgs;
  if (s.size() + 1 > len) return kInsufficientSize;
  std::memcpy(buf, s.c_str(), s.size() + 1);
  return kSuccess;
}
Status version_str(uint32_t component, char* buf, uint32_t len) {
  std::lock_guard lock(g.mu);
  if (component != kSwComponentDriver || !g.scenario.contains("driver_version")) return kNotSupported;
  return copy_string(g.scenario["driver_version"].get<std::string>(), buf, len);
}
Status dev_name(uint32_t dv, char* buf, size_t len) {
  std::lock_guard lock(g.mu);
  const json* d = device(dv);
  if (!d) return kInvalidArgs;
  if (!d->contains("name")) return kNotSupported;
  return copy_string((*d)["name"].get<std::string>(), buf, len);
}
Status dev_unique_id(uint32_t dv, uint64_t* id) {
  std::lock_guard lock(g.mu);
  const json* d = device(dv);
  if (!d || !id) return kInvalidArgs;
  if (!d->contains("unique_id")) return kNotSupported;
  *id = (*d)["unique_id"].get<uint64_t>();
  return kSuccess;
}
Status dev_pci_id(uint32_t dv, uint64_t* bdfid) {
  std::lock_guard lock(g.mu);
  const json* d = device(dv);
  if (!d || !bdfid) return kInvalidArgs;
  if (!d->contains("pci_bus_id")) return kNotSupported;
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf((*d)["pci_bus_id"].get<std::string>().c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4)
    return kUnexpectedData;
  *bdfid = (uint64_t{domain} << 32) | (uint64_t{bus} << 8) | (uint64_t{dev} << 3) | fn;
  return kSuccess;
}
Status dev_energy_count(uint32_t dv, uint64_t* count, float* resolution_uj, uint64_t* timestamp_ns) {
  if (!count || !resolution_uj) return kInvalidArgs;
  std::lock_guard lock(g.mu);
  double v = 0;
  const Status rc = metric(dv, "energy_count", v);
  if (rc != kSuccess) return rc;
  *count = static_cast<uint64_t>(v);
  const json* res = static_entry(dv, "energy_resolution_uj");
  *resolution_uj = res ? res->get<float>() : 15.3f;
  if (timestamp_ns) *timestamp_ns = 0;
  return kSuccess;
}
Status dev_power_ave(uint32_t dv, uint32_t, uint64_t* uw) {
  return metric_to(dv, "power_ave_uw", uw);
}
Status dev_current_socket_power(uint32_t dv, uint64_t* uw) {
  return metric_to(dv, "socket_power_uw", uw);
}
Status dev_power_cap(uint32_t dv, uint32_t, uint64_t* uw) {
  return metric_to(dv, "power_cap_uw", uw);
}
Status dev_busy_percent(uint32_t dv, uint32_t* pct) {
  return metric_to(dv, "busy_pct", pct);
}
Status dev_memory_busy_percent(uint32_t dv, uint32_t* pct) {
  return metric_to(dv, "mem_busy_pct", pct);
}
Status dev_memory_total(uint32_t dv, uint32_t type, uint64_t* bytes) {
  if (type != kMemVram) return kNotSupported;
  return metric_to(dv, "vram_total_bytes", bytes);
}
Status dev_memory_usage(uint32_t dv, uint32_t type, uint64_t* bytes) {
  if (type != kMemVram) return kNotSupported;
  return metric_to(dv, "vram_used_bytes", bytes);
}
Status dev_temp_metric(uint32_t dv, uint32_t sensor, uint32_t metric_kind, int64_t* millidegrees) {
  const char* base = sensor == kTempEdge       ? "temp_edge"
                     : sensor == kTempJunction ? "temp_junction"
                     : sensor == kTempMemory   ? "temp_memory"
                                               : nullptr;
  const char* kind = metric_kind == kTempCurrent     ? "_mc"
                     : metric_kind == kTempCritical  ? "_crit_mc"
                     : metric_kind == kTempEmergency ? "_emergency_mc"
                                                     : nullptr;
  if (!base || !kind) return kNotSupported;
  return metric_to(dv, (std::string(base) + kind).c_str(), millidegrees);
}
Status dev_gpu_clk_freq(uint32_t dv, uint32_t clk, FrequenciesBuf* f) {
  if (!f) return kInvalidArgs;
  const bool sys = clk == kClkSys;
  if (!sys && clk != kClkMem) return kNotSupported;
  std::lock_guard lock(g.mu);
  double level = 0;
  const Status rc = metric(dv, sys ? "sclk_level" : "mclk_level", level);
  if (rc != kSuccess) return rc;
  const json* levels = static_entry(dv, sys ? "sclk_levels_hz" : "mclk_levels_hz");
  if (!levels) return kNotSupported;
  if (v6_layout()) {
    f->v6.has_deep_sleep = false;
    fill_levels(f->v6, *levels, std::llround(level), 33);
  } else {
    fill_levels(f->v5, *levels, std::llround(level), 32);
  }
  return kSuccess;
}
Status dev_fan_speed(uint32_t dv, uint32_t, int64_t* speed) {
  return metric_to(dv, "fan_speed", speed);
}
Status dev_fan_speed_max(uint32_t dv, uint32_t, uint64_t* max) {
  if (!max) return kInvalidArgs;
  std::lock_guard lock(g.mu);
  const json* m = static_entry(dv, "fan_max");
  if (!m) return kNotSupported;
  *max = m->get<uint64_t>();
  return kSuccess;
}
Status dev_pci_bandwidth(uint32_t dv, PcieBandwidthBuf* b) {
  if (!b) return kInvalidArgs;
  std::lock_guard lock(g.mu);
  double level = 0;
  const Status rc = metric(dv, "pcie_level", level);
  if (rc != kSuccess) return rc;
  const json* lanes = static_entry(dv, "pcie_lanes");
  if (!lanes) return kNotSupported;
  json rates = json::array();
  for (size_t i = 0; i < lanes->size(); ++i)
    rates.push_back(16000000000ULL); // 16 GT/s per level: the rates are not read
  if (v6_layout()) {
    fill_levels(b->v6.transfer_rate, rates, std::llround(level), 33);
    for (size_t i = 0; i < std::min<size_t>(lanes->size(), 33); ++i)
      b->v6.lanes[i] = (*lanes)[i].get<uint32_t>();
  } else {
    fill_levels(b->v5.transfer_rate, rates, std::llround(level), 32);
    for (size_t i = 0; i < std::min<size_t>(lanes->size(), 32); ++i)
      b->v5.lanes[i] = (*lanes)[i].get<uint32_t>();
  }
  return kSuccess;
}
// As the library reads the kernel's pcie_bw: packets sent and received in one second, and the largest packet's size
// (issue 30: not bytes, whatever rocm_smi.h says).
Status dev_pci_throughput(uint32_t dv, uint64_t* sent, uint64_t* received, uint64_t* max_pkt_sz) {
  std::lock_guard lock(g.mu);
  double s = 0, r = 0, size = 256;
  Status rc = metric(dv, "pcie_sent_packets", s);
  if (rc == kSuccess) rc = metric(dv, "pcie_received_packets", r);
  if (rc != kSuccess) return rc;
  if (metric(dv, "pcie_max_packet_bytes", size) != kSuccess) size = 256;
  if (sent) *sent = static_cast<uint64_t>(s);
  if (received) *received = static_cast<uint64_t>(r);
  if (max_pkt_sz) *max_pkt_sz = static_cast<uint64_t>(size);
  return kSuccess;
}
Status compute_process_info(ProcessInfo* procs, uint32_t* n) {
  if (!n) return kInvalidArgs;
  std::lock_guard lock(g.mu);
  if (!g.initialised) return kInitError;
  std::vector<uint32_t> live;
  for (const auto& p : member(g.scenario, "processes", true))
    if (const uint32_t pid = live_pid(p)) live.push_back(pid);
  if (!procs) {
    *n = static_cast<uint32_t>(live.size());
    return kSuccess;
  }
  const uint32_t room = *n;
  *n = static_cast<uint32_t>(std::min<size_t>(room, live.size()));
  for (uint32_t i = 0; i < *n; ++i)
    procs[i] = {live[i], 0, 0, 0, 0};
  return live.size() > room ? kInsufficientSize : kSuccess;
}
Status compute_process_gpus(uint32_t pid, uint32_t* indices, uint32_t* n) {
  if (!n) return kInvalidArgs;
  std::lock_guard lock(g.mu);
  const json* p = process(pid);
  if (!p) return kNotFound;
  std::vector<uint32_t> gpus;
  for (const auto& [k, v] : member(*p, "gpus", false).items())
    gpus.push_back(static_cast<uint32_t>(std::stoul(k)));
  if (!indices) {
    *n = static_cast<uint32_t>(gpus.size());
    return kSuccess;
  }
  const uint32_t room = *n;
  *n = static_cast<uint32_t>(std::min<size_t>(room, gpus.size()));
  for (uint32_t i = 0; i < *n; ++i)
    indices[i] = gpus[i];
  return gpus.size() > room ? kInsufficientSize : kSuccess;
}
Status compute_process_info_by_device(uint32_t pid, uint32_t dv, ProcessInfo* p) {
  if (!p) return kInvalidArgs;
  std::lock_guard lock(g.mu);
  return process_on(pid, dv, p);
}
Status compute_process_info_by_pid(uint32_t pid, ProcessInfo* out) {
  if (!out) return kInvalidArgs;
  std::lock_guard lock(g.mu);
  const json* p = process(pid);
  if (!p) return kNotFound;
  ProcessInfo sum{pid, 0, 0, 0, 0};
  for (const auto& [k, v] : member(*p, "gpus", false).items()) {
    ProcessInfo one{};
    if (process_on(pid, static_cast<uint32_t>(std::stoul(k)), &one) != kSuccess) continue;
    sum.vram_usage += one.vram_usage;
    sum.cu_occupancy = one.cu_occupancy; // the library's sum is over the process's GPUs: one GPU in the tests
  }
  *out = sum;
  return kSuccess;
}
} // namespace impl

} // namespace

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))
#define FAKE_X(member, need, params, args, sym)                                                                        \
  FAKE_EXPORT Status sym params {                                                                                      \
    count_call(#sym);                                                                                                  \
    return impl::member args;                                                                                          \
  }
WATTSCOPE_ROCM_SMI_ENTRY_POINTS(FAKE_X)
