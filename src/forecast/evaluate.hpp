#pragma once
// Held-out evaluation of the series models (issue 36): bench/forecast_eval prints it, and a unit test checks that
// default_series_model() is still its winner on the committed traces (tests/fixtures/traces/), so the claim in
// docs/forecasts.md cannot go stale.
#include "forecast/series_model.hpp"

#include <cstddef>
#include <functional>
#include <istream>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wattscope::forecast {

// One device's one metric from a trace file, in sample order; a missing reading is NaN, in its place.
struct TraceSeries {
  std::string trace;  // file name, e.g. "h100_lm.csv"
  std::string device; // the `gpu` (or `device`) column
  std::string metric; // "util" or "power"
  std::vector<double> values;
};

// Reads a trace CSV (tests/fixtures/traces/README.md): a header naming t_ms, gpu or device, and any of util_gpu_pct
// or util_pct (-> "util"), power_w (-> "power"). Bad input (no such file, a missing column, a cell that is not a
// number, over 64 MiB, 1,000,000 rows or 256 devices) throws std::runtime_error naming the file and line.
std::vector<TraceSeries> load_trace_csv(const std::string& path);
// The same from a stream (`path` names it in errors); also caps a line at 64 KiB and the header at 64 columns.
std::vector<TraceSeries> parse_trace_csv(std::istream& in, const std::string& path);

// What each trace file is for, split by run (a file is a run): the traces the LSTM was trained on and Holt-Winters
// was tuned on; the validation traces that choose the default model; the test traces, scored once and never used to
// choose; and simulated traces (sim_*.csv), reported apart and never used to choose. A file dropped in later (an
// h100_*.csv from a later GPU session) is a test trace until it is given another role here.
enum class TraceRole { Training, Validation, Test, Simulated };
TraceRole trace_role(std::string_view file_name);
bool is_training_trace(std::string_view file_name);

inline constexpr std::size_t kEvalHorizons[] = {1, 5, 10, 30, 60};

struct HorizonScore {
  std::size_t horizon = 0;
  double mae = 0;         // mean |forecast - actual| at exactly `horizon` steps ahead, in the metric's unit
  double peak_error = -1; // mean |steps between forecast and actual peak| in windows of `horizon` steps; -1: none
  std::size_t n = 0, peak_n = 0;
};
struct ModelScore {
  std::string model;
  std::vector<HorizonScore> by_horizon;
  double mean_mae = 0; // over the horizons: what the winner is chosen by
};

// Every model, fed each series one step at a time (NaN included: models must skip it), forecasting from every
// step. A series weighs the same whatever its length. A peak is only scored where the actual window has one: its
// range at least 10 % of the whole series' range.
std::vector<ModelScore> evaluate(std::span<const TraceSeries> series, std::string_view metric,
                                 std::span<const std::string> models, std::span<const std::size_t> horizons);

// One model (made afresh per series by `make`) scored as evaluate() scores each: what tuning a model's parameters
// on the training traces needs (bench/forecast_eval --tune-hw).
ModelScore evaluate_model(std::span<const TraceSeries> series, std::string_view metric, std::string_view label,
                          const std::function<std::unique_ptr<SeriesModel>()>& make,
                          std::span<const std::size_t> horizons);

// Every series of the `role` *.csv traces of `dir`; the file names of that role are appended to `names` where given.
std::vector<TraceSeries> load_traces(const std::string& dir, TraceRole role, std::vector<std::string>* names = nullptr);

struct Evaluation {
  std::vector<std::string> training, validation, test, simulated; // file names
  std::vector<ModelScore> util, power;                            // on the validation traces: what chooses
  std::vector<ModelScore> test_util, test_power;                  // on the test traces: said once, never chooses
  std::vector<ModelScore> simulated_util;                         // on the simulated traces: apart
  std::string winner; // lowest util mean_mae on the validation traces (utilisation is what live forecasts predict)
  std::vector<std::string> winner_by_horizon; // the same per horizon of kEvalHorizons
};
// All of it on the *.csv files of `dir`, every model of series_model_names(), horizons kEvalHorizons.
Evaluation evaluate_held_out(const std::string& dir);

} // namespace wattscope::forecast
