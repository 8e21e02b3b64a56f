// A stand-in libnvidia-ml.so for tests and the --simulate demo. It exports the NVML entry points from the same
// X-macro list the loader uses, and answers from a scenario file (WATTSCOPE_FAKE_NVML_SCENARIO, JSON):
//
//   {"driver_version": "550.54.15", "nvml_version": "12.550.54.15", "init_error": 0,
//    "devices": [{"name": "...", "uuid": "GPU-...", "pci_bus_id": "...", "max_clock_sm_mhz": 1980,
//                 "max_clock_mem_mhz": 2619, "slowdown_temp_c": 87, "shutdown_temp_c": 92, "lost_at_tick": 5,
//                 "unsupported": ["fan_pct"], "metrics": {"power_mw": 250000, "util_gpu": [10, 20, 30], ...}}]}
//
// A metric's value is chosen by how many times that metric was asked for on that device (k, from 0) or by the
// seconds since nvmlInit (t):  number (constant) | [list] (k-th, last repeats) | {"linear": [a, b]} (a + b*k) |
// {"piecewise": [[k, v], ...]} (straight between the points, issue 36) | {"sine": {"base", "amp", "period_s"}} (of t) |
// {"file": PATH, "default": V} (the number in that file at each call: a test's thermal chamber) |
// {"sine_integral": {...}} (the exact integral of that sine over [0, t], for an energy counter in mJ that matches a
// power trace in mW). Any object of t may add "update_s": 0.1: it then moves only every 0.1 s, holding its value at the
// last multiple (an H100's energy counter, issue 33). A metric that is absent or listed in "unsupported" answers
// NVML_ERROR_NOT_SUPPORTED. From call k = lost_at_tick on, every per-tick call on that device answers
// NVML_ERROR_GPU_IS_LOST. At nvmlShutdown the call count of every entry point is written as JSON to
// WATTSCOPE_FAKE_NVML_CALLS, if set; issue 33: the first and last energy counter readings answered per device (mJ) to
// WATTSCOPE_FAKE_NVML_ENERGY, if set, as {"t0_wall_ms": nvmlInit on the wall clock, "t0_monotonic_s": nvmlInit on
// CLOCK_MONOTONIC (seconds; Python's time.monotonic() on Linux), "0": {"first_mj": …, "last_mj": …}}, the exact truth
// for a run's energy (and, with t0_wall_ms, for a phase's stored times; with t0_monotonic_s, for times the measured
// program took itself, bench/phase_truth.py).
//
// A driver that hangs (a GPU falling off the bus): "hang": {"at_tick": 10, "ms": 3000}, or a list of them. On a
// device, the first per-tick call with k = at_tick on that device blocks for `ms` before it answers; at the top level,
// the first such call on any device does (NVML as a whole). "at_s": 4.5 instead of "at_tick" picks the first such call
// made 4.5 s or more after nvmlInit (a hang at a known time, whatever the interval). Each entry hangs once.
//
// What calls cost (bench/overhead.py's driver-like runs): "call_cost_us": 20 gives every entry point that cost, or
// {"default": 20, "nvmlDeviceGetPcieThroughput": 20000} per symbol. A cost under 1 ms is spent on the CPU (like an
// ioctl into the driver); 1 ms or more is slept (like the driver waiting on the GPU, as PCIe throughput does). Or
// both, as measured on a real driver (bench/nvml_call_cost.py): {"cpu": 650, "sleep": 20000} spins 650 us, then
// sleeps 20 ms. "from_s": 2 in the object makes the call free until 2 s after nvmlInit (a driver that turns slow);
// "calls": 1 makes only the first call cost it (a cheap call that once took long: preempted on a busy machine).
// The per-process utilisation calls asked with room for samples are also counted (and cost) as
// "nvmlDeviceGetProcessesUtilizationInfo (samples)" and "nvmlDeviceGetProcessUtilization (samples)": on an H100 that
// part costs 2.7 ms, the count-only call 5 us.
//
// Processes on a device (attribution): "processes": [{"pid_file": "/tmp/…/worker.pid" (or "pid": 1234),
// "type": "compute" | "graphics", "mem_bytes": V, "sm": V, "mem": V, "enc": V, "dec": V}], V a value as above, k
// counting that process's utilisation reads. A process is listed only while its pid file names a live (not zombie)
// process, as the driver lists only live contexts; a value left out is NVML_VALUE_NOT_AVAILABLE (memory) or 0 (%).
// "process_utilization": false makes both per-process utilisation calls answer NOT_SUPPORTED.
// Issue 30: "process_info_v3_bytes": 32 at the top level makes the _v3 running-process calls write 32-byte entries, as
// drivers 535.43.02-535.98 do (with "driver_version": "535.54.03" and the variant nvidia-ml-fake-r535, which lacks
// nvmlDeviceGetRunningProcessDetailList as those drivers do, the fake is such a driver); _v2 and v1 keep 24 and 16.
//
// Issue 31: "init_sleep_ms": 10000 makes nvmlInit take that long; "init_crash": true makes it die of SIGSEGV.
//
// Errors (issue 17): "errors": {"util_gpu": {"code": 999, "ticks": [3, 4]}} on a device makes that metric's calls
// with k in "ticks" (or k >= "from_tick") answer `code`; in "field_values", a metric read through
// nvmlDeviceGetFieldValues (power_instant_mw, power_avg_mw, temp_mem) answers it in that field's nvmlReturn.
// "reject_versions": ["nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetTemperatureV"] at the top level makes those
// versioned calls answer NVML_ERROR_ARGUMENT_VERSION_MISMATCH, as a driver that knows another struct version does.
// nvmlDeviceGetPciInfo_v2 fills the legacy 52-byte layout (bus id first, 4-digit domain), as the real one does.
//
// MIG: "mig": ["MIG-…", …] on a device gives it that many MIG instances (nvmlDeviceGetMaxMigDeviceCount,
// nvmlDeviceGetMigDeviceHandleByIndex), each answering nvmlDeviceGetUUID; without it both answer NOT_SUPPORTED.
// ---- issue 17 ----
// An instance may instead be an object: {"uuid": "MIG-…", "gpu_instance": 1, "compute_instance": 0, "metrics":
// {"mem_used_bytes": V, "mem_total_bytes": V}, "processes": [...]} (as a device's: its memory slice and the processes
// listed on its handle); ids default to the slot number + 1 and 0. nvmlDeviceGetMigMode answers the device's
// "mig_mode" (current and pending), else 1 where "mig" is given, else NOT_SUPPORTED.
// Health counters, per-call values like any metric: "ecc_corrected", "ecc_uncorrected" (volatile; the aggregate
// counter answers NOT_SUPPORTED), "remapped_cor", "remapped_unc", "remap_pending", "remap_failed" (all four, or the
// call answers NOT_SUPPORTED), "pcie_replays", "violation_power_ns", "violation_thermal_ns"
// (issue 30: also answered as the fields NVML_FI_DEV_PERF_POLICY_POWER/_THERMAL, 74 and 75; a top-level
// "unsupported_fields": [74] makes the fields listed answer NOT_SUPPORTED, as a driver that lacks them); NVLink
// counters read through nvmlDeviceGetFieldValues: "nvlink_tx_kib", "nvlink_rx_kib" (unsigned long long, only for
// scopeId UINT_MAX, the sum over links; INVALID_ARGUMENT for another scope), stamped with "field_timestamp_us" when
// given (one value per field-values call) so a rate can be checked exactly. Xid errors: "xid": [{"after_s": 0.3, "xid":
// 79, "gpu_instance": 1, "compute_instance": 0}] on a device are delivered once each, in order, by
// nvmlEventSetWait(_v2) on a set that device is registered with, once `after_s` seconds have passed since nvmlInit (the
// ids are 0xFFFFFFFF when left out). "unsupported": ["xid"] makes nvmlDeviceRegisterEvents answer NOT_SUPPORTED; a
// top-level "event_wait_error": code makes every wait answer it.
// ---- end issue 17
//
// ---- simulate (issue 19) ----
// A timeline (wattscope --simulate, docs/simulate.md): the scenario's top-level "timeline" cuts time since nvmlInit
// into labelled segments, {"loop": true, "segments": [{"label": "warmup", "s": 2}, {"label": "train", "s": 4}, ...]}
// (looping by default: after the last segment the first begins again). A value can then follow it:
//   {"timeline": {"warmup": [90000, 300000], "train": 560000, "default": 60000}, "noise": 8000}
// is, at t, the entry for the segment t falls in (a number, or [from, to]: a straight ramp across the segment;
// "default" for a label not listed, else 0) plus a deterministic wiggle of at most `noise` ([amp, seed] to vary it),
// never below 0 nor above "max" (a value too: a power capped at its limit). "loop_from": N in the timeline makes a
// loop start again at segment N rather than 0 (a warm-up is not repeated).
// {"timeline_integral": {...same map...}} is the exact integral of that curve (without the wiggle) over [0, t]: an
// energy counter in mJ that matches a power curve in mW. Process values ("sm", "mem_bytes", ...) take them too.
// The scenario can also be handed over in memory, without a file: wattscope_fake_nvml_set_scenario(json) before
// nvmlInit (what --simulate does, having loaded this library from memory), which takes precedence over the file.
// ---- end simulate
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sources/nvml/nvml_api.hpp"

using namespace wattscope::nvml;
using json = nlohmann::json;

namespace {

constexpr Return kArgumentVersionMismatch = 25;

struct FakeDevice {
  json spec;
  std::vector<long long> proc_calls;                   // per entry of its "processes": utilisation reads so far
  std::map<std::string, long long, std::less<>> calls; // per metric
  std::vector<bool> hung;                              // per entry of its "hang"
  size_t xid_delivered = 0;                            // issue 17: entries of its "xid" already delivered
  // issue 33: the first and last energy counter readings answered (mJ), written at nvmlShutdown to
  // WATTSCOPE_FAKE_NVML_ENERGY, so a test can check a run's energy against the counter's exact rise
  std::optional<unsigned long long> energy_first_mj, energy_last_mj;
};
struct FakeEventSet { // issue 17
  std::vector<FakeDevice*> devices;
};

struct Cost { // what one call costs ("call_cost_us")
  double cpu_us = 0;
  double sleep_us = 0;
  double from_s = 0;   // seconds since nvmlInit from which it costs that; free before
  long long calls = 0; // where > 0: only the first that many calls of the symbol cost it
};

struct State {
  std::mutex mu;
  bool initialised = false;
  json scenario;
  std::vector<FakeDevice> devices;
  std::vector<std::vector<FakeDevice>> migs; // per device: its MIG instances ({"uuid": …} specs)
  std::map<std::string, long long, std::less<>> symbol_calls;
  std::vector<bool> hung; // per entry of the scenario's top-level "hang"
  double t0 = 0;          // nvmlInit on CLOCK_MONOTONIC (s): the scenario's time origin
  double t0_wall_ms = 0;  // issue 33: nvmlInit on the wall clock, so a phase's stored times map onto the scenario's
  Cost default_cost;
  std::map<std::string, Cost, std::less<>> cost_us;      // per symbol
  std::vector<std::unique_ptr<FakeEventSet>> event_sets; // issue 17
  // ---- simulate (issue 19) ----
  std::string scenario_text; // wattscope_fake_nvml_set_scenario: used instead of the file when set
  std::vector<std::pair<std::string, double>> segments; // the timeline: (label, seconds), in order
  double period_s = 0;                                  // their total
  bool loop = true;
  double loop_from_s = 0; // where a loop starts again: the start of segment "loop_from"
  // ---- end simulate
} g;

// Milliseconds a call with count k, t seconds after nvmlInit, should block for, per a "hang" spec (an object or a
// list); each entry once.
long long hang_ms(const json& owner, std::vector<bool>& hung, long long k, double t) {
  auto h = owner.find("hang");
  if (h == owner.end()) return 0;
  const size_t n = h->is_array() ? h->size() : 1;
  hung.resize(n);
  long long ms = 0;
  for (size_t i = 0; i < n; ++i) {
    const json& e = h->is_array() ? (*h)[i] : *h;
    const bool due = e.contains("at_s") ? t >= e.value("at_s", 0.0) : e.value("at_tick", -1LL) == k;
    if (hung[i] || !due) continue;
    hung[i] = true;
    ms += e.value("ms", 0LL);
  }
  return ms;
}

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Spends a call's cost ("call_cost_us"), outside the lock like a driver call: its CPU part spinning until the calling
// thread has used that much CPU (a driver's work: preempted on a busy machine, the call takes longer, not less CPU),
// then its sleep.
void spend(Cost c) {
  if (c.cpu_us > 0) {
    const double until = thread_cpu_s() + c.cpu_us * 1e-6;
    while (thread_cpu_s() < until) {
    }
  }
  if (c.sleep_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long long>(c.sleep_us)));
}

// A "call_cost_us" value: a number (under 1 ms spent on the CPU, else slept) or {"cpu": us, "sleep": us}.
Cost parse_cost(const json& v) {
  if (v.is_number()) {
    const double us = v.get<double>();
    return us >= 1000 ? Cost{0, us} : Cost{us, 0};
  }
  Cost c;
  if (v.is_object()) {
    if (auto cpu = v.find("cpu"); cpu != v.end() && cpu->is_number()) c.cpu_us = cpu->get<double>();
    if (auto sl = v.find("sleep"); sl != v.end() && sl->is_number()) c.sleep_us = sl->get<double>();
    if (auto from = v.find("from_s"); from != v.end() && from->is_number()) c.from_s = from->get<double>();
    if (auto n = v.find("calls"); n != v.end() && n->is_number_integer()) c.calls = n->get<long long>();
  }
  return c;
}

void count_call(std::string_view symbol) {
  Cost cost;
  {
    std::lock_guard lock(g.mu);
    // Heterogeneous lookup: no string is built per call, so the fake stays cheap and benchmark ratios mean something.
    auto it = g.symbol_calls.find(symbol);
    if (it == g.symbol_calls.end()) it = g.symbol_calls.emplace(std::string(symbol), 0).first;
    it->second++;
    auto c = g.cost_us.find(symbol);
    cost = c != g.cost_us.end() ? c->second : g.default_cost;
    if (cost.from_s > 0 && now_s() - g.t0 < cost.from_s) cost = {};
    if (cost.calls > 0 && it->second > cost.calls) cost = {};
  }
  spend(cost);
}

FakeDevice* dev(Device d) {
  auto* p = reinterpret_cast<FakeDevice*>(d);
  for (auto& fd : g.devices)
    if (&fd == p) return p;
  for (auto& m : g.migs)
    for (auto& fd : m)
      if (&fd == p) return p;
  return nullptr;
}

// ---- simulate (issue 19): values that follow the scenario's timeline ----
// The entry of a "timeline" map for `label`: a number, [from, to] (a ramp over the segment), "default", else 0.
double segment_value(const json& map, const std::string& label, double into_s, double seg_s) {
  auto it = map.find(label);
  if (it == map.end()) it = map.find("default");
  if (it == map.end()) return 0;
  if (it->is_number()) return it->get<double>();
  if (it->is_array() && it->size() == 2 && seg_s > 0)
    return (*it)[0].get<double>() + ((*it)[1].get<double>() - (*it)[0].get<double>()) * into_s / seg_s;
  return 0;
}
// The integral of that entry over the first `into_s` seconds of a segment of `seg_s` seconds.
double segment_integral(const json& map, const std::string& label, double into_s, double seg_s) {
  const double a = segment_value(map, label, 0, seg_s);
  const double b = segment_value(map, label, into_s, seg_s);
  return 0.5 * (a + b) * into_s; // straight lines: the trapezoid is exact
}
// Value (or integral over [0, t]) of a timeline map at t seconds since nvmlInit, in one pass over the segments.
double timeline_pass(const json& map, double t, bool integral) {
  double start = 0, base = 0;
  for (size_t i = 0; i < g.segments.size(); ++i) {
    const auto& [label, seg_s] = g.segments[i];
    if (t < start + seg_s || i + 1 == g.segments.size()) {
      const double into = std::clamp(t - start, 0.0, seg_s);
      return integral ? base + segment_integral(map, label, into, seg_s) : segment_value(map, label, into, seg_s);
    }
    if (integral) base += segment_integral(map, label, seg_s, seg_s);
    start += seg_s;
  }
  return base;
}
// Looping: past the end, time wraps to the start of segment "loop_from" (so a warm-up is not repeated).
double timeline_at(const json& map, double t, bool integral) {
  if (g.segments.empty() || g.period_s <= 0 || t < 0) return 0;
  const double span = g.period_s - g.loop_from_s;
  if (!g.loop || t < g.period_s || span <= 0) return timeline_pass(map, t, integral);
  const double wraps = std::floor((t - g.period_s) / span) + 1;
  const double t2 = t - wraps * span;
  if (!integral) return timeline_pass(map, t2, false);
  return timeline_pass(map, t2, true) +
         wraps * (timeline_pass(map, g.period_s, true) - timeline_pass(map, g.loop_from_s, true));
}
// A deterministic wiggle in [-amp, amp], so simulated curves look measured without being random between runs.
double wiggle(const json& noise, double t) {
  double amp = 0, seed = 0;
  if (noise.is_number()) amp = noise.get<double>();
  if (noise.is_array() && noise.size() == 2) {
    amp = noise[0].get<double>();
    seed = noise[1].get<double>();
  }
  return amp * (0.6 * std::sin(2 * M_PI * t / 2.3 + seed) + 0.4 * std::sin(2 * M_PI * t / 0.71 + 2.1 * seed));
}
// ---- end simulate

double eval(const json& v, long long k, double t) {
  if (v.is_number()) return v.get<double>();
  // A value that moves only every `update_s` seconds (issue 33: an H100's energy counter moves every 100 ms): the
  // value at the last multiple of it.
  if (v.is_object())
    if (const auto u = v.find("update_s"); u != v.end() && u->is_number() && u->get<double>() > 0)
      t = std::floor(t / u->get<double>()) * u->get<double>();
  if (v.is_array())
    return v.empty()
               ? 0
               : v[static_cast<size_t>(std::min<long long>(k, static_cast<long long>(v.size()) - 1))].get<double>();
  // A value a test sets from outside, as a thermal chamber sets a GPU's temperature: {"file": "/tmp/…/temp"} answers
  // the number in that file at each call ("default" while it is missing or unreadable).
  if (const auto f = v.find("file"); f != v.end() && f->is_string()) {
    std::ifstream in(f->get<std::string>());
    double x = 0;
    if (in >> x) return x;
    return v.value("default", 0.0);
  }
  // ---- simulate (issue 19) ----
  if (v.contains("timeline")) {
    double r = std::max(0.0, timeline_at(v["timeline"], t, false) + wiggle(v.value("noise", json(0)), t));
    if (auto cap = v.find("max"); cap != v.end()) r = std::min(r, eval(*cap, k, t));
    return r;
  }
  if (v.contains("timeline_integral")) return timeline_at(v["timeline_integral"], t, true);
  // ---- end simulate
  // issue 36: injected faults at known calls: {"piecewise": [[k0, v0], [k1, v1], ...]} is straight between the points
  // (a step: two points one call apart), constant before the first and after the last; "noise" as for a timeline.
  if (const auto pw = v.find("piecewise"); pw != v.end() && pw->is_array() && !pw->empty()) {
    const auto kd = static_cast<double>(k);
    double r = (*pw)[0][1].get<double>();
    for (size_t i = 0; i < pw->size(); ++i) {
      const double k1 = (*pw)[i][0].get<double>(), v1 = (*pw)[i][1].get<double>();
      if (kd >= k1) {
        r = v1;
        continue;
      }
      if (i > 0) {
        const double k0 = (*pw)[i - 1][0].get<double>(), v0 = (*pw)[i - 1][1].get<double>();
        r = v0 + (v1 - v0) * (kd - k0) / (k1 - k0);
      }
      break;
    }
    return std::max(0.0, r + wiggle(v.value("noise", json(0)), t));
  }
  if (v.contains("linear")) return v["linear"][0].get<double>() + v["linear"][1].get<double>() * static_cast<double>(k);
  const double two_pi = 2 * M_PI;
  if (v.contains("sine")) {
    const auto& s = v["sine"];
    return s["base"].get<double>() + s["amp"].get<double>() * std::sin(two_pi * t / s["period_s"].get<double>());
  }
  if (v.contains("sine_integral")) {
    const auto& s = v["sine_integral"];
    const double p = s["period_s"].get<double>();
    return s["base"].get<double>() * t + s["amp"].get<double>() * p / two_pi * (1 - std::cos(two_pi * t / p));
  }
  return 0;
}

// The value of a per-tick metric, advancing its call count; NOT_SUPPORTED / GPU_IS_LOST as the scenario says.
Return metric(Device d, std::string_view name, double& out) {
  std::unique_lock lock(g.mu);
  if (!g.initialised) return kErrorUninitialized;
  FakeDevice* fd = dev(d);
  if (!fd) return kErrorInvalidArgument;
  auto c = fd->calls.find(name);
  if (c == fd->calls.end()) c = fd->calls.emplace(std::string(name), 0).first;
  const long long k = c->second++;
  const json& spec = fd->spec;
  const double t = now_s() - g.t0;
  if (const long long ms = hang_ms(spec, fd->hung, k, t) + hang_ms(g.scenario, g.hung, k, t); ms > 0) {
    lock.unlock(); // like the driver: this caller waits, the fake stays usable from other threads
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    lock.lock();
  }
  if (auto lost = spec.find("lost_at_tick"); lost != spec.end() && k >= lost->get<long long>()) return kErrorGpuIsLost;
  if (auto errs = spec.find("errors"); errs != spec.end())
    if (auto e = errs->find(name); e != errs->end()) {
      bool hit = e->contains("from_tick") && k >= e->at("from_tick").get<long long>();
      for (const auto& t : e->value("ticks", json::array()))
        hit = hit || t.get<long long>() == k;
      if (hit) return e->value("code", static_cast<int>(kErrorUnknown));
    }
  if (auto un = spec.find("unsupported"); un != spec.end())
    for (const auto& u : *un)
      if (u.get_ref<const std::string&>() == name) return kErrorNotSupported;
  auto metrics = spec.find("metrics");
  if (metrics == spec.end()) return kErrorNotSupported;
  auto v = metrics->find(name);
  if (v == metrics->end()) return kErrorNotSupported;
  out = eval(*v, k, now_s() - g.t0);
  return kSuccess;
}

template <typename T> Return metric_to(Device d, const std::string& name, T* out) {
  if (!out) return kErrorInvalidArgument;
  double v = 0;
  Return rc = metric(d, name, v);
  if (rc == kSuccess) *out = static_cast<T>(std::llround(v));
  return rc;
}

Return copy_string(const std::string& s, char* buf, unsigned int len) {
  if (!buf) return kErrorInvalidArgument;
  if (s.size() + 1 > len) return kErrorInsufficientSize;
  std::memcpy(buf, s.c_str(), s.size() + 1);
  return kSuccess;
}

Return static_string(Device d, const char* key, char* buf, unsigned int len) {
  std::lock_guard lock(g.mu);
  FakeDevice* fd = dev(d);
  if (!fd) return kErrorInvalidArgument;
  if (!fd->spec.contains(key)) return kErrorNotSupported;
  return copy_string(fd->spec[key].get<std::string>(), buf, len);
}

// ---- implementations, one per entry-point member ----
namespace impl {
Return init() {
  std::unique_lock lock(g.mu);
  if (!g.scenario_text.empty()) { // ---- simulate (issue 19): handed over in memory
    g.scenario = json::parse(g.scenario_text, nullptr, false);
  } else {
    const char* path = std::getenv("WATTSCOPE_FAKE_NVML_SCENARIO");
    if (!path) return kErrorDriverNotLoaded;
    std::ifstream in(path);
    if (!in) return kErrorDriverNotLoaded;
    g.scenario = json::parse(in, nullptr, false);
  }
  if (g.scenario.is_discarded()) return kErrorUnknown;
  // ---- simulate (issue 19): the timeline's segments ----
  g.segments.clear();
  g.period_s = 0;
  g.loop_from_s = 0;
  g.loop = true;
  if (auto tl = g.scenario.find("timeline"); tl != g.scenario.end() && tl->is_object()) {
    g.loop = tl->value("loop", true);
    const long long loop_from = tl->value("loop_from", 0LL);
    g.loop_from_s = 0;
    for (const auto& seg : tl->value("segments", json::array()))
      if (seg.is_object() && seg.value("s", 0.0) > 0) {
        if (static_cast<long long>(g.segments.size()) == loop_from) g.loop_from_s = g.period_s;
        g.segments.emplace_back(seg.value("label", std::string()), seg["s"].get<double>());
        g.period_s += seg["s"].get<double>();
      }
  }
  // ---- end simulate
  if (int e = g.scenario.value("init_error", 0)) return e;
  // issue 31: a driver whose nvmlInit hangs (no persistence mode, a wedged GPU) or crashes inside the library.
  if (const int ms = g.scenario.value("init_sleep_ms", 0); ms > 0) {
    lock.unlock(); // as the real library: other threads may call in meanwhile and get UNINITIALIZED
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    lock.lock();
  }
  if (g.scenario.value("init_crash", false)) std::raise(SIGSEGV);
  g.devices.clear();
  g.hung.clear();
  g.migs.clear();
  g.event_sets.clear(); // issue 17: they point at the devices
  for (const auto& d : g.scenario.value("devices", json::array())) {
    g.devices.push_back({d, {}, {}, {}, 0, {}, {}});
    g.migs.emplace_back();
    for (const auto& m : d.value("mig", json::array())) {
      json spec = m.is_string() ? json{{"uuid", m}} : m; // issue 17: an instance may be an object
      if (!spec.is_object()) continue;
      if (!spec.contains("gpu_instance")) spec["gpu_instance"] = g.migs.back().size() + 1;
      if (!spec.contains("compute_instance")) spec["compute_instance"] = 0;
      g.migs.back().push_back({spec, {}, {}, {}, 0, {}, {}});
    }
  }
  g.default_cost = {};
  g.cost_us.clear();
  if (auto c = g.scenario.find("call_cost_us"); c != g.scenario.end()) {
    if (c->is_number()) g.default_cost = parse_cost(*c);
    if (c->is_object())
      for (const auto& [symbol, us] : c->items()) {
        if (symbol == "default")
          g.default_cost = parse_cost(us);
        else
          g.cost_us[symbol] = parse_cost(us);
      }
  }
  g.initialised = true;
  g.t0 = now_s();
  {
    timespec wall{};
    clock_gettime(CLOCK_REALTIME, &wall);
    g.t0_wall_ms = static_cast<double>(wall.tv_sec) * 1e3 + static_cast<double>(wall.tv_nsec) * 1e-6;
  }
  return kSuccess;
}
Return shutdown() {
  std::lock_guard lock(g.mu);
  if (const char* out = std::getenv("WATTSCOPE_FAKE_NVML_CALLS")) {
    json j = g.symbol_calls;
    std::ofstream(out) << j.dump(2);
  }
  if (const char* out = std::getenv("WATTSCOPE_FAKE_NVML_ENERGY")) { // issue 33: {"0": {"first_mj", "last_mj"}}
    json j = {{"t0_wall_ms", g.t0_wall_ms}, {"t0_monotonic_s", g.t0}};
    for (size_t i = 0; i < g.devices.size(); ++i)
      if (g.devices[i].energy_first_mj)
        j[std::to_string(i)] = {{"first_mj", *g.devices[i].energy_first_mj}, {"last_mj", *g.devices[i].energy_last_mj}};
    std::ofstream(out) << j.dump(2);
  }
  g.initialised = false;
  return kSuccess;
}
Return system_driver_version(char* buf, unsigned int len) {
  std::lock_guard lock(g.mu);
  return copy_string(g.scenario.value("driver_version", std::string("0.0")), buf, len);
}
Return system_nvml_version(char* buf, unsigned int len) {
  std::lock_guard lock(g.mu);
  return copy_string(g.scenario.value("nvml_version", std::string("0.0")), buf, len);
}
Return device_count(unsigned int* n) {
  std::lock_guard lock(g.mu);
  if (!g.initialised) return kErrorUninitialized;
  if (!n) return kErrorInvalidArgument;
  *n = static_cast<unsigned int>(g.devices.size());
  return kSuccess;
}
Return device_by_index(unsigned int i, Device* d) {
  std::lock_guard lock(g.mu);
  if (!g.initialised) return kErrorUninitialized;
  if (!d || i >= g.devices.size()) return kErrorInvalidArgument;
  *d = reinterpret_cast<Device>(&g.devices[i]);
  return kSuccess;
}
Return device_name(Device d, char* buf, unsigned int len) {
  return static_string(d, "name", buf, len);
}
Return device_uuid(Device d, char* buf, unsigned int len) {
  return static_string(d, "uuid", buf, len);
}
Return device_pci_info(Device d, PciInfo* p) {
  if (!p) return kErrorInvalidArgument;
  std::memset(p, 0, sizeof *p);
  Return rc = static_string(d, "pci_bus_id", p->busId, sizeof p->busId);
  if (rc == kSuccess) std::snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%.15s", p->busId + 4);
  return rc;
}
bool rejects_version(std::string_view symbol) {
  std::lock_guard lock(g.mu);
  for (const auto& r : g.scenario.value("reject_versions", json::array()))
    if (r.is_string() && r.get_ref<const std::string&>() == symbol) return true;
  return false;
}
Return device_pci_info_legacy(Device d, PciInfoLegacy* p) {
  if (!p) return kErrorInvalidArgument;
  std::memset(p, 0, sizeof *p);
  char full[64] = {};
  Return rc = static_string(d, "pci_bus_id", full, sizeof full);
  if (rc != kSuccess) return rc;
  const std::string_view id = full;
  // "00000000:18:00.0" -> "0000:18:00.0": the legacy field holds 16 bytes with the NUL
  const std::string_view shortened = id.size() >= 16 && id[8] == ':' ? id.substr(4) : id;
  std::snprintf(p->busId, sizeof p->busId, "%.*s", static_cast<int>(shortened.size()), shortened.data());
  return kSuccess;
}
Return device_temperature_v(Device d, TemperatureV1* t) {
  if (!t) return kErrorInvalidArgument;
  if (rejects_version("nvmlDeviceGetTemperatureV") || t->version != kTemperatureV1Version)
    return kArgumentVersionMismatch;
  if (t->sensorType != kTemperatureGpu) return kErrorInvalidArgument;
  unsigned int c = 0;
  const Return rc = metric_to(d, "temp_gpu", &c);
  if (rc == kSuccess) t->temperature = static_cast<int>(c);
  return rc;
}
Return device_max_clock(Device d, int type, unsigned int* mhz) {
  std::lock_guard lock(g.mu);
  FakeDevice* fd = dev(d);
  if (!fd || !mhz) return kErrorInvalidArgument;
  const char* key = type == kClockSm    ? "max_clock_sm_mhz"
                    : type == kClockMem ? "max_clock_mem_mhz"
                                        : "max_clock_gfx_mhz";
  if (!fd->spec.contains(key)) return kErrorNotSupported;
  *mhz = fd->spec[key].get<unsigned int>();
  return kSuccess;
}
// "slowdown_temp_c" / "shutdown_temp_c" on a device: what nvmlDeviceGetTemperatureThreshold answers (an H100 SXM says
// 87 and 92); absent: NVML_ERROR_NOT_SUPPORTED, as consumer boards answer for some thresholds.
Return device_temperature_threshold(Device d, int type, unsigned int* c) {
  std::lock_guard lock(g.mu);
  FakeDevice* fd = dev(d);
  if (!fd || !c) return kErrorInvalidArgument;
  const char* key = type == kTempThresholdSlowdown   ? "slowdown_temp_c"
                    : type == kTempThresholdShutdown ? "shutdown_temp_c"
                                                     : nullptr;
  if (!key || !fd->spec.contains(key)) return kErrorNotSupported;
  *c = fd->spec[key].get<unsigned int>();
  return kSuccess;
}
Return device_memory_v2(Device d, MemoryV2* m) {
  if (!m) return kErrorInvalidArgument;
  if (m->version != kMemoryV2Version || rejects_version("nvmlDeviceGetMemoryInfo_v2")) return kArgumentVersionMismatch;
  unsigned long long used = 0, total = 0;
  Return rc = metric_to(d, "mem_used_bytes", &used);
  if (rc != kSuccess) return rc;
  if ((rc = metric_to(d, "mem_total_bytes", &total)) != kSuccess) return rc;
  double reserved = 0; // optional in a scenario: 0 when absent
  if (metric(d, "mem_reserved_bytes", reserved) != kSuccess) reserved = 0;
  m->used = used;
  m->total = total;
  m->reserved = static_cast<unsigned long long>(reserved);
  m->free = total - used - m->reserved;
  return kSuccess;
}
Return device_memory(Device d, Memory* m) {
  if (!m) return kErrorInvalidArgument;
  Return rc = metric_to(d, "mem_used_bytes", &m->used);
  if (rc != kSuccess) return rc;
  if ((rc = metric_to(d, "mem_total_bytes", &m->total)) != kSuccess) return rc;
  m->free = m->total - m->used;
  return kSuccess;
}
Return device_power_usage(Device d, unsigned int* mw) {
  return metric_to(d, "power_mw", mw);
}
Return device_total_energy(Device d, unsigned long long* mj) {
  const Return rc = metric_to(d, "energy_mj", mj);
  if (rc == kSuccess) { // issue 33
    std::lock_guard lock(g.mu);
    if (FakeDevice* fd = dev(d)) {
      if (!fd->energy_first_mj) fd->energy_first_mj = *mj;
      fd->energy_last_mj = *mj;
    }
  }
  return rc;
}
Return device_utilization(Device d, Utilization* u) {
  if (!u) return kErrorInvalidArgument;
  Return rc = metric_to(d, "util_gpu", &u->gpu);
  return rc == kSuccess ? metric_to(d, "util_mem", &u->memory) : rc;
}
Return device_temperature(Device d, int sensor, unsigned int* c) {
  return sensor == kTemperatureGpu ? metric_to(d, "temp_gpu", c) : kErrorInvalidArgument;
}
Return device_clock(Device d, int type, unsigned int* mhz) {
  const char* name = type == kClockSm      ? "clock_sm"
                     : type == kClockMem   ? "clock_mem"
                     : type == kClockVideo ? "clock_video"
                                           : "clock_gfx";
  return metric_to(d, name, mhz);
}
Return device_pcie_width(Device d, unsigned int* w) {
  return metric_to(d, "pcie_width", w);
}
Return device_pcie_width_max(Device d, unsigned int* w) {
  return metric_to(d, "pcie_width_max", w);
}
Return device_pcie_throughput(Device d, int counter, unsigned int* kbs) {
  return metric_to(d, counter == kPcieUtilTx ? "pcie_tx_kbs" : "pcie_rx_kbs", kbs);
}
Return device_fan(Device d, unsigned int* pct) {
  return metric_to(d, "fan_pct", pct);
}
Return device_pstate(Device d, int* p) {
  return metric_to(d, "pstate", p);
}
Return device_enforced_power_limit(Device d, unsigned int* mw) {
  return metric_to(d, "power_limit_mw", mw);
}
Return device_clock_events(Device d, unsigned long long* mask) {
  return metric_to(d, "clock_events", mask);
}
Return device_encoder_utilization(Device d, unsigned int* pct, unsigned int* period_us) {
  if (!period_us) return kErrorInvalidArgument;
  *period_us = 167000;
  return metric_to(d, "util_enc", pct);
}
Return device_decoder_utilization(Device d, unsigned int* pct, unsigned int* period_us) {
  if (!period_us) return kErrorInvalidArgument;
  *period_us = 167000;
  return metric_to(d, "util_dec", pct);
}
Return device_field_values(Device d, int count, FieldValue* values) {
  if (!values || count <= 0) return kErrorInvalidArgument;
  {
    std::lock_guard lock(g.mu);
    if (!dev(d)) return kErrorInvalidArgument;
  }
  // issue 17: a scripted timestamp for every field of this call, when the scenario gives one
  long long stamp = static_cast<long long>(now_s() * 1e6);
  bool scripted = false;
  {
    std::lock_guard lock(g.mu);
    const json& spec = dev(d)->spec;
    scripted = spec.contains("metrics") && spec["metrics"].contains("field_timestamp_us");
  }
  if (scripted) {
    double ts = 0;
    if (metric(d, "field_timestamp_us", ts) == kSuccess) stamp = std::llround(ts);
  }
  for (int i = 0; i < count; ++i) {
    FieldValue& f = values[i];
    const bool nvlink = f.fieldId == kFieldNvlinkDataTx || f.fieldId == kFieldNvlinkDataRx;
    const bool violation = f.fieldId == kFieldPerfPolicyPower || f.fieldId == kFieldPerfPolicyThermal; // issue 30
    const char* name = f.fieldId == kFieldPowerInstant        ? "power_instant_mw"
                       : f.fieldId == kFieldPowerAverage      ? "power_avg_mw"
                       : f.fieldId == kFieldMemoryTemp        ? "temp_mem"
                       : f.fieldId == kFieldNvlinkDataTx      ? "nvlink_tx_kib"
                       : f.fieldId == kFieldNvlinkDataRx      ? "nvlink_rx_kib"
                       : f.fieldId == kFieldPerfPolicyPower   ? "violation_power_ns"
                       : f.fieldId == kFieldPerfPolicyThermal ? "violation_thermal_ns"
                                                              : nullptr;
    {
      std::lock_guard lock(g.mu); // issue 30: a driver that does not know these ids
      for (const auto& id : g.scenario.value("unsupported_fields", json::array()))
        if (id.is_number_unsigned() && id.get<unsigned int>() == f.fieldId) name = nullptr;
    }
    double v = 0;
    f.nvmlReturn = name ? metric(d, name, v) : kErrorNotSupported;
    if (f.nvmlReturn == kErrorGpuIsLost) return kErrorGpuIsLost;
    if (nvlink && f.nvmlReturn == kSuccess && f.scopeId != kScopeAllLinks) f.nvmlReturn = kErrorInvalidArgument;
    if (nvlink || violation) {
      f.valueType = kValueULongLong;
      f.value.ullVal = static_cast<unsigned long long>(std::llround(v));
    } else {
      f.valueType = kValueUInt;
      f.value.uiVal = static_cast<unsigned int>(std::llround(v));
    }
    f.timestamp = stamp;
    f.latencyUsec = 0;
  }
  return kSuccess;
}
Return device_max_mig_count(Device d, unsigned int* n) {
  std::lock_guard lock(g.mu);
  if (!n) return kErrorInvalidArgument;
  for (size_t i = 0; i < g.devices.size(); ++i)
    if (reinterpret_cast<Device>(&g.devices[i]) == d) {
      if (!g.devices[i].spec.contains("mig")) return kErrorNotSupported;
      *n = static_cast<unsigned int>(g.migs[i].size());
      return kSuccess;
    }
  return kErrorInvalidArgument;
}
Return device_mig_by_index(Device d, unsigned int index, Device* mig) {
  std::lock_guard lock(g.mu);
  if (!mig) return kErrorInvalidArgument;
  for (size_t i = 0; i < g.devices.size(); ++i)
    if (reinterpret_cast<Device>(&g.devices[i]) == d) {
      if (!g.devices[i].spec.contains("mig")) return kErrorNotSupported;
      if (index >= g.migs[i].size()) return kErrorNotFound;
      *mig = reinterpret_cast<Device>(&g.migs[i][index]);
      return kSuccess;
    }
  return kErrorInvalidArgument;
}
// ---- issue 17: MIG mode and ids, health counters, Xid events ----
Return device_mig_mode(Device d, unsigned int* current, unsigned int* pending) {
  std::lock_guard lock(g.mu);
  if (!current || !pending) return kErrorInvalidArgument;
  for (auto& fd : g.devices)
    if (reinterpret_cast<Device>(&fd) == d) {
      if (fd.spec.contains("mig_mode"))
        *current = *pending = fd.spec["mig_mode"].get<unsigned int>();
      else if (fd.spec.contains("mig"))
        *current = *pending = kMigEnabled;
      else
        return kErrorNotSupported;
      return kSuccess;
    }
  return dev(d) ? kErrorNotSupported : kErrorInvalidArgument; // a MIG handle has no MIG mode of its own
}
// The id of a MIG handle; INVALID_ARGUMENT for a GPU's own handle, as the driver answers.
Return instance_id(Device d, const char* key, unsigned int* id) {
  std::lock_guard lock(g.mu);
  if (!id) return kErrorInvalidArgument;
  for (auto& m : g.migs)
    for (auto& fd : m)
      if (reinterpret_cast<Device>(&fd) == d) {
        *id = fd.spec.value(key, 0u);
        return kSuccess;
      }
  return kErrorInvalidArgument;
}
Return device_gpu_instance_id(Device d, unsigned int* id) {
  return instance_id(d, "gpu_instance", id);
}
Return device_compute_instance_id(Device d, unsigned int* id) {
  return instance_id(d, "compute_instance", id);
}
Return device_total_ecc_errors(Device d, int error_type, int counter_type, unsigned long long* count) {
  if (!count || (error_type != kMemoryErrorCorrected && error_type != kMemoryErrorUncorrected))
    return kErrorInvalidArgument;
  if (counter_type != kEccCounterVolatile) return kErrorNotSupported;
  return metric_to(d, error_type == kMemoryErrorCorrected ? "ecc_corrected" : "ecc_uncorrected", count);
}
Return device_remapped_rows(Device d, unsigned int* corrected, unsigned int* uncorrected, unsigned int* pending,
                            unsigned int* failure) {
  if (!corrected || !uncorrected || !pending || !failure) return kErrorInvalidArgument;
  Return rc = metric_to(d, "remapped_cor", corrected);
  if (rc == kSuccess) rc = metric_to(d, "remapped_unc", uncorrected);
  if (rc == kSuccess) rc = metric_to(d, "remap_pending", pending);
  if (rc == kSuccess) rc = metric_to(d, "remap_failed", failure);
  return rc;
}
Return device_pcie_replay_counter(Device d, unsigned int* n) {
  return metric_to(d, "pcie_replays", n);
}
Return device_violation_status(Device d, int policy, ViolationTime* t) {
  if (!t) return kErrorInvalidArgument;
  if (policy != kPerfPolicyPower && policy != kPerfPolicyThermal) return kErrorNotSupported;
  t->referenceTime = static_cast<unsigned long long>(now_s() * 1e6);
  return metric_to(d, policy == kPerfPolicyPower ? "violation_power_ns" : "violation_thermal_ns", &t->violationTime);
}
FakeEventSet* event_set(EventSet set) {
  for (auto& s : g.event_sets)
    if (reinterpret_cast<EventSet>(s.get()) == set) return s.get();
  return nullptr;
}
Return event_set_create(EventSet* set) {
  std::lock_guard lock(g.mu);
  if (!g.initialised) return kErrorUninitialized;
  if (!set) return kErrorInvalidArgument;
  g.event_sets.push_back(std::make_unique<FakeEventSet>());
  *set = reinterpret_cast<EventSet>(g.event_sets.back().get());
  return kSuccess;
}
Return device_register_events(Device d, unsigned long long types, EventSet set) {
  std::lock_guard lock(g.mu);
  FakeDevice* fd = dev(d);
  FakeEventSet* es = event_set(set);
  if (!fd || !es) return kErrorInvalidArgument;
  for (const auto& u : fd->spec.value("unsupported", json::array()))
    if (u.is_string() && u.get_ref<const std::string&>() == "xid") return kErrorNotSupported;
  if (types != kEventTypeXidCriticalError) return kErrorNotSupported; // the only type this fake delivers
  es->devices.push_back(fd);
  return kSuccess;
}
Return event_set_wait(EventSet set, EventData* data, unsigned int timeout_ms) {
  if (!data) return kErrorInvalidArgument;
  const double deadline = now_s() + timeout_ms * 1e-3;
  for (;;) {
    double next = deadline;
    {
      std::lock_guard lock(g.mu);
      FakeEventSet* es = event_set(set);
      if (!es || !g.initialised) return kErrorInvalidArgument;
      if (int e = g.scenario.value("event_wait_error", 0)) return e;
      const double t = now_s() - g.t0;
      for (FakeDevice* fd : es->devices) {
        const json xids = fd->spec.value("xid", json::array());
        if (fd->xid_delivered >= xids.size()) continue;
        const json& x = xids[fd->xid_delivered];
        const double at = x.value("after_s", 0.0);
        if (at <= t) {
          fd->xid_delivered++;
          *data = {};
          data->device = reinterpret_cast<Device>(fd);
          data->eventType = kEventTypeXidCriticalError;
          data->eventData = x.value("xid", 999ULL);
          data->gpuInstanceId = x.value("gpu_instance", kNoInstance);
          data->computeInstanceId = x.value("compute_instance", kNoInstance);
          return kSuccess;
        }
        next = std::min(next, g.t0 + at);
      }
    }
    const double now = now_s();
    if (now >= deadline) return kErrorTimeout;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(next, deadline) - now + 1e-4));
  }
}
Return event_set_free(EventSet set) {
  std::lock_guard lock(g.mu);
  for (auto it = g.event_sets.begin(); it != g.event_sets.end(); ++it)
    if (reinterpret_cast<EventSet>(it->get()) == set) {
      g.event_sets.erase(it);
      return kSuccess;
    }
  return kErrorInvalidArgument;
}
// ---- end issue 17
} // namespace impl

// ---- processes on a device ----

// The pid a "processes" entry names now, when that process is alive (not a zombie); 0 otherwise.
unsigned int live_pid(const json& p) {
  long long pid = p.value("pid", 0LL);
  if (auto f = p.find("pid_file"); f != p.end() && f->is_string()) {
    std::ifstream in(f->get<std::string>());
    if (!(in >> pid)) return 0;
  }
  if (pid <= 0) return 0;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return 0;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X' ? 0 : static_cast<unsigned int>(pid);
}

// Entries of the device's "processes" of one type that are alive now: (index in the list, pid).
Return live_processes(Device d, const char* type, std::vector<std::pair<size_t, unsigned int>>& out) {
  std::lock_guard lock(g.mu);
  if (!g.initialised) return kErrorUninitialized;
  FakeDevice* fd = dev(d);
  if (!fd) return kErrorInvalidArgument;
  if (auto lost = fd->spec.find("lost_at_tick"); lost != fd->spec.end()) {
    auto c = fd->calls.find("power_mw");
    if (c != fd->calls.end() && c->second >= lost->get<long long>()) return kErrorGpuIsLost;
  }
  const json procs = fd->spec.value("processes", json::array());
  for (size_t i = 0; i < procs.size(); ++i)
    if (procs[i].value("type", std::string("compute")) == type)
      if (unsigned int pid = live_pid(procs[i])) out.emplace_back(i, pid);
  return kSuccess;
}

double process_value(const json& p, const char* key, long long k, double fallback) {
  auto v = p.find(key);
  return v == p.end() ? fallback : eval(*v, k, now_s() - g.t0);
}

// The entry point being answered (set by every export): _v3 and _v2 share an implementation but not, on drivers
// 535.43-535.98, a struct.
thread_local const char* t_symbol = "";

// The list in entries of `stride` bytes, as the driver writes them: 16 (v1), 24 (v2 and most _v3) or 32 (_v3 of drivers
// 535.43.02-535.98, issue 30: "process_info_v3_bytes": 32 at the scenario's top level).
Return running_processes(Device d, const char* type, unsigned int* count, void* infos, size_t stride) {
  if (!count) return kErrorInvalidArgument;
  std::vector<std::pair<size_t, unsigned int>> live;
  if (Return rc = live_processes(d, type, live); rc != kSuccess) return rc;
  const unsigned int room = *count;
  *count = static_cast<unsigned int>(live.size());
  if (live.size() > room || (!infos && !live.empty())) return kErrorInsufficientSize;
  std::lock_guard lock(g.mu);
  const json procs = dev(d)->spec.value("processes", json::array());
  for (size_t i = 0; i < live.size(); ++i) {
    ProcessInfoR535 info{};
    info.pid = live[i].second;
    const json& p = procs[live[i].first];
    info.usedGpuMemory = p.contains("mem_bytes")
                             ? static_cast<unsigned long long>(std::llround(process_value(p, "mem_bytes", 0, 0)))
                             : kValueNotAvailable;
    info.gpuInstanceId = info.computeInstanceId = kNoInstance;
    info.usedGpuCcProtectedMemory = 0;
    std::memcpy(static_cast<unsigned char*>(infos) + i * stride, &info, stride);
  }
  return kSuccess;
}
size_t v3_stride() {
  const bool v3 = std::string_view(t_symbol).ends_with("_v3");
  std::lock_guard lock(g.mu);
  return v3 ? g.scenario.value("process_info_v3_bytes", sizeof(ProcessInfo)) : sizeof(ProcessInfo);
}

struct FakeUtil {
  unsigned int pid;
  unsigned int sm, mem, enc, dec;
};
// One utilisation sample per live process of either type, advancing each one's count.
Return process_samples(Device d, std::vector<FakeUtil>& out) {
  std::vector<std::pair<size_t, unsigned int>> live;
  if (Return rc = live_processes(d, "compute", live); rc != kSuccess) return rc;
  if (Return rc = live_processes(d, "graphics", live); rc != kSuccess) return rc;
  std::lock_guard lock(g.mu);
  FakeDevice* fd = dev(d);
  if (!fd->spec.value("process_utilization", true)) return kErrorNotSupported;
  const json procs = fd->spec.value("processes", json::array());
  fd->proc_calls.resize(procs.size());
  for (const auto& [i, pid] : live) {
    const long long k = fd->proc_calls[i]++;
    const json& proc = procs[i]; // (clang 14 cannot capture a structured binding)
    auto pct = [&](const char* key) { return static_cast<unsigned int>(std::llround(process_value(proc, key, k, 0))); };
    out.push_back({pid, pct("sm"), pct("mem"), pct("enc"), pct("dec")});
  }
  return kSuccess;
}

namespace impl {
Return device_compute_processes(Device d, unsigned int* count, ProcessInfo* infos) {
  return running_processes(d, "compute", count, infos, v3_stride());
}
Return device_compute_processes_v1(Device d, unsigned int* count, ProcessInfoV1* infos) {
  return running_processes(d, "compute", count, infos, sizeof(ProcessInfoV1));
}
Return device_graphics_processes(Device d, unsigned int* count, ProcessInfo* infos) {
  return running_processes(d, "graphics", count, infos, v3_stride());
}
Return device_graphics_processes_v1(Device d, unsigned int* count, ProcessInfoV1* infos) {
  return running_processes(d, "graphics", count, infos, sizeof(ProcessInfoV1));
}
// issue 30: present from driver 535.43.02 on; only whether it answers matters to wattscope.
Return device_conf_compute_mem_size(Device d, ConfComputeMemSizeInfo* m) {
  std::lock_guard lock(g.mu);
  if (!m || !dev(d)) return kErrorInvalidArgument;
  return kErrorNotSupported; // no confidential computing on the fake's GPUs
}
// From 535.104.05 on: the 32-byte entries, mode 0 compute, 1 graphics (2, MPS, lists nothing here).
Return device_process_detail_list(Device d, ProcessDetailList* l) {
  if (!l || l->version != (static_cast<unsigned int>(sizeof(ProcessDetailList)) | (1u << 24)))
    return l ? kArgumentVersionMismatch : kErrorInvalidArgument;
  unsigned int n = l->procArray ? l->numProcArrayEntries : 0;
  const Return rc =
      running_processes(d, l->mode == 1 ? "graphics" : "compute", &n, l->procArray, sizeof(ProcessInfoR535));
  l->numProcArrayEntries = n;
  return rc;
}
// Like the driver: a call without room only says how many samples there are (and consumes none).
Return device_process_utilization(Device d, ProcessUtilizationSample* samples, unsigned int* count,
                                  unsigned long long /*last_seen_us*/) {
  if (!count) return kErrorInvalidArgument;
  if (!samples) {
    std::vector<std::pair<size_t, unsigned int>> live;
    if (Return rc = live_processes(d, "compute", live); rc != kSuccess) return rc;
    if (Return rc = live_processes(d, "graphics", live); rc != kSuccess) return rc;
    *count = static_cast<unsigned int>(live.size());
    return live.empty() ? kErrorNotFound : kErrorInsufficientSize;
  }
  count_call("nvmlDeviceGetProcessUtilization (samples)"); // the driver's dear part (see the header)
  std::vector<FakeUtil> u;
  if (Return rc = process_samples(d, u); rc != kSuccess) return rc;
  if (u.size() > *count) {
    *count = static_cast<unsigned int>(u.size());
    return kErrorInsufficientSize;
  }
  const auto ts = static_cast<unsigned long long>(now_s() * 1e6);
  *count = static_cast<unsigned int>(u.size());
  for (size_t i = 0; i < u.size(); ++i)
    samples[i] = {u[i].pid, ts, u[i].sm, u[i].mem, u[i].enc, u[i].dec};
  return u.empty() ? kErrorNotFound : kSuccess;
}
Return device_processes_utilization_info(Device d, ProcessesUtilizationInfo* info) {
  if (!info) return kErrorInvalidArgument;
  if (info->version != kProcessesUtilizationInfoVersion) return kArgumentVersionMismatch;
  if (!info->procUtilArray) {
    std::vector<std::pair<size_t, unsigned int>> live;
    if (Return rc = live_processes(d, "compute", live); rc != kSuccess) return rc;
    if (Return rc = live_processes(d, "graphics", live); rc != kSuccess) return rc;
    {
      std::lock_guard lock(g.mu);
      if (!dev(d)->spec.value("process_utilization", true)) return kErrorNotSupported;
    }
    info->processSamplesCount = static_cast<unsigned int>(live.size());
    return live.empty() ? kErrorNotFound : kErrorInsufficientSize;
  }
  count_call("nvmlDeviceGetProcessesUtilizationInfo (samples)");
  std::vector<FakeUtil> u;
  if (Return rc = process_samples(d, u); rc != kSuccess) return rc;
  if (u.size() > info->processSamplesCount) {
    info->processSamplesCount = static_cast<unsigned int>(u.size());
    return kErrorInsufficientSize;
  }
  const auto ts = static_cast<unsigned long long>(now_s() * 1e6);
  info->processSamplesCount = static_cast<unsigned int>(u.size());
  for (size_t i = 0; i < u.size(); ++i)
    info->procUtilArray[i] = {ts, u[i].pid, u[i].sm, u[i].mem, u[i].enc, u[i].dec, 0, 0};
  return u.empty() ? kErrorNotFound : kSuccess;
}
} // namespace impl

} // namespace

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))
// ---- simulate (issue 19): the scenario handed over in memory (see the header comment) ----
FAKE_EXPORT int wattscope_fake_nvml_set_scenario(const char* json_text) {
  std::lock_guard lock(g.mu);
  g.scenario_text = json_text ? json_text : "";
  return 0;
}
// ---- end simulate
#define FAKE_X1(member, need, params, args, sym)                                                                       \
  FAKE_EXPORT Return sym params {                                                                                      \
    count_call(#sym);                                                                                                  \
    t_symbol = #sym;                                                                                                   \
    return impl::member args;                                                                                          \
  }
#define FAKE_X2(member, need, params, args, newest, older)                                                             \
  FAKE_X1(member, need, params, args, newest)                                                                          \
  FAKE_X1(member, need, params, args, older)
WATTSCOPE_NVML_ENTRY_POINTS(FAKE_X1, FAKE_X2)
