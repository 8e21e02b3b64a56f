// What `serve` answers from: the latest frame and a bounded, compact in-memory history, fed by the sampler. No HTTP
// request ever reaches NVML or sysfs (DCGM's watch-table idea): a scrape or a page view only reads this.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "advice/advice.hpp" // issue 12: the live advice reads the fine ring
#include "alerts/engine.hpp" // alerts (issue 14)
#include "core/frame.hpp"
#include "core/schema.hpp"
#include "forecast/anomaly_monitor.hpp" // issue 36
#include "forecast/live_forecast.hpp"
#include "remote_write/writer.hpp"
#include "sampler/sampler.hpp"
#include "server/process_board.hpp"

namespace wattscope {

// /metrics in the format a scrape asked for (Accept): Prometheus text 0.0.4, or OpenMetrics 1.0.0.
enum class MetricsFormat { Text004, OpenMetrics };

// OpenMetrics 1.0 text from Prometheus 0.0.4 text as metrics_text writes it (HELP then TYPE per family): counter
// families are named without _total in HELP and TYPE, gauges named *_info become the info type, double quotes in HELP
// are escaped, each sample of the counters in `created_families` is followed by its _created sample (created_s,
// seconds since 1970), and "# EOF" ends it.
std::string openmetrics_from_text(std::string_view text, std::span<const std::string_view> created_families,
                                  double created_s);

// The exporter's own process as of the latest frame: CPU seconds and resident bytes (-1: not read).
struct ProcessSelf {
  double cpu_s = -1, resident_bytes = -1;
};

class LiveState {
public:
  // retain: how much history to keep. The history is two rings of fixed size (see below), so memory does not grow
  // with uptime: the latest kFinePoints frames as they came, and, back to `retain`, averages and peaks over
  // coarse_step() buckets (retain / kCoarsePoints, at least one interval).
  LiveState(std::chrono::nanoseconds retain, std::chrono::nanoseconds interval);

  void set_run(const RunInfo& run, std::vector<GpuDevice> devices);
  void set_sampler(const SamplerStats* stats) { sampler_ = stats; }
  // ---- alerts (issue 14) ----: the session's alert engine (null: no rules); before the server starts.
  void set_alerts(const AlertEngine* engine) { alerts_ = engine; }
  // issue 36: anomalies and stragglers holding now, in /api/v1/current's "anomalies"; before the server starts.
  void set_anomalies(const AnomalyMonitor* m) { anomalies_ = m; }
  // /api/v1/alerts: firing and recent alerts (AlertEngine::json); {"rules": 0, ...} without rules.
  nlohmann::json alerts_json() const;
  // ---- forecasts (issue 36) ----: the session's forecast board; before the server starts. /api/v1/forecast.
  void set_forecasts(const forecast::ForecastBoard* board) { forecasts_ = board; }
  // --remote-write: its queues and counts in /metrics (wattscope_remote_write_*); before the first frame.
  void set_remote_write(const remote_write::Writer* w) { remote_write_ = w; }
  nlohmann::json forecast_json() const;
  // Processes and units exported one by one (the rest summed as `other`); before set_run.
  void set_process_cap(size_t n) { process_cap_ = n; }
  // serve --process-metrics: per-process series in /metrics for GPU processes, and the CPU-only processes of the
  // units named (--process-metrics-unit); off by default (a series per process start). Before set_run.
  void set_process_metrics(bool on, std::vector<std::string> cpu_units = {}) {
    process_series_.which = on ? ProcessSeries::Which::Gpu : ProcessSeries::Which::None;
    process_series_.cpu_units = std::move(cpu_units);
  }
  // From the sampler thread, after accounting: never blocks for long.
  void push(const std::shared_ptr<const Frame>& frame);
  void stop(); // wakes every waiting event stream

  std::shared_ptr<const Frame> latest() const;
  // Blocks until a frame newer than `after_seq` arrives, the timeout passes, or stop(). Returns {frame, seq}.
  std::pair<std::shared_ptr<const Frame>, uint64_t> wait_next(uint64_t after_seq, std::chrono::milliseconds timeout);
  bool stopped() const;

  nlohmann::json current_json() const;
  // Points in [now - range, now], averaged into `step` buckets (peak power kept alongside).
  nlohmann::json history_json(std::chrono::nanoseconds range, std::chrono::nanoseconds step) const;
  // The Prometheus text exposition format 0.0.4, or OpenMetrics (the same families, rewritten for a scrape that asks
  // for it: only that scrape pays for the rewrite).
  std::string metrics_text(MetricsFormat format = MetricsFormat::Text004) const;
  // issue 32: metrics_text() gzip-compressed (Accept-Encoding: gzip). The body is compressed once, when it differs
  // from the last one compressed (a new frame, a new count), and kept: every other scrape of it gets the copy, so a
  // large body is never compressed per request (DESIGN: Server).
  std::string metrics_gzip(MetricsFormat format = MetricsFormat::Text004) const;
  // zlib level 1: a 170 kB body (8 GPUs, 200 processes) to 11.9 kB in 0.8 ms, where level 6 makes 9.8 kB in 8 ms
  // (bench/metrics_size.py, on a loaded 2-core VM).
  static constexpr int kMetricsGzipLevel = 1;
  // /api/v1/advice's input (issue 12: serve keeps its last hour once): the fine ring's frames, oldest first; every GPU
  // of the run with its device facts as last known and one point per frame it answered in. Missing values stay
  // missing. Built when the advice is recomputed (at most every 10 s); holds ring_mu_ while it copies.
  advice::Input advice_input() const;

  const RunInfo& run() const { return run_; }
  const std::vector<GpuDevice>& devices() const { return devices_; }
  static constexpr size_t kFinePoints = 3600;   // 1 h at 1 s
  static constexpr size_t kCoarsePoints = 2880; // 24 h in 30 s buckets
  std::chrono::milliseconds coarse_step() const { return coarse_step_; }
  // Bytes the two rings hold (allocated once, at set_run): 4 B per value, plus a timestamp (and a count) per point;
  // the fine ring also holds what the live advice reads (kAdvice: floats, 8 B for kExact counters, a byte per GPU).
  size_t history_bytes() const;

private:
  // A compact history point: the CPU metrics flagged kHistory in the registry, then per GPU the GPU ones.
  size_t width() const;
  // The fine ring's point goes on with the advice's floats (kAdvice, not kHistory nor kExact: CPU ones, then per GPU),
  // and keeps the kExact counters as doubles (CPU ones, then per GPU) and whether each GPU answered.
  size_t advice_width() const;
  size_t exact_width() const;
  // A ring of points, `width` floats each, allocated once; the oldest point is overwritten.
  struct Ring {
    size_t cap = 0, width = 0, head = 0, size = 0; // head: the slot the next point goes to
    std::vector<int64_t> ts;
    std::vector<float> mean, peak; // peak and n: coarse ring only
    std::vector<uint32_t> n;       // frames averaged into the point
    // Fine ring only (issue 12): `exact_width` doubles a point, and a byte per GPU: 1 when it answered that frame.
    size_t exact_width = 0;
    std::vector<double> exact;
    std::vector<uint8_t> present;
    void reset(size_t capacity, size_t w, bool coarse, size_t exact_w = 0, size_t gpus = 0);
    size_t at(size_t i) const { return (head + cap - size + i) % cap; } // slot of the i-th oldest point
    size_t add();                                                       // slot for a new point
  };
  void flush_bucket();                   // under ring_mu_: the coarse bucket being filled becomes a coarse point
  size_t ring_bytes() const;             // under ring_mu_
  std::atomic<size_t> history_bytes_{0}; // read by scrapes without ring_mu_

  // Two locks, so no reader waits for another's work: mu_ guards the latest frame, devices, run and events (what
  // /metrics, /api/v1/current and the event streams read, briefly); ring_mu_ guards the history ring, which
  // /api/v1/history aggregates for milliseconds. A history request therefore never holds up a scrape. push() takes
  // them one after the other, never both at once.
  const forecast::ForecastBoard* forecasts_ = nullptr; // issue 36
  mutable std::mutex mu_;
  std::condition_variable cv_;
  mutable std::mutex ring_mu_;
  // issue 32: the last body compressed and its gzip; its own lock, taken after mu_ is released.
  mutable std::mutex gzip_mu_;
  struct GzipCache {
    std::string plain, body;
  };
  mutable GzipCache gzip_[2];  // per format: a Prometheus and an OpenMetrics scraper do not undo each other's copy
  double process_start_s_ = 0; // process_start_time_seconds, read once
  ProcessSelf self_;           // under mu_: read once a frame by push()
  std::vector<int> ring_gpus_; // gpu_index of each GPU column group in the ring, fixed by set_run
  bool stop_ = false;
  RunInfo run_;
  std::vector<GpuDevice> devices_;
  const SamplerStats* sampler_ = nullptr;
  const AlertEngine* alerts_ = nullptr; // issue 14
  const remote_write::Writer* remote_write_ = nullptr;
  // issue 36
  const AnomalyMonitor* anomalies_ = nullptr;
  std::shared_ptr<const Frame> latest_;
  // The energy so far (/api/v1/current's energy_j): each device's latest known energy since the run's start. A device
  // missing from a tick (a source past its deadline on a loaded machine) keeps its last figure, so the total neither
  // dips nor reads "not measured" for that tick.
  std::map<int, std::optional<double>> gpu_energy_j_; // a slot per GPU from set_run: push() allocates nothing
  std::optional<double> cpu_package_energy_j_, cpu_dram_energy_j_;
  std::map<std::string, double> work_total_; // unit -> amount reported since serve started
  static constexpr size_t kMaxWorkUnits = 32;
  // Once a second while work is reported: the energy so far and the work totals, for the dashboard's energy per unit
  // over the last minute (at most kWorkWindowS + 1 entries).
  struct WorkMark {
    int64_t ts_ms = 0;
    double energy_j = 0;
    std::map<std::string, double> work;
  };
  std::deque<WorkMark> work_marks_;
  static constexpr int64_t kWorkWindowS = 60;
  double energy_so_far_locked() const; // the devices' energy so far (gpu_energy_j_, the CPU's)
  nlohmann::json work_json() const;    // /api/v1/current's "work"
  std::string cpu_power_method_;       // of the CPU's latest energy
  uint64_t seq_ = 0;
  std::deque<Event> recent_events_;
  std::map<int, int64_t> xid_errors_;         // issue 32: Xid events per GPU index since serve started
  std::shared_ptr<const ProcessBoard> board_; // the latest process scan's series and lists (issue 13)
  // Touched only by push() (the sampler thread) and set_run before it: builds board_ outside both locks.
  size_t process_cap_ = 20;
  ProcessSeries process_series_{ProcessSeries::Which::None, {}};
  std::unique_ptr<ProcessBoardBuilder> board_builder_;
  // Under ring_mu_.
  std::chrono::milliseconds coarse_step_{1000};
  size_t coarse_cap_ = 1;
  Ring fine_, coarse_;
  // The coarse bucket being filled: per value its sum, count and peak; the bucket's first frame time and frames.
  int64_t bucket_start_ms_ = 0, bucket_ts_ms_ = 0;
  uint32_t bucket_frames_ = 0;
  std::vector<double> bucket_sum_;
  std::vector<uint32_t> bucket_n_;
  std::vector<float> bucket_peak_;
};

} // namespace wattscope
