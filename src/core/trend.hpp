// A robust trend of a sampled series (issue 36): the forecasts (forecast/live_forecast.hpp) and alert rules with
// `forecast = "15m"` (alerts/evaluator.hpp) project a metric along it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace wattscope {

struct TrendPoint {
  int64_t ts_ms;
  double y;
};

// Theil–Sen: the median of the slopes between every pair of points (per second), so a few outliers or a step move it
// little, with the 10th and 90th percentiles of those slopes as its interval; `level` is the fitted value at the last
// point's time (the median of the points moved along the slope). Missing when no two points differ in time. At most
// 64 points are used (evenly thinned in time, the last kept), so a call costs at most 2016 slopes.
struct RobustSlope {
  double slope = 0;
  double low = 0;
  double high = 0;
  double level = 0;
};
std::optional<RobustSlope> robust_slope(const std::deque<TrendPoint>& pts);

// At most max_points of `all`, evenly spread in time (the first at or after each of max_points even marks), the last
// always kept; all of them where there are no more.
std::vector<TrendPoint> thinned_in_time(const std::deque<TrendPoint>& all, size_t max_points);

// The q-quantile (0..1) of an ascending, non-empty vector, linear between neighbours.
double sorted_quantile(const std::vector<double>& sorted, double q);

} // namespace wattscope
