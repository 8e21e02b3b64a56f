#include "forecast/anomaly_monitor.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "core/json_opt.hpp"
#include "core/metrics.hpp"
#include "core/time_util.hpp"

namespace wattscope {

namespace {

// Work starts on a GPU when its utilisation reaches this within kWorkStartMs of reading idle.
constexpr double kWorkingUtilPct = 50;
constexpr int64_t kWorkStartMs = 3000;

// Episode values kept for a straggler's medians: the latest ones (a day at 1 s would be 86,400 each).
constexpr size_t kMaxEpisodeValues = 1024;

void keep(std::vector<double>& v, double x) {
  if (v.size() >= kMaxEpisodeValues) v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2));
  v.push_back(x);
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// "1,410": as people write clocks.
std::string grouped(double v) {
  std::string digits = fmt::format("{:.0f}", std::fabs(v));
  for (auto i = static_cast<std::ptrdiff_t>(digits.size()) - 3; i > 0; i -= 3)
    digits.insert(static_cast<size_t>(i), ",");
  return (v < -0.5 ? "-" : "") + digits;
}

const MetricInfo* info_of(std::string_view column) {
  for (const auto& m : kGpuMetrics)
    if (m.info.column == column) return &m.info;
  return nullptr;
}

std::string value_words(const MetricInfo& m, double v) {
  const double d = v * m.display_scale;
  const std::string num = std::fabs(d) >= 1000 ? grouped(d)
                          : std::fabs(d) >= 20 ? fmt::format("{:.0f}", d)
                                               : fmt::format("{:.1f}", d);
  return m.display_unit.empty() ? num : num + " " + std::string(m.display_unit);
}

std::string duration_words(int64_t ms) {
  const double s = static_cast<double>(ms) / 1000;
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 2 * 3600) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

} // namespace

std::string anomaly_message(int gpu_index, std::string_view metric, const forecast::AnomalyChange& c) {
  const MetricInfo* m = info_of(metric);
  const std::string name = m ? std::string(m->display) : std::string(metric);
  auto val = [&](double v) { return m ? value_words(*m, v) : fmt::format("{:.4g}", v); };
  const std::string since = iso_utc_ms(c.onset_ms);
  if (!c.onset) {
    const std::string what = c.kind == forecast::AnomalyKind::Stall      ? "stall"
                             : c.kind == forecast::AnomalyKind::TempRamp ? "temperature ramp"
                                                                         : "level change";
    const std::string how = c.adopted
                                ? fmt::format("it held {} samples: {} is now its usual level", c.ticks, val(c.value))
                            : c.at_boundary ? "a phase boundary came (what follows is the next phase's)"
                                            : "back to its usual level";
    return fmt::format("gpu{}: {} on {} ended after {} (from {}): {}", gpu_index, what, name,
                       duration_words(c.ts_ms - c.onset_ms), since, how);
  }
  const std::string season =
      c.period ? fmt::format("; the series repeats every {} samples and differs from one period back too", *c.period)
               : "";
  switch (c.kind) {
  case forecast::AnomalyKind::Stall:
    return fmt::format("gpu{} stalled: {} at {} where it usually reads {}, since {} ({} samples), with no phase "
                       "change{}",
                       gpu_index, name, val(c.value), val(c.expected), since, c.ticks, season);
  case forecast::AnomalyKind::TempRamp:
    return fmt::format("gpu{}: temperature rising {:.1f} °C per {} samples where it usually rises {:.1f}, since {}",
                       gpu_index, c.value, forecast::anomaly_config_for(metric).rate_lag, c.expected, since);
  case forecast::AnomalyKind::LevelChange:
    break;
  }
  return fmt::format("gpu{}: {} changed level to {} from its usual {} without a phase change, since {} ({} samples){}",
                     gpu_index, name, val(c.value), val(c.expected), since, c.ticks, season);
}

AnomalyMonitor::AnomalyMonitor(AnomalyMonitorOptions o, Emit emit) : o_(std::move(o)), emit_(std::move(emit)) {
  if (!(o_.interval_ms > 0)) o_.interval_ms = 1000;
  const int64_t second = std::clamp<int64_t>(o_.second_ms, 1, 1000);
  bucket_ms_ = std::max<int64_t>(second, std::llround(o_.interval_ms));
  // The durations are seconds: at an interval over a second each value stands for a tick, so fewer of them.
  const double per = static_cast<double>(second) / static_cast<double>(bucket_ms_);
  o_.min_ticks = std::max(2, static_cast<int>(std::ceil(o_.min_ticks * per)));
  o_.end_ticks = std::max(1, static_cast<int>(std::ceil(o_.end_ticks * per)));
  o_.straggler_min_ticks =
      std::max(forecast::kStragglerMinSamples, static_cast<int>(std::ceil(o_.straggler_min_ticks * per)));
  for (const auto& name : o_.metrics) {
    size_t i = 0;
    while (i < kGpuMetrics.size() && kGpuMetrics[i].info.column != name)
      ++i;
    if (i == kGpuMetrics.size())
      throw std::invalid_argument(fmt::format("anomaly detection: '{}' is not a GPU metric", name));
    metric_index_.push_back(i);
  }
}

AnomalyMonitor::Gpu& AnomalyMonitor::gpu(int index) {
  for (auto& g : gpus_)
    if (g.index == index) return g;
  Gpu g;
  g.index = index;
  // The presets count seconds (one value a second); at a longer interval each value stands for a tick, so the counts
  // shrink to the same seconds (never under what makes the test meaningful).
  const double per = static_cast<double>(std::clamp<int64_t>(o_.second_ms, 1, 1000)) / static_cast<double>(bucket_ms_);
  auto scaled = [&](auto n, auto floor) { return std::max(floor, static_cast<decltype(n)>(std::ceil(n * per))); };
  for (const auto& name : o_.metrics) {
    auto c = forecast::anomaly_config_for(name);
    c.min_ticks = o_.min_ticks;
    c.end_ticks = o_.end_ticks;
    if (per < 1) {
      c.window = scaled(c.window, size_t{16});
      c.min_history = scaled(c.min_history, size_t{6});
      c.boundary_grace = scaled(c.boundary_grace, 1);
      c.rate_lag = scaled(c.rate_lag, 2);
      c.adopt_ticks = scaled(c.adopt_ticks, c.min_ticks + 1);
      c.history = scaled(c.history, size_t{48});
      c.min_period = scaled(c.min_period, size_t{4});
    }
    g.series.push_back({forecast::AnomalyDetector(c), std::nullopt});
  }
  gpus_.push_back(std::move(g));
  return gpus_.back();
}

void AnomalyMonitor::add_to_bucket(const Frame& f) {
  if (!bucket_.open) {
    bucket_.open = true;
    bucket_.start_ms = f.ts_ms;
  }
  for (const auto& s : f.gpus) {
    if (s.gpu_index < 0 || s.gpu_index > 4096) continue;
    auto it = std::find_if(bucket_.gpus.begin(), bucket_.gpus.end(),
                           [&](const Bucket::PerGpu& b) { return b.index == s.gpu_index; });
    if (it == bucket_.gpus.end()) {
      Bucket::PerGpu b;
      b.index = s.gpu_index;
      b.sum.assign(o_.metrics.size(), 0);
      b.count.assign(o_.metrics.size(), 0);
      bucket_.gpus.push_back(std::move(b));
      it = std::prev(bucket_.gpus.end());
    }
    for (size_t k = 0; k < o_.metrics.size(); ++k)
      if (const auto v = kGpuMetrics[metric_index_[k]].get(s); v && std::isfinite(*v)) {
        it->sum[k] += *v;
        ++it->count[k];
      }
    if (s.clock_sm_mhz) it->clock += static_cast<double>(*s.clock_sm_mhz), ++it->n_clock;
    if (s.util_gpu_pct) it->util += *s.util_gpu_pct, ++it->n_util;
    if (s.power_w) it->power += *s.power_w, ++it->n_power;
    if (s.throttle_reasons) it->reasons |= *s.throttle_reasons, it->any_reasons = true;
  }
}

bool AnomalyMonitor::close_bucket() {
  bool changed = false;
  const int64_t ts = bucket_.start_ms; // a second's value stands at its first tick: onsets are where they began
  struct Change {
    int gpu;
    size_t k;
    forecast::AnomalyChange ch;
  };
  std::vector<Change> changes;
  for (const auto& b : bucket_.gpus) {
    Gpu& g = gpu(b.index);
    // Work starting on a GPU that was idle a moment ago is a boundary of its own: its power, clocks and temperature
    // rise with it, and none of that is an anomaly.
    bool started = false;
    if (b.n_util) {
      const double util = b.util / b.n_util;
      if (util <= forecast::kStragglerIdleUtilPct) g.idle_at_ms = ts;
      started = util >= kWorkingUtilPct && g.idle_at_ms && ts - *g.idle_at_ms <= kWorkStartMs;
      // Not the end of a stall: that one ends by itself, back at the level it left.
      for (const auto& se : g.series)
        started = started && !se.det.active();
    }
    for (size_t k = 0; k < g.series.size(); ++k) {
      const double v = b.count[k] ? b.sum[k] / b.count[k] : std::nan("");
      if (auto ch = g.series[k].det.observe(ts, v, bucket_.boundary || started)) changes.push_back({b.index, k, *ch});
    }
  }
  // A level change that half the job's GPUs (two at least) confirm in the same second is the workload's, not a
  // device's: an unmarked evaluation pass, a new batch size. A device's fault (a cap, a slowdown) is its own.
  std::vector<int> together(o_.metrics.size(), 0);
  for (const auto& c : changes)
    if (c.ch.onset && c.ch.kind == forecast::AnomalyKind::LevelChange) ++together[c.k];
  const int quorum = std::max<int>(2, static_cast<int>((bucket_.gpus.size() + 1) / 2));
  for (const auto& c : changes) {
    Series& se = gpu(c.gpu).series[c.k];
    if (c.ch.onset && c.ch.kind == forecast::AnomalyKind::LevelChange && together[c.k] >= quorum) {
      se.det.excuse();
      continue;
    }
    changed = true;
    const auto& ch = c.ch;
    const std::string& metric = o_.metrics[c.k];
    nlohmann::json d = {{"state", ch.onset ? "onset" : "ended"},
                        {"metric", metric},
                        {"anomaly", forecast::to_string(ch.kind)},
                        {"onset", iso_utc_ms(ch.onset_ms)},
                        {"onset_ms", ch.onset_ms},
                        {"value", ch.value},
                        {"expected", ch.expected},
                        {"z", ch.z},
                        {"samples", ch.ticks},
                        {"period_samples", ch.period ? nlohmann::json(*ch.period) : nlohmann::json()},
                        {"message", anomaly_message(c.gpu, metric, ch)}};
    emit_({0, ts, "anomaly", fmt::format("gpu{}", c.gpu), dump(d)});
    se.open = ch.onset ? std::optional(ch) : std::nullopt;
  }
  if (o_.stragglers) {
    Frame agg;
    agg.ts_ms = ts;
    for (const auto& b : bucket_.gpus) {
      GpuSample s;
      s.gpu_index = b.index;
      if (b.n_clock) s.clock_sm_mhz = static_cast<int64_t>(std::llround(b.clock / b.n_clock));
      if (b.n_util) s.util_gpu_pct = b.util / b.n_util;
      if (b.n_power) s.power_w = b.power / b.n_power;
      if (b.any_reasons) s.throttle_reasons = b.reasons;
      agg.gpus.push_back(s);
    }
    const size_t before = gpus_.size();
    int active_before = 0;
    for (const auto& g : gpus_)
      active_before += g.straggle.active;
    stragglers(agg);
    int active_after = 0;
    for (const auto& g : gpus_)
      active_after += g.straggle.active;
    changed = changed || before != gpus_.size() || active_before != active_after;
  }
  bucket_.open = false;
  bucket_.boundary = false;
  bucket_.gpus.clear();
  return changed;
}

void AnomalyMonitor::process(Frame& f, int64_t phase_boundaries) {
  if (f.rows_only || f.markers_only) return;
  bool changed = false;
  // A tick past the open second closes it first (a late tick, a slower adaptive interval).
  if (bucket_.open && f.ts_ms - bucket_.start_ms >= bucket_ms_) changed = close_bucket();
  if (phase_boundaries != boundaries_) bucket_.boundary = true;
  boundaries_ = phase_boundaries;
  add_to_bucket(f);
  // The second is complete when the next tick would fall past it: closed now, not a tick later.
  if (f.ts_ms + static_cast<int64_t>(o_.interval_ms) - bucket_.start_ms >= bucket_ms_) changed |= close_bucket();
  for (const auto& s : f.gpus) {
    if (s.gpu_index < 0 || s.gpu_index > 4096) continue;
    const Gpu& g = gpu(s.gpu_index);
    for (size_t k = 0; k < g.series.size(); ++k)
      if (g.series[k].det.active()) f.anomalies.emplace_back(s.gpu_index, kGpuMetrics[metric_index_[k]].info.column);
  }
  if (changed) publish();
}

std::string AnomalyMonitor::straggler_message(const Gpu& g, bool ended) const {
  const Straggle& s = g.straggle;
  const auto signal = forecast::straggler_signal(s.clock_ticks, s.util_ticks, s.power_ticks, s.apart);
  const std::string metric = signal == forecast::StragglerSignal::clock  ? "clock_sm_mhz"
                             : signal == forecast::StragglerSignal::util ? "util_gpu_pct"
                                                                         : "power_w";
  const auto& mine = metric == "clock_sm_mhz" ? s.clock : metric == "util_gpu_pct" ? s.util : s.power;
  const auto& theirs = metric == "clock_sm_mhz" ? s.sib_clock : metric == "util_gpu_pct" ? s.sib_util : s.sib_power;
  const MetricInfo* m = info_of(metric);
  const std::string reasons = forecast::straggler_reason_names(s.reasons);
  return fmt::format("gpu{} {} {} for {} (from {}) while its {} sibling{} ran at {}{}", g.index,
                     ended ? "was at" : "at", value_words(*m, median(mine)), duration_words(s.last_ms - s.onset_ms),
                     iso_utc_ms(s.onset_ms), s.siblings, s.siblings == 1 ? "" : "s", value_words(*m, median(theirs)),
                     reasons.empty() ? "" : "; its throttle reasons: " + reasons);
}

void AnomalyMonitor::stragglers(const Frame& f) {
  // Siblings are the GPUs at work this tick: an idle one is not part of the job (the idle GPU's case).
  std::vector<std::pair<const GpuSample*, forecast::StragglerTick>> part;
  for (const auto& s : f.gpus) {
    if (s.gpu_index < 0 || s.gpu_index > 4096) continue;
    if (s.util_gpu_pct && *s.util_gpu_pct <= forecast::kStragglerIdleUtilPct) continue;
    part.push_back({&s,
                    {s.clock_sm_mhz ? std::optional<double>(static_cast<double>(*s.clock_sm_mhz)) : std::nullopt,
                     s.util_gpu_pct, s.power_w}});
  }
  std::vector<forecast::StragglerTick> sib;
  for (const auto& s : f.gpus) {
    if (s.gpu_index < 0 || s.gpu_index > 4096) continue;
    Gpu& g = gpu(s.gpu_index);
    Straggle& st = g.straggle;
    const auto me = std::find_if(part.begin(), part.end(), [&](const auto& p) { return p.first == &s; });
    forecast::StragglerMark m;
    if (me != part.end() && part.size() >= 2) {
      sib.clear();
      for (const auto& p : part)
        if (p.first != &s) sib.push_back(p.second);
      m = forecast::straggler_mark(me->second, sib);
    }
    if (m.apart()) {
      st.back = 0;
      if (st.apart++ == 0) {
        st = Straggle{};
        st.apart = 1;
        st.onset_ms = f.ts_ms;
      }
      st.last_ms = f.ts_ms;
      st.siblings = static_cast<int>(part.size()) - 1;
      st.clock_ticks += m.clock, st.util_ticks += m.util, st.power_ticks += m.power;
      if (s.throttle_reasons) st.reasons |= *s.throttle_reasons;
      const auto& t = me->second;
      if (t.clock_mhz && m.sib_clock) keep(st.clock, *t.clock_mhz), keep(st.sib_clock, *m.sib_clock);
      if (t.util_pct && m.sib_util) keep(st.util, *t.util_pct), keep(st.sib_util, *m.sib_util);
      if (t.power_w && m.sib_power) keep(st.power, *t.power_w), keep(st.sib_power, *m.sib_power);
      if (!st.active && st.apart >= std::max(o_.straggler_min_ticks, forecast::kStragglerMinSamples)) {
        st.active = true;
        emit_({0, f.ts_ms, "straggler", fmt::format("gpu{}", g.index),
               dump({{"state", "onset"},
                     {"onset", iso_utc_ms(st.onset_ms)},
                     {"onset_ms", st.onset_ms},
                     {"siblings", st.siblings},
                     {"reasons", forecast::straggler_reason_names(st.reasons)},
                     {"message", straggler_message(g, false)}})});
      }
    } else if (st.active) {
      if (++st.back >= o_.end_ticks) {
        emit_({0, f.ts_ms, "straggler", fmt::format("gpu{}", g.index),
               dump({{"state", "ended"},
                     {"onset", iso_utc_ms(st.onset_ms)},
                     {"onset_ms", st.onset_ms},
                     {"siblings", st.siblings},
                     {"reasons", forecast::straggler_reason_names(st.reasons)},
                     {"message", straggler_message(g, true)}})});
        st = Straggle{};
      }
    } else {
      st.apart = 0; // a stretch must be consecutive
    }
  }
}

void AnomalyMonitor::publish() {
  std::vector<ActiveAnomaly> b;
  for (const auto& g : gpus_) {
    for (size_t k = 0; k < g.series.size(); ++k)
      if (const auto& o = g.series[k].open)
        b.push_back({g.index, std::string(forecast::to_string(o->kind)), o_.metrics[k], o->onset_ms,
                     anomaly_message(g.index, o_.metrics[k], *o)});
    if (g.straggle.active) b.push_back({g.index, "straggler", "", g.straggle.onset_ms, straggler_message(g, false)});
  }
  std::lock_guard lock(mu_);
  board_ = std::move(b);
}

std::vector<ActiveAnomaly> AnomalyMonitor::active() const {
  std::lock_guard lock(mu_);
  return board_;
}

nlohmann::json AnomalyMonitor::json() const {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& x : active())
    a.push_back({{"gpu", x.gpu_index},
                 {"kind", x.kind},
                 {"metric", x.metric.empty() ? nlohmann::json() : nlohmann::json(x.metric)},
                 {"onset", iso_utc_ms(x.onset_ms)},
                 {"message", x.message}});
  return {{"anomalies", std::move(a)}, {"watched", o_.metrics}};
}

} // namespace wattscope
