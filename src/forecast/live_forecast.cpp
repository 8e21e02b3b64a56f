#include "forecast/live_forecast.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/json_opt.hpp"
#include "forecast/trend_fit.hpp"

namespace wattscope::forecast {

namespace {
using json = nlohmann::json;

// Below these a series is flat for our purpose: a byte a second fills 80 GB in 2.5 years; 0.03 °C a minute
// reaches a throttle point 30 °C away in 16 hours.
constexpr double kMinMemGrowthBytesPerS = 1.0;
constexpr double kMinTempRiseCPerS = 0.0005;
constexpr size_t kMaxEpochs = 64;
constexpr size_t kMinEpochs = 3;
constexpr size_t kMaxUtilSteps = 600;
// A trend that adds less than this share of the device's memory over its history is an allocator's noise.
constexpr double kMinMemGrowthShare = 0.005;
// A memory series within this share of the device over the whole window is flat (allocator noise, an evaluation's
// activations): no fit is made.
constexpr double kFlatMemShare = 0.01;
// History thinning: a point of age a is kept a/this from the next (Series::add).
constexpr int64_t kAgeSpacingDivisor = 64;
// GPU temperature sensors read whole degrees.
constexpr double kTempResolutionC = 1;

std::optional<std::string> short_history(const std::deque<LiveForecaster::Point>& pts, size_t min_points,
                                         int64_t min_span_ms) {
  const int64_t span = pts.empty() ? 0 : pts.back().ts_ms - pts.front().ts_ms;
  if (pts.size() >= min_points && span >= min_span_ms) return std::nullopt;
  return fmt::format("not enough history ({} readings over {:.0f} s; needs {} over {:.0f} s)", pts.size(),
                     static_cast<double>(span) / 1000.0, min_points, static_cast<double>(min_span_ms) / 1000.0);
}

// Seconds until a level rising at `slope` (with its interval) reaches `limit`, counted from the fit's last point
// and then from `now`. The slower end is missing when the interval's slow slope does not rise at all.
Estimate time_to(double limit, const RobustSlope& rs, double since_last_s) {
  Estimate e;
  const double gap = limit - rs.level;
  auto at = [&](double slope) { return std::max(0.0, gap / slope - since_last_s); };
  if (gap <= 0) {
    e.value = e.low = e.high = 0.0;
    return e;
  }
  e.value = at(rs.slope);
  e.low = at(std::max(rs.high, rs.slope));
  if (rs.low > 0) e.high = at(std::min(rs.low, rs.slope));
  return e;
}

json estimate_json(const Estimate& e, const char* unit) {
  return {{fmt::format("in_{}", unit), opt(e.value)},
          {fmt::format("low_{}", unit), opt(e.low)},
          {fmt::format("high_{}", unit), opt(e.high)}};
}

std::string human_bytes(double b) {
  if (std::fabs(b) >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (std::fabs(b) >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{:.0f} B", b);
}

std::string human_energy(double j) {
  if (j >= 1e9) return fmt::format("{:.2f} GJ", j / 1e9);
  if (j >= 1e6) return fmt::format("{:.2f} MJ", j / 1e6);
  if (j >= 1e3) return fmt::format("{:.1f} kJ", j / 1e3);
  return fmt::format("{:.0f} J", j);
}
} // namespace

std::string human_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 90) return fmt::format("{:.0f} s", s);
  const auto min = static_cast<int64_t>(std::llround(s / 60.0));
  if (min < 60) return fmt::format("{} min", min);
  return fmt::format("{} h {:02d} min", min / 60, static_cast<int>(min % 60));
}

void LiveForecaster::Series::add(int64_t ts_ms, double y, const Options& o) {
  if (!std::isfinite(y)) return;
  if (!pts.empty() && ts_ms < pts.back().ts_ms) pts.clear(); // time went back (a new run's clock): start over
  // Points stay min_spacing_ms apart, except the last, which is always the latest reading.
  if (pts.size() >= 2 && ts_ms - pts[pts.size() - 2].ts_ms < o.min_spacing_ms)
    pts.back() = {ts_ms, y};
  else
    pts.push_back({ts_ms, y});
  while (!pts.empty() && ts_ms - pts.front().ts_ms > o.window_ms)
    pts.pop_front();
  // Full: thinned so that a point of age a stands a/64 from the next kept one (min_spacing_ms at least). The points
  // then cover the whole window at any interval (seconds, not samples: 512 points at 100 ms would be 51 s), dense
  // where recent and sparser with age, about 64 ln(window / (64 x spacing)) + 64 of them: 380 at 100 ms, 230 at 1 s.
  if (pts.size() > kMaxPoints) {
    std::deque<Point> kept;
    kept.push_front(pts.back());
    for (size_t i = pts.size() - 1; i-- > 0;) {
      const int64_t gap = std::max<int64_t>(o.min_spacing_ms, (ts_ms - pts[i].ts_ms) / kAgeSpacingDivisor);
      if (kept.front().ts_ms - pts[i].ts_ms >= gap) kept.push_front(pts[i]);
    }
    pts.swap(kept);
  }
}

LiveForecaster::LiveForecaster(Options o) : o_(std::move(o)) {
  if (!make_series_model(o_.model)) o_.model = "last";
}

LiveForecaster::Device& LiveForecaster::device(int gpu_index) {
  auto it = devices_.find(gpu_index);
  if (it != devices_.end()) return it->second;
  Device& d = devices_[gpu_index];
  d.util = make_series_model(o_.model);
  return d;
}

void LiveForecaster::set_throttle_temp(int gpu_index, double celsius) {
  if (!std::isfinite(celsius) || celsius <= 0 || celsius > 200) return;
  if (devices_.size() >= kMaxDevices && !devices_.count(gpu_index)) return;
  device(gpu_index).throttle_c = celsius;
}

void LiveForecaster::set_energy_method(std::string method) {
  energy_method_ = std::move(method);
}

void LiveForecaster::observe(const Frame& f) {
  double energy = 0;
  bool any_energy = false;
  for (const auto& g : f.gpus) {
    if (devices_.size() >= kMaxDevices && !devices_.count(g.gpu_index)) continue;
    Device& d = device(g.gpu_index);
    if (g.mem_used_bytes) {
      d.mem.add(f.ts_ms, static_cast<double>(*g.mem_used_bytes), o_);
      d.last_mem = g.mem_used_bytes;
      if (epoch_) d.epoch_peak = std::max(d.epoch_peak.value_or(0.0), static_cast<double>(*g.mem_used_bytes));
    }
    if (g.mem_total_bytes && *g.mem_total_bytes > 0) d.mem_total = g.mem_total_bytes;
    if (g.temp_gpu_c) d.temp.add(f.ts_ms, *g.temp_gpu_c, o_);
    // The utilisation model sees one value a second (the mean of its ticks; at longer intervals each tick's): its
    // windows are seconds at any interval, and a fast interval costs a sum a tick.
    if (d.last_util_ms > 0 && f.ts_ms > d.last_util_ms) d.tick_ms = static_cast<double>(f.ts_ms - d.last_util_ms);
    d.last_util_ms = f.ts_ms;
    if (d.util_second_ms < 0) d.util_second_ms = f.ts_ms;
    if (g.util_gpu_pct) d.util_sum += *g.util_gpu_pct, ++d.util_n;
    if (static_cast<double>(f.ts_ms - d.util_second_ms) + std::max(d.tick_ms, 1.0) >= 1000) {
      d.util->observe(d.util_n ? d.util_sum / d.util_n : std::numeric_limits<double>::quiet_NaN());
      d.step_ms = std::max(1000.0, d.tick_ms);
      d.util_sum = 0, d.util_n = 0, d.util_second_ms = -1;
    }
    if (g.energy_j) {
      energy += *g.energy_j;
      any_energy = true;
    }
  }
  for (const OptF& e : {f.cpu.package_energy_j, f.cpu.dram_energy_j})
    if (e) {
      energy += *e;
      any_energy = true;
    }
  if (any_energy) energy_.add(f.ts_ms, energy, o_);
}

void LiveForecaster::observe_work(const WorkRecord& w) {
  if (!work_.count(w.unit) && work_.size() >= kMaxUnits) return;
  Work& k = work_[w.unit];
  k.done += w.amount;
  if (w.total) k.total = w.total;
  k.cumulative.add(w.ts_ms, k.done, o_);
}

void LiveForecaster::observe_phase_begin(const std::string&, OptI index, int64_t ts_ms) {
  // An indexed phase is an epoch (or a step of some numbered loop): memory at its start is one point of the
  // per-epoch growth. A repeated index (a nested phase with its own numbering) is not a new epoch.
  if (!index || (epoch_ && *index <= *epoch_)) return;
  for (auto& [gpu, d] : devices_) {
    if (epoch_ && d.epoch_peak) d.epochs.push_back({*epoch_, epoch_start_ms_, *d.epoch_peak});
    d.epoch_peak.reset();
    while (d.epochs.size() > kMaxEpochs)
      d.epochs.pop_front();
  }
  epoch_ = index;
  epoch_start_ms_ = ts_ms;
}

// Beyond what the history can carry: further than max_projection times the span it rests on, noise becomes a trend.
std::optional<std::string> LiveForecaster::too_far(const Estimate& e, double history_s) const {
  if (!e.value || *e.value <= o_.max_projection * history_s) return std::nullopt;
  return fmt::format("a trend over {} does not reach {} ahead (at most {:g}x its history)", human_duration(history_s),
                     human_duration(*e.value), o_.max_projection);
}

void LiveForecaster::forecast_oom(const Device& d, int64_t now_ms, DeviceForecast& df) const {
  if (!d.mem_total) {
    df.oom_basis = "the device's memory size is unknown";
    return;
  }
  if (auto why = short_history(d.mem.pts, o_.min_points, o_.min_span_ms)) {
    df.oom_basis = *why;
    return;
  }
  const double total_bytes = static_cast<double>(*d.mem_total);
  if (d.epochs.size() < kMinEpochs) { // within 1 % of the device over the whole window: nothing to fit
    const auto [lo, hi] = std::minmax_element(d.mem.pts.begin(), d.mem.pts.end(),
                                              [](const Point& a, const Point& b) { return a.y < b.y; });
    if (hi->y - lo->y < kFlatMemShare * total_bytes) {
      df.mem_growth_bytes_per_s = 0.0;
      df.oom_basis = fmt::format("memory keeps within {} (1 % of the device)", human_bytes(hi->y - lo->y));
      return;
    }
  }
  const auto fit = recent_trend(d.mem.pts, o_.min_span_ms);
  if (!fit) return;
  const RobustSlope& rs = fit->rs;
  const double total = static_cast<double>(*d.mem_total);
  df.mem_growth_bytes_per_s = rs.slope;
  const double since_last = static_cast<double>(now_ms - d.mem.pts.back().ts_ms) / 1000.0;
  // Per epoch where at least kMinEpochs epochs were marked: a leak that grows at each epoch's start is a step,
  // which a per-epoch fit gets exactly, with the epoch it happens in.
  std::optional<RobustSlope> per_epoch;
  double epoch_s = 0;
  if (d.epochs.size() >= kMinEpochs) {
    std::deque<Point> by_index;
    std::vector<double> durations;
    for (size_t i = 0; i < d.epochs.size(); ++i) {
      // The fit runs on epoch index as "time" (1000 ms per epoch, so slopes come out per epoch).
      by_index.push_back({d.epochs[i].index * 1000, d.epochs[i].bytes});
      if (i > 0)
        durations.push_back(static_cast<double>(d.epochs[i].start_ms - d.epochs[i - 1].start_ms) / 1000.0 /
                            static_cast<double>(d.epochs[i].index - d.epochs[i - 1].index));
    }
    std::sort(durations.begin(), durations.end());
    epoch_s = sorted_quantile(durations, 0.5);
    per_epoch = robust_slope(by_index);
  }
  if (per_epoch && epoch_s > 0) {
    df.mem_growth_bytes_per_epoch = per_epoch->slope;
    const auto& last = d.epochs.back();
    if (per_epoch->slope < kMinMemGrowthBytesPerS * epoch_s) {
      df.oom_basis = fmt::format("memory is not growing from epoch to epoch (over {} epochs)", d.epochs.size());
      return;
    }
    // Epoch e's peak: level + g (e - last). The first epoch whose peak reaches the device's memory is where it runs
    // out, at the latest; its start (epoch_s per epoch after the last complete one's) is the time given, the earliest
    // it can happen, so the warning is never late.
    auto epochs_to = [&](double g) { return std::max(0.0, std::ceil((total - per_epoch->level) / g)); };
    auto at = [&](double g) {
      return std::max(0.0, static_cast<double>(last.start_ms - now_ms) / 1000.0 + epochs_to(g) * epoch_s);
    };
    Estimate e;
    e.value = at(per_epoch->slope);
    e.low = at(std::max(per_epoch->high, per_epoch->slope));
    if (per_epoch->low > 0) e.high = at(std::min(per_epoch->low, per_epoch->slope));
    const double history_s = static_cast<double>(now_ms - d.epochs.front().start_ms) / 1000.0;
    if (auto far = too_far(e, history_s)) {
      df.oom_basis = fmt::format("memory grows {} an epoch, but {}", human_bytes(per_epoch->slope), *far);
      df.oom_unsure = true;
      return;
    }
    df.oom_in_s = e;
    df.oom_epoch = last.index + static_cast<int64_t>(epochs_to(per_epoch->slope));
    df.oom_basis =
        fmt::format("the peak memory of the last {} epochs grows {} an epoch (median; epochs take {}); the "
                    "device has {}",
                    d.epochs.size(), human_bytes(per_epoch->slope), human_duration(epoch_s), human_bytes(total));
    return;
  }
  if (rs.slope < kMinMemGrowthBytesPerS || rs.slope * fit->span_s() < kMinMemGrowthShare * total) {
    df.oom_basis = fit->cut ? fmt::format("memory is not growing (over the last {}, since its trend changed)",
                                          human_duration(fit->span_s()))
                            : std::string("memory is not growing");
    return;
  }
  const Estimate e = time_to(total, rs, since_last);
  const std::string rate =
      fmt::format("memory grows {}/min (robust slope over the last {}{})", human_bytes(rs.slope * 60),
                  human_duration(fit->span_s()), fit->cut ? ", since its trend changed" : "");
  if (auto far = too_far(e, fit->span_s())) {
    df.oom_basis = rate + ", but " + *far;
    df.oom_unsure = true;
    return;
  }
  df.oom_in_s = e;
  if (epoch_ && epoch_s > 0 && df.oom_in_s.value)
    df.oom_epoch = *epoch_ + static_cast<int64_t>(*df.oom_in_s.value / epoch_s);
  df.oom_basis = fmt::format("{}; the device has {}", rate, human_bytes(total));
}

// A throttle forecast rests on min_throttle_history_ms of its trend at least.
std::optional<std::string> LiveForecaster::too_short(double history_s) const {
  const double min_s = static_cast<double>(o_.min_throttle_history_ms) / 1000.0;
  if (history_s >= min_s) return std::nullopt;
  return fmt::format("a throttle forecast rests on {} of a trend at least, and this one has {}", human_duration(min_s),
                     human_duration(history_s));
}

void LiveForecaster::forecast_throttle(const Device& d, int64_t now_ms, DeviceForecast& df) const {
  df.throttle_temp_c = d.throttle_c.value_or(o_.default_throttle_c);
  df.throttle_temp_default = !d.throttle_c;
  const std::string point = fmt::format("throttle point {:.0f} °C ({})", df.throttle_temp_c,
                                        d.throttle_c ? "the device's slowdown temperature" : "default");
  if (auto why = short_history(d.temp.pts, o_.min_points, o_.min_span_ms)) {
    df.throttle_basis = *why;
    return;
  }
  // Within the sensor's whole degrees over the whole window: nothing to fit.
  const auto [lo, hi] = std::minmax_element(d.temp.pts.begin(), d.temp.pts.end(),
                                            [](const Point& a, const Point& b) { return a.y < b.y; });
  if (hi->y < df.throttle_temp_c && hi->y - lo->y <= o_.min_temp_rise_c) {
    df.temp_rise_c_per_s = 0.0;
    df.throttle_basis =
        fmt::format("the temperature keeps within {:.0f} °C (the sensor reads whole degrees)", hi->y - lo->y);
    return;
  }
  const auto fit = recent_trend(d.temp.pts, o_.min_span_ms, kTempResolutionC);
  if (!fit) return;
  const RobustSlope& rs = fit->rs;
  df.temp_rise_c_per_s = rs.slope;
  const double since_last = static_cast<double>(now_ms - d.temp.pts.back().ts_ms) / 1000.0;
  if (rs.level >= df.throttle_temp_c) {
    df.throttle_in_s = time_to(df.throttle_temp_c, rs, since_last);
    df.throttle_basis = fmt::format("the temperature is at the {}", point);
    return;
  }
  if (rs.slope < kMinTempRiseCPerS) {
    df.throttle_basis = "the temperature is not rising";
    return;
  }
  // Below where it has already been in the window: a GPU warming back after a stall or a pause returns to its level;
  // a trend toward the throttle point sets new highs.
  if (rs.level < hi->y - kTempResolutionC) {
    df.throttle_basis = fmt::format("the temperature rises {:.2f} °C/min back toward the {:.0f} °C it was at in the "
                                    "last {}: a return, not a new trend",
                                    rs.slope * 60, hi->y, human_duration(static_cast<double>(o_.window_ms) / 1000.0));
    return;
  }
  // A first-order curve that fits: where it settles, and when it passes the throttle point if it does.
  // Over the whole history where it bends the way heating settles (a change point to a slower rise), over the part
  // after the change point where the rise sped up: a GPU that settled long ago and now heats up again is a new trend.
  const bool sped_up = fit->cut && fit->rs.slope > fit->whole_slope;
  std::deque<Point> part;
  for (const auto& p : d.temp.pts)
    if (!sped_up || p.ts_ms >= fit->from_ms) part.push_back(p);
  if (const auto sat = saturating_temperature(part)) {
    df.temp_settles_c = sat->asymptote;
    const double history_s = static_cast<double>(part.back().ts_ms - part.front().ts_ms) / 1000.0;
    const std::string curve = fmt::format("the temperature follows a first-order curve settling near {:.0f} °C (time "
                                          "constant {}, over the last {})",
                                          sat->asymptote, human_duration(sat->tau_s), human_duration(history_s));
    const auto t = sat->time_to(df.throttle_temp_c);
    if (!t || sat->amplitude >= 0) {
      df.throttle_basis = curve + "; " + point;
      return;
    }
    Estimate e;
    e.value = std::max(0.0, *t - since_last);
    // The interval of the straight trend's slope, carried over as a share of the time.
    e.low = *e.value * (rs.high > rs.slope && rs.slope > 0 ? rs.slope / rs.high : 1.0);
    if (rs.low > 0 && rs.slope > 0) e.high = *e.value * rs.slope / std::min(rs.low, rs.slope);
    if (auto far = too_far(e, history_s)) {
      df.throttle_basis = curve + ", but " + *far;
      df.throttle_unsure = true;
      return;
    }
    if (auto short_of = too_short(history_s)) {
      df.throttle_basis = curve + ", but " + *short_of;
      df.throttle_unsure = true;
      return;
    }
    df.throttle_in_s = e;
    df.throttle_basis = curve + "; " + point;
    return;
  }
  if (auto short_of = too_short(fit->span_s())) {
    df.throttle_basis =
        fmt::format("the temperature rises {:.2f} °C/min (since its trend changed), but {}", rs.slope * 60, *short_of);
    df.throttle_unsure = true;
    return;
  }
  const double rise = rs.slope * fit->span_s();
  if (rise < o_.min_temp_rise_c) {
    df.throttle_basis = fmt::format("the temperature rose {:.1f} °C over the last {}: within the sensor's whole "
                                    "degrees, not a trend",
                                    rise, human_duration(fit->span_s()));
    return;
  }
  const Estimate e = time_to(df.throttle_temp_c, rs, since_last);
  const std::string slope =
      fmt::format("temperature rises {:.2f} °C/min (robust slope over the last {}{})", rs.slope * 60,
                  human_duration(fit->span_s()), fit->cut ? ", since its trend changed" : "");
  if (auto far = too_far(e, fit->span_s())) {
    df.throttle_basis = slope + ", but " + *far;
    df.throttle_unsure = true;
    return;
  }
  df.throttle_in_s = e;
  df.throttle_basis = slope + "; " + point;
}

void LiveForecaster::forecast_util(const Device& d, DeviceForecast& df) const {
  df.util_model = std::string(d.util->name());
  const size_t steps =
      d.step_ms > 0
          ? std::clamp<size_t>(static_cast<size_t>(static_cast<double>(o_.horizon_ms) / d.step_ms), 1, kMaxUtilSteps)
          : 0;
  const std::vector<double> f = steps ? d.util->forecast(steps) : std::vector<double>{};
  if (f.empty()) {
    df.util_basis = "not enough history";
    return;
  }
  double sum = 0, peak = -1;
  size_t peak_at = 0;
  for (size_t k = 0; k < f.size(); ++k) {
    const double v = std::clamp(f[k], 0.0, 100.0);
    sum += v;
    if (v > peak) peak = v, peak_at = k + 1;
  }
  df.util_next_mean_pct = sum / static_cast<double>(f.size());
  df.util_next_peak_pct = peak;
  df.util_next_peak_in_s = static_cast<double>(peak_at) * d.step_ms / 1000.0;
  df.util_basis = fmt::format("{} steps of {:.0f} ms ahead, model '{}'", f.size(), d.step_ms, df.util_model);
}

FinishForecast LiveForecaster::forecast_finish(const std::string& unit, const Work& w, int64_t now_ms) const {
  FinishForecast ff;
  ff.unit = unit;
  ff.done = w.done;
  ff.total = *w.total;
  ff.energy_method = (energy_method_.empty() ? std::string("measured") : energy_method_) + ", extrapolated";
  if (w.done >= *w.total) {
    ff.finish_in_s.value = ff.finish_in_s.low = ff.finish_in_s.high = 0.0;
    ff.energy_to_finish_j.value = ff.energy_to_finish_j.low = ff.energy_to_finish_j.high = 0.0;
    ff.basis = "the declared total is done";
    return ff;
  }
  if (auto why = short_history(w.cumulative.pts, o_.min_points, o_.min_span_ms)) {
    ff.basis = *why;
    return ff;
  }
  const auto rs = robust_slope(w.cumulative.pts);
  if (!rs || rs->slope <= 0) {
    ff.basis = "no work is being done";
    return ff;
  }
  ff.rate_per_s = rs->slope;
  const double since_last = static_cast<double>(now_ms - w.cumulative.pts.back().ts_ms) / 1000.0;
  ff.finish_in_s = time_to(*w.total, *rs, since_last);
  ff.basis = fmt::format("{:.4g} {}/s (robust slope over the last {:.0f} s); {:.6g} of {:.6g} done", rs->slope, unit,
                         static_cast<double>(w.cumulative.pts.back().ts_ms - w.cumulative.pts.front().ts_ms) / 1000.0,
                         w.done, *w.total);
  if (auto why_e = short_history(energy_.pts, o_.min_points, o_.min_span_ms)) {
    ff.basis += "; energy: " + *why_e;
  } else if (auto pe = robust_slope(energy_.pts); pe && pe->slope >= 0) {
    // Power over the window times the time left, each at its interval's ends.
    ff.power_w = pe->slope;
    ff.energy_to_finish_j.value = pe->slope * *ff.finish_in_s.value;
    ff.energy_to_finish_j.low = std::max(0.0, std::min(pe->low, pe->slope)) * *ff.finish_in_s.low;
    if (ff.finish_in_s.high) ff.energy_to_finish_j.high = std::max(pe->high, pe->slope) * *ff.finish_in_s.high;
    ff.basis += fmt::format("; energy: {:.0f} W (slope of the run's cumulative energy) × the time left", pe->slope);
  }
  return ff;
}

Snapshot LiveForecaster::forecast(int64_t now_ms) const {
  Snapshot s;
  s.ts_ms = now_ms;
  // The devices' forecasts are made every device_every_ms; in between, the last ones are given with their times
  // counted down (a trend of minutes does not move in a second, and the fits cost most of a forecast).
  const bool fresh =
      cache_.devices.size() == devices_.size() && now_ms >= cache_.ts_ms && now_ms - cache_.ts_ms < o_.device_every_ms;
  if (fresh) {
    const double aged = static_cast<double>(now_ms - cache_.ts_ms) / 1000.0;
    auto count_down = [&](Estimate& e) {
      for (OptF* v : {&e.value, &e.low, &e.high})
        if (*v) **v = std::max(0.0, **v - aged);
    };
    s.devices = cache_.devices;
    for (auto& df : s.devices) {
      count_down(df.oom_in_s);
      count_down(df.throttle_in_s);
    }
  } else {
    for (const auto& [gpu, d] : devices_) {
      DeviceForecast df;
      df.gpu_index = gpu;
      forecast_oom(d, now_ms, df);
      forecast_throttle(d, now_ms, df);
      forecast_util(d, df);
      s.devices.push_back(std::move(df));
    }
    cache_.devices = s.devices;
    cache_.ts_ms = now_ms;
  }
  // The finish of every unit with a declared total.
  for (const auto& [unit, w] : work_)
    if (w.total) s.finish.push_back(forecast_finish(unit, w, now_ms));
  return s;
}

// One forecast's event: announced when it first comes within warn_within_ms, updated when its time left moves by
// more than update_share of what was said, withdrawn once it has not held for withdraw_after_ms. A forecast that
// blinks out and back neither withdraws nor re-announces.
void LiveForecaster::warn(Device::Warning& w, const Estimate& e, bool unsure, int64_t now_ms, const std::string& what,
                          const std::string& gone, const std::string& basis, const std::string& source,
                          std::vector<Event>& out) const {
  const double warn_s = static_cast<double>(o_.warn_within_ms) / 1000.0;
  auto event = [&](std::string detail) {
    Event ev;
    ev.ts_ms = now_ms;
    ev.kind = "forecast";
    ev.source = source;
    ev.detail = std::move(detail);
    out.push_back(std::move(ev));
  };
  auto range = [&] {
    if (e.low && e.high && human_duration(*e.high) != human_duration(*e.low))
      return fmt::format(" ({}–{})", human_duration(*e.low), human_duration(*e.high));
    return std::string();
  };
  const bool holds = e.value && *e.value <= (w.on ? 2 * warn_s : warn_s);
  if (!holds && unsure) return; // a new trend, too short yet to say how far: what was said stands
  if (!holds) {
    if (!w.on) return;
    if (!w.gone_since_ms) w.gone_since_ms = now_ms;
    if (now_ms - *w.gone_since_ms < o_.withdraw_after_ms) return;
    event(fmt::format("forecast withdrawn: {} (was ~{}): {}", gone, human_duration(w.said_s), basis));
    w = {};
    return;
  }
  w.gone_since_ms.reset();
  if (!w.on) {
    w = {true, *e.value, now_ms, std::nullopt};
    event(fmt::format("forecast: {} in ~{}{}: {}", what, human_duration(*e.value), range(), basis));
    return;
  }
  // What was said, counted down to now, against what is forecast now.
  const double said_left = std::max(0.0, w.said_s - static_cast<double>(now_ms - w.said_at_ms) / 1000.0);
  if (std::fabs(*e.value - said_left) <= std::max(o_.update_min_s, o_.update_share * said_left)) return;
  event(fmt::format("forecast updated: {} in ~{}{} ({} than the ~{} said {} ago): {}", what, human_duration(*e.value),
                    range(), *e.value < said_left ? "sooner" : "later", human_duration(w.said_s),
                    human_duration(static_cast<double>(now_ms - w.said_at_ms) / 1000.0), basis));
  w.said_s = *e.value;
  w.said_at_ms = now_ms;
}

std::vector<Event> LiveForecaster::crossings(const Snapshot& s) {
  std::vector<Event> out;
  for (const auto& df : s.devices) {
    auto it = devices_.find(df.gpu_index);
    if (it == devices_.end()) continue;
    Device& d = it->second;
    const std::string source = fmt::format("gpu{}", df.gpu_index);
    warn(d.oom_warning, df.oom_in_s, df.oom_unsure, s.ts_ms,
         fmt::format("GPU {} out of memory{}", df.gpu_index,
                     df.oom_epoch ? fmt::format(" (epoch {})", *df.oom_epoch) : std::string()),
         fmt::format("GPU {} is no longer forecast to run out of memory", df.gpu_index), df.oom_basis, source, out);
    warn(d.throttle_warning, df.throttle_in_s, df.throttle_unsure, s.ts_ms,
         fmt::format("GPU {} reaches {:.0f} °C and throttles", df.gpu_index, df.throttle_temp_c),
         fmt::format("GPU {} is no longer forecast to reach {:.0f} °C", df.gpu_index, df.throttle_temp_c),
         df.throttle_basis, source, out);
  }
  return out;
}

json Snapshot::to_json() const {
  json devs = json::array();
  for (const auto& d : devices) {
    json oom = estimate_json(d.oom_in_s, "s");
    oom["epoch"] = opt(d.oom_epoch);
    oom["growth_bytes_per_s"] = opt(d.mem_growth_bytes_per_s);
    oom["growth_bytes_per_epoch"] = opt(d.mem_growth_bytes_per_epoch);
    oom["basis"] = d.oom_basis;
    json thr = estimate_json(d.throttle_in_s, "s");
    thr["throttle_temp_c"] = d.throttle_temp_c;
    thr["throttle_temp_source"] = d.throttle_temp_default ? "default" : "device";
    thr["rise_c_per_s"] = opt(d.temp_rise_c_per_s);
    thr["settles_c"] = opt(d.temp_settles_c);
    thr["basis"] = d.throttle_basis;
    devs.push_back({{"gpu_index", d.gpu_index},
                    {"oom", oom},
                    {"throttle", thr},
                    {"util_next_minute",
                     {{"mean_pct", opt(d.util_next_mean_pct)},
                      {"peak_pct", opt(d.util_next_peak_pct)},
                      {"peak_in_s", opt(d.util_next_peak_in_s)},
                      {"model", d.util_model},
                      {"basis", d.util_basis}}}});
  }
  json fin = json::array();
  for (const auto& f : finish) {
    json j = estimate_json(f.finish_in_s, "s");
    j["unit"] = f.unit;
    j["done"] = f.done;
    j["total"] = f.total;
    j["rate_per_s"] = opt(f.rate_per_s);
    j["energy_j"] = opt(f.energy_to_finish_j.value);
    j["energy_low_j"] = opt(f.energy_to_finish_j.low);
    j["energy_high_j"] = opt(f.energy_to_finish_j.high);
    j["power_w"] = opt(f.power_w);
    j["energy_method"] = f.energy_method;
    j["basis"] = f.basis;
    fin.push_back(std::move(j));
  }
  return {{"ts_ms", ts_ms}, {"devices", devs}, {"finish", fin}};
}

void ForecastBoard::publish(const Snapshot& s) {
  nlohmann::json j = s.to_json();
  std::string l = s.line();
  j["line"] = l;
  std::lock_guard lk(mu_);
  json_ = std::move(j);
  line_ = std::move(l);
}

json ForecastBoard::as_json() const {
  std::lock_guard lk(mu_);
  return json_;
}

std::string ForecastBoard::line() const {
  std::lock_guard lk(mu_);
  return line_;
}

std::string Snapshot::line() const {
  std::vector<std::string> parts;
  const DeviceForecast* oom = nullptr;
  const DeviceForecast* thr = nullptr;
  for (const auto& d : devices) {
    if (d.oom_in_s.value && (!oom || *d.oom_in_s.value < *oom->oom_in_s.value)) oom = &d;
    if (d.throttle_in_s.value && (!thr || *d.throttle_in_s.value < *thr->throttle_in_s.value)) thr = &d;
  }
  if (oom)
    parts.push_back(fmt::format("GPU {} out of memory in ~{}{}", oom->gpu_index, human_duration(*oom->oom_in_s.value),
                                oom->oom_epoch ? fmt::format(" (epoch {})", *oom->oom_epoch) : ""));
  if (thr)
    parts.push_back(fmt::format("GPU {} throttles in ~{}", thr->gpu_index, human_duration(*thr->throttle_in_s.value)));
  for (const auto& f : finish) {
    if (!f.finish_in_s.value) continue;
    std::string p = fmt::format("{} done in ~{}", f.unit, human_duration(*f.finish_in_s.value));
    if (f.finish_in_s.low && f.finish_in_s.high &&
        human_duration(*f.finish_in_s.high) != human_duration(*f.finish_in_s.low))
      p += fmt::format(" ({}–{})", human_duration(*f.finish_in_s.low), human_duration(*f.finish_in_s.high));
    if (f.energy_to_finish_j.value)
      p += fmt::format(", ~{} more ({})", human_energy(*f.energy_to_finish_j.value), f.energy_method);
    parts.push_back(std::move(p));
  }
  std::string out;
  for (const auto& p : parts)
    out += (out.empty() ? "" : " · ") + p;
  return out;
}

} // namespace wattscope::forecast
