#include "advice/advice.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/json_opt.hpp"
#include "core/text.hpp"
#include "core/time_util.hpp"

namespace wattscope::advice {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

// The CPU point at `ts_ms` (the same frame), or the nearest within `tolerance_ms`.
const CpuPoint* cpu_at(const std::vector<CpuPoint>& cpu, int64_t ts_ms, int64_t tolerance_ms) {
  auto it = std::lower_bound(cpu.begin(), cpu.end(), ts_ms, [](const CpuPoint& p, int64_t t) { return p.ts_ms < t; });
  const CpuPoint* best = nullptr;
  int64_t best_d = tolerance_ms + 1;
  if (it != cpu.end() && it->ts_ms - ts_ms < best_d) best = &*it, best_d = it->ts_ms - ts_ms;
  if (it != cpu.begin() && ts_ms - std::prev(it)->ts_ms < best_d) best = &*std::prev(it);
  return best;
}

std::string gpu_label(const GpuSeries& g) {
  return g.name.empty() ? fmt::format("GPU {}", g.gpu_index) : fmt::format("GPU {} ({})", g.gpu_index, g.name);
}

std::string severity_of(const OptF& pct) {
  if (!pct) return "low";
  if (*pct >= kHighSavingPct) return "high";
  if (*pct >= kMediumSavingPct) return "medium";
  return "low";
}

// What one class of intervals adds up to on one GPU.
struct Span {
  double seconds = 0;
  int64_t from_ms = 0, to_ms = 0;
  double energy_j = 0;
  bool energy_complete = true; // every interval's energy was known
  double util_s = 0, util_n_s = 0;
  double stall_s = 0; // Σ dt·(1 − u/kFedUtilPct), u below kFedUtilPct
  double cpu_s = 0, cpu_n_s = 0;
  double pcie_s = 0, pcie_n_s = 0;
  void add(const Interval& v) {
    if (seconds == 0) from_ms = v.from_ms;
    to_ms = v.to_ms;
    seconds += v.dt_s;
    if (v.energy_j)
      energy_j += *v.energy_j;
    else
      energy_complete = false;
    if (v.util_pct) {
      util_s += *v.util_pct * v.dt_s;
      util_n_s += v.dt_s;
      stall_s += v.dt_s * std::max(0.0, 1 - *v.util_pct / kFedUtilPct);
    }
    if (v.cpu_util_pct) cpu_s += *v.cpu_util_pct * v.dt_s, cpu_n_s += v.dt_s;
    if (v.pcie_bytes_per_s) pcie_s += *v.pcie_bytes_per_s * v.dt_s, pcie_n_s += v.dt_s;
  }
  OptF avg_util() const { return util_n_s > 0 ? OptF(util_s / util_n_s) : std::nullopt; }
  OptF avg_cpu() const { return cpu_n_s > 0 ? OptF(cpu_s / cpu_n_s) : std::nullopt; }
  OptF avg_pcie() const { return pcie_n_s > 0 ? OptF(pcie_s / pcie_n_s) : std::nullopt; }
};

nlohmann::json base_evidence(const GpuSeries& g, const Span& s, double total_s) {
  return {{"device", fmt::format("gpu{}", g.gpu_index)},
          {"gpu_index", g.gpu_index},
          {"gpu_name", g.name},
          {"from", iso_utc_ms(s.from_ms)},
          {"to", iso_utc_ms(s.to_ms)},
          {"seconds", s.seconds},
          {"share_pct", total_s > 0 ? 100 * s.seconds / total_s : 0.0}};
}

std::string saving_phrase(const OptF& j, const OptF& pct, const std::string& how) {
  if (!j) return "Saving: not estimated (" + how + ").";
  return fmt::format("Saving: about {}{}, {}.", format_energy(*j),
                     pct ? fmt::format(" ({:.1f} % of the run's energy)", *pct) : "", how);
}

std::string mb_s(const OptF& b) {
  return b ? fmt::format("{:.0f} MB/s", *b / 1e6) : "not measured";
}

std::string pct_or(const OptF& v, const char* missing = "not measured") {
  return v ? fmt::format("{:.0f} %", *v) : missing;
}

std::string reason_names(int64_t bits) {
  std::string out;
  auto add = [&](int64_t bit, const char* name) {
    if (bits & bit) out += (out.empty() ? "" : ", ") + std::string(name);
  };
  add(0x20, "SW thermal slowdown");
  add(0x40, "HW thermal slowdown");
  add(0x8, "HW slowdown");
  add(0x80, "HW power brake");
  return out;
}

} // namespace

std::vector<Interval> intervals(const GpuSeries& g, const std::vector<CpuPoint>& cpu, double idle_interval_ms) {
  std::vector<Interval> out;
  const auto& p = g.points;
  if (p.size() < 2) return out;
  std::vector<double> dts;
  for (size_t i = 1; i < p.size(); ++i)
    if (p[i].ts_ms > p[i - 1].ts_ms) dts.push_back(static_cast<double>(p[i].ts_ms - p[i - 1].ts_ms));
  const double med_ms = median(dts);
  const auto tolerance_ms = static_cast<int64_t>(med_ms / 2);
  const double max_step_ms = kMaxGapIntervals * std::max(med_ms, idle_interval_ms);
  for (size_t i = 1; i < p.size(); ++i) {
    const GpuPoint &a = p[i - 1], &b = p[i];
    const double dt_ms = static_cast<double>(b.ts_ms - a.ts_ms);
    if (dt_ms <= 0 || dt_ms > max_step_ms) continue;
    Interval v;
    v.from_ms = a.ts_ms;
    v.to_ms = b.ts_ms;
    v.dt_s = dt_ms / 1000;
    if (a.energy_j && b.energy_j && *b.energy_j >= *a.energy_j)
      v.energy_j = *b.energy_j - *a.energy_j;
    else if (a.power_w && b.power_w)
      v.energy_j = (*a.power_w + *b.power_w) / 2 * v.dt_s; // trapezoid, where there is no counter
    v.power_w = v.energy_j ? OptF(*v.energy_j / v.dt_s) : b.power_w;
    v.util_pct = b.util_pct;
    if (b.pcie_tx_bytes_per_s || b.pcie_rx_bytes_per_s)
      v.pcie_bytes_per_s = static_cast<double>(b.pcie_tx_bytes_per_s.value_or(0)) +
                           static_cast<double>(b.pcie_rx_bytes_per_s.value_or(0));
    v.throttle_reasons = b.throttle_reasons;
    v.clock_sm_mhz = b.clock_sm_mhz;
    v.mem_used_bytes = b.mem_used_bytes;
    v.temp_c = b.temp_c;
    v.power_limit_w = b.power_limit_w ? b.power_limit_w : g.power_limit_w;
    if (const CpuPoint* c = cpu_at(cpu, b.ts_ms, tolerance_ms)) v.cpu_util_pct = c->util_pct;
    out.push_back(v);
  }
  return out;
}

std::optional<IdlePower> estimate_idle_power(const std::vector<Interval>& iv, OptF power_limit_w) {
  std::vector<double> idle;
  double min_p = INFINITY;
  double su = 0, sp = 0, suu = 0, sup = 0, umin = INFINITY, umax = -INFINITY;
  size_t n = 0;
  for (const auto& v : iv) {
    if (!v.power_w) continue;
    min_p = std::min(min_p, *v.power_w);
    if (!v.util_pct) continue;
    if (*v.util_pct <= kIdleUtilPct) idle.push_back(*v.power_w);
    su += *v.util_pct, sp += *v.power_w, suu += *v.util_pct * *v.util_pct, sup += *v.util_pct * *v.power_w;
    umin = std::min(umin, *v.util_pct), umax = std::max(umax, *v.util_pct);
    ++n;
  }
  if (!idle.empty()) return IdlePower{median(idle), "the median power of its idle samples"};
  // A fit needs utilisation to spread: 20 points of it, so that the intercept is an interpolation's neighbour.
  if (n >= 3 && umax - umin >= 20) {
    const double nn = static_cast<double>(n);
    const double slope = (sup - su * sp / nn) / (suu - su * su / nn);
    if (slope > 0) {
      const double intercept = sp / nn - slope * su / nn;
      return IdlePower{std::clamp(intercept, 0.0, min_p), "the intercept of its power/utilisation fit"};
    }
  }
  const OptF limit = power_limit_w ? power_limit_w : [&]() -> OptF {
    for (const auto& v : iv)
      if (v.power_limit_w) return v.power_limit_w;
    return std::nullopt;
  }();
  if (limit && *limit > 0) {
    const double w = kFallbackIdlePowerShare * *limit;
    if (std::isfinite(min_p) && min_p < w) return IdlePower{min_p, "its lowest power in the run"};
    return IdlePower{w, fmt::format("{:.0f} % of its power limit (it was never idle)", 100 * kFallbackIdlePowerShare)};
  }
  return std::nullopt;
}

CapOutcome cap_outcome(const std::vector<Interval>& iv, double idle_w, double cap_w) {
  CapOutcome o;
  o.cap_w = cap_w;
  for (const auto& v : iv) {
    if (!v.power_w) continue;
    const double p = *v.power_w;
    o.baseline_j += p * v.dt_s;
    o.baseline_s += v.dt_s;
    if (p > cap_w && cap_w > idle_w && p > idle_w) {
      const double r = std::pow((cap_w - idle_w) / (p - idle_w), 1 / kPowerClockExponent);
      o.energy_j += cap_w * v.dt_s / r;
      o.time_s += v.dt_s / r;
    } else {
      o.energy_j += p * v.dt_s;
      o.time_s += v.dt_s;
    }
  }
  return o;
}

std::optional<CapOutcome> best_cap(const std::vector<Interval>& iv, double idle_w, double limit_w) {
  std::optional<CapOutcome> best;
  for (int k = 1;; ++k) {
    const double cap = limit_w * (1 - k * kCapStepShare);
    if (cap < limit_w * kMinCapShare - 1e-9 || cap <= idle_w) break;
    const CapOutcome o = cap_outcome(iv, idle_w, cap);
    if (o.slowdown_pct() > kMaxSlowdownPct) continue;
    if (o.saving_j() > 0 && (!best || o.saving_j() > best->saving_j())) best = o;
  }
  return best;
}

namespace {

// "1,410": clocks as people write them.
std::string thousands(double v) {
  std::string digits = fmt::format("{:.0f}", std::abs(v));
  for (auto i = static_cast<std::ptrdiff_t>(digits.size()) - 3; i > 0; i -= 3)
    digits.insert(static_cast<size_t>(i), ",");
  return (v < -0.5 ? "-" : "") + digits;
}

std::string duration_words(double s) {
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 2 * 3600) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

// The straggler item's reasons also name the SW power cap: a sibling capped lower than the others holds them back
// as surely as one that overheats.
std::string straggler_reasons(int64_t bits) {
  return forecast::straggler_reason_names(bits);
}

// One GPU found running behind its siblings.
struct Straggler {
  size_t gi = 0;
  std::vector<size_t> siblings; // indices into Input::gpus
  Span span;                    // its intervals in stretches apart
  int stretches = 0;
  double clock_s = 0, util_s = 0, power_s = 0; // time apart by each signal
  std::vector<double> clock, sib_clock, util, sib_util, power, sib_power;
  double waited_s = 0;
  bool waited_known = true;
  int64_t reasons = 0;
};

// The signal the item names (forecast::straggler_signal: cause first).
std::string straggler_metric(const Straggler& s) {
  switch (forecast::straggler_signal(s.clock_s, s.util_s, s.power_s, s.span.seconds)) {
  case forecast::StragglerSignal::clock:
    return "clock_sm";
  case forecast::StragglerSignal::util:
    return "util";
  case forecast::StragglerSignal::power:
    break;
  }
  return "power";
}

std::vector<Straggler> find_stragglers(const std::vector<std::vector<Interval>>& per_gpu) {
  // Siblings are the GPUs that worked: one idle through the run (the idle_gpu item's case) is not part of the job.
  std::vector<size_t> part;
  for (size_t gi = 0; gi < per_gpu.size(); ++gi) {
    double total = 0, idle = 0;
    for (const auto& v : per_gpu[gi]) {
      total += v.dt_s;
      if (v.util_pct && *v.util_pct <= kIdleUtilPct) idle += v.dt_s;
    }
    if (total > 0 && idle < 0.95 * total) part.push_back(gi);
  }
  std::vector<Straggler> out;
  if (part.size() < 2) return out;
  auto med_of = [](std::vector<double>& v) -> OptF { // in place: v is scratch
    if (v.empty()) return std::nullopt;
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return *mid;
  };
  for (size_t gi : part) {
    const auto& iv = per_gpu[gi];
    std::vector<double> dts;
    for (const auto& v : iv)
      dts.push_back(v.dt_s * 1000);
    const double tol_ms = median(dts) / 2;
    struct Mark {
      bool clock = false, util = false, power = false;
      OptF sib_clock, sib_util, sib_power;
      bool apart() const { return clock || util || power; }
    };
    std::vector<Mark> marks(iv.size());
    std::vector<double> c, u, p; // the siblings' values at one tick, reused (a long run has millions of ticks)
    // Per sibling, its first interval ending at or after the tick: both walk forward in time, so a cursor each.
    std::vector<size_t> cursor(per_gpu.size(), 0);
    for (size_t k = 0; k < iv.size(); ++k) {
      const Interval& v = iv[k];
      c.clear(), u.clear(), p.clear();
      for (size_t h : part) {
        if (h == gi) continue;
        const auto& hv = per_gpu[h];
        // The sibling's interval that ends at the same tick (nearest end within half an interval).
        size_t& at = cursor[h];
        while (at < hv.size() && hv[at].to_ms < v.to_ms)
          ++at;
        const auto it = hv.begin() + static_cast<std::ptrdiff_t>(at);
        const Interval* best = nullptr;
        double best_d = tol_ms;
        if (it != hv.end() && static_cast<double>(it->to_ms - v.to_ms) <= best_d)
          best = &*it, best_d = static_cast<double>(it->to_ms - v.to_ms);
        if (it != hv.begin() && static_cast<double>(v.to_ms - std::prev(it)->to_ms) <= best_d) best = &*std::prev(it);
        if (!best) continue;
        if (best->clock_sm_mhz) c.push_back(static_cast<double>(*best->clock_sm_mhz));
        if (best->util_pct) u.push_back(*best->util_pct);
        if (best->power_w) p.push_back(*best->power_w);
      }
      Mark& m = marks[k];
      const forecast::StragglerTick mine{v.clock_sm_mhz ? OptF(static_cast<double>(*v.clock_sm_mhz)) : std::nullopt,
                                         v.util_pct, v.power_w};
      const auto t = forecast::straggler_mark(mine, med_of(c), med_of(u), med_of(p));
      m.sib_clock = t.sib_clock, m.sib_util = t.sib_util, m.sib_power = t.sib_power;
      m.clock = t.clock, m.util = t.util, m.power = t.power;
    }
    Straggler s;
    s.gi = gi;
    for (size_t h : part)
      if (h != gi) s.siblings.push_back(h);
    for (size_t a = 0; a < iv.size();) {
      if (!marks[a].apart()) {
        ++a;
        continue;
      }
      size_t b = a + 1; // the stretch [a, b): consecutive samples apart, with no gap between them
      while (b < iv.size() && marks[b].apart() && iv[b].from_ms == iv[b - 1].to_ms)
        ++b;
      if (b - a >= static_cast<size_t>(kStragglerMinSamples)) ++s.stretches;
      if (b - a >= static_cast<size_t>(kStragglerMinSamples))
        for (size_t k = a; k < b; ++k) {
          const Interval& v = iv[k];
          const Mark& m = marks[k];
          s.span.add(v);
          if (m.clock) s.clock_s += v.dt_s;
          if (m.util) s.util_s += v.dt_s;
          if (m.power) s.power_s += v.dt_s;
          if (v.clock_sm_mhz && m.sib_clock)
            s.clock.push_back(static_cast<double>(*v.clock_sm_mhz)), s.sib_clock.push_back(*m.sib_clock);
          if (v.util_pct && m.sib_util) s.util.push_back(*v.util_pct), s.sib_util.push_back(*m.sib_util);
          if (v.power_w && m.sib_power) s.power.push_back(*v.power_w), s.sib_power.push_back(*m.sib_power);
          if (v.throttle_reasons) s.reasons |= *v.throttle_reasons;
          // The siblings' wait: the share of the interval's work it did not do, by the signal that set it apart.
          if (m.clock)
            s.waited_s += v.dt_s * (1 - static_cast<double>(*v.clock_sm_mhz) / *m.sib_clock);
          else if (m.util && *m.sib_util > 0)
            s.waited_s += v.dt_s * std::max(0.0, 1 - *v.util_pct / *m.sib_util);
          else if (v.clock_sm_mhz && m.sib_clock && *m.sib_clock > 0)
            s.waited_s += v.dt_s * std::max(0.0, 1 - static_cast<double>(*v.clock_sm_mhz) / *m.sib_clock);
          else
            s.waited_known = false;
        }
      a = b;
    }
    double total_s = 0;
    for (const auto& v : iv)
      total_s += v.dt_s;
    if (s.span.seconds >= kMinShare * total_s) out.push_back(std::move(s));
  }
  return out;
}

} // namespace

namespace {

struct OomForecast {
  int64_t from_ms = 0, to_ms = 0; // the window fitted
  size_t points = 0;
  double slope_bytes_per_s = 0, tau = 0;
  double now_bytes = 0; // the line at the last sample
  double first_bytes = 0;
  double seconds_to_full = 0;
};

std::optional<OomForecast> forecast_oom(const GpuSeries& g) {
  if (!g.mem_total_bytes || *g.mem_total_bytes <= 0) return std::nullopt;
  std::vector<const GpuPoint*> pts;
  for (const auto& p : g.points)
    if (p.mem_used_bytes) pts.push_back(&p);
  if (pts.size() < 2) return std::nullopt;
  const int64_t t0 = pts.front()->ts_ms, t1 = pts.back()->ts_ms;
  const int64_t from = t0 + (t1 - t0) / 2;
  std::vector<std::pair<double, double>> xy; // seconds since `from`, bytes
  std::vector<const GpuPoint*> window;
  for (const auto* p : pts)
    if (p->ts_ms >= from) window.push_back(p);
  if (window.size() < static_cast<size_t>(kOomMinSamples)) return std::nullopt;
  const size_t n = std::min(window.size(), static_cast<size_t>(kOomMaxFitPoints));
  for (size_t k = 0; k < n; ++k) {
    const GpuPoint* p = window[n == 1 ? 0 : k * (window.size() - 1) / (n - 1)];
    xy.emplace_back(static_cast<double>(p->ts_ms - from) / 1000, static_cast<double>(*p->mem_used_bytes));
  }
  std::vector<double> slopes;
  double concordant = 0, discordant = 0;
  for (size_t i = 0; i < xy.size(); ++i)
    for (size_t j = i + 1; j < xy.size(); ++j) {
      const double dx = xy[j].first - xy[i].first, dy = xy[j].second - xy[i].second;
      if (dx <= 0) continue;
      slopes.push_back(dy / dx);
      if (dy > 0) concordant += 1;
      if (dy < 0) discordant += 1;
    }
  if (slopes.empty()) return std::nullopt;
  OomForecast f;
  f.slope_bytes_per_s = median(slopes);
  f.tau = (concordant - discordant) / static_cast<double>(slopes.size());
  const double span_s = xy.back().first - xy.front().first;
  const double total = static_cast<double>(*g.mem_total_bytes);
  if (f.slope_bytes_per_s <= 0 || f.tau < kOomMinTau || f.slope_bytes_per_s * span_s < kOomMinGrowthShare * total)
    return std::nullopt;
  std::vector<double> icepts;
  for (const auto& [x, y] : xy)
    icepts.push_back(y - f.slope_bytes_per_s * x);
  const double intercept = median(icepts);
  f.first_bytes = intercept + f.slope_bytes_per_s * xy.front().first;
  f.now_bytes = intercept + f.slope_bytes_per_s * xy.back().first;
  f.seconds_to_full = std::max(0.0, (total - f.now_bytes) / f.slope_bytes_per_s);
  if (f.seconds_to_full > kOomHorizonS || f.seconds_to_full > kOomMaxExtrapolation * span_s) return std::nullopt;
  f.from_ms = window.front()->ts_ms;
  f.to_ms = window.back()->ts_ms;
  f.points = xy.size();
  return f;
}

} // namespace

namespace {

// The whole run, as every advisor sees it: its GPUs' intervals and its energy, the base of every saving_pct (the
// GPUs' interval energies plus the CPU's package and DRAM energy over the same samples).
struct Run {
  const Input& in;
  std::vector<std::vector<Interval>> per_gpu;
  double run_j = 0;
  OptF pct(const OptF& j) const { return j && run_j > 0 ? OptF(100 * *j / run_j) : std::nullopt; }
};

Run run_of(const Input& in) {
  Run run{in, {}, 0};
  for (const auto& g : in.gpus) {
    run.per_gpu.push_back(intervals(g, in.cpu, in.idle_interval_ms));
    for (const auto& v : run.per_gpu.back())
      run.run_j += v.energy_j.value_or(0);
  }
  OptF first, last;
  for (const auto& c : in.cpu)
    if (c.energy_j) {
      if (!first) first = c.energy_j;
      last = c.energy_j;
    }
  if (first && last && *last > *first) run.run_j += *last - *first;
  return run;
}

double sampled_s(const std::vector<Interval>& iv) {
  double total_s = 0;
  for (const auto& v : iv)
    total_s += v.dt_s;
  return total_s;
}

// The GPU's power limit: its own, else the first an interval carries.
OptF power_limit_of(const GpuSeries& g, const std::vector<Interval>& iv) {
  OptF limit = g.power_limit_w;
  for (const auto& v : iv)
    if (!limit && v.power_limit_w) limit = v.power_limit_w;
  return limit;
}

// What an advisor found: an item less its kind (the table's) and its saving's share (the run's).
struct Finding {
  Finding(nlohmann::json ev, OptF saving, std::string t, std::optional<std::string> sev = std::nullopt)
      : evidence(std::move(ev)), saving_j(saving), text(std::move(t)), severity(std::move(sev)) {}
  nlohmann::json evidence;
  OptF saving_j;
  std::string text;
  std::optional<std::string> severity; // missing: by the saving's share of the run's energy
};

// One GPU's intervals divided into the classes the per-GPU advisors look at, in one pass.
struct Gpu {
  Gpu(const GpuSeries& series, const std::vector<Interval>& ivs) : g(series), iv(ivs) {}
  const GpuSeries& g;
  const std::vector<Interval>& iv;
  double total_s = 0;
  OptF limit;
  std::optional<IdlePower> idle_p;
  std::string who;
  Span idle, starved, transfer, fill, busy, throttled, at_limit;
  int64_t throttle_bits = 0;
  double lost_s = 0;
  bool lost_known = true;
  OptF max_temp;
  std::string idle_how;
  std::string stall_assumption;
  OptF stall_saving(const Span& s) const { return idle_p ? OptF(idle_p->watts * s.stall_s) : std::nullopt; }
  void add(const Interval& v);
};

void Gpu::add(const Interval& v) {
  if (v.temp_c && (!max_temp || *v.temp_c > *max_temp)) max_temp = v.temp_c;
  if (v.throttle_reasons && (*v.throttle_reasons & (kThrottleThermalMask | kThrottlePowerMask))) {
    throttled.add(v);
    throttle_bits |= *v.throttle_reasons & (kThrottleThermalMask | kThrottlePowerMask);
    if (v.clock_sm_mhz && g.clock_sm_max_mhz && *g.clock_sm_max_mhz > 0)
      lost_s +=
          v.dt_s * std::max(0.0, 1 - static_cast<double>(*v.clock_sm_mhz) / static_cast<double>(*g.clock_sm_max_mhz));
    else
      lost_known = false;
  }
  if (!v.util_pct) return;
  const double u = *v.util_pct;
  if (u <= kIdleUtilPct) {
    idle.add(v);
    return;
  }
  busy.add(v);
  if (limit && v.power_w &&
      (*v.power_w >= kPowerBoundPct / 100 * *limit || (v.throttle_reasons && (*v.throttle_reasons & kSwPowerCapBit))))
    at_limit.add(v);
  if (u < kLowUtilPct && v.pcie_bytes_per_s && *v.pcie_bytes_per_s >= kPcieBusyBytesPerS)
    transfer.add(v);
  else if (u < kLowUtilPct && ((v.cpu_util_pct && *v.cpu_util_pct >= kCpuBusyPct) ||
                               (v.pcie_bytes_per_s && *v.pcie_bytes_per_s < kPcieQuietBytesPerS)))
    starved.add(v);
  else if (u < kFedUtilPct)
    fill.add(v);
}

// Missing for a GPU with no sampled time.
std::optional<Gpu> gpu_of(const Run& run, size_t gi) {
  Gpu c{run.in.gpus[gi], run.per_gpu[gi]};
  c.total_s = sampled_s(c.iv);
  if (c.total_s <= 0) return std::nullopt;
  c.limit = power_limit_of(c.g, c.iv);
  c.idle_p = estimate_idle_power(c.iv, c.limit);
  c.who = gpu_label(c.g);
  for (const auto& v : c.iv)
    c.add(v);
  c.idle_how =
      c.idle_p ? fmt::format("{:.0f} W idle power, {}", c.idle_p->watts, c.idle_p->basis) : "idle power unknown";
  c.stall_assumption =
      fmt::format("the same work would run at {:.0f} % utilisation when fed, so the time below that is stall time, "
                  "during which the GPU draws at least its idle power ({}); the host's own draw over that time is "
                  "not counted",
                  kFedUtilPct, c.idle_how);
  return c;
}

// Idle or allocated-but-unused: measured, the energy it drew while nothing ran.
std::optional<Finding> idle_gpu(const Run& run, const Gpu& c) {
  const Span& idle = c.idle;
  if (idle.seconds < kMinShare * c.total_s) return std::nullopt;
  const bool whole = idle.seconds >= 0.95 * c.total_s;
  const OptF saving = idle.energy_complete ? OptF(idle.energy_j) : std::nullopt;
  nlohmann::json ev = base_evidence(c.g, idle, c.total_s);
  ev["idle_energy_j"] = opt(saving);
  ev["avg_power_w"] =
      idle.energy_complete && idle.seconds > 0 ? nlohmann::json(idle.energy_j / idle.seconds) : nlohmann::json();
  ev["avg_util_pct"] = opt(idle.avg_util());
  ev["estimate"] = "measured";
  std::string text =
      whole ? fmt::format("{} did no work during the run (utilisation at most {:.0f} % for {:.1f} s) yet drew {}: "
                          "it was allocated but unused. Release it: request fewer GPUs, or give the job only the "
                          "ones it uses (CUDA_VISIBLE_DEVICES).",
                          c.who, kIdleUtilPct, idle.seconds, saving ? format_energy(*saving) : "unmeasured energy")
            : fmt::format("{} was idle (utilisation at most {:.0f} %) for {:.0f} % of the run ({:.1f} s between "
                          "{} and {}) and drew {} meanwhile. Release it while it waits (a separate job for the "
                          "idle stage), or overlap that stage with GPU work.",
                          c.who, kIdleUtilPct, 100 * idle.seconds / c.total_s, idle.seconds, iso_utc_ms(idle.from_ms),
                          iso_utc_ms(idle.to_ms), saving ? format_energy(*saving) : "unmeasured energy");
  return Finding{std::move(ev), saving,
                 text + " " + saving_phrase(saving, run.pct(saving), "measured: the energy it drew while idle")};
}

std::optional<Finding> gpu_starved(const Run& run, const Gpu& c) {
  const Span& starved = c.starved;
  if (starved.seconds < kMinShare * c.total_s) return std::nullopt;
  const OptF saving = c.stall_saving(starved);
  nlohmann::json ev = base_evidence(c.g, starved, c.total_s);
  ev["avg_util_pct"] = opt(starved.avg_util());
  ev["avg_cpu_util_pct"] = opt(starved.avg_cpu());
  ev["avg_pcie_bytes_per_s"] = opt(starved.avg_pcie());
  ev["stall_s"] = starved.stall_s;
  ev["idle_power_w"] = c.idle_p ? nlohmann::json(c.idle_p->watts) : nlohmann::json();
  ev["estimate"] = "modelled";
  ev["assumption"] = c.stall_assumption;
  const bool cpu_busy = starved.avg_cpu() && *starved.avg_cpu() >= kCpuBusyPct;
  return Finding{
      std::move(ev), saving,
      fmt::format("{} was starved by its input for {:.1f} s ({:.0f} % of the run): utilisation averaged {} while "
                  "{} (host CPU {}, PCIe {}). Feed it faster: more data loader workers, pinned memory, "
                  "prefetching{}. {} Assumes {}.",
                  c.who, starved.seconds, 100 * starved.seconds / c.total_s, pct_or(starved.avg_util()),
                  cpu_busy ? "the host CPU was busy" : "PCIe was quiet", pct_or(starved.avg_cpu()),
                  mb_s(starved.avg_pcie()),
                  cpu_busy ? ", or preprocessing moved to the GPU" : ", or faster storage for the input",
                  saving_phrase(saving, run.pct(saving), "modelled"), c.stall_assumption)};
}

std::optional<Finding> transfer_bound(const Run& run, const Gpu& c) {
  const Span& transfer = c.transfer;
  if (transfer.seconds < kMinShare * c.total_s) return std::nullopt;
  const OptF saving = c.stall_saving(transfer);
  nlohmann::json ev = base_evidence(c.g, transfer, c.total_s);
  ev["avg_util_pct"] = opt(transfer.avg_util());
  ev["avg_pcie_bytes_per_s"] = opt(transfer.avg_pcie());
  ev["stall_s"] = transfer.stall_s;
  ev["idle_power_w"] = c.idle_p ? nlohmann::json(c.idle_p->watts) : nlohmann::json();
  ev["estimate"] = "modelled";
  ev["assumption"] = c.stall_assumption;
  return Finding{
      std::move(ev), saving,
      fmt::format("{} was bound by host-device transfers for {:.1f} s ({:.0f} % of the run): PCIe carried {} "
                  "while utilisation averaged {}. Keep data on the GPU between steps, use pinned memory with "
                  "non-blocking copies that overlap compute, and batch small transfers. {} Assumes {}.",
                  c.who, transfer.seconds, 100 * transfer.seconds / c.total_s, mb_s(transfer.avg_pcie()),
                  pct_or(transfer.avg_util()), saving_phrase(saving, run.pct(saving), "modelled"), c.stall_assumption)};
}

// Memory headroom: only on a GPU that worked (an idle GPU's headroom says nothing about its batch).
std::optional<Finding> memory_headroom(const Run& run, const Gpu& c) {
  const GpuSeries& g = c.g;
  OptI peak_mem;
  for (const auto& p : g.points)
    if (p.mem_used_bytes && (!peak_mem || *p.mem_used_bytes > *peak_mem)) peak_mem = p.mem_used_bytes;
  if (!peak_mem || !g.mem_total_bytes || *g.mem_total_bytes <= 0 || c.busy.seconds < kMinShare * c.total_s ||
      static_cast<double>(*peak_mem) >= kHeadroomPeakPct / 100 * static_cast<double>(*g.mem_total_bytes))
    return std::nullopt;
  const double peak_pct = 100.0 * static_cast<double>(*peak_mem) / static_cast<double>(*g.mem_total_bytes);
  const OptF saving = c.fill.stall_s > 0 ? c.stall_saving(c.fill) : std::nullopt;
  nlohmann::json ev = base_evidence(g, c.busy, c.total_s);
  ev["peak_mem_used_bytes"] = *peak_mem;
  ev["mem_total_bytes"] = *g.mem_total_bytes;
  ev["peak_mem_pct"] = peak_pct;
  ev["avg_util_pct"] = opt(c.busy.avg_util());
  ev["underfilled_s"] = c.fill.seconds;
  ev["stall_s"] = c.fill.stall_s;
  ev["estimate"] = saving ? "modelled" : "not estimated";
  if (saving) ev["assumption"] = c.stall_assumption + "; a larger batch fills the GPU to that utilisation";
  const double factor = 100 / std::max(peak_pct, 1.0);
  const std::string how =
      saving ? "modelled"
      : c.starved.seconds + c.transfer.seconds > 0
          ? "its waiting time is counted under the starvation or transfer advice; whether a larger batch saves energy "
            "per sample is for a run at that batch size to show ('wattscope compare')"
          : fmt::format("it already ran at {:.0f} % utilisation or more; whether a larger batch saves energy per "
                        "sample is for a run at that batch size to show ('wattscope compare')",
                        kFedUtilPct);
  return Finding{
      std::move(ev), saving,
      fmt::format(
          "{} used at most {} of its {} memory ({:.0f} %): a batch about {:.1f}x as large would fit. "
          "Larger batches keep the GPU busier per step and amortise per-step overheads (adjust the "
          "learning rate to match). {}{}",
          c.who, format_bytes(static_cast<double>(*peak_mem)), format_bytes(static_cast<double>(*g.mem_total_bytes)),
          peak_pct, std::floor(factor * 10) / 10, saving_phrase(saving, run.pct(saving), how),
          saving ? " Assumes " + c.stall_assumption + "; a larger batch fills the GPU to that utilisation." : "")};
}

std::optional<Finding> throttling(const Run& run, const Gpu& c) {
  if (c.throttled.seconds < kThrottleMinShare * c.total_s) return std::nullopt;
  const OptF saving = c.idle_p && c.lost_known ? OptF(c.idle_p->watts * c.lost_s) : std::nullopt;
  const bool thermal = c.throttle_bits & kThrottleThermalMask;
  nlohmann::json ev = base_evidence(c.g, c.throttled, c.total_s);
  ev["reasons"] = reason_names(c.throttle_bits);
  ev["reason_bits"] = c.throttle_bits;
  ev["max_temp_c"] = opt(c.max_temp);
  ev["clock_sm_max_mhz"] = c.g.clock_sm_max_mhz ? nlohmann::json(*c.g.clock_sm_max_mhz) : nlohmann::json();
  ev["lost_s"] = c.lost_known ? nlohmann::json(c.lost_s) : nlohmann::json();
  ev["idle_power_w"] = c.idle_p ? nlohmann::json(c.idle_p->watts) : nlohmann::json();
  ev["estimate"] = saving ? "modelled" : "not estimated";
  const std::string assumption =
      fmt::format("work runs at the SM clock's speed, so throttled time at clock c does c/max of the work and "
                  "the rest is lost time, during which the GPU draws at least its idle power ({})",
                  c.idle_how);
  if (saving) ev["assumption"] = assumption;
  return Finding{
      std::move(ev), saving,
      fmt::format("{} was throttled ({}) for {:.1f} s ({:.0f} % of the run){}. {} {}", c.who,
                  reason_names(c.throttle_bits), c.throttled.seconds, 100 * c.throttled.seconds / c.total_s,
                  c.max_temp ? fmt::format(", up to {:.0f} °C", *c.max_temp) : "",
                  thermal ? "Improve its cooling (airflow, fan curve, a cooler slot or rack position), or lower "
                            "its power limit so it stays below the thermal limit."
                          : "Check the power delivery (PSU, cables, the node's power brake) and its placement.",
                  saving ? saving_phrase(saving, run.pct(saving), "modelled") + " Assumes " + assumption + "."
                         : saving_phrase(saving, run.pct(saving), "the SM clock or its maximum is not known"))};
}

// Power limit (the Zeus observation), only on a GPU that spent its busy time at its limit.
std::optional<Finding> power_limit(const Run& run, const Gpu& c) {
  if (!c.limit || !c.idle_p || c.busy.seconds <= 0 || c.at_limit.seconds < kPowerBoundMinShare * c.busy.seconds)
    return std::nullopt;
  const auto cap = best_cap(c.iv, c.idle_p->watts, *c.limit);
  if (!cap || cap->baseline_j <= 0 || 100 * cap->saving_j() / cap->baseline_j < kMinCapSavingPct) return std::nullopt;
  const OptF saving = cap->saving_j();
  const std::string assumption = fmt::format(
      "the work is compute-bound (time ∝ 1/clock; memory-bound work slows less) and dynamic power grows with "
      "clock³ above {:.0f} W idle power ({}); the host's extra draw over the longer run is not counted",
      c.idle_p->watts, c.idle_p->basis);
  nlohmann::json ev = base_evidence(c.g, c.at_limit, c.busy.seconds);
  ev["power_limit_w"] = *c.limit;
  ev["suggested_cap_w"] = cap->cap_w;
  ev["modelled_slowdown_pct"] = cap->slowdown_pct();
  ev["gpu_energy_j"] = cap->baseline_j;
  ev["modelled_energy_j"] = cap->energy_j;
  ev["idle_power_w"] = c.idle_p->watts;
  ev["estimate"] = "modelled";
  ev["assumption"] = assumption;
  return Finding{std::move(ev), saving,
                 fmt::format("{} ran at or near its {:.0f} W power limit for {:.0f} % of its busy time. Capping it at "
                             "{:.0f} W (nvidia-smi -i {} -pl {:.0f}) would have cut its energy by {:.1f} % for about "
                             "{:.1f} % more time. {} Estimate; assumes {}.",
                             c.who, *c.limit, 100 * c.at_limit.seconds / c.busy.seconds, cap->cap_w, c.g.gpu_index,
                             cap->cap_w, 100 * cap->saving_j() / cap->baseline_j, cap->slowdown_pct(),
                             saving_phrase(saving, run.pct(saving), "modelled"), assumption)};
}

// The sum of the siblings' idle power; missing when one's is not known.
OptF siblings_idle_w(const Run& run, const Straggler& s) {
  double idle_sum = 0;
  for (size_t h : s.siblings) {
    const auto ip = estimate_idle_power(run.per_gpu[h], power_limit_of(run.in.gpus[h], run.per_gpu[h]));
    if (!ip) return std::nullopt;
    idle_sum += ip->watts;
  }
  return idle_sum;
}

// What a straggler's siblings should look at, by what held it back.
std::string straggler_fix(const Straggler& s, const std::string& metric, int gpu_index) {
  if (s.reasons & kThrottleThermalMask) return "Improve its cooling (airflow, a cooler slot) or move the job off it.";
  if (s.reasons & kThrottlePowerMask) return "Check its power delivery (PSU, cables, the node's power brake).";
  if (s.reasons & kSwPowerCapBit)
    return fmt::format("Check its power limit against its siblings' (nvidia-smi -i {} -q -d POWER).", gpu_index);
  if (metric == "util")
    return "Look at what feeds it: its data loader shard, its CPU and NUMA placement, its PCIe link.";
  return "Compare its clocks, temperature and power limit with its siblings'.";
}

Finding straggler(const Run& run, Straggler& s) {
  const GpuSeries& g = run.in.gpus[s.gi];
  const double total_s = sampled_s(run.per_gpu[s.gi]);
  auto med_or_null = [](std::vector<double>& v) { return v.empty() ? nlohmann::json() : nlohmann::json(median(v)); };
  const OptF idle_w = siblings_idle_w(run, s);
  const OptF saving = s.waited_known && idle_w ? OptF(s.waited_s * *idle_w) : std::nullopt;
  const size_t n_sib = s.siblings.size();
  const std::string metric = straggler_metric(s);
  nlohmann::json ev = base_evidence(g, s.span, total_s);
  ev["metric"] = metric;
  ev["siblings"] = n_sib;
  ev["stretches"] = s.stretches;
  ev["clock_sm_mhz"] = med_or_null(s.clock);
  ev["siblings_clock_sm_mhz"] = med_or_null(s.sib_clock);
  ev["util_pct"] = med_or_null(s.util);
  ev["siblings_util_pct"] = med_or_null(s.sib_util);
  ev["power_w"] = med_or_null(s.power);
  ev["siblings_power_w"] = med_or_null(s.sib_power);
  ev["reasons"] = straggler_reasons(s.reasons);
  ev["reason_bits"] = s.reasons;
  ev["waited_s"] = s.waited_known ? nlohmann::json(s.waited_s) : nlohmann::json();
  ev["siblings_idle_power_w"] = opt(idle_w);
  const std::string assumption =
      "the job synchronises its GPUs every step (data-parallel training), so the siblings wait while it lags: work "
      "runs at the SM clock's speed (a utilisation straggler: at its utilisation's share of theirs), and each "
      "sibling draws at least its idle power while it waits; the straggler's own lost time is the throttling "
      "item's";
  ev["estimate"] = saving ? "modelled" : "not estimated";
  if (saving) ev["assumption"] = assumption;
  auto one = [&](double v) {
    return metric == "clock_sm" ? thousands(v) + " MHz"
           : metric == "util"   ? fmt::format("{:.0f} % utilisation", v)
                                : fmt::format("{:.0f} W", v);
  };
  const char* key = metric == "clock_sm" ? "clock_sm_mhz" : metric == "util" ? "util_pct" : "power_w";
  const std::string mine = one(ev[key].get<double>());
  const std::string theirs = one(ev[std::string("siblings_") + key].get<double>());
  const std::string reasons = straggler_reasons(s.reasons);
  return Finding{
      std::move(ev), saving,
      fmt::format("{} ran behind its siblings: at {} for {} ({:.0f} % of the run, between {} and {}) while its "
                  "{} sibling{} ran at {}{}. In a job that synchronises its GPUs every step, the others waited "
                  "for it: {}. {} {}",
                  gpu_label(g), mine, duration_words(s.span.seconds), 100 * s.span.seconds / total_s,
                  iso_utc_ms(s.span.from_ms), iso_utc_ms(s.span.to_ms), n_sib, n_sib == 1 ? "" : "s", theirs,
                  reasons.empty() ? "" : "; its throttle reasons: " + reasons,
                  s.waited_known ? fmt::format("about {} each (modelled)", duration_words(s.waited_s))
                                 : "how long is not estimated (its SM clock is not known)",
                  straggler_fix(s, metric, g.gpu_index),
                  saving ? saving_phrase(saving, run.pct(saving), "modelled") + " Assumes " + assumption + "."
                         : saving_phrase(saving, run.pct(saving),
                                         s.waited_known ? "a sibling's idle power is not known"
                                                        : "its SM clock is not known"))};
}

// Stragglers: across the GPUs.
std::vector<Finding> stragglers(const Run& run) {
  std::vector<Finding> out;
  for (Straggler& s : find_stragglers(run.per_gpu))
    out.push_back(straggler(run, s));
  return out;
}

// Out-of-memory forecasts: a risk, not a waste, so no saving; the severity says how soon.
std::optional<Finding> oom_forecast(const GpuSeries& g) {
  const auto f = forecast_oom(g);
  if (!f) return std::nullopt;
  const double total = static_cast<double>(*g.mem_total_bytes);
  const double window_s = static_cast<double>(f->to_ms - f->from_ms) / 1000;
  const std::string full_at = iso_utc_ms(f->to_ms + static_cast<int64_t>(f->seconds_to_full * 1000));
  nlohmann::json ev = {{"device", fmt::format("gpu{}", g.gpu_index)},
                       {"gpu_index", g.gpu_index},
                       {"gpu_name", g.name},
                       {"from", iso_utc_ms(f->from_ms)},
                       {"to", iso_utc_ms(f->to_ms)},
                       {"seconds", window_s},
                       {"points", f->points},
                       {"slope_bytes_per_s", f->slope_bytes_per_s},
                       {"kendall_tau", f->tau},
                       {"mem_used_bytes", f->now_bytes},
                       {"mem_total_bytes", *g.mem_total_bytes},
                       {"seconds_to_full", f->seconds_to_full},
                       {"full_at", full_at},
                       {"method", "Theil-Sen line over the last half of the run, extrapolated to the memory's size"},
                       {"estimate", "not estimated"}};
  return Finding{
      std::move(ev), std::nullopt,
      fmt::format("{}'s memory grew steadily over the last {} of the run: {} per hour (Theil–Sen; Kendall τ "
                  "{:.2f}), from {} to {} of its {}. At this rate {} runs out of memory in ~{} after the last "
                  "sample ({}). Look for what grows: tensors kept across steps (a loss summed with its graph, a "
                  "list of outputs), a cache without a bound; torch.cuda.memory_summary() between epochs shows it. "
                  "Saving: not estimated (a forecast of a failure, not a waste).",
                  gpu_label(g), duration_words(window_s), format_bytes(f->slope_bytes_per_s * 3600), f->tau,
                  format_bytes(f->first_bytes), format_bytes(f->now_bytes), format_bytes(total),
                  fmt::format("GPU {}", g.gpu_index), duration_words(f->seconds_to_full), full_at),
      // Within the hour: act now (save a checkpoint, fix and restart); later: before the next long run.
      f->seconds_to_full <= 3600 ? "high" : "medium"};
}

std::vector<Finding> oom_forecasts(const Run& run) {
  std::vector<Finding> out;
  for (const GpuSeries& g : run.in.gpus)
    if (auto f = oom_forecast(g)) out.push_back(std::move(*f));
  return out;
}

// The advice kinds, in the order their items are listed before the sort by saving (which keeps that order among
// equal savings). The per-GPU ones share one pass over each GPU's intervals and are asked GPU by GPU; those of the
// run look across the GPUs, after them.
struct GpuAdvisor {
  std::string_view kind;
  std::optional<Finding> (*find)(const Run&, const Gpu&);
};
constexpr GpuAdvisor kGpuAdvisors[] = {
    {"idle_gpu", idle_gpu},
    {"gpu_starved", gpu_starved},
    {"transfer_bound", transfer_bound},
    {"memory_headroom", memory_headroom},
    {"throttling", throttling},
    {"power_limit", power_limit},
};
struct RunAdvisor {
  std::string_view kind;
  std::vector<Finding> (*find)(const Run&);
};
constexpr RunAdvisor kRunAdvisors[] = {
    {"straggler", stragglers},
    {"oom_forecast", oom_forecasts},
};

Item item_of(std::string_view kind, Finding f, const Run& run) {
  Item it;
  it.kind = kind;
  it.saving_j = f.saving_j;
  it.saving_pct = run.pct(f.saving_j);
  it.severity = f.severity ? std::move(*f.severity) : severity_of(it.saving_pct);
  it.evidence = std::move(f.evidence);
  it.text = std::move(f.text);
  return it;
}

} // namespace

std::vector<Item> advise(const Input& in) {
  const Run run = run_of(in);
  std::vector<Item> items;
  for (size_t gi = 0; gi < in.gpus.size(); ++gi)
    if (const auto gpu = gpu_of(run, gi))
      for (const GpuAdvisor& a : kGpuAdvisors)
        if (auto f = a.find(run, *gpu)) items.push_back(item_of(a.kind, std::move(*f), run));
  for (const RunAdvisor& a : kRunAdvisors)
    for (Finding& f : a.find(run))
      items.push_back(item_of(a.kind, std::move(f), run));
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.saving_j.has_value() != b.saving_j.has_value()) return a.saving_j.has_value();
    return a.saving_j.value_or(0) > b.saving_j.value_or(0);
  });
  return items;
}

nlohmann::json to_json(const std::vector<Item>& items) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& it : items)
    arr.push_back({{"kind", it.kind},
                   {"severity", it.severity},
                   {"evidence", it.evidence},
                   {"saving_j", opt(it.saving_j)},
                   {"saving_pct", opt(it.saving_pct)},
                   {"text", it.text}});
  return arr;
}

std::string to_text(const std::vector<Item>& items, size_t max_items, bool with_evidence) {
  if (items.empty()) return "";
  std::string out;
  const size_t n = std::min(max_items, items.size());
  for (size_t i = 0; i < n; ++i) {
    const Item& it = items[i];
    out += fmt::format("  {}. [{}] {}: {}\n", i + 1, it.severity, it.kind, it.text);
    if (with_evidence) {
      std::string ev;
      for (const auto& [k, v] : it.evidence.items())
        if (k != "assumption")
          ev += (ev.empty() ? "" : ", ") + k + "=" +
                (v.is_string()         ? v.get<std::string>()
                 : v.is_number_float() ? fmt::format("{:.6g}", v.get<double>())
                                       : v.dump());
      out += "     evidence: " + ev + "\n";
    }
  }
  if (n < items.size()) out += fmt::format("  ({} more: 'wattscope advise' lists them all)\n", items.size() - n);
  return out;
}

} // namespace wattscope::advice
