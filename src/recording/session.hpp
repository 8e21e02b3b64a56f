// One recording: sources → sampler → accounting → bus → sinks, from start to a finalised run row.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "accounting/accounting.hpp"
#include "alerts/engine.hpp" // alerts (issue 14)
#include "core/duration.hpp"
#include "core/schema.hpp"
#include "forecast/anomaly_monitor.hpp" // issue 36
#include "forecast/live_forecast.hpp"   // issue 36
#include "phases/marker_socket.hpp"
#include "phases/phase_tracker.hpp"
#include "processes/cgroup.hpp"
#include "processes/tracker.hpp"
#include "recording/scraper.hpp"
#include "sampler/sampler.hpp"
#include "simulation/simulate.hpp"
#include "sinks/sink_writer.hpp"
#include "sinks/store.hpp"
#include "sources/procfs/cpu_source.hpp"
#include "sources/source.hpp"

namespace wattscope {

struct SessionOptions {
  std::string task;
  std::vector<std::string> command; // empty for `record`
  std::chrono::nanoseconds interval = std::chrono::seconds(1);
  // --max-read-cost (issue 33): a GPU read costing more than this is read at most once a second (or at its own
  // period); 0 reads everything every tick. Unset: the source's default (50 us).
  std::optional<std::chrono::nanoseconds> max_read_cost;
  AdaptiveOptions adaptive; // --idle-interval, --idle-after (issue 18, sampler/adaptive.hpp); off by default
  std::vector<StoreSpec> stores;
  CommitPolicy commit;
  std::chrono::nanoseconds drain_timeout = kDefaultDrainTimeout; // how long the end of a run waits for its stores
  std::string procfs_root = "/proc";
  std::string sysfs_root = "/sys";
  std::string gpus; // --gpus: "" (CUDA_VISIBLE_DEVICES or all), "all", "0,2", "GPU-…"
  // --cpu-tdp: enables the labelled estimate where RAPL measures nothing.
  std::optional<double> cpu_tdp_w;
  // Called on the sampler thread with every frame after accounting (serve's live state); must not block.
  std::function<void(const std::shared_ptr<const Frame>&)> on_frame;
  std::map<std::string, std::string> tags;
  // ---- attribution (issue 13) ----
  bool track_processes = true; // run: the command's tree (Session::follow); record/serve: the machine's top N
  size_t top_processes = 20;   // --top-processes
  // --process-interval: how often processes are scanned, never below 1 s nor the sampling interval (issue 12).
  std::chrono::nanoseconds process_interval = std::chrono::seconds(1);
  // ---- end attribution ----
  // issue 33: per-core rows once per process scan (the period filled in from process_interval and interval when the
  // sources are made), every tick, or none.
  PerCoreStorage per_core{PerCoreStorage::Mode::Period};
  // record --only-unit / --only-env (issue 18): the run's processes are those of these units or with these
  // environment entries (TrackerOptions); the Slurm steps they ran in become the tag slurm_steps.
  std::vector<std::string> only_units;
  std::vector<std::string> only_env;
  // Markers (issue 15): `run` listens in a private directory (its path goes to the child as WATTSCOPE_SOCKET);
  // record/serve at --socket PATH. Neither: no socket.
  bool private_marker_socket = false;
  std::string marker_socket_path;
  // --scrape URL (repeatable), --scrape-unit, --scrape-max-batch: a workload's Prometheus endpoint as work
  // (recording/scraper.hpp); the period is the interval.
  ScrapeOptions scrape;
  // ---- simulate (issue 19): simulated GPUs instead of the machine's (simulation/simulate.hpp); the run is tagged
  // simulated=true and the scenario's timeline sends its phase and work markers.
  std::shared_ptr<const Simulation> simulate;
  // ---- end simulate
  // ---- alerts (issue 14) ----: rules and notifiers (--alerts FILE or the default file); null: no alerts. The run's
  // end gives the notifiers alert_delivery_timeout to deliver what is still waiting.
  std::shared_ptr<const AlertConfig> alerts;
  std::chrono::nanoseconds alert_delivery_timeout = std::chrono::seconds(5);
  // ---- end alerts
  // Carbon and cost rates (--carbon-intensity, --carbon-region, --carbon-intensity-file, --pue, --energy-price, ...);
  // unset: the world's yearly carbon intensity, marked as assumed, and no cost.
  std::optional<Footprint> footprint;
};

class Session {
public:
  explicit Session(SessionOptions opts);
  ~Session();
  // Opens sources and stores, writes the run row. Throws std::runtime_error with a fix-it message.
  void open();
  void start();
  // Stops sampling, drains every store, finalises the run row. Safe to call once.
  RunInfo finish(std::optional<int64_t> exit_status);
  const RunInfo& run() const { return run_; }
  const SamplerStats* sampler_stats() const { return sampler_ ? &sampler_->stats() : nullptr; }
  std::vector<std::string> store_names() const;
  bool all_stored() const { return all_stored_; }
  RunSummary summary() const { return acc_->summary(); }
  // The run's GPUs: those opened before it began, then those of a vendor library that became ready later (issue 31).
  std::vector<GpuDevice> devices() const;
  // ---- attribution (issue 13) ----
  // `run`: the run's own cgroup, made before the child starts (its cgroup.procs fd goes to spawn_child), then the
  // child's tree followed from its pid. Without a cgroup, says once that daemonised descendants may be missed.
  RunCgroup make_cgroup();
  void follow(pid_t child, const RunCgroup& cgroup);
  // ---- end attribution ----
  // The marker socket's path, "" when there is none (issue 15).
  std::string marker_socket() const { return markers_ ? markers_->path() : std::string(); }
  // ---- alerts (issue 14) ----: the engine (firing alerts, /api/v1/alerts), null without rules.
  const AlertEngine* alerts() const { return alerts_.get(); }
  // issue 36: anomalies and stragglers live (null when the session records no GPU).
  const AnomalyMonitor* anomalies() const { return anomalies_.get(); }
  // ---- forecasts (issue 36) ----: the latest OOM, throttle, finish and utilisation forecasts (/api/v1/forecast,
  // top, the run summary); published from the sampler thread at most once a second.
  const forecast::ForecastBoard& forecasts() const { return forecast_board_; }

private:
  // open()'s steps, in order
  void open_run();
  void open_sources(std::vector<Event>& notices);
  void open_accounting();
  void open_process_tracker();
  void open_monitors();
  void open_markers();
  void on_marker(Marker m, int64_t ts_ms); // a marker from the socket (or the simulation), placed at its own time
  void add_edge_readings(const std::vector<CounterReading>& readings);
  void answer_window(const PhaseTracker::WindowReply& w);
  int64_t windows_unanswered_ = 0; // sampler thread
  void open_stores();
  // ---- issue 31: vendor libraries open beside the command (threads of their own), never before it
  struct Opening;
  struct Opened;
  std::shared_ptr<Opening> opening_;
  std::vector<std::string> claimed_; // PCI bus ids of the GPUs a source already records; under opening_->mu once late
  std::vector<GpuDevice> late_devices_; // under opening_->mu
  // Takes an opened (or failed) source into the run; notices: where a failure is said. Returns the devices it adds,
  // or nothing when the source is not sampled.
  std::optional<std::vector<GpuDevice>> adopt_source(const std::shared_ptr<Source>& s, bool opened,
                                                     std::vector<Event>& notices, bool late);
  void join_late(Opened& e); // opener thread, under opening_->mu, once the session has started
  // ---- end issue 31
  SessionOptions opts_;
  RunInfo run_;
  std::vector<std::shared_ptr<Source>> sources_; // shared with the sampler: a worker stuck in a driver may outlive it
  std::shared_ptr<std::vector<GpuDevice>> devices_;
  std::unique_ptr<Accounting> acc_;
  std::optional<Footprint> footprint_; // the rates the run is charged at (set with the accounting)
  std::vector<std::unique_ptr<SinkWriter>> writers_;
  std::unique_ptr<Sampler> sampler_;
  // issue 33: the sampler that phase edges ask for counter readings (null: none asked); the marker thread reads it
  std::atomic<Sampler*> edge_sampler_{nullptr};
  // The edge budget: 8 readings back to back, then one per 200 ms, whatever the interval: a phase of a second or two,
  // several edges a second, always gets them; a phase per training step gets five a second, the rest interpolated.
  static constexpr int kEdgeReadingBurst = 8;
  static constexpr std::chrono::nanoseconds kEdgeReadingPeriod = std::chrono::milliseconds(200);
  // A marker's own time (Marker::mono_ns) is taken when it is at most this far after its arrival (clocks read on two
  // CPUs), and at most kMaxMarkerDelay before it (the tracker keeps its known points that far back); other times are
  // no time of this machine's clock.
  static constexpr std::chrono::nanoseconds kMarkerClockSlack = std::chrono::milliseconds(1);
  static constexpr std::chrono::nanoseconds kMaxMarkerDelay = PhaseTracker::kMaxMarkerAge;
  std::atomic<int64_t> markers_clock_refused_{0};
  std::unique_ptr<ProcessTracker> tracker_;
  std::unique_ptr<PhaseTracker> phases_;    // issue 15
  std::unique_ptr<MarkerListener> markers_; // issue 15
  std::unique_ptr<Scraper> scraper_;        // --scrape
  std::unique_ptr<AlertEngine> alerts_;     // issue 14
  // issue 36
  std::unique_ptr<AnomalyMonitor> anomalies_;
  // ---- forecasts (issue 36), sampler thread
  std::unique_ptr<forecast::LiveForecaster> forecaster_;
  forecast::ForecastBoard forecast_board_;
  std::optional<std::pair<int64_t, int64_t>> forecast_epoch_; // (index, start_ms) of the epoch the forecaster saw
  int64_t forecast_last_ms_ = 0;
  void feed_forecast(const Frame& f);
  // ---- end forecasts
  bool all_stored_ = true;
  bool finished_ = false;
  OptF run_busy_cores_; // issue 33, sampler thread: the command's processes' busy cores in the latest process scan
  std::function<void(Marker, int64_t)> on_marker_; // issue 15: what a marker does, from the socket or the simulation
  // ---- simulate (issue 19): the thread that sends the scenario's markers on its timeline
  // issue 29: under `run`, the scenario's markers go to a phase tracker of their own and its rows are held apart; they
  // become the run's at its end only if the command sent no phase or work marker of its own (docs/simulate.md).
  std::unique_ptr<PhaseTracker> sim_phases_;
  std::vector<PhaseRecord> sim_held_phases_; // sampler thread
  std::vector<WorkRecord> sim_held_work_;
  int64_t sim_held_dropped_ = 0;
  std::atomic<bool> command_marked_{false};
  void hold_simulated(Frame& f);
  void simulate_loop();
  std::thread sim_thread_;
  std::mutex sim_mu_;
  std::condition_variable sim_cv_;
  bool sim_stop_ = false;
  SteadyClock::time_point sim_t0_{};
  // ---- end simulate
};

} // namespace wattscope
