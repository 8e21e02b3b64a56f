#include "runs/run_stats.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "core/json_opt.hpp"
#include "core/text.hpp"
#include "runs/phase_view.hpp"
#include "runs/repair.hpp"
#include "runs/run_view.hpp"

namespace wattscope {

namespace {

struct PhaseSums {
  size_t instances = 0;
  size_t with_energy = 0;
  OptF bound_pct; // the largest stated bound of its instances, in % of their energy
  double energy_j = 0, duration_s = 0, carbon_g = 0;
  std::vector<std::string> methods;
};

} // namespace

Figures run_figures(StoreReader& store, const RunInfo& stored, FigureNotes* notes, RunQuality* quality,
                    const FootprintOverride& footprint) {
  const RunModel m = load_run_model(store, stored, {.footprint = footprint});
  if (quality) *quality = m.quality;
  return model_figures(m, notes);
}

namespace {

OptF mean_start_c(const std::vector<MeasuredRun>& runs) {
  double sum = 0;
  size_t n = 0;
  for (const auto& r : runs)
    if (r.quality.gpu_temp_start_c) {
      sum += *r.quality.gpu_temp_start_c;
      ++n;
    }
  return n ? OptF(sum / static_cast<double>(n)) : std::nullopt;
}

} // namespace

nlohmann::json measurement_warnings(const std::vector<MeasuredRun>& a, const std::vector<MeasuredRun>& b) {
  nlohmann::json out = nlohmann::json::array();
  const bool two = !b.empty();
  // Temperature at the start: the spread over every run compared.
  const MeasuredRun *cold = nullptr, *hot = nullptr;
  for (const auto* side : {&a, &b})
    for (const auto& r : *side)
      if (r.quality.gpu_temp_start_c) {
        if (!cold || *r.quality.gpu_temp_start_c < *cold->quality.gpu_temp_start_c) cold = &r;
        if (!hot || *r.quality.gpu_temp_start_c > *hot->quality.gpu_temp_start_c) hot = &r;
      }
  if (cold && hot && *hot->quality.gpu_temp_start_c - *cold->quality.gpu_temp_start_c > kStartTempSpreadC) {
    const double spread = *hot->quality.gpu_temp_start_c - *cold->quality.gpu_temp_start_c;
    nlohmann::json w = {{"kind", "temperature"},
                        {"spread_c", spread},
                        {"coldest", {{"run_id", cold->run_id}, {"gpu_temp_start_c", *cold->quality.gpu_temp_start_c}}},
                        {"hottest", {{"run_id", hot->run_id}, {"gpu_temp_start_c", *hot->quality.gpu_temp_start_c}}}};
    std::string text =
        fmt::format("the runs started at GPU temperatures {:.0f} °C apart ({} at {:.0f} °C, {} at "
                    "{:.0f} °C): a hotter GPU draws more power for the same work",
                    spread, cold->run_id, *cold->quality.gpu_temp_start_c, hot->run_id, *hot->quality.gpu_temp_start_c);
    const OptF ma = mean_start_c(a), mb = two ? mean_start_c(b) : std::nullopt;
    if (ma && mb && std::abs(*mb - *ma) > 1) {
      const bool b_hot = *mb > *ma;
      w["a_mean_start_c"] = *ma;
      w["b_mean_start_c"] = *mb;
      w["biased"] = b_hot ? "b_up" : "a_up";
      text += fmt::format("; {} started hotter on average ({:.0f} vs {:.0f} °C), so its energy reads high: the "
                          "difference B - A is biased {} (cool down between runs: wattscope run --repeat N "
                          "--cooldown-until 45C)",
                          b_hot ? "B" : "A", b_hot ? *mb : *ma, b_hot ? *ma : *mb, b_hot ? "upwards" : "downwards");
    } else {
      text += "; their spread widens the statistics (cool down between runs: wattscope run --repeat N "
              "--cooldown-until 45C)";
    }
    w["text"] = text;
    out.push_back(std::move(w));
  }
  // Warm-up: a run whose power had not settled (or took over a quarter of it to) carries its start-up in its figures.
  for (const auto* side : {&a, &b})
    for (const auto& r : *side) {
      if (!r.quality.warming_up(r.duration_s)) continue;
      const char* label = !two ? "" : side == &a ? "A" : "B";
      std::string text =
          !r.quality.settled
              ? fmt::format("run {}{}{} was still warming up when it ended: its GPUs' power never settled", r.run_id,
                            two ? " of " : "", label)
              : fmt::format("run {}{}{} spent {:.1f} s of {:.1f} s warming up before its GPUs' power settled", r.run_id,
                            two ? " of " : "", label, *r.quality.warmup_s, r.duration_s.value_or(0));
      text += ": its figures include a start-up at lower power, so its average power reads low and its energy per "
              "unit of work carries the start-up";
      if (two)
        text += fmt::format("; the difference B - A is biased {} (run long enough to settle, or compare phases after "
                            "the warm-up)",
                            side == &a ? "upwards in power, against A's start-up in energy per work"
                                       : "downwards in power, against B's start-up in energy per work");
      out.push_back({{"kind", "warmup"},
                     {"run_id", r.run_id},
                     {"side", two ? nlohmann::json(label) : nlohmann::json()},
                     {"warmup_s", opt(r.quality.warmup_s)},
                     {"settled", r.quality.settled},
                     {"text", text}});
    }
  return out;
}

Figures model_figures(const RunModel& model, FigureNotes* notes) {
  const nlohmann::json j = model.summary_json();
  FigureNotes scratch;
  FigureNotes& n = notes ? *notes : scratch;
  Figures f;
  auto add = [&](std::string name, const nlohmann::json& v) {
    if (v.is_number()) f.emplace_back(std::move(name), v.get<double>());
  };
  add("duration_s", j["duration_s"]);
  add("energy_j", j["total_energy_j"]);
  // Carbon and cost, each labelled with its source (a mean over runs charged at different rates says so).
  if (model.footprint.carbon) {
    f.emplace_back("carbon_g", model.footprint.carbon->value);
    n.method["carbon_g"] = model.footprint.carbon->source;
  } else {
    n.missing["carbon_g"] = "no energy measured";
  }
  if (model.footprint.carbon) // per device, as its energy: gpu0.carbon_g, cpu_package.carbon_g, ...
    for (const auto& [device, g] : model.footprint.carbon->devices) {
      f.emplace_back(device + ".carbon_g", g);
      n.method[device + ".carbon_g"] = model.footprint.carbon->source;
    }
  if (model.footprint.cost) {
    f.emplace_back("cost", model.footprint.cost->value);
    n.method["cost"] = model.footprint.cost->currency + ": " + model.footprint.cost->source;
  }
  n.run_energy = model.energy_method;
  n.run_method = n.run_energy.label();
  if (j["total_energy_j"].is_number())
    n.method["energy_j"] = n.run_method;
  else
    n.missing["energy_j"] = "no energy measured";
  // The run's own processes' energy, beside the devices' (a share of a shared host's energy is its own figure).
  if (j["attributed_energy_j"].is_number()) {
    add("attributed_energy_j", j["attributed_energy_j"]);
    n.method["attributed_energy_j"] = j["attributed_energy_method"].get<std::string>();
  } else {
    n.missing["attributed_energy_j"] = "no process attribution";
  }
  for (const auto& g : j["gpus"])
    if (g.contains("index") && g["index"].is_number()) {
      const std::string name = fmt::format("gpu{}.energy_j", g["index"].get<int>());
      add(name, g.value("energy_j", nlohmann::json()));
      if (g.value("energy_method", nlohmann::json()).is_string()) n.method[name] = g["energy_method"];
    }
  if (j["cpu"].is_object()) {
    add("cpu.energy_j", j["cpu"].value("energy_j", nlohmann::json()));
    if (j["cpu"].value("energy_method", nlohmann::json()).is_string())
      n.method["cpu.energy_j"] = j["cpu"]["energy_method"];
  }
  const PhaseData& d = model.phases;
  // issue 29: a phase name's figures per instance (three epochs of 8.5 s: 8.5 s, not 25.5 s), with the run's total
  // of that name kept apart under its own name.
  std::vector<std::string> order;
  std::map<std::string, PhaseSums> by_name;
  for (const auto& p : d.phases) {
    if (phase_open(p)) continue; // no end stored yet (a run still recording, or not repaired): no figures to count
    auto [it, fresh] = by_name.try_emplace(p.name);
    if (fresh) order.push_back(p.name);
    PhaseSums& ps = it->second;
    ++ps.instances;
    ps.duration_s += static_cast<double>(p.end_ms - p.start_ms) / 1000.0;
    if (const OptF pct = phase_bound_pct(p)) ps.bound_pct = std::max(ps.bound_pct.value_or(0), *pct);
    if (p.energy_j) {
      ++ps.with_energy;
      ps.energy_j += *p.energy_j;
      ps.carbon_g += model.footprint.grams(p.energy_j, p.start_ms, p.end_ms).value_or(0);
      ps.methods.push_back(p.energy_method);
    }
  }
  for (const auto& name : order) {
    const PhaseSums& ps = by_name[name];
    const std::string key = "phase." + name;
    const double count = static_cast<double>(ps.instances);
    // How true its energy is, as a figure of its own beside it: a run whose phases rest on edges without readings
    // stands out in the statistics (docs/markers.md, "How true a phase is")
    if (ps.bound_pct) f.emplace_back(key + ".energy_bound_pct", *ps.bound_pct);
    if (ps.with_energy == ps.instances) {
      f.emplace_back(key + ".energy_j", ps.energy_j / count);
      f.emplace_back(key + ".run_total_energy_j", ps.energy_j);
      n.method[key + ".energy_j"] = n.method[key + ".run_total_energy_j"] = combine_method_labels(ps.methods, "phase");
      if (model.footprint.carbon) {
        f.emplace_back(key + ".carbon_g", ps.carbon_g / count);
        n.method[key + ".carbon_g"] = model.footprint.carbon->source;
      }
    } else {
      const std::string why = fmt::format("{} of its {} '{}' phases has no energy figure",
                                          ps.instances - ps.with_energy, ps.instances, name);
      n.missing[key + ".energy_j"] = n.missing[key + ".run_total_energy_j"] = why;
    }
    f.emplace_back(key + ".duration_s", ps.duration_s / count);
    f.emplace_back(key + ".run_total_duration_s", ps.duration_s);
    f.emplace_back(key + ".instances", count);
  }
  // issue 29: over the phases each unit's work was marked in (or the whole run), as show and the report say
  for (const auto& u : model.units) {
    if (const auto e = u.energy_per_unit_j()) f.emplace_back("work." + u.unit + ".energy_per_unit_j", *e);
    if (const auto e = u.attributed_energy_per_unit_j()) {
      f.emplace_back("work." + u.unit + ".attributed_energy_per_unit_j", *e);
      n.method["work." + u.unit + ".attributed_energy_per_unit_j"] = u.attributed_method;
    }
    if (const auto r = u.throughput_per_s()) f.emplace_back("work." + u.unit + ".throughput_per_s", *r);
  }
  // Every energy figure of the work carries the method of the energy it divides.
  for (const auto& [name, value] : f)
    if (name.starts_with("work.") && name.ends_with("energy_per_unit_j") && !n.method.contains(name))
      n.method[name] = n.run_method;
  return f;
}

std::vector<RunInfo> task_runs(StoreReader& store, const std::string& task, std::optional<size_t> last) {
  return selected_runs(store, RunSelection{task, {}}, last);
}

std::vector<RunInfo> selected_runs(StoreReader& store, const RunSelection& selection, std::optional<size_t> last) {
  std::vector<RunInfo> out;
  size_t unfinished = 0;
  for (auto& r : store.runs()) {
    if (!run_selected(r, selection)) continue;
    if (!r.end_ms) {
      ++unfinished; // still running, or killed: its figures are partial
      continue;
    }
    out.push_back(std::move(r));
  }
  if (out.empty())
    throw std::runtime_error(fmt::format("no finished runs {} in {}{}; 'wattscope list' shows the runs",
                                         excerpt(selection.text(), 200), store.describe(),
                                         unfinished ? fmt::format(" ({} unfinished)", unfinished) : ""));
  if (last && out.size() > *last) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(*last));
  return out;
}

std::string missing_reason(const std::string& figure) {
  if (figure == "energy_j") return "no energy measured";
  if (figure == "duration_s") return "not finished";
  const auto dot = figure.find('.');
  const std::string head = figure.substr(0, dot);
  if (head.starts_with("gpu") || head == "cpu") return "no energy measured on " + head;
  if (dot == std::string::npos) return "not recorded";
  const auto dot2 = figure.rfind('.');
  const std::string middle = dot2 > dot ? figure.substr(dot + 1, dot2 - dot - 1) : figure.substr(dot + 1);
  if (head == "phase") return "no '" + middle + "' phase";
  if (head == "work") return "no work in " + middle;
  return "not recorded";
}

std::vector<MetricStats> figure_stats(const std::vector<Figures>& runs, const std::vector<FigureNotes>& notes) {
  std::vector<MetricStats> out;
  for (size_t r = 0; r < runs.size(); ++r)
    for (const auto& [metric, value] : runs[r]) {
      const std::string& name = metric; // (clang 14 cannot capture a structured binding)
      auto it = std::find_if(out.begin(), out.end(), [&](const MetricStats& m) { return m.name == name; });
      if (it == out.end()) {
        out.emplace_back();
        out.back().name = name;
        it = out.end() - 1;
      }
      it->values.push_back(value);
      it->run_index.push_back(r);
    }
  for (auto& m : out) {
    // Every figure is a non-negative quantity: energy, duration, a count, J per unit, a rate.
    m.summary = summarize_nonnegative(m.values);
    std::vector<std::string> methods;
    for (size_t r = 0, k = 0; r < runs.size(); ++r) {
      const bool has = k < m.run_index.size() && m.run_index[k] == r;
      if (has) ++k;
      const FigureNotes* note = r < notes.size() ? &notes[r] : nullptr;
      if (has) {
        if (note)
          if (auto it = note->method.find(m.name); it != note->method.end()) methods.push_back(it->second);
        continue;
      }
      std::string why = missing_reason(m.name);
      if (note)
        if (auto it = note->missing.find(m.name); it != note->missing.end()) why = it->second;
      auto w = std::find_if(m.left_out.begin(), m.left_out.end(), [&](const auto& p) { return p.first == why; });
      if (w == m.left_out.end())
        m.left_out.emplace_back(why, 1);
      else
        ++w->second;
    }
    m.method = combine_method_labels(methods);
  }
  return out;
}

bool methods_differ(const std::vector<FigureNotes>& notes) {
  const EnergyMethod* first = nullptr;
  for (const auto& n : notes) {
    if (n.run_energy.devices.empty()) continue; // no energy: left out of every energy figure, and said so
    if (!first)
      first = &n.run_energy;
    else if (!(n.run_energy == *first))
      return true;
  }
  return false;
}

size_t MetricStats::left_out_count() const {
  size_t n = 0;
  for (const auto& [why, count] : left_out)
    n += count;
  return n;
}

std::string left_out_text(const MetricStats& m) {
  std::string out;
  for (const auto& [why, count] : m.left_out)
    out += fmt::format("{}{} run{}: {}", out.empty() ? "" : "; ", count, count == 1 ? "" : "s", why);
  return out;
}

nlohmann::json summary_json(const SampleSummary& s) {
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  return {{"n", s.n},
          {"mean", s.n ? nlohmann::json(s.mean) : nlohmann::json()},
          {"sd", opt(s.sd)},
          {"ci95", s.ci_low ? nlohmann::json::array({*s.ci_low, *s.ci_high}) : nlohmann::json()},
          {"ci95_method", s.ci_method ? nlohmann::json(s.ci_method) : nlohmann::json()}};
}

nlohmann::json metric_json(const MetricStats& m) {
  nlohmann::json s = summary_json(m.summary);
  s["values"] = m.values;
  // Carbon and cost carry their rates' source where energy figures carry their method.
  const bool rated = m.name.ends_with("carbon_g") || m.name == "cost";
  s[rated ? "source" : "energy_method"] = m.method.empty() ? nlohmann::json() : nlohmann::json(m.method);
  s["left_out"] = m.left_out_count();
  nlohmann::json why = nlohmann::json::object();
  for (const auto& [reason, count] : m.left_out)
    why[reason] = count;
  s["left_out_why"] = std::move(why);
  return s;
}

} // namespace wattscope
