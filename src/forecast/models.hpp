#pragma once
// The models behind make_series_model(): not part of the interface, only of its factory and their tests.
#include "forecast/series_model.hpp"

#include <cstddef>
#include <memory>

namespace wattscope::forecast {

// Seasonal naive and Holt-Winters keep this many recent steps to find the period in; the longest period they look
// for is half of it (two whole periods must fit). 512 steps: 51 s at 100 ms, 8.5 min at 1 s.
inline constexpr std::size_t kSeasonWindow = 512;
inline constexpr std::size_t kMaxPeriod = kSeasonWindow / 2;
// The period is looked for again every this many steps: the autocorrelation costs kSeasonWindow * kMaxPeriod
// multiplications (131 k), so once per 32 steps is ~4 k per step, a few microseconds.
inline constexpr std::size_t kPeriodEvery = 32;

// The defaults are the grid search's best on the training traces' utilisation (`forecast_eval --tune-hw`,
// docs/forecasts.md): a quick level, no trend, a slow season.
struct HoltWintersParams {
  double alpha = 0.9;  // level
  double beta = 0;     // trend
  double gamma = 0.05; // season
};

std::unique_ptr<SeriesModel> make_seasonal_naive();
std::unique_ptr<SeriesModel> make_holt_winters(HoltWintersParams p = {});
std::unique_ptr<SeriesModel> make_lstm();

} // namespace wattscope::forecast
