#include "pipeline/repair.hpp"

#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "accounting/accounting.hpp"

namespace wattscope {

namespace {
struct Row {
  TableId id;
  std::span<const Value> v;
  OptF real(std::string_view c) const { return value_real(v[column_index(id, c)]); }
  OptI integer(std::string_view c) const { return value_int(v[column_index(id, c)]); }
  std::string_view text(std::string_view c) const { return value_text(v[column_index(id, c)]); }
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

  store.scan(TableId::CpuSamples, run, [&](std::span<const Value> v) {
    const Row r{TableId::CpuSamples, v};
    ++s.samples;
    max_tick = std::max(max_tick, r.integer("tick").value_or(0));
    last_ts = std::max(last_ts, r.integer("ts_ms").value_or(last_ts));
    s.cpu_util_pct.add(r.real("util_pct"));
    if (auto m = r.integer("mem_used_bytes"); m && (!s.cpu_mem_peak_bytes || *m > *s.cpu_mem_peak_bytes))
      s.cpu_mem_peak_bytes = m;
    if (auto t = r.integer("mem_total_bytes")) s.cpu_mem_total_bytes = t;
    s.cpu_package_power_w.add(r.real("package_power_w"));
    // Energies are stored since run start: the last stored value is the run's.
    if (auto e = r.real("package_energy_j")) s.cpu_package_energy_j = e;
    if (auto e = r.real("dram_energy_j")) s.cpu_dram_energy_j = e;
    if (auto m = r.text("power_method"); !m.empty()) s.cpu_energy_method = m;
  });

  std::map<std::string, size_t> zone_at;
  store.scan(TableId::CpuPowerSamples, run, [&](std::span<const Value> v) {
    const Row r{TableId::CpuPowerSamples, v};
    const std::string domain(r.text("domain"));
    auto [it, fresh] = zone_at.emplace(domain, s.zones.size());
    if (fresh) {
      ZoneSummary z;
      z.domain = domain;
      z.zone = r.text("zone");
      z.socket = r.integer("socket");
      s.zones.push_back(std::move(z));
    }
    auto& z = s.zones[it->second];
    z.power_w.add(r.real("power_w"));
    if (auto e = r.real("energy_j")) z.energy_j = *e;
  });

  store.scan(TableId::GpuSamples, run, [&](std::span<const Value> v) {
    const Row r{TableId::GpuSamples, v};
    const int64_t idx = r.integer("gpu_index").value_or(0);
    max_tick = std::max(max_tick, r.integer("tick").value_or(0));
    last_ts = std::max(last_ts, r.integer("ts_ms").value_or(last_ts));
    auto it = gpu_at.find(idx);
    if (it == gpu_at.end()) { // a device row lost with the rest: identify the GPU from its samples
      GpuSummary g;
      g.device.gpu_index = static_cast<int>(idx);
      g.device.uuid = r.text("uuid");
      g.device.name = r.text("name");
      g.device.vendor = r.text("vendor");
      it = gpu_at.emplace(idx, s.gpus.size()).first;
      s.gpus.push_back(std::move(g));
    }
    auto& g = s.gpus[it->second];
    ++g.samples;
    g.power_w.add(r.real("power_w"));
    g.util_gpu_pct.add(r.real("util_gpu_pct"));
    if (auto m = r.integer("mem_used_bytes"); m && (!g.peak_mem_used_bytes || *m > *g.peak_mem_used_bytes))
      g.peak_mem_used_bytes = m;
    if (auto e = r.real("energy_j")) g.energy_j = *e;
  });

  std::string last_event;
  store.scan(TableId::Events, run, [&](std::span<const Value> v) {
    const Row r{TableId::Events, v};
    ++s.events;
    if (r.text("kind") == "device-lost")
      for (auto& g : s.gpus)
        if (r.text("source") == "gpu" + std::to_string(g.device.gpu_index)) g.lost = true;
    last_event = fmt::format("{} {}: {}", r.text("kind"), r.text("source"), r.text("detail"));
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
