#include "forecast/anomaly.hpp"

#include <algorithm>
#include <cmath>

namespace wattscope::forecast {

std::string_view to_string(AnomalyKind k) {
  switch (k) {
  case AnomalyKind::Stall:
    return "stall";
  case AnomalyKind::LevelChange:
    return "level_change";
  case AnomalyKind::TempRamp:
    return "temperature_ramp";
  }
  return "?";
}

AnomalyConfig anomaly_config_for(std::string_view metric) {
  AnomalyConfig c;
  if (metric == "util_gpu_pct") {
    // NVML utilisation is a busy share in whole points: a fed GPU wanders by 2-5 points.
    c.abs_floor = 3;
    c.busy_floor = 50;
  } else if (metric == "power_w" || metric == "power_avg_w") {
    // 5 W: the spread of one GPU's draw at a fixed load; 3 %: of a steady loop's (a noisier one has a MAD to match).
    c.abs_floor = 5;
    c.rel_floor = 0.03;
    c.busy_floor = 50; // an idle data-centre GPU draws 30-90 W: a baseline under 50 W is not a busy GPU's
  } else if (metric == "clock_sm_mhz" || metric == "clock_gfx_mhz") {
    c.abs_floor = 30; // two 15 MHz boost bins
  } else if (metric == "temp_gpu_c" || metric == "temp_mem_c") {
    // Sensors read whole degrees: a degree or two either way over rate_lag ticks is the sensor, not the GPU. Over 16
    // ticks a steady GPU's rises keep within ±2 (MAD ~1), so 4 scales is ~6 °C more than usual: a 0.5 °C-a-tick ramp
    // is past it 12 ticks in, a whole-degree sensor's jitter never.
    c.shape = SeriesShape::Rise;
    c.rate_lag = 16;
    c.k_on = 4;
    c.k_off = 2;
    c.abs_floor = 0.5;
    c.level_margin = 3;
    c.rel_floor = 0;
    c.seasonal = false; // a rise is compared with rises: a periodic load's heating and cooling are in its baseline
  }
  return c;
}

AnomalyDetector::AnomalyDetector(AnomalyConfig c) : c_(c) {
  c_.window = std::max<size_t>(c_.window, 4);
  c_.min_history = std::clamp<size_t>(c_.min_history, 3, c_.window);
  c_.min_ticks = std::max(c_.min_ticks, 1);
  c_.end_ticks = std::max(c_.end_ticks, 1);
  c_.rate_lag = std::max(c_.rate_lag, 1);
  c_.adopt_ticks = std::max(c_.adopt_ticks, c_.min_ticks + 1);
  c_.min_period = std::max<size_t>(c_.min_period, 2);
  c_.k_off = std::min(c_.k_off, c_.k_on);
}

double AnomalyDetector::median_of(std::vector<double>& v) const {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  return 0.5 * (*mid + *std::max_element(v.begin(), mid));
}

void AnomalyDetector::rebaseline(const std::vector<double>& seed) {
  base_.clear();
  const size_t from = seed.size() > c_.window ? seed.size() - c_.window : 0;
  base_.insert(base_.end(), seed.begin() + static_cast<std::ptrdiff_t>(from), seed.end());
  state_ = State::Normal;
  count_ = 0;
  sign_ = 0;
  episode_.clear();
}

// The period: the first local maximum of the autocorrelation (past min_period) within 90 % of the highest one, if
// that reaches min_acf. The first, so that a cycle is not read as two of its repeats.
void AnomalyDetector::find_period() {
  const size_t n = raw_.size();
  period_.reset();
  if (n < 3 * c_.min_period) return;
  double mean = 0;
  for (double v : raw_)
    mean += v;
  mean /= static_cast<double>(n);
  double var = 0;
  for (double v : raw_)
    var += (v - mean) * (v - mean);
  if (!(var > 1e-12 * static_cast<double>(n) * (1 + mean * mean))) return; // constant: no cycle
  const size_t lo = c_.min_period - 1, hi = n / 2 + 1;
  std::vector<double> r(hi + 1, 0);
  for (size_t lag = lo; lag <= hi && lag < n; ++lag) {
    double s = 0;
    for (size_t i = 0; i + lag < n; ++i)
      s += (raw_[i] - mean) * (raw_[i + lag] - mean);
    r[lag] = s / var * static_cast<double>(n) / static_cast<double>(n - lag);
  }
  double best = 0;
  for (size_t lag = lo + 1; lag < hi; ++lag)
    if (r[lag] > r[lag - 1] && r[lag] >= r[lag + 1]) best = std::max(best, r[lag]);
  if (best < c_.min_acf) return;
  for (size_t lag = lo + 1; lag < hi; ++lag)
    if (r[lag] > r[lag - 1] && r[lag] >= r[lag + 1] && r[lag] >= 0.9 * best) {
      period_ = lag;
      return;
    }
}

void AnomalyDetector::excuse() {
  if (state_ != State::Active) return;
  rebaseline(episode_);
}

std::optional<AnomalyChange> AnomalyDetector::end(int64_t ts_ms, bool adopted, bool at_boundary) {
  AnomalyChange ch;
  ch.onset = false;
  ch.kind = kind_;
  ch.onset_ms = onset_ms_;
  ch.ts_ms = ts_ms;
  scratch_ = episode_;
  ch.value = median_of(scratch_);
  ch.expected = expected_;
  ch.scale = scale_;
  ch.z = scale_ > 0 ? (ch.value - expected_) / scale_ : 0;
  ch.ticks = static_cast<int>(episode_.size());
  ch.period = period_;
  ch.adopted = adopted;
  ch.at_boundary = at_boundary;
  return ch;
}

// As it was one period ago (± a tick of jitter): usual at this point of the cycle. Not inside an episode: one period
// back would then be the episode itself, and a long one would excuse itself; and one period back must precede a
// candidate's first tick, or a stall longer than the period would excuse itself by its own first ticks. Excused values
// stay out of the baseline (the caller's part): evaluation passes that entered it would widen its spread until a real
// drop of the same size passed for noise.
bool AnomalyDetector::seasonal_excuse(double x, double scale) const {
  if (!period_ || state_ == State::Active) return false;
  const size_t p = *period_, n = raw_.size();
  const size_t since_onset = state_ == State::Candidate ? episode_.size() : 0;
  for (size_t j = p - 1; j <= p + 1; ++j)
    if (n > j && j > since_onset && std::fabs(x - raw_[n - 1 - j]) < c_.k_on * scale) return true;
  return false;
}

std::optional<AnomalyChange> AnomalyDetector::observe(int64_t ts_ms, double y, bool boundary) {
  std::optional<AnomalyChange> out;
  if (boundary) {
    since_boundary_ = 0;
    // A phase boundary: what goes on is the next phase's. An episode open across it ends there; a candidate that
    // began just before it (the marker settles a tick or two after the change) is the phase's new level.
    if (state_ == State::Active) {
      out = end(ts_ms, false, true);
      rebaseline({});
    } else if (state_ == State::Candidate) {
      rebaseline(episode_);
    }
  }
  if (std::isnan(y)) return out;
  double x = y;
  bool below_level = false;
  if (c_.shape == SeriesShape::Rise && c_.level_margin > 0) {
    if (!levels_.empty()) {
      scratch_.assign(levels_.begin(), levels_.end());
      below_level = y < median_of(scratch_) + c_.level_margin;
    }
    levels_.push_back(y);
    if (levels_.size() > c_.window) levels_.pop_front();
  }
  if (c_.shape == SeriesShape::Rise) {
    recent_.push_back(y);
    if (recent_.size() > static_cast<size_t>(c_.rate_lag) + 1) recent_.pop_front();
    if (recent_.size() <= static_cast<size_t>(c_.rate_lag)) return out;
    x = y - recent_.front();
  }
  raw_.push_back(x);
  if (raw_.size() > c_.history) raw_.pop_front();
  ++ticks_;
  if (c_.seasonal && ticks_ % kPeriodEvery == 0) find_period();
  struct Tick { // since_boundary_ counts this tick when leaving, whatever the path
    int& n;
    ~Tick() {
      if (n < (1 << 30)) ++n;
    }
  } tick{since_boundary_};

  if (base_.size() < c_.min_history) {
    if (state_ == State::Normal) base_.push_back(x);
    return out;
  }
  scratch_.assign(base_.begin(), base_.end());
  const double med = median_of(scratch_);
  for (double& v : scratch_)
    v = std::fabs(v - med);
  const double mad = median_of(scratch_);
  const double scale = std::max({1.4826 * mad, c_.rel_floor * std::fabs(med), c_.abs_floor, 1e-9});
  double z = (x - med) / scale;
  if (c_.shape == SeriesShape::Rise) z = below_level ? 0.0 : std::max(z, 0.0);
  // Seasonal: as it was one period ago (± a tick of jitter) is usual at this point of the cycle. A value excused this
  // way (past k_off) stays out of the baseline.
  const bool seasonal = z != 0 && seasonal_excuse(x, scale);
  const bool excused = seasonal && std::fabs(z) >= c_.k_off;
  if (seasonal) z = 0;
  const int s = z > 0 ? 1 : z < 0 ? -1 : 0;
  const bool on = std::fabs(z) >= c_.k_on, off = std::fabs(z) >= c_.k_off;
  auto push_base = [&] {
    base_.push_back(x);
    if (base_.size() > c_.window) base_.pop_front();
  };

  switch (state_) {
  case State::Normal:
    if (!on) {
      if (!excused) push_base();
      return out;
    }
    // A phase's new level, or work starting on an idle GPU: the baseline restarts from here.
    if (since_boundary_ <= c_.boundary_grace || (c_.busy_floor > 0 && s > 0 && med < c_.busy_floor)) {
      rebaseline({x});
      return out;
    }
    state_ = State::Candidate;
    sign_ = s;
    count_ = 0;
    onset_ms_ = ts_ms;
    onset_since_boundary_ = since_boundary_;
    episode_.clear();
    [[fallthrough]];
  case State::Candidate:
    if (on && s == sign_) {
      ++count_;
      episode_.push_back(x);
    } else if (off && s == sign_) {
      episode_.push_back(x); // between the two levels: holds, does not count
    } else {
      state_ = State::Normal; // a blip: its values never enter the baseline
      episode_.clear();
      push_base();
      return out;
    }
    if (count_ < c_.min_ticks) return out;
    state_ = State::Active;
    count_ = 0;
    expected_ = med;
    scale_ = scale;
    {
      scratch_ = episode_;
      const double v = median_of(scratch_);
      if (c_.shape == SeriesShape::Rise)
        kind_ = AnomalyKind::TempRamp;
      else if (c_.busy_floor > 0 && sign_ < 0 && med >= c_.busy_floor && v <= c_.idle_share * med)
        kind_ = AnomalyKind::Stall;
      else
        kind_ = AnomalyKind::LevelChange;
      AnomalyChange ch;
      ch.kind = kind_;
      ch.onset_ms = onset_ms_;
      ch.ts_ms = ts_ms;
      ch.value = v;
      ch.expected = med;
      ch.scale = scale;
      ch.z = (v - med) / scale;
      ch.ticks = static_cast<int>(episode_.size());
      ch.period = period_;
      return ch; // `out` is empty here: a boundary leaves no candidate behind
    }
  case State::Active:
    if (episode_.size() < static_cast<size_t>(c_.adopt_ticks)) episode_.push_back(x);
    if (!off || s != sign_) {
      if (++count_ >= c_.end_ticks) {
        out = end(ts_ms, false, false);
        rebaseline(std::vector<double>(base_.begin(), base_.end()));
        push_base();
      }
      return out;
    }
    count_ = 0;
    if (episode_.size() >= static_cast<size_t>(c_.adopt_ticks)) {
      out = end(ts_ms, true, false);
      const size_t keep = std::min(episode_.size(), c_.window);
      rebaseline(std::vector<double>(episode_.end() - static_cast<std::ptrdiff_t>(keep), episode_.end()));
    }
    return out;
  }
  return out;
}

StragglerMark straggler_mark(const StragglerTick& mine, std::optional<double> sib_clock, std::optional<double> sib_util,
                             std::optional<double> sib_power) {
  StragglerMark m;
  m.sib_clock = sib_clock, m.sib_util = sib_util, m.sib_power = sib_power;
  // Only while the siblings worked: between steps and phases clocks and power fall anyhow.
  if (m.sib_util && *m.sib_util < kStragglerBusyUtilPct) return m;
  const bool working = !mine.util_pct || *mine.util_pct > kStragglerIdleUtilPct;
  const bool faster =
      mine.clock_mhz && m.sib_clock && *mine.clock_mhz >= (1 + kStragglerClockGapPct / 100) * *m.sib_clock;
  if (faster) return m; // a GPU faster than its siblings that reads less busy is waiting for them
  m.clock =
      working && mine.clock_mhz && m.sib_clock && *mine.clock_mhz <= (1 - kStragglerClockGapPct / 100) * *m.sib_clock;
  // A GPU that does nothing is the idle GPU's case (a stage of its own, a worker done), not a straggler's.
  m.util = working && mine.util_pct && m.sib_util && *mine.util_pct <= *m.sib_util - kStragglerUtilGapPts;
  m.power = mine.util_pct && m.sib_util && working && !m.util && mine.power_w && m.sib_power &&
            *mine.power_w <= (1 - kStragglerPowerGapPct / 100) * *m.sib_power;
  return m;
}

StragglerSignal straggler_signal(double clock, double util, double power, double total) {
  if (clock >= total / 2) return StragglerSignal::clock;
  if (util >= total / 2) return StragglerSignal::util;
  if (power >= total / 2) return StragglerSignal::power;
  return clock >= util && clock >= power ? StragglerSignal::clock
         : util >= power                 ? StragglerSignal::util
                                         : StragglerSignal::power;
}

// A sibling capped lower than the others holds them back as surely as one that overheats, so the SW power cap counts.
std::string straggler_reason_names(int64_t bits) {
  std::string out;
  auto add = [&](int64_t bit, const char* name) {
    if (bits & bit) out += (out.empty() ? "" : ", ") + std::string(name);
  };
  add(0x4, "SW power cap");
  add(0x20, "SW thermal slowdown");
  add(0x40, "HW thermal slowdown");
  add(0x8, "HW slowdown");
  add(0x80, "HW power brake");
  return out;
}

StragglerMark straggler_mark(const StragglerTick& mine, const std::vector<StragglerTick>& siblings) {
  std::vector<double> c, u, p;
  for (const auto& s : siblings) {
    if (s.clock_mhz) c.push_back(*s.clock_mhz);
    if (s.util_pct) u.push_back(*s.util_pct);
    if (s.power_w) p.push_back(*s.power_w);
  }
  // The upper median, as the advice item takes it (nth_element at size/2).
  auto med = [](std::vector<double>& v) -> std::optional<double> {
    if (v.empty()) return std::nullopt;
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return *mid;
  };
  return straggler_mark(mine, med(c), med(u), med(p));
}

} // namespace wattscope::forecast
