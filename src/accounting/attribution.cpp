#include "accounting/attribution.hpp"

#include <algorithm>

namespace wattscope {

double ProcessTotals::gpu_total_j() const {
  double t = 0;
  for (const auto& [i, j] : gpu_energy_j)
    t += j;
  return t;
}

void Attributor::adopt(ProcessSnapshot& snap, int64_t tick) {
  sum_.tracked = true;
  run_mode_ = snap.run_mode;
  // CPU: busy time in the window is split by the processes' CPU time; what they do not account for is other
  // processes' (outside the run's tree, kernel threads, processes gone between scans); idle time is nobody's.
  cpu_share_.clear();
  cpu_known_ = snap.cpu_total_s && *snap.cpu_total_s > 0 && snap.cpu_busy_s;
  double mine = 0;
  if (cpu_known_) {
    const double total = *snap.cpu_total_s;
    const double busy = std::clamp(*snap.cpu_busy_s, 0.0, total);
    for (const auto& p : snap.procs)
      if (p.in_run) mine += p.cpu_time_s;
    const double counted = std::min(mine, busy);
    cpu_attr_frac_ = counted / total;
    cpu_other_frac_ = (busy - counted) / total;
    cpu_busy_frac_ = busy / total;
  }
  resolve_rows(snap.rows, tick);
  for (const auto& p : snap.procs) {
    if (!p.sampled && p.cpu_time_s <= 0) continue; // idle background processes are not kept in the summary
    auto [it, fresh] = sum_.processes.try_emplace(p.id);
    ProcessTotals& t = it->second;
    if (fresh) {
      t.first_tick = tick;
      t.comm = p.comm;
      t.unit = p.unit;
      t.unit_kind = p.unit_kind;
      t.in_run = p.in_run;
    }
    t.last_tick = tick;
    if (p.rss_bytes && (!t.peak_rss_bytes || *p.rss_bytes > *t.peak_rss_bytes)) t.peak_rss_bytes = p.rss_bytes;
  }
  std::map<ProcessId, int64_t> gpu_mem;
  for (const auto& g : snap.gpu_procs)
    if (g.mem_used_bytes) gpu_mem[g.id] += *g.mem_used_bytes;
  for (const auto& g : snap.gpu_procs) {
    auto [it, fresh] = sum_.processes.try_emplace(g.id);
    ProcessTotals& t = it->second;
    if (fresh) {
      t.first_tick = tick;
      t.in_run = g.in_run;
    }
    t.last_tick = tick;
    if (auto m = gpu_mem.find(g.id); m != gpu_mem.end() && (!t.peak_gpu_mem_bytes || m->second > *t.peak_gpu_mem_bytes))
      t.peak_gpu_mem_bytes = m->second;
  }
  // The shares, once every process has its totals. CPU: in the order of snap.procs (fill walks them alike).
  if (cpu_known_ && mine > 0)
    for (const auto& p : snap.procs)
      if (p.in_run && p.cpu_time_s > 0) {
        ProcessTotals& t = sum_.processes[p.id];
        cpu_share_.push_back({cpu_attr_frac_ * p.cpu_time_s / mine, &t, unit_of(t)});
      }
  // GPUs: by SM share; when no process is active, by memory held; else idle.
  gpu_.clear();
  for (int idx : snap.gpus_listed) {
    GpuShares g;
    auto share = [&](const GpuProcessSample& p, double weight) {
      ProcessTotals& t = sum_.processes[p.id];
      g.shares.push_back({p.id, p.in_run, weight, &t, unit_of(t)});
    };
    for (const auto& p : snap.gpu_procs)
      if (p.gpu_index == idx && p.sm_pct && *p.sm_pct > 0) share(p, *p.sm_pct);
    g.by_sm = !g.shares.empty();
    if (!g.by_sm)
      for (const auto& p : snap.gpu_procs)
        if (p.gpu_index == idx && p.mem_used_bytes && *p.mem_used_bytes > 0)
          share(p, static_cast<double>(*p.mem_used_bytes));
    for (const auto& s : g.shares)
      g.total += s.weight;
    gpu_[idx] = std::move(g);
  }
  prune(tick);
  prev_adopt_tick_ = tick;
}

void Attributor::prune(int64_t tick) {
  if (sum_.processes.size() <= kMaxKeptProcesses) return;
  // Candidates: outside the run (in record and serve, every process: the machine is the run), and seen neither in this
  // scan nor the one before (its `gone` row, resolved from these totals, has gone out by then). The shares just built
  // point only at processes of this scan.
  std::vector<std::pair<double, std::map<ProcessId, ProcessTotals>::iterator>> gone;
  for (auto it = sum_.processes.begin(); it != sum_.processes.end(); ++it)
    if ((!run_mode_ || !it->second.in_run) && it->second.last_tick < prev_adopt_tick_ && it->second.last_tick < tick)
      gone.emplace_back(it->second.cpu_energy_j + it->second.gpu_total_j(), it);
  const size_t target = kMaxKeptProcesses * 3 / 4; // prune in batches, not on every scan
  const size_t excess = sum_.processes.size() > target ? sum_.processes.size() - target : 0;
  const size_t n = std::min(excess, gone.size());
  std::nth_element(gone.begin(), gone.begin() + static_cast<std::ptrdiff_t>(n), gone.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < n; ++i)
    sum_.processes.erase(gone[i].second);
}

UnitTotals* Attributor::unit_of(const ProcessTotals& t) {
  if (t.unit.empty()) return nullptr;
  auto [it, fresh] = sum_.units.try_emplace(t.unit);
  if (fresh) it->second.kind = t.unit_kind;
  return &it->second;
}

// Rows: first seen now; or gone, last seen at the latest tick that had them.
void Attributor::resolve_rows(std::vector<ProcessRow>& rows, int64_t tick) const {
  for (auto& r : rows) {
    auto it = sum_.processes.find(r.id);
    if (r.last_tick) {
      r.first_tick = it != sum_.processes.end() ? it->second.first_tick : tick;
      r.last_tick = it != sum_.processes.end() ? it->second.last_tick : tick;
    } else {
      r.first_tick = it != sum_.processes.end() ? it->second.first_tick : tick;
    }
  }
}

void Attributor::process(Frame& f, const char* cpu_power_method) {
  if (f.processes) {
    adopt(*f.processes, f.tick);
    current_ = f.processes;
  }
  // CPU: package + DRAM energy of this interval.
  double e_cpu = 0;
  bool cpu_measured = false;
  if (f.cpu.package_energy_j) {
    e_cpu += *f.cpu.package_energy_j - last_pkg_j_.value_or(0);
    last_pkg_j_ = f.cpu.package_energy_j;
    cpu_measured = true;
  }
  if (f.cpu.dram_energy_j) {
    e_cpu += *f.cpu.dram_energy_j - last_dram_j_.value_or(0);
    last_dram_j_ = f.cpu.dram_energy_j;
    cpu_measured = true;
  }
  if (cpu_measured) {
    DeviceAttribution& d = sum_.devices["cpu"];
    if (d.method.empty() || cpu_power_method)
      d.method = cpu_power_method && std::string_view(cpu_power_method) == "estimated" ? "attributed (estimated)"
                                                                                       : "attributed";
    cpu_estimated_ = cpu_power_method && std::string_view(cpu_power_method) == "estimated";
    if (current_ && cpu_known_ && (!cpu_estimated_ || cpu_busy_frac_ > 0)) {
      const double k = cpu_scale();
      const double a = e_cpu * cpu_attr_frac_ * k;
      const double o = e_cpu * cpu_other_frac_ * k;
      d.attributed_j += a;
      d.other_j += o;
      d.unattributed_j += e_cpu - a - o;
      // The CPU's idle time in the scan window: what its utilisation calls idle. An estimate has none (k makes the
      // busy shares add up to all of it; what is left is rounding).
      if (!cpu_estimated_) d.idle_j += e_cpu - a - o;
      for (const auto& c : cpu_share_) {
        c.totals->cpu_energy_j += e_cpu * c.frac * k;
        if (c.unit) c.unit->cpu_energy_j += e_cpu * c.frac * k;
      }
    } else {
      d.unattributed_j += e_cpu;
      // No scan to split it yet: only the idle share of the tick's utilisation is idle (none of an estimate's).
      if (f.cpu.util_pct && !cpu_estimated_) d.idle_j += e_cpu * std::clamp(1.0 - *f.cpu.util_pct / 100.0, 0.0, 1.0);
    }
  }
  for (const auto& s : f.gpus) {
    if (!s.energy_j) continue;
    double& last = last_gpu_j_[s.gpu_index];
    const double e = *s.energy_j - last;
    last = *s.energy_j;
    DeviceAttribution& d = sum_.devices["gpu" + std::to_string(s.gpu_index)];
    d.method = "attributed";
    // issue 29: energy with no process to give it to is idle only where the GPU's utilisation says so.
    const bool idle = s.util_gpu_pct && *s.util_gpu_pct < kAttributionIdleUtilPct;
    auto g = current_ ? gpu_.find(s.gpu_index) : gpu_.end();
    if (g == gpu_.end() || g->second.total <= 0) {
      d.unattributed_j += e;
      if (idle) d.idle_j += e;
      continue;
    }
    double a = 0, o = 0;
    for (const auto& sh : g->second.shares) {
      const double part = e * sh.weight / g->second.total;
      (sh.in_run ? a : o) += part;
      sh.totals->gpu_energy_j[s.gpu_index] += part;
      if (sh.unit) sh.unit->gpu_energy_j += part;
    }
    d.attributed_j += a;
    d.other_j += o;
    d.unattributed_j += e - a - o;
    if (idle) d.idle_j += e - a - o;
    (g->second.by_sm ? d.sm_share_j : d.memory_share_j) += e;
  }
  if (f.processes) fill(*f.processes, f);
}

void Attributor::fill(ProcessSnapshot& snap, const Frame& f) {
  // The CPU's power at this tick (package + DRAM), split as its energy is.
  OptF cpu_w;
  if (f.cpu.package_power_w || f.cpu.dram_power_w)
    cpu_w = f.cpu.package_power_w.value_or(0) + f.cpu.dram_power_w.value_or(0);
  std::map<std::string, UnitSample> units;
  auto unit = [&](const std::string& name, const std::string& kind) -> UnitSample* {
    if (name.empty()) return nullptr;
    auto [it, fresh] = units.try_emplace(name);
    if (fresh) {
      it->second.unit = name;
      it->second.unit_kind = kind;
    }
    return &it->second;
  };
  // issue 29: with no CPU energy measured (nor estimated) so far, a process's share of it is unknown, not 0; and
  // where the scan could not split the CPU's time (its first window), so is its share of the power.
  const bool cpu_energy = sum_.devices.count("cpu") > 0;
  size_t c = 0; // cpu_share_ holds, in snap.procs order, the processes with CPU time in the window
  for (auto& p : snap.procs) {
    auto it = sum_.processes.find(p.id);
    if (cpu_energy) p.cpu_energy_j = it != sum_.processes.end() ? it->second.cpu_energy_j : 0.0;
    double frac = 0;
    if (c < cpu_share_.size() && it != sum_.processes.end() && cpu_share_[c].totals == &it->second)
      frac = cpu_share_[c++].frac;
    if (cpu_w && current_ && cpu_known_) p.cpu_power_w = *cpu_w * frac * cpu_scale();
    if (UnitSample* u = unit(p.unit, p.unit_kind)) {
      ++u->processes;
      u->cpu_power_w += p.cpu_power_w.value_or(0);
    }
  }
  for (auto& g : snap.gpu_procs) {
    auto it = sum_.processes.find(g.id);
    double j = 0;
    if (it != sum_.processes.end())
      if (auto e = it->second.gpu_energy_j.find(g.gpu_index); e != it->second.gpu_energy_j.end()) j = e->second;
    g.energy_j = j;
    for (const auto& s : f.gpus) {
      if (s.gpu_index != g.gpu_index || !s.power_w) continue;
      auto sh = gpu_.find(g.gpu_index);
      double w = 0;
      if (sh != gpu_.end() && sh->second.total > 0)
        for (const auto& x : sh->second.shares)
          if (x.id == g.id) w = x.weight / sh->second.total;
      g.power_w = *s.power_w * w;
    }
    if (it != sum_.processes.end())
      if (UnitSample* u = unit(it->second.unit, it->second.unit_kind)) u->gpu_power_w += g.power_w.value_or(0);
  }
  snap.units.clear();
  snap.units.reserve(units.size());
  for (auto& [name, u] : units) {
    if (auto t = sum_.units.find(name); t != sum_.units.end()) {
      u.cpu_energy_j = t->second.cpu_energy_j;
      u.gpu_energy_j = t->second.gpu_energy_j;
    }
    for (const auto& [pod_unit, names] : snap.pods) // issue 18: a handful of pods per node, a linear search
      if (pod_unit == name) u.pod = names;
    snap.units.push_back(std::move(u));
  }
}

nlohmann::json AttributionSummary::to_json(size_t max_processes) const {
  nlohmann::json devs = nlohmann::json::object();
  for (const auto& [name, d] : devices) {
    nlohmann::json j = {{"attributed_j", d.attributed_j},     {"other_j", d.other_j},
                        {"unattributed_j", d.unattributed_j}, {"idle_j", d.idle_j},
                        {"measured_j", d.measured_j()},       {"method", d.method}};
    if (name != "cpu") {
      j["sm_share_j"] = d.sm_share_j;
      j["memory_share_j"] = d.memory_share_j;
    }
    devs[name] = j;
  }
  std::vector<std::pair<double, const std::pair<const ProcessId, ProcessTotals>*>> rank;
  for (const auto& e : processes)
    rank.emplace_back(e.second.cpu_energy_j + e.second.gpu_total_j(), &e);
  std::sort(rank.begin(), rank.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  nlohmann::json procs = nlohmann::json::array();
  const bool cpu = devices.count("cpu") > 0;
  std::map<std::pair<std::string, std::string>, double> units;
  for (const auto& [energy, e] : rank) {
    const auto& [id, t] = *e;
    if (!t.unit.empty()) units[{t.unit, t.unit_kind}] += energy;
    if (procs.size() >= max_processes) continue;
    nlohmann::json gpu = nlohmann::json::object();
    for (const auto& [i, j] : t.gpu_energy_j)
      gpu["gpu" + std::to_string(i)] = j;
    procs.push_back(
        {{"pid", id.pid},
         {"start_time", id.start_time},
         {"comm", t.comm},
         {"in_run", t.in_run},
         {"unit", t.unit.empty() ? nlohmann::json() : nlohmann::json(t.unit)},
         {"cpu_energy_j", cpu ? nlohmann::json(t.cpu_energy_j) : nlohmann::json()}, // no CPU energy: unknown
         {"gpu_energy_j", t.gpu_total_j()},
         {"gpu_energy_by_device_j", gpu},
         {"peak_rss_bytes", t.peak_rss_bytes ? nlohmann::json(*t.peak_rss_bytes) : nlohmann::json()},
         {"peak_gpu_mem_bytes", t.peak_gpu_mem_bytes ? nlohmann::json(*t.peak_gpu_mem_bytes) : nlohmann::json()}});
  }
  nlohmann::json uj = nlohmann::json::array();
  for (const auto& [u, j] : units)
    uj.push_back({{"unit", u.first}, {"unit_kind", u.second}, {"energy_j", j}});
  return {{"devices", devs}, {"processes", procs}, {"units", uj}, {"processes_total", processes.size()}};
}

} // namespace wattscope
