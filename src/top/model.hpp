// What `wattscope top` shows, apart from how it is drawn: one HostView per machine (the local one, fed by the
// pipeline's frames, or a `serve` endpoint, fed by its JSON API), made of the core's own sample types so that the
// metric registry names every value once (STYLE 21). Collectors fill it; top/render.* draws it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/frame.hpp"

namespace wattscope::top {

// The alert thresholds the bars are coloured by: one place, so the alert rules (issue 14) can replace the defaults.
struct Thresholds {
  double util_pct = 90;           // GPU utilisation above this is hot
  double vram_pct = 80;           // memory used, % of the device's memory
  double temp_c = 85;             // GPU die temperature
  double power_pct_of_limit = 95; // power draw, % of the enforced power limit
};
inline constexpr Thresholds kDefaultThresholds{};

// A firing alert as the status line shows it: from `serve`'s /api/v1/alerts, or (locally) from the evaluator the lead
// wires in later through LocalOptions::alerts.
struct FiringAlert {
  std::string rule;
  std::string severity; // e.g. warning, critical
  std::string scope;    // e.g. gpu0, host, a unit
  std::string message;
};

struct TopProcess {
  int64_t pid = 0;
  std::string comm;
  std::optional<double> cpu_pct; // 100 = one core
  std::optional<int64_t> rss_bytes;
  std::optional<int64_t> gpu_mem_bytes; // summed over the GPUs it uses
  std::optional<double> sm_pct;         // summed over the GPUs it uses
  std::optional<double> power_w;        // attributed: its CPU share plus its GPU shares
};

inline constexpr size_t kSparkPoints = 64; // power history kept per GPU (the sparkline shows the newest that fit)

struct TopGpu {
  GpuSample s;
  std::string name;
  bool answered = false;          // in the latest frame (a lost GPU keeps its last values, marked)
  std::deque<float> power_hist_w; // newest last; NaN where power was missing
  OptF energy_j;                  // since top started watching
  std::string energy_method;      // issue 29: counter | integrated | simulated, as the device (or serve) says
};

// What one host may declare (issue 31: 30,000 GPU indices from one endpoint froze top for 41 s). A real node has a
// few GPUs and serve sends its top N processes; more is a broken or hostile endpoint, and the rest is left out (and
// counted), so that applying a document and copying a view stay cheap.
inline constexpr size_t kMaxHostGpus = 256;
inline constexpr size_t kMaxHostProcesses = 1000;
inline constexpr size_t kMaxProcessGpus = 64; // per process: the GPUs it uses
inline constexpr int64_t kMaxGpuIndex = 65535;
inline constexpr size_t kMaxHostAnomalies = 64; // issue 36

struct HostView {
  std::string name; // the host's name (run.host), or the URL until the first answer
  std::string url;  // "" for the local machine
  enum class State { Waiting, Live, NotAnswering };
  State state = State::Waiting;
  std::string problem; // why it is not answering (curl's words, an HTTP status)
  std::optional<std::chrono::steady_clock::time_point> last_data; // when the latest data arrived
  double interval_s = 1;                                          // the host's sampling interval
  int64_t last_tick = -1;
  std::vector<TopGpu> gpus;
  bool simulated = false; // issue 19: its GPUs are --simulate's (every view says so in words)
  CpuSample cpu;
  OptF cpu_energy_j; // package + DRAM since top started watching
  std::vector<TopProcess> procs;
  bool alerts_supported = false; // remote: /api/v1/alerts answered (a 404 means no alerts support)
  bool alerts_asked = false;     // remote: /api/v1/alerts was asked at least once (--once waits for it)
  std::vector<FiringAlert> alerts;
  // issue 36: anomalies and stragglers holding now, in words (at most kMaxHostAnomalies, each cut to 300 bytes).
  std::vector<std::string> anomalies;
  std::string forecast; // issue 36: the forecasts in one line (OOM, throttling, finish); "" when there is none
  // Energy counters at the first frame seen (remote: serve's run started before top did), per GPU index; -1 the CPU.
  std::string run_id;
  std::vector<std::pair<int, double>> energy_base_j;
  // Left out of the latest document for being past the caps above (or a GPU index outside 0..kMaxGpuIndex).
  size_t dropped_gpus = 0;
  size_t dropped_processes = 0;

  OptF power_w() const;  // GPUs + CPU package + DRAM, missing when none measured
  OptF energy_j() const; // since top started watching
  // Seconds since the latest data, missing before the first.
  std::optional<double> age_s(std::chrono::steady_clock::time_point now) const;
};

// A host that sent nothing for this long is marked as not answering (three of its intervals, at least 3 s).
double stale_after_s(const HostView& h);

// The local machine: one frame after accounting (energy since the session, i.e. top, started).
void apply_frame(HostView& h, const Frame& f, const std::vector<GpuDevice>& devices);
// A `serve` endpoint's /api/v1/current document (also each event of /api/v1/events). Throws
// std::invalid_argument naming the problem when it is not one. GPUs and processes past the caps are left out and
// counted (dropped_gpus, dropped_processes; `problem` says so): linear in the document's size.
void apply_current_json(HostView& h, const nlohmann::json& j, std::chrono::steady_clock::time_point now);
// /api/v1/alerts: an array of alerts, or an object holding one under "alerts" or "firing"; entries with a "state"
// other than "firing" are left out. Throws std::invalid_argument when it is neither.
std::vector<FiringAlert> parse_alerts(const nlohmann::json& j);

} // namespace wattscope::top
