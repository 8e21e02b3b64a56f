#include "sources/nvml/nvml_source.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <set>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/schema.hpp"
#include "core/thread_name.hpp"
#include "core/time_util.hpp"
#include "sources/init_probe.hpp"

namespace wattscope {

using namespace nvml;

namespace {
std::string cstr(const char* buf, size_t n) {
  return std::string(buf, strnlen(buf, n));
}
constexpr double kMilli = 1e-3;

// Marks "this call made no NVML request this tick": nothing to classify.
constexpr Return kNoCall = -1;

struct TickCtx {
  const Library& lib;
  SteadyClock::time_point mono;
  bool health = false; // issue 17: the health counters are due this tick
  const NvmlSource::Options& opts;
  bool last = false; // the run's last sample: a costly energy counter is read whether due or not
};

using Dev = NvmlSource::Dev;
struct CallSpec {
  NvmlSource::Call call;
  const char* name;   // doctor's key for it (doctor --json keeps these)
  GpuMetricSet fills; // the registry metrics it provides
  bool (*present)(const Library&);
  Return (*read)(const TickCtx&, Dev&, GpuSample&);
};

constexpr GpuMetricSet bits(std::initializer_list<GpuMetric> ms) {
  GpuMetricSet out = 0;
  for (auto m : ms)
    out |= metric_bit(m);
  return out;
}
using G = GpuMetric;

double field_number(const FieldValue& f, bool& ok) {
  ok = true;
  switch (f.valueType) {
  case kValueDouble:
    return f.value.dVal;
  case kValueUInt:
    return f.value.uiVal;
  case kValueULong:
    return static_cast<double>(f.value.ulVal);
  case kValueULongLong:
    return static_cast<double>(f.value.ullVal);
  case kValueSLongLong:
    return static_cast<double>(f.value.sllVal);
  case kValueSInt:
    return f.value.siVal;
  case kValueUShort:
    return f.value.usVal;
  default:
    ok = false;
    return 0;
  }
}

// Issue 30: a violation counter's field as the driver answered it: kSuccess with the nanoseconds; NOT_SUPPORTED and
// the like (the driver or GPU does not know the field: the old call from then on); GPU_IS_LOST; kNoCall for any other
// error (the field's, not the device's: missing this time, as read_fields treats its fields).
Return violation_answer(const FieldValue& f, unsigned long long& ns) {
  if (f.nvmlReturn == kErrorGpuIsLost || f.nvmlReturn == kErrorNotSupported || f.nvmlReturn == kErrorNoPermission ||
      f.nvmlReturn == kErrorInvalidArgument)
    return f.nvmlReturn;
  if (f.nvmlReturn != kSuccess) return kNoCall;
  bool ok = false;
  const double v = field_number(f, ok);
  if (!ok || !(v >= 0)) return kErrorNotSupported; // a value type this counter never has
  ns = f.valueType == kValueULongLong ? f.value.ullVal : static_cast<unsigned long long>(v);
  return kSuccess;
}

Return read_fields(const TickCtx& c, Dev& d, GpuSample& s) {
  FieldValue fv[7] = {};
  static_assert(std::tuple_size_v<decltype(d.field_failures)> >= std::size(fv));
  const int n = static_cast<int>(std::min<size_t>(d.fields.size(), 5));
  for (int i = 0; i < n; ++i) {
    fv[i].fieldId = d.fields[static_cast<size_t>(i)]; // scopeId 0: the GPU alone
    // NVLink throughput: UINT_MAX asks for the sum over every link (nvml.h, "NVLink throughput counters")
    if (fv[i].fieldId == kFieldNvlinkDataTx || fv[i].fieldId == kFieldNvlinkDataRx) fv[i].scopeId = kScopeAllLinks;
  }
  // Issue 30: on a health tick the violation counters ride in the same call (read_violation takes them from there).
  std::array<int, 2> viol_at{-1, -1};
  int m = n;
  if (c.health)
    for (size_t p = 0; p < 2; ++p)
      if (d.health.violation_field[p] && d.on[p == 0 ? NvmlSource::cViolationPower : NvmlSource::cViolationThermal]) {
        viol_at[p] = m;
        fv[m++].fieldId = p == 0 ? kFieldPerfPolicyPower : kFieldPerfPolicyThermal;
      }
  if (m == 0) return kNoCall;
  Return rc = c.lib.device_field_values(d.handle, m, fv);
  for (size_t p = 0; p < 2; ++p)
    if (viol_at[p] >= 0)
      d.health.field_rc[p] = rc == kSuccess ? violation_answer(fv[viol_at[p]], d.health.field_ns[p]) : kNoCall;
  if (rc != kSuccess) return rc;
  bool drop = false;
  std::array<bool, std::size(fv)> dropped{};
  for (int i = 0; i < n; ++i) {
    const FieldValue& f = fv[i];
    const auto fi = static_cast<size_t>(i);
    if (f.nvmlReturn == kErrorGpuIsLost) return f.nvmlReturn;
    if (f.nvmlReturn == kErrorNotSupported || f.nvmlReturn == kErrorNoPermission) {
      drop = dropped[fi] = true; // this field is not asked for again
      continue;
    }
    // Any other error (UNKNOWN, INVALID_ARGUMENT from a driver that knows the id but not for this GPU, ...) is the
    // field's, not the device's: missing this tick, and after kFieldFailureLimit ticks in a row not asked for again
    // (issue 17: a field answering an error forever was asked for forever).
    if (f.nvmlReturn != kSuccess) {
      if (++d.field_failures[fi] >= NvmlSource::kFieldFailureLimit) drop = dropped[fi] = true;
      continue;
    }
    d.field_failures[fi] = 0;
    bool ok = false;
    const double v = field_number(f, ok);
    if (!ok) continue;
    if (f.fieldId == kFieldPowerInstant) {
      s.power_w = v * kMilli;
      s.power_source = "nvml field POWER_INSTANT";
      s.power_instant = true;
    } else if (f.fieldId == kFieldPowerAverage) {
      s.power_avg_w = v * kMilli;
    } else if (f.fieldId == kFieldMemoryTemp) {
      s.temp_mem_c = v;
    } else if (f.fieldId == kFieldNvlinkDataTx || f.fieldId == kFieldNvlinkDataRx) {
      // A cumulative KiB counter: the rate over the interval since the previous reading, timed by NVML's own
      // timestamp of the reading (µs), or by the tick where it gives none. The first reading only sets the base.
      const bool tx = f.fieldId == kFieldNvlinkDataTx;
      auto& prev = d.nvlink[tx ? 0 : 1];
      const auto kib = f.valueType == kValueULongLong ? f.value.ullVal : static_cast<unsigned long long>(v);
      const long long at_us =
          f.timestamp > 0 ? f.timestamp
                          : std::chrono::duration_cast<std::chrono::microseconds>(c.mono.time_since_epoch()).count();
      if (prev.kib && at_us > prev.at_us && kib >= *prev.kib) {
        const double bytes = static_cast<double>(kib - *prev.kib) * 1024.0;
        const auto rate = static_cast<int64_t>(std::llround(bytes * 1e6 / static_cast<double>(at_us - prev.at_us)));
        (tx ? s.nvlink_tx_bytes_per_s : s.nvlink_rx_bytes_per_s) = rate;
      }
      // The counter itself, for Prometheus: rate() over a scrape window sees every byte, the per-tick rate only one
      // tick's worth of each window.
      (tx ? s.nvlink_tx_bytes : s.nvlink_rx_bytes) = static_cast<int64_t>(kib * 1024);
      if (!prev.kib || at_us > prev.at_us) prev = {kib, at_us}; // a cached value (same timestamp) keeps the base
    }
  }
  if (drop) { // rare: only on the tick a field is given up
    std::vector<unsigned int> keep;
    std::array<int, 8> failures{};
    for (int i = 0; i < n; ++i) {
      const auto fi = static_cast<size_t>(i);
      if (dropped[fi]) {
        spdlog::debug("GPU {}: field {} answered {}; recorded as missing", d.info.gpu_index, fv[i].fieldId,
                      error_name(fv[i].nvmlReturn));
        continue;
      }
      failures[keep.size()] = d.field_failures[fi];
      keep.push_back(fv[i].fieldId);
    }
    d.fields = std::move(keep);
    d.field_failures = failures;
  }
  return kSuccess;
}

Return read_memory(const TickCtx& c, Dev& d, GpuSample& s) {
  if (d.mem_v2) {
    MemoryV2 m{};
    m.version = kMemoryV2Version;
    const Return rc = c.lib.device_memory_v2(d.handle, &m);
    if (rc == kSuccess) {
      s.mem_used_bytes = static_cast<int64_t>(m.used);
      s.mem_total_bytes = static_cast<int64_t>(m.total);
      s.mem_reserved_bytes = static_cast<int64_t>(m.reserved);
      s.mem_free_bytes = static_cast<int64_t>(m.free);
      return kSuccess;
    }
    if (rc != kErrorNotSupported && rc != kErrorFunctionNotFound && rc != kErrorInvalidArgument &&
        rc != kErrorArgumentVersionMismatch)
      return rc;
    d.mem_v2 = false; // older driver (or one that knows another v2 struct): the v1 struct from now on
  }
  if (!c.lib.device_memory) return kErrorFunctionNotFound;
  Memory m{};
  const Return rc = c.lib.device_memory(d.handle, &m);
  if (rc == kSuccess) {
    s.mem_used_bytes = static_cast<int64_t>(m.used);
    s.mem_total_bytes = static_cast<int64_t>(m.total);
    s.mem_free_bytes = static_cast<int64_t>(m.free); // v1 has no reserved figure: missing
  }
  return rc;
}

// One unsigned reading into one member, scaled.
template <auto Member, auto Fn, int Arg = -1> Return read_uint(const TickCtx& c, Dev& d, GpuSample& s, double scale) {
  unsigned int u = 0;
  Return rc;
  if constexpr (Arg >= 0)
    rc = (c.lib.*Fn)(d.handle, Arg, &u);
  else
    rc = (c.lib.*Fn)(d.handle, &u);
  if (rc == kSuccess) s.*Member = static_cast<std::remove_reference_t<decltype(*(s.*Member))>>(u * scale);
  return rc;
}

template <auto Fn> Return read_codec(const TickCtx& c, Dev& d, unsigned int& pct) {
  unsigned int period_us = 0;
  return (c.lib.*Fn)(d.handle, &pct, &period_us);
}

// ---- issue 17: violation (throttle) time for one policy (0 power, 1 thermal): NVML counts nanoseconds below the
// application clocks since the driver loaded; stored as seconds since the run's first reading, so a run's last row
// says how long it was throttled. A counter that went backwards (driver reloaded) starts a new base.
// Issue 30: read as the field NVML_FI_DEV_PERF_POLICY_POWER / _THERMAL where the driver knows it (the same counter,
// asked in the tick's field-values call; nvmlDeviceGetViolationStatus goes in CUDA 14), else through the old call
// where the library still has it.
template <int Policy> Return read_violation(const TickCtx& c, Dev& d, GpuSample& s) {
  OptF& held = Policy == 0 ? d.health.throttle_power_s : d.health.throttle_thermal_s;
  Return rc = kNoCall;
  if (c.health) {
    held.reset();
    constexpr Return kNotAsked = -2;
    rc = std::exchange(d.health.field_rc[Policy], kNotAsked);
    unsigned long long ns = d.health.field_ns[Policy];
    if (rc == kErrorNotSupported || rc == kErrorInvalidArgument || rc == kErrorNoPermission) {
      d.health.violation_field[Policy] = false; // a field this driver or GPU does not know: the old call from now on
      spdlog::debug("GPU {}: violation field {} answered {}; nvmlDeviceGetViolationStatus instead", d.info.gpu_index,
                    Policy == 0 ? kFieldPerfPolicyPower : kFieldPerfPolicyThermal, error_name(rc));
      rc = kNotAsked;
    }
    if (rc == kNotAsked) {
      if (!c.lib.device_violation_status) return kErrorNotSupported;
      ViolationTime t{};
      rc = c.lib.device_violation_status(d.handle, Policy == 0 ? kPerfPolicyPower : kPerfPolicyThermal, &t);
      ns = t.violationTime;
    }
    if (rc != kSuccess) return rc;
    auto& base = d.health.violation_base_ns[Policy];
    if (!base || ns < *base) base = ns;
    held = static_cast<double>(ns - *base) * 1e-9;
  }
  (Policy == 0 ? s.throttle_power_s : s.throttle_thermal_s) = held;
  return rc;
}

// Present when the library has the symbol.
template <auto Fn> bool has(const Library& lib) {
  return lib.*Fn != nullptr;
}

bool has_violation(const Library& l) {
  return l.device_field_values != nullptr || l.device_violation_status != nullptr;
}

constexpr CallSpec kCalls[] = {
    {NvmlSource::cFieldValues, "field_values",
     bits({G::power_w, G::power_avg_w, G::temp_mem_c, G::nvlink_tx_bytes_per_s, G::nvlink_rx_bytes_per_s,
           G::nvlink_tx_bytes, G::nvlink_rx_bytes}),
     has<&Library::device_field_values>, read_fields},
    {NvmlSource::cPowerUsage, "power_usage", bits({G::power_w}), has<&Library::device_power_usage>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       if (s.power_w) return kNoCall; // the instantaneous field answered
       unsigned int mw = 0;
       const Return rc = c.lib.device_power_usage(d.handle, &mw);
       if (rc == kSuccess) {
         s.power_w = mw * kMilli;
         s.power_source = "nvmlDeviceGetPowerUsage";
       }
       return rc;
     }},
    // The counter feeds accounting, which derives energy_j from it (issue 33: anchored on it, shaped by the instant
    // power field between its reads where it is read on a schedule).
    {NvmlSource::cEnergy, "total_energy", 0, has<&Library::device_total_energy>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       unsigned long long mj = 0;
       const Return rc = c.lib.device_total_energy(d.handle, &mj);
       if (rc == kSuccess) s.energy_counter_uj = static_cast<int64_t>(mj) * 1000; // NVML counts mJ
       return rc;
     }},
    {NvmlSource::cUtil, "utilization", bits({G::util_gpu_pct, G::util_mem_pct}), has<&Library::device_utilization>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       Utilization u{};
       const Return rc = c.lib.device_utilization(d.handle, &u);
       if (rc == kSuccess) {
         s.util_gpu_pct = u.gpu;
         s.util_mem_pct = u.memory;
       }
       return rc;
     }},
    {NvmlSource::cMemory, "memory",
     bits({G::mem_used_bytes, G::mem_total_bytes, G::mem_reserved_bytes, G::mem_free_bytes}),
     [](const Library& l) { return l.device_memory_v2 != nullptr || l.device_memory != nullptr; }, read_memory},
    // nvmlDeviceGetTemperatureV where the library has it (from driver 565.57.01; nvmlDeviceGetTemperature is deprecated
    // in NVML 13), the old call where it does not or where it does not know our struct version.
    {NvmlSource::cTempGpu, "temperature_gpu", bits({G::temp_gpu_c}),
     [](const Library& l) { return l.device_temperature_v != nullptr || l.device_temperature != nullptr; },
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       if (d.temp_v && c.lib.device_temperature_v) {
         TemperatureV1 t{};
         t.version = kTemperatureV1Version;
         t.sensorType = kTemperatureGpu;
         const Return rc = c.lib.device_temperature_v(d.handle, &t);
         if (rc == kSuccess) {
           s.temp_gpu_c = t.temperature;
           return kSuccess;
         }
         if (rc != kErrorArgumentVersionMismatch && rc != kErrorFunctionNotFound && rc != kErrorInvalidArgument)
           return rc;
         d.temp_v = false;
       }
       if (!c.lib.device_temperature) return kErrorFunctionNotFound;
       return read_uint<&GpuSample::temp_gpu_c, &Library::device_temperature, kTemperatureGpu>(c, d, s, 1);
     }},
    {NvmlSource::cClockSm, "clock_sm", bits({G::clock_sm_mhz}), has<&Library::device_clock>,
     [](const TickCtx& c, Dev& d, GpuSample& s) {
       return read_uint<&GpuSample::clock_sm_mhz, &Library::device_clock, nvml::kClockSm>(c, d, s, 1);
     }},
    {NvmlSource::cClockGfx, "clock_graphics", bits({G::clock_gfx_mhz}), has<&Library::device_clock>,
     [](const TickCtx& c, Dev& d, GpuSample& s) {
       return read_uint<&GpuSample::clock_gfx_mhz, &Library::device_clock, kClockGraphics>(c, d, s, 1);
     }},
    {NvmlSource::cClockMem, "clock_mem", bits({G::clock_mem_mhz}), has<&Library::device_clock>,
     [](const TickCtx& c, Dev& d, GpuSample& s) {
       return read_uint<&GpuSample::clock_mem_mhz, &Library::device_clock, nvml::kClockMem>(c, d, s, 1);
     }},
    {NvmlSource::cPcieWidth, "pcie_link_width", bits({G::pcie_link_width}), has<&Library::device_pcie_width>,
     [](const TickCtx& c, Dev& d, GpuSample& s) {
       return read_uint<&GpuSample::pcie_link_width, &Library::device_pcie_width>(c, d, s, 1);
     }},
    {NvmlSource::cPcieWidthMax, "pcie_link_width_max", bits({G::pcie_link_width_max}),
     has<&Library::device_pcie_width_max>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       if (!d.pcie_width_max_read) { // a property of the slot: read once
         unsigned int w = 0;
         const Return rc = c.lib.device_pcie_width_max(d.handle, &w);
         if (rc != kSuccess) return rc;
         d.pcie_width_max = w;
         d.pcie_width_max_read = true;
       }
       s.pcie_link_width_max = d.pcie_width_max;
       return kSuccess;
     }},
    {NvmlSource::cFan, "fan_speed", bits({G::fan_pct}), has<&Library::device_fan>,
     [](const TickCtx& c, Dev& d, GpuSample& s) {
       return read_uint<&GpuSample::fan_pct, &Library::device_fan>(c, d, s, 1);
     }},
    {NvmlSource::cPstate, "performance_state", bits({G::pstate}), has<&Library::device_pstate>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       int p = 0;
       const Return rc = c.lib.device_pstate(d.handle, &p);
       if (rc == kSuccess && p >= 0 && p <= 15) s.pstate = p; // 32 is NVML_PSTATE_UNKNOWN
       return rc;
     }},
    {NvmlSource::cPowerLimit, "enforced_power_limit", bits({G::power_limit_w}),
     has<&Library::device_enforced_power_limit>,
     [](const TickCtx& c, Dev& d, GpuSample& s) {
       return read_uint<&GpuSample::power_limit_w, &Library::device_enforced_power_limit>(c, d, s, kMilli);
     }},
    {NvmlSource::cClockEvents, "clock_event_reasons", bits({G::throttle_reasons}), has<&Library::device_clock_events>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       unsigned long long mask = 0;
       const Return rc = c.lib.device_clock_events(d.handle, &mask);
       if (rc == kSuccess) s.throttle_reasons = static_cast<int64_t>(mask);
       return rc;
     }},
    // Read on the slow thread (~20 ms a call); the tick copies its latest reading.
    {NvmlSource::cPcieThroughput, "pcie_throughput", bits({G::pcie_tx_bytes_per_s, G::pcie_rx_bytes_per_s}),
     has<&Library::device_pcie_throughput>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       std::lock_guard lock(d.slow->mu);
       // A throughput reading older than three slow periods is stale: missing rather than repeated.
       if (d.slow->at != SteadyClock::time_point{} && c.mono - d.slow->at <= 3 * c.opts.slow_period) {
         s.pcie_tx_bytes_per_s = d.slow->tx;
         s.pcie_rx_bytes_per_s = d.slow->rx;
       }
       return kNoCall;
     }},
    {NvmlSource::cEncoder, "encoder_utilization", bits({G::util_enc_pct}), has<&Library::device_encoder_utilization>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       unsigned int pct = 0;
       const Return rc = read_codec<&Library::device_encoder_utilization>(c, d, pct);
       if (rc == kSuccess) s.util_enc_pct = pct;
       return rc;
     }},
    {NvmlSource::cDecoder, "decoder_utilization", bits({G::util_dec_pct}), has<&Library::device_decoder_utilization>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       unsigned int pct = 0;
       const Return rc = read_codec<&Library::device_decoder_utilization>(c, d, pct);
       if (rc == kSuccess) s.util_dec_pct = pct;
       return rc;
     }},
    {NvmlSource::cClockVideo, "clock_video", bits({G::clock_video_mhz}), has<&Library::device_clock>,
     [](const TickCtx& c, Dev& d, GpuSample& s) {
       return read_uint<&GpuSample::clock_video_mhz, &Library::device_clock, kClockVideo>(c, d, s, 1);
     }},
    // ---- issue 17: MIG mode, read once at open(); then the health counters, read when due (once a slow period) and
    // carried forward in between, so every row has the latest reading. An error clears the carried value.
    {NvmlSource::cMigMode, "mig_mode", bits({G::mig_mode}), has<&Library::device_mig_mode>,
     [](const TickCtx&, Dev& d, GpuSample& s) -> Return {
       if (d.mig_mode_rc != kSuccess) return d.mig_mode_rc; // switched off on the first tick, as a failed call is
       s.mig_mode = d.mig_mode;
       return kNoCall;
     }},
    {NvmlSource::cEcc, "ecc_errors", bits({G::ecc_corrected_errors, G::ecc_uncorrected_errors}),
     has<&Library::device_total_ecc_errors>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       Return rc = kNoCall;
       if (c.health) {
         d.health.ecc_corrected.reset();
         d.health.ecc_uncorrected.reset();
         unsigned long long corrected = 0, uncorrected = 0;
         rc = c.lib.device_total_ecc_errors(d.handle, kMemoryErrorCorrected, kEccCounterVolatile, &corrected);
         if (rc == kSuccess)
           rc = c.lib.device_total_ecc_errors(d.handle, kMemoryErrorUncorrected, kEccCounterVolatile, &uncorrected);
         if (rc != kSuccess) return rc;
         d.health.ecc_corrected = static_cast<int64_t>(corrected);
         d.health.ecc_uncorrected = static_cast<int64_t>(uncorrected);
       }
       s.ecc_corrected_errors = d.health.ecc_corrected;
       s.ecc_uncorrected_errors = d.health.ecc_uncorrected;
       return rc;
     }},
    {NvmlSource::cRemappedRows, "remapped_rows",
     bits({G::remapped_rows_correctable, G::remapped_rows_uncorrectable, G::remap_pending, G::remap_failed}),
     has<&Library::device_remapped_rows>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       Return rc = kNoCall;
       auto& h = d.health;
       if (c.health) {
         h.rows_correctable.reset(), h.rows_uncorrectable.reset(), h.remap_pending.reset(), h.remap_failed.reset();
         unsigned int corrected = 0, uncorrected = 0, pending = 0, failed = 0;
         rc = c.lib.device_remapped_rows(d.handle, &corrected, &uncorrected, &pending, &failed);
         if (rc != kSuccess) return rc;
         h.rows_correctable = corrected, h.rows_uncorrectable = uncorrected;
         h.remap_pending = pending ? 1 : 0, h.remap_failed = failed ? 1 : 0;
       }
       s.remapped_rows_correctable = h.rows_correctable;
       s.remapped_rows_uncorrectable = h.rows_uncorrectable;
       s.remap_pending = h.remap_pending;
       s.remap_failed = h.remap_failed;
       return rc;
     }},
    {NvmlSource::cPcieReplay, "pcie_replay_counter", bits({G::pcie_replays}), has<&Library::device_pcie_replay_counter>,
     [](const TickCtx& c, Dev& d, GpuSample& s) -> Return {
       Return rc = kNoCall;
       if (c.health) {
         d.health.replays.reset();
         unsigned int n = 0;
         rc = c.lib.device_pcie_replay_counter(d.handle, &n);
         if (rc != kSuccess) return rc;
         d.health.replays = n;
       }
       s.pcie_replays = d.health.replays;
       return rc;
     }},
    {NvmlSource::cViolationPower, "violation_power", bits({G::throttle_power_s}), has_violation,
     [](const TickCtx& c, Dev& d, GpuSample& s) { return read_violation<0>(c, d, s); }},
    {NvmlSource::cViolationThermal, "violation_thermal", bits({G::throttle_thermal_s}), has_violation,
     [](const TickCtx& c, Dev& d, GpuSample& s) { return read_violation<1>(c, d, s); }},
    // ---- end issue 17
};

// Registry metrics no NVML call reads: accounting derives them.
constexpr GpuMetricSet kDerived = bits({G::energy_j});

constexpr bool calls_in_order() {
  for (size_t i = 0; i < std::size(kCalls); ++i)
    if (kCalls[i].call != i) return false;
  return std::size(kCalls) == NvmlSource::kCallCount;
}
constexpr GpuMetricSet filled() {
  GpuMetricSet out = kDerived;
  for (const auto& c : kCalls)
    out |= c.fills;
  return out;
}
static_assert(calls_in_order(), "kCalls lists every NvmlSource::Call once, in enum order");
static_assert(filled() == kAllGpuMetrics,
              "a GPU metric in core/metrics.hpp is read by no NVML call: add its read to kCalls (or to kDerived)");

// ---- open()'s steps

// Issue 31: nvmlInit tried first in a child process, so that a library that crashes in it turns this backend off
// instead of killing wattscope (and the command it runs). The status that turns NVML off where the probe crashed or
// hung; nothing where nvmlInit answered there, or the probe was not run.
std::optional<SourceStatus> probe_init(const NvmlSource::Options& opts) {
  const auto bound = probe_timeout_from_env("WATTSCOPE_NVML_PROBE", NvmlSource::kInitProbeTimeout);
  if (bound.count() <= 0) return std::nullopt;
  LibraryInit what;
  what.libraries = opts.library_path.empty() ? std::vector<std::string>{"libnvidia-ml.so.1", "libnvidia-ml.so"}
                                             : std::vector<std::string>{opts.library_path};
  what.init_symbols = {"nvmlInit_v2", "nvmlInit"};
  what.shutdown_symbol = "nvmlShutdown";
  const InitProbe probe = probe_library_init(what, bound);
  const std::string lib_name = opts.library_path.empty() ? "libnvidia-ml.so.1" : opts.library_path;
  if (probe.outcome == InitProbe::Outcome::Crashed)
    return SourceStatus{SourceStatus::State::Error,
                        fmt::format("no NVIDIA GPU recorded: {} crashed in nvmlInit in a probe process ({}); it is not "
                                    "loaded into wattscope",
                                    lib_name, probe.detail),
                        "check the driver installation ('nvidia-smi' should list the GPUs); after a driver upgrade, "
                        "reboot",
                        false, true};
  if (probe.outcome == InitProbe::Outcome::Hung)
    return SourceStatus{SourceStatus::State::Error,
                        fmt::format("no NVIDIA GPU recorded: nvmlInit of {} did not return in a probe process ({}); it "
                                    "is not loaded into wattscope",
                                    lib_name, probe.detail),
                        "check that 'nvidia-smi' answers; enable persistence mode ('nvidia-smi -pm 1'), or set "
                        "WATTSCOPE_NVML_PROBE to more seconds (off skips the probe)",
                        false, true};
  if (probe.outcome == InitProbe::Outcome::NotRun)
    spdlog::debug("nvml: {}; loading {} without a probe", probe.detail, lib_name);
  else
    spdlog::debug("nvml: nvmlInit of {} probed in a child process: {} in {:.3f} s", lib_name, error_name(probe.code),
                  probe.seconds);
  return std::nullopt;
}

// The library could not be loaded (`why`, the loader's words): none installed, or one too old.
SourceStatus not_loaded_status(const std::string& why, const std::string& library_path) {
  const bool unusable = why.find("lacks required") != std::string::npos;
  return SourceStatus::not_loaded(
      fmt::format("no NVIDIA GPU recorded: {}", why),
      unusable ? "update the NVIDIA driver; this libnvidia-ml is older than wattscope supports"
               : "on a machine with an NVIDIA GPU, install its driver (Debian: nvidia-driver, which provides "
                 "libnvidia-ml.so.1) or set WATTSCOPE_NVML_LIBRARY to the library's path",
      unusable || !library_path.empty());
}

// ---- simulate (issue 19): the scenario goes to the simulated library before nvmlInit reads it. The status that turns
// NVML off where the library is not wattscope's simulated one.
std::optional<SourceStatus> hand_scenario(const Library& lib, const NvmlSource::Options& opts) {
  using SetScenario = int (*)(const char*);
  auto set = reinterpret_cast<SetScenario>(lib.symbol("wattscope_fake_nvml_set_scenario"));
  if (!set)
    return SourceStatus::missing(fmt::format("--simulate: {} is not wattscope's simulated GPU library", lib.path()),
                                 "a bug in this build: the embedded library lacks its scenario entry point");
  set(opts.simulated_scenario_json.c_str());
  return std::nullopt;
}
// ---- end simulate

// nvmlInit answered `rc`: what it means, and the fix for each cause.
SourceStatus init_failed_status(Return rc) {
  const bool mismatch = rc == kErrorLibRmVersionMismatch || rc == kErrorOperatingSystem;
  return SourceStatus::missing(
      fmt::format("no NVIDIA GPU recorded: nvmlInit failed with {}{}", error_name(rc),
                  rc == kErrorDriverNotLoaded ? " (the NVIDIA kernel driver is not loaded)"
                  : rc == kErrorLibRmVersionMismatch
                      ? " (driver/library version mismatch: libnvidia-ml is not the loaded kernel module's version)"
                  : rc == kErrorOperatingSystem ? " (an operating-system call failed; after a driver upgrade this is "
                                                  "usually the library and the loaded kernel module differing)"
                                                : ""),
      rc == kErrorDriverNotLoaded
          ? "load the NVIDIA kernel driver ('sudo modprobe nvidia', or reboot after installing it)"
      : mismatch ? "the driver was upgraded without a reboot: reboot, or reload the NVIDIA kernel modules "
                   "('sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia' with no GPU "
                   "process running); 'nvidia-smi' should then work"
                 : "check the driver installation: 'nvidia-smi' should list the GPUs");
}

// A text the library writes into a buffer (its version strings), or "" where it has no such call or it fails.
std::string library_text(Return (*call)(char*, unsigned int)) {
  char buf[kStringBuffer] = {};
  return call && call(buf, sizeof buf) == kSuccess ? cstr(buf, sizeof buf) : std::string();
}
// The same for a device's text (uuid, name).
std::string device_text(Return (*call)(Device, char*, unsigned int), Device h) {
  char buf[kStringBuffer] = {};
  return call && call(h, buf, sizeof buf) == kSuccess ? cstr(buf, sizeof buf) : std::string();
}

// The GPU's PCI bus id, in the _v3 form (and nvidia-smi's) with an 8-digit domain, however the driver answers; "" where
// it cannot tell.
std::string pci_bus_id(const Library& lib, Device h) {
  PciInfo pci{};
  // Issue 30: _v2 fills the 52-byte layout, but is handed room for the full struct: a driver that writes more
  // (as _v3 does) still writes inside the buffer.
  union {
    PciInfo full;
    PciInfoLegacy legacy;
  } v2{};
  PciInfoLegacy& legacy = v2.legacy;
  if (lib.device_pci_info && lib.device_pci_info(h, &pci) == kSuccess) return cstr(pci.busId, sizeof pci.busId);
  if (!lib.device_pci_info_legacy || lib.device_pci_info_legacy(h, &legacy) != kSuccess) return {};
  // "0000:18:00.0" there; stored alike either way
  std::string id = cstr(legacy.busId, sizeof legacy.busId);
  if (id.size() == 12 && id[4] == ':') id.insert(0, "0000");
  return id;
}

// NVML found GPUs (`count`) but recorded none: none there, or none the selection names.
SourceStatus nothing_selected_status(unsigned int count, const GpuSelection& selection) {
  if (count == 0) return SourceStatus::missing("NVML found no NVIDIA GPU", "none needed unless this machine has one");
  return SourceStatus::missing(fmt::format("none of the {} NVIDIA GPUs is selected ({} = {})", count, selection.origin,
                                           selection.origin == "--gpus" ? "the flag" : "its value"),
                               "check CUDA_VISIBLE_DEVICES or pass --gpus all");
}

} // namespace

const char* NvmlSource::call_name(Call c) {
  return kCalls[c].name;
}

NvmlSource::Options NvmlSource::Options::from_env(const std::string& gpus_flag) {
  Options o;
  if (const char* p = std::getenv("WATTSCOPE_NVML_LIBRARY")) o.library_path = p;
  std::optional<std::string> cvd, order;
  if (const char* c = std::getenv("CUDA_VISIBLE_DEVICES")) cvd = c;
  if (const char* c = std::getenv("CUDA_DEVICE_ORDER")) order = c;
  o.selection = parse_gpu_selection(gpus_flag, cvd, order);
  if (!o.selection.warning.empty()) spdlog::warn("{}", o.selection.warning);
  return o;
}

NvmlSource::NvmlSource(Options opts) : opts_(std::move(opts)) {}

size_t NvmlSource::process_info_stride(const std::string& driver_version, bool has_conf_compute_mem,
                                       bool has_process_detail_list) {
  // "535.54.03" -> (535, 54, 3); anything else leaves the version unknown.
  unsigned major = 0, minor = 0, patch = 0;
  char tail = 0;
  const int got = std::sscanf(driver_version.c_str(), "%u.%u.%u%c", &major, &minor, &patch, &tail);
  if (got == 2 || got == 3) {
    const auto v = std::tuple(major, minor, patch);
    return v >= std::tuple(535u, 43u, 2u) && v < std::tuple(535u, 104u, 5u) ? sizeof(ProcessInfoR535)
                                                                            : sizeof(ProcessInfo);
  }
  // The symbols nvitop tells the window by: confidential-compute memory arrived with the 32-byte struct, the
  // process detail list with the return to 24 bytes.
  return has_conf_compute_mem && !has_process_detail_list ? sizeof(ProcessInfoR535) : sizeof(ProcessInfo);
}

// The selection's MIG entry that names one of this GPU's MIG instances, or "".
std::string NvmlSource::mig_of(Device gpu) {
  if (!lib_->device_max_mig_count || !lib_->device_mig_by_index || !lib_->device_uuid) return {};
  unsigned int n = 0;
  if (lib_->device_max_mig_count(gpu, &n) != kSuccess) return {};
  std::vector<std::string> uuids;
  char buf[kStringBuffer] = {};
  for (unsigned int k = 0; k < n && k < 64; ++k) {
    Device mig{};
    if (lib_->device_mig_by_index(gpu, k, &mig) != kSuccess) continue; // a slot with no instance
    if (lib_->device_uuid(mig, buf, sizeof buf) == kSuccess) uuids.push_back(cstr(buf, sizeof buf));
  }
  return opts_.selection.mig_match(uuids);
}

NvmlSource::~NvmlSource() {
  // issue 17: the event set is freed before nvmlShutdown
  if (event_set_ && lib_ && lib_->event_set_free) lib_->event_set_free(event_set_);
  slow_abort_.store(true, std::memory_order_relaxed);
  {
    std::lock_guard lock(slow_mu_);
    slow_stop_ = true;
  }
  slow_cv_.notify_all();
  if (slow_thread_.joinable()) slow_thread_.join();
  if (initialised_ && lib_) lib_->shutdown();
}

bool NvmlSource::open() {
  // Issue 31: the simulated library is our own code: not probed.
  if (!opts_.simulated()) {
    if (auto failed = probe_init(opts_)) {
      status_ = std::move(*failed);
      return false;
    }
  }
  std::string why;
  lib_ = Library::load(opts_.library_path, why);
  if (!lib_) {
    status_ = not_loaded_status(why, opts_.library_path);
    return false;
  }
  for (const auto& m : lib_->missing_optional())
    spdlog::debug("nvml: {} lacks {}; that metric is off", lib_->path(), m);
  if (opts_.simulated()) {
    if (auto failed = hand_scenario(*lib_, opts_)) {
      status_ = std::move(*failed);
      return false;
    }
  }
  if (const Return rc = lib_->init(); rc != kSuccess) {
    status_ = init_failed_status(rc);
    return false;
  }
  initialised_ = true;
  driver_version_ = library_text(lib_->system_driver_version);
  nvml_version_ = library_text(lib_->system_nvml_version);
  proc_stride_ = process_info_stride(driver_version_, lib_->device_conf_compute_mem_size != nullptr,
                                     lib_->device_process_detail_list != nullptr);
  if (proc_stride_ != sizeof(ProcessInfo))
    spdlog::debug("nvml: driver {} fills {}-byte entries from the running-process calls", driver_version_,
                  proc_stride_);
  unsigned int count = 0;
  if (const Return rc = lib_->device_count(&count); rc != kSuccess) {
    status_ = SourceStatus::missing(fmt::format("nvmlDeviceGetCount failed with {}", error_name(rc)),
                                    "check the driver installation: 'nvidia-smi' should list the GPUs");
    return false;
  }
  devices_found_ = static_cast<int>(count);
  std::set<std::string> models; // every GPU's name, selected or not: CUDA's order differs from NVML's where they differ
  for (unsigned int i = 0; i < count; ++i)
    open_gpu(i, models);
  if (opts_.selection.cuda_fastest_first && models.size() > 1)
    spdlog::warn("CUDA_VISIBLE_DEVICES names GPUs by index, and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA numbers "
                 "these unlike GPUs fastest first, NVML (and wattscope) by PCI bus, so the GPUs recorded may not be "
                 "the task's. Set CUDA_DEVICE_ORDER=PCI_BUS_ID, or name GPUs by UUID (nvidia-smi -L)");
  if (devs_.empty()) {
    status_ = nothing_selected_status(count, opts_.selection);
    return false;
  }
  status_ =
      SourceStatus::ok(opts_.simulated() // issue 19
                           ? fmt::format("{} of {} SIMULATED NVIDIA GPUs (--simulate, scenario {}): not measurements",
                                         devs_.size(), count, opts_.simulated_name)
                           : fmt::format("{} of {} NVIDIA GPUs via {} (driver {})", devs_.size(), count, lib_->path(),
                                         driver_version_.empty() ? "unknown" : driver_version_),
                       true);
  for (const auto& d : devs_)
    if (d.on[cPcieThroughput] || !d.migs.empty()) slow_wanted_ = true; // issue 17: MIG instances are read there too
  if (slow_wanted_)
    slow_thread_ = std::thread([this] {
      name_this_thread("ws-nvml-pcie");
      slow_loop(/*may_hand_over=*/true);
    });
  start_events(); // issue 17
  return true;
}

void NvmlSource::open_gpu(unsigned int index, std::set<std::string>& models) {
  Dev d;
  if (const Return rc = lib_->device_by_index(index, &d.handle); rc != kSuccess) {
    spdlog::warn("nvml: GPU {} cannot be opened ({}); it is not recorded", index, error_name(rc));
    return;
  }
  d.info.gpu_index = static_cast<int>(index);
  d.info.vendor = "nvidia";
  if (opts_.simulated()) d.info.energy_method = "simulated"; // issue 19: kept by accounting, shown everywhere
  d.info.uuid = device_text(lib_->device_uuid, d.handle);
  d.info.name = device_text(lib_->device_name, d.handle);
  models.insert(d.info.name);
  if (!opts_.selection.selects(d.info.gpu_index, d.info.uuid)) {
    // A MIG instance (MIG-… in CUDA_VISIBLE_DEVICES) selects its parent GPU: NVML measures power and energy per
    // GPU, not per instance.
    const std::string mig = opts_.selection.names_mig() ? mig_of(d.handle) : std::string();
    if (mig.empty()) return;
    spdlog::info("{} names MIG instance {}: recording its GPU {} ({}); power and energy are the whole GPU's, "
                 "shared by all its MIG instances",
                 opts_.selection.origin, mig, d.info.gpu_index, d.info.uuid);
  }
  d.info.pci_bus_id = pci_bus_id(*lib_, d.handle);
  unsigned int mhz = 0;
  if (lib_->device_max_clock && lib_->device_max_clock(d.handle, nvml::kClockSm, &mhz) == kSuccess)
    d.info.clock_sm_max_mhz = mhz;
  if (lib_->device_max_clock && lib_->device_max_clock(d.handle, nvml::kClockMem, &mhz) == kSuccess)
    d.info.clock_mem_max_mhz = mhz;
  unsigned int celsius = 0;
  if (lib_->device_temperature_threshold &&
      lib_->device_temperature_threshold(d.handle, nvml::kTempThresholdSlowdown, &celsius) == kSuccess && celsius > 0)
    d.info.slowdown_temp_c = celsius;
  if (lib_->device_temperature_threshold &&
      lib_->device_temperature_threshold(d.handle, nvml::kTempThresholdShutdown, &celsius) == kSuccess && celsius > 0)
    d.info.shutdown_temp_c = celsius;
  d.fields = {kFieldPowerInstant, kFieldPowerAverage, kFieldMemoryTemp, kFieldNvlinkDataTx, kFieldNvlinkDataRx};
  // ---- issue 17: MIG mode, and the instances where it is on
  if (lib_->device_mig_mode) {
    unsigned int current = 0, pending = 0;
    d.mig_mode_rc = lib_->device_mig_mode(d.handle, &current, &pending);
    if (d.mig_mode_rc == kSuccess) d.mig_mode = current == kMigEnabled ? 1 : 0;
  }
  if (d.mig_mode == 1) enumerate_migs(d);
  // ---- end issue 17
  // A missing optional symbol is a call that is off from the start.
  for (const auto& c : kCalls)
    d.on[c.call] = c.present(*lib_);
  d.mem_v2 = lib_->device_memory_v2 != nullptr;
  devs_.push_back(std::move(d));
}

SourceStatus NvmlSource::status() const {
  SourceStatus st = status_;
  if (!st.is_ok()) return st;
  // Power is measured where some GPU still answers a power call (probed on the first tick: NOT_SUPPORTED turns a
  // call off for good).
  st.measures_power = false;
  for (const auto& d : devs_) {
    const bool instant =
        d.on[cFieldValues] && std::find(d.fields.begin(), d.fields.end(), kFieldPowerInstant) != d.fields.end();
    st.measures_power = st.measures_power || (!d.lost && (instant || d.on[cPowerUsage]));
  }
  return st;
}

std::vector<std::string> NvmlSource::doctor_lines() const {
  std::vector<std::string> out;
  out.push_back(
      fmt::format("library {} · driver {} · NVML {}", lib_ ? lib_->path() : "", driver_version_, nvml_version_));
  for (const auto& d : devs_) {
    std::string off;
    for (const auto& c : kCalls)
      if (!d.on[c.call]) off += (off.empty() ? "" : ", ") + std::string(c.name);
    out.push_back(fmt::format("GPU {} {} {} · not supported: {}", d.info.gpu_index, d.info.name, d.info.uuid,
                              off.empty() ? "none" : off));
    // issue 33 (doctor -v): what each call costs on this machine and how often it is read
    if (spdlog::should_log(spdlog::level::debug))
      for (const auto& c : kCalls) {
        const ReadCost& r = d.cost[c.call];
        if (!scheduled(c.call) || !d.on[c.call] || r.measured.count() < 0) continue;
        out.push_back(fmt::format(
            "  {:<22} {:>9.1f} us a read · {}", c.name, std::chrono::duration<double, std::micro>(r.measured).count(),
            r.period.count() > 0
                ? fmt::format("read every {} ms (over the {} us budget)",
                              std::chrono::duration_cast<std::chrono::milliseconds>(r.period).count(),
                              std::chrono::duration_cast<std::chrono::microseconds>(opts_.max_read_cost).count())
                : std::string("read every tick")));
      }
  }
  return out;
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
  // issue 17: MIG instances, for show and the report (energy stays per GPU: they say so where this tag is)
  std::string mig;
  for (const auto& d : devs_)
    for (const auto& m : d.migs)
      mig += fmt::format("{}gpu{} GI {} CI {} {}{}", mig.empty() ? "" : "; ", d.info.gpu_index, m.info.gpu_instance,
                         m.info.compute_instance, m.info.uuid, m.info.selected ? " (selected)" : "");
  if (!mig.empty()) tags["mig"] = mig;
  run.tags = tags.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool NvmlSource::ok(Dev& d, Call c, Return rc, Frame& frame) {
  if (rc == kSuccess) return true;
  if (rc == kErrorUnknown && ++d.unknown_failures < kUnknownLimit) {
    // Not (yet) a lost GPU: a driver hiccup answers UNKNOWN too. The device is skipped for 1, 2, 4, 8 s.
    const auto backoff = std::chrono::seconds(1 << std::min(d.unknown_failures - 1, 3));
    d.retry_at = frame.mono + backoff;
    if (d.unknown_failures == 1)
      frame.events.push_back(
          {0, frame.ts_ms, "device-error", fmt::format("gpu{}", d.info.gpu_index),
           fmt::format("NVIDIA GPU {} ({}): {} returned {}; its samples are missing while it is retried with "
                       "back-off (lost after {} failures in a row)",
                       d.info.gpu_index, d.info.uuid, call_name(c), error_name(rc), kUnknownLimit)});
    spdlog::warn("GPU {}: {} returned {} ({} in a row); retrying in {} s", d.info.gpu_index, call_name(c),
                 error_name(rc), d.unknown_failures, backoff.count());
    return false;
  }
  if (rc == kErrorGpuIsLost || rc == kErrorUnknown || rc == kErrorResetRequired) {
    d.lost = true;
    {
      std::lock_guard lock(d.slow->mu);
      d.slow->lost = true;
    }
    frame.events.push_back({0, frame.ts_ms, "device-lost", fmt::format("gpu{}", d.info.gpu_index),
                            fmt::format("NVIDIA GPU {} ({}) stopped answering: {} returned {}; no further samples "
                                        "from it in this run",
                                        d.info.gpu_index, d.info.uuid, call_name(c), error_name(rc))});
    spdlog::warn("GPU {} is lost ({}); the other devices keep recording", d.info.gpu_index, error_name(rc));
    return false;
  }
  if (rc == kErrorTimeout) return false; // transient: missing this tick, asked again next tick
  // NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND, ...: a property of the device, not of the moment.
  d.on[c] = false;
  spdlog::debug("GPU {}: {} answered {}; recorded as missing", d.info.gpu_index, call_name(c), error_name(rc));
  return false;
}

bool NvmlSource::scheduled(Call c) {
  switch (c) {
  case cPowerUsage: // read only where the instant field is not: then it is what power is, like any other read
  case cEnergy:
  case cUtil:
  case cMemory:
  case cTempGpu:
  case cClockSm:
  case cClockGfx:
  case cClockMem:
  case cPcieWidth:
  case cFan:
  case cPstate:
  case cPowerLimit:
  case cClockEvents:
  case cEncoder:
  case cDecoder:
  case cClockVideo:
    return true;
  default: // the field values shape the energy every tick; the others are read once or on their own period
    return false;
  }
}

std::chrono::nanoseconds NvmlSource::natural_period(const Dev& d, Call c) const {
  if (c != cEnergy) return opts_.costly_period;
  // The counter anchors the energy; between its reads the instant power field shapes it (accounting). Without that
  // field the ticks between carry the last reading, so it is read as often as it moves.
  const bool instant =
      d.on[cFieldValues] && std::find(d.fields.begin(), d.fields.end(), kFieldPowerInstant) != d.fields.end();
  // With the instant field the counter only anchors the energy the power shapes: every kAnchorPeriod at any interval
  // (the run's end and every phase edge still read it, so those figures stay the counter's own).
  return instant ? std::max(opts_.costly_period, kAnchorPeriod) : opts_.energy_period;
}

void NvmlSource::time_read(Dev& d, Call c, std::chrono::nanoseconds took, std::chrono::nanoseconds cpu,
                           SteadyClock::time_point now) {
  ReadCost& r = d.cost[c];
  r.least = std::min(r.least, took);
  // The energy counter (2.8 ms of CPU on an H100) is provisionally costly from a first read far over the budget, in
  // wall time and in CPU time (a cheap read preempted on a busy machine takes long but costs nothing): the round's
  // other reads are made at the costly period, each GPU at its own offset in it, so that no tick makes them all at
  // once. Other calls' first reads are noisier than they are dear (a first call binds symbols, touches cold pages).
  const auto far = opts_.max_read_cost * 5;
  const bool far_over = c == cEnergy && opts_.max_read_cost.count() > 0 && took > far && cpu > far;
  if (++r.timed == 1 && far_over && r.period.count() == 0 && r.measured.count() < 0) {
    r.period = natural_period(d, c);
    r.measured = took;
    r.provisional = r.spread = true;
    if (c == cEnergy) energy_scheduled_.store(true, std::memory_order_relaxed);
    spdlog::info("GPU {}: {} costs {:.0f} us a read (budget {} us); read at most every {} ms, the ticks between "
                 "carry the last reading with its age",
                 d.info.gpu_index, c == cEnergy ? "its energy counter" : call_name(c),
                 std::chrono::duration<double, std::micro>(took).count(),
                 std::chrono::duration_cast<std::chrono::microseconds>(opts_.max_read_cost).count(),
                 std::chrono::duration_cast<std::chrono::milliseconds>(r.period).count());
  }
  if (r.timed < kTimedReads) return;
  r.measured = r.least;
  r.recheck = now + opts_.recheck_period;
  const bool costly = opts_.max_read_cost.count() > 0 && r.measured > opts_.max_read_cost;
  const auto period = costly ? natural_period(d, c) : std::chrono::nanoseconds{0};
  r.provisional = false;
  if (period == r.period) return; // a provisional classification confirmed: said when it was made
  if (period.count() > 0) r.spread = true;
  r.period = period;
  if (c == cEnergy && period.count() > 0) energy_scheduled_.store(true, std::memory_order_relaxed);
  const double us = std::chrono::duration<double, std::micro>(r.measured).count();
  if (costly)
    spdlog::info("GPU {}: {} costs {:.0f} us a read (budget {} us); read at most every {} ms, the ticks between "
                 "carry the last reading with its age",
                 d.info.gpu_index, c == cEnergy ? "its energy counter" : call_name(c), us,
                 std::chrono::duration_cast<std::chrono::microseconds>(opts_.max_read_cost).count(),
                 std::chrono::duration_cast<std::chrono::milliseconds>(period).count());
  else
    spdlog::info("GPU {}: {} now costs {:.0f} us a read; read every tick again", d.info.gpu_index, call_name(c), us);
}

void NvmlSource::hold(Dev& d, GpuMetricSet fills, const GpuSample& s) {
  if (!fills) return;
  for (size_t i = 0; i < kGpuMetrics.size(); ++i) {
    if (!(fills & (GpuMetricSet{1} << i))) continue;
    const auto& m = kGpuMetrics[i];
    if (m.real)
      d.held.*m.real = s.*m.real;
    else
      d.held.*m.integer = s.*m.integer;
  }
  if (fills & metric_bit(GpuMetric::power_w)) d.held.power_source = s.power_source;
}

void NvmlSource::carry(const Dev& d, GpuMetricSet fills, SteadyClock::time_point read_at, SteadyClock::time_point now,
                       GpuSample& s) {
  if (!fills) return;
  const auto age = static_cast<int32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now - read_at).count());
  for (size_t i = 0; i < kGpuMetrics.size(); ++i) {
    if (!(fills & (GpuMetricSet{1} << i))) continue;
    const auto& m = kGpuMetrics[i];
    if (m.real) {
      if (s.*m.real || !(d.held.*m.real)) continue; // another call filled it this tick (power: the instant field)
      s.*m.real = d.held.*m.real;
    } else {
      if (s.*m.integer || !(d.held.*m.integer)) continue;
      s.*m.integer = d.held.*m.integer;
    }
    if (i == static_cast<size_t>(GpuMetric::power_w)) s.power_source = d.held.power_source;
    s.age_ms.emplace_back(static_cast<uint16_t>(i), age);
  }
}

void NvmlSource::sample_device(Dev& d, Frame& frame) {
  GpuSample s;
  s.gpu_index = d.info.gpu_index;
  // issue 17: health counters once a slow period (they change slowly; see docs/nvidia.md for the cost measured)
  const bool health = frame.mono >= d.health_next;
  if (health) d.health_next = frame.mono + opts_.health_period;
  const TickCtx ctx{*lib_, frame.mono, health, opts_, frame.last};
  for (const auto& c : kCalls) {
    if (!d.on[c.call]) continue;
    const bool sched = scheduled(c.call);
    ReadCost& rc_cost = d.cost[c.call];
    // Not due: the last value, with its age. The run's last tick reads the energy counter whether due or not, so the
    // run ends on a counter reading.
    if (sched && rc_cost.period.count() > 0 && frame.mono < rc_cost.next && !(c.call == cEnergy && frame.last)) {
      carry(d, c.fills, rc_cost.last, frame.mono, s);
      continue;
    }
    const bool timing = sched && rc_cost.timed < kTimedReads;
    const auto t0 = timing || c.call == cEnergy ? SteadyClock::now() : SteadyClock::time_point{};
    // A first read may classify the call at once (time_read): its CPU time as well, which a busy machine's preemption
    // does not inflate.
    const bool first = timing && rc_cost.timed == 0;
    const double cpu0 = first ? thread_cpu_s() : 0.0;
    const Return rc = c.read(ctx, d, s);
    const double cpu_s = first ? thread_cpu_s() - cpu0 : -1.0;
    if (c.call == cEnergy && rc == kSuccess && s.energy_counter_uj) {
      // The value at this GPU's own read (GPUs are read one after another: the eighth some 20 ms into the tick on an
      // H100 node), or at the counter's update it stands for where its updates' times are known.
      const auto t1 = SteadyClock::now();
      d.clock.observe_tick(t0, t1, *s.energy_counter_uj); // moves at every read, or holds; ticks close together confirm
      place_energy(d, t0, t1, s);
    }
    if (sched && rc == kSuccess) {
      if (timing)
        time_read(d, c.call, SteadyClock::now() - t0,
                  std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(cpu_s)),
                  frame.mono);
      if (frame.mono >= rc_cost.recheck && rc_cost.timed >= kTimedReads) { // a new round: the driver may have changed
        rc_cost.timed = 0;
        rc_cost.least = std::chrono::nanoseconds::max();
      }
      rc_cost.last = frame.mono;
      // Less a tenth for jitter: ticks a period apart read it every time.
      rc_cost.next = frame.mono + rc_cost.period * 9 / 10;
      if (std::exchange(rc_cost.spread, false)) // GPU k of n k/n of a period later: one GPU's read a tick, not all
        rc_cost.next += rc_cost.period * static_cast<int64_t>(&d - devs_.data()) / static_cast<int64_t>(devs_.size());
      hold(d, c.fills, s);
    }
    if (rc == kSuccess || rc == kNoCall) continue;
    ok(d, c.call, rc, frame);
    if (d.lost) return; // no row for a lost GPU on the tick it was lost
    if (rc == kErrorUnknown && d.unknown_failures > 0 && d.retry_at > frame.mono) return; // backing off: no row
  }
  if (d.unknown_failures > 0) {
    frame.events.push_back({0, frame.ts_ms, "device-error", fmt::format("gpu{}", d.info.gpu_index),
                            fmt::format("NVIDIA GPU {} ({}) answers again after {} failure(s)", d.info.gpu_index,
                                        d.info.uuid, d.unknown_failures)});
    d.unknown_failures = 0;
  }
  frame.gpus.push_back(std::move(s));
  if (!d.migs.empty()) { // issue 17: the instances as the slow thread last read them (ids and uuid when not yet)
    std::lock_guard lock(d.slow->mu);
    if (d.slow->migs.size() == d.migs.size())
      frame.migs.insert(frame.migs.end(), d.slow->migs.begin(), d.slow->migs.end());
    else
      for (const auto& m : d.migs)
        frame.migs.push_back(m.info);
  }
}

namespace {
// A slow pass this quick is made on the tick (a real driver's PCIe throughput call waits 20 ms: 40 ms a GPU). On
// the tick, two passes in a row this slow send them back to the slow thread (one could be a preemption).
constexpr auto kSlowInline = std::chrono::milliseconds(1);
constexpr auto kSlowTooLong = std::chrono::milliseconds(20);
} // namespace

void NvmlSource::sample(Frame& frame) noexcept {
  if (last_tick_mono_ != SteadyClock::time_point{}) tick_gap_ = frame.mono - last_tick_mono_;
  last_tick_mono_ = frame.mono;
  try {
    // The slow reads, where they are quick, before the devices' so the tick takes them fresh (at most once a slow
    // period; a tick is on time within a tenth of it).
    if (slow_inline_.load(std::memory_order_acquire) &&
        (slow_last_ == SteadyClock::time_point{} || frame.mono - slow_last_ >= opts_.slow_period * 9 / 10)) {
      slow_last_ = frame.mono;
      slow_too_long_ = slow_pass() > kSlowTooLong ? slow_too_long_ + 1 : 0;
      if (slow_too_long_ >= 2) {
        spdlog::debug("NVML's slow reads took over {} ms twice on the tick: back on their own thread",
                      kSlowTooLong.count());
        slow_too_long_ = 0;
        if (slow_thread_.joinable()) slow_thread_.join(); // it returned when it handed over
        try {
          slow_thread_ = std::thread([this] {
            name_this_thread("ws-nvml-pcie");
            slow_loop(/*may_hand_over=*/false); // for good: calls that were slow once would make the two flap
          });
          slow_inline_.store(false, std::memory_order_relaxed);
        } catch (const std::system_error& e) { // no thread to be had: they stay on the tick, slow as they are
          spdlog::warn("cannot start a thread for NVML's slow reads ({}); they stay on the tick", e.what());
        }
      }
    }
    frame.gpus.reserve(frame.gpus.size() + devs_.size());
    for (auto& d : devs_) {
      if (d.lost) continue;
      if (d.unknown_failures > 0 && frame.mono < d.retry_at) continue; // backing off after NVML_ERROR_UNKNOWN
      sample_device(d, frame);
    }
    poll_events(frame); // issue 17: Xid errors since the last poll
  } catch (...) {
    // allocation failure: the tick keeps what it has
  }
}

namespace {
// issue 33: a read just after a predicted update starts this much past its uncertainty (and one just before ends
// this much ahead of it)
constexpr auto kUpdateGuard = std::chrono::microseconds(500);
// A prediction confirmed this recently and this narrow is trusted: one read just after the update, no scan across it.
// A scan on an H100 (2.8 ms reads) leaves the update known within about 1.7 ms: an edge then lies within that much
// of the power (700 W: 1.2 J, 0.3 % of a 1 s phase at 400 W), and a phase per training step costs one counter read
// per edge and a scan every 2 s, not a scan per edge.
constexpr auto kTrustFor = std::chrono::seconds(2);
constexpr auto kTrustWithin = std::chrono::microseconds(2500);
// While a reading waits for the update, the instant power is read this often (a power step between the edge and the
// update is then placed within this), at most kEdgePowerReads times.
constexpr auto kEdgePowerStep = std::chrono::milliseconds(4);
constexpr auto kLateEdgeStart = std::chrono::milliseconds(20);
constexpr size_t kEdgePowerReads = 128;

// J from `from` to `to` of the power read at the times given (trapezoids; held flat beyond the first and the last)
double power_integral_j(const std::vector<std::pair<SteadyClock::time_point, double>>& p, SteadyClock::time_point from,
                        SteadyClock::time_point to) {
  if (p.empty() || to <= from) return 0;
  const auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  const auto at = [&](SteadyClock::time_point t) { // the power at t, straight between the reads
    if (t <= p.front().first) return p.front().second;
    if (t >= p.back().first) return p.back().second;
    auto it = std::lower_bound(p.begin(), p.end(), t, [](const auto& x, auto v) { return x.first < v; });
    const auto& [t1, w1] = *it;
    const auto& [t0, w0] = *std::prev(it);
    return t1 == t0 ? w1 : w0 + (w1 - w0) * secs(t - t0) / secs(t1 - t0);
  };
  double j = 0;
  SteadyClock::time_point t = from;
  double w = at(from);
  for (const auto& [ti, wi] : p) {
    if (ti <= from) continue;
    if (ti >= to) break;
    j += 0.5 * (w + wi) * secs(ti - t);
    t = ti;
    w = wi;
  }
  return j + 0.5 * (w + at(to)) * secs(to - t);
}
} // namespace

// How far power_integral_j may be off: a step of the power between two reads is anywhere between them (half the
// step times their spacing, each), the power before the first read is not seen (the spread of what was seen, over that
// stretch), and the instant field's calibration against the counter (3 % of the integral).
double power_integral_err_j(const std::vector<std::pair<SteadyClock::time_point, double>>& p,
                            SteadyClock::time_point from, SteadyClock::time_point to) {
  if (p.empty() || to <= from) return 0;
  const auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  double err = 0, lo = p.front().second, hi = p.front().second;
  for (size_t i = 1; i < p.size(); ++i) {
    lo = std::min(lo, p[i].second);
    hi = std::max(hi, p[i].second);
    const auto a = std::max(p[i - 1].first, from), b = std::min(p[i].first, to);
    if (b > a) err += 0.5 * std::abs(p[i].second - p[i - 1].second) * secs(b - a);
  }
  if (p.front().first > from) err += (hi - lo + 0.25 * hi) * secs(std::min(p.front().first, to) - from);
  if (p.back().first < to) err += (hi - lo) * secs(to - std::max(p.back().first, from));
  return err + 0.03 * std::abs(power_integral_j(p, from, to));
}

std::chrono::nanoseconds NvmlSource::plain_stale(const Dev& d) {
  return d.clock.state() == CounterClock::State::continuous
             ? std::chrono::nanoseconds{0}
             : std::chrono::nanoseconds(CounterClock::Options{}.nominal_period);
}

void NvmlSource::place_energy(const Dev& d, SteadyClock::time_point t0, SteadyClock::time_point t1,
                              GpuSample& s) const {
  const auto mid = t0 + (t1 - t0) / 2;
  s.energy_at = mid;
  switch (d.clock.state()) {
  case CounterClock::State::continuous:
    return;
  case CounterClock::State::periodic:
    if (!d.clock.stale(mid)) {
      // the whole read past the last update predicted before it, and clear of the next: the energy at that update
      if (auto u = update_of_read(d, t0, t1)) {
        s.energy_at = *u;
        s.energy_stale = d.clock.uncertainty(*u);
        return;
      }
    }
    s.energy_stale = d.clock.period();
    return;
  default: // not known: as old as an H100's period may make it
    s.energy_stale = CounterClock::Options{}.nominal_period;
  }
}

void NvmlSource::sample_edge_power(Dev& d) {
  auto& p = d.edge.power;
  if (p.size() >= kEdgePowerReads) return;
  const auto t = SteadyClock::now();
  if (auto w = instant_power_w(d)) p.emplace_back(t, *w);
}

OptF NvmlSource::instant_power_w(Dev& d) {
  if (!lib_->device_field_values || !d.on[cFieldValues] ||
      std::find(d.fields.begin(), d.fields.end(), kFieldPowerInstant) == d.fields.end())
    return std::nullopt;
  FieldValue f{};
  f.fieldId = kFieldPowerInstant;
  if (lib_->device_field_values(d.handle, 1, &f) != kSuccess || f.nvmlReturn != kSuccess) return std::nullopt;
  bool ok = false;
  const double v = field_number(f, ok);
  return ok ? OptF(v * kMilli) : std::nullopt;
}

void NvmlSource::plan_edge_reads(Dev& d, SteadyClock::time_point after) {
  auto& e = d.edge;
  const ReadCost& rc = d.cost[cEnergy];
  const auto cost = rc.measured.count() > 0 ? rc.measured : std::chrono::nanoseconds{0};
  const auto now = SteadyClock::now();
  SteadyClock::time_point u = d.clock.next_update(std::max(after, now));
  auto delta = d.clock.uncertainty(u);
  const bool check = u - d.clock.last_confirmed() > kTrustFor || delta > kTrustWithin;
  if (check)
    while (u - delta - kUpdateGuard - cost < now) { // no room for a read before it: the next one
      u += d.clock.period();
      delta = d.clock.uncertainty(u);
    }
  e.update = u;
  if (!check) {
    e.step = Dev::EdgeRead::Step::after;
    e.due = u + delta + kUpdateGuard;
    return;
  }
  // Across the window the update is predicted in, a read a little over a call apart, until the value changes: the
  // prediction is checked and narrowed to the reads' spacing (a few reads: the window is a few ms).
  e.step = Dev::EdgeRead::Step::scan;
  e.due = u - delta - kUpdateGuard - cost;
  e.scan_end = u + delta + kUpdateGuard + cost;
  e.spacing = std::max<std::chrono::nanoseconds>(cost + kUpdateGuard, std::chrono::milliseconds(1));
  e.have_prev = false;
}

std::optional<SteadyClock::time_point> NvmlSource::update_of_read(const Dev& d, SteadyClock::time_point t0,
                                                                  SteadyClock::time_point t1) {
  const auto next = d.clock.next_update(t0);
  const auto last = next - d.clock.period();
  if (t0 - last > d.clock.uncertainty(last) + kUpdateGuard && next - t1 > d.clock.uncertainty(next) + kUpdateGuard)
    return last;
  return std::nullopt;
}

bool NvmlSource::edge_step(Dev& d, std::vector<CounterReading>& out) {
  using Step = Dev::EdgeRead::Step;
  auto& e = d.edge;
  // The power's shape between the reads of a learning or a scan too (a step of power inside a learning of 200 ms on a
  // loaded machine was otherwise seen only at its ends, and the edge worked back through it 25 J off)
  if (!e.power.empty() && SteadyClock::now() - e.power.back().first >= kEdgePowerStep) sample_edge_power(d);
  unsigned long long mj = 0;
  const auto t0 = SteadyClock::now();
  if (lib_->device_total_energy(d.handle, &mj) != kSuccess) {    // left to the ticks, which say why
    if (e.step == Step::learn) d.clock.miss(SteadyClock::now()); // a learning cut short: tried again later
    return false;
  }
  const auto t1 = SteadyClock::now();
  const auto uj = static_cast<int64_t>(mj) * 1000; // NVML counts mJ
  const auto mid = t0 + (t1 - t0) / 2;
  // The reading at `update`, and the energy at the edge from it: the instant power's integral back to the edge.
  const auto at_update = [&](SteadyClock::time_point update, int64_t value) {
    CounterReading r{d.info.gpu_index, value, update, std::nullopt, 0};
    sample_edge_power(d);
    if (!e.power.empty() && update > e.edge) {
      r.edge_at = e.edge;
      r.edge_back_uj = std::llround(power_integral_j(e.power, e.edge, update) * 1e6);
      double peak = 0;
      for (const auto& [t, w] : e.power)
        peak = std::max(peak, w);
      const double placed = d.clock.state() == CounterClock::State::periodic
                                ? std::chrono::duration<double>(d.clock.uncertainty(update)).count()
                                : 0;
      r.edge_err_uj = std::llround((power_integral_err_j(e.power, e.edge, update) + peak * placed) * 1e6);
    }
    out.push_back(r);
  };
  // A read planned near an update but made much later (a worker not scheduled for 100 ms on a loaded machine) holds a
  // later update's value: placed at the planned update, a phase edge was off by a period of power (12 % of a 1.3 s
  // phase at 650 W). Such a read is placed at the update it stands for, or, where it may have crossed one, the next
  // update is waited for (three times at most; then the edge is interpolated, and says so).
  const auto too_late = [&] {
    if (e.late++ >= 2) return false;
    plan_edge_reads(d, t1);
    return true;
  };
  switch (e.step) {
  case Step::plain:
    out.push_back({d.info.gpu_index, uj, mid, std::nullopt, 0, 0, plain_stale(d)});
    return false;
  case Step::learn: {
    if (!e.first_read) e.first_read = std::make_pair(mid, uj);
    if (auto next = d.clock.learn(t0, t1, uj)) {
      e.due = *next;
      return true;
    }
    if (d.clock.state() == CounterClock::State::periodic) {
      spdlog::info("GPU {}: its energy counter moves every {:.1f} ms; readings at phase edges are made just after "
                   "its next update",
                   d.info.gpu_index, std::chrono::duration<double, std::milli>(d.clock.period()).count());
      if (auto first = d.clock.first_update(); first && first->first > e.edge) {
        at_update(first->first, first->second); // the first update the learning saw followed the edge
        return false;
      }
      plan_edge_reads(d, t1);
      return true;
    }
    if (d.clock.state() == CounterClock::State::continuous)
      spdlog::debug("GPU {}: its energy counter moves at every read; readings stand for their own time",
                    d.info.gpu_index);
    // A counter exact at every instant (or one not learnt): the learning's first read, the one nearest the edge
    if (!ticks_hold_edges(d))
      out.push_back({d.info.gpu_index, e.first_read->second, e.first_read->first, std::nullopt, 0, 0, plain_stale(d)});
    return false;
  }
  case Step::scan:
    if (e.have_prev && uj != e.prev_uj) {
      // the change is the predicted update's only where this read ended before the one after it
      if (d.clock.next_update(e.update) - t1 <= d.clock.uncertainty(d.clock.next_update(e.update)) + kUpdateGuard)
        return too_late();
      d.clock.confirm(e.update, e.prev_t0, t1);
      at_update(d.clock.last_confirmed(), uj);
      return false;
    }
    if (e.have_prev && mid > e.scan_end) {
      // No change seen across the window: the update came before the first read (a late read on a loaded machine) or
      // the prediction is off. Either way the reads before the next predicted update are its reference: watch that
      // one too. Nothing across two windows is a miss, learnt again at a later edge; no reading then (the edge is
      // interpolated between the counter values around it, and says so).
      if (e.rescans++ == 0) {
        e.update = d.clock.next_update(e.update);
        const auto delta = d.clock.uncertainty(e.update);
        const auto cost = d.cost[cEnergy].measured.count() > 0 ? d.cost[cEnergy].measured : std::chrono::nanoseconds{0};
        e.due = std::max(t1, e.update - delta - kUpdateGuard - cost);
        e.scan_end = e.update + delta + kUpdateGuard + cost;
        e.prev_t0 = t0;
        e.prev_uj = uj;
        return true;
      }
      spdlog::debug("GPU {}: its energy counter did not move when expected; learnt again at a later edge",
                    d.info.gpu_index);
      d.clock.miss(t1);
      return false;
    }
    e.have_prev = true;
    e.prev_t0 = t0;
    e.prev_uj = uj;
    e.due = t0 + e.spacing;
    return true;
  case Step::after:
    if (auto u = update_of_read(d, t0, t1)) {
      at_update(*u, uj);
      return false;
    }
    return too_late();
  }
  return false;
}

std::optional<SteadyClock::time_point> NvmlSource::read_energy_counters(std::vector<CounterReading>& out,
                                                                        SteadyClock::time_point requested) noexcept {
  try {
    const bool fresh = !edge_serving_ || *edge_serving_ != requested;
    edge_serving_ = requested;
    std::optional<SteadyClock::time_point> next;
    for (auto& d : devs_) {
      auto& e = d.edge;
      // Only what a tick would read now: a lost GPU, one backing off or one whose counter is off is left to the ticks
      // (which also say why); a failure here is not counted against the GPU.
      if (d.lost || d.unknown_failures > 0 || !d.on[cEnergy]) {
        e.active = false;
        continue;
      }
      if (fresh) {
        const auto now = SteadyClock::now();
        e = Dev::EdgeRead{};
        e.active = true;
        // A reading that starts late (a worker stuck in a hanging call, a loaded machine) works back only to its own
        // start: the power before it was not seen, and the marker is interpolated up to it instead.
        e.edge = now - requested > kLateEdgeStart ? now : requested;
        e.due = now;
        if (d.clock.stale(now)) d.clock = CounterClock{};
        if (d.clock.state() == CounterClock::State::periodic) {
          sample_edge_power(d);
          plan_edge_reads(d, requested);
        } else if (d.clock.may_learn(now) &&
                   (!short_ticks() || d.cost[cEnergy].period.count() > 0 || d.clock.seen_holding())) {
          // Ticks under 100 ms apart that read the counter every time show whether it holds its value (then it is
          // learnt) or moves at every tick (then they hold an edge well: nothing to read). Read on a schedule, they
          // show nothing: it is learnt.
          sample_edge_power(d);
          d.clock.start_learning(now);
          e.step = Dev::EdgeRead::Step::learn;
        } else if (ticks_hold_edges(d)) {
          e.active = false;
        }
      }
    }
    // The steps that are due, earliest first across the GPUs: one GPU's reads back to back (a learning, a scan) must
    // not hold the others' past their own (eight H100s learnt one after another each saw its second update some
    // 100 ms late, and none learnt).
    for (;;) {
      Dev* due_dev = nullptr;
      const auto now = SteadyClock::now();
      for (auto& d : devs_)
        if (d.edge.active && d.edge.due <= now && (!due_dev || d.edge.due < due_dev->edge.due)) due_dev = &d;
      if (!due_dev) break;
      due_dev->edge.active = edge_step(*due_dev, out);
    }
    for (auto& d : devs_) {
      auto& e = d.edge;
      if (!e.active) continue;
      auto due = e.due;
      if (!e.power.empty() && e.power.size() < kEdgePowerReads) { // waiting for the update: the power's shape
        if (SteadyClock::now() - e.power.back().first >= kEdgePowerStep) sample_edge_power(d);
        due = std::min(due, e.power.back().first + kEdgePowerStep);
      }
      if (!next || due < *next) next = due;
    }
    if (!next) edge_serving_.reset();
    return next;
  } catch (...) {
    edge_serving_.reset(); // allocation failure: the readings taken so far stand
    return std::nullopt;
  }
}

void NvmlSource::probe(Frame& frame) noexcept {
  try {
    frame.gpus.reserve(frame.gpus.size() + devs_.size());
    for (auto& d : devs_) {
      if (d.lost) continue;
      if (d.unknown_failures > 0 && frame.mono < d.retry_at) continue;
      GpuSample s;
      s.gpu_index = d.info.gpu_index;
      // A device without utilisation answers with none: the activity rule takes not knowing for not idle.
      if (d.on[cUtil]) {
        Utilization u{};
        const Return rc = lib_->device_utilization(d.handle, &u);
        if (rc == kSuccess) {
          s.util_gpu_pct = u.gpu;
          s.util_mem_pct = u.memory;
        } else {
          ok(d, cUtil, rc, frame); // lost, backing off or switched off, as on a full tick (with its event)
          if (d.lost) continue;
        }
      }
      frame.gpus.push_back(s);
    }
    poll_events(frame); // an Xid while idle is news: the sampler stores it at full rate
  } catch (...) {
    // allocation failure: the tick keeps what it has
  }
}

std::chrono::nanoseconds NvmlSource::slow_pass() {
  const auto t0 = SteadyClock::now();
  for (auto& d : devs_) {
    if (slow_abort_.load(std::memory_order_relaxed)) break;
    bool pcie_off = false;
    {
      std::lock_guard l(d.slow->mu);
      if (d.slow->lost) continue;
      pcie_off = d.slow->off;
    }
    read_migs(d); // issue 17
    // d.on[cPcieThroughput] is constant after open(): its tick reader makes no call to classify
    if (pcie_off || !d.on[cPcieThroughput]) continue;
    unsigned int tx = 0, rx = 0;
    Return a = lib_->device_pcie_throughput(d.handle, kPcieUtilTx, &tx);
    if (slow_abort_.load(std::memory_order_relaxed)) break;
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
  return SteadyClock::now() - t0;
}

void NvmlSource::slow_loop(bool may_hand_over) {
  std::unique_lock lock(slow_mu_);
  bool first = may_hand_over;
  for (;;) {
    lock.unlock();
    auto took = slow_pass();
    // Judged by the best of three: one pass can be preempted on a loaded machine. A real driver's first pass (40 ms
    // a GPU) is not tried again.
    for (int i = 1; first && i < 3 && took >= kSlowInline && took < 10 * kSlowInline; ++i)
      took = std::min(took, slow_pass());
    lock.lock();
    // MIG instances stay on this thread: their reads are many calls a GPU.
    const bool migs = std::any_of(devs_.begin(), devs_.end(), [](const Dev& d) { return !d.migs.empty(); });
    if (first && took < kSlowInline && !migs && !slow_stop_) {
      spdlog::debug("NVML's slow reads took {} us: made on the tick from now on",
                    std::chrono::duration_cast<std::chrono::microseconds>(took).count());
      slow_inline_.store(true, std::memory_order_release);
      return;
    }
    first = false;
    if (slow_cv_.wait_for(lock, opts_.slow_period, [this] { return slow_stop_; })) return;
  }
}

nlohmann::json NvmlSource::report() const {
  nlohmann::json devs = nlohmann::json::array();
  for (const auto& d : devs_) {
    nlohmann::json supported = nlohmann::json::object();
    nlohmann::json reads = nlohmann::json::object(); // issue 33: each timed call's cost and period
    for (const auto& c : kCalls) {
      supported[c.name] = d.on[c.call];
      const ReadCost& r = d.cost[c.call];
      if (scheduled(c.call) && d.on[c.call] && r.measured.count() >= 0)
        reads[c.name] = {{"cost_us", std::chrono::duration<double, std::micro>(r.measured).count()},
                         {"period_ms", std::chrono::duration<double, std::milli>(r.period).count()}};
    }
    devs.push_back({{"index", d.info.gpu_index},
                    {"name", d.info.name},
                    {"uuid", d.info.uuid},
                    {"pci_bus_id", d.info.pci_bus_id},
                    {"lost", d.lost},
                    {"mig_mode", d.mig_mode ? nlohmann::json(*d.mig_mode) : nlohmann::json()}, // issue 17
                    {"mig_instances", d.migs.size()},
                    {"metrics", supported},
                    {"reads", reads}});
  }
  return {{"library", lib_ ? lib_->path() : ""},
          {"driver_version", driver_version_},
          {"nvml_version", nvml_version_},
          {"devices_found", devices_found_},
          {"devices", devs},
          {"missing_functions", lib_ ? nlohmann::json(lib_->missing_optional()) : nlohmann::json::array()}};
}

} // namespace wattscope
