#include "runs/run_tags.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "core/stored_json.hpp"
#include "core/text.hpp"
#include "core/time_util.hpp"
#include "runs/footprint_view.hpp"
#include "runs/run_view.hpp"

namespace wattscope {

namespace {
std::string node_of(const RunInfo& run, const nlohmann::json& tags) {
  std::string node = json_string(tags, "slurm_node");
  return node.empty() ? run.host : node;
}
std::string filters_text(const std::vector<TagFilter>& filters) {
  std::string out;
  for (const auto& f : filters)
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", f.key, f.value);
  return out;
}
// Energy of one part of a run's summary (the CPU's, a GPU's), when measured.
std::optional<double> energy_in(const nlohmann::json& part) {
  const auto& e = json_member(part, "energy_j");
  return e.is_number() ? std::optional<double>(e.get<double>()) : std::nullopt;
}
} // namespace

std::string RunSelection::text() const {
  std::string out = task.empty() ? "" : "of task " + task;
  if (!tags.empty()) out += (out.empty() ? "tagged " : " tagged ") + filters_text(tags);
  return out;
}

bool run_selected(const RunInfo& run, const RunSelection& selection) {
  return (selection.task.empty() || run.task == selection.task) && run_matches(run, selection.tags);
}

std::vector<RunInfo> select_runs(std::vector<RunInfo> runs, const RunSelection& selection) {
  std::erase_if(runs, [&](const RunInfo& r) { return !run_selected(r, selection); });
  return runs;
}

nlohmann::json runs_total_json(const std::vector<RunInfo>& runs, const std::vector<TagFilter>& filters,
                               const std::string& task) {
  nlohmann::json j;
  j["task"] = task.empty() ? nlohmann::json() : nlohmann::json(task);
  j["tags"] = nlohmann::json::object();
  for (const auto& f : filters)
    j["tags"][f.key] = f.value;
  double total = 0, cpu = 0, gpu = 0, cpu_attr = 0, grams = 0;
  std::vector<std::string> carbon_sources;
  size_t measured = 0, unfinished = 0;
  bool cpu_seen = false, gpu_seen = false, cpu_attr_seen = false;
  std::vector<std::string> nodes;
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : runs) {
    const nlohmann::json tags = run_tags_json(r);
    nlohmann::json one = run_json(r);
    one["node"] = node_of(r, tags);
    const nlohmann::json summary = run_summary_json(r);
    std::optional<double> cpu_j, gpu_j, cpu_attr_j;
    cpu_j = energy_in(json_member(summary, "cpu"));
    if (const auto& g = json_member(summary, "gpus"); g.is_array())
      for (const auto& d : g)
        if (auto e = energy_in(d)) gpu_j = gpu_j.value_or(0) + *e;
    // The CPU is the node's whole package: the job's processes' share of it is the attributed part.
    if (const auto& at = json_member(json_member(json_member(json_member(summary, "attribution"), "devices"), "cpu"),
                                     "attributed_j");
        at.is_number())
      cpu_attr_j = at.get<double>();
    one["cpu_attributed_j"] = cpu_attr_j ? nlohmann::json(*cpu_attr_j) : nlohmann::json();
    if (cpu_attr_j) cpu_attr += *cpu_attr_j, cpu_attr_seen = true;
    one["cpu_energy_j"] = cpu_j ? nlohmann::json(*cpu_j) : nlohmann::json();
    one["gpu_energy_j"] = gpu_j ? nlohmann::json(*gpu_j) : nlohmann::json();
    if (cpu_j) cpu += *cpu_j, cpu_seen = true;
    if (gpu_j) gpu += *gpu_j, gpu_seen = true;
    if (r.total_energy_j) total += *r.total_energy_j, ++measured;
    // Each run's carbon as `show RUN` gives it; the total names its sources (a job's nodes may sit on two grids).
    const RunFootprint fp = run_footprint(r);
    one["carbon"] = fp.carbon_json();
    if (fp.carbon) {
      grams += fp.carbon->value;
      carbon_sources.push_back(fp.carbon->source);
    }
    if (!r.end_ms) ++unfinished;
    if (std::find(nodes.begin(), nodes.end(), one["node"].get<std::string>()) == nodes.end())
      nodes.push_back(one["node"].get<std::string>());
    arr.push_back(std::move(one));
  }
  j["runs"] = std::move(arr);
  j["nodes"] = nodes;
  j["runs_measured"] = measured;
  j["runs_unfinished"] = unfinished;
  j["total_energy_j"] = measured ? nlohmann::json(total) : nlohmann::json();
  std::vector<std::string> methods;
  for (const auto& one : j["runs"])
    if (one["energy_method"].is_string()) methods.push_back(one["energy_method"].get<std::string>());
  j["energy_method"] = measured ? nlohmann::json(combine_method_labels(methods)) : nlohmann::json();
  j["cpu_energy_j"] = cpu_seen ? nlohmann::json(cpu) : nlohmann::json();
  j["gpu_energy_j"] = gpu_seen ? nlohmann::json(gpu) : nlohmann::json();
  j["cpu_attributed_j"] = cpu_attr_seen ? nlohmann::json(cpu_attr) : nlohmann::json();
  j["carbon_g"] = carbon_sources.empty() ? nlohmann::json() : nlohmann::json(grams);
  j["carbon_source"] =
      carbon_sources.empty() ? nlohmann::json() : nlohmann::json(combine_method_labels(carbon_sources));
  return j;
}

std::string runs_total_text(const std::vector<RunInfo>& runs, const std::vector<TagFilter>& filters,
                            const std::string& task) {
  const nlohmann::json j = runs_total_json(runs, filters, task);
  std::string out =
      fmt::format("{} run{} {} on {} node{}\n", runs.size(), runs.size() == 1 ? "" : "s",
                  RunSelection{task, filters}.text(), j["nodes"].size(), j["nodes"].size() == 1 ? "" : "s");
  out += fmt::format("  {:<20} {:<26} {:<20} {:>10} {:>5} {:>12} {:>12} {:>12} {:>12}  {}\n", "NODE", "RUN",
                     "START (UTC)", "DURATION", "EXIT", "CPU", "GPU", "TOTAL", "CPU JOB", "METHOD");
  auto joules = [](const nlohmann::json& v) { return v.is_number() ? format_si(v.get<double>(), "J") : "-"; };
  for (const auto& r : j["runs"]) {
    std::string start = r["start"].get<std::string>().substr(0, 19);
    start[10] = ' ';
    const std::string node = r["node"].get<std::string>();
    out += fmt::format("  {:<20} {:<26} {:<20} {:>10} {:>5} {:>12} {:>12} {:>12} {:>12}  {}{}\n",
                       node.size() > 20 ? node.substr(0, 19) + "…" : node, r["run_id"].get<std::string>(), start,
                       r["duration_s"].is_number() ? fmt::format("{:.1f} s", r["duration_s"].get<double>()) : "?",
                       r["exit_status"].is_number() ? std::to_string(r["exit_status"].get<int64_t>()) : "-",
                       joules(r["cpu_energy_j"]), joules(r["gpu_energy_j"]), joules(r["total_energy_j"]),
                       joules(r["cpu_attributed_j"]),
                       r["energy_method"].is_string() ? r["energy_method"].get<std::string>() : "-",
                       r["finished"].get<bool>() ? "" : "  not finished (figures from its samples)");
  }
  if (j["total_energy_j"].is_number()) {
    out += fmt::format("  energy    {} in all [{}]", format_energy(j["total_energy_j"].get<double>()),
                       j["energy_method"].get<std::string>());
    if (j["cpu_energy_j"].is_number()) out += " · CPU " + format_si(j["cpu_energy_j"].get<double>(), "J");
    if (j["gpu_energy_j"].is_number()) out += " · GPUs " + format_si(j["gpu_energy_j"].get<double>(), "J");
    out += "\n";
    if (j["cpu_attributed_j"].is_number())
      out += fmt::format("            of the CPU energy, {} is attributed to the runs' own processes (by CPU "
                         "time; the rest is other processes' and idle)\n",
                         format_si(j["cpu_attributed_j"].get<double>(), "J"));
    if (j["carbon_g"].is_number())
      out += fmt::format("  carbon    {} CO2e in all · {}\n", format_grams(j["carbon_g"].get<double>()),
                         j["carbon_source"].get<std::string>());
    const size_t measured = j["runs_measured"].get<size_t>();
    if (measured < runs.size())
      out += fmt::format("            {} of the {} runs measured no energy: the total is of the other {}\n",
                         runs.size() - measured, runs.size(), measured);
  } else {
    out += "  energy    not measured on any of these runs ('wattscope doctor' on their nodes says why)\n";
  }
  return out;
}

} // namespace wattscope
