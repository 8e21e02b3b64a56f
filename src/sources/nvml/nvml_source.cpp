#include "sources/nvml/nvml_source.hpp"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/schema.hpp"

namespace wattscope {

using namespace nvml;

namespace {
std::string cstr(const char* buf, size_t n) {
  return std::string(buf, strnlen(buf, n));
}
constexpr double kMilli = 1e-3;
} // namespace

const char* NvmlSource::metric_name(Metric m) {
  static constexpr const char* names[] = {"field_values",
                                          "power_usage",
                                          "total_energy",
                                          "utilization",
                                          "memory",
                                          "temperature_gpu",
                                          "clock_sm",
                                          "clock_graphics",
                                          "clock_mem",
                                          "pcie_link_width",
                                          "pcie_link_width_max",
                                          "fan_speed",
                                          "performance_state",
                                          "enforced_power_limit",
                                          "clock_event_reasons",
                                          "pcie_throughput"};
  static_assert(std::size(names) == kMetricCount, "one name per metric");
  return names[m];
}

NvmlSource::Options NvmlSource::Options::from_env(const std::string& gpus_flag) {
  Options o;
  if (const char* p = std::getenv("WATTSCOPE_NVML_LIBRARY")) o.library_path = p;
  std::optional<std::string> cvd;
  if (const char* c = std::getenv("CUDA_VISIBLE_DEVICES")) cvd = c;
  o.selection = parse_gpu_selection(gpus_flag, cvd);
  if (!o.selection.warning.empty()) spdlog::warn("{}", o.selection.warning);
  return o;
}

NvmlSource::NvmlSource(Options opts) : opts_(std::move(opts)) {}

NvmlSource::~NvmlSource() {
  {
    std::lock_guard lock(slow_mu_);
    slow_stop_ = true;
  }
  slow_cv_.notify_all();
  if (slow_thread_.joinable()) slow_thread_.join();
  if (initialised_ && lib_) lib_->shutdown();
}

bool NvmlSource::open() {
  std::string why;
  lib_ = Library::load(opts_.library_path, why);
  if (!lib_) {
    status_ = fmt::format("missing: no NVIDIA GPU recorded: {}", why);
    return false;
  }
  for (const auto& m : lib_->missing_optional())
    spdlog::debug("nvml: {} lacks {}; that metric is off", lib_->path(), m);
  Return rc = lib_->init();
  if (rc != kSuccess) {
    status_ = fmt::format("missing: no NVIDIA GPU recorded: nvmlInit failed with {}{}", error_name(rc),
                          rc == kErrorDriverNotLoaded ? " (the NVIDIA kernel driver is not loaded)" : "");
    return false;
  }
  initialised_ = true;
  char buf[kStringBuffer] = {};
  if (lib_->system_driver_version && lib_->system_driver_version(buf, sizeof buf) == kSuccess)
    driver_version_ = cstr(buf, sizeof buf);
  if (lib_->system_nvml_version && lib_->system_nvml_version(buf, sizeof buf) == kSuccess)
    nvml_version_ = cstr(buf, sizeof buf);
  unsigned int count = 0;
  rc = lib_->device_count(&count);
  if (rc != kSuccess) {
    status_ = fmt::format("missing: nvmlDeviceGetCount failed with {}", error_name(rc));
    return false;
  }
  devices_found_ = static_cast<int>(count);
  for (unsigned int i = 0; i < count; ++i) {
    Dev d;
    rc = lib_->device_by_index(i, &d.handle);
    if (rc != kSuccess) {
      spdlog::warn("nvml: GPU {} cannot be opened ({}); it is not recorded", i, error_name(rc));
      continue;
    }
    d.info.gpu_index = static_cast<int>(i);
    d.info.vendor = "nvidia";
    if (lib_->device_uuid && lib_->device_uuid(d.handle, buf, sizeof buf) == kSuccess)
      d.info.uuid = cstr(buf, sizeof buf);
    if (!opts_.selection.selects(d.info.gpu_index, d.info.uuid)) continue;
    if (lib_->device_name && lib_->device_name(d.handle, buf, sizeof buf) == kSuccess)
      d.info.name = cstr(buf, sizeof buf);
    PciInfo pci{};
    if (lib_->device_pci_info && lib_->device_pci_info(d.handle, &pci) == kSuccess)
      d.info.pci_bus_id = cstr(pci.busId, sizeof pci.busId);
    unsigned int mhz = 0;
    if (lib_->device_max_clock && lib_->device_max_clock(d.handle, nvml::kClockSm, &mhz) == kSuccess)
      d.info.clock_sm_max_mhz = mhz;
    if (lib_->device_max_clock && lib_->device_max_clock(d.handle, nvml::kClockMem, &mhz) == kSuccess)
      d.info.clock_mem_max_mhz = mhz;
    d.on.fill(true);
    d.fields = {kFieldPowerInstant, kFieldPowerAverage, kFieldMemoryTemp};
    // A missing optional symbol is a metric that is off from the start.
    const std::pair<Metric, bool> present[] = {
        {mFieldValues, lib_->device_field_values != nullptr},
        {mPowerUsage, lib_->device_power_usage != nullptr},
        {mEnergy, lib_->device_total_energy != nullptr},
        {mUtil, lib_->device_utilization != nullptr},
        {mMemory, lib_->device_memory_v2 != nullptr || lib_->device_memory != nullptr},
        {mTempGpu, lib_->device_temperature != nullptr},
        {mClockSm, lib_->device_clock != nullptr},
        {mClockGfx, lib_->device_clock != nullptr},
        {mClockMem, lib_->device_clock != nullptr},
        {mPcieWidth, lib_->device_pcie_width != nullptr},
        {mPcieWidthMax, lib_->device_pcie_width_max != nullptr},
        {mFan, lib_->device_fan != nullptr},
        {mPstate, lib_->device_pstate != nullptr},
        {mPowerLimit, lib_->device_enforced_power_limit != nullptr},
        {mClockEvents, lib_->device_clock_events != nullptr},
        {mPcieThroughput, lib_->device_pcie_throughput != nullptr},
    };
    for (auto [m, p] : present)
      d.on[m] = p;
    d.mem_v2 = lib_->device_memory_v2 != nullptr;
    devs_.push_back(std::move(d));
  }
  if (devs_.empty()) {
    status_ = count == 0
                  ? "missing: NVML found no NVIDIA GPU"
                  : fmt::format("missing: none of the {} NVIDIA GPUs is selected ({} = {})", count,
                                opts_.selection.origin, opts_.selection.origin == "--gpus" ? "the flag" : "its value");
    return false;
  }
  status_ = fmt::format("ok: {} of {} NVIDIA GPUs via {} (driver {})", devs_.size(), count, lib_->path(),
                        driver_version_.empty() ? "unknown" : driver_version_);
  for (const auto& d : devs_)
    if (d.on[mPcieThroughput]) slow_wanted_ = true;
  if (slow_wanted_) slow_thread_ = std::thread([this] { slow_loop(); });
  return true;
}

std::vector<GpuDevice> NvmlSource::devices() const {
  std::vector<GpuDevice> out;
  for (const auto& d : devs_)
    out.push_back(d.info);
  return out;
}

void NvmlSource::describe(RunInfo& run) const {
  auto tags = nlohmann::json::parse(run.tags, nullptr, false);
  if (tags.is_discarded() || !tags.is_object()) tags = nlohmann::json::object();
  if (!driver_version_.empty()) tags["nvidia_driver"] = driver_version_;
  if (!nvml_version_.empty()) tags["nvml_version"] = nvml_version_;
  run.tags = tags.dump();
}

bool NvmlSource::ok(Dev& d, Metric m, Return rc, Frame& frame) {
  if (rc == kSuccess) return true;
  if (rc == kErrorGpuIsLost || rc == kErrorUnknown || rc == kErrorResetRequired) {
    d.lost = true;
    {
      std::lock_guard lock(d.slow->mu);
      d.slow->lost = true;
    }
    frame.events.push_back({0, frame.ts_ms, "device-lost", fmt::format("gpu{}", d.info.gpu_index),
                            fmt::format("NVIDIA GPU {} ({}) stopped answering: {} returned {}; no further samples "
                                        "from it in this run",
                                        d.info.gpu_index, d.info.uuid, metric_name(m), error_name(rc))});
    spdlog::warn("GPU {} is lost ({}); the other devices keep recording", d.info.gpu_index, error_name(rc));
    return false;
  }
  if (rc == kErrorTimeout) return false; // transient: missing this tick, asked again next tick
  // NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND, ...: a property of the device, not of the moment.
  d.on[m] = false;
  spdlog::debug("GPU {}: {} answered {}; recorded as missing", d.info.gpu_index, metric_name(m), error_name(rc));
  return false;
}

void NvmlSource::sample_device(Dev& d, Frame& frame) {
  GpuSample s;
  s.gpu_index = d.info.gpu_index;
  unsigned int u = 0;
  bool have_instant = false;

  if (d.on[mFieldValues] && !d.fields.empty()) {
    FieldValue fv[3] = {};
    const int n = static_cast<int>(d.fields.size());
    for (int i = 0; i < n; ++i)
      fv[i].fieldId = d.fields[static_cast<size_t>(i)]; // scopeId 0: the GPU alone
    if (ok(d, mFieldValues, lib_->device_field_values(d.handle, n, fv), frame)) {
      bool drop = false;
      for (int i = 0; i < n; ++i) {
        const FieldValue& f = fv[i];
        if (f.nvmlReturn == kErrorGpuIsLost || f.nvmlReturn == kErrorUnknown) {
          ok(d, mFieldValues, f.nvmlReturn, frame);
          return;
        }
        if (f.nvmlReturn == kErrorNotSupported || f.nvmlReturn == kErrorNoPermission) {
          drop = true; // this field is not asked for again
          continue;
        }
        if (f.nvmlReturn != kSuccess) continue;
        double v = 0;
        switch (f.valueType) {
        case kValueDouble:
          v = f.value.dVal;
          break;
        case kValueUInt:
          v = f.value.uiVal;
          break;
        case kValueULong:
          v = static_cast<double>(f.value.ulVal);
          break;
        case kValueULongLong:
          v = static_cast<double>(f.value.ullVal);
          break;
        case kValueSLongLong:
          v = static_cast<double>(f.value.sllVal);
          break;
        case kValueSInt:
          v = f.value.siVal;
          break;
        case kValueUShort:
          v = f.value.usVal;
          break;
        default:
          continue;
        }
        if (f.fieldId == kFieldPowerInstant) {
          s.power_w = v * kMilli;
          have_instant = true;
        } else if (f.fieldId == kFieldPowerAverage) {
          s.power_avg_w = v * kMilli;
        } else if (f.fieldId == kFieldMemoryTemp) {
          s.temp_mem_c = v;
        }
      }
      if (drop) { // rare: only on the tick a field first answers NOT_SUPPORTED
        std::vector<unsigned int> keep;
        for (int i = 0; i < n; ++i)
          if (fv[i].nvmlReturn != kErrorNotSupported && fv[i].nvmlReturn != kErrorNoPermission)
            keep.push_back(fv[i].fieldId);
        d.fields = std::move(keep);
      }
    }
    if (d.lost) return;
  }
  if (have_instant) {
    s.power_source = "nvml field POWER_INSTANT";
  } else if (d.on[mPowerUsage] && ok(d, mPowerUsage, lib_->device_power_usage(d.handle, &u), frame)) {
    s.power_w = u * kMilli;
    s.power_source = "nvmlDeviceGetPowerUsage";
  }
  if (d.lost) return;
  unsigned long long mj = 0;
  if (d.on[mEnergy] && ok(d, mEnergy, lib_->device_total_energy(d.handle, &mj), frame))
    s.energy_counter_uj = static_cast<int64_t>(mj) * 1000; // NVML counts mJ
  if (d.lost) return;
  Utilization ut{};
  if (d.on[mUtil] && ok(d, mUtil, lib_->device_utilization(d.handle, &ut), frame)) {
    s.util_gpu_pct = ut.gpu;
    s.util_mem_pct = ut.memory;
  }
  if (d.lost) return;
  if (d.on[mMemory]) {
    if (d.mem_v2) {
      MemoryV2 m{};
      m.version = kMemoryV2Version;
      Return rc = lib_->device_memory_v2(d.handle, &m);
      if (rc == kSuccess) {
        s.mem_used_bytes = static_cast<int64_t>(m.used);
        s.mem_total_bytes = static_cast<int64_t>(m.total);
      } else if (rc == kErrorNotSupported || rc == kErrorFunctionNotFound || rc == kErrorInvalidArgument) {
        d.mem_v2 = false; // older driver: fall back to the v1 struct from now on
      } else {
        ok(d, mMemory, rc, frame);
      }
    }
    if (!d.mem_v2 && d.on[mMemory] && !s.mem_total_bytes && lib_->device_memory) {
      Memory m{};
      if (ok(d, mMemory, lib_->device_memory(d.handle, &m), frame)) {
        s.mem_used_bytes = static_cast<int64_t>(m.used);
        s.mem_total_bytes = static_cast<int64_t>(m.total);
      }
    } else if (!d.mem_v2 && !lib_->device_memory) {
      d.on[mMemory] = false;
    }
  }
  if (d.lost) return;
  if (d.on[mTempGpu] && ok(d, mTempGpu, lib_->device_temperature(d.handle, kTemperatureGpu, &u), frame))
    s.temp_gpu_c = u;
  if (d.lost) return;
  if (d.on[mClockSm] && ok(d, mClockSm, lib_->device_clock(d.handle, nvml::kClockSm, &u), frame)) s.clock_sm_mhz = u;
  if (d.lost) return;
  if (d.on[mClockGfx] && ok(d, mClockGfx, lib_->device_clock(d.handle, kClockGraphics, &u), frame)) s.clock_gfx_mhz = u;
  if (d.lost) return;
  if (d.on[mClockMem] && ok(d, mClockMem, lib_->device_clock(d.handle, nvml::kClockMem, &u), frame))
    s.clock_mem_mhz = u;
  if (d.lost) return;
  if (d.on[mPcieWidth] && ok(d, mPcieWidth, lib_->device_pcie_width(d.handle, &u), frame)) s.pcie_link_width = u;
  if (d.lost) return;
  if (d.on[mPcieWidthMax]) { // a property of the slot: read once
    if (ok(d, mPcieWidthMax, lib_->device_pcie_width_max(d.handle, &u), frame)) d.pcie_width_max = u;
    d.on[mPcieWidthMax] = false;
  }
  s.pcie_link_width_max = d.pcie_width_max;
  if (d.lost) return;
  if (d.on[mFan] && ok(d, mFan, lib_->device_fan(d.handle, &u), frame)) s.fan_pct = u;
  if (d.lost) return;
  int pstate = 0;
  if (d.on[mPstate] && ok(d, mPstate, lib_->device_pstate(d.handle, &pstate), frame) && pstate >= 0 && pstate <= 15)
    s.pstate = pstate; // 32 is NVML_PSTATE_UNKNOWN
  if (d.lost) return;
  if (d.on[mPowerLimit] && ok(d, mPowerLimit, lib_->device_enforced_power_limit(d.handle, &u), frame))
    s.power_limit_w = u * kMilli;
  if (d.lost) return;
  unsigned long long mask = 0;
  if (d.on[mClockEvents] && ok(d, mClockEvents, lib_->device_clock_events(d.handle, &mask), frame))
    s.throttle_reasons = static_cast<int64_t>(mask);
  if (d.lost) return;
  if (d.on[mPcieThroughput]) {
    std::lock_guard lock(d.slow->mu);
    // A throughput reading older than three slow periods is stale: missing rather than repeated.
    if (d.slow->at != SteadyClock::time_point{} && frame.mono - d.slow->at <= 3 * opts_.slow_period) {
      s.pcie_tx_bytes_per_s = d.slow->tx;
      s.pcie_rx_bytes_per_s = d.slow->rx;
    }
  }
  frame.gpus.push_back(std::move(s));
}

void NvmlSource::sample(Frame& frame) noexcept {
  try {
    frame.gpus.reserve(frame.gpus.size() + devs_.size());
    for (auto& d : devs_)
      if (!d.lost) sample_device(d, frame);
  } catch (...) {
    // allocation failure: the tick keeps what it has
  }
}

void NvmlSource::slow_loop() {
  std::unique_lock lock(slow_mu_);
  for (;;) {
    for (auto& d : devs_) {
      {
        std::lock_guard l(d.slow->mu);
        if (d.slow->lost || d.slow->off) continue;
      }
      if (!d.on[mPcieThroughput]) continue; // constant after open()
      unsigned int tx = 0, rx = 0;
      Return a = lib_->device_pcie_throughput(d.handle, kPcieUtilTx, &tx);
      Return b = a == kSuccess ? lib_->device_pcie_throughput(d.handle, kPcieUtilRx, &rx) : a;
      if (a == kSuccess && b == kSuccess) {
        std::lock_guard l(d.slow->mu);
        d.slow->tx = static_cast<int64_t>(tx) * 1024; // NVML reports KB/s
        d.slow->rx = static_cast<int64_t>(rx) * 1024;
        d.slow->at = SteadyClock::now();
      } else if (a == kErrorNotSupported || b == kErrorNotSupported || a == kErrorNoPermission) {
        std::lock_guard l(d.slow->mu);
        d.slow->off = true; // d.on is the tick's; the slow thread keeps its own flag
      }
    }
    if (slow_cv_.wait_for(lock, opts_.slow_period, [this] { return slow_stop_; })) return;
  }
}

nlohmann::json NvmlSource::report() const {
  nlohmann::json devs = nlohmann::json::array();
  for (const auto& d : devs_) {
    nlohmann::json supported = nlohmann::json::object();
    for (size_t m = 0; m < kMetricCount; ++m)
      supported[metric_name(static_cast<Metric>(m))] = d.on[m];
    devs.push_back({{"index", d.info.gpu_index},
                    {"name", d.info.name},
                    {"uuid", d.info.uuid},
                    {"pci_bus_id", d.info.pci_bus_id},
                    {"lost", d.lost},
                    {"metrics", supported}});
  }
  return {{"library", lib_ ? lib_->path() : ""},
          {"driver_version", driver_version_},
          {"nvml_version", nvml_version_},
          {"devices_found", devices_found_},
          {"devices", devs},
          {"missing_functions", lib_ ? nlohmann::json(lib_->missing_optional()) : nlohmann::json::array()}};
}

} // namespace wattscope
