#include "forecast/trend_fit.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace wattscope::forecast {

namespace {

std::optional<RobustSlope> slope_of(const std::deque<TrendPoint>& pts, size_t from, size_t to) {
  const std::deque<TrendPoint> part(pts.begin() + static_cast<std::ptrdiff_t>(from),
                                    pts.begin() + static_cast<std::ptrdiff_t>(to));
  return robust_slope(part);
}

// How the halving goes on: it stops where either half would have fewer points than this.
constexpr size_t kMinHalfPoints = 4;
constexpr int kMaxCuts = 3;
constexpr size_t kMaxSplits = 48;
// A split is significant where its F statistic against one line passes this (p < 0.001 for a few dozen points).
constexpr double kMinSplitF = 12;
// A first-order curve is taken for a temperature only when it explains the history clearly better than a line: its
// F statistic against the line over this (p < 0.005 for one added parameter and a few dozen points).
constexpr double kMinF = 10;
constexpr size_t kMinSaturatingPoints = 8;
constexpr size_t kMaxSaturatingPoints = 96;

// Least squares of a line over pts[a, b) from prefix sums: its squared error, and its slope.
struct Prefix {
  std::vector<double> t, y, tt, ty, yy; // sums of the first i points, t in seconds from the first
  explicit Prefix(const std::deque<TrendPoint>& pts) {
    const size_t n = pts.size();
    for (auto* v : {&t, &y, &tt, &ty, &yy})
      v->assign(n + 1, 0.0);
    const double t0 = static_cast<double>(pts.front().ts_ms) / 1000.0;
    for (size_t i = 0; i < n; ++i) {
      const double x = static_cast<double>(pts[i].ts_ms) / 1000.0 - t0, v = pts[i].y;
      t[i + 1] = t[i] + x, y[i + 1] = y[i] + v, tt[i + 1] = tt[i] + x * x, ty[i + 1] = ty[i] + x * v;
      yy[i + 1] = yy[i] + v * v;
    }
  }
  // Squared error and slope of the least-squares line over [a, b).
  std::pair<double, double> line(size_t a, size_t b) const {
    const auto m = static_cast<double>(b - a);
    const double st = t[b] - t[a], sy = y[b] - y[a], stt = tt[b] - tt[a], sty = ty[b] - ty[a], syy = yy[b] - yy[a];
    const double vt = stt - st * st / m, cty = sty - st * sy / m, vy = syy - sy * sy / m;
    if (!(vt > 1e-12)) return {std::max(0.0, vy), 0.0};
    return {std::max(0.0, vy - cty * cty / vt), cty / vt};
  }
};

// The split of pts[from, end) into two lines that is significant, as recent_trend says; the index its recent part
// starts at.
std::optional<size_t> best_split(const std::deque<TrendPoint>& pts, const Prefix& p, size_t from, int64_t min_span_ms,
                                 double resolution) {
  const size_t n = pts.size();
  if (n - from < 2 * kMinHalfPoints) return std::nullopt;
  const auto [sse_one, slope_one] = p.line(from, n);
  double best = sse_one;
  std::optional<size_t> at;
  double s_old = 0, s_new = 0;
  // Split points evenly through the part (at most kMaxSplits), each side with kMinHalfPoints points and the recent
  // side half the minimum span at least.
  const size_t lo = from + kMinHalfPoints, hi = n - kMinHalfPoints;
  const size_t step = std::max<size_t>(1, (hi - lo) / kMaxSplits);
  for (size_t k = lo; k <= hi; k += step) {
    if (pts.back().ts_ms - pts[k].ts_ms < min_span_ms / 2) break;
    const auto [sse_a, slope_a] = p.line(from, k);
    const auto [sse_b, slope_b] = p.line(k, n);
    if (sse_a + sse_b < best) best = sse_a + sse_b, at = k, s_old = slope_a, s_new = slope_b;
  }
  if (!at) return std::nullopt;
  const double m = static_cast<double>(n - from);
  const double f = best > 1e-12 ? (sse_one - best) / 2 / (best / (m - 4)) : (sse_one > 1e-9 ? kMinSplitF + 1 : 0.0);
  const double diff = std::fabs(s_new - s_old), larger = std::max(std::fabs(s_new), std::fabs(s_old));
  const double recent_s = static_cast<double>(pts.back().ts_ms - pts[*at].ts_ms) / 1000.0;
  if (!(f > kMinSplitF && diff > 0.5 * larger && diff * recent_s > 2 * resolution)) return std::nullopt;
  return at;
}

} // namespace

std::optional<TrendFit> recent_trend(const std::deque<TrendPoint>& pts, int64_t min_span_ms, double resolution) {
  const size_t n = pts.size();
  if (n < 2 || pts.back().ts_ms <= pts.front().ts_ms) return std::nullopt;
  // Segmented regression: the split of the history into two straight lines that removes the most squared error,
  // taken where it is significant (an F test of the two parameters it adds) and the two slopes differ by more than
  // half the larger and by more than the series' resolution over the recent part. The search is repeated within the
  // recent part (a leak that sped up and then stopped has two changes). The fit is then the robust slope of what
  // follows the last change: a warm-up allocation followed by a flat line is flat from where it stopped, a leak that
  // speeds up is judged on its new rate, a temperature that starts to rise after an hour flat on its rise alone. The
  // splits cost a few sums a point; the one robust fit is the dear part.
  const Prefix prefix(pts);
  TrendFit f;
  f.whole_slope = prefix.line(0, n).second;
  size_t from = 0;
  for (int depth = 0; depth < kMaxCuts; ++depth) {
    const auto k = best_split(pts, prefix, from, min_span_ms, resolution);
    if (!k) break;
    from = *k;
    f.cut = true;
  }
  const auto rs = from == 0 ? robust_slope(pts) : slope_of(pts, from, n);
  if (!rs) return std::nullopt;
  f.rs = *rs;
  f.from_ms = pts[from].ts_ms;
  f.to_ms = pts.back().ts_ms;
  return f;
}

std::optional<double> SaturatingFit::time_to(double level) const {
  const double now = asymptote + amplitude;
  if (now >= level) return 0.0;
  if (amplitude >= 0 || asymptote <= level) return std::nullopt; // cooling, or settling below the level
  const double ratio = (level - asymptote) / amplitude;          // in (0, 1)
  return -tau_s * std::log(ratio);
}

std::optional<SaturatingFit> saturating_temperature(const std::deque<TrendPoint>& all) {
  if (all.size() < kMinSaturatingPoints) return std::nullopt;
  // Thinned evenly in time (the history is dense where recent), the last point kept.
  const std::vector<TrendPoint> pts = thinned_in_time(all, kMaxSaturatingPoints);
  if (pts.size() < kMinSaturatingPoints) return std::nullopt;
  const double t0 = static_cast<double>(pts.front().ts_ms) / 1000.0;
  const double last = static_cast<double>(pts.back().ts_ms) / 1000.0 - t0;
  if (last <= 0) return std::nullopt;
  // Least squares of y = a + b x for given x: (a, b) and the RMS error.
  auto fit = [&](auto x_of, double& a, double& b) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const auto nn = static_cast<double>(pts.size());
    for (const auto& p : pts) {
      const double x = x_of(static_cast<double>(p.ts_ms) / 1000.0 - t0), y = p.y;
      sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    const double det = nn * sxx - sx * sx;
    if (!(std::fabs(det) > 1e-12 * (1 + nn * sxx))) return std::numeric_limits<double>::infinity();
    b = (nn * sxy - sx * sy) / det;
    a = (sy - b * sx) / nn;
    double sse = 0;
    for (const auto& p : pts) {
      const double e = p.y - (a + b * x_of(static_cast<double>(p.ts_ms) / 1000.0 - t0));
      sse += e * e;
    }
    return std::sqrt(sse / nn);
  };
  SaturatingFit best;
  double a = 0, b = 0;
  best.linear_rmse = fit([](double t) { return t; }, a, b);
  best.rmse = std::numeric_limits<double>::infinity();
  // Time constants from a tenth of the history to ten times it: a GPU heatsink's is tens of seconds to minutes.
  constexpr int kTaus = 24;
  for (int k = 0; k < kTaus; ++k) {
    const double tau = 0.1 * last * std::pow(100.0, static_cast<double>(k) / (kTaus - 1));
    const double rmse = fit([&](double t) { return std::exp((last - t) / tau); }, a, b);
    if (rmse < best.rmse) {
      best.rmse = rmse;
      best.asymptote = a;
      best.amplitude = b;
      best.tau_s = tau;
    }
  }
  // The longest time constants are a straight line in all but name. A curve only where its one more parameter buys
  // clearly more than noise would (an F test: the squared error it removes over the error per degree of freedom
  // left), so a straight ramp with whole-degree steps stays a straight ramp.
  const auto n = static_cast<double>(pts.size());
  const double sse = best.rmse * best.rmse * n, sse_line = best.linear_rmse * best.linear_rmse * n;
  const double f = sse > 1e-12 ? (sse_line - sse) / (sse / (n - 3)) : (sse_line > 1e-9 ? kMinF + 1 : 0.0);
  if (!(f > kMinF) || best.tau_s > 5 * last) return std::nullopt;
  return best;
}

} // namespace wattscope::forecast
