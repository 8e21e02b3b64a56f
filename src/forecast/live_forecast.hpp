#pragma once
// Live forecasts (issue 36, docs/forecasts.md): per GPU, when its memory runs out at the rate it grows and when its
// temperature reaches the throttle point at the rate it rises; for the run, with a declared total of work, when it
// finishes and how much more energy that takes; per GPU, its utilisation over the next minute.
//
// Each figure rests on a robust slope (core/trend.hpp, Theil–Sen: the median of the pairwise slopes, so a few
// outliers or a step do not move it) over the part of the recent window after its last change point
// (forecast/trend_fit.hpp), and carries an interval from the spread of those pairwise slopes (their 10th and 90th
// percentiles). A temperature that follows a first-order curve is projected along it (it settles; a straight line
// through a GPU warming from cold would not). A forecast never reaches further ahead than max_projection times the
// history it rests on, and a temperature must have risen by more than its sensor's whole degrees. A forecast that
// cannot be made (too little history, nothing growing, no declared total) is missing with the reason, never 0.
//
// The engine sees plain numbers (the pipeline feeds it from the frames and the markers) and keeps bounded history in
// time, not samples: the whole window in at most kMaxPoints points per series, one per Options::min_spacing_ms where
// recent and sparser with age.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/frame.hpp"
#include "core/trend.hpp"
#include "forecast/series_model.hpp"

namespace wattscope::forecast {

// A forecast value with its interval; all missing, or value with low <= value <= high (high may be missing: the
// slower end of the interval never gets there).
struct Estimate {
  OptF value;
  OptF low;
  OptF high;
  bool known() const { return value.has_value(); }
};

struct DeviceForecast {
  int gpu_index = 0;
  // Out of memory: seconds until used memory reaches the device's memory, and the epoch it happens in (when epochs
  // are marked).
  Estimate oom_in_s;
  OptI oom_epoch;
  OptF mem_growth_bytes_per_s;
  OptF mem_growth_bytes_per_epoch; // when epochs are marked
  std::string oom_basis;           // what it rests on, or why it is missing
  // Growing, but the trend since its last change is too short to project that far: an event already said is
  // neither updated nor withdrawn on it.
  bool oom_unsure = false;
  // Throttling: seconds until the temperature reaches the throttle point.
  Estimate throttle_in_s;
  double throttle_temp_c = 0;
  bool throttle_temp_default = true; // the documented default, not the device's own slowdown temperature
  OptF temp_rise_c_per_s;
  OptF temp_settles_c; // where a first-order curve through the history settles, when one fits
  std::string throttle_basis;
  bool throttle_unsure = false; // as oom_unsure
  // Utilisation over the next minute, from the default series model.
  OptF util_next_mean_pct;
  OptF util_next_peak_pct;
  OptF util_next_peak_in_s;
  std::string util_model;
  std::string util_basis;
};

struct FinishForecast {
  std::string unit;
  double done = 0;
  double total = 0;
  OptF rate_per_s;
  Estimate finish_in_s;
  Estimate energy_to_finish_j;
  OptF power_w;              // the run's power over the window (the slope of its cumulative energy)
  std::string energy_method; // e.g. "counter, extrapolated"
  std::string basis;
};

struct Snapshot {
  int64_t ts_ms = 0;
  std::vector<DeviceForecast> devices; // in gpu_index order
  std::vector<FinishForecast> finish;  // one per unit with a declared total, in unit order
  nlohmann::json to_json() const;
  // One line for `top` and the run summary: the nearest OOM and throttle and the finish; "" when there is none.
  std::string line() const;
};

// The history a live forecast needs at least, whatever the interval.
inline constexpr int64_t kForecastMinHistoryMs = 10'000;

// "12 min", "1 h 05 min", "40 s".
std::string human_duration(double s);

class LiveForecaster {
public:
  struct Options {
    int64_t window_ms = 15 * 60 * 1000; // the recent history a slope rests on
    size_t min_points = 8;              // fewer points in the window: not enough history
    int64_t min_span_ms = 30 * 1000;    // a window shorter than this: not enough history (the session: 10 s)
    int64_t min_spacing_ms = 1000;      // history is thinned to a point this often (the last is always the latest)
    int64_t horizon_ms = 60 * 1000;     // utilisation forecast
    double default_throttle_c = 87.0;   // NVIDIA's common slowdown temperature where the device does not say its own
    int64_t warn_within_ms = 30 * 60 * 1000; // an event when OOM or throttling first comes this close
    double max_projection = 3;               // a forecast reaches at most this many times its history ahead
    double min_temp_rise_c = 2;              // a rise within two whole-degree sensor steps is not a trend
    // A throttle forecast rests on at least this much of its trend: a GPU that starts work heats at 2-3 °C/s for
    // its first seconds and settles within about a minute (a fan that stops is the anomaly detector's ramp).
    int64_t min_throttle_history_ms = 60 * 1000;
    // Forecasts of devices are made at most this often (a trend of minutes needs no more; the cost is per GPU).
    int64_t device_every_ms = 5000;
    // An announced event is withdrawn once its forecast has been gone (or past twice warn_within) this long: a
    // forecast that blinks out for a tick neither withdraws nor re-announces it.
    int64_t withdraw_after_ms = 60 * 1000;
    // An announced event is updated when the time left moves by more than this share of what was announced (and at
    // least update_min_s): "in ~13 min" that becomes "in ~45 s" is said at once.
    double update_share = 0.25;
    double update_min_s = 30;
    std::string model = std::string(default_series_model());
  };
  static constexpr size_t kMaxPoints = 512;
  static constexpr size_t kMaxDevices = 64;
  static constexpr size_t kMaxUnits = 16;

  LiveForecaster() : LiveForecaster(Options{}) {}
  explicit LiveForecaster(Options o);

  // One tick: every GPU's sample, the run's cumulative energy (the sum over devices, as accounting set it) and its
  // method label (counter | integrated | ...).
  void observe(const Frame& f);
  // Work marked (amount, unit, declared total), and a phase begun (an index marks an epoch).
  void observe_work(const WorkRecord& w);
  void observe_phase_begin(const std::string& name, OptI index, int64_t ts_ms);
  // The device's own slowdown temperature (NVML), where it gives one.
  void set_throttle_temp(int gpu_index, double celsius);
  // The label of the run's energy (counter | integrated | mixed ...), which the finish forecast extrapolates.
  void set_energy_method(std::string method);

  Snapshot forecast(int64_t now_ms) const;
  // `forecast` events: when an out-of-memory or throttle forecast first comes within warn_within_ms ("forecast: GPU 2
  // out of memory in ~12 min (epoch 14): ..."), when its time left then moves materially ("... updated from ~13
  // min"), and when it has not held for withdraw_after_ms ("forecast withdrawn: ..."). Call with the snapshot just
  // made.
  std::vector<Event> crossings(const Snapshot& s);

  using Point = TrendPoint;

private:
  struct Series {
    std::deque<Point> pts;
    void add(int64_t ts_ms, double y, const Options& o);
  };
  struct Device {
    Series mem;
    Series temp;
    OptI mem_total;
    std::optional<double> throttle_c;
    std::unique_ptr<SeriesModel> util;
    int64_t last_util_ms = 0;
    double tick_ms = 0;
    double step_ms = 0; // of the utilisation model: a second, or the tick where longer
    double util_sum = 0;
    int util_n = 0;
    int64_t util_second_ms = -1; // the first tick of the second being summed
    // The peak memory of each completed epoch: (epoch index, its start, bytes). A leak that grows by a step per
    // epoch then has one point per step, and the first epoch whose peak reaches the device's memory is where it runs
    // out.
    struct EpochMem {
      int64_t index;
      int64_t start_ms;
      double bytes;
    };
    std::deque<EpochMem> epochs;
    OptI last_mem;
    OptF epoch_peak; // of the epoch in progress
    // An announced forecast event: the time left it said, when, and since when the forecast no longer holds.
    struct Warning {
      bool on = false;
      double said_s = 0;
      int64_t said_at_ms = 0;
      std::optional<int64_t> gone_since_ms;
    };
    Warning oom_warning;
    Warning throttle_warning;
  };
  struct Work {
    double done = 0;
    OptF total;
    Series cumulative;
  };
  Device& device(int gpu_index);
  std::optional<std::string> too_far(const Estimate& e, double history_s) const;
  std::optional<std::string> too_short(double history_s) const;
  void forecast_oom(const Device& d, int64_t now_ms, DeviceForecast& df) const;
  void forecast_throttle(const Device& d, int64_t now_ms, DeviceForecast& df) const;
  void forecast_util(const Device& d, DeviceForecast& df) const;
  FinishForecast forecast_finish(const std::string& unit, const Work& w, int64_t now_ms) const;
  void warn(Device::Warning& w, const Estimate& e, bool unsure, int64_t now_ms, const std::string& what,
            const std::string& gone, const std::string& basis, const std::string& source,
            std::vector<Event>& out) const;

  Options o_;
  struct Cache {
    std::vector<DeviceForecast> devices;
    int64_t ts_ms = 0;
  };
  mutable Cache cache_; // the devices' last forecasts (device_every_ms)
  std::map<int, Device> devices_;
  std::map<std::string, Work> work_;
  Series energy_;
  std::string energy_method_;
  OptI epoch_;
  int64_t epoch_start_ms_ = 0;
};

// The latest snapshot, for readers on other threads (/api/v1/forecast, `top`, the run summary): the sampler thread
// publishes, readers copy. Before the first publication: no devices, no finish, an empty line.
class ForecastBoard {
public:
  void publish(const Snapshot& s);
  nlohmann::json as_json() const;
  std::string line() const;

private:
  mutable std::mutex mu_;
  nlohmann::json json_ = {
      {"ts_ms", nullptr}, {"devices", nlohmann::json::array()}, {"finish", nlohmann::json::array()}, {"line", ""}};
  std::string line_;
};

} // namespace wattscope::forecast
