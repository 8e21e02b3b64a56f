#include "runs/repair.hpp"

#include <algorithm>
#include <map>
#include <optional>

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
  const size_t g_idx = g("gpu_index"), g_tick = g("tick"), g_ts = g("ts_ms"), g_w = g("power_w"),
               g_util = g("util_gpu_pct"), g_mem = g("mem_used_bytes"), g_j = g("energy_j");
  store.scan(TableId::GpuSamples, run, [&](std::span<const Value> v) {
    const int64_t idx = value_int(v[g_idx]).value_or(0);
    max_tick = std::max(max_tick, value_int(v[g_tick]).value_or(0));
    last_ts = std::max(last_ts, value_int(v[g_ts]).value_or(last_ts));
    auto it = gpu_at.find(idx);
    if (it == gpu_at.end()) { // a device row lost with the rest: the samples name the GPU by its index only
      GpuSummary gs;
      gs.device.gpu_index = static_cast<int>(idx);
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

namespace {
std::string gpu_key(int64_t index) {
  return "gpu" + std::to_string(index);
}

// Each device's cumulative energy at a few times (sorted), from its stored values in time order, by the tracker's rule
// with ts_ms for its steady clock: linear between the values around a time; before a device's first value, that value;
// after its last, the last held (no known point after it: edge "none").
class EnergyAt {
public:
  struct Edge {
    double energy_j = 0;
    std::string_view how; // reading | interpolated | none
  };
  explicit EnergyAt(std::vector<int64_t> times) : times_(std::move(times)) {}
  void add(const std::string& device, int64_t ts_ms, double energy_j) {
    Series& s = series_[device];
    if (s.at.empty()) s.at.resize(times_.size());
    for (; s.next < times_.size() && times_[s.next] <= ts_ms; ++s.next) {
      const int64_t t = times_[s.next];
      if (t == ts_ms || !s.last) {
        s.at[s.next] = {energy_j, t == ts_ms ? "reading" : "interpolated"};
        continue;
      }
      const auto [t0, e0] = *s.last; // t0 < t <= ts_ms: the query would have been answered at t0 otherwise
      const double f = static_cast<double>(t - t0) / static_cast<double>(ts_ms - t0);
      s.at[s.next] = {e0 + (energy_j - e0) * f, "interpolated"};
    }
    s.last = {ts_ms, energy_j};
  }
  // Devices with any stored energy, in name order (as the tracker's device_energy_j), with their value at times()[i].
  std::map<std::string, Edge> at(size_t i) const {
    std::map<std::string, Edge> out;
    for (const auto& [device, s] : series_)
      out[device] = i < s.next ? s.at[i] : Edge{s.last->second, "none"};
    return out;
  }
  // Each device's last stored value.
  std::map<std::string, double> last() const {
    std::map<std::string, double> out;
    for (const auto& [device, s] : series_)
      out[device] = s.last->second;
    return out;
  }
  const std::vector<int64_t>& times() const { return times_; }

private:
  struct Series {
    std::optional<std::pair<int64_t, double>> last;
    size_t next = 0; // times_[next] is the first time not yet passed
    std::vector<Edge> at;
  };
  std::vector<int64_t> times_;
  std::map<std::string, Series> series_;
};
} // namespace

std::vector<PhaseRecord> close_open_phases(StoreReader& store, const RunInfo& run) {
  std::vector<PhaseRecord> open;
  const Cols p{TableId::Phases};
  const size_t p_id = p("phase_id"), p_name = p("name"), p_index = p("index"), p_parent = p("parent"),
               p_start = p("start_ms"), p_end = p("end_ms"), p_start_tick = p("start_tick");
  store.scan(TableId::Phases, run, [&](std::span<const Value> v) {
    if (!is_null(v[p_end])) return; // closed: by its end, or by the run's
    PhaseRecord r;
    r.phase_id = value_int(v[p_id]).value_or(0);
    r.name = value_text(v[p_name]);
    r.index = value_int(v[p_index]);
    r.parent = value_int(v[p_parent]);
    r.start_ms = value_int(v[p_start]).value_or(run.start_ms);
    r.start_tick = value_int(v[p_start_tick]).value_or(0);
    open.push_back(std::move(r));
  });
  if (open.empty()) return open;

  std::vector<int64_t> times;
  for (const auto& r : open)
    times.push_back(r.start_ms);
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  EnergyAt energy(times);
  int64_t last_ts = run.start_ms, last_tick = 0;
  std::map<std::string, std::string> method; // device -> its energy method, as the tracker keeps it

  const Cols d{TableId::GpuDevices};
  const size_t d_idx = d("gpu_index"), d_method = d("energy_method");
  store.scan(TableId::GpuDevices, run, [&](std::span<const Value> v) {
    if (auto m = value_text(v[d_method]); !m.empty()) method[gpu_key(value_int(v[d_idx]).value_or(0))] = m;
  });
  const Cols c{TableId::CpuSamples};
  const size_t c_tick = c("tick"), c_ts = c("ts_ms"), c_pkg_j = c("package_energy_j"), c_dram_j = c("dram_energy_j"),
               c_method = c("power_method");
  store.scan(TableId::CpuSamples, run, [&](std::span<const Value> v) {
    const auto ts = value_int(v[c_ts]);
    if (!ts) return;
    last_ts = std::max(last_ts, *ts);
    last_tick = std::max(last_tick, value_int(v[c_tick]).value_or(0));
    if (auto e = value_real(v[c_pkg_j])) energy.add("cpu_package", *ts, *e);
    if (auto e = value_real(v[c_dram_j])) energy.add("cpu_dram", *ts, *e);
    if (auto m = value_text(v[c_method]); !m.empty()) method["cpu_package"] = method["cpu_dram"] = m;
  });
  const Cols g{TableId::GpuSamples};
  const size_t g_idx = g("gpu_index"), g_tick = g("tick"), g_ts = g("ts_ms"), g_j = g("energy_j");
  store.scan(TableId::GpuSamples, run, [&](std::span<const Value> v) {
    const auto ts = value_int(v[g_ts]);
    if (!ts) return;
    last_ts = std::max(last_ts, *ts);
    last_tick = std::max(last_tick, value_int(v[g_tick]).value_or(0));
    if (auto e = value_real(v[g_j])) energy.add(gpu_key(value_int(v[g_idx]).value_or(0)), *ts, *e);
  });

  const std::map<std::string, double> end = energy.last();
  for (auto& r : open) {
    const size_t at = static_cast<size_t>(std::lower_bound(times.begin(), times.end(), r.start_ms) - times.begin());
    const auto start = energy.at(at);
    r.end_ms = std::max(last_ts, r.start_ms);
    r.end_tick = std::max(last_tick, r.start_tick);
    std::string how, m;
    bool any_simulated = false;
    for (const auto& [device, end_j] : end) {
      const EnergyAt::Edge& s = start.at(device);
      r.device_energy_j.emplace_back(device, end_j - s.energy_j);
      r.energy_j = r.energy_j.value_or(0) + (end_j - s.energy_j);
      if (how.empty() || s.how == "none" || (s.how == "interpolated" && how == "reading")) how = s.how;
      auto dm = method.find(device);
      const std::string dev_method = dm == method.end() ? std::string("integrated") : dm->second;
      m = m.empty() || m == dev_method ? dev_method : "mixed";
      any_simulated = any_simulated || dev_method == "simulated";
    }
    r.energy_method = any_simulated ? "simulated" : m;
    r.start_edge = how;
    r.end_edge = "none";
    r.closed_by_repair = true;
  }
  return open;
}

RunInfo as_shown(StoreReader& store, const RunInfo& run) {
  if (!unfinished(run)) return run;
  RunInfo r = rebuild_from_samples(store, run);
  r.end_ms.reset(); // shown as unfinished; `wattscope repair` writes the end
  return r;
}

} // namespace wattscope
