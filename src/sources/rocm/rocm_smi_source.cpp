#include "sources/rocm/rocm_smi_source.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/schema.hpp"
#include "core/thread_name.hpp"
#include "sources/dl_open.hpp"

namespace wattscope {

using namespace rocm;

namespace {

constexpr const char* kCallNames[] = {"energy_count",   "current_socket_power",
                                      "power_ave",      "power_cap",
                                      "busy_percent",   "memory_busy_percent",
                                      "vram_used",      "vram_total",
                                      "temp_edge",      "temp_junction",
                                      "temp_memory",    "clock_sys",
                                      "clock_mem",      "fan_speed",
                                      "pcie_bandwidth", "pcie_throughput"};
static_assert(std::size(kCallNames) == RocmSmiSource::kCallCount, "one name per RocmSmiSource::Call");

// Whether the library has what a call needs.
bool present(const Library& l, RocmSmiSource::Call c, bool layout_known) {
  switch (c) {
  case RocmSmiSource::cEnergy:
    return l.dev_energy_count != nullptr;
  case RocmSmiSource::cSocketPower:
    return l.dev_current_socket_power != nullptr;
  case RocmSmiSource::cPowerAve:
    return l.dev_power_ave != nullptr;
  case RocmSmiSource::cPowerCap:
    return l.dev_power_cap != nullptr;
  case RocmSmiSource::cBusy:
    return l.dev_busy_percent != nullptr;
  case RocmSmiSource::cMemBusy:
    return l.dev_memory_busy_percent != nullptr;
  case RocmSmiSource::cVramUsed:
    return l.dev_memory_usage != nullptr;
  case RocmSmiSource::cVramTotal:
    return l.dev_memory_total != nullptr;
  case RocmSmiSource::cTempEdge:
  case RocmSmiSource::cTempJunction:
  case RocmSmiSource::cTempMemory:
    return l.dev_temp_metric != nullptr;
  case RocmSmiSource::cClockSys:
  case RocmSmiSource::cClockMem:
    return l.dev_gpu_clk_freq != nullptr && layout_known; // the struct's layout depends on the library's version
  case RocmSmiSource::cFan:
    return l.dev_fan_speed != nullptr && l.dev_fan_speed_max != nullptr;
  case RocmSmiSource::cPcieWidth:
    return l.dev_pci_bandwidth != nullptr && layout_known;
  case RocmSmiSource::cPcieThroughput:
    return l.dev_pci_throughput != nullptr;
  case RocmSmiSource::kCallCount:
    break;
  }
  return false;
}

// A property of the device or library, not of the moment: the call is not made again on this device.
// A call that made no library request this tick (PCIe throughput, read by its own thread): nothing to classify, and
// not an answer from the device either.
constexpr Status kNoCall = 0xFFFFFFFE;

bool property_error(Status rc) {
  return rc == kNotSupported || rc == kNotYetImplemented || rc == kPermission || rc == kInvalidArgs ||
         rc == kInputOutOfBounds;
}
// What a vanished GPU answers: its sysfs files are gone, or the library lost track of it.
bool gone_error(Status rc) {
  return rc == kFileError || rc == kNotFound || rc == kInitError || rc == kUnknownError;
}

// The current entry of an rsmi_frequencies_t in the library's layout, in Hz; nullopt where there is none (the
// library reports "no current level" as an index out of range).
struct Levels {
  uint32_t n = 0, current = 0;
  const uint64_t* f = nullptr;
};
Levels levels(const FrequenciesBuf& b, bool v6) {
  if (v6) return {std::min<uint32_t>(b.v6.num_supported, 33), b.v6.current, b.v6.frequency};
  return {std::min<uint32_t>(b.v5.num_supported, 32), b.v5.current, b.v5.frequency};
}

std::string cstr(const char* buf, size_t n) {
  return std::string(buf, strnlen(buf, n));
}

// ROCm SMI's bdfid: domain in bits 63..32, bus 15..8, device 7..3, function 2..0.
std::string bdf_text(uint64_t bdfid) {
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", static_cast<unsigned>((bdfid >> 32) & 0xffffffffu),
                     static_cast<unsigned>((bdfid >> 8) & 0xff), static_cast<unsigned>((bdfid >> 3) & 0x1f),
                     static_cast<unsigned>(bdfid & 0x7));
}

} // namespace

GpuMetricSet RocmSmiSource::fills(Call c) {
  using M = GpuMetric;
  switch (c) {
  case cSocketPower:
    return metric_bit(M::power_w);
  case cPowerAve:
    return metric_bit(M::power_avg_w) | metric_bit(M::power_w);
  case cPowerCap:
    return metric_bit(M::power_limit_w);
  case cBusy:
    return metric_bit(M::util_gpu_pct);
  case cMemBusy:
    return metric_bit(M::util_mem_pct);
  case cVramUsed:
    return metric_bit(M::mem_used_bytes);
  case cVramTotal:
    return metric_bit(M::mem_total_bytes);
  case cTempEdge:
  case cTempJunction:
    return metric_bit(M::temp_gpu_c);
  case cTempMemory:
    return metric_bit(M::temp_mem_c);
  case cClockSys:
    return metric_bit(M::clock_sm_mhz);
  case cClockMem:
    return metric_bit(M::clock_mem_mhz);
  case cFan:
    return metric_bit(M::fan_pct);
  case cPcieWidth:
    return metric_bit(M::pcie_link_width) | metric_bit(M::pcie_link_width_max);
  default: // the counter feeds accounting (not a registry member); PCIe throughput comes from its thread
    return 0;
  }
}

std::chrono::nanoseconds RocmSmiSource::natural_period(const Dev& d, Call c) const {
  if (c != cEnergy) return opts_.cost.costly_period;
  // The counter anchors the energy; between its reads the instant socket power shapes it (accounting). Without it
  // the ticks between carry the last reading, so it is read as often as NVML's counter moves.
  return d.on[cSocketPower] ? opts_.cost.costly_period : opts_.energy_period;
}

const char* RocmSmiSource::call_name(Call c) {
  return kCallNames[c];
}

RocmSmiSource::Options RocmSmiSource::Options::from_env() {
  Options o;
  if (const char* p = std::getenv("WATTSCOPE_ROCM_SMI_LIBRARY")) o.library_path = p;
  return o;
}

RocmSmiSource::RocmSmiSource(Options opts) : opts_(std::move(opts)) {}

RocmSmiSource::~RocmSmiSource() {
  {
    std::lock_guard lock(slow_mu_);
    slow_stop_ = true;
  }
  slow_cv_.notify_all();
  if (slow_thread_.joinable()) slow_thread_.join();
  if (initialised_ && lib_) lib_->shut_down();
}

uint64_t RocmSmiSource::counter_step(uint64_t last, uint64_t now) {
  if (now >= last) return now - last;
  if (last <= 0xFFFFFFFFull) return now + (uint64_t{1} << 32) - last; // a 32-bit accumulator wrapped
  return now; // restarted from 0: what it counted since the restart
}

bool RocmSmiSource::open() {
  // Issue 30: the system library only where an AMD GPU is on the PCI bus. Initialising it elsewhere (Debian installs
  // librocm-smi64-1 beside other packages) costs time and makes it complain on stderr.
  if (opts_.library_path.empty() && pci_bus_has_gpu(opts_.sysfs_root, 0x1002, true) == false) {
    status_ = SourceStatus::missing("no AMD GPU on the PCI bus", "none needed unless this machine has an AMD GPU");
    return false;
  }
  std::string why;
  lib_ = Library::load(opts_.library_path, why);
  if (!lib_) {
    const bool unusable = why.find("lacks required") != std::string::npos;
    status_ = SourceStatus::not_loaded(
        fmt::format("no AMD GPU recorded through ROCm SMI: {}", why),
        unusable ? "point WATTSCOPE_ROCM_SMI_LIBRARY at ROCm's librocm_smi64.so"
                 : "none needed unless this machine has an AMD GPU; then install ROCm SMI (Debian: librocm-smi64-1; "
                   "ROCm: rocm-smi-lib) or set WATTSCOPE_ROCM_SMI_LIBRARY to the library's path. Without it AMD GPUs "
                   "are read through hwmon",
        unusable || !opts_.library_path.empty());
    return false;
  }
  for (const auto& m : lib_->missing_optional())
    spdlog::debug("rocm-smi: {} lacks {}; what it reads is off", lib_->path(), m);
  Status rc;
  {
    StderrToDebugLog quiet("rocm-smi"); // issue 30: "Exception caught: rsmi_init." and the like go to the debug log
    rc = lib_->init(0);
  }
  if (rc == kPermission) {
    status_ = SourceStatus::no_permission(
        fmt::format("no AMD GPU recorded through ROCm SMI: rsmi_init failed with {}", status_name(rc)),
        "run as a user in the 'render' and 'video' groups (sudo usermod -aG render,video $USER, then log in again)");
    return false;
  }
  if (rc != kSuccess) {
    status_ = SourceStatus::missing(
        fmt::format("no AMD GPU recorded through ROCm SMI: rsmi_init failed with {}", status_name(rc)),
        "none needed unless this machine has an AMD GPU; then check that the amdgpu kernel driver is loaded "
        "('rocm-smi' should list the GPUs)");
    return false;
  }
  initialised_ = true;
  Version v{};
  if (lib_->version && lib_->version(&v) == kSuccess) {
    lib_major_ = v.major;
    lib_version_ = fmt::format("{}.{}.{}", v.major, v.minor, v.patch);
  }
  if (lib_major_ == 0)
    spdlog::info("rocm-smi: the library's version is unknown, so clocks and PCIe link width are not read (their "
                 "struct changed layout in ROCm 6)");
  char buf[kStringBuffer] = {};
  if (lib_->version_str && lib_->version_str(kSwComponentDriver, buf, sizeof buf) == kSuccess)
    driver_version_ = cstr(buf, sizeof buf);
  uint32_t count = 0;
  rc = lib_->num_devices(&count);
  if (rc != kSuccess) {
    status_ = SourceStatus::missing(fmt::format("rsmi_num_monitor_devices failed with {}", status_name(rc)),
                                    "check the ROCm installation: 'rocm-smi' should list the GPUs");
    return false;
  }
  devices_found_ = static_cast<int>(count);
  for (uint32_t i = 0; i < count; ++i) {
    Dev d;
    d.dv = i;
    d.info.gpu_index = static_cast<int>(i);
    d.info.vendor = "amd";
    std::memset(buf, 0, sizeof buf);
    if (lib_->dev_name && lib_->dev_name(i, buf, sizeof buf) == kSuccess) d.info.name = cstr(buf, sizeof buf);
    uint64_t u = 0;
    if (lib_->dev_pci_id && lib_->dev_pci_id(i, &u) == kSuccess) d.info.pci_bus_id = bdf_text(u);
    // The same identity hwmon gives the card (amd-<unique_id>), so a run reads alike through either backend.
    if (lib_->dev_unique_id && lib_->dev_unique_id(i, &u) == kSuccess && u != 0)
      d.info.uuid = fmt::format("amd-{:016x}", u);
    else if (!d.info.pci_bus_id.empty())
      d.info.uuid = "PCI-" + d.info.pci_bus_id;
    else
      d.info.uuid = fmt::format("amd-rsmi{}", i);
    if (d.info.name.empty()) d.info.name = "AMD GPU";
    if (lib_->dev_memory_total && lib_->dev_memory_total(i, kMemVram, &u) == kSuccess)
      d.info.mem_total_bytes = static_cast<int64_t>(u);
    if (lib_->dev_power_cap && lib_->dev_power_cap(i, 0, &u) == kSuccess)
      d.info.power_limit_w = static_cast<double>(u) / 1e6;
    for (size_t c = 0; c < kCallCount; ++c)
      d.on[c] = present(*lib_, static_cast<Call>(c), lib_major_ != 0);
    // The edge sensor's limits where the board has one, else the junction's (as temp_gpu_c reads).
    if (lib_->dev_temp_metric)
      for (const uint32_t sensor : {kTempEdge, kTempJunction}) {
        int64_t crit = 0, emergency = 0;
        if (lib_->dev_temp_metric(i, sensor, kTempCritical, &crit) != kSuccess || crit <= 0) continue;
        d.info.slowdown_temp_c = static_cast<double>(crit) / 1000.0; // millidegrees
        if (lib_->dev_temp_metric(i, sensor, kTempEmergency, &emergency) == kSuccess && emergency > 0)
          d.info.shutdown_temp_c = static_cast<double>(emergency) / 1000.0;
        break;
      }
    // The highest clock levels, once: the device's maximum clocks.
    for (const auto& [clk, member] :
         {std::pair{kClkSys, &GpuDevice::clock_sm_max_mhz}, std::pair{kClkMem, &GpuDevice::clock_mem_max_mhz}}) {
      FrequenciesBuf f{};
      if (!d.on[cClockSys] || lib_->dev_gpu_clk_freq(i, clk, &f) != kSuccess) continue;
      const Levels l = levels(f, v6_layout());
      uint64_t top = 0;
      for (uint32_t k = 0; k < l.n; ++k)
        top = std::max(top, l.f[k]);
      if (top > 0) d.info.*member = static_cast<int64_t>(top / 1'000'000);
    }
    if (d.on[cFan]) {
      uint64_t m = 0;
      if (lib_->dev_fan_speed_max(i, 0, &m) == kSuccess && m > 0)
        d.fan_max = static_cast<int64_t>(m);
      else
        d.on[cFan] = false;
    }
    d.info.power_source = d.on[cSocketPower] ? "rsmi_dev_current_socket_power_get"
                          : d.on[cPowerAve]  ? "rsmi_dev_power_ave_get"
                                             : "";
    devs_.push_back(std::move(d));
  }
  if (devs_.empty()) {
    status_ = SourceStatus::missing("ROCm SMI found no AMD GPU", "none needed unless this machine has one");
    return false;
  }
  status_ = SourceStatus::ok(fmt::format("{} AMD GPU(s) via {} (ROCm SMI {}, driver {})", devs_.size(), lib_->path(),
                                         lib_version_.empty() ? "unknown" : lib_version_,
                                         driver_version_.empty() ? "unknown" : driver_version_),
                             true);
  bool slow = false;
  for (const auto& d : devs_)
    slow = slow || d.on[cPcieThroughput];
  if (slow)
    slow_thread_ = std::thread([this] {
      name_this_thread("ws-rocm-pcie");
      slow_loop();
    });
  return true;
}

SourceStatus RocmSmiSource::status() const {
  SourceStatus st = status_;
  if (!st.is_ok()) return st;
  st.measures_power = false;
  for (const auto& d : devs_)
    st.measures_power = st.measures_power || (!d.lost && (d.on[cSocketPower] || d.on[cPowerAve] || d.on[cEnergy]));
  return st;
}

void RocmSmiSource::set_first_index(int first) {
  for (size_t i = 0; i < devs_.size(); ++i)
    devs_[i].info.gpu_index = first + static_cast<int>(i);
}

std::vector<GpuDevice> RocmSmiSource::devices() const {
  std::vector<GpuDevice> out;
  for (const auto& d : devs_)
    out.push_back(d.info);
  return out;
}

void RocmSmiSource::describe(RunInfo& run) const {
  auto tags = nlohmann::json::parse(run.tags, nullptr, false);
  if (tags.is_discarded() || !tags.is_object()) tags = nlohmann::json::object();
  if (!lib_version_.empty()) tags["rocm_smi_version"] = lib_version_;
  if (!driver_version_.empty()) tags["amdgpu_driver"] = driver_version_;
  run.tags = tags.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status RocmSmiSource::read(Call c, Dev& d, GpuSample& s, SteadyClock::time_point mono) {
  const Library& l = *lib_;
  uint64_t u = 0;
  uint32_t pct = 0;
  int64_t i64 = 0;
  Status rc = kSuccess;
  switch (c) {
  case cEnergy: {
    float res = 0;
    uint64_t ts = 0;
    rc = l.dev_energy_count(d.dv, &u, &res, &ts);
    if (rc != kSuccess) return rc;
    if (!(res > 0) || !std::isfinite(res)) return kUnexpectedData; // no usable resolution: missing this tick
    if (d.have_count) d.total_counts += counter_step(d.last_count, u);
    d.have_count = true;
    d.last_count = u;
    d.resolution_uj = res;
    // µJ since open; from the exact count each time, so rounding never accumulates.
    s.energy_counter_uj = std::llround(static_cast<double>(d.total_counts) * d.resolution_uj);
    return kSuccess;
  }
  case cSocketPower:
    rc = l.dev_current_socket_power(d.dv, &u);
    if (rc == kSuccess) {
      s.power_w = static_cast<double>(u) / 1e6; // µW
      s.power_source = "rsmi_dev_current_socket_power_get";
      s.power_instant = true; // issue 33: the instantaneous reading (hwmon power1_input), not an average
    }
    return rc;
  case cPowerAve:
    rc = l.dev_power_ave(d.dv, 0, &u);
    if (rc == kSuccess) {
      s.power_avg_w = static_cast<double>(u) / 1e6; // µW
      if (!s.power_w) {                             // boards before MI300 / RDNA3 have only the average
        s.power_w = s.power_avg_w;
        s.power_source = "rsmi_dev_power_ave_get";
      }
    }
    return rc;
  case cPowerCap:
    rc = l.dev_power_cap(d.dv, 0, &u);
    if (rc == kSuccess) s.power_limit_w = static_cast<double>(u) / 1e6;
    return rc;
  case cBusy:
    rc = l.dev_busy_percent(d.dv, &pct);
    if (rc == kSuccess) s.util_gpu_pct = pct;
    return rc;
  case cMemBusy:
    rc = l.dev_memory_busy_percent(d.dv, &pct);
    if (rc == kSuccess) s.util_mem_pct = pct;
    return rc;
  case cVramUsed:
    rc = l.dev_memory_usage(d.dv, kMemVram, &u);
    if (rc == kSuccess) s.mem_used_bytes = static_cast<int64_t>(u);
    return rc;
  case cVramTotal:
    rc = l.dev_memory_total(d.dv, kMemVram, &u);
    if (rc == kSuccess) s.mem_total_bytes = static_cast<int64_t>(u);
    return rc;
  case cTempEdge:
  case cTempJunction:
  case cTempMemory: {
    // The GPU temperature is the edge sensor's; boards without one (MI300) report the junction (hotspot) sensor,
    // which is then asked for instead.
    if (c == cTempJunction && s.temp_gpu_c) return kNoCall;
    const uint32_t sensor = c == cTempEdge ? kTempEdge : c == cTempJunction ? kTempJunction : kTempMemory;
    rc = l.dev_temp_metric(d.dv, sensor, kTempCurrent, &i64);
    if (rc != kSuccess) return rc;
    (c == cTempMemory ? s.temp_mem_c : s.temp_gpu_c) = static_cast<double>(i64) / 1000.0; // millidegrees
    return kSuccess;
  }
  case cClockSys:
  case cClockMem: {
    FrequenciesBuf f{};
    rc = l.dev_gpu_clk_freq(d.dv, c == cClockSys ? kClkSys : kClkMem, &f);
    if (rc != kSuccess) return rc;
    const Levels lv = levels(f, v6_layout());
    if (lv.current < lv.n) (c == cClockSys ? s.clock_sm_mhz : s.clock_mem_mhz) = lv.f[lv.current] / 1'000'000;
    return kSuccess; // no current level (deep sleep on some boards): missing, not an error
  }
  case cFan:
    rc = l.dev_fan_speed(d.dv, 0, &i64);
    if (rc == kSuccess && d.fan_max && i64 >= 0)
      s.fan_pct = 100.0 * static_cast<double>(i64) / static_cast<double>(*d.fan_max);
    return rc;
  case cPcieWidth: {
    PcieBandwidthBuf b{};
    rc = l.dev_pci_bandwidth(d.dv, &b);
    if (rc != kSuccess) return rc;
    const bool v6 = v6_layout();
    const uint32_t n =
        std::min<uint32_t>(v6 ? b.v6.transfer_rate.num_supported : b.v5.transfer_rate.num_supported, v6 ? 33 : 32);
    const uint32_t cur = v6 ? b.v6.transfer_rate.current : b.v5.transfer_rate.current;
    const uint32_t* lanes = v6 ? b.v6.lanes : b.v5.lanes;
    uint32_t top = 0;
    for (uint32_t k = 0; k < n; ++k)
      top = std::max(top, lanes[k]);
    if (cur < n) s.pcie_link_width = lanes[cur];
    if (top > 0) s.pcie_link_width_max = top;
    return kSuccess;
  }
  case cPcieThroughput: { // the slow thread's latest, while it is fresh
    std::lock_guard lock(d.slow->mu);
    if (d.slow->off) {
      d.on[cPcieThroughput] = false;
      return kNoCall;
    }
    if (d.slow->tx && mono - d.slow->at <= opts_.slow_period * 3 + std::chrono::seconds(1)) {
      s.pcie_tx_bytes_per_s = d.slow->tx;
      s.pcie_rx_bytes_per_s = d.slow->rx;
    }
    return kNoCall; // a copy of the thread's reading says nothing about whether the device answers now
  }
  case kCallCount:
    break;
  }
  return kInvalidArgs;
}

void RocmSmiSource::sample_device(Dev& d, Frame& frame) {
  GpuSample s;
  s.gpu_index = d.info.gpu_index;
  int answered = 0, gone = 0;
  Status last_gone = kSuccess;
  Call gone_call = cEnergy;
  for (size_t i = 0; i < kCallCount; ++i) {
    const auto c = static_cast<Call>(i);
    if (!d.on[c]) continue;
    const bool sched = scheduled(c);
    ReadCost& cost = d.cost[c];
    // issue 33: not due: the last value, with its age. The run's last tick reads the counter whether due or not, so
    // the run ends on a counter reading. A carried value is no answer: a GPU gone is lost on the calls it is asked.
    if (sched && !cost.due(frame.mono) && !(c == cEnergy && frame.last)) {
      carry_metrics(d.held, fills(c), cost.last, frame.mono, s);
      continue;
    }
    const bool timing = sched && cost.timing();
    const auto t0 = timing ? SteadyClock::now() : SteadyClock::time_point{};
    const Status rc = read(c, d, s, frame.mono);
    if (rc == kNoCall) continue;
    if (rc == kSuccess) {
      ++answered;
      d.answered[c] = true;
      if (sched) {
        if (timing && cost.time(SteadyClock::now() - t0, frame.mono, opts_.cost, natural_period(d, c))) {
          const double us = std::chrono::duration<double, std::micro>(cost.measured).count();
          if (cost.period.count() > 0)
            spdlog::info("AMD GPU {}: {} costs {:.0f} us a read (budget {} us); read at most every {} ms, the ticks "
                         "between carry the last reading with its age",
                         d.info.gpu_index, call_name(c), us,
                         std::chrono::duration_cast<std::chrono::microseconds>(opts_.cost.max_read_cost).count(),
                         std::chrono::duration_cast<std::chrono::milliseconds>(cost.period).count());
          else
            spdlog::info("AMD GPU {}: {} now costs {:.0f} us a read; read every tick again", d.info.gpu_index,
                         call_name(c), us);
        }
        cost.read_at(frame.mono);
        hold_metrics(d.held, fills(c), s);
      }
      continue;
    }
    if (property_error(rc) || (gone_error(rc) && !d.answered[c])) {
      // Never answered on this device (an unreadable file before any answer is a file this board lacks): off.
      d.on[c] = false;
      spdlog::debug("AMD GPU {}: {} answered {}; recorded as missing", d.info.gpu_index, call_name(c), status_name(rc));
      continue;
    }
    if (gone_error(rc)) {
      ++gone;
      last_gone = rc;
      gone_call = c;
    }
    // Anything else (BUSY, INTERRUPT, UNEXPECTED_DATA, ...): missing this tick, asked again next tick.
  }
  if (answered == 0 && gone > 0) {
    if (++d.failures >= kLostLimit) {
      d.lost = true;
      {
        std::lock_guard lock(d.slow->mu);
        d.slow->lost = true;
      }
      frame.events.push_back({0, frame.ts_ms, "device-lost", fmt::format("gpu{}", d.info.gpu_index),
                              fmt::format("AMD GPU {} ({}, {}) stopped answering: {} returned {} on {} ticks in a "
                                          "row; no further samples from it in this run",
                                          d.info.gpu_index, d.info.uuid, d.info.pci_bus_id, call_name(gone_call),
                                          status_name(last_gone), kLostLimit)});
      spdlog::warn("AMD GPU {} is lost ({}); the other devices keep recording", d.info.gpu_index,
                   status_name(last_gone));
    }
    return; // no row for a tick on which the device answered nothing
  }
  d.failures = 0;
  // Issue 30: free VRAM, as the library has no call for it: the total less what is used, where both are known.
  if (const OptI total = s.mem_total_bytes ? s.mem_total_bytes : d.info.mem_total_bytes;
      total && s.mem_used_bytes && *s.mem_used_bytes >= 0 && *total >= *s.mem_used_bytes)
    s.mem_free_bytes = *total - *s.mem_used_bytes;
  frame.gpus.push_back(std::move(s));
}

void RocmSmiSource::sample(Frame& frame) noexcept {
  try {
    frame.gpus.reserve(frame.gpus.size() + devs_.size());
    for (auto& d : devs_)
      if (!d.lost) sample_device(d, frame);
  } catch (...) {
    // allocation failure: the tick keeps what it has
  }
}

void RocmSmiSource::slow_loop() {
  std::unique_lock lock(slow_mu_);
  for (;;) {
    for (auto& d : devs_) {
      {
        std::lock_guard l(d.slow->mu);
        if (d.slow->lost || d.slow->off) continue;
      }
      if (!lib_->dev_pci_throughput) continue;
      uint64_t sent = 0, received = 0, max_pkt = 0;
      lock.unlock(); // the library samples for a second: the destructor must still be able to ask us to stop
      const Status rc = lib_->dev_pci_throughput(d.dv, &sent, &received, &max_pkt);
      lock.lock();
      if (slow_stop_) return;
      std::lock_guard l(d.slow->mu);
      if (rc == kSuccess) {
        // Issue 30: the library hands on the kernel's pcie_bw counts: packets in the one second it sampled, and the
        // largest packet's size (rocm_smi.h calls them bytes; rocm-smi multiplies, as here). Their product is an
        // upper bound of the bytes moved. No packet size: missing, not a figure in the wrong unit.
        const auto bytes = [max_pkt](uint64_t packets) -> OptI {
          if (max_pkt == 0 || max_pkt > 4096 || packets > static_cast<uint64_t>(INT64_MAX) / max_pkt) return {};
          return static_cast<int64_t>(packets * max_pkt);
        };
        d.slow->tx = bytes(sent);
        d.slow->rx = bytes(received);
        d.slow->at = SteadyClock::now();
      } else if (property_error(rc) || (gone_error(rc) && !d.slow->tx)) {
        d.slow->off = true;
      }
    }
    if (slow_cv_.wait_for(lock, opts_.slow_period, [this] { return slow_stop_; })) return;
  }
}

bool RocmSmiSource::lists_gpu_processes() const {
  return lib_ && lib_->compute_process_info && lib_->compute_process_gpus &&
         (lib_->compute_process_info_by_device || lib_->compute_process_info_by_pid);
}

void RocmSmiSource::gpu_processes(std::vector<GpuProcessSample>& out, std::vector<int>& listed) noexcept {
  try {
    std::lock_guard lock(proc_mu_);
    if (!lists_gpu_processes()) return;
    // The two-call idiom: the count with no buffer, then with room for a few more (a process may start between).
    std::vector<ProcessInfo> procs;
    Status rc = kInsufficientSize;
    for (int attempt = 0; attempt < 3 && rc == kInsufficientSize; ++attempt) {
      uint32_t n = static_cast<uint32_t>(procs.size());
      rc = lib_->compute_process_info(procs.empty() ? nullptr : procs.data(), &n);
      if (rc == kSuccess && procs.empty() && n > 0) {
        procs.resize(n + 8);
        rc = kInsufficientSize;
        continue;
      }
      if (rc == kSuccess) procs.resize(std::min<size_t>(n, procs.size()));
      if (rc == kInsufficientSize) procs.resize(n + 8);
    }
    if (rc != kSuccess) return; // no list this scan: no GPU is said to be idle
    std::map<uint32_t, const Dev*> by_dv;
    for (const auto& d : devs_) {
      std::lock_guard l(d.slow->mu);
      if (d.slow->lost) continue;
      by_dv[d.dv] = &d;
      listed.push_back(d.info.gpu_index);
    }
    for (const auto& p : procs) {
      uint32_t idx[64] = {};
      uint32_t n = std::size(idx);
      if (lib_->compute_process_gpus(p.process_id, idx, &n) != kSuccess) continue; // it exited in between
      n = std::min<uint32_t>(n, std::size(idx));
      for (uint32_t k = 0; k < n; ++k) {
        auto it = by_dv.find(idx[k]);
        if (it == by_dv.end()) continue;
        ProcessInfo info{};
        Status prc = kNotSupported;
        if (lib_->compute_process_info_by_device)
          prc = lib_->compute_process_info_by_device(p.process_id, idx[k], &info);
        else if (n == 1) // ROCm before 5.5: the per-process figures are summed over its GPUs, so only one GPU's
          prc = lib_->compute_process_info_by_pid(p.process_id, &info);
        GpuProcessSample g;
        g.id.pid = static_cast<pid_t>(p.process_id);
        g.gpu_index = it->second->info.gpu_index;
        if (prc == kSuccess) {
          g.mem_used_bytes = static_cast<int64_t>(info.vram_usage);
          if (info.cu_occupancy != kCuOccupancyInvalid && info.cu_occupancy <= 100)
            g.sm_pct = static_cast<double>(info.cu_occupancy);
        }
        out.push_back(g);
      }
    }
  } catch (...) {
    // allocation failure: this scan keeps what it has
  }
}

std::vector<std::string> RocmSmiSource::doctor_lines() const {
  std::vector<std::string> out;
  out.push_back(fmt::format("library {} · ROCm SMI {} · driver {}", lib_ ? lib_->path() : "",
                            lib_version_.empty() ? "unknown" : lib_version_,
                            driver_version_.empty() ? "unknown" : driver_version_));
  for (const auto& d : devs_) {
    std::string off;
    for (size_t c = 0; c < kCallCount; ++c)
      if (!d.on[c]) off += (off.empty() ? "" : ", ") + std::string(kCallNames[c]);
    out.push_back(fmt::format("GPU {} {} {} ({}) · not supported: {}", d.info.gpu_index, d.info.name, d.info.uuid,
                              d.info.pci_bus_id, off.empty() ? "none" : off));
    // issue 33 (doctor -v): what each call costs on this machine and how often it is read
    if (spdlog::should_log(spdlog::level::debug))
      for (size_t i = 0; i < kCallCount; ++i) {
        const ReadCost& r = d.cost[i];
        if (!scheduled(static_cast<Call>(i)) || !d.on[i] || r.measured.count() < 0) continue;
        out.push_back(fmt::format(
            "  {:<22} {:>9.1f} us a read · {}", kCallNames[i],
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

nlohmann::json RocmSmiSource::report() const {
  nlohmann::json devs = nlohmann::json::array();
  for (const auto& d : devs_) {
    nlohmann::json supported = nlohmann::json::object();
    nlohmann::json reads = nlohmann::json::object(); // issue 33: each timed call's cost and period
    for (size_t c = 0; c < kCallCount; ++c) {
      supported[kCallNames[c]] = d.on[c];
      const ReadCost& r = d.cost[c];
      if (scheduled(static_cast<Call>(c)) && d.on[c] && r.measured.count() >= 0)
        reads[kCallNames[c]] = {{"cost_us", std::chrono::duration<double, std::micro>(r.measured).count()},
                                {"period_ms", std::chrono::duration<double, std::milli>(r.period).count()}};
    }
    devs.push_back({{"index", d.info.gpu_index},
                    {"rsmi_index", d.dv},
                    {"name", d.info.name},
                    {"uuid", d.info.uuid},
                    {"pci_bus_id", d.info.pci_bus_id},
                    {"lost", d.lost},
                    {"metrics", supported},
                    {"reads", reads}});
  }
  return {{"library", lib_ ? lib_->path() : ""},
          {"rocm_smi_version", lib_version_},
          {"driver_version", driver_version_},
          {"devices_found", devices_found_},
          {"devices", devs},
          {"missing_functions", lib_ ? nlohmann::json(lib_->missing_optional()) : nlohmann::json::array()}};
}

} // namespace wattscope
