#include "top/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "core/metrics.hpp"

namespace wattscope::top {

namespace {

using json = nlohmann::json;

void push_power(TopGpu& g) {
  g.power_hist_w.push_back(g.s.power_w ? static_cast<float>(*g.s.power_w) : NAN);
  while (g.power_hist_w.size() > kSparkPoints)
    g.power_hist_w.pop_front();
}

// The GPU's slot, kept in index order; nullptr for an index out of range or a new one past kMaxHostGpus. A binary
// search: a document names every GPU twice per frame.
TopGpu* gpu_slot(HostView& h, int64_t index) {
  if (index < 0 || index > kMaxGpuIndex) return nullptr;
  const auto at = std::lower_bound(h.gpus.begin(), h.gpus.end(), index,
                                   [](const TopGpu& g, int64_t i) { return g.s.gpu_index < i; });
  if (at != h.gpus.end() && at->s.gpu_index == index) return &*at;
  if (h.gpus.size() >= kMaxHostGpus) return nullptr;
  TopGpu g;
  g.s.gpu_index = static_cast<int>(index);
  return &*h.gpus.insert(at, std::move(g));
}

OptF add_opt(OptF a, const OptF& b) {
  if (!b) return a;
  return a.value_or(0) + *b;
}

// A JSON number as an integer: a float is rounded, and one no int64 holds (1e300, NaN's stand-ins, a huge unsigned)
// is missing, not undefined behaviour (fuzz_event_stream: 4.7e19 reached a conversion to long).
OptI json_int(const json& v) {
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    return u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? OptI(static_cast<int64_t>(u))
                                                                           : std::nullopt;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d >= -9.2e18 && d <= 9.2e18) return static_cast<int64_t>(std::llround(d));
  }
  return std::nullopt;
}

// A JSON number as the member's type; anything else (null, a string) is missing.
template <class S> void fill_from_json(S& s, std::span<const MetricDef<S>> metrics, const json& j) {
  for (const auto& m : metrics) {
    const auto it = j.find(std::string(m.info.column));
    const bool num = it != j.end() && it->is_number();
    if (m.real) s.*m.real = num ? OptF(it->template get<double>()) : std::nullopt;
    if (m.integer) s.*m.integer = num ? json_int(*it) : std::nullopt;
  }
}

OptF num(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? OptF(it->get<double>()) : std::nullopt;
}
OptI inum(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? json_int(*it) : std::nullopt;
}
std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Energy since top started watching: the counter now minus the counter at the first frame seen.
OptF since_base(HostView& h, int key, const OptF& now_j) {
  if (!now_j) return std::nullopt;
  for (auto& [k, base] : h.energy_base_j)
    if (k == key) {
      if (*now_j < base) base = *now_j; // a counter that went back: serve restarted within one run id
      return *now_j - base;
    }
  h.energy_base_j.emplace_back(key, *now_j);
  return 0.0;
}

} // namespace

OptF HostView::power_w() const {
  OptF total;
  for (const auto& g : gpus)
    if (g.answered) total = add_opt(total, g.s.power_w);
  total = add_opt(total, cpu.package_power_w);
  return add_opt(total, cpu.dram_power_w);
}

OptF HostView::energy_j() const {
  OptF total;
  for (const auto& g : gpus)
    total = add_opt(total, g.energy_j);
  return add_opt(total, cpu_energy_j);
}

std::optional<double> HostView::age_s(std::chrono::steady_clock::time_point now) const {
  if (!last_data) return std::nullopt;
  return std::chrono::duration<double>(now - *last_data).count();
}

double stale_after_s(const HostView& h) {
  return std::max(3.0, 3 * h.interval_s);
}

void apply_frame(HostView& h, const Frame& f, const std::vector<GpuDevice>& devices) {
  if (f.rows_only || f.markers_only) return;
  h.simulated = false;
  for (const auto& d : devices) {
    if (d.energy_method == "simulated") h.simulated = true;
    TopGpu* slot = gpu_slot(h, d.gpu_index);
    if (!slot) continue;
    slot->name = d.name;
    // issue 29: the sources' list knows only "simulated"; accounting settles counter/integrated on the first tick and
    // sends it in device_rows (below), which later frames' empty method must not undo (a real H100 showed
    // "[unknown]").
    if (!d.energy_method.empty()) slot->energy_method = d.energy_method;
    slot->answered = false;
  }
  for (const auto& d : f.device_rows)
    if (TopGpu* slot = gpu_slot(h, d.gpu_index); slot && !d.energy_method.empty())
      slot->energy_method = d.energy_method;
  for (const auto& s : f.gpus) {
    TopGpu* slot = gpu_slot(h, s.gpu_index);
    if (!slot) continue;
    TopGpu& g = *slot;
    const bool had_limit = g.s.power_limit_w.has_value();
    const OptF limit = g.s.power_limit_w;
    g.s = s;
    if (!g.s.power_limit_w && had_limit) g.s.power_limit_w = limit;
    g.answered = true;
    g.energy_j = s.energy_j; // the session started with top: its energy is already "since start"
    push_power(g);
  }
  for (auto& g : h.gpus)
    if (!g.answered) {
      for (const auto& d : devices)
        if (d.gpu_index == g.s.gpu_index) {
          if (!g.s.power_limit_w) g.s.power_limit_w = d.power_limit_w;
          if (!g.s.mem_total_bytes) g.s.mem_total_bytes = d.mem_total_bytes;
        }
    }
  h.cpu = f.cpu;
  h.cpu.zones.clear(); // they point into the source; top shows the sums
  // A tick the CPU's source missed (past its deadline) keeps the energy so far, as a GPU that missed one does.
  if (auto e = add_opt(f.cpu.package_energy_j, f.cpu.dram_energy_j)) h.cpu_energy_j = e;
  if (f.processes) {
    const ProcessSnapshot& snap = *f.processes;
    std::map<ProcessId, size_t> at;
    h.procs.clear();
    h.procs.reserve(snap.procs.size());
    for (const auto& p : snap.procs) {
      at[p.id] = h.procs.size();
      TopProcess t;
      t.pid = p.id.pid;
      t.comm = p.comm;
      t.cpu_pct = p.cpu_pct;
      t.rss_bytes = p.rss_bytes;
      t.power_w = p.cpu_power_w;
      h.procs.push_back(std::move(t));
    }
    for (const auto& gp : snap.gpu_procs) {
      auto it = at.find(gp.id);
      if (it == at.end()) {
        at[gp.id] = h.procs.size();
        TopProcess t;
        t.pid = gp.id.pid;
        h.procs.push_back(std::move(t));
        it = at.find(gp.id);
      }
      TopProcess& t = h.procs[it->second];
      if (gp.mem_used_bytes) t.gpu_mem_bytes = t.gpu_mem_bytes.value_or(0) + *gp.mem_used_bytes;
      t.sm_pct = add_opt(t.sm_pct, gp.sm_pct);
      t.power_w = add_opt(t.power_w, gp.power_w);
    }
  }
  h.last_tick = f.tick;
  h.last_data = f.mono == SteadyClock::time_point{} ? SteadyClock::now() : f.mono;
  h.state = HostView::State::Live;
  h.problem.clear();
}

void apply_current_json(HostView& h, const json& j, std::chrono::steady_clock::time_point now) {
  if (!j.is_object() || !j.contains("run") || !j["run"].is_object())
    throw std::invalid_argument("not a wattscope /api/v1/current document (no \"run\" object)");
  const json& run = j["run"];
  const std::string run_id = str(run, "run_id");
  if (run_id != h.run_id) { // serve restarted: a new run, new counters
    h.run_id = run_id;
    h.gpus.clear();
    h.procs.clear();
    h.energy_base_j.clear();
    h.cpu_energy_j.reset();
    h.last_tick = -1;
  }
  if (const std::string host = str(run, "host"); !host.empty()) h.name = host;
  h.simulated = run.contains("simulated") && run["simulated"].is_boolean() && run["simulated"].get<bool>();
  if (const OptF iv = num(j, "interval_s"); iv && *iv > 0) h.interval_s = *iv;
  const OptI tick = inum(j, "tick");
  h.last_data = now;
  h.state = HostView::State::Live;
  h.problem.clear();
  h.dropped_gpus = 0;
  h.dropped_processes = 0;
  if (!tick) return; // serve has not sampled yet
  const bool fresh = *tick != h.last_tick;
  h.last_tick = *tick;

  std::set<int64_t> dropped_gpus; // distinct indices, however often a document repeats one
  if (const auto d = j.find("devices"); d != j.end() && d->is_array())
    for (const auto& dev : *d) {
      if (!dev.is_object()) continue;
      const OptI index = inum(dev, "index");
      if (!index) continue;
      TopGpu* slot = gpu_slot(h, *index);
      if (!slot) {
        if (dropped_gpus.size() <= kMaxHostGpus) dropped_gpus.insert(*index);
        continue;
      }
      TopGpu& g = *slot;
      g.name = str(dev, "name");
      g.energy_method = str(dev, "energy_method"); // issue 29
      g.answered = false;
      if (!g.s.power_limit_w) g.s.power_limit_w = num(dev, "power_limit_w");
      if (!g.s.mem_total_bytes) g.s.mem_total_bytes = inum(dev, "mem_total_bytes");
    }
  if (const auto gs = j.find("gpus"); gs != j.end() && gs->is_array())
    for (const auto& gj : *gs) {
      if (!gj.is_object()) continue;
      const OptI index = inum(gj, "index");
      if (!index) continue;
      TopGpu* slot = gpu_slot(h, *index);
      if (!slot) {
        if (dropped_gpus.size() <= kMaxHostGpus) dropped_gpus.insert(*index);
        continue;
      }
      TopGpu& g = *slot;
      const OptF limit = g.s.power_limit_w;
      const OptI total = g.s.mem_total_bytes;
      fill_from_json(g.s, kGpuMetrics, gj);
      g.s.gpu_index = static_cast<int>(*index);
      if (!g.s.power_limit_w) g.s.power_limit_w = limit;
      if (!g.s.mem_total_bytes) g.s.mem_total_bytes = total;
      if (const std::string n = str(gj, "name"); !n.empty()) g.name = n;
      g.answered = true;
      g.energy_j = since_base(h, g.s.gpu_index, g.s.energy_j);
      if (fresh) push_power(g);
    }
  if (const auto c = j.find("cpu"); c != j.end() && c->is_object()) {
    fill_from_json(h.cpu, kCpuMetrics, *c);
    // issue 29: the CPU's method, as one of the fixed words a CpuSample points to (never into the document)
    const std::string pm = str(*c, "power_method");
    h.cpu.power_method = pm == "estimated" ? "estimated" : pm == "counter" ? "counter" : nullptr;
    if (auto e = since_base(h, -1, add_opt(h.cpu.package_energy_j, h.cpu.dram_energy_j))) h.cpu_energy_j = e;
  }
  h.anomalies.clear(); // issue 36: what holds now, in words; a serve without the key has none to say
  if (const auto an = j.find("anomalies"); an != j.end() && an->is_array())
    for (const auto& a : *an)
      if (a.is_object() && h.anomalies.size() < kMaxHostAnomalies)
        h.anomalies.push_back(str(a, "message").substr(0, 300));
  if (const auto ps = j.find("processes"); ps != j.end() && ps->is_array()) {
    h.procs.clear();
    for (const auto& p : *ps) {
      if (!p.is_object()) continue;
      if (h.procs.size() >= kMaxHostProcesses) {
        ++h.dropped_processes;
        continue;
      }
      TopProcess t;
      t.pid = inum(p, "pid").value_or(0);
      t.comm = str(p, "comm");
      t.cpu_pct = num(p, "cpu_pct");
      t.rss_bytes = inum(p, "rss_bytes");
      t.power_w = num(p, "power_w");
      if (const auto g = p.find("gpus"); g != p.end() && g->is_array())
        for (size_t i = 0; i < g->size() && i < kMaxProcessGpus; ++i) {
          const json& pg = (*g)[i];
          if (!pg.is_object()) continue;
          if (const OptI m = inum(pg, "mem_used_bytes")) t.gpu_mem_bytes = t.gpu_mem_bytes.value_or(0) + *m;
          t.sm_pct = add_opt(t.sm_pct, num(pg, "sm_pct"));
        }
      h.procs.push_back(std::move(t));
    }
  }
  h.dropped_gpus = dropped_gpus.size();
  if (h.dropped_gpus || h.dropped_processes)
    h.problem = fmt::format("it declares more than top keeps ({} GPUs, {} processes): {}{} GPU(s) and {} process(es) "
                            "left out",
                            kMaxHostGpus, kMaxHostProcesses, h.dropped_gpus > kMaxHostGpus ? "over " : "",
                            h.dropped_gpus, h.dropped_processes);
}

std::vector<FiringAlert> parse_alerts(const json& j) {
  const json* list = nullptr;
  if (j.is_array()) {
    list = &j;
  } else if (j.is_object()) {
    for (const char* key : {"firing", "alerts"})
      if (auto it = j.find(key); it != j.end() && it->is_array()) {
        list = &*it;
        break;
      }
  }
  if (!list) throw std::invalid_argument("not an alert list (an array, or an object with \"alerts\" or \"firing\")");
  std::vector<FiringAlert> out;
  for (const auto& a : *list) {
    if (!a.is_object()) continue;
    if (const std::string state = str(a, "state"); !state.empty() && state != "firing") continue;
    FiringAlert f;
    f.rule = str(a, "rule");
    if (f.rule.empty()) f.rule = str(a, "name");
    f.severity = str(a, "severity");
    f.scope = str(a, "scope");
    if (f.scope.empty()) f.scope = str(a, "source");
    f.message = str(a, "message");
    if (f.message.empty()) f.message = str(a, "detail");
    out.push_back(std::move(f));
  }
  return out;
}

} // namespace wattscope::top
