#include "server/live.hpp"

#include <cmath>

#include <fmt/format.h>

#include "core/time_util.hpp"
#include "wattscope/version.hpp"

namespace wattscope {

namespace {

nlohmann::json opt(const OptF& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}
nlohmann::json opt(const OptI& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}
float f_or_nan(const OptF& v) {
  return v ? static_cast<float>(*v) : NAN;
}
float f_or_nan(const OptI& v) {
  return v ? static_cast<float>(*v) : NAN;
}

// Prometheus label values: backslash, double quote and line feed escaped (exposition format 0.0.4).
std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
  return out;
}

// Families written once each, samples appended; a missing value writes nothing (absent, never 0).
class Exposition {
public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    current_ = name;
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(std::string_view labels, double v, std::string_view suffix = "") {
    if (!std::isfinite(v)) return;
    out_ += current_;
    out_ += suffix;
    if (!labels.empty()) out_ += "{" + std::string(labels) + "}";
    out_ += fmt::format(" {}\n", v); // fmt is locale-independent
  }
  void sample(std::string_view labels, const OptF& v, double scale = 1) {
    if (v) sample(labels, *v * scale);
  }
  void sample(std::string_view labels, const OptI& v, double scale = 1) {
    if (v) sample(labels, static_cast<double>(*v) * scale);
  }
  std::string take() { return std::move(out_); }

private:
  std::string out_;
  std::string current_;
};

nlohmann::json gpu_json(const GpuSample& s, const GpuDevice* d) {
  return {{"index", s.gpu_index},
          {"uuid", d ? d->uuid : ""},
          {"name", d ? d->name : ""},
          {"vendor", d ? d->vendor : ""},
          {"power_w", opt(s.power_w)},
          {"power_avg_w", opt(s.power_avg_w)},
          {"power_limit_w", opt(s.power_limit_w)},
          {"energy_j", opt(s.energy_j)},
          {"energy_method", d ? d->energy_method : ""},
          {"util_gpu_pct", opt(s.util_gpu_pct)},
          {"util_mem_pct", opt(s.util_mem_pct)},
          {"mem_used_bytes", opt(s.mem_used_bytes)},
          {"mem_total_bytes", opt(s.mem_total_bytes)},
          {"temp_gpu_c", opt(s.temp_gpu_c)},
          {"temp_mem_c", opt(s.temp_mem_c)},
          {"clock_sm_mhz", opt(s.clock_sm_mhz)},
          {"clock_mem_mhz", opt(s.clock_mem_mhz)},
          {"pcie_tx_bytes_per_s", opt(s.pcie_tx_bytes_per_s)},
          {"pcie_rx_bytes_per_s", opt(s.pcie_rx_bytes_per_s)},
          {"fan_pct", opt(s.fan_pct)},
          {"pstate", opt(s.pstate)},
          {"throttle_reasons", opt(s.throttle_reasons)}};
}

} // namespace

LiveState::LiveState(std::chrono::nanoseconds retain, std::chrono::nanoseconds interval) {
  const int64_t points = std::max<int64_t>(1, retain / interval);
  stride_ = static_cast<size_t>((points + static_cast<int64_t>(kMaxPoints) - 1) / static_cast<int64_t>(kMaxPoints));
  capacity_ = static_cast<size_t>(points) / stride_ + 1;
}

void LiveState::set_run(const RunInfo& run, std::vector<GpuDevice> devices) {
  std::lock_guard lock(mu_);
  run_ = run;
  devices_ = std::move(devices);
}

void LiveState::push(const std::shared_ptr<const Frame>& f) {
  {
    std::lock_guard lock(mu_);
    // Device facts settled on the first tick (energy method, power source) replace the enumerated ones.
    for (const auto& d : f->device_rows)
      for (auto& mine : devices_)
        if (mine.gpu_index == d.gpu_index) mine = d;
    latest_ = f;
    ++seq_;
    for (const auto& e : f->events) {
      recent_events_.push_back(e);
      if (recent_events_.size() > 50) recent_events_.pop_front();
    }
    if (static_cast<size_t>(f->tick) % stride_ == 0) {
      ts_.push_back(f->ts_ms);
      values_.push_back(f_or_nan(f->cpu.util_pct));
      values_.push_back(f_or_nan(f->cpu.package_power_w));
      for (const auto& d : devices_) {
        const GpuSample* s = nullptr;
        for (const auto& g : f->gpus)
          if (g.gpu_index == d.gpu_index) s = &g;
        values_.push_back(s ? f_or_nan(s->power_w) : NAN);
        values_.push_back(s ? f_or_nan(s->util_gpu_pct) : NAN);
        values_.push_back(s ? f_or_nan(s->mem_used_bytes) : NAN);
        values_.push_back(s ? f_or_nan(s->temp_gpu_c) : NAN);
      }
      while (ts_.size() > capacity_) {
        ts_.pop_front();
        values_.erase(values_.begin(), values_.begin() + static_cast<std::ptrdiff_t>(width()));
      }
    }
  }
  cv_.notify_all();
}

void LiveState::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

bool LiveState::stopped() const {
  std::lock_guard lock(mu_);
  return stop_;
}

std::shared_ptr<const Frame> LiveState::latest() const {
  std::lock_guard lock(mu_);
  return latest_;
}

std::pair<std::shared_ptr<const Frame>, uint64_t> LiveState::wait_next(uint64_t after,
                                                                       std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return stop_ || seq_ > after; });
  return {seq_ > after ? latest_ : nullptr, seq_};
}

nlohmann::json LiveState::current_json() const {
  std::lock_guard lock(mu_);
  nlohmann::json gpus = nlohmann::json::array();
  nlohmann::json cpu = nlohmann::json::object();
  double total = 0;
  bool any_energy = false;
  if (latest_) {
    for (const auto& s : latest_->gpus) {
      const GpuDevice* d = nullptr;
      for (const auto& dev : devices_)
        if (dev.gpu_index == s.gpu_index) d = &dev;
      gpus.push_back(gpu_json(s, d));
      if (s.energy_j) {
        total += *s.energy_j;
        any_energy = true;
      }
    }
    const auto& c = latest_->cpu;
    cpu = {{"util_pct", opt(c.util_pct)},
           {"mem_used_bytes", opt(c.mem_used_bytes)},
           {"mem_total_bytes", opt(c.mem_total_bytes)},
           {"package_power_w", opt(c.package_power_w)},
           {"dram_power_w", opt(c.dram_power_w)},
           {"package_energy_j", opt(c.package_energy_j)},
           {"dram_energy_j", opt(c.dram_energy_j)},
           {"power_method", c.power_method ? nlohmann::json(c.power_method) : nlohmann::json()}};
    if (c.package_energy_j) {
      total += *c.package_energy_j + c.dram_energy_j.value_or(0);
      any_energy = true;
    }
  }
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : recent_events_)
    events.push_back({{"ts", iso_utc_ms(e.ts_ms)}, {"kind", e.kind}, {"source", e.source}, {"detail", e.detail}});
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : devices_)
    devices.push_back({{"index", d.gpu_index},
                       {"uuid", d.uuid},
                       {"name", d.name},
                       {"vendor", d.vendor},
                       {"energy_method", d.energy_method},
                       {"power_limit_w", opt(d.power_limit_w)},
                       {"mem_total_bytes", opt(d.mem_total_bytes)}});
  return {{"ts", latest_ ? nlohmann::json(iso_utc_ms(latest_->ts_ms)) : nlohmann::json()},
          {"ts_ms", latest_ ? nlohmann::json(latest_->ts_ms) : nlohmann::json()},
          {"tick", latest_ ? nlohmann::json(latest_->tick) : nlohmann::json()},
          {"run",
           {{"run_id", run_.run_id}, {"task", run_.task}, {"host", run_.host}, {"start", iso_utc_ms(run_.start_ms)}}},
          {"interval_s", run_.interval_ms / 1000.0},
          {"devices", devices},
          {"gpus", gpus},
          {"cpu", cpu},
          {"energy_j", any_energy ? nlohmann::json(total) : nlohmann::json()},
          {"events", events}};
}

nlohmann::json LiveState::history_json(std::chrono::nanoseconds range, std::chrono::nanoseconds step) const {
  std::lock_guard lock(mu_);
  const int64_t now = latest_ ? latest_->ts_ms : wall_now_ms();
  const int64_t from = now - std::chrono::duration_cast<std::chrono::milliseconds>(range).count();
  const int64_t step_ms = std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(step).count());
  const size_t w = width();
  struct Acc {
    double sum = 0;
    int n = 0;
    double peak = -INFINITY;
  };
  std::vector<int64_t> bucket_ts; // each bucket is stamped with its first point's time, never before any data
  std::vector<std::vector<Acc>> buckets;
  int64_t current = -1;
  for (size_t i = 0; i < ts_.size(); ++i) {
    if (ts_[i] < from) continue;
    const int64_t b = (ts_[i] - from) / step_ms;
    if (b != current) {
      current = b;
      bucket_ts.push_back(ts_[i]);
      buckets.emplace_back(w);
    }
    for (size_t k = 0; k < w; ++k) {
      const float v = values_[i * w + k];
      if (std::isnan(v)) continue;
      auto& a = buckets.back()[k];
      a.sum += v;
      ++a.n;
      a.peak = std::max(a.peak, static_cast<double>(v));
    }
  }
  auto column = [&](size_t k, bool peak) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& b : buckets)
      out.push_back(b[k].n ? nlohmann::json(peak ? b[k].peak : b[k].sum / b[k].n) : nlohmann::json());
    return out;
  };
  nlohmann::json gpus = nlohmann::json::array();
  for (size_t g = 0; g < devices_.size(); ++g) {
    const size_t base = 2 + g * kPerGpu;
    gpus.push_back({{"index", devices_[g].gpu_index},
                    {"power_w", column(base, false)},
                    {"power_peak_w", column(base, true)},
                    {"util_gpu_pct", column(base + 1, false)},
                    {"mem_used_bytes", column(base + 2, false)},
                    {"temp_gpu_c", column(base + 3, false)}});
  }
  return {{"from_ms", from},
          {"step_s", static_cast<double>(step_ms) / 1000.0},
          {"ts_ms", bucket_ts},
          {"cpu_util_pct", column(0, false)},
          {"cpu_package_power_w", column(1, false)},
          {"gpus", gpus}};
}

std::string LiveState::metrics_text() const {
  std::lock_guard lock(mu_);
  Exposition x;
  const std::string host = escape_label(run_.host);
  x.family("wattscope_build_info", "gauge", "wattscope build, as a label.");
  x.sample(fmt::format("version=\"{}\"", kVersion), 1.0);
  x.family("wattscope_run_info", "gauge", "The run this serve session records, as labels.");
  x.sample(
      fmt::format("run_id=\"{}\",task=\"{}\",host=\"{}\"", escape_label(run_.run_id), escape_label(run_.task), host),
      1.0);
  if (sampler_) {
    x.family("wattscope_sampler_interval_seconds", "gauge", "Sampling interval.");
    x.sample("", run_.interval_ms / 1000.0);
    x.family("wattscope_sampler_tick_duration_seconds", "gauge", "CPU-side duration of the latest sampler tick.");
    x.sample("", static_cast<double>(sampler_->last_tick_ns.load()) / 1e9);
    x.family("wattscope_sampler_ticks_total", "counter", "Ticks taken since serve started.");
    x.sample("", static_cast<double>(sampler_->ticks.load()));
    x.family("wattscope_sampler_skipped_ticks_total", "counter", "Grid slots skipped because a tick overran.");
    x.sample("", static_cast<double>(sampler_->skipped.load()));
  }
  if (!latest_) return x.take();
  const Frame& f = *latest_;
  std::vector<std::pair<const GpuSample*, std::string>> gs;
  for (const auto& s : f.gpus) {
    const GpuDevice* d = nullptr;
    for (const auto& dev : devices_)
      if (dev.gpu_index == s.gpu_index) d = &dev;
    gs.emplace_back(&s, fmt::format("gpu=\"{}\",uuid=\"{}\",name=\"{}\",host=\"{}\"", s.gpu_index,
                                    escape_label(d ? d->uuid : ""), escape_label(d ? d->name : ""), host));
  }
  auto gpu_family = [&](std::string_view name, std::string_view type, std::string_view help, auto get,
                        double scale = 1) {
    bool any = false;
    for (auto& [s, l] : gs)
      any = any || get(*s).has_value();
    if (!any) return;
    x.family(name, type, help);
    for (auto& [s, l] : gs)
      x.sample(l, get(*s), scale);
  };
  x.family("wattscope_gpu_up", "gauge", "1 when the GPU answered the latest tick, 0 when it is lost.");
  for (const auto& d : devices_) {
    bool up = false;
    for (const auto& s : f.gpus)
      up = up || s.gpu_index == d.gpu_index;
    x.sample(fmt::format("gpu=\"{}\",uuid=\"{}\",name=\"{}\",host=\"{}\"", d.gpu_index, escape_label(d.uuid),
                         escape_label(d.name), host),
             up ? 1.0 : 0.0);
  }
  gpu_family("wattscope_gpu_power_watts", "gauge", "GPU power draw (instantaneous where the driver has it).",
             [](const GpuSample& s) { return s.power_w; });
  gpu_family("wattscope_gpu_power_average_watts", "gauge", "GPU power averaged by the driver (1 s window).",
             [](const GpuSample& s) { return s.power_avg_w; });
  {
    bool any = false;
    for (auto& [s, l] : gs)
      any = any || s->energy_j.has_value();
    if (any) {
      x.family("wattscope_gpu_energy_joules_total", "counter",
               "GPU energy since serve started: hardware counter (method=\"counter\") or integrated power.");
      for (auto& [s, l] : gs) {
        std::string method;
        for (const auto& d : devices_)
          if (d.gpu_index == s->gpu_index) method = d.energy_method;
        x.sample(l + fmt::format(",method=\"{}\"", escape_label(method)), s->energy_j);
      }
    }
  }
  gpu_family(
      "wattscope_gpu_utilization_ratio", "gauge", "Share of time a kernel ran (NVML GPU utilisation).",
      [](const GpuSample& s) { return s.util_gpu_pct; }, 0.01);
  gpu_family(
      "wattscope_gpu_memory_utilization_ratio", "gauge", "Share of time device memory was read or written.",
      [](const GpuSample& s) { return s.util_mem_pct; }, 0.01);
  gpu_family("wattscope_gpu_memory_used_bytes", "gauge", "Device memory in use.",
             [](const GpuSample& s) { return s.mem_used_bytes; });
  gpu_family("wattscope_gpu_memory_total_bytes", "gauge", "Device memory size.",
             [](const GpuSample& s) { return s.mem_total_bytes; });
  gpu_family("wattscope_gpu_temperature_celsius", "gauge", "GPU die temperature.",
             [](const GpuSample& s) { return s.temp_gpu_c; });
  gpu_family("wattscope_gpu_memory_temperature_celsius", "gauge", "GPU memory temperature.",
             [](const GpuSample& s) { return s.temp_mem_c; });
  {
    bool any = false;
    for (auto& [s, l] : gs)
      any = any || s->clock_sm_mhz || s->clock_gfx_mhz || s->clock_mem_mhz;
    if (any) {
      x.family("wattscope_gpu_clock_hertz", "gauge", "GPU clocks.");
      for (auto& [s, l] : gs) {
        x.sample(l + ",clock=\"sm\"", s->clock_sm_mhz, 1e6);
        x.sample(l + ",clock=\"graphics\"", s->clock_gfx_mhz, 1e6);
        x.sample(l + ",clock=\"memory\"", s->clock_mem_mhz, 1e6);
      }
    }
  }
  {
    bool any = false;
    for (auto& [s, l] : gs)
      any = any || s->pcie_link_width || s->pcie_link_width_max;
    if (any) {
      x.family("wattscope_gpu_pcie_link_width", "gauge", "PCIe link width in lanes (current and maximum).");
      for (auto& [s, l] : gs) {
        x.sample(l + ",kind=\"current\"", s->pcie_link_width);
        x.sample(l + ",kind=\"max\"", s->pcie_link_width_max);
      }
    }
  }
  gpu_family("wattscope_gpu_pcie_transmit_bytes_per_second", "gauge", "PCIe TX throughput.",
             [](const GpuSample& s) { return s.pcie_tx_bytes_per_s; });
  gpu_family("wattscope_gpu_pcie_receive_bytes_per_second", "gauge", "PCIe RX throughput.",
             [](const GpuSample& s) { return s.pcie_rx_bytes_per_s; });
  gpu_family(
      "wattscope_gpu_fan_speed_ratio", "gauge", "Fan speed as a share of its maximum.",
      [](const GpuSample& s) { return s.fan_pct; }, 0.01);
  gpu_family("wattscope_gpu_performance_state", "gauge", "P-state (0 is the fastest).",
             [](const GpuSample& s) { return s.pstate; });
  gpu_family("wattscope_gpu_power_limit_watts", "gauge", "Enforced power limit.",
             [](const GpuSample& s) { return s.power_limit_w; });
  gpu_family("wattscope_gpu_throttle_reasons", "gauge", "NVML clock-event (throttle) reason bit mask.",
             [](const GpuSample& s) { return s.throttle_reasons; });

  const auto& c = f.cpu;
  if (c.util_pct) {
    x.family("wattscope_cpu_utilization_ratio", "gauge", "Host CPU busy share over the last interval.");
    x.sample(fmt::format("host=\"{}\"", host), c.util_pct, 0.01);
  }
  if (c.mem_used_bytes) {
    x.family("wattscope_memory_used_bytes", "gauge", "Host memory in use (total minus available).");
    x.sample(fmt::format("host=\"{}\"", host), c.mem_used_bytes);
    x.family("wattscope_memory_total_bytes", "gauge", "Host memory size.");
    x.sample(fmt::format("host=\"{}\"", host), c.mem_total_bytes);
  }
  if (!c.zones.empty()) {
    auto zl = [&](const PowerZoneSample& z) {
      return fmt::format("host=\"{}\",zone=\"{}\",domain=\"{}\",socket=\"{}\"", host, escape_label(z.zone),
                         escape_label(z.domain), z.socket ? std::to_string(*z.socket) : "");
    };
    x.family("wattscope_cpu_power_watts", "gauge", "RAPL zone power over the last interval.");
    for (const auto& z : c.zones)
      x.sample(zl(z), z.power_w);
    x.family("wattscope_cpu_energy_joules_total", "counter", "RAPL zone energy since serve started.");
    for (const auto& z : c.zones)
      x.sample(zl(z), z.energy_j);
  } else if (c.package_power_w) {
    x.family("wattscope_cpu_package_power_watts", "gauge", "CPU package power, method as a label.");
    x.sample(fmt::format("host=\"{}\",method=\"{}\"", host, c.power_method ? c.power_method : ""), c.package_power_w);
  }
  return x.take();
}

} // namespace wattscope
