// Figures of repeated runs for `wattscope stats` and `wattscope compare` (issue 15): which runs (a task's latest N,
// or runs by id), and each run's figures by name, in a stable order.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schema.hpp"
#include "phases/stats.hpp"
#include "runs/run_model.hpp"
#include "runs/run_tags.hpp"
#include "runs/run_view.hpp"
#include "sinks/sink.hpp"

namespace wattscope {

// name -> value, in the order they are first reported: duration_s, energy_j, per device (gpu0.energy_j,
// cpu.energy_j), per phase name (phase.NAME.energy_j / .duration_s: the mean over that name's instances in the run;
// phase.NAME.run_total_energy_j / .run_total_duration_s: their sum; phase.NAME.instances), per unit of work
// (work.UNIT.energy_per_unit_j, work.UNIT.throughput_per_s). A figure a run lacks is absent, never 0.
using Figures = std::vector<std::pair<std::string, double>>;

// Beside a run's figures (issue 29): the energy method of each energy figure, and why a figure the run could have
// had is missing.
struct FigureNotes {
  EnergyMethod run_energy;                    // run_energy_method(run)
  std::string run_method;                     // its label; "" when nothing measured energy
  std::map<std::string, std::string> method;  // figure -> method label (energy figures only)
  std::map<std::string, std::string> missing; // figure -> why this run has none
};

// The run's figures for statistics over runs, from its model (what every other view of the run shows).
Figures model_figures(const RunModel& model, FigureNotes* notes = nullptr);
// `quality`, when given, receives the run's measurement quality (its temperatures and warm-up); `footprint` replaces
// its carbon and cost rates (a read command's --carbon-intensity, --energy-price, ...).
Figures run_figures(StoreReader& store, const RunInfo& run, FigureNotes* notes = nullptr, RunQuality* quality = nullptr,
                    const FootprintOverride& footprint = {});

// A run as a comparison sees its measurement: for warnings that say when a difference is biased by how the runs were
// measured rather than by what they ran.
struct MeasuredRun {
  std::string run_id;
  RunQuality quality;
  OptF duration_s;
};
// GPUs more than this apart at the runs' starts bias a comparison: power rises with temperature.
inline constexpr double kStartTempSpreadC = 5;
// {"kind": "temperature" | "warmup", "text": ..., ...}: runs (of both sides; `b` empty for `stats`) that started at
// GPU temperatures more than kStartTempSpreadC apart, or were still warming up, each saying which way that biases the
// difference of B against A.
nlohmann::json measurement_warnings(const std::vector<MeasuredRun>& a, const std::vector<MeasuredRun>& b = {});

// The finished runs of `task`, oldest first, the latest `last` of them when given. Throws std::runtime_error naming
// the task when it has none.
std::vector<RunInfo> task_runs(StoreReader& store, const std::string& task, std::optional<size_t> last);
// The same for --task and/or --tag (issue 29).
std::vector<RunInfo> selected_runs(StoreReader& store, const RunSelection& selection, std::optional<size_t> last);

struct MetricStats {
  std::string name;
  std::vector<double> values;    // one per run that has the figure
  std::vector<size_t> run_index; // which run each value is of (index into the runs given)
  SampleSummary summary;         // summarize_nonnegative: its interval never goes below 0
  std::string method;            // the energy method over the runs that have it ("" for non-energy figures)
  std::vector<std::pair<std::string, size_t>> left_out; // why runs lack the figure -> how many
  size_t left_out_count() const;
};
// Every figure across the runs, in first-seen order. `notes` (one per run, or empty) give methods and reasons.
std::vector<MetricStats> figure_stats(const std::vector<Figures>& runs, const std::vector<FigureNotes>& notes = {});
// Whether the runs that measured energy did so by different methods, or on different devices.
bool methods_differ(const std::vector<FigureNotes>& notes);
// Why a run has no value of `figure` when its notes do not say: "no 'eval' phase", "no energy measured".
std::string missing_reason(const std::string& figure);
// "1 run: no energy measured; 2 runs: no 'eval' phase"; "" when none was left out.
std::string left_out_text(const MetricStats& m);

nlohmann::json summary_json(const SampleSummary& s);
// summary_json plus values, energy_method, left_out (count) and left_out_why (reason -> count).
nlohmann::json metric_json(const MetricStats& m);

} // namespace wattscope
