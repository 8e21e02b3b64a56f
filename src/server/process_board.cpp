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

using ProcessEnergies = ProcessBoardBuilder::ProcessEnergies;
using UnitEnergies = ProcessBoardBuilder::UnitEnergies;

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

// The order of the top N: by power now, ties by energy so far.
bool by_power(const Entry& a, const Entry& b) {
  return a.power_w != b.power_w ? a.power_w > b.power_w : a.energy_j > b.energy_j;
}

// Indices of the entries the process families export (ProcessSeries), highest power first; ties keep their order.
std::vector<size_t> exported_by_power(const std::vector<Entry>& entries, const ProcessSeries& series) {
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

// Every process with a figure: CPU power or energy, or a GPU it is listed on; the top n by power first.
std::vector<Entry> ranked_entries(const ProcessSnapshot& snap, size_t n) {
  std::vector<Entry> entries;
  std::unordered_map<ProcessId, size_t, ProcessBoardBuilder::PidHash> at;
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
  std::partial_sort(entries.begin(), entries.begin() + static_cast<long>(std::min(n, entries.size())), entries.end(),
                    by_power);
  return entries;
}

// Per device (-1 the CPU) of an entry: (power, energy); the CPU only where its power is measured or it has energy.
std::vector<std::tuple<int, double, double>> devices(const Entry& e) {
  std::vector<std::tuple<int, double, double>> out;
  if (e.proc && (e.proc->cpu_power_w || e.proc->cpu_energy_j.value_or(0) > 0))
    out.emplace_back(-1, e.proc->cpu_power_w.value_or(0), e.proc->cpu_energy_j.value_or(0));
  for (const auto* g : e.gpus)
    out.emplace_back(g->gpu_index, g->power_w.value_or(0), g->energy_j.value_or(0));
  return out;
}

// What the processes outside the top N draw now, per device: all of them (the JSON's `other`), and those of them
// the process families export (their pid="other" series); and how many there are.
struct OtherProcesses {
  std::map<int, double> power_w, series_power_w;
  size_t count = 0;
};

// Folds what the processes outside the top n used since the previous scan into other_energy_j, and the exported
// ones outside the top N of the exported (series_other) into series_other_energy_j, per device; keeps every
// process's energy per device in prev for the next scan.
OtherProcesses fold_other_processes(const std::vector<Entry>& entries, size_t n, const std::vector<char>& series_other,
                                    ProcessEnergies& prev, std::map<int, double>& other_energy_j,
                                    std::map<int, double>& series_other_energy_j) {
  OtherProcesses other;
  ProcessEnergies now;
  now.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    auto& mine = now[e.id];
    auto old = prev.find(e.id);
    for (const auto& [dev, w, j] : devices(e)) {
      mine.emplace_back(dev, j);
      if (i < n && !series_other[i]) continue;
      double before = 0;
      if (old != prev.end())
        for (const auto& [d, pj] : old->second)
          if (d == dev) before = pj;
      if (series_other[i]) {
        series_other_energy_j[dev] += std::max(0.0, j - before);
        other.series_power_w[dev] += w;
      }
      if (i < n) continue;
      other_energy_j[dev] += std::max(0.0, j - before);
      other.power_w[dev] += w;
    }
    if (i >= n) ++other.count;
  }
  prev = std::move(now);
  return other;
}

// The exported processes named one by one: the first n of `shown`.
std::vector<ProcessLines> named_lines(const std::vector<Entry>& entries, const std::vector<size_t>& shown, size_t n,
                                      const std::string& host) {
  std::vector<ProcessLines> named(n);
  for (size_t k = 0; k < n; ++k) {
    const Entry& e = entries[shown[k]];
    named[k].labels =
        fmt::format("pid=\"{}\",start_time=\"{}\",comm=\"{}\",unit=\"{}\",host=\"{}\"", e.id.pid, e.id.start_time,
                    prom_label_value(e.proc ? e.proc->comm : ""), prom_label_value(e.proc ? e.proc->unit : ""), host);
    named[k].devices = devices(e);
  }
  return named;
}

nlohmann::json processes_json(const std::vector<Entry>& entries, size_t n) {
  nlohmann::json out = nlohmann::json::array();
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
    out.push_back({{"pid", e.id.pid},
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
  return out;
}

// Every unit of the scan, the top n by power (ties: by energy) first.
std::vector<const UnitSample*> ranked_units(const ProcessSnapshot& snap, size_t n) {
  std::vector<const UnitSample*> units;
  for (const auto& u : snap.units)
    units.push_back(&u);
  std::partial_sort(units.begin(), units.begin() + static_cast<long>(std::min(n, units.size())), units.end(),
                    [](auto* a, auto* b) {
                      const double pa = a->cpu_power_w + a->gpu_power_w, pb = b->cpu_power_w + b->gpu_power_w;
                      return pa != pb ? pa > pb : a->cpu_energy_j + a->gpu_energy_j > b->cpu_energy_j + b->gpu_energy_j;
                    });
  return units;
}

struct OtherUnits {
  double cpu_w = 0, gpu_w = 0;
  size_t count = 0;
};

// As fold_other_processes, for units: device -1 the CPU, 0 every GPU.
OtherUnits fold_other_units(const std::vector<const UnitSample*>& units, size_t n, UnitEnergies& prev,
                            std::map<int, double>& other_energy_j) {
  OtherUnits other;
  UnitEnergies now;
  for (size_t i = 0; i < units.size(); ++i) {
    const UnitSample& u = *units[i];
    now[u.unit] = {u.cpu_energy_j, u.gpu_energy_j};
    if (i < n) continue;
    auto old = prev.find(u.unit);
    const auto before = old != prev.end() ? old->second : std::pair<double, double>{0, 0};
    other_energy_j[-1] += std::max(0.0, u.cpu_energy_j - before.first);
    other_energy_j[0] += std::max(0.0, u.gpu_energy_j - before.second);
    other.cpu_w += u.cpu_power_w;
    other.gpu_w += u.gpu_power_w;
    ++other.count;
  }
  prev = std::move(now);
  return other;
}

// A unit's labels (null: unit="other"). A pod's namespace and name (from the kubelet) stand beside its uid; they are
// empty for other units and for pods the kubelet did not name, so that every series of the family has the same
// labels. `unit_kind` as in the JSON (`kind` means something else on other families: link width).
std::string unit_labels(const UnitSample* u, const char* dev, const std::string& host) {
  return u ? fmt::format("unit=\"{}\",unit_kind=\"{}\",namespace=\"{}\",pod=\"{}\",device=\"{}\",host=\"{}\"",
                         prom_label_value(u->unit), prom_label_value(u->unit_kind),
                         u->pod ? prom_label_value(u->pod->ns) : "", u->pod ? prom_label_value(u->pod->name) : "", dev,
                         host)
           : fmt::format("unit=\"other\",unit_kind=\"\",namespace=\"\",pod=\"\",device=\"{}\",host=\"{}\"", dev, host);
}

// The wattscope_unit_* families. gpus: whether the host's GPUs list processes at all; where none do, the units have
// no GPU figure: absent, never 0.
void write_unit_families(std::string& m, const std::vector<const UnitSample*>& units, size_t n, const OtherUnits& other,
                         const std::map<int, double>& other_energy_j, bool gpus, size_t cap, const std::string& host) {
  const std::string unit_note = fmt::format(
      "Only the top {} units by power are exported one by one (serve --top-processes); the rest are summed in the "
      "series with unit=\"other\".",
      cap);
  head(m, "wattscope_unit_power_watts", "gauge",
       "Power attributed to a unit (Slurm job, Kubernetes pod, container, systemd service, user session): the sum "
       "of its processes' at the latest scan; device=\"gpu\" sums every GPU. " +
           unit_note);
  for (size_t i = 0; i < n; ++i) {
    line(m, "wattscope_unit_power_watts", unit_labels(units[i], "cpu", host), units[i]->cpu_power_w);
    if (gpus) line(m, "wattscope_unit_power_watts", unit_labels(units[i], "gpu", host), units[i]->gpu_power_w);
  }
  if (other.count) {
    line(m, "wattscope_unit_power_watts", unit_labels(nullptr, "cpu", host), other.cpu_w);
    if (gpus) line(m, "wattscope_unit_power_watts", unit_labels(nullptr, "gpu", host), other.gpu_w);
  }
  head(m, "wattscope_unit_energy_joules_total", "counter",
       "Energy attributed to a unit since serve started: its processes', kept when they exit; device=\"gpu\" sums "
       "every GPU. " +
           unit_note + " The unit=\"other\" series counts what units used while outside the top N.");
  for (size_t i = 0; i < n; ++i) {
    line(m, "wattscope_unit_energy_joules_total", unit_labels(units[i], "cpu", host), units[i]->cpu_energy_j);
    if (gpus) line(m, "wattscope_unit_energy_joules_total", unit_labels(units[i], "gpu", host), units[i]->gpu_energy_j);
  }
  if (!other_energy_j.empty()) { // the fold writes the CPU's and the GPUs' together
    line(m, "wattscope_unit_energy_joules_total", unit_labels(nullptr, "cpu", host), other_energy_j.at(-1));
    if (gpus) line(m, "wattscope_unit_energy_joules_total", unit_labels(nullptr, "gpu", host), other_energy_j.at(0));
  }
}

nlohmann::json units_json(const std::vector<const UnitSample*>& units, size_t n) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < n; ++i) {
    const UnitSample& u = *units[i];
    out.push_back({{"unit", u.unit},
                   {"unit_kind", u.unit_kind},
                   {"namespace", u.pod ? nlohmann::json(u.pod->ns) : nlohmann::json()},
                   {"pod", u.pod ? nlohmann::json(u.pod->name) : nlohmann::json()},
                   {"processes", u.processes},
                   {"power_w", u.cpu_power_w + u.gpu_power_w},
                   {"cpu_power_w", u.cpu_power_w},
                   {"gpu_power_w", u.gpu_power_w},
                   {"cpu_energy_j", u.cpu_energy_j},
                   {"gpu_energy_j", u.gpu_energy_j},
                   {"energy_j", u.cpu_energy_j + u.gpu_energy_j}});
  }
  return out;
}

double sum(const std::map<int, double>& per_device) {
  double s = 0;
  for (const auto& [dev, v] : per_device)
    s += v;
  return s;
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
  const std::string host = prom_label_value(host_);

  // The top N by power, the rest `other`; of the processes with series of their own, the top N of those by power,
  // the rest of them pid="other".
  const std::vector<Entry> entries = ranked_entries(snap, cap_);
  const size_t n = std::min(cap_, entries.size());
  const std::vector<size_t> shown = exported_by_power(entries, series_);
  const size_t sn = std::min(cap_, shown.size());
  std::vector<char> shown_other(entries.size(), 0);
  for (size_t k = sn; k < shown.size(); ++k)
    shown_other[shown[k]] = 1;
  const OtherProcesses other =
      fold_other_processes(entries, n, shown_other, prev_, other_energy_j_, series_other_energy_j_);
  const std::string cap_note = fmt::format(
      "Only the top {} processes by power are exported one by one (serve --top-processes); the rest are summed in "
      "the series with pid=\"other\".",
      cap_);
  write_process_families(board->metrics_text, named_lines(entries, shown, sn, host), other.series_power_w,
                         series_other_energy_j_, host, cap_note);
  board->processes = processes_json(entries, n);
  board->processes_other = {
      {"processes", other.count}, {"power_w", sum(other.power_w)}, {"energy_j", sum(other_energy_j_)}};

  // Units: the same cap; device "cpu" and "gpu" (every GPU).
  const std::vector<const UnitSample*> units = ranked_units(snap, cap_);
  const size_t un = std::min(cap_, units.size());
  const OtherUnits unit_other = fold_other_units(units, un, prev_unit_, unit_other_energy_j_);
  if (!units.empty())
    write_unit_families(board->metrics_text, units, un, unit_other, unit_other_energy_j_, !snap.gpus_listed.empty(),
                        cap_, host);
  board->units = units_json(units, un);
  board->units_other = {{"units", unit_other.count},
                        {"power_w", unit_other.cpu_w + unit_other.gpu_w},
                        {"energy_j", sum(unit_other_energy_j_)}};
  return board;
}

} // namespace wattscope
