#include "runs/comparison.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/time_util.hpp"
#include "phases/stats.hpp"
#include "runs/run_stats.hpp"
#include "runs/run_view.hpp"

namespace wattscope {

namespace {

constexpr double kVerdictAlpha = 0.05; // as `wattscope compare`

std::string cmp_joined(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v)
    out += (out.empty() ? "" : sep) + s;
  return out;
}

// "counter on gpu0, gpu1": how a run's energy was measured, as compare names a side's methods.
std::string cmp_how_measured(const FigureNotes& n) {
  if (n.run_energy.devices.empty()) return "";
  std::string devices;
  for (const auto& [device, method] : n.run_energy.devices)
    devices += (devices.empty() ? "" : ", ") + device;
  return fmt::format("{} on {}", n.run_method, devices);
}

// NAME of "PREFIX.NAME.SUFFIX" (names may hold dots), or "" when `figure` is not of that shape.
std::string cmp_middle(const std::string& figure, std::string_view prefix, std::string_view suffix) {
  if (figure.size() <= prefix.size() + suffix.size() || !figure.starts_with(prefix) || !figure.ends_with(suffix))
    return "";
  return figure.substr(prefix.size(), figure.size() - prefix.size() - suffix.size());
}

nlohmann::json cmp_opt(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json();
}

} // namespace

nlohmann::json EnergyVerdict::to_json() const {
  return {
      {"a", a},
      {"b", b},
      {"runs_a", n_a},
      {"runs_b", n_b},
      {"mean_a_j", mean_a},
      {"mean_b_j", mean_b},
      {"difference_pct", cmp_opt(difference_pct)},
      {"interval_pct", cmp_opt(interval_pct)},
      {"welch", t || p ? nlohmann::json{{"t", cmp_opt(t)}, {"df", cmp_opt(df)}, {"p", cmp_opt(p)}} : nlohmann::json()},
      {"alpha", kVerdictAlpha},
      {"significant", significant ? nlohmann::json(*significant) : nlohmann::json()},
      {"refused", refused},
      {"words", words}};
}

EnergyVerdict energy_verdict(const std::string& a, const std::vector<double>& ea, const std::vector<std::string>& ma,
                             const std::string& b, const std::vector<double>& eb, const std::vector<std::string>& mb) {
  EnergyVerdict v;
  v.a = a;
  v.b = b;
  v.n_a = ea.size();
  v.n_b = eb.size();
  if (ea.empty() || eb.empty()) {
    v.words = fmt::format("{} has no energy figure to compare (nothing measured energy)", ea.empty() ? a : b);
    return v;
  }
  const SampleSummary sa = summarize_nonnegative(ea), sb = summarize_nonnegative(eb);
  v.mean_a = sa.mean;
  v.mean_b = sb.mean;
  // issue 29: a difference between energies measured differently is one of method, not of the work.
  if (ma.size() > 1 || mb.size() > 1 || ma != mb) {
    v.refused = true;
    v.words = fmt::format("{} and {} are not compared: their energies were measured differently ({}; {}), so a "
                          "difference would be one of method or devices, not of the work",
                          a, b, cmp_joined(ma, " / "), cmp_joined(mb, " / "));
    return v;
  }
  const double diff = sb.mean - sa.mean;
  if (sa.mean != 0) v.difference_pct = 100.0 * diff / sa.mean;
  const std::string direction =
      diff == 0 ? "the same energy per run as"
                : fmt::format("{:.3g} %{} {} energy per run than", std::fabs(v.difference_pct.value_or(0)), "{PM}",
                              diff > 0 ? "more" : "less");
  const auto welch = welch_t_test(ea, eb);
  std::string pm, tail;
  const std::string method = ma.empty() ? "" : fmt::format(" [{}]", ma.front().substr(0, ma.front().find(" on ")));
  if (welch) {
    v.t = welch->t;
    v.df = welch->df;
    v.p = welch->p;
    v.significant = welch->p < kVerdictAlpha;
    // The same interval the test decides by: the difference is significant exactly when it excludes 0.
    const double se = std::sqrt(sa.sd.value_or(0) * sa.sd.value_or(0) / static_cast<double>(sa.n) +
                                sb.sd.value_or(0) * sb.sd.value_or(0) / static_cast<double>(sb.n));
    const double half = se > 0 && welch->df > 0 ? student_t_quantile(1 - kVerdictAlpha / 2, welch->df) * se : 0.0;
    if (sa.mean != 0) {
      v.interval_pct = 100.0 * half / std::fabs(sa.mean);
      pm = fmt::format(" ± {:.2g} %", *v.interval_pct);
    }
    tail = *v.significant ? fmt::format("significant at 95 % (Welch's t = {:.3g}, df = {:.3g}, p = {:.3g})", welch->t,
                                        welch->df, welch->p)
                          : fmt::format("not distinguishable at 95 % (Welch's t = {:.3g}, df = {:.3g}, p = {:.3g}): "
                                        "more runs may tell them apart",
                                        welch->t, welch->df, welch->p);
  } else {
    tail = fmt::format("cannot tell at 95 %: each side needs at least 2 runs with energy ({} has {}, {} has {})", a,
                       ea.size(), b, eb.size());
  }
  std::string dir = direction;
  if (const auto at = dir.find("{PM}"); at != std::string::npos) dir.replace(at, 4, pm);
  v.words = fmt::format("{} uses {} {}{}; {}", b, dir, a, method, tail);
  return v;
}

nlohmann::json comparison_json(StoreReader& store, const std::vector<RunInfo>& runs) {
  std::vector<RunModel> models;
  models.reserve(runs.size());
  for (const auto& r : runs)
    models.push_back(load_run_model(store, r));
  return comparison_json(models);
}

nlohmann::json comparison_json(const std::vector<RunModel>& models) {
  struct Group {
    std::string task;
    std::vector<const RunInfo*> runs;
    std::vector<const RunModel*> models;
    std::vector<Figures> figs;
    std::vector<FigureNotes> notes;
  };
  std::vector<Group> groups;
  for (const auto& m : models) {
    const RunInfo& r = m.run;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.task == r.task; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{r.task, {}, {}, {}, {}});
    it->runs.push_back(&r);
    it->models.push_back(&m);
  }

  nlohmann::json run_rows = nlohmann::json::array(), tasks = nlohmann::json::array();
  std::vector<std::string> units, phase_names, all_methods;
  auto note = [](std::vector<std::string>& list, const std::string& s) {
    if (!s.empty() && std::find(list.begin(), list.end(), s) == list.end()) list.push_back(s);
  };
  struct Energy {
    std::vector<double> values;
    std::vector<std::string> methods;
  };
  std::vector<Energy> energy;
  for (auto& g : groups) {
    g.notes.resize(g.runs.size());
    std::vector<std::string> methods;
    for (size_t i = 0; i < g.runs.size(); ++i) {
      const RunInfo& r = *g.runs[i];
      g.figs.push_back(model_figures(*g.models[i], &g.notes[i]));
      const FigureNotes& n = g.notes[i];
      note(methods, cmp_how_measured(n));
      nlohmann::json row = {
          {"run_id", r.run_id},
          {"task", r.task},
          {"host", r.host},
          {"start", iso_utc_ms(r.start_ms)},
          {"exit_status", r.exit_status ? nlohmann::json(*r.exit_status) : nlohmann::json()},
          {"energy_j", nullptr},
          {"duration_s", nullptr},
          {"energy_method", n.run_method.empty() ? nlohmann::json() : nlohmann::json(n.run_method)},
          {"measured", cmp_how_measured(n).empty() ? nlohmann::json() : nlohmann::json(cmp_how_measured(n))},
          {"energy_per_unit_j", nlohmann::json::object()},
          {"phases_energy_j", nlohmann::json::object()}};
      for (const auto& [name, value] : g.figs.back()) {
        if (name == "energy_j" || name == "duration_s") row[name] = value;
        if (auto u = cmp_middle(name, "work.", ".energy_per_unit_j"); !u.empty()) {
          row["energy_per_unit_j"][u] = value;
          note(units, u);
        }
        if (auto p = cmp_middle(name, "phase.", ".run_total_energy_j"); !p.empty()) {
          row["phases_energy_j"][p] = value;
          note(phase_names, p);
        }
      }
      run_rows.push_back(std::move(row));
    }
    for (const auto& m : methods)
      note(all_methods, m);
    const std::vector<MetricStats> stats = figure_stats(g.figs, g.notes);
    nlohmann::json figures = nlohmann::json::object(), phases = nlohmann::json::object();
    Energy e{{}, methods};
    std::string energy_method;
    for (const auto& m : stats) {
      if (m.name == "energy_j") {
        e.values = m.values;
        energy_method = m.method;
      }
      if (m.name == "energy_j" || m.name == "duration_s" || m.name.starts_with("work."))
        figures[m.name] = metric_json(m);
      if (auto p = cmp_middle(m.name, "phase.", ".run_total_energy_j"); !p.empty())
        phases[p]["energy_j"] = metric_json(m);
      if (auto p = cmp_middle(m.name, "phase.", ".run_total_duration_s"); !p.empty())
        phases[p]["duration_s"] = metric_json(m);
    }
    nlohmann::json ids = nlohmann::json::array();
    for (const RunInfo* r : g.runs)
      ids.push_back(r->run_id);
    tasks.push_back({{"task", g.task},
                     {"runs", ids},
                     {"energy_method", energy_method.empty() ? nlohmann::json() : nlohmann::json(energy_method)},
                     {"energy_methods", methods},
                     {"figures", figures},
                     {"phases", phases}});
    energy.push_back(std::move(e));
  }
  // Every task against the first, as `wattscope compare FIRST OTHER` would say it.
  nlohmann::json verdicts = nlohmann::json::array();
  for (size_t i = 1; i < groups.size(); ++i)
    verdicts.push_back(energy_verdict("task " + groups[0].task, energy[0].values, energy[0].methods,
                                      "task " + groups[i].task, energy[i].values, energy[i].methods)
                           .to_json());
  return {{"tasks", tasks},
          {"runs", run_rows},
          {"units", units},
          {"phase_names", phase_names},
          {"methods", all_methods},
          {"methods_differ", all_methods.size() > 1},
          {"baseline", groups.empty() ? nlohmann::json() : nlohmann::json(groups[0].task)},
          {"alpha", kVerdictAlpha},
          {"verdicts", verdicts}};
}

} // namespace wattscope
