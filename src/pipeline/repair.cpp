#include "pipeline/repair.hpp"

#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "accounting/accounting.hpp"

namespace wattscope {

namespace {
// Column positions, looked up once per table rather than once per row.
struct Cols {
  TableId id;
  size_t operator()(std::string_view name) const { return column_index(id, name); }
};
} // namespace

RunInfo rebuild_from_samples(StoreReader& store, const RunInfo& run) {
  RunSummary s;
  int64_t last_ts = run.start_ms, max_tick = -1;

  // Devices as stored at the first tick.
  std::map<int64_t, size_t> gpu_at;
  store.scan(TableId::GpuDevices, run, [&](std::span<const Value> v) {
    GpuSummary g;
    g.device = device_from_row(v);
    gpu_at[g.device.gpu_index] = s.gpus.size();
    s.gpus.push_back(std::move(g));
  });

  const Cols c{TableId::CpuSamples};
  const size_t c_tick = c("tick"), c_ts = c("ts_ms"), c_util = c("util_pct"), c_mem = c("mem_used_bytes"),
               c_total = c("mem_total_bytes"), c_pkg_w = c("package_power_w"), c_pkg_j = c("package_energy_j"),
               c_dram_j = c("dram_energy_j"), c_method = c("power_method");
  store.scan(TableId::CpuSamples, run, [&](std::span<const Value> v) {
    ++s.samples;
    max_tick = std::max(max_tick, value_int(v[c_tick]).value_or(0));
    last_ts = std::max(last_ts, value_int(v[c_ts]).value_or(last_ts));
    s.cpu_util_pct.add(value_real(v[c_util]));
    if (auto m = value_int(v[c_mem]); m && (!s.cpu_mem_peak_bytes || *m > *s.cpu_mem_peak_bytes))
      s.cpu_mem_peak_bytes = m;
    if (auto t = value_int(v[c_total])) s.cpu_mem_total_bytes = t;
    s.cpu_package_power_w.add(value_real(v[c_pkg_w]));
    // Energies are stored since run start: the last stored value is the run's.
    if (auto e = value_real(v[c_pkg_j])) s.cpu_package_energy_j = e;
    if (auto e = value_real(v[c_dram_j])) s.cpu_dram_energy_j = e;
    if (auto m = value_text(v[c_method]); !m.empty()) s.cpu_energy_method = m;
  });

  std::map<std::string, size_t> zone_at;
  const Cols z{TableId::CpuPowerSamples};
  const size_t z_domain = z("domain"), z_zone = z("zone"), z_socket = z("socket"), z_w = z("power_w"),
               z_j = z("energy_j");
  store.scan(TableId::CpuPowerSamples, run, [&](std::span<const Value> v) {
    const std::string domain(value_text(v[z_domain]));
    auto [it, fresh] = zone_at.emplace(domain, s.zones.size());
    if (fresh) {
      ZoneSummary zs;
      zs.domain = domain;
      zs.zone = value_text(v[z_zone]);
      zs.socket = value_int(v[z_socket]);
      s.zones.push_back(std::move(zs));
    }
    auto& zs = s.zones[it->second];
    zs.power_w.add(value_real(v[z_w]));
    if (auto e = value_real(v[z_j])) zs.energy_j = *e;
  });

  const Cols g{TableId::GpuSamples};
  const size_t g_idx = g("gpu_index"), g_tick = g("tick"), g_ts = g("ts_ms"), g_uuid = g("uuid"), g_name = g("name"),
               g_vendor = g("vendor"), g_w = g("power_w"), g_util = g("util_gpu_pct"), g_mem = g("mem_used_bytes"),
               g_j = g("energy_j");
  store.scan(TableId::GpuSamples, run, [&](std::span<const Value> v) {
    const int64_t idx = value_int(v[g_idx]).value_or(0);
    max_tick = std::max(max_tick, value_int(v[g_tick]).value_or(0));
    last_ts = std::max(last_ts, value_int(v[g_ts]).value_or(last_ts));
    auto it = gpu_at.find(idx);
    if (it == gpu_at.end()) { // a device row lost with the rest: identify the GPU from its samples
      GpuSummary gs;
      gs.device.gpu_index = static_cast<int>(idx);
      gs.device.uuid = value_text(v[g_uuid]);
      gs.device.name = value_text(v[g_name]);
      gs.device.vendor = value_text(v[g_vendor]);
      it = gpu_at.emplace(idx, s.gpus.size()).first;
      s.gpus.push_back(std::move(gs));
    }
    auto& gs = s.gpus[it->second];
    ++gs.samples;
    gs.power_w.add(value_real(v[g_w]));
    gs.util_gpu_pct.add(value_real(v[g_util]));
    if (auto m = value_int(v[g_mem]); m && (!gs.peak_mem_used_bytes || *m > *gs.peak_mem_used_bytes))
      gs.peak_mem_used_bytes = m;
    if (auto e = value_real(v[g_j])) gs.energy_j = *e;
  });

  std::string last_event;
  const Cols e{TableId::Events};
  const size_t e_kind = e("kind"), e_source = e("source"), e_detail = e("detail");
  store.scan(TableId::Events, run, [&](std::span<const Value> v) {
    ++s.events;
    const std::string_view kind = value_text(v[e_kind]), source = value_text(v[e_source]);
    if (kind == "device-lost")
      for (auto& gs : s.gpus)
        if (source == "gpu" + std::to_string(gs.device.gpu_index)) gs.lost = true;
    last_event = fmt::format("{} {}: {}", kind, source, value_text(v[e_detail]));
  });
  s.skipped_ticks = std::max<int64_t>(0, max_tick + 1 - s.samples);

  RunInfo out = run;
  out.samples = s.samples;
  out.total_energy_j = s.total_energy_j();
  nlohmann::json j = s.to_json();
  j["rebuilt_from_samples"] = true;
  j["last_sample_ms"] = last_ts;
  if (!last_event.empty()) j["last_event"] = last_event;
  out.summary = j.dump();
  if (s.samples > 0 || max_tick >= 0) out.end_ms = last_ts;
  return out;
}

RunInfo as_shown(StoreReader& store, const RunInfo& run) {
  if (!unfinished(run)) return run;
  RunInfo r = rebuild_from_samples(store, run);
  r.end_ms.reset(); // shown as unfinished; `wattscope repair` writes the end
  return r;
}

} // namespace wattscope
