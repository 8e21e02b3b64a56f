#pragma once
// The trends a live forecast projects (forecast/live_forecast.hpp), fitted so that a healthy job does not page people:
//
// - recent_trend: the robust slope (core/trend.hpp) of the part of the history after its last change point: the
//   longest recent part whose slope disagrees with everything before it by more than half of the larger and by more
//   than the series' own noise over that time. A warm-up allocation followed by a flat line is a flat line from the
//   moment it stopped, a leak that speeds up is judged on its new rate.
// - saturating_temperature: a first-order (Newton's law of heating) curve T(t) = A + B e^(-t/tau) fitted by least
//   squares over a grid of time constants; where it explains the history much better than a straight line, the
//   temperature settles at A, and a GPU warming from cold toward 66 °C is not "about to reach 87 °C".
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>

#include "core/trend.hpp"

namespace wattscope::forecast {

struct TrendFit {
  RobustSlope rs;         // over the part it rests on (level at its last point)
  int64_t from_ms = 0;    // the part's first point
  int64_t to_ms = 0;      // its last
  bool cut = false;       // a change point was found: the part is the history after it
  double whole_slope = 0; // the whole history's least-squares slope
  double span_s() const { return static_cast<double>(to_ms - from_ms) / 1000.0; }
};

// Missing with fewer than two points at different times. `resolution`: the series' own step (1 for whole-degree
// sensors), under which no change is seen.
std::optional<TrendFit> recent_trend(const std::deque<TrendPoint>& pts, int64_t min_span_ms, double resolution = 0);

struct SaturatingFit {
  double asymptote = 0;   // A: where the curve settles
  double amplitude = 0;   // B (< 0: rising toward A)
  double tau_s = 0;       // the time constant
  double rmse = 0;        // of the curve
  double linear_rmse = 0; // of a least-squares straight line over the same points
  // Seconds from the last point until the curve reaches `level`; missing when it never does.
  std::optional<double> time_to(double level) const;
};

// Missing where the points are too few (under 8) or a first-order curve does not fit clearly better than a straight
// line (an F test of the one parameter it adds): then the history is a straight rise for all it shows.
std::optional<SaturatingFit> saturating_temperature(const std::deque<TrendPoint>& pts);

} // namespace wattscope::forecast
