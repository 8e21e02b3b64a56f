// Figures of repeated runs for `wattscope stats` and `wattscope compare` (issue 15): which runs (a task's latest N,
// or runs by id), and each run's figures by name, in a stable order.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schema.hpp"
#include "phases/stats.hpp"
#include "sinks/sink.hpp"

namespace wattscope {

// name -> value, in the order they are first reported: duration_s, energy_j, per device (gpu0.energy_j,
// cpu.energy_j), per phase name (phase.NAME.energy_j / .duration_s, summed over that name's phases in the run), per
// unit of work (work.UNIT.energy_per_unit_j, work.UNIT.throughput_per_s). A figure a run lacks is absent, never 0.
using Figures = std::vector<std::pair<std::string, double>>;

Figures run_figures(StoreReader& store, const RunInfo& run);

// The finished runs of `task`, oldest first, the latest `last` of them when given. Throws std::runtime_error naming
// the task when it has none.
std::vector<RunInfo> task_runs(StoreReader& store, const std::string& task, std::optional<size_t> last);

struct MetricStats {
  std::string name;
  std::vector<double> values; // one per run that has the figure
  SampleSummary summary;
};
// Every figure across the runs, in first-seen order.
std::vector<MetricStats> figure_stats(const std::vector<Figures>& runs);

nlohmann::json summary_json(const SampleSummary& s);

} // namespace wattscope
