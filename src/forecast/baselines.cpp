// Seasonal naive and additive Holt-Winters (issue 36): the baselines the LSTM is measured against. Both find the
// season themselves (autocorrelation over their recent window), since a training run's period (an epoch) is not
// declared anywhere.
#include "forecast/models.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace wattscope::forecast {

std::size_t detect_period(std::span<const double> ys, std::size_t min_period, std::size_t max_period, double min_acf) {
  min_period = std::max<std::size_t>(min_period, 2);
  max_period = std::min(max_period, ys.size() / 2);
  if (min_period > max_period) return 0;
  double sum = 0;
  std::size_t n = 0;
  for (double y : ys)
    if (!std::isnan(y)) {
      sum += y;
      ++n;
    }
  if (n < 2 * min_period) return 0;
  const double mean = sum / static_cast<double>(n);
  double var = 0;
  for (double y : ys)
    if (!std::isnan(y)) var += (y - mean) * (y - mean);
  var /= static_cast<double>(n);
  if (!(var > 0)) return 0; // a constant repeats at every lag: no season to speak of
  // r[k] for k in [min_period - 1, max_period + 1]: the neighbours decide whether k is a local maximum.
  const std::size_t lo = min_period - 1, hi = std::min(max_period + 1, ys.size() - 1);
  std::vector<double> r(hi + 1, -2.0);
  for (std::size_t k = lo; k <= hi; ++k) {
    double acc = 0;
    std::size_t pairs = 0;
    for (std::size_t i = k; i < ys.size(); ++i) {
      const double a = ys[i], b = ys[i - k];
      if (std::isnan(a) || std::isnan(b)) continue;
      acc += (a - mean) * (b - mean);
      ++pairs;
    }
    // A lag seen in too few pairs says nothing (a long gap of NaN); it stays at -2, never a maximum.
    if (pairs * 4 >= n) r[k] = acc / static_cast<double>(pairs) / var;
  }
  double best = -1;
  for (std::size_t k = min_period; k <= max_period; ++k)
    if (r[k] >= r[k - 1] && (k + 1 > hi || r[k] >= r[k + 1])) best = std::max(best, r[k]);
  if (best < min_acf) return 0;
  // The smallest lag near the best: a sine of period 20 correlates as well at 40 and 60, and 20 is its period.
  for (std::size_t k = min_period; k <= max_period; ++k)
    if (r[k] >= r[k - 1] && (k + 1 > hi || r[k] >= r[k + 1]) && r[k] >= best - 0.1 * std::abs(best)) return k;
  return 0;
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The last kSeasonWindow steps (NaN kept in place, so that lags stay lags) and the period found in them.
class SeasonTracker {
public:
  void push(double y) {
    ring_[head_] = y;
    head_ = (head_ + 1) % kSeasonWindow;
    size_ = std::min(size_ + 1, kSeasonWindow);
    if (++since_ >= kPeriodEvery) {
      since_ = 0;
      std::array<double, kSeasonWindow> tmp;
      for (std::size_t i = 0; i < size_; ++i)
        tmp[i] = at(size_ - i);
      period_ = detect_period(std::span<const double>(tmp.data(), size_), 2, kMaxPeriod);
    }
  }
  // The value `back` steps ago (1 = the latest); NaN beyond what is kept.
  double at(std::size_t back) const {
    if (back == 0 || back > size_) return kNaN;
    return ring_[(head_ + kSeasonWindow - back) % kSeasonWindow];
  }
  std::size_t period() const { return period_; }

private:
  std::array<double, kSeasonWindow> ring_{};
  std::size_t head_ = 0, size_ = 0, since_ = 0, period_ = 0;
};

class SeasonalNaive final : public SeriesModel {
public:
  std::string_view name() const override { return "seasonal_naive"; }
  void observe(double y) override {
    season_.push(y);
    if (!std::isnan(y)) {
      last_ = y;
      seen_ = true;
    }
  }
  // y(t+h) = y(t+h-kP), the same point of the latest whole period; the last value where that was missing, and
  // everywhere while no period is found.
  std::vector<double> forecast(std::size_t horizon) const override {
    if (!seen_) return {};
    std::vector<double> out(horizon, last_);
    const std::size_t p = season_.period();
    if (p == 0) return out;
    for (std::size_t h = 1; h <= horizon; ++h) {
      const std::size_t back = p * ((h + p - 1) / p) - h + 1; // steps back from the latest, 1-based
      const double v = season_.at(back);
      if (!std::isnan(v)) out[h - 1] = v;
    }
    return out;
  }

private:
  SeasonTracker season_;
  double last_ = 0;
  bool seen_ = false;
};

// Additive Holt-Winters (Holt 1957, Winters 1960), updated one step at a time. The season is the tracker's period;
// when that changes the seasonal terms start again from zero (they are the old period's). Without a period it is
// Holt's linear method. The trend is not damped: on a line it converges to the line (tests/unit/test_forecast_models).
class HoltWinters final : public SeriesModel {
public:
  explicit HoltWinters(HoltWintersParams p) : p_(p) {}
  std::string_view name() const override { return "holt_winters"; }
  void observe(double y) override {
    season_.push(y);
    const std::size_t period = season_.period();
    if (period != seasonal_.size()) rescale_season(period);
    if (std::isnan(y)) { // time passes: the level moves on along the trend, the season turns
      if (seen_) level_ += trend_;
      if (!seasonal_.empty()) idx_ = (idx_ + 1) % seasonal_.size();
      return;
    }
    if (!seen_) {
      level_ = y;
      trend_ = 0;
      seen_ = true;
      if (!seasonal_.empty()) idx_ = (idx_ + 1) % seasonal_.size();
      return;
    }
    const double s = seasonal_.empty() ? 0.0 : seasonal_[idx_];
    const double prev = level_;
    level_ = p_.alpha * (y - s) + (1 - p_.alpha) * (level_ + trend_);
    trend_ = p_.beta * (level_ - prev) + (1 - p_.beta) * trend_;
    if (!seasonal_.empty()) {
      seasonal_[idx_] = p_.gamma * (y - level_) + (1 - p_.gamma) * s;
      idx_ = (idx_ + 1) % seasonal_.size();
    }
  }
  std::vector<double> forecast(std::size_t horizon) const override {
    if (!seen_) return {};
    std::vector<double> out(horizon);
    for (std::size_t h = 1; h <= horizon; ++h) {
      const double s = seasonal_.empty() ? 0.0 : seasonal_[(idx_ + h - 1) % seasonal_.size()];
      out[h - 1] = level_ + static_cast<double>(h) * trend_ + s;
    }
    return out;
  }

private:
  // The season learnt is kept across a change of the detected period: stretched or shrunk to the new length (the
  // same point of the cycle at the same share of it), and put aside while no period is found, so a period that
  // blinks does not throw away what was learnt.
  void rescale_season(std::size_t period) {
    if (period == 0) {
      if (!seasonal_.empty()) kept_ = seasonal_, kept_idx_ = idx_;
      seasonal_.clear();
      idx_ = 0;
      return;
    }
    const std::vector<double>& from = seasonal_.empty() ? kept_ : seasonal_;
    const std::size_t from_idx = seasonal_.empty() ? kept_idx_ : idx_;
    std::vector<double> to(period, 0.0);
    if (!from.empty())
      for (std::size_t i = 0; i < period; ++i)
        to[i] = from[(i * from.size()) / period];
    idx_ = from.empty() ? 0 : (from_idx * period) / from.size() % period;
    seasonal_ = std::move(to);
  }

  HoltWintersParams p_;
  std::vector<double> kept_; // the last season while no period is found
  std::size_t kept_idx_ = 0;
  SeasonTracker season_;
  std::vector<double> seasonal_; // at most kMaxPeriod terms
  std::size_t idx_ = 0;          // the seasonal term of the next step
  double level_ = 0, trend_ = 0;
  bool seen_ = false;
};

} // namespace

std::unique_ptr<SeriesModel> make_seasonal_naive() {
  return std::make_unique<SeasonalNaive>();
}
std::unique_ptr<SeriesModel> make_holt_winters(HoltWintersParams p) {
  return std::make_unique<HoltWinters>(p);
}

} // namespace wattscope::forecast
