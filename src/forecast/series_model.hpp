#pragma once
// One interface for every forecaster of a sampled series (issue 36): the live forecasts, the anomaly detector's
// expectation and bench/forecast_eval all ask a model the same two questions, so which model is the default is a
// choice made from held-out figures (docs/forecasts.md, "Held-out evaluation"), not from code paths.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wattscope::forecast {

// A model sees a series one value per step (a missing reading is NaN: a model must skip it, never read it as 0)
// and forecasts the next `horizon` steps. Steps are the series' own (one sampler tick, or one resampled period).
class SeriesModel {
public:
  virtual ~SeriesModel() = default;
  virtual std::string_view name() const = 0;
  virtual void observe(double y) = 0;
  // Forecasts for steps 1..horizon ahead; empty while the model has seen too little to say anything.
  virtual std::vector<double> forecast(std::size_t horizon) const = 0;
};

// Known names: "last" (last value) is always there; bench/forecast_eval lists the others. Unknown name: nullptr.
std::unique_ptr<SeriesModel> make_series_model(std::string_view name);
std::vector<std::string> series_model_names();
// The model that won on held-out traces (docs/forecasts.md, "Held-out evaluation"): what every live forecast uses
// unless told otherwise.
std::string_view default_series_model();

// The period, in steps, of the strongest repetition in `ys` (NaN = missing, left out of the sums): the smallest lag
// in [min_period, max_period] at a local maximum of the autocorrelation within 10 % of the highest such maximum, and
// at least `min_acf`; 0 when none (no repetition, too few values: a lag needs two whole periods in `ys`). Cost
// O(size * max_period); callers bound both.
std::size_t detect_period(std::span<const double> ys, std::size_t min_period, std::size_t max_period,
                          double min_acf = 0.5);

} // namespace wattscope::forecast
