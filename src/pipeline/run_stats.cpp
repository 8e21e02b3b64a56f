#include "pipeline/run_stats.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "pipeline/phase_view.hpp"
#include "pipeline/repair.hpp"
#include "pipeline/run_view.hpp"

namespace wattscope {

Figures run_figures(StoreReader& store, const RunInfo& stored) {
  const RunInfo run = as_shown(store, stored);
  const nlohmann::json j = run_json(run);
  Figures f;
  auto add = [&](std::string name, const nlohmann::json& v) {
    if (v.is_number()) f.emplace_back(std::move(name), v.get<double>());
  };
  add("duration_s", j["duration_s"]);
  add("energy_j", j["total_energy_j"]);
  for (const auto& g : j["gpus"])
    if (g.contains("index") && g["index"].is_number())
      add(fmt::format("gpu{}.energy_j", g["index"].get<int>()), g.value("energy_j", nlohmann::json()));
  if (j["cpu"].is_object()) add("cpu.energy_j", j["cpu"].value("energy_j", nlohmann::json()));
  const PhaseData d = load_phase_data(store, run);
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::optional<double>, double>> by_name; // energy (missing if any is), duration
  for (const auto& p : d.phases) {
    auto [it, fresh] = by_name.try_emplace(p.name, std::optional<double>(0.0), 0.0);
    if (fresh) order.push_back(p.name);
    it->second.first =
        p.energy_j && it->second.first ? std::optional<double>(*it->second.first + *p.energy_j) : std::nullopt;
    it->second.second += static_cast<double>(p.end_ms - p.start_ms) / 1000.0;
  }
  for (const auto& name : order) {
    const auto& [energy, duration] = by_name[name];
    if (energy) f.emplace_back("phase." + name + ".energy_j", *energy);
    f.emplace_back("phase." + name + ".duration_s", duration);
  }
  // issue 29: over the phases each unit's work was marked in (or the whole run), as show and the report say
  for (const auto& u : unit_figures(d, run)) {
    if (const auto e = u.energy_per_unit_j()) f.emplace_back("work." + u.unit + ".energy_per_unit_j", *e);
    if (const auto r = u.throughput_per_s()) f.emplace_back("work." + u.unit + ".throughput_per_s", *r);
  }
  return f;
}

std::vector<RunInfo> task_runs(StoreReader& store, const std::string& task, std::optional<size_t> last) {
  std::vector<RunInfo> out;
  size_t unfinished = 0;
  for (auto& r : store.runs()) {
    if (r.task != task) continue;
    if (!r.end_ms) {
      ++unfinished; // still running, or killed: its figures are partial
      continue;
    }
    out.push_back(std::move(r));
  }
  if (out.empty())
    throw std::runtime_error(fmt::format("no finished runs of task '{}' in {}{}; 'wattscope list' shows the runs", task,
                                         store.describe(),
                                         unfinished ? fmt::format(" ({} unfinished)", unfinished) : ""));
  if (last && out.size() > *last) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(*last));
  return out;
}

std::vector<MetricStats> figure_stats(const std::vector<Figures>& runs) {
  std::vector<MetricStats> out;
  for (const auto& figs : runs)
    for (const auto& [metric, value] : figs) {
      const std::string& name = metric; // (clang 14 cannot capture a structured binding)
      auto it = std::find_if(out.begin(), out.end(), [&](const MetricStats& m) { return m.name == name; });
      if (it == out.end()) {
        out.push_back({name, {}, {}});
        it = out.end() - 1;
      }
      it->values.push_back(value);
    }
  for (auto& m : out)
    m.summary = summarize(m.values);
  return out;
}

nlohmann::json summary_json(const SampleSummary& s) {
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  return {{"n", s.n},
          {"mean", s.n ? nlohmann::json(s.mean) : nlohmann::json()},
          {"sd", opt(s.sd)},
          {"ci95", s.ci_low ? nlohmann::json::array({*s.ci_low, *s.ci_high}) : nlohmann::json()}};
}

} // namespace wattscope
