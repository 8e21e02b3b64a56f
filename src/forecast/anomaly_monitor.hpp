#pragma once
// Anomalies and stragglers live (issue 36), for record, run and serve: every frame, per GPU and watched metric, the
// detector of forecast/anomaly.hpp against the GPU's own recent behaviour, and the straggler test against its
// siblings' median at the same tick. What starts or ends becomes an `events` row (kind `anomaly` or `straggler`,
// source "gpu<i>", detail JSON with the evidence in words under "message"); what holds now is marked on the frame
// (Frame::anomalies) for the alert rules with `anomaly = true`, and kept for serve's API, the dashboard and `top`.
//
// Windows are in seconds, whatever the interval: the detectors and the straggler test see one value a second per GPU
// and metric, the mean of the ticks within it (at intervals of a second or more, each tick's own value, with the
// windows scaled to the same seconds). A 384 s history is 384 s at 100 ms as at 1 s; a fast interval costs a sum a
// tick, not a detector's work.
//
// Runs on the sampler thread, after accounting and phases, before the frame is shared (bench/forecast_alarms measures
// its cost against record's own).
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/frame.hpp"
#include "forecast/anomaly.hpp"

namespace wattscope {

struct AnomalyMonitorOptions {
  // Registry columns (kGpuMetrics) watched on each GPU. Unknown names are refused by the constructor.
  std::vector<std::string> metrics = {"util_gpu_pct", "power_w", "clock_sm_mhz", "temp_gpu_c"};
  // Minimum durations in seconds (values of a second each): an anomaly must hold this long past its threshold, a
  // straggler stay apart this long. Ends: end_ticks seconds back to normal.
  // 10 s: an unmarked evaluation pass of a few seconds is not a device's anomaly; a stall is said 10 s in.
  int min_ticks = 10;
  int straggler_min_ticks = 8;
  int end_ticks = 4;
  bool stragglers = true;
  // The sampling interval: at a second or more each tick is a value, and the windows above (and the detectors') are
  // scaled to stay the same seconds.
  double interval_ms = 1000;
  // The detectors' unit of time: one value per this many ms (at least the interval). 1 s; the end-to-end tests
  // shorten it (WATTSCOPE_ANOMALY_SECOND_MS) to run the same pipeline in seconds of wall time, not minutes.
  int64_t second_ms = 1000;
};

// What is anomalous now, for the API, the dashboard and `top`.
struct ActiveAnomaly {
  int gpu_index = 0;
  std::string kind;   // stall, level_change, temperature_ramp, straggler
  std::string metric; // registry column
  int64_t onset_ms = 0;
  std::string message;
};

class AnomalyMonitor {
public:
  using Emit = std::function<void(Event)>;
  // Throws std::invalid_argument naming a metric that is not a GPU registry column.
  AnomalyMonitor(AnomalyMonitorOptions o, Emit emit);
  // Sampler thread. `phase_boundaries`: how many phase begins and ends were settled so far; a change since the
  // previous frame is a phase boundary (a level change there is the phase's).
  void process(Frame& f, int64_t phase_boundaries);
  // Any thread.
  std::vector<ActiveAnomaly> active() const;
  nlohmann::json json() const; // {"anomalies": [{"gpu", "kind", "metric", "onset", "message"}], "watched": [...]}
  const AnomalyMonitorOptions& options() const { return o_; }

private:
  struct Series {
    forecast::AnomalyDetector det;
    std::optional<forecast::AnomalyChange> open; // the onset of the episode that holds now
  };
  struct Straggle {
    int apart = 0, back = 0;
    bool active = false;
    int64_t onset_ms = 0, last_ms = 0;
    int64_t reasons = 0;
    int clock_ticks = 0, util_ticks = 0, power_ticks = 0, siblings = 0; // ticks apart by each signal, of `apart`
    std::vector<double> clock, sib_clock, util, sib_util, power, sib_power;
  };
  struct Gpu {
    int index = 0;
    std::vector<Series> series; // per o_.metrics
    Straggle straggle;
    std::optional<int64_t> idle_at_ms; // the last second it read idle
  };
  Gpu& gpu(int index);
  // One second's values: their sums, counts and throttle reasons per GPU.
  struct Bucket {
    int64_t start_ms = 0;
    bool open = false;
    bool boundary = false;
    struct PerGpu {
      int index = 0;
      std::vector<double> sum; // per o_.metrics
      std::vector<int> count;  // per o_.metrics
      double clock = 0, util = 0, power = 0;
      int n_clock = 0, n_util = 0, n_power = 0;
      int64_t reasons = 0;
      bool any_reasons = false;
    };
    std::vector<PerGpu> gpus;
  };
  void add_to_bucket(const Frame& f);
  bool close_bucket(); // true when an episode began or ended
  void stragglers(const Frame& f);
  std::string straggler_message(const Gpu& g, bool ended) const;
  void publish();

  AnomalyMonitorOptions o_;
  Emit emit_;
  std::vector<size_t> metric_index_; // into kGpuMetrics, per o_.metrics
  std::vector<Gpu> gpus_;
  int64_t boundaries_ = 0;
  Bucket bucket_;
  int64_t bucket_ms_ = 1000;

  mutable std::mutex mu_;
  std::vector<ActiveAnomaly> board_;
};

// The words of one change, as the event's message: "gpu2 stalled: GPU utilisation at 11 % (usual 97 %) since
// 12:00:03 UTC, mid-phase".
std::string anomaly_message(int gpu_index, std::string_view metric, const forecast::AnomalyChange& c);

} // namespace wattscope
