#include "runs/phase_view.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/json_opt.hpp"
#include "core/stored_json.hpp"
#include "core/text.hpp"
#include "core/time_util.hpp"
#include "runs/run_view.hpp"

namespace wattscope {

namespace {
using json = nlohmann::json;

json opt(const std::optional<double>& v) {
  return v ? json(*v) : json();
}
json opt(const std::optional<int64_t>& v) {
  return v ? json(*v) : json();
}

// Prefill and decode (an LLM server's counters, --scrape; docs/inference.md): the energy split by the time the engine
// says it spent in each. An estimate (the same power assumed in both), labelled so; null without both times.
json prefill_decode(const std::map<std::string, double>& work, std::optional<double> energy_j) {
  const auto get = [&](const char* unit) {
    auto it = work.find(unit);
    return it == work.end() ? 0.0 : it->second;
  };
  const double prefill_s = get("prefill_seconds"), decode_s = get("decode_seconds");
  if (!energy_j || !(prefill_s > 0 && decode_s > 0)) return json();
  const double share = prefill_s / (prefill_s + decode_s);
  const double prefill_j = *energy_j * share, decode_j = *energy_j - prefill_j;
  const double prompt = get("prompt_tokens"), output = get("output_tokens");
  return {{"prefill_time_share", share},
          {"prefill_energy_j", prefill_j},
          {"decode_energy_j", decode_j},
          {"prefill_energy_per_prompt_token_j", prompt > 0 ? json(prefill_j / prompt) : json()},
          {"decode_energy_per_output_token_j", output > 0 ? json(decode_j / output) : json()},
          {"method", "estimated"}};
}

// Work per unit, energy per unit and throughput for one stretch of time.
json work_figures(const std::map<std::string, double>& work, std::optional<double> energy_j, double duration_s) {
  json amounts = json::object(), per_unit = json::object(), rate = json::object();
  for (const auto& [unit, amount] : work) {
    amounts[unit] = amount;
    per_unit[unit] = energy_j && amount > 0 ? json(*energy_j / amount) : json();
    rate[unit] = duration_s > 0 ? json(amount / duration_s) : json();
  }
  json out = {{"amount", amounts}, {"energy_per_unit_j", per_unit}, {"throughput_per_s", rate}};
  if (json split = prefill_decode(work, energy_j); !split.is_null()) out["prefill_decode"] = std::move(split);
  return out;
}

// The same over the span the prefill and decode times cover (their units' own cover: the `serving` phase).
json run_prefill_decode(const std::vector<UnitFigure>& units) {
  std::map<std::string, double> work;
  std::optional<double> energy_j;
  for (const auto& u : units) {
    work[u.unit] = u.amount;
    if (u.unit == "decode_seconds") energy_j = u.energy_j;
  }
  return prefill_decode(work, energy_j);
}

} // namespace

std::string unit_singular(const std::string& unit) {
  auto ends = [&](std::string_view tail) { return unit.size() > tail.size() + 1 && unit.ends_with(tail); };
  if (ends("ies")) return unit.substr(0, unit.size() - 3) + "y"; // copies, entries, queries
  for (std::string_view tail : {"ches", "shes", "sses", "xes"})  // batches, hashes, passes, boxes
    if (ends(tail)) return unit.substr(0, unit.size() - 2);
  if (ends("s") && !ends("ss")) return unit.substr(0, unit.size() - 1); // samples, tokens, images, steps
  return unit;
}

std::map<std::string, double> PhaseData::work_totals() const {
  std::map<std::string, double> out;
  for (const auto& w : work)
    out[w.unit] += w.amount;
  return out;
}

std::map<std::string, double> PhaseData::work_declared_totals() const {
  std::map<std::string, double> out;
  for (const auto& w : work) // arrival order, so a revised total replaces the earlier one
    if (w.total) out[w.unit] = *w.total;
  return out;
}

std::map<std::string, double> PhaseData::phase_work(int64_t phase_id) const {
  // The phase and every phase nested in it, through the parent links.
  std::set<int64_t> inside{phase_id};
  for (const auto& p : phases) // phase ids grow with `begin`, so a parent always comes before its children
    if (p.parent && inside.count(*p.parent)) inside.insert(p.phase_id);
  std::map<std::string, double> out;
  for (const auto& w : work)
    if (w.phase_id && inside.count(*w.phase_id)) out[w.unit] += w.amount;
  return out;
}

OptF UnitFigure::energy_per_unit_j() const {
  if (!energy_j || !(amount > 0)) return std::nullopt;
  return *energy_j / amount;
}

OptF UnitFigure::attributed_energy_per_unit_j() const {
  if (!attributed_energy_j || !(amount > 0)) return std::nullopt;
  return *attributed_energy_j / amount;
}

OptF UnitFigure::throughput_per_s() const {
  if (!(duration_s > 0)) return std::nullopt;
  return amount / duration_s;
}

std::vector<UnitFigure> unit_figures(const PhaseData& d, const RunInfo& run) {
  std::map<int64_t, const PhaseRecord*> by_id;
  for (const auto& p : d.phases)
    by_id[p.phase_id] = &p;
  struct Acc {
    double amount = 0;
    bool outside = false; // some work of the unit outside any (stored) phase
    std::set<int64_t> innermost;
  };
  std::map<std::string, Acc> units;
  for (const auto& w : d.work) {
    Acc& a = units[w.unit];
    a.amount += w.amount;
    if (w.phase_id && by_id.count(*w.phase_id))
      a.innermost.insert(*w.phase_id);
    else
      a.outside = true;
  }
  std::vector<UnitFigure> out;
  for (const auto& [unit, a] : units) {
    UnitFigure u;
    u.unit = unit;
    u.amount = a.amount;
    if (a.outside) {
      u.covers = "the whole run";
      u.energy_j = run.total_energy_j;
      u.duration_s = run.duration_s().value_or(0);
      if (const auto a = run_attributed_energy(run)) {
        u.attributed_energy_j = a->joules;
        u.attributed_method = a->method;
      }
      out.push_back(std::move(u));
      continue;
    }
    // Keep the outermost: a phase with an ancestor in the set is inside one already counted. Parent links are few
    // levels deep; a cycle (a damaged store) is cut by the step bound.
    u.energy_j = 0.0;
    std::vector<std::pair<std::string, int>> names; // name -> count, in order of first appearance
    for (int64_t id : a.innermost) {
      const PhaseRecord* p = by_id[id];
      bool nested = false;
      OptI up = p->parent;
      for (size_t steps = 0; up && steps < by_id.size() && !nested; ++steps) {
        if (a.innermost.count(*up)) nested = true;
        auto it = by_id.find(*up);
        up = it == by_id.end() ? std::nullopt : it->second->parent;
      }
      if (nested) continue;
      u.phase_ids.push_back(id);
      u.coarse = u.coarse || phase_coarse(*p, run);
      u.energy_j = p->energy_j && u.energy_j ? OptF(*u.energy_j + *p->energy_j) : std::nullopt;
      if (!phase_open(*p)) u.duration_s += static_cast<double>(p->end_ms - p->start_ms) / 1000.0;
      const std::string m = p->energy_method;
      if (u.energy_method.empty())
        u.energy_method = m;
      else if (u.energy_method != m)
        u.energy_method = u.energy_method == "simulated" || m == "simulated" ? "simulated" : "mixed";
      auto n = std::find_if(names.begin(), names.end(), [&](const auto& e) { return e.first == p->name; });
      if (n == names.end())
        names.emplace_back(p->name, 1);
      else
        ++n->second;
    }
    for (const auto& [name, count] : names)
      u.covers += fmt::format("{}{} × {}", u.covers.empty() ? "" : " + ", count, name);
    out.push_back(std::move(u));
  }
  return out;
}

int64_t markers_dropped(const RunInfo& run) {
  const json s = run_summary_json(run);
  if (!s.is_object()) return 0;
  auto m = s.find("markers");
  if (m == s.end() || !m->is_object()) return 0;
  auto n = m->find("dropped");
  return n != m->end() && n->is_number_integer() ? n->get<int64_t>() : 0;
}

bool phase_coarse(const PhaseRecord& p, const RunInfo& run) {
  return !phase_open(p) && run.interval_ms > 0 && static_cast<double>(p.end_ms - p.start_ms) < 2 * run.interval_ms;
}

OptF phase_bound_pct(const PhaseRecord& p) {
  if (!p.energy_bound_j || !p.energy_j || *p.energy_j <= 0) return std::nullopt;
  return 100 * *p.energy_bound_j / *p.energy_j;
}

OptF resolving_interval_ms(const PhaseRecord& p, const RunInfo& run) {
  if (!phase_coarse(p, run)) return std::nullopt;
  const double half = static_cast<double>(p.end_ms - p.start_ms) / 2;
  if (half < 0.1) return std::nullopt; // below --interval's 100 us minimum: no interval resolves it
  return half;
}

PhaseData load_phase_data(StoreReader& store, const RunInfo& run, std::vector<Event>* events) {
  PhaseData d;
  const auto pc = [](std::string_view n) { return column_index(TableId::Phases, n); };
  store.scan(TableId::Phases, run, [&](std::span<const Value> row) {
    PhaseRecord p;
    p.phase_id = value_int(row[pc("phase_id")]).value_or(0);
    p.name = value_text(row[pc("name")]);
    p.index = value_int(row[pc("index")]);
    p.parent = value_int(row[pc("parent")]);
    p.start_ms = value_int(row[pc("start_ms")]).value_or(0);
    p.end_ms = value_int(row[pc("end_ms")]).value_or(0); // NULL: open (phase_open)
    p.start_tick = value_int(row[pc("start_tick")]).value_or(0);
    p.end_tick = value_int(row[pc("end_tick")]).value_or(0);
    p.energy_j = value_real(row[pc("energy_j")]);
    p.energy_method = value_text(row[pc("energy_method")]);
    p.closed_by_run_end = value_int(row[pc("closed_by_run_end")]).value_or(0) != 0;
    p.closed_by_repair = value_int(row[pc("closed_by_repair")]).value_or(0) != 0;
    p.start_edge = value_text(row[pc("start_edge")]);
    p.end_edge = value_text(row[pc("end_edge")]);
    p.energy_bound_j = value_real(row[pc("energy_bound_j")]);
    p.gpu_temp_start_c = value_real(row[pc("gpu_temp_start_c")]);
    p.gpu_temp_end_c = value_real(row[pc("gpu_temp_end_c")]);
    const json dev = read_stored_object(value_text(row[pc("device_energy_j")]), run.run_id, "phases.device_energy_j");
    if (dev.is_object())
      for (const auto& [k, v] : dev.items())
        if (v.is_number()) p.device_energy_j.emplace_back(k, v.get<double>());
    d.phases.push_back(std::move(p));
  });
  std::sort(d.phases.begin(), d.phases.end(), [](const auto& a, const auto& b) { return a.phase_id < b.phase_id; });
  const auto wc = [](std::string_view n) { return column_index(TableId::Work, n); };
  store.scan(TableId::Work, run, [&](std::span<const Value> row) {
    WorkRecord w;
    w.seq = value_int(row[wc("seq")]).value_or(0);
    w.ts_ms = value_int(row[wc("ts_ms")]).value_or(0);
    w.amount = value_real(row[wc("amount")]).value_or(0);
    w.unit = value_text(row[wc("unit")]);
    w.phase_id = value_int(row[wc("phase_id")]);
    w.total = value_real(row[wc("total")]);
    d.work.push_back(std::move(w));
  });
  const auto ec = [](std::string_view n) { return column_index(TableId::Events, n); };
  store.scan(TableId::Events, run, [&](std::span<const Value> row) {
    const std::string_view kind = value_text(row[ec("kind")]);
    if (events)
      events->push_back({value_int(row[ec("seq")]).value_or(0), value_int(row[ec("ts_ms")]).value_or(0),
                         std::string(kind), std::string(value_text(row[ec("source")])),
                         std::string(value_text(row[ec("detail")]))});
    if (kind == "mark") {
      Event e;
      e.seq = value_int(row[ec("seq")]).value_or(0);
      e.ts_ms = value_int(row[ec("ts_ms")]).value_or(0);
      e.kind = kind;
      e.source = value_text(row[ec("source")]);
      d.marks.push_back(std::move(e));
    } else if (kind == "model") {
      json m = read_stored_object(value_text(row[ec("detail")]), run.run_id, "events.detail");
      if (!m.is_object()) m = json::object();
      m["name"] = value_text(row[ec("source")]);
      d.model = m;
    }
  });
  return d;
}

json phase_json(const PhaseData& d, const RunInfo& run, const std::vector<UnitFigure>& unit_figs,
                const RunFootprint* fp) {
  const int64_t dropped = markers_dropped(run);
  json phases = json::array();
  for (const auto& p : d.phases) {
    json dev = json::object();
    for (const auto& [k, v] : p.device_energy_j)
      dev[k] = v;
    const bool open = phase_open(p);
    const double dur = open ? 0.0 : static_cast<double>(p.end_ms - p.start_ms) / 1000.0;
    json j = {{"phase_id", p.phase_id},
              {"name", p.name},
              {"index", opt(p.index)},
              {"parent", opt(p.parent)},
              {"start", iso_utc_ms(p.start_ms)},
              {"end", open ? json() : json(iso_utc_ms(p.end_ms))},
              {"start_ms", p.start_ms},
              {"end_ms", open ? json() : json(p.end_ms)},
              {"duration_s", open ? json() : json(dur)},
              {"open", open}, // no end stored yet: the run still records, or died and awaits `repair`
              {"start_tick", p.start_tick},
              {"end_tick", p.end_tick},
              {"energy_j", opt(p.energy_j)},
              {"energy_method", p.energy_method.empty() ? json() : json(p.energy_method)},
              {"devices", dev},
              {"closed_by_run_end", p.closed_by_run_end},
              {"closed_by_repair", p.closed_by_repair}, // its recorder died: ended at the last stored sample
              // issue 29: shorter than two sampling intervals, its energy rests on interpolation across one tick
              {"coarse", phase_coarse(p, run)},
              {"resolving_interval_ms", opt(resolving_interval_ms(p, run))},
              // how its edges were placed, and the most its energy can be off by (docs/markers.md)
              {"start_edge", p.start_edge.empty() ? json() : json(p.start_edge)},
              {"end_edge", p.end_edge.empty() ? json() : json(p.end_edge)},
              {"energy_bound_j", opt(p.energy_bound_j)},
              {"energy_bound_pct", opt(phase_bound_pct(p))},
              {"uncertain", phase_bound_pct(p).value_or(0) > kPhaseBoundFlagPct},
              {"incomplete", dropped > 0},
              // the hottest GPU at the ticks nearest its edges: a phase begun hot draws more for the same work
              {"gpu_temp_start_c", opt(p.gpu_temp_start_c)},
              {"gpu_temp_end_c", opt(p.gpu_temp_end_c)}};
    if (fp && !open) {
      j["carbon_g"] = opt(fp->grams(p.energy_j, p.start_ms, p.end_ms));
      if (fp->cost) j["cost"] = opt(fp->cost_of(p.energy_j, p.start_ms, p.end_ms));
    }
    if (dropped > 0) j["markers_dropped"] = dropped;
    j["work"] = work_figures(d.phase_work(p.phase_id), p.energy_j, dur);
    phases.push_back(std::move(j));
  }
  // issue 29: each unit over the phases its work was marked in (or the whole run), saying which
  json work = {{"amount", json::object()},
               {"energy_per_unit_j", json::object()},
               {"attributed_energy_per_unit_j", json::object()},
               {"throughput_per_s", json::object()},
               {"covers", json::object()}};
  if (json split = run_prefill_decode(unit_figs); !split.is_null()) work["prefill_decode"] = std::move(split);
  for (const auto& u : unit_figs) {
    work["amount"][u.unit] = u.amount;
    work["energy_per_unit_j"][u.unit] = opt(u.energy_per_unit_j());
    // the run's own processes' share per unit: null where it is not known (work marked in phases, no attribution)
    work["attributed_energy_per_unit_j"][u.unit] = opt(u.attributed_energy_per_unit_j());
    work["throughput_per_s"][u.unit] = opt(u.throughput_per_s());
    work["covers"][u.unit] = {
        {"description", u.covers},    {"whole_run", u.phase_ids.empty()},
        {"phases", u.phase_ids},      {"energy_j", opt(u.energy_j)},
        {"duration_s", u.duration_s}, {"energy_method", u.energy_method.empty() ? json() : json(u.energy_method)},
        {"coarse", u.coarse}};
  }
  // issue 36: the declared total per unit (the latest one declared); a unit with none is absent, not 0.
  work["total"] = json::object();
  for (const auto& [unit, total] : d.work_declared_totals())
    work["total"][unit] = total;
  work["records"] = d.work.size();
  work["incomplete"] = dropped > 0;
  if (dropped > 0) work["markers_dropped"] = dropped;
  json marks = json::array();
  for (const auto& m : d.marks)
    marks.push_back({{"name", m.source}, {"time", iso_utc_ms(m.ts_ms)}, {"ts_ms", m.ts_ms}});
  return {{"phases", phases}, {"work", work}, {"marks", marks}, {"model", d.model}};
}

std::string phase_text(const PhaseData& d, const RunInfo& run, const std::vector<UnitFigure>& unit_figs,
                       const RunFootprint* fp, size_t max_rows) {
  std::string out;
  auto work_cell = [](const std::map<std::string, double>& work, std::optional<double> energy_j, double dur) {
    std::string s;
    for (const auto& [unit, amount] : work) {
      s += fmt::format("{}{:g} {}", s.empty() ? "" : "; ", amount, unit);
      if (energy_j && amount > 0) s += " · " + format_si(*energy_j / amount, "J/" + unit_singular(unit));
      if (dur > 0) s += fmt::format(" · {} {}/s", format_si(amount / dur, ""), unit);
    }
    return s;
  };
  if (!d.phases.empty()) {
    out += fmt::format("  phases    {:<28} {:>9} {:>10} {:>14} {:>9}  {}\n", "NAME [INDEX]", "START s", "DURATION",
                       "ENERGY", "CO2e", "WORK");
    std::map<int64_t, int> depth;
    size_t shown = 0, uncertain = 0;
    for (const auto& p : d.phases) {
      const int dep = p.parent && depth.count(*p.parent) ? depth[*p.parent] + 1 : 0;
      depth[p.phase_id] = dep;
      if (shown++ >= max_rows) continue;
      std::string name = std::string(static_cast<size_t>(2 * std::min(dep, 6)), ' ') + p.name;
      if (p.index) name += fmt::format(" [{}]", *p.index);
      if (name.size() > 28) name = name.substr(0, 27) + "…";
      const bool open = phase_open(p);
      const double dur = open ? 0.0 : static_cast<double>(p.end_ms - p.start_ms) / 1000.0;
      const std::string energy = open ? "–" : p.energy_j ? format_si(*p.energy_j, "J") : "not measured";
      std::string coarse;
      // A stated bound says how true the phase is; only rows without one (older versions) fall back to `coarse`.
      if (const OptF pct = phase_bound_pct(p)) {
        if (*pct > kPhaseBoundFlagPct) {
          ++uncertain;
          coarse = fmt::format(" (± {} = {:.3g} %: edges {} / {})", format_si(*p.energy_bound_j, "J"), *pct,
                               p.start_edge.empty() ? "?" : p.start_edge, p.end_edge.empty() ? "?" : p.end_edge);
        }
      }
      if (phase_coarse(p, run)) {
        const OptF resolve = resolving_interval_ms(p, run);
        coarse += resolve ? fmt::format(" (coarse: under 2 sampling intervals; --interval {:g}ms resolves it)",
                                        std::floor(*resolve * 10) / 10)
                          : " (coarse: under 2 sampling intervals)";
      }
      const std::string duration = open ? "open" : fmt::format("{:.2f} s", dur);
      const OptF grams = fp && !open ? fp->grams(p.energy_j, p.start_ms, p.end_ms) : std::nullopt;
      out += fmt::format(
          "            {:<28} {:>9.2f} {:>10} {:>14} {:>9}  {}{}{}{}\n", name,
          static_cast<double>(p.start_ms - run.start_ms) / 1000.0, duration, energy, grams ? format_grams(*grams) : "–",
          p.energy_method.empty() || p.energy_method == "counter" ? "" : "[" + p.energy_method + "] ",
          work_cell(d.phase_work(p.phase_id), p.energy_j, dur),
          p.closed_by_run_end  ? " (no end: closed by the run's end)"
          : p.closed_by_repair ? " (closed by repair: the recorder died; its energy up to the last stored sample)"
          : open               ? " (open: no end stored yet)"
                               : "",
          coarse);
    }
    if (d.phases.size() > max_rows)
      out += fmt::format("            … {} more phases ('wattscope show --json' lists them all)\n",
                         d.phases.size() - max_rows);
    if (uncertain > 0)
      out +=
          fmt::format("            {} phase{} may be off by more than {:g} %: an edge without a reading (a marker "
                      "late or in a flood, a device that did not answer); docs/markers.md, \"How true a phase is\"\n",
                      uncertain, uncertain == 1 ? "" : "s", kPhaseBoundFlagPct);
  }
  const int64_t dropped = markers_dropped(run);
  const std::string incomplete =
      dropped > 0 ? fmt::format(" (incomplete: {} marker{} dropped)", dropped, dropped == 1 ? "" : "s") : "";
  if (dropped > 0 && !d.phases.empty())
    out += fmt::format("            phases{}: the run's phases and work may be missing some\n", incomplete);
  // issue 19: energy per unit of work from a simulated run is simulated too
  const bool simulated = simulated_run(run);
  // issue 29: each unit over the phases its work was marked in, saying which
  std::string units;
  for (const auto& u : unit_figs) {
    std::string s = fmt::format("{:g} {}{} over {}", u.amount, u.unit, incomplete, u.covers);
    if (auto e = u.energy_per_unit_j()) s += " · " + format_si(*e, "J/" + unit_singular(u.unit));
    if (auto r = u.throughput_per_s()) s += fmt::format(" · {} {}/s", format_si(*r, ""), u.unit);
    const std::string method = simulated ? "simulated" : u.energy_method;
    if (!method.empty() && method != "counter") s += " [" + method + "]";
    if (u.coarse) s += " (coarse: a phase it covers is under 2 sampling intervals)";
    if (auto a = u.attributed_energy_per_unit_j())
      s += fmt::format(" · {} {} [{}]", run.command.empty() ? "tracked processes" : "your processes",
                       format_si(*a, "J/" + unit_singular(u.unit)), u.attributed_method);
    units += fmt::format("{}{}\n", units.empty() ? "  work      " : "            ", s);
  }
  if (const json split = run_prefill_decode(unit_figs); !split.is_null()) {
    std::string s =
        fmt::format("prefill {:.1f} % of the engine's time", 100 * split["prefill_time_share"].get<double>());
    if (split["decode_energy_per_output_token_j"].is_number())
      s += " · decode " + format_si(split["decode_energy_per_output_token_j"].get<double>(), "J/output_token");
    if (split["prefill_energy_per_prompt_token_j"].is_number())
      s += " · prefill " + format_si(split["prefill_energy_per_prompt_token_j"].get<double>(), "J/prompt_token");
    units += "            " + s + " [estimated: the energy split by the engine's prefill and decode times]\n";
  }
  if (!units.empty())
    out += units;
  else if (dropped > 0 && d.phases.empty())
    out += fmt::format("  work      none stored{}\n", incomplete);
  if (!d.model.is_null()) {
    std::string line = fmt::format("  model     {}", d.model.value("name", std::string()));
    if (d.model.contains("parameters") && d.model["parameters"].is_number())
      line += " · " + format_count(d.model["parameters"].get<double>(), "parameters");
    if (d.model.contains("flops") && d.model["flops"].is_number())
      line += " · " + format_count(d.model["flops"].get<double>(), "FLOPs");
    out += line + "\n";
  }
  return out;
}

} // namespace wattscope
