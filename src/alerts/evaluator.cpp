#include "alerts/evaluator.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "core/duration.hpp"
#include "core/metrics.hpp"

namespace wattscope {

std::string_view to_string(AlertChange c) {
  switch (c) {
  case AlertChange::Pending:
    return "pending";
  case AlertChange::Cancelled:
    return "cancelled";
  case AlertChange::Firing:
    return "firing";
  case AlertChange::Resolved:
    return "resolved";
  case AlertChange::Repeat:
    return "repeat";
  }
  return "?";
}

AlertEvaluator::AlertEvaluator(std::vector<AlertRule> rules)
    : rules_(std::move(rules)), gpu_(rules_.size()), cpu_(rules_.size()), named_(rules_.size()) {}

AlertEvaluator::Slot& AlertEvaluator::gpu_slot(size_t rule, int gpu_index) {
  auto& v = gpu_[rule];
  const auto i = static_cast<size_t>(gpu_index);
  if (v.size() <= i) v.resize(i + 1);
  return v[i];
}

namespace {

// A value as a bit mask: only one a 64-bit integer holds (casting NaN, a negative or a larger value is undefined).
std::optional<uint64_t> as_mask(double v) {
  if (!(v >= 0 && v < 18446744073709551616.0)) return std::nullopt;
  return static_cast<uint64_t>(v);
}

bool trips(AlertOp op, double v, double thr) {
  switch (op) {
  case AlertOp::Gt:
    return v > thr;
  case AlertOp::Ge:
    return v >= thr;
  case AlertOp::Lt:
    return v < thr;
  case AlertOp::Le:
    return v <= thr;
  case AlertOp::Bits: {
    const auto value = as_mask(v), mask = as_mask(thr);
    return value && mask && (*value & *mask) != 0;
  }
  }
  return false;
}

// Back past the clear level (hysteresis); without one, simply no longer past the threshold.
bool clears(const AlertRule& r, double v, double thr, std::optional<double> clear) {
  if (!clear) return !trips(r.op, v, thr);
  return (r.op == AlertOp::Gt || r.op == AlertOp::Ge) ? v < *clear : v > *clear;
}

std::string format_value(const AlertRule& r, std::optional<double> v) {
  if (!v) return "n/a";
  if (const auto mask = r.op == AlertOp::Bits ? as_mask(*v) : std::nullopt) return fmt::format("0x{:x}", *mask);
  return fmt::format("{:.4g}", *v);
}

} // namespace

// ---- issue 36: the value `forecast` ahead along the robust trend of the recent readings. For > and >= the larger of
// it and the value now (a rule that forecasts is never later than one that does not), for < and <= the smaller; the
// value itself while the history is too short for a trend (kForecastMinPoints over kForecastMinSpanMs, and a third
// of the horizon).
std::optional<double> AlertEvaluator::projected(const AlertRule& r, Slot& s, double value, int64_t now_ms) {
  auto& h = s.trend;
  // kForecastPoints readings span the window: one every window / kForecastPoints (at least a second), the last
  // always the latest.
  const int64_t window = std::clamp<int64_t>(2 * r.forecast.count(), 60'000, 1'800'000);
  const int64_t spacing = std::max<int64_t>(1000, window / static_cast<int64_t>(kForecastPoints));
  if (h.size() >= 2 && now_ms - h[h.size() - 2].ts_ms < spacing)
    h.back() = {now_ms, value};
  else
    h.push_back({now_ms, value});
  while (h.size() > kForecastPoints || (!h.empty() && now_ms - h.front().ts_ms > window))
    h.pop_front();
  // A trend is projected at most 3 times as far ahead as the history it rests on: further, noise becomes a trend.
  const int64_t min_span = std::max<int64_t>(kForecastMinSpanMs, r.forecast.count() / 3);
  if (h.size() < kForecastMinPoints || h.back().ts_ms - h.front().ts_ms < min_span) return value;
  const auto rs = robust_slope(h);
  if (!rs) return value;
  // The slow end of the trend's interval (its 10th percentile slope rising, its 90th falling): a rule fires only when
  // most of the readings' pairwise slopes agree that the threshold comes within the horizon.
  const bool upward = r.op == AlertOp::Gt || r.op == AlertOp::Ge;
  const double slope = upward ? rs->low : rs->high;
  const double ahead = rs->level + slope * static_cast<double>(r.forecast.count()) / 1000.0;
  return upward ? std::max(value, ahead) : std::min(value, ahead);
}

void AlertEvaluator::step(size_t ri, Slot& s, std::optional<double> raw, std::optional<double> ref,
                          const std::string& scope, const Frame& f, int64_t now_ms, std::vector<AlertTransition>& out) {
  const AlertRule& r = rules_[ri];
  if (ref && *ref > 0) s.ref = ref;
  if (!raw) return; // missing is missing: the state holds until the device answers again
  std::optional<double> value = raw;
  double thr = r.threshold;
  std::optional<double> clear = r.clear;
  if (!r.relative_to.empty()) {
    if (!s.ref) return; // a percentage of nothing known yet
    value = *raw / *s.ref * 100.0;
  }
  if (r.forecast.count() > 0) value = projected(r, s, *value, now_ms); // issue 36
  s.last_value = value;
  s.last_threshold = thr;
  auto emit = [&](AlertChange c, bool notify) {
    out.push_back({ri, scope, c, value, thr, raw, f.ts_ms, s.since_ts_ms, notify});
  };
  switch (s.state) {
  case AlertState::Inactive:
    if (!trips(r.op, *value, thr)) return;
    s.since_mono_ms = now_ms;
    s.since_ts_ms = f.ts_ms;
    if (r.for_ms.count() > 0) {
      s.state = AlertState::Pending;
      emit(AlertChange::Pending, false);
      return;
    }
    [[fallthrough]];
  case AlertState::Pending:
    if (s.state == AlertState::Pending) {
      // Hysteresis holds here too: a value hovering between the clear level and the threshold stays pending, so
      // `for` measures how long it has been high, not how long it stayed above one exact line.
      if (clears(r, *value, thr, clear)) {
        s.state = AlertState::Inactive;
        emit(AlertChange::Cancelled, false);
        return;
      }
      if (now_ms - s.since_mono_ms < r.for_ms.count()) return;
      s.since_mono_ms = now_ms;
      s.since_ts_ms = f.ts_ms;
    }
    s.state = AlertState::Firing;
    // No storm: a scope that fires again within repeat_every of its last notification is recorded, not notified.
    s.notified = !s.ever_notified || r.repeat_every.count() == 0 || now_ms - s.last_notify_ms >= r.repeat_every.count();
    if (s.notified) {
      s.ever_notified = true;
      s.last_notify_ms = now_ms;
    }
    emit(AlertChange::Firing, s.notified);
    return;
  case AlertState::Firing:
    if (clears(r, *value, thr, clear)) {
      s.state = AlertState::Inactive;
      emit(AlertChange::Resolved, s.notified);
      return;
    }
    if (r.repeat_every.count() > 0 && s.notified && now_ms - s.last_notify_ms >= r.repeat_every.count()) {
      s.last_notify_ms = now_ms;
      emit(AlertChange::Repeat, true);
    }
    return;
  }
}

void AlertEvaluator::evaluate(const Frame& f, std::vector<AlertTransition>& out) {
  out.clear();
  if (f.rows_only || f.markers_only) return;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(f.mono.time_since_epoch()).count();
  if (f.processes) {
    // Which GPUs are allocated: in `run`, every GPU the run records; elsewhere, one a process holds.
    std::fill(allocated_.begin(), allocated_.end(), 0);
    for (const auto& gp : f.processes->gpu_procs) {
      const auto i = static_cast<size_t>(gp.gpu_index);
      if (allocated_.size() <= i) allocated_.resize(i + 1, 0);
      allocated_[i] = 1;
    }
  }
  for (const auto& g : f.gpus) {
    const auto i = static_cast<size_t>(g.gpu_index);
    if (gpu_names_.size() <= i)
      for (size_t k = gpu_names_.size(); k <= i; ++k)
        gpu_names_.push_back(fmt::format("gpu{}", k));
  }
  for (size_t ri = 0; ri < rules_.size(); ++ri) {
    const AlertRule& r = rules_[ri];
    if (r.kind == AlertKind::DeviceLost) {
      for (const auto& ev : f.events) {
        if (ev.kind != "device-lost" || !ev.source.starts_with("gpu")) continue;
        int idx = -1;
        try {
          idx = std::stoi(ev.source.substr(3));
        } catch (const std::exception&) {
          continue;
        }
        if (idx < 0 || idx > 4096) continue;
        Slot& s = gpu_slot(ri, idx);
        if (s.state == AlertState::Firing) continue;
        s.state = AlertState::Firing;
        s.since_ts_ms = f.ts_ms;
        s.notified = s.ever_notified = true;
        s.last_notify_ms = now_ms;
        out.push_back({ri, ev.source, AlertChange::Firing, std::nullopt, 0, std::nullopt, f.ts_ms, f.ts_ms, true});
      }
      continue;
    }
    switch (r.scope) {
    case AlertScope::Gpu: {
      const auto& m = kGpuMetrics[r.metric_index];
      for (const auto& g : f.gpus) {
        if (r.allocated_only && !run_mode_) {
          const auto i = static_cast<size_t>(g.gpu_index);
          if (i >= allocated_.size() || !allocated_[i]) {
            // No longer allocated: an idle alert on it has nothing left to say.
            Slot& s = gpu_slot(ri, g.gpu_index);
            if (s.state != AlertState::Inactive) {
              out.push_back({ri, gpu_names_[i],
                             s.state == AlertState::Firing ? AlertChange::Resolved : AlertChange::Cancelled,
                             s.last_value, s.last_threshold, std::nullopt, f.ts_ms, s.since_ts_ms,
                             s.state == AlertState::Firing && s.notified});
              s.state = AlertState::Inactive;
            }
            continue;
          }
        }
        std::optional<double> ref;
        if (!r.relative_to.empty()) ref = kGpuMetrics[r.relative_index].get(g);
        std::optional<double> raw = m.get(g);
        if (r.kind == AlertKind::Anomaly && raw) // issue 36: flagged on this frame by the anomaly monitor
          raw = std::find(f.anomalies.begin(), f.anomalies.end(), std::pair{g.gpu_index, std::string_view(r.metric)}) !=
                        f.anomalies.end()
                    ? 1.0
                    : 0.0;
        step(ri, gpu_slot(ri, g.gpu_index), raw, ref, gpu_names_[static_cast<size_t>(g.gpu_index)], f, now_ms, out);
      }
      break;
    }
    case AlertScope::Cpu: {
      static const std::string kCpu = "cpu";
      std::optional<double> ref;
      if (!r.relative_to.empty()) ref = kCpuMetrics[r.relative_index].get(f.cpu);
      step(ri, cpu_[ri], kCpuMetrics[r.metric_index].get(f.cpu), ref, kCpu, f, now_ms, out);
      break;
    }
    case AlertScope::Zone:
      for (const auto& z : f.cpu.zones) {
        if (!r.zone.empty() && z.zone != r.zone) continue;
        auto [it, added] = named_[ri].try_emplace(std::string(z.domain));
        std::optional<double> ref;
        if (!r.relative_to.empty()) ref = kZoneMetrics[r.relative_index].get(z);
        step(ri, it->second, kZoneMetrics[r.metric_index].get(z), ref, it->first, f, now_ms, out);
      }
      break;
    case AlertScope::Unit:
      if (!f.processes) break; // units are known once a scan (at most once a second)
      for (const auto& u : f.processes->units) {
        if (u.unit.empty()) continue;
        auto [it, added] = named_[ri].try_emplace(u.unit);
        std::optional<double> ref;
        if (!r.relative_to.empty()) ref = alert_unit_value(u, r.relative_index);
        step(ri, it->second, alert_unit_value(u, r.metric_index), ref, it->first, f, now_ms, out);
      }
      break;
    }
  }
}

std::string AlertEvaluator::message(const AlertTransition& t) const {
  const AlertRule& r = rules_[t.rule];
  if (t.change == AlertChange::Resolved) return resolved_message(r, t);
  // A rule that forecasts says so, with the horizon and the value now: "oom_soon on gpu7: 95.04 >= 95" read as if
  // memory were at 95 % when it was at 51 %.
  std::string tmpl = !r.message.empty()             ? r.message
                     : r.kind == AlertKind::Anomaly ? std::string("{rule} on {scope}: {metric} is anomalous (the "
                                                                  "`anomaly` event says how)")
                     : r.forecast.count() > 0
                         ? std::string("{rule} on {scope}: forecast: {metric} {op} {threshold} within {horizon} "
                                       "({value} projected; {now} now)")
                         : std::string("{rule} on {scope}: {value} {op} {threshold}");
  const std::string unit = r.kind != AlertKind::Threshold ? std::string()
                           : r.relative_to.empty()        ? std::string(alert_metric_unit(r.scope, r.metric_index))
                                                          : std::string("%");
  std::string out;
  out.reserve(tmpl.size() + 32);
  for (size_t i = 0; i < tmpl.size();) {
    if (tmpl[i] == '{') {
      const size_t close = tmpl.find('}', i);
      if (close != std::string::npos) {
        const std::string_view key(tmpl.data() + i + 1, close - i - 1);
        std::optional<std::string> rep;
        if (key == "rule")
          rep = r.name;
        else if (key == "scope")
          rep = t.scope;
        else if (key == "value")
          rep = format_value(r, t.value);
        else if (key == "horizon")
          rep = format_duration(r.forecast);
        else if (key == "now") // the reading itself (a forecast's {value} is where the trend gets to)
          rep = r.relative_to.empty()
                    ? format_value(r, t.raw)
                    : format_value(r, t.raw) + " " + std::string(alert_metric_unit(r.scope, r.metric_index));
        else if (key == "threshold")
          rep = format_value(r, t.threshold);
        else if (key == "unit")
          rep = unit;
        else if (key == "severity")
          rep = r.severity;
        else if (key == "metric")
          rep = r.metric;
        else if (key == "op")
          rep = std::string(to_string(r.op));
        if (rep) {
          out += *rep;
          i = close + 1;
          continue;
        }
      }
    }
    out += tmpl[i++];
  }
  return out;
}

// issue 32: a resolution says what is true now: the value back past the clear level. The rule's message template
// describes the firing condition ("gpu_stalled on gpu0: 98 < 50" once announced a resolution), so it is not used here.
std::string AlertEvaluator::resolved_message(const AlertRule& r, const AlertTransition& t) {
  const std::string head = fmt::format("{} on {} resolved", r.name, t.scope);
  if (r.kind == AlertKind::DeviceLost) return head;
  if (!t.raw) return head + ": the GPU is no longer allocated"; // taken off by allocated_only, not by its value
  if (r.kind == AlertKind::Anomaly) return fmt::format("{}: {} is no longer anomalous", head, r.metric); // issue 36
  if (r.op == AlertOp::Bits)
    return fmt::format("{}: {} has none of the bits {}", head, format_value(r, t.value), format_value(r, t.threshold));
  const bool upward = r.op == AlertOp::Gt || r.op == AlertOp::Ge;
  // Back past the clear level where the rule has one (hysteresis), else no longer past the threshold.
  std::string_view op = r.clear ? (upward ? "<" : ">")
                                : (r.op == AlertOp::Gt   ? "<="
                                   : r.op == AlertOp::Ge ? "<"
                                   : r.op == AlertOp::Lt ? ">="
                                                         : ">");
  const double level = r.clear ? *r.clear : t.threshold;
  const std::string unit = r.relative_to.empty() ? std::string(alert_metric_unit(r.scope, r.metric_index)) : "%";
  return fmt::format("{}: {} {} {}{}{}", head, format_value(r, t.value), op, format_value(r, level),
                     unit.empty() ? "" : " ", unit);
}

std::vector<FiringAlert> AlertEvaluator::firing() const {
  std::vector<FiringAlert> out;
  auto add = [&](size_t ri, const Slot& s, const std::string& scope) {
    if (s.state != AlertState::Firing) return;
    AlertTransition t{ri, scope, AlertChange::Firing, s.last_value, s.last_threshold, std::nullopt, 0, 0, false};
    out.push_back(
        {rules_[ri].name, rules_[ri].severity, scope, message(t), s.last_value, s.last_threshold, s.since_ts_ms});
  };
  for (size_t ri = 0; ri < rules_.size(); ++ri) {
    for (size_t i = 0; i < gpu_[ri].size(); ++i)
      add(ri, gpu_[ri][i], fmt::format("gpu{}", i));
    add(ri, cpu_[ri], "cpu");
    for (const auto& [name, s] : named_[ri])
      add(ri, s, name);
  }
  return out;
}

} // namespace wattscope
