// The alert state machines (issue 14): one per rule and scope (a GPU, the CPU, a RAPL zone, a unit), stepped by each
// frame. Inactive → pending (the condition holds) → firing (it held for `for`) → resolved (the value went back past
// the clear level). The cost of a frame is a few comparisons per rule and scope: no history is kept or read, except
// by a `forecast` rule (issue 36), which keeps at most kForecastPoints readings per scope for its trend.
//
// Single-threaded: the alert engine (alerts/engine.hpp) calls it from its own thread, never the sampler's.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "alerts/rules.hpp"
#include "core/frame.hpp"
#include "core/trend.hpp"

namespace wattscope {

enum class AlertState : uint8_t { Inactive, Pending, Firing };
// What a transition (or a repeat notification) is called in events and notifications.
enum class AlertChange : uint8_t { Pending, Cancelled, Firing, Resolved, Repeat };
std::string_view to_string(AlertChange c);

struct AlertTransition {
  size_t rule = 0;   // index into the evaluator's rules
  std::string scope; // gpu0, cpu, intel-rapl:0, "slurm job 42"
  AlertChange change = AlertChange::Pending;
  std::optional<double> value; // as compared: a percentage of the reference for a relative rule
  double threshold = 0;        // as compared
  std::optional<double> raw;   // the metric's own value, in its unit
  int64_t ts_ms = 0;           // the frame's wall-clock time
  int64_t since_ms = 0;        // when the condition started (pending) or the alert fired
  bool notify = false;         // goes to the notifiers (firing, resolved, repeat; not pending or cancelled)
};

// A firing alert, as serve's /api/v1/alerts, the dashboard banner, /metrics and `top` show it.
struct FiringAlert {
  std::string rule;
  std::string severity;
  std::string scope;
  std::string message;
  std::optional<double> value;
  double threshold = 0;
  int64_t since_ms = 0; // wall clock, when it fired
};

class AlertEvaluator {
public:
  explicit AlertEvaluator(std::vector<AlertRule> rules);
  // `run_mode`: the session wraps a command, so every GPU it records is the run's (allocated_only rules).
  void set_run_mode(bool run_mode) { run_mode_ = run_mode; }
  // Steps every state machine with one frame; appends what changed to `out` (cleared first).
  void evaluate(const Frame& f, std::vector<AlertTransition>& out);
  const std::vector<AlertRule>& rules() const { return rules_; }
  // The message of a transition, its template filled in; a resolution's says what holds now (issue 32).
  std::string message(const AlertTransition& t) const;
  static std::string resolved_message(const AlertRule& r, const AlertTransition& t);
  std::vector<FiringAlert> firing() const;

private:
  struct Slot {
    AlertState state = AlertState::Inactive;
    int64_t since_mono_ms = 0;  // condition start (pending) or firing start, on the monotonic clock
    int64_t since_ts_ms = 0;    // the same instant, wall clock
    int64_t last_notify_ms = 0; // monotonic, of the latest firing (or repeat) notification
    bool ever_notified = false;
    bool notified = false;     // this firing episode was notified (so its resolution is too)
    std::optional<double> ref; // the latest value of relative_to (a limit that is not read every tick)
    std::optional<double> last_value;
    double last_threshold = 0;
    std::deque<TrendPoint> trend; // issue 36: a forecast rule's recent values (monotonic ms), thinned
  };
  // issue 36: a forecast rule's trend rests on this many readings at most, at least kForecastMinPoints of them over
  // kForecastMinSpanMs; with fewer, the rule compares the value itself.
  static constexpr size_t kForecastPoints = 128;
  static constexpr size_t kForecastMinPoints = 8;
  static constexpr int64_t kForecastMinSpanMs = 30'000;
  static std::optional<double> projected(const AlertRule& r, Slot& s, double value, int64_t now_ms);
  void step(size_t ri, Slot& s, std::optional<double> raw, std::optional<double> ref, const std::string& scope,
            const Frame& f, int64_t now_ms, std::vector<AlertTransition>& out);
  Slot& gpu_slot(size_t rule, int gpu_index);

  std::vector<AlertRule> rules_;
  bool run_mode_ = false;
  std::vector<std::vector<Slot>> gpu_;                       // [rule][gpu_index]
  std::vector<Slot> cpu_;                                    // [rule]
  std::vector<std::unordered_map<std::string, Slot>> named_; // [rule][zone domain or unit]
  std::vector<std::string> gpu_names_;                       // "gpu<i>", made once per index
  std::vector<char> allocated_;                              // [gpu_index], from the latest process scan
};

// A unit's figure for a unit-scope rule (rules.cpp holds the table of them).
std::optional<double> alert_unit_value(const UnitSample& u, size_t index);

} // namespace wattscope
