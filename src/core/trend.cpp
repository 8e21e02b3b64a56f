#include "core/trend.hpp"

#include <algorithm>
#include <vector>

namespace wattscope {

namespace {
constexpr size_t kMaxSlopePoints = 64;
} // namespace

double sorted_quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto i = static_cast<size_t>(pos);
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + (sorted[i + 1] - sorted[i]) * (pos - static_cast<double>(i));
}

std::vector<TrendPoint> thinned_in_time(const std::deque<TrendPoint>& all, size_t max_points) {
  if (all.size() <= max_points || max_points < 2) return {all.begin(), all.end()};
  std::vector<TrendPoint> pts;
  const double t0 = static_cast<double>(all.front().ts_ms), span = static_cast<double>(all.back().ts_ms) - t0;
  size_t k = 0;
  for (size_t i = 0; i + 1 < all.size() && k + 1 < max_points; ++i)
    if (static_cast<double>(all[i].ts_ms) >= t0 + span * static_cast<double>(k) / static_cast<double>(max_points - 1)) {
      pts.push_back(all[i]);
      ++k;
    }
  pts.push_back(all.back());
  return pts;
}

std::optional<RobustSlope> robust_slope(const std::deque<TrendPoint>& all) {
  if (all.size() < 2) return std::nullopt;
  // Thinned evenly in time (a history may be dense where recent and sparse where old: thinning by index would fit
  // its last minute and call it the window's); the fit's level is taken at the last point.
  const std::vector<TrendPoint> pts = thinned_in_time(all, kMaxSlopePoints);
  const size_t n = pts.size();
  const double t_last = static_cast<double>(pts.back().ts_ms) / 1000.0;
  std::vector<double> slopes;
  slopes.reserve(n * (n - 1) / 2);
  for (size_t i = 0; i < pts.size(); ++i)
    for (size_t j = i + 1; j < pts.size(); ++j) {
      const double dt = static_cast<double>(pts[j].ts_ms - pts[i].ts_ms) / 1000.0;
      if (dt > 0) slopes.push_back((pts[j].y - pts[i].y) / dt);
    }
  if (slopes.empty()) return std::nullopt;
  // Three order statistics, not a sort: a forecast asks for several fits a second on every GPU.
  auto quantile = [](std::vector<double>& v, double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto i = static_cast<size_t>(pos);
    const auto at = v.begin() + static_cast<std::ptrdiff_t>(i);
    std::nth_element(v.begin(), at, v.end());
    const double lo = *at;
    if (i + 1 >= v.size()) return lo;
    const double hi = *std::min_element(at + 1, v.end());
    return lo + (hi - lo) * (pos - static_cast<double>(i));
  };
  RobustSlope r;
  r.slope = quantile(slopes, 0.5);
  r.low = quantile(slopes, 0.1);
  r.high = quantile(slopes, 0.9);
  std::vector<double> levels;
  for (const auto& p : pts)
    levels.push_back(p.y + r.slope * (t_last - static_cast<double>(p.ts_ms) / 1000.0));
  r.level = quantile(levels, 0.5);
  return r;
}

} // namespace wattscope
