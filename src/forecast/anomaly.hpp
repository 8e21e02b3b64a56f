#pragma once
// Anomalies of one device's metric against its own recent behaviour (issue 36). Pure arithmetic over a series, one
// value per tick: the live wiring (forecast/anomaly_monitor) feeds it frames and turns its changes into events.
//
// The test: the value's robust distance from the median of its recent normal values, z = (x - median) / scale, scale
// = 1.4826 MAD (the standard deviation of Gaussian noise), floored so a constant series does not turn every wiggle
// into an alarm. Values inside a candidate or an anomaly never enter the baseline (robust: an episode does not teach
// the detector that it is normal). Hysteresis: counting starts past k_on, an episode ends only once back under k_off;
// minimum duration: min_ticks past k_on before it is an anomaly (one late sample or a boost step is not).
// Phases: a level change within boundary_grace ticks of a phase boundary is the phase's, not an anomaly; the baseline
// restarts there. Seasonal: every kPeriodEvery ticks the period of the recent history is sought by autocorrelation;
// when one is found, a value close to the one a period back (± 1 tick) is usual at this point of the cycle (an
// evaluation every epoch, a data loader that stalls at the same step), whatever its distance from the median.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wattscope::forecast {

enum class AnomalyKind : uint8_t { Stall, LevelChange, TempRamp };
std::string_view to_string(AnomalyKind k); // "stall", "level_change", "temperature_ramp"

// Level: the value itself is judged, both ways. Rise: its rise over rate_lag ticks is judged, upward only
// (temperature rising faster than its history).
enum class SeriesShape : uint8_t { Level, Rise };

struct AnomalyConfig {
  SeriesShape shape = SeriesShape::Level;
  size_t window = 64;      // normal values the baseline is the median of
  size_t min_history = 12; // normal values since the baseline (re)started before anything is judged
  double k_on = 6;
  double k_off = 3;
  int min_ticks = 6; // consecutive ticks past k_on (ticks between k_off and k_on neither count nor break it)
  int end_ticks = 4; // consecutive ticks under k_off to end an episode
  int boundary_grace = 3;
  double rel_floor = 0.03; // scale >= this share of |median|
  double abs_floor = 1;    // and >= this, in the metric's unit
  int rate_lag = 4;        // Rise
  // Rise: the value must also stand this far above the median of its last `window` values. A GPU coming back from a
  // stall heats up as fast as one whose fan stopped, but only back to where it was.
  double level_margin = 0;
  // An episode lasting this many ticks is the series' new level: it ends, and the baseline restarts from it.
  int adopt_ticks = 240;
  // Stall (Level): a drop while the baseline is at least busy_floor, to at most idle_share of it. 0: never a stall.
  double busy_floor = 0;
  double idle_share = 0.35;
  // Seasonal.
  size_t history = 384;  // raw values kept for the period search
  size_t min_period = 8; // ticks
  double min_acf = 0.6;  // the autocorrelation at the period
  bool seasonal = true;
};

// Presets per registry column (power_w, util_gpu_pct, clock_sm_mhz, temp_gpu_c ...); any other column gets a Level
// detector with a relative floor only. `min_ticks` scales the minimum duration (the caller's ticks per episode).
AnomalyConfig anomaly_config_for(std::string_view metric);

struct AnomalyChange {
  bool onset = true; // false: the episode ended
  AnomalyKind kind = AnomalyKind::LevelChange;
  int64_t onset_ms = 0; // first tick of the episode
  int64_t ts_ms = 0;    // the tick that confirmed (or ended) it
  double value = 0;     // median of the episode's values (Rise: of its rises over rate_lag ticks)
  double expected = 0;  // the baseline's median
  double scale = 0;
  double z = 0;                 // of the median value
  int ticks = 0;                // the episode's length in ticks
  std::optional<size_t> period; // ticks, when the series was found periodic
  bool adopted = false;         // ended because it lasted adopt_ticks: the new level
  bool at_boundary = false;     // ended by a phase boundary
};

class AnomalyDetector {
public:
  explicit AnomalyDetector(AnomalyConfig c);
  // One tick. NaN (missing) is skipped: it neither counts nor breaks an episode. `boundary`: a phase began or ended
  // since the previous tick.
  std::optional<AnomalyChange> observe(int64_t ts_ms, double y, bool boundary);
  bool active() const { return state_ == State::Active; }
  // The episode just confirmed is the workload's own (every GPU of the job changed together, as at an unmarked
  // evaluation pass): the baseline restarts from it, as at a phase boundary, and its end is never said.
  void excuse();
  std::optional<size_t> period() const { return period_; }
  const AnomalyConfig& config() const { return c_; }
  static constexpr int kPeriodEvery = 32;

private:
  enum class State : uint8_t { Normal, Candidate, Active };
  void rebaseline(const std::vector<double>& seed);
  void find_period();
  bool seasonal_excuse(double x, double scale) const;
  std::optional<AnomalyChange> end(int64_t ts_ms, bool adopted, bool at_boundary);
  double median_of(std::vector<double>& v) const;

  AnomalyConfig c_;
  std::deque<double> base_;   // normal values (Level: values; Rise: rises)
  std::deque<double> raw_;    // history for the period search and the seasonal comparison
  std::deque<double> recent_; // Rise: the last rate_lag + 1 raw values
  std::deque<double> levels_; // Rise with level_margin: the last `window` raw values
  std::optional<size_t> period_;
  int64_t ticks_ = 0;
  int since_boundary_ = 1 << 30;
  State state_ = State::Normal;
  int sign_ = 0;
  int count_ = 0; // ticks past k_on (candidate), under k_off (active)
  int64_t onset_ms_ = 0;
  int onset_since_boundary_ = 0;
  std::vector<double> episode_; // values of the current candidate / episode (for its median), bounded by adopt_ticks
  AnomalyKind kind_ = AnomalyKind::LevelChange;
  double expected_ = 0, scale_ = 0;
  mutable std::vector<double> scratch_;
};

// Straggler test for one GPU at one tick (issue 36, shared by the advice item and the live event): its SM clock, its
// utilisation and its power against the median of its siblings' at the same tick. Siblings are GPUs that worked.
// SM clock: identical GPUs under the same load boost within a few % of each other (15 MHz bins, silicon and cooling
// spread); 10 % below the siblings' median (~200 MHz on an H100) is a throttle or a power cap, not that spread.
inline constexpr double kStragglerClockGapPct = 10;
// Utilisation, in points below the siblings' median (when that median is at least kStragglerBusyUtilPct, i.e. they
// were working): a fed GPU's NVML utilisation wanders by 2-5 points; 20 points is a GPU idle a fifth of the time its
// siblings computed. In a job that synchronises its GPUs (NCCL), the ones waiting for a straggler read busy (NCCL's
// kernel spins), so the one with less utilisation is the one that held them back, not one that waited.
inline constexpr double kStragglerUtilGapPts = 20;
// Power, below the siblings' median while working as much: identical GPUs at the same work draw within ~10 % of each
// other; 20 % less at no less utilisation is a GPU held down (a power cap or a brake).
inline constexpr double kStragglerPowerGapPct = 20;
// A stretch counts from this many consecutive samples apart (one or two are a blip: a late sample, a boost step).
inline constexpr int kStragglerMinSamples = 3;
// A GPU at or under this utilisation does nothing; siblings under kStragglerBusyUtilPct are between steps.
inline constexpr double kStragglerIdleUtilPct = 5;
inline constexpr double kStragglerBusyUtilPct = 60;

struct StragglerTick {
  std::optional<double> clock_mhz, util_pct, power_w;
};
struct StragglerMark {
  bool clock = false, util = false, power = false;
  std::optional<double> sib_clock, sib_util, sib_power; // the siblings' medians
  bool apart() const { return clock || util || power; }
};
// The signal a straggler's stretch is named by, cause first: a lower SM clock makes a GPU both work and draw less, and
// a lower utilisation makes it draw less, so power apart is a symptom of either. The first of clock, utilisation and
// power apart for at least half the stretch (`clock`, `util`, `power`: the time or ticks each was apart, of `total`)
// names it; where none is (the signals take turns), the one apart longest. Cause first, not longest first, because a
// stretch's edge intervals are apart by power alone: one that straddles a cap's end averages the capped watts into its
// power while its clock, read at its end, is back up; a late tick makes that edge longer than the clock's.
enum class StragglerSignal { clock, util, power };
StragglerSignal straggler_signal(double clock, double util, double power, double total);
// NVML clock-event reasons that hold a GPU behind its siblings, in words: "SW power cap, HW thermal slowdown".
std::string straggler_reason_names(int64_t bits);
// `siblings` excludes the GPU itself.
StragglerMark straggler_mark(const StragglerTick& mine, const std::vector<StragglerTick>& siblings);
// The same, with the siblings' medians already taken (the advice item matches siblings' ticks its own way).
StragglerMark straggler_mark(const StragglerTick& mine, std::optional<double> sib_clock, std::optional<double> sib_util,
                             std::optional<double> sib_power);

} // namespace wattscope::forecast
