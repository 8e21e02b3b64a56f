// What the live forecasts and the anomaly detectors say about workloads whose truth is known, and what they cost: the
// same classes `record`, `run` and `serve` use (forecast/live_forecast, forecast/anomaly_monitor), driven as the
// session drives them (a frame a tick; a forecast and its events once a second), on eight stand-in GPUs of a
// data-parallel job.
//
//   build/bench/wattscope_bench_forecast_alarms [--quick] [--traces DIR]
//
// Healthy workloads (every event on them is a false alarm): 40 s epochs with an unmarked 8 s evaluation pass (less
// utilisation and power, 0.5 GiB more memory while it runs), a 20 GiB warm-up allocation over the first 5 s, whole-
// degree temperatures that follow the power through a first-order heatsink (time constant 60 s), NVML-like noise (±2
// points of utilisation, ±3 % power, 15 MHz clock bins, a one-tick spike every ~100 ticks), from warm (64 °C) and from
// cold (33 °C); an hour each at 1 s and at 100 ms. Then the same job with one fault on GPU 3 at t = 600 s: a 30 s
// stall, a power cap, a thermal slowdown, a fan that stops (0.7 °C/s at first), a slow creep (+0.02 °C/s of ambient),
// a leak (20 MB/s). Each fault must be found on GPU 3 by the kind named; forecasts give their lead time against the
// crossing. And the recorded real traces (tests/fixtures/traces), replayed at their own interval.
//
// Prints markdown tables (docs/forecasts.md): false events per GPU-hour by detector and forecast kind; detection and
// onset error or lead time per fault; the cost of the whole per-tick path per second of run, against record's own CPU
// when --record-cpu gives it (bench/forecast_cost.py measures it and passes it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/frame.hpp"
#include "forecast/anomaly_monitor.hpp"
#include "forecast/live_forecast.hpp"

using namespace wattscope;

namespace {

constexpr int64_t kT0 = 1'700'000'000'000;
constexpr int kGpus = 8;
constexpr int kFaultGpu = 3;
constexpr double kFaultAt = 600;
constexpr double kDeviceBytes = 85899345920.0; // 80 GiB
constexpr double kGiB = 1073741824.0;
constexpr double kSlowdown = 87; // an H100's slowdown temperature (nvmlDeviceGetTemperatureThreshold)

enum class Fault { None, Stall, PowerCap, Thermal, Fan, Creep, Leak };

const char* fault_name(Fault f) {
  switch (f) {
  case Fault::None:
    return "healthy";
  case Fault::Stall:
    return "stall (30 s)";
  case Fault::PowerCap:
    return "power cap";
  case Fault::Thermal:
    return "thermal slowdown";
  case Fault::Fan:
    return "fan stops";
  case Fault::Creep:
    return "temperature creep";
  case Fault::Leak:
    return "memory leak";
  }
  return "?";
}

// One GPU of the job: its state between ticks (temperature through its heatsink) and its noise.
struct StandIn {
  std::mt19937 rng;
  std::normal_distribution<double> n{0, 1};
  std::uniform_int_distribution<int> bin{-1, 1};
  double temp;
  int64_t k = 0;
  StandIn(uint32_t seed, double temp0) : rng(seed), temp(temp0) {}

  void sample(double t, double dt, bool faulty, Fault fault, GpuSample& g) {
    const double in_epoch = std::fmod(t, 40.0);
    const bool eval = in_epoch >= 32;
    const bool hit = faulty && t >= kFaultAt;
    double util = eval ? 55 + 4 * n(rng) : 95 + 2 * n(rng);
    double power = (eval ? 350 : 600) * (1 + 0.03 * n(rng));
    if (++k % 97 == 50) power *= 1.3;
    double clock = 1980 + 15 * bin(rng);
    int64_t reasons = 0;
    double ambient = 30;
    double mem = std::min(t / 5, 1.0) * 20 * kGiB + 0.5 * kGiB + (eval ? 0.5 * kGiB : 0) + 50e6 * n(rng);
    if (hit) switch (fault) {
      case Fault::Stall:
        if (t < kFaultAt + 30) util = 3, power = 90;
        break;
      case Fault::PowerCap:
        power *= 0.7, clock -= 400, reasons = 0x4;
        break;
      case Fault::Thermal:
        clock = 1410, reasons = 0x40;
        break;
      case Fault::Fan:
        ambient = 74; // the heatsink barely sheds heat: 600 W settles near 110 °C
        break;
      case Fault::Creep:
        ambient = 30 + 0.02 * (t - kFaultAt);
        break;
      case Fault::Leak:
        mem += 20e6 * (t - kFaultAt);
        break;
      case Fault::None:
        break;
      }
    // First order: toward ambient + 0.06 °C/W with a 60 s time constant.
    temp += (ambient + 0.06 * power - temp) * (1 - std::exp(-dt / 60));
    g.util_gpu_pct = std::round(std::clamp(util, 0.0, 100.0));
    g.power_w = power;
    g.clock_sm_mhz = static_cast<int64_t>(clock);
    g.throttle_reasons = reasons;
    g.temp_gpu_c = std::round(temp + 0.3 * n(rng));
    g.mem_used_bytes = static_cast<int64_t>(std::min(mem, kDeviceBytes));
    g.mem_total_bytes = static_cast<int64_t>(kDeviceBytes);
  }
};

struct Alarm {
  double t_s;
  int gpu;
  std::string kind; // anomaly:<kind>, straggler, forecast:oom, forecast:throttle
  std::string detail;
};

struct Outcome {
  std::vector<Alarm> alarms;
  double gpu_hours = 0;
  std::optional<double> crossing_s; // the fault GPU's temperature past the slowdown point, or its memory full
  double path_us = 0;               // the whole per-tick path, summed
  double seconds = 0;
};

int gpu_of(const std::string& source) {
  return source.rfind("gpu", 0) == 0 ? std::atoi(source.c_str() + 3) : -1;
}

// Alarms are what pages people: anomaly and straggler onsets, forecasts announced or updated (not withdrawn).
void collect(const Event& e, std::vector<Alarm>& out) {
  const double t = static_cast<double>(e.ts_ms - kT0) / 1000.0;
  if (e.kind == "forecast") {
    if (e.detail.rfind("forecast withdrawn", 0) == 0) return;
    const bool oom = e.detail.find("out of memory") != std::string::npos;
    out.push_back({t, gpu_of(e.source), oom ? "forecast:oom" : "forecast:throttle", e.detail});
    return;
  }
  const auto d = nlohmann::json::parse(e.detail, nullptr, false);
  if (d.is_discarded() || d.value("state", "") != "onset") return;
  out.push_back({t, gpu_of(e.source), e.kind == "straggler" ? "straggler" : "anomaly:" + d.value("anomaly", ""),
                 d.value("message", "")});
}

// Drives the monitor and the forecaster over `frames` as the session does.
struct Driver {
  int64_t tick_ms;
  std::vector<Event> events;
  AnomalyMonitor monitor;
  forecast::LiveForecaster forecaster;
  int64_t last_forecast = -1'000'000;
  double path_us = 0;

  static forecast::LiveForecaster::Options fo(int64_t tick_ms) {
    forecast::LiveForecaster::Options o;
    o.min_spacing_ms = std::min<int64_t>(tick_ms, 1000);
    o.min_span_ms = forecast::kForecastMinHistoryMs;
    return o;
  }
  static AnomalyMonitorOptions ao(int64_t tick_ms) {
    AnomalyMonitorOptions o;
    o.interval_ms = static_cast<double>(tick_ms);
    return o;
  }
  explicit Driver(int64_t tick)
      : tick_ms(tick), monitor(ao(tick), [this](Event e) { events.push_back(std::move(e)); }), forecaster(fo(tick)) {}
  void set_throttle(int gpus) {
    for (int i = 0; i < gpus; ++i)
      forecaster.set_throttle_temp(i, kSlowdown);
  }
  void tick(Frame& f, int64_t boundaries) {
    const auto t0 = std::chrono::steady_clock::now();
    monitor.process(f, boundaries);
    forecaster.observe(f);
    if (f.ts_ms - last_forecast >= 1000) {
      last_forecast = f.ts_ms;
      for (auto& e : forecaster.crossings(forecaster.forecast(f.ts_ms)))
        events.push_back(std::move(e));
    }
    path_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
};

Outcome simulate(Fault fault, bool cold, int64_t tick_ms, double seconds) {
  Driver drv(tick_ms);
  drv.set_throttle(kGpus);
  std::vector<StandIn> gpus;
  for (int i = 0; i < kGpus; ++i)
    gpus.emplace_back(static_cast<uint32_t>(1000 * static_cast<int>(fault) + 17 * i + (cold ? 7 : 0) + tick_ms),
                      cold ? 33.0 : 64.0);
  Outcome o;
  const double dt = static_cast<double>(tick_ms) / 1000.0;
  for (int64_t ms = 0; ms <= static_cast<int64_t>(seconds * 1000); ms += tick_ms) {
    const double t = static_cast<double>(ms) / 1000.0;
    Frame f;
    f.ts_ms = kT0 + ms;
    for (int i = 0; i < kGpus; ++i) {
      GpuSample g;
      g.gpu_index = i;
      gpus[static_cast<size_t>(i)].sample(t, dt, i == kFaultGpu, fault, g);
      if (i == kFaultGpu && !o.crossing_s &&
          ((fault == Fault::Leak && static_cast<double>(*g.mem_used_bytes) >= kDeviceBytes) ||
           ((fault == Fault::Fan || fault == Fault::Creep) && *g.temp_gpu_c >= kSlowdown)))
        o.crossing_s = t;
      f.gpus.push_back(g);
    }
    drv.tick(f, 0);
  }
  for (const auto& e : drv.events)
    collect(e, o.alarms);
  o.gpu_hours = kGpus * seconds / 3600;
  o.path_us = drv.path_us;
  o.seconds = seconds;
  return o;
}

// ---- the recorded traces: t_ms, gpu, power_w, util_gpu_pct, util_mem_pct, mem_used_bytes, mem_total_bytes,
// temp_gpu_c, clock_sm_mhz, energy_j, phase
struct TraceRow {
  int64_t t_ms;
  int gpu;
  OptF power, util, temp;
  OptI mem, mem_total, clock;
  std::string phase;
};

std::vector<TraceRow> read_trace(const std::string& path) {
  std::ifstream in(path);
  std::vector<TraceRow> rows;
  std::string line;
  std::getline(in, line); // header
  auto num = [](const std::string& s) -> OptF {
    if (s.empty()) return std::nullopt;
    return std::strtod(s.c_str(), nullptr);
  };
  while (std::getline(in, line)) {
    std::vector<std::string> c;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ','))
      c.push_back(cell);
    while (c.size() < 11)
      c.emplace_back();
    TraceRow r;
    r.t_ms = std::atoll(c[0].c_str());
    r.gpu = std::atoi(c[1].c_str());
    r.power = num(c[2]);
    r.util = num(c[3]);
    if (auto m = num(c[5])) r.mem = static_cast<int64_t>(*m);
    if (auto m = num(c[6])) r.mem_total = static_cast<int64_t>(*m);
    r.temp = num(c[7]);
    if (auto k = num(c[8])) r.clock = static_cast<int64_t>(*k);
    r.phase = c[10];
    rows.push_back(r);
  }
  return rows;
}

Outcome replay(const std::vector<TraceRow>& rows, bool marked) {
  int64_t tick = 1000;
  if (rows.size() > 1)
    for (size_t i = 1; i < rows.size(); ++i)
      if (rows[i].t_ms > rows[0].t_ms) {
        tick = rows[i].t_ms - rows[0].t_ms;
        break;
      }
  Driver drv(tick);
  std::map<int, std::string> phase;
  int64_t boundaries = 0;
  int gpus = 0;
  Outcome o;
  for (size_t i = 0; i < rows.size();) {
    Frame f;
    f.ts_ms = kT0 + rows[i].t_ms;
    const int64_t t = rows[i].t_ms;
    for (; i < rows.size() && rows[i].t_ms == t; ++i) {
      const auto& r = rows[i];
      GpuSample g;
      g.gpu_index = r.gpu;
      g.power_w = r.power;
      g.util_gpu_pct = r.util;
      g.temp_gpu_c = r.temp;
      g.mem_used_bytes = r.mem;
      g.mem_total_bytes = r.mem_total;
      g.clock_sm_mhz = r.clock;
      gpus = std::max(gpus, r.gpu + 1);
      if (marked && phase[r.gpu] != r.phase && r.gpu == 0) ++boundaries;
      phase[r.gpu] = r.phase;
      f.gpus.push_back(g);
    }
    drv.tick(f, boundaries);
  }
  for (const auto& e : drv.events)
    collect(e, o.alarms);
  o.seconds = rows.empty() ? 0 : static_cast<double>(rows.back().t_ms - rows.front().t_ms) / 1000.0;
  o.gpu_hours = gpus * o.seconds / 3600;
  return o;
}

std::string kinds_of(const std::vector<Alarm>& alarms) {
  std::map<std::string, int> n;
  for (const auto& a : alarms)
    ++n[a.kind];
  std::string out;
  for (const auto& [k, c] : n)
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", c, k);
  return out.empty() ? "none" : out;
}

bool detects(Fault f, const Alarm& a) {
  if (a.gpu != kFaultGpu || a.t_s < kFaultAt) return false;
  switch (f) {
  case Fault::Stall:
    return a.kind == "anomaly:stall";
  case Fault::PowerCap:
  case Fault::Thermal:
    return a.kind == "straggler" || a.kind == "anomaly:level_change";
  case Fault::Fan:
    return a.kind == "anomaly:temperature_ramp" || a.kind == "forecast:throttle";
  case Fault::Creep:
    return a.kind == "forecast:throttle";
  case Fault::Leak:
    return a.kind == "forecast:oom";
  case Fault::None:
    return false;
  }
  return false;
}

} // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string traces = WATTSCOPE_TRACES_DIR;
  std::map<int64_t, double> record_cpu; // interval ms -> record's CPU ms per second of run
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--traces") && i + 1 < argc)
      traces = argv[++i];
    else if (!std::strcmp(argv[i], "--record-cpu") && i + 1 < argc) { // INTERVAL_MS:CPU_MS_PER_S
      const std::string v = argv[++i];
      const auto colon = v.find(':');
      if (colon != std::string::npos) record_cpu[std::atoll(v.c_str())] = std::atof(v.c_str() + colon + 1);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--traces DIR] [--record-cpu INTERVAL_MS:CPU_MS_PER_S]...\n", argv[0]);
      return 2;
    }
  }
  const double hour = quick ? 900 : 3600;
  std::map<int64_t, std::pair<double, double>> cost; // tick -> (path us, seconds)

  fmt::print("## Healthy workloads: false events per GPU-hour (8 GPUs, 40 s epochs with unmarked evaluation)\n\n");
  fmt::print(
      "| interval | start | GPU-hours | anomaly | straggler | forecast: OOM | forecast: throttle | per GPU-hour |\n");
  fmt::print("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  int false_total = 0;
  for (const int64_t tick : {1000, 100})
    for (const bool cold : {false, true}) {
      const Outcome o = simulate(Fault::None, cold, tick, hour);
      cost[tick].first += o.path_us, cost[tick].second += o.seconds;
      int an = 0, st = 0, oom = 0, thr = 0;
      for (const auto& a : o.alarms) {
        an += a.kind.rfind("anomaly", 0) == 0;
        st += a.kind == "straggler";
        oom += a.kind == "forecast:oom";
        thr += a.kind == "forecast:throttle";
      }
      false_total += static_cast<int>(o.alarms.size());
      fmt::print("| {} ms | {} | {:.1f} | {} | {} | {} | {} | {:.2f} |\n", tick, cold ? "cold (33 °C)" : "warm (64 °C)",
                 o.gpu_hours, an, st, oom, thr, static_cast<double>(o.alarms.size()) / o.gpu_hours);
      for (const auto& a : o.alarms)
        std::fprintf(stderr, "false alarm (%lld ms, %s): t=%.0f s gpu%d %s: %s\n", static_cast<long long>(tick),
                     cold ? "cold" : "warm", a.t_s, a.gpu, a.kind.c_str(), a.detail.c_str());
    }

  fmt::print("\n## Injected faults on GPU 3 at t = 600 s\n\n");
  fmt::print("| fault | interval | found by | found | onset error / lead time | other events |\n");
  fmt::print("| --- | --- | --- | --- | --- | --- |\n");
  int missed = 0;
  for (const Fault f : {Fault::Stall, Fault::PowerCap, Fault::Thermal, Fault::Fan, Fault::Creep, Fault::Leak})
    for (const int64_t tick : {1000, 100}) {
      const double len = f == Fault::Leak ? kFaultAt + 3400 : f == Fault::Creep ? kFaultAt + 1300 : kFaultAt + 300;
      const Outcome o = simulate(f, false, tick, len);
      std::vector<Alarm> hits, others;
      for (const auto& a : o.alarms)
        (detects(f, a) ? hits : others).push_back(a);
      std::string when = "–";
      if (!hits.empty()) {
        const bool forecast = hits[0].kind.rfind("forecast", 0) == 0;
        if (forecast && o.crossing_s)
          when = fmt::format("{:.0f} s ahead of the crossing", *o.crossing_s - hits[0].t_s);
        else
          when = fmt::format("said {:.0f} s after the onset", hits[0].t_s - kFaultAt);
      }
      // Forecasts of a slow trend: the first announcement's lead time is the figure.
      if ((f == Fault::Creep || f == Fault::Leak) && !hits.empty() && o.crossing_s)
        when = fmt::format("{:.1f} min ahead of the crossing", (*o.crossing_s - hits[0].t_s) / 60);
      missed += hits.empty();
      for (const auto& a : others)
        std::fprintf(stderr, "%s (%lld ms): other: t=%.0f s gpu%d %s: %s\n", fault_name(f),
                     static_cast<long long>(tick), a.t_s, a.gpu, a.kind.c_str(), a.detail.c_str());
      const char* by = f == Fault::Stall                             ? "anomaly: stall"
                       : f == Fault::PowerCap || f == Fault::Thermal ? "straggler or level change"
                       : f == Fault::Fan                             ? "temperature ramp or throttle forecast"
                       : f == Fault::Creep                           ? "throttle forecast"
                                                                     : "OOM forecast";
      fmt::print("| {} | {} ms | {} | {} | {} | {} |\n", fault_name(f), tick, by, hits.empty() ? "no" : "yes", when,
                 kinds_of(others));
    }

  fmt::print("\n## Recorded traces replayed (tests/fixtures/traces)\n\n");
  fmt::print("| trace | phases | GPU-hours | events |\n| --- | --- | --- | --- |\n");
  for (const char* name : {"h100_lm", "h100_cnn", "h100_leak", "sim_training"})
    for (const bool marked : {false, true}) {
      const auto rows = read_trace(traces + "/" + name + ".csv");
      if (rows.empty()) continue;
      const Outcome o = replay(rows, marked);
      fmt::print("| {} | {} | {:.3f} | {} |\n", name, marked ? "marked" : "unmarked", o.gpu_hours, kinds_of(o.alarms));
      for (const auto& a : o.alarms)
        std::fprintf(stderr, "%s (%s): t=%.1f s gpu%d %s: %s\n", name, marked ? "marked" : "unmarked", a.t_s, a.gpu,
                     a.kind.c_str(), a.detail.c_str());
    }

  fmt::print("\n## Cost of the whole per-tick path (anomaly monitor + live forecaster, 8 GPUs)\n\n");
  fmt::print("| interval | per tick | per second of run | share of record's CPU |\n| --- | --- | --- | --- |\n");
  for (const auto& [tick, c] : cost) {
    const double per_s_us = c.first / c.second;
    const double ticks = c.second * 1000.0 / static_cast<double>(tick);
    fmt::print("| {} ms | {:.1f} us | {:.0f} us | {} |\n", tick, c.first / ticks, per_s_us,
               record_cpu.count(tick)
                   ? fmt::format("{:.2f} % (record: {:.1f} ms/s)", per_s_us / 10.0 / record_cpu[tick], record_cpu[tick])
                   : std::string("(bench/forecast_cost.py gives it)"));
  }
  fmt::print("\nfalse alarms on healthy workloads: {}; faults missed: {}\n", false_total, missed);
  return 0;
}
