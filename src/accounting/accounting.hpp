// Turns raw frames into figures: energy per GPU (hardware counter delta, or trapezoid integral of power only where no
// counter exists, labelled as such), event numbering, and the running totals that become the run summary.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "accounting/attribution.hpp"
#include "accounting/footprint.hpp"
#include "core/frame.hpp"

namespace wattscope {

struct Stat {
  double sum = 0;
  int64_t n = 0;
  OptF peak;
  void add(const OptF& v) {
    if (!v) return;
    sum += *v;
    ++n;
    if (!peak || *v > *peak) peak = *v;
  }
  OptF avg() const { return n ? OptF(sum / static_cast<double>(n)) : std::nullopt; }
};

struct GpuSummary {
  GpuDevice device;
  double energy_j = 0;
  Stat power_w;
  Stat util_gpu_pct;
  OptI peak_mem_used_bytes;
  int64_t samples = 0;
  bool lost = false;
  // Integrated devices: the longest step between two power readings the integral spans (adaptive sampling's idle
  // stretches, a stall); 0 for counters.
  double max_integration_step_s = 0;
  bool device_row_sent = false; // issue 31: its gpu_devices row went out (tick 0, or its first sample if added late)
};

// Adaptive sampling (issue 18): how the run was sampled when it went idle. Absent from the summary when it was off.
struct SamplingSummary {
  bool adaptive = false;
  double interval_s = 0;
  double idle_interval_s = 0; // as in force: whole grid slots
  double idle_after_s = 0;
  int64_t idle_stretches = 0; // sampling-idle switches
  double idle_s = 0;          // time spent sampling at the idle interval
  int64_t probe_ticks = 0;    // grid slots only probed (not stored)
  nlohmann::json to_json() const;
};

struct ZoneSummary {
  std::string domain;
  std::string zone;
  OptI socket;
  double energy_j = 0;
  Stat power_w;
};

struct RunSummary {
  int64_t samples = 0;
  int64_t skipped_ticks = 0;
  Stat cpu_util_pct;
  OptI cpu_mem_peak_bytes;
  OptI cpu_mem_total_bytes;
  // Host CPU energy: package (+ DRAM) since run start, measured by RAPL ("counter") or "estimated" from --cpu-tdp.
  OptF cpu_package_energy_j;
  OptF cpu_dram_energy_j;
  Stat cpu_package_power_w;
  std::string cpu_energy_method;
  std::vector<ZoneSummary> zones; // per RAPL zone, sockets kept apart
  OptF cpu_energy_j() const;      // package + DRAM (psys covers the platform and would count twice)
  std::vector<GpuSummary> gpus;
  int64_t events = 0;
  SamplingSummary sampling;       // issue 18
  AttributionSummary attribution; // who used the energy; tracked only when a process scan reached accounting
  // Carbon and cost, charged sample by sample ({"carbon": ..., "cost": ...}, FootprintLedger::summary_json); null
  // when no footprint was set (a run of an older version reads as the world's yearly average, runs/footprint.hpp).
  nlohmann::json footprint;
  // How far the run's figures can be trusted as measured: the hottest GPU's temperature at the first and last sample,
  // and the warm-up (from the first sample until the GPUs' power first settled near the level it kept).
  OptF gpu_temp_start_c;
  OptF gpu_temp_end_c;
  OptF warmup_s;               // missing when no GPU reported power
  bool settled = true;         // false: power never settled (still warming up when the run ended)
  OptF total_energy_j() const; // GPUs + CPU package + DRAM; missing when nothing measured energy
  nlohmann::json to_json() const;
};

class Accounting {
public:
  explicit Accounting(std::vector<GpuDevice> devices);
  // Adaptive sampling is on (issue 18): the summary says how idle stretches were sampled (the configuration part of
  // `sampling`; the counts are accounting's).
  void set_sampling(const SamplingSummary& configured);
  // Charges the run's energy at these rates, device by device and sample by sample (accounting/footprint.hpp).
  void set_footprint(Footprint f);
  // Issue 31: GPUs of a source that opened after the run began (a vendor library's init ran beside the command).
  // Thread-safe; their gpu_devices rows go out with their first sample.
  void add_devices(std::vector<GpuDevice> devices);
  // Called on the sampler thread for every frame, before the bus.
  void process(Frame& frame);
  // Issue 33, sampler thread, before process() of the frame that carries the reading: the energy_j (since the run's
  // start) that an energy counter reading taken since the last frame stands for, by the rule the ticks use (the
  // counter's rise since its first reading, plus what was counted before a reset). Nothing for a GPU without a counter
  // or not yet read, or a reading below the run's first (a reset since: the next tick says what happened).
  std::optional<double> counter_energy_j(int gpu_index, int64_t counter_uj) const;
  // Thread-safe: queue an event for the next frame (start-up notices, sink outages).
  void add_event(Event ev);
  // Moves the queued events into `frame` and numbers them: process() does it for every frame; the run's end does it
  // for its closing markers-only frame, so an event queued after the last tick is still stored.
  void settle_events(Frame& frame);
  RunSummary summary() const;
  // The end of a run: the tick numbers of the final `processes` rows.
  void resolve_process_rows(std::vector<ProcessRow>& rows, int64_t tick) const;
  int64_t last_tick() const;

private:
  struct EnergyState {
    bool method_known = false;
    bool counter = false;
    int64_t base_uj = 0;
    int64_t last_uj = 0;
    int64_t carried_uj = 0; // energy before a counter reset
    OptF last_power_w;
    SteadyClock::time_point last_mono{};
    double integral_j = 0;
    double max_step_s = 0;
    // ---- issue 33: a counter read on a schedule. At each reading (an anchor) the energy is the counter's; between
    // two, the anchor plus the instant power's integral since it, scaled by how the counter rose against that
    // integral over the run so far (integral_j: the power's integral over every anchored stretch), never below what
    // was already stored.
    double anchor_j = 0;
    SteadyClock::time_point anchor_mono{};
    double since_anchor_j = 0; // power's integral since the anchor
    double scale = 1;
    double emitted_j = 0; // the last energy_j given out
    // ---- end issue 33
  };
  void energy(GpuSample& s, const Frame& f, EnergyState& st);
  void settle_events_locked(Frame& f);

  mutable std::mutex mu_;
  std::vector<Event> pending_events_;
  int64_t next_event_seq_ = 0;
  std::map<int, EnergyState> energy_;
  Attributor attributor_;
  int64_t last_tick_ = 0;
  RunSummary summary_;
  std::optional<SteadyClock::time_point> idle_since_; // issue 18: the current idle stretch began
  void charge(Frame& f);
  void track_warmup(const Frame& f);
  std::optional<FootprintLedger> ledger_;
  std::map<std::string, std::pair<int64_t, double>> charged_; // device -> (ts_ms, cumulative J) last charged
  int64_t first_ts_ms_ = 0, last_ts_ms_ = 0;
  // (seconds since the first sample, the GPUs' total power), thinned to every other point whenever it fills
  std::vector<std::pair<double, double>> power_trace_;
  int64_t trace_stride_ = 1, trace_seen_ = 0;
  SteadyClock::time_point last_mono_{};
};

} // namespace wattscope
