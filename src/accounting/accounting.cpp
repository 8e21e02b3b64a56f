#include "accounting/accounting.hpp"
#include "core/json_opt.hpp"
#include "core/metrics.hpp"

#include <algorithm>

namespace wattscope {

namespace {} // namespace

OptF RunSummary::cpu_energy_j() const {
  if (!cpu_package_energy_j && !cpu_dram_energy_j) return std::nullopt;
  return cpu_package_energy_j.value_or(0) + cpu_dram_energy_j.value_or(0);
}

OptF RunSummary::total_energy_j() const {
  OptF total = cpu_energy_j();
  for (const auto& g : gpus)
    if (g.samples > 0) total = total.value_or(0) + g.energy_j;
  return total;
}

nlohmann::json SamplingSummary::to_json() const {
  return {{"adaptive", adaptive},         {"interval_s", interval_s},         {"idle_interval_s", idle_interval_s},
          {"idle_after_s", idle_after_s}, {"idle_stretches", idle_stretches}, {"idle_s", idle_s},
          {"probe_ticks", probe_ticks}};
}

nlohmann::json RunSummary::to_json() const {
  nlohmann::json gj = nlohmann::json::array();
  for (const auto& g : gpus) {
    gj.push_back({{"index", g.device.gpu_index},
                  {"uuid", g.device.uuid},
                  {"name", g.device.name},
                  {"vendor", g.device.vendor},
                  {"energy_j", g.samples ? nlohmann::json(g.energy_j) : nlohmann::json()},
                  {"energy_method", g.device.energy_method},
                  {"avg_power_w", opt(g.power_w.avg())},
                  {"peak_power_w", opt(g.power_w.peak)},
                  {"avg_util_pct", opt(g.util_gpu_pct.avg())},
                  {"peak_mem_used_bytes", opt(g.peak_mem_used_bytes)},
                  {"mem_total_bytes", opt(g.device.mem_total_bytes)},
                  {"samples", g.samples},
                  {"lost", g.lost}});
    // issue 18: an integral's coarsest step, where it spans more than a few intervals (idle stretches, stalls)
    if (g.device.energy_method == "integrated" && g.max_integration_step_s > 0)
      gj.back()["max_integration_step_s"] = g.max_integration_step_s;
  }
  nlohmann::json zj = nlohmann::json::array();
  for (const auto& z : zones)
    zj.push_back({{"domain", z.domain},
                  {"zone", z.zone},
                  {"socket", opt(z.socket)},
                  {"energy_j", z.energy_j},
                  {"avg_power_w", opt(z.power_w.avg())},
                  {"peak_power_w", opt(z.power_w.peak)}});
  return {{"samples", samples},
          {"skipped_ticks", skipped_ticks},
          {"cpu",
           {{"avg_util_pct", opt(cpu_util_pct.avg())},
            {"peak_util_pct", opt(cpu_util_pct.peak)},
            {"peak_mem_used_bytes", opt(cpu_mem_peak_bytes)},
            {"mem_total_bytes", opt(cpu_mem_total_bytes)},
            {"energy_j", opt(cpu_energy_j())},
            {"energy_method", cpu_energy_method.empty() ? nlohmann::json() : nlohmann::json(cpu_energy_method)},
            {"package_energy_j", opt(cpu_package_energy_j)},
            {"dram_energy_j", opt(cpu_dram_energy_j)},
            {"avg_package_power_w", opt(cpu_package_power_w.avg())},
            {"peak_package_power_w", opt(cpu_package_power_w.peak)},
            {"zones", zj}}},
          {"gpus", gj},
          {"events", events},
          {"sampling", sampling.adaptive ? sampling.to_json() : nlohmann::json()},
          {"total_energy_j", opt(total_energy_j())},
          {"attribution", attribution.tracked ? attribution.to_json() : nlohmann::json()},
          {"carbon", footprint.is_object() ? footprint.value("carbon", nlohmann::json()) : nlohmann::json()},
          {"cost", footprint.is_object() ? footprint.value("cost", nlohmann::json()) : nlohmann::json()},
          {"measurement",
           {{"gpu_temp_start_c", opt(gpu_temp_start_c)},
            {"gpu_temp_end_c", opt(gpu_temp_end_c)},
            {"warmup_s", opt(warmup_s)},
            {"settled", settled}}}};
}

Accounting::Accounting(std::vector<GpuDevice> devices) {
  for (auto& d : devices) {
    GpuSummary g;
    g.device = std::move(d);
    summary_.gpus.push_back(std::move(g));
  }
}

void Accounting::add_devices(std::vector<GpuDevice> devices) {
  std::lock_guard lock(mu_);
  for (auto& d : devices) {
    GpuSummary g;
    g.device = std::move(d);
    summary_.gpus.push_back(std::move(g));
  }
}

void Accounting::set_sampling(const SamplingSummary& configured) {
  std::lock_guard lock(mu_);
  auto& s = summary_.sampling;
  s.adaptive = configured.adaptive;
  s.interval_s = configured.interval_s;
  s.idle_interval_s = configured.idle_interval_s;
  s.idle_after_s = configured.idle_after_s;
}

void Accounting::add_event(Event ev) {
  std::lock_guard lock(mu_);
  pending_events_.push_back(std::move(ev));
}

void Accounting::energy(GpuSample& s, const Frame& f, EnergyState& st) {
  if (!st.method_known) {
    // Settled on the device's first answered tick: a counter that answers then is used for the whole run.
    st.method_known = true;
    st.counter = s.energy_counter_uj.has_value();
    if (st.counter) st.base_uj = st.last_uj = *s.energy_counter_uj;
  }
  if (st.counter) {
    // issue 33: the instant power's integral since the previous tick (trapezoid), for the ticks between anchors
    double step_j = -1;
    if (s.power_w && s.power_instant && st.last_power_w) {
      const double dt = std::chrono::duration<double>(f.mono - st.last_mono).count();
      if (dt > 0) step_j = 0.5 * (*s.power_w + *st.last_power_w) * dt;
    }
    if (s.power_w && s.power_instant) {
      st.last_power_w = s.power_w;
      st.last_mono = f.mono;
    } else {
      st.last_power_w.reset(); // a tick without it: no shape across the gap
    }
    if (s.energy_counter_uj) {
      const int64_t c = *s.energy_counter_uj;
      if (c < st.last_uj) { // driver reload or counter reset: keep what was counted, restart from here
        st.carried_uj += st.last_uj - st.base_uj;
        st.base_uj = c;
      }
      st.last_uj = c;
      const double e = static_cast<double>(st.carried_uj + st.last_uj - st.base_uj) / 1e6;
      // How the counter rose against the power's integral over every anchored stretch so far: the next stretch's
      // estimate is scaled by it (the two differ by the sensor's calibration). Over the whole run, not the last
      // stretch: one stretch's ratio mostly measures how a step fell between two ticks, which says nothing of the next.
      if (step_j >= 0) st.since_anchor_j += step_j;
      if (st.since_anchor_j > 0 && st.anchor_mono != SteadyClock::time_point{}) {
        st.integral_j += st.since_anchor_j;
        const double r = e / st.integral_j; // e: the counter's rise since the run's first reading
        if (r > 0.5 && r < 2) st.scale = r;
      }
      st.anchor_j = e;
      st.anchor_mono = f.mono;
      st.since_anchor_j = 0;
      // The counter itself at every reading; a stretch's estimate that ran ahead of it is held, not taken back (a
      // stored total never goes down), except on the run's last tick, which is the counter's exactly.
      s.energy_j = f.last ? e : std::max(e, st.emitted_j);
      s.counter_energy_j = e;
      st.emitted_j = *s.energy_j;
      return;
    }
    if (step_j >= 0 && st.anchor_mono != SteadyClock::time_point{}) {
      st.since_anchor_j += step_j;
      s.energy_j = std::max(st.emitted_j, st.anchor_j + st.scale * st.since_anchor_j);
    } else {
      // No instant power to shape it: the last reading, as old as the anchor (issue 33: its age)
      s.energy_j = std::max(st.emitted_j, st.anchor_j);
      if (st.anchor_mono != SteadyClock::time_point{})
        s.age_ms.emplace_back(
            static_cast<uint16_t>(GpuMetric::energy_j),
            static_cast<int32_t>(
                std::chrono::duration_cast<std::chrono::milliseconds>(f.mono - st.anchor_mono).count()));
    }
    st.emitted_j = *s.energy_j;
    return;
  }
  // Trapezoid rule between consecutive answered ticks, on the monotonic clock.
  if (s.power_w && st.last_power_w) {
    const double dt = std::chrono::duration<double>(f.mono - st.last_mono).count();
    st.integral_j += 0.5 * (*s.power_w + *st.last_power_w) * dt;
    st.max_step_s = std::max(st.max_step_s, dt);
  }
  if (s.power_w) {
    st.last_power_w = s.power_w;
    st.last_mono = f.mono;
  }
  if (s.power_w || st.integral_j > 0) s.energy_j = st.integral_j;
}

void Accounting::settle_events(Frame& f) {
  std::lock_guard lock(mu_);
  settle_events_locked(f);
}

void Accounting::settle_events_locked(Frame& f) {
  for (auto& ev : pending_events_) {
    if (ev.ts_ms == 0) ev.ts_ms = f.ts_ms;
    f.events.push_back(std::move(ev));
  }
  pending_events_.clear();
  for (auto& ev : f.events)
    ev.seq = next_event_seq_++;
  summary_.events = next_event_seq_;
}

std::optional<double> Accounting::counter_energy_j(int gpu_index, int64_t counter_uj) const {
  std::lock_guard lock(mu_);
  auto it = energy_.find(gpu_index);
  if (it == energy_.end() || !it->second.method_known || !it->second.counter) return std::nullopt;
  const EnergyState& st = it->second;
  // Below the run's first reading: a reset since. A reading below the last tick's is fine: one made in steps
  // (sources/counter_clock.hpp) can stand for an update before a tick that came while it was made.
  if (counter_uj < st.base_uj) return std::nullopt;
  return static_cast<double>(st.carried_uj + counter_uj - st.base_uj) / 1e6;
}

void Accounting::set_footprint(Footprint f) {
  std::lock_guard lock(mu_);
  ledger_.emplace(std::move(f));
}

// Each device's energy since the last sample is charged at the rates of that stretch: grams follow the hour it ran in.
void Accounting::charge(Frame& f) {
  if (!ledger_) return;
  const auto one = [&](const std::string& device, const OptF& cumulative_j) {
    if (!cumulative_j) return;
    auto [it, fresh] = charged_.try_emplace(device, first_ts_ms_, 0.0);
    auto& [ts, j] = it->second;
    if (*cumulative_j > j) ledger_->add(device, ts, f.ts_ms, *cumulative_j - j);
    j = std::max(j, *cumulative_j);
    ts = f.ts_ms;
  };
  for (const auto& s : f.gpus)
    one("gpu" + std::to_string(s.gpu_index), s.energy_j);
  one("cpu_package", f.cpu.package_energy_j);
  one("cpu_dram", f.cpu.dram_energy_j);
  f.carbon_g.assign(ledger_->device_grams().begin(), ledger_->device_grams().end());
  f.cost.assign(ledger_->device_cost().begin(), ledger_->device_cost().end());
  f.carbon_assumed = ledger_->footprint().carbon.assumed;
  if (ledger_->footprint().price) f.currency = ledger_->footprint().currency;
}

// The GPUs' total power over the run, kept to at most 4096 points (every other one dropped whenever it fills), from
// which the summary finds where power settled; the hottest GPU's temperature at the first and last sample.
void Accounting::track_warmup(const Frame& f) {
  OptF hottest;
  double power = 0;
  bool any_power = false;
  for (const auto& s : f.gpus) {
    if (s.temp_gpu_c && (!hottest || *s.temp_gpu_c > *hottest)) hottest = s.temp_gpu_c;
    if (s.power_w) {
      power += *s.power_w;
      any_power = true;
    }
  }
  if (hottest) {
    if (!summary_.gpu_temp_start_c) summary_.gpu_temp_start_c = hottest;
    summary_.gpu_temp_end_c = hottest;
  }
  if (!any_power) return;
  if (trace_seen_++ % trace_stride_ != 0) return;
  power_trace_.emplace_back(static_cast<double>(f.ts_ms - first_ts_ms_) / 1000.0, power);
  if (power_trace_.size() >= 4096) {
    std::vector<std::pair<double, double>> half;
    half.reserve(power_trace_.size() / 2 + 1);
    for (size_t i = 0; i < power_trace_.size(); i += 2)
      half.push_back(power_trace_[i]);
    power_trace_ = std::move(half);
    trace_stride_ *= 2;
  }
}

namespace {

// Warm-up: the level power kept is the median over the run's second half; power settled where the mean of three
// consecutive points first reached 90 % of it. A run whose level is under 5 W (idle GPUs) has nothing to settle.
void find_warmup(const std::vector<std::pair<double, double>>& trace, RunSummary& out) {
  if (trace.empty()) return;
  const double end_s = trace.back().first;
  std::vector<double> late;
  for (const auto& [t, w] : trace)
    if (t >= end_s / 2) late.push_back(w);
  std::nth_element(late.begin(), late.begin() + static_cast<std::ptrdiff_t>(late.size() / 2), late.end());
  const double level = late[late.size() / 2];
  out.warmup_s = 0.0;
  out.settled = true;
  if (level < 5) return;
  for (size_t i = 0; i + 2 < trace.size() || (i < trace.size() && trace.size() < 3); ++i) {
    const size_t n = std::min<size_t>(3, trace.size() - i);
    double sum = 0;
    for (size_t k = 0; k < n; ++k)
      sum += trace[i + k].second;
    if (sum / static_cast<double>(n) >= 0.9 * level) {
      out.warmup_s = trace[i].first;
      return;
    }
  }
  out.warmup_s = end_s;
  out.settled = false;
}

} // namespace

void Accounting::process(Frame& f) {
  std::lock_guard lock(mu_);
  settle_events_locked(f);
  if (summary_.samples == 0) first_ts_ms_ = f.ts_ms;
  last_ts_ms_ = f.ts_ms;

  summary_.samples++;
  last_tick_ = f.tick;
  // Slots only probed while idle (issue 18) were not missed: they are not skipped ticks.
  summary_.sampling.probe_ticks += f.probe_ticks;
  summary_.skipped_ticks = std::max<int64_t>(0, f.tick + 1 - summary_.samples - summary_.sampling.probe_ticks);
  for (const auto& ev : f.events) {
    if (ev.kind == "sampling-idle" && !idle_since_) {
      idle_since_ = f.mono;
      summary_.sampling.idle_stretches++;
    } else if (ev.kind == "sampling-active" && idle_since_) {
      summary_.sampling.idle_s += std::chrono::duration<double>(f.mono - *idle_since_).count();
      idle_since_.reset();
    }
  }
  last_mono_ = f.mono;
  summary_.cpu_util_pct.add(f.cpu.util_pct);
  if (f.cpu.mem_used_bytes && (!summary_.cpu_mem_peak_bytes || *f.cpu.mem_used_bytes > *summary_.cpu_mem_peak_bytes))
    summary_.cpu_mem_peak_bytes = f.cpu.mem_used_bytes;
  if (f.cpu.mem_total_bytes) summary_.cpu_mem_total_bytes = f.cpu.mem_total_bytes;
  if (f.cpu.package_energy_j) summary_.cpu_package_energy_j = f.cpu.package_energy_j;
  if (f.cpu.dram_energy_j) summary_.cpu_dram_energy_j = f.cpu.dram_energy_j;
  summary_.cpu_package_power_w.add(f.cpu.package_power_w);
  if (f.cpu.power_method) summary_.cpu_energy_method = f.cpu.power_method;
  for (const auto& z : f.cpu.zones) {
    auto it = std::find_if(summary_.zones.begin(), summary_.zones.end(),
                           [&](const ZoneSummary& s) { return s.domain == z.domain; });
    if (it == summary_.zones.end()) {
      summary_.zones.push_back({std::string(z.domain), std::string(z.zone), z.socket, 0, {}});
      it = summary_.zones.end() - 1;
    }
    if (z.energy_j) it->energy_j = *z.energy_j;
    it->power_w.add(z.power_w);
  }

  for (auto& s : f.gpus) {
    energy(s, f, energy_[s.gpu_index]);
    for (auto& g : summary_.gpus) {
      if (g.device.gpu_index != s.gpu_index) continue;
      if (g.samples == 0) { // static facts the first answered tick settles
        if (!g.device.mem_total_bytes) g.device.mem_total_bytes = s.mem_total_bytes;
        if (!g.device.power_limit_w) g.device.power_limit_w = s.power_limit_w;
        if (s.power_source) g.device.power_source = s.power_source;
      }
      g.samples++;
      if (s.energy_j) g.energy_j = *s.energy_j;
      if (auto st = energy_.find(s.gpu_index); st != energy_.end()) g.max_integration_step_s = st->second.max_step_s;
      g.power_w.add(s.power_w);
      g.util_gpu_pct.add(s.util_gpu_pct);
      if (s.mem_used_bytes && (!g.peak_mem_used_bytes || *s.mem_used_bytes > *g.peak_mem_used_bytes))
        g.peak_mem_used_bytes = s.mem_used_bytes;
    }
  }
  charge(f);
  track_warmup(f);
  attributor_.process(f, f.cpu.power_method);
  for (const auto& ev : f.events)
    if (ev.kind == "device-lost")
      for (auto& g : summary_.gpus)
        if (ev.source == "gpu" + std::to_string(g.device.gpu_index)) g.lost = true;

  if (f.tick == 0 || summary_.samples == 1) {
    for (auto& g : summary_.gpus) {
      auto it = energy_.find(g.device.gpu_index);
      // A source may have said it already: "simulated" (--simulate, issue 19) stays whatever the counter does.
      if (g.device.energy_method != "simulated")
        g.device.energy_method = it != energy_.end() && it->second.counter ? "counter" : "integrated";
      f.device_rows.push_back(g.device);
      g.device_row_sent = true;
    }
  } else {
    for (auto& g : summary_.gpus) {
      if (g.device_row_sent || g.samples == 0) continue;
      auto it = energy_.find(g.device.gpu_index);
      if (g.device.energy_method != "simulated")
        g.device.energy_method = it != energy_.end() && it->second.counter ? "counter" : "integrated";
      f.device_rows.push_back(g.device);
      g.device_row_sent = true;
    }
  }
}

void Accounting::resolve_process_rows(std::vector<ProcessRow>& rows, int64_t tick) const {
  std::lock_guard lock(mu_);
  attributor_.resolve_rows(rows, tick);
}
int64_t Accounting::last_tick() const {
  std::lock_guard lock(mu_);
  return last_tick_;
}

RunSummary Accounting::summary() const {
  std::lock_guard lock(mu_);
  RunSummary out = summary_;
  out.attribution = attributor_.summary();
  if (ledger_) out.footprint = ledger_->summary_json(first_ts_ms_, last_ts_ms_);
  find_warmup(power_trace_, out);
  if (idle_since_) out.sampling.idle_s += std::chrono::duration<double>(last_mono_ - *idle_since_).count(); // issue 18
  // ---- simulate (issue 19): shares of a simulated GPU's energy are simulated too, and say so
  for (const auto& g : out.gpus)
    if (g.device.energy_method == "simulated")
      if (auto d = out.attribution.devices.find("gpu" + std::to_string(g.device.gpu_index));
          d != out.attribution.devices.end())
        d->second.method = "attributed (simulated)";
  // ---- end simulate
  return out;
}

} // namespace wattscope
