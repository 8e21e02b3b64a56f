#include "server/process_board.hpp"
#include "core/json_opt.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace wattscope {

namespace {

std::string device_name(int dev) {
  return dev < 0 ? std::string("cpu") : "gpu" + std::to_string(dev);
}

struct Entry {
  const ProcessSample* proc = nullptr; // null: a GPU process this /proc does not show (another pid namespace)
  ProcessId id;
  std::vector<const GpuProcessSample*> gpus;
  double power_w = 0;
  double energy_j = 0;
};

// Prometheus sample lines, locale-independent (fmt); a non-finite value is left out.
void line(std::string& out, std::string_view family, std::string_view labels, double v) {
  if (!std::isfinite(v)) return;
  out += family;
  out += '{';
  out += labels;
  out += "} ";
  out += fmt::format("{}\n", v);
}
void head(std::string& out, std::string_view family, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", family, help, family, type);
}

// Indices of the entries the process families export (ProcessSeries), highest power first; ties keep their order.
template <class ByPower>
std::vector<size_t> exported_by_power(const std::vector<Entry>& entries, const ProcessSeries& series,
                                      ByPower by_power) {
  auto exported = [&](const Entry& e) {
    if (series.which == ProcessSeries::Which::All) return true;
    if (series.which == ProcessSeries::Which::None) return false;
    if (!e.gpus.empty()) return true;
    if (!e.proc || e.proc->unit.empty()) return false;
    return std::any_of(series.cpu_units.begin(), series.cpu_units.end(),
                       [&](const std::string& u) { return u == e.proc->unit || u == e.proc->unit_kind; });
  };
  std::vector<size_t> shown;
  for (size_t i = 0; i < entries.size(); ++i)
    if (exported(entries[i])) shown.push_back(i);
  std::stable_sort(shown.begin(), shown.end(), [&](size_t a, size_t b) { return by_power(entries[a], entries[b]); });
  return shown;
}

// A process with a series of its own: its labels, and (device, power, energy) per device it used.
struct ProcessLines {
  std::string labels;
  std::vector<std::tuple<int, double, double>> devices;
};

// The wattscope_process_* families: the processes named one by one, then the rest of the exported ones as
// pid="other" (their power now, and the energy they used while outside the top N, which only grows).
void write_process_families(std::string& m, const std::vector<ProcessLines>& named,
                            const std::map<int, double>& other_power, const std::map<int, double>& other_energy_j,
                            const std::string& host, const std::string& cap_note) {
  const std::string other = fmt::format("pid=\"other\",start_time=\"\",comm=\"\",unit=\"\",host=\"{}\"", host);
  auto device = [](int dev) { return ",device=\"" + device_name(dev) + "\""; };
  if (!named.empty() || !other_power.empty()) {
    head(m, "wattscope_process_power_watts", "gauge",
         "Power attributed to a process on a device (cpu, gpu0, ...) at the latest process scan: its share of the "
         "device's measured power (docs/attribution.md). " +
             cap_note);
    for (const auto& p : named)
      for (const auto& [dev, w, j] : p.devices)
        line(m, "wattscope_process_power_watts", p.labels + device(dev), w);
    for (const auto& [dev, w] : other_power)
      line(m, "wattscope_process_power_watts", other + device(dev), w);
  }
  if (!named.empty() || !other_energy_j.empty()) {
    head(m, "wattscope_process_energy_joules_total", "counter",
         "Energy attributed to a process on a device since serve started (docs/attribution.md). " + cap_note +
             " The pid=\"other\" series counts what processes used while outside the top N, so it only grows; a "
             "process keeps its earlier energy in its own series.");
    for (const auto& p : named)
      for (const auto& [dev, w, j] : p.devices)
        line(m, "wattscope_process_energy_joules_total", p.labels + device(dev), j);
    for (const auto& [dev, j] : other_energy_j)
      line(m, "wattscope_process_energy_joules_total", other + device(dev), j);
  }
}

} // namespace

std::string prom_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
  return out;
}

std::shared_ptr<const ProcessBoard> ProcessBoardBuilder::build(const ProcessSnapshot& snap) {
  auto board = std::make_shared<ProcessBoard>();
  board->cap = cap_;

  // Every process with a figure: CPU power or energy, or a GPU it is listed on.
  std::vector<Entry> entries;
  std::unordered_map<ProcessId, size_t, PidHash> at;
  for (const auto& p : snap.procs) {
    if (!(p.cpu_power_w.value_or(0) > 0) && !(p.cpu_energy_j.value_or(0) > 0)) continue;
    at.emplace(p.id, entries.size());
    entries.push_back({&p, p.id, {}, p.cpu_power_w.value_or(0), p.cpu_energy_j.value_or(0)});
  }
  for (const auto& g : snap.gpu_procs) {
    auto [it, fresh] = at.try_emplace(g.id, entries.size());
    if (fresh) {
      const ProcessSample* p = nullptr;
      for (const auto& q : snap.procs) // rare: a GPU process that used no CPU since serve started
        if (q.id == g.id) p = &q;
      entries.push_back({p, g.id, {}, p ? p->cpu_power_w.value_or(0) : 0, p ? p->cpu_energy_j.value_or(0) : 0});
    }
    Entry& e = entries[it->second];
    e.gpus.push_back(&g);
    e.power_w += g.power_w.value_or(0);
    e.energy_j += g.energy_j.value_or(0);
  }
  // The top N by power now (ties: by energy so far), the rest `other`.
  auto by_power = [](const Entry& a, const Entry& b) {
    return a.power_w != b.power_w ? a.power_w > b.power_w : a.energy_j > b.energy_j;
  };
  const size_t n = std::min(cap_, entries.size());
  std::partial_sort(entries.begin(), entries.begin() + static_cast<long>(n), entries.end(), by_power);

  // Per device (-1 the CPU) of an entry: (power, energy); the CPU only where its power is measured or it has energy.
  auto devices = [](const Entry& e) {
    std::vector<std::tuple<int, double, double>> out;
    if (e.proc && (e.proc->cpu_power_w || e.proc->cpu_energy_j.value_or(0) > 0))
      out.emplace_back(-1, e.proc->cpu_power_w.value_or(0), e.proc->cpu_energy_j.value_or(0));
    for (const auto* g : e.gpus)
      out.emplace_back(g->gpu_index, g->power_w.value_or(0), g->energy_j.value_or(0));
    return out;
  };

  // The processes with series of their own, and the top N of those by power; the rest of them are pid="other".
  const std::vector<size_t> shown = exported_by_power(entries, series_, by_power);
  const size_t sn = std::min(cap_, shown.size());
  std::vector<char> shown_other(entries.size(), 0);
  for (size_t k = sn; k < shown.size(); ++k)
    shown_other[shown[k]] = 1;

  decltype(prev_) now;
  now.reserve(entries.size());
  std::map<int, double> other_power, series_other_power;
  size_t other_count = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    auto devs = devices(e);
    auto& mine = now[e.id];
    auto old = prev_.find(e.id);
    for (const auto& [dev, w, j] : devs) {
      mine.emplace_back(dev, j);
      if (i < n && !shown_other[i]) continue;
      double before = 0;
      if (old != prev_.end())
        for (const auto& [d, pj] : old->second)
          if (d == dev) before = pj;
      if (shown_other[i]) {
        series_other_energy_j_[dev] += std::max(0.0, j - before);
        series_other_power[dev] += w;
      }
      if (i < n) continue;
      other_energy_j_[dev] += std::max(0.0, j - before);
      other_power[dev] += w;
    }
    if (i >= n) ++other_count;
  }
  prev_ = std::move(now);

  const std::string host = prom_label_value(host_);
  std::string& m = board->metrics_text;
  const std::string cap_note = fmt::format(
      "Only the top {} processes by power are exported one by one (serve --top-processes); the rest are summed in "
      "the series with pid=\"other\".",
      cap_);
  std::vector<ProcessLines> named(sn);
  for (size_t k = 0; k < sn; ++k) {
    const Entry& e = entries[shown[k]];
    named[k].labels =
        fmt::format("pid=\"{}\",start_time=\"{}\",comm=\"{}\",unit=\"{}\",host=\"{}\"", e.id.pid, e.id.start_time,
                    prom_label_value(e.proc ? e.proc->comm : ""), prom_label_value(e.proc ? e.proc->unit : ""), host);
    named[k].devices = devices(e);
  }
  write_process_families(m, named, series_other_power, series_other_energy_j_, host, cap_note);

  board->processes = nlohmann::json::array();
  for (size_t i = 0; i < n; ++i) {
    const Entry& e = entries[i];
    nlohmann::json gpus = nlohmann::json::array();
    for (const auto* g : e.gpus)
      gpus.push_back({{"index", g->gpu_index},
                      {"power_w", opt(g->power_w)},
                      {"energy_j", opt(g->energy_j)},
                      {"mem_used_bytes", opt(g->mem_used_bytes)},
                      {"sm_pct", opt(g->sm_pct)}});
    const ProcessSample* p = e.proc;
    board->processes.push_back({{"pid", e.id.pid},
                                {"start_time", e.id.start_time},
                                {"comm", p ? nlohmann::json(p->comm) : nlohmann::json()},
                                {"unit", p && !p->unit.empty() ? nlohmann::json(p->unit) : nlohmann::json()},
                                {"unit_kind", p && !p->unit.empty() ? nlohmann::json(p->unit_kind) : nlohmann::json()},
                                {"power_w", e.power_w},
                                {"energy_j", e.energy_j},
                                {"cpu_power_w", p ? opt(p->cpu_power_w) : nlohmann::json()},
                                {"cpu_energy_j", p ? opt(p->cpu_energy_j) : nlohmann::json()},
                                {"cpu_pct", p ? opt(p->cpu_pct) : nlohmann::json()},
                                {"rss_bytes", p ? opt(p->rss_bytes) : nlohmann::json()},
                                {"gpus", gpus}});
  }
  double other_w = 0, other_j = 0;
  for (const auto& [dev, w] : other_power)
    other_w += w;
  for (const auto& [dev, j] : other_energy_j_)
    other_j += j;
  board->processes_other = {{"processes", other_count}, {"power_w", other_w}, {"energy_j", other_j}};

  // Units: the same cap; device "cpu" and "gpu" (every GPU).
  std::vector<const UnitSample*> units;
  for (const auto& u : snap.units)
    units.push_back(&u);
  const size_t un = std::min(cap_, units.size());
  std::partial_sort(units.begin(), units.begin() + static_cast<long>(un), units.end(), [](auto* a, auto* b) {
    const double pa = a->cpu_power_w + a->gpu_power_w, pb = b->cpu_power_w + b->gpu_power_w;
    return pa != pb ? pa > pb : a->cpu_energy_j + a->gpu_energy_j > b->cpu_energy_j + b->gpu_energy_j;
  });
  decltype(prev_unit_) unit_now;
  double unit_other_cpu_w = 0, unit_other_gpu_w = 0;
  size_t unit_other_count = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    const UnitSample& u = *units[i];
    unit_now[u.unit] = {u.cpu_energy_j, u.gpu_energy_j};
    if (i < un) continue;
    auto old = prev_unit_.find(u.unit);
    const auto before = old != prev_unit_.end() ? old->second : std::pair<double, double>{0, 0};
    unit_other_energy_j_[-1] += std::max(0.0, u.cpu_energy_j - before.first);
    unit_other_energy_j_[0] += std::max(0.0, u.gpu_energy_j - before.second);
    unit_other_cpu_w += u.cpu_power_w;
    unit_other_gpu_w += u.gpu_power_w;
    ++unit_other_count;
  }
  prev_unit_ = std::move(unit_now);
  // A host whose GPUs list no processes (none, or no NVML) has no GPU figure for its units: absent, never 0.
  const bool gpus = !snap.gpus_listed.empty();
  if (!units.empty()) {
    const std::string unit_note = fmt::format(
        "Only the top {} units by power are exported one by one (serve --top-processes); the rest are summed in the "
        "series with unit=\"other\".",
        cap_);
    auto ul = [&](const UnitSample* u, const char* dev) {
      // issue 18: a pod's namespace and name (from the kubelet) beside its uid; empty for other units and for pods
      // the kubelet did not name, so that every series of the family has the same labels.
      // issue 32: `unit_kind`, as in the JSON; `kind` meant something else on other families (link width).
      return u ? fmt::format("unit=\"{}\",unit_kind=\"{}\",namespace=\"{}\",pod=\"{}\",device=\"{}\",host=\"{}\"",
                             prom_label_value(u->unit), prom_label_value(u->unit_kind),
                             u->pod ? prom_label_value(u->pod->ns) : "", u->pod ? prom_label_value(u->pod->name) : "",
                             dev, host)
               : fmt::format("unit=\"other\",unit_kind=\"\",namespace=\"\",pod=\"\",device=\"{}\",host=\"{}\"", dev,
                             host);
    };
    head(m, "wattscope_unit_power_watts", "gauge",
         "Power attributed to a unit (Slurm job, Kubernetes pod, container, systemd service, user session): the sum "
         "of its processes' at the latest scan; device=\"gpu\" sums every GPU. " +
             unit_note);
    for (size_t i = 0; i < un; ++i) {
      line(m, "wattscope_unit_power_watts", ul(units[i], "cpu"), units[i]->cpu_power_w);
      if (gpus) line(m, "wattscope_unit_power_watts", ul(units[i], "gpu"), units[i]->gpu_power_w);
    }
    if (unit_other_count) {
      line(m, "wattscope_unit_power_watts", ul(nullptr, "cpu"), unit_other_cpu_w);
      if (gpus) line(m, "wattscope_unit_power_watts", ul(nullptr, "gpu"), unit_other_gpu_w);
    }
    head(m, "wattscope_unit_energy_joules_total", "counter",
         "Energy attributed to a unit since serve started: its processes', kept when they exit; device=\"gpu\" sums "
         "every GPU. " +
             unit_note + " The unit=\"other\" series counts what units used while outside the top N.");
    for (size_t i = 0; i < un; ++i) {
      line(m, "wattscope_unit_energy_joules_total", ul(units[i], "cpu"), units[i]->cpu_energy_j);
      if (gpus) line(m, "wattscope_unit_energy_joules_total", ul(units[i], "gpu"), units[i]->gpu_energy_j);
    }
    if (!unit_other_energy_j_.empty()) {
      line(m, "wattscope_unit_energy_joules_total", ul(nullptr, "cpu"), unit_other_energy_j_[-1]);
      if (gpus) line(m, "wattscope_unit_energy_joules_total", ul(nullptr, "gpu"), unit_other_energy_j_[0]);
    }
  }
  board->units = nlohmann::json::array();
  for (size_t i = 0; i < un; ++i) {
    const UnitSample& u = *units[i];
    board->units.push_back({{"unit", u.unit},
                            {"unit_kind", u.unit_kind},
                            {"namespace", u.pod ? nlohmann::json(u.pod->ns) : nlohmann::json()}, // issue 18
                            {"pod", u.pod ? nlohmann::json(u.pod->name) : nlohmann::json()},
                            {"processes", u.processes},
                            {"power_w", u.cpu_power_w + u.gpu_power_w},
                            {"cpu_power_w", u.cpu_power_w},
                            {"gpu_power_w", u.gpu_power_w},
                            {"cpu_energy_j", u.cpu_energy_j},
                            {"gpu_energy_j", u.gpu_energy_j},
                            {"energy_j", u.cpu_energy_j + u.gpu_energy_j}});
  }
  double uj = 0;
  for (const auto& [dev, j] : unit_other_energy_j_)
    uj += j;
  board->units_other = {
      {"units", unit_other_count}, {"power_w", unit_other_cpu_w + unit_other_gpu_w}, {"energy_j", uj}};
  return board;
}

} // namespace wattscope
