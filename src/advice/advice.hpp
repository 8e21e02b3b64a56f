// Evidence-backed advice (issue 14): what a run wasted and what to change, each item with the device, the time range
// and the figures it rests on, and an estimated saving in J and % of the run's energy. The estimators work on plain
// series (advice_input.hpp builds them from a stored run; LiveAdvice from serve's frames), so a stored run and the
// live history get the same answers. The thresholds and the arithmetic are written down in docs/advice.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/frame.hpp"
#include "forecast/anomaly.hpp"

namespace wattscope::advice {

// ---- Thresholds. Each is a named constant with the reason for its value; docs/advice.md lists them. ----

// NVML utilisation is the share of its sample window (1/6 s to 1 s) in which a kernel ran; an idle GPU reads 0-3 %
// (a display or a persistence daemon's occasional work), so at most 5 % is "nothing ran".
inline constexpr double kIdleUtilPct = 5;
// Below this the GPU waited more than it worked. A fed training or inference loop keeps NVML utilisation at 90 %+;
// an input-starved one typically shows 20-60 %.
inline constexpr double kLowUtilPct = 60;
// What a fed GPU sustains: the utilisation the stall-time model (docs/advice.md) assumes the same work would run at.
inline constexpr double kFedUtilPct = 90;
// The host CPU counts as busy (data loader workers saturating it) at or above this utilisation.
inline constexpr double kCpuBusyPct = 80;
// PCIe counts as quiet below 50 MB/s (transmit + receive): a fed loader moves hundreds of MB/s to a GPU that is
// training on images or tokens, and an idle link shows a few kB/s to a few MB/s of driver traffic.
inline constexpr double kPcieQuietBytesPerS = 50e6;
// PCIe counts as busy from 2 GB/s (transmit + receive): a sixth of what a PCIe 3.0 x16 link carries in practice
// (~12 GB/s), a tenth of 4.0 x16, well above what a loader feeding a compute-bound model moves.
inline constexpr double kPcieBusyBytesPerS = 2e9;
// A waste is reported when it covers at least this share of the GPU's sampled time: less is noise or a warm-up.
inline constexpr double kMinShare = 0.10;
// Memory headroom: the peak use stayed below this share of the GPU's memory, so a batch at least twice as large fits.
inline constexpr double kHeadroomPeakPct = 50;
// Throttling is reported from 5 % of the sampled time: a run that spends that long below its clocks for heat or an
// external power brake has a placement or cooling problem, not a blip.
inline constexpr double kThrottleMinShare = 0.05;
// NVML clock-event reason bits that mean throttling from outside the run's own configuration: HW slowdown (0x8),
// SW thermal (0x20), HW thermal (0x40), HW power brake (0x80). The SW power cap bit (0x4) is the GPU working at its
// configured limit; whether that limit is right is the power-limit item's question, so it is not counted here.
inline constexpr int64_t kThrottleThermalMask = 0x20 | 0x40;
inline constexpr int64_t kThrottlePowerMask = 0x8 | 0x80;
inline constexpr int64_t kSwPowerCapBit = 0x4;
// Power limit: considered only for a GPU that spent at least kPowerBoundMinShare of its busy time at or above
// kPowerBoundPct of its limit (or with the SW power cap bit). There the clock is set by the power controller, high on
// the voltage/frequency curve, where the last watts buy the least speed (the Zeus observation); a GPU drawing well
// below its limit is not power-bound and a cap would only slow it.
inline constexpr double kPowerBoundPct = 90;
inline constexpr double kPowerBoundMinShare = 0.20;
// The cap model: time ∝ 1/clock (compute-bound work; memory-bound work slows less, so the time cost is an upper
// bound) and dynamic power ∝ clock³ (dynamic power ∝ V²f with V roughly ∝ f in the DVFS range).
inline constexpr double kPowerClockExponent = 3;
// The largest slowdown of the whole run a suggested cap may cost, and the smallest saving worth suggesting one for.
inline constexpr double kMaxSlowdownPct = 5;
inline constexpr double kMinCapSavingPct = 2;
// Caps are tried in steps of 1 % of the limit, down to half of it (NVML's minimum limit is typically 30-60 % of the
// default; below half the model's cube law is no longer credible).
inline constexpr double kCapStepShare = 0.01;
inline constexpr double kMinCapShare = 0.50;
// When a GPU was never idle and its power does not spread with utilisation, its idle power is taken as this share of
// its power limit: data-centre GPUs idle at 10-20 % of their limit (H100 ~70 of 700 W, A100 ~55 of 400 W).
inline constexpr double kFallbackIdlePowerShare = 0.15;
// Severity by the saving's share of the run's energy.
inline constexpr double kHighSavingPct = 10;
inline constexpr double kMediumSavingPct = 3;
// A gap between two samples longer than this many median intervals (a GPU lost, a stalled source) is not an
// interval: nothing is known about what happened in it.
inline constexpr double kMaxGapIntervals = 5;

// Stragglers (issue 36): a GPU of a multi-GPU run that ran slower than its siblings. Each sample is compared with the
// median of its siblings' at the same tick (the median, so that one odd sibling among several moves nothing), by the
// test the live `straggler` event runs too (forecast/anomaly.hpp, where the gaps are explained).
inline constexpr double kStragglerClockGapPct = forecast::kStragglerClockGapPct;
inline constexpr double kStragglerUtilGapPts = forecast::kStragglerUtilGapPts;
inline constexpr double kStragglerPowerGapPct = forecast::kStragglerPowerGapPct;
// A GPU is a straggler when its stretches of kStragglerMinSamples consecutive samples apart cover kMinShare of its
// sampled time.
inline constexpr int kStragglerMinSamples = forecast::kStragglerMinSamples;
static_assert(kIdleUtilPct == forecast::kStragglerIdleUtilPct && kLowUtilPct == forecast::kStragglerBusyUtilPct,
              "the straggler test's idle and busy levels are the advice items'");

// Out-of-memory forecast (issue 36): a GPU whose memory use grows steadily, extrapolated to its memory's size. The
// line is fitted over the last half of the GPU's sampled time (after the warm-up's allocations: recent behaviour) by
// Theil–Sen (the median of pairwise slopes: a step or an outlier moves it little), on at most kOomMaxFitPoints
// evenly spread samples (so its pairs stay bounded: 256 points, 32,640 pairs).
inline constexpr int kOomMaxFitPoints = 256;
inline constexpr int kOomMinSamples = 10;
// Steady: Kendall's τ over the same pairs at least 0.6. One step up and a plateau reads 0.5 (and a Theil–Sen slope of
// 0): a batch size or a cache that grew once is no leak; a leak per epoch is a staircase of many steps, τ near 1.
inline constexpr double kOomMinTau = 0.6;
// The fitted growth over the window must be at least 2 % of the memory (1.6 GB of 80 GB): less is allocator churn.
inline constexpr double kOomMinGrowthShare = 0.02;
// Reported when the line reaches the memory's size within 24 h of the last sample, and within 4 times the window it
// was fitted on: a line fitted over ten minutes says little about the next five hours.
inline constexpr double kOomHorizonS = 24 * 3600;
inline constexpr double kOomMaxExtrapolation = 4;

// ---- Inputs ----
struct GpuPoint {
  int64_t ts_ms = 0;
  OptF power_w;
  OptF energy_j; // counter since run start; missing: integrate power
  OptF util_pct;
  OptI mem_used_bytes;
  OptI pcie_tx_bytes_per_s;
  OptI pcie_rx_bytes_per_s;
  OptI throttle_reasons;
  OptI clock_sm_mhz;
  OptF temp_c;
  OptF power_limit_w;
  uint32_t samples = 1; // the stored samples this point stands for (Input::step_ms)
};
struct GpuSeries {
  int gpu_index = 0;
  std::string name;
  OptI mem_total_bytes;
  OptF power_limit_w;
  OptI clock_sm_max_mhz;
  std::vector<GpuPoint> points; // time order
};
struct CpuPoint {
  int64_t ts_ms = 0;
  OptF util_pct;
  OptF energy_j; // package + DRAM since run start, when measured
  uint32_t samples = 1;
};
struct Input {
  std::vector<GpuSeries> gpus;
  std::vector<CpuPoint> cpu; // time order
  // Adaptive sampling (--idle-interval): samples of idle stretches are this far apart by design. Such a step is an
  // interval like any other, however far it is from the median step (issue 33: an idle run sampled every 2 s was
  // "idle for 1.0 s" of 8). 0: none.
  double idle_interval_ms = 0;
  // A long stored run is read at a coarser step so that reading it takes the same memory whatever its length
  // (InputBuilder::kMaxPoints): each point is then the mean of a step's samples (its maximum for memory and
  // temperature, every throttle reason seen), ending at its last sample. 0: every sample as stored.
  int64_t step_ms = 0;
};

// ---- Output ----
struct Item {
  std::string kind;     // gpu_starved, transfer_bound, memory_headroom, throttling, idle_gpu, power_limit, straggler,
                        // oom_forecast
  std::string severity; // high, medium, low
  nlohmann::json evidence;
  OptF saving_j; // missing: not estimated (the text says why)
  OptF saving_pct;
  std::string text;
};

// Every item the input shows, largest saving first (items without an estimate last).
std::vector<Item> advise(const Input& in);

// `advice[]` of show --json and /api/v1/advice: kind, severity, evidence, saving_j, saving_pct, text.
nlohmann::json to_json(const std::vector<Item>& items);
// The run summary's lines (the first `max_items`); "" when there is no advice.
std::string to_text(const std::vector<Item>& items, size_t max_items, bool with_evidence);

// ---- The estimators, exposed for their unit tests ----

// One interval between two consecutive samples of a GPU: the values are those of the later sample (NVML utilisation
// and PCIe throughput cover the time before the read).
struct Interval {
  int64_t from_ms = 0, to_ms = 0;
  double dt_s = 0;
  OptF energy_j; // counter difference, or trapezoid of power when there is no counter
  OptF power_w;  // energy_j / dt_s when known, else the sample's power
  OptF util_pct;
  OptF cpu_util_pct;
  OptF pcie_bytes_per_s; // transmit + receive
  OptI throttle_reasons;
  OptI clock_sm_mhz;
  OptI mem_used_bytes;
  OptF temp_c;
  OptF power_limit_w;
};
// A step longer than kMaxGapIntervals times the median step, or times `idle_interval_ms` (adaptive sampling), is a
// gap, not an interval.
std::vector<Interval> intervals(const GpuSeries& g, const std::vector<CpuPoint>& cpu, double idle_interval_ms = 0);

struct IdlePower {
  double watts = 0;
  std::string basis; // "idle samples", "power/utilisation fit", "15 % of the power limit"
};
// The GPU's idle power from its own intervals: the median power of its idle ones; else the intercept of a
// least-squares fit of power on utilisation (when utilisation spans at least 20 points); else the fallback share of
// its power limit. Missing when none of them can be had.
std::optional<IdlePower> estimate_idle_power(const std::vector<Interval>& iv, OptF power_limit_w);

// Energy of the same work at `cap_w`, per the cap model (kPowerClockExponent): an interval drawing P > cap runs at
// clock ratio r = ((cap - idle) / (P - idle))^(1/3), lasting dt / r and drawing cap.
struct CapOutcome {
  double cap_w = 0;
  double energy_j = 0;   // modelled, over the GPU's intervals
  double baseline_j = 0; // Σ P·dt over the same intervals
  double time_s = 0, baseline_s = 0;
  double slowdown_pct() const { return baseline_s > 0 ? 100 * (time_s - baseline_s) / baseline_s : 0; }
  double saving_j() const { return baseline_j - energy_j; }
};
CapOutcome cap_outcome(const std::vector<Interval>& iv, double idle_w, double cap_w);
// The cap (in kCapStepShare steps of the limit, down to kMinCapShare of it) with the least energy whose slowdown is at
// most kMaxSlowdownPct; missing when no cap below the limit saves energy.
std::optional<CapOutcome> best_cap(const std::vector<Interval>& iv, double idle_w, double limit_w);

} // namespace wattscope::advice
