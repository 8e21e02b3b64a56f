// Alert rules and notifier settings (issue 14): the model, the built-in defaults, and the TOML file that adds to or
// replaces them (docs/alerts.md). A rule names a metric from the metric registry (core/metrics.hpp) by its column
// name, so a rule can only watch what wattscope measures, under the one spelling every exporter uses.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace wattscope {

// What a rule watches: each GPU, the host CPU, each RAPL zone, or each process unit (Slurm job, pod, container,
// service). GPU, CPU and zone metrics come from the registry; a unit's from UnitSample (kUnitMetrics).
enum class AlertScope { Gpu, Cpu, Zone, Unit };
// `bits`: (value & threshold) != 0, for a bit mask such as the clock-event (throttle) reasons.
enum class AlertOp { Gt, Ge, Lt, Le, Bits };
// Threshold: a metric against a threshold. DeviceLost: a GPU's device-lost event (fires at once, never resolves:
// NVML does not give a lost GPU back within a run).
// Anomaly (issue 36, `anomaly = true`): the GPU's metric is anomalous against its own recent behaviour
// (forecast/anomaly_monitor.hpp marks it on the frame); compared as 1 (flagged) > 0.5, so `for` and repeats hold.
enum class AlertKind { Threshold, DeviceLost, Anomaly };

struct AlertRule {
  std::string name; // letters, digits, '_', '-', '.'; the Prometheus `rule` label and Alertmanager's alertname
  AlertKind kind = AlertKind::Threshold;
  AlertScope scope = AlertScope::Gpu;
  std::string metric;      // registry column, e.g. "temp_gpu_c"
  size_t metric_index = 0; // into kGpuMetrics / kCpuMetrics / kZoneMetrics / kUnitMetrics, settled by validation
  AlertOp op = AlertOp::Gt;
  double threshold = 0; // in the metric's unit, or a percentage of `relative_to`
  // A property of the same device (a metric of the same scope, e.g. power_limit_w, mem_total_bytes): the threshold
  // and clear level are then percentages of its latest value.
  std::string relative_to;
  size_t relative_index = 0;
  // Hysteresis: a firing (or pending) alert resolves only once the value is back past this level (below it for > and
  // >=, above it for < and <=). Missing: the threshold itself.
  std::optional<double> clear;
  std::chrono::milliseconds for_ms{0}; // how long the condition must hold before it fires
  // issue 36: `forecast = "15m"`: the rule compares the metric's value projected this far ahead along its robust
  // trend (core/trend.hpp), so it fires when the forecast crosses the threshold within the horizon; 0: the value.
  // Only for the metrics wattscope forecasts (kForecastAlertMetrics).
  std::chrono::milliseconds forecast{0};
  std::chrono::milliseconds repeat_every{3'600'000}; // at most one firing notification per scope in this time
  std::string severity = "warning";                  // info | warning | critical
  std::string message;                               // template: {rule} {scope} {value} {threshold} {unit}
  bool allocated_only = false; // GPU scope: only GPUs allocated (the run's GPUs; elsewhere, one a process holds)
  std::string zone;            // Zone scope: only zones of this name (package, dram, ...); "" every zone
  bool builtin = false;
  int line = 0; // in the rules file; 0 for a built-in
};

// Where notifications go. Every notifier is optional; each runs on its own thread (alerts/notifiers.hpp).
struct NotifierConfig {
  enum class Kind { Webhook, Email, Alertmanager };
  Kind kind = Kind::Webhook;
  std::string name; // "webhook[0]", ... for events and messages
  std::string url;  // http(s)://... ; smtp(s)://host:port for e-mail; Alertmanager's base URL
  std::chrono::milliseconds timeout{5000};
  int retries = 3;                         // after the first attempt
  std::chrono::milliseconds backoff{1000}; // doubled after each failed attempt
  // E-mail.
  std::string from;
  std::vector<std::string> to;
  std::string starttls = "required"; // required | opportunistic | off (smtps:// is TLS from the start)
  std::string username_env;          // names of environment variables holding the credentials ...
  std::string password_env;
  std::string credentials_file; // ... or a file "user\npassword\n" (owner-only permissions), never the command line
  std::string ca_file;          // extra CA bundle for TLS
  // Webhook: extra headers, e.g. "Authorization: Bearer ..." read from a file.
  std::string header_file;
  // issue 32, Alertmanager: every firing alert is sent again this often, with endsAt kLapseResends periods ahead, as
  // Prometheus does, whatever a rule's repeat_every (which is for people).
  std::chrono::milliseconds resend_every{60000};
};

struct AlertConfig {
  std::vector<AlertRule> rules;
  std::vector<NotifierConfig> notifiers;
  std::string source; // the file it came from, "" for the built-in defaults only
};

// An error in a rules file, with the line it is on (0 when it is about the file as a whole).
struct AlertConfigError : std::runtime_error {
  AlertConfigError(const std::string& file, int line, const std::string& what);
  std::string file;
  int line;
};

// Bounds on a rules file (issue 31), checked before and while it is parsed, each with an error that names it. A
// notifier is a thread and a rule is evaluated on every frame for every device: both are counted. Nesting: tables and
// keys (a.b.c = 1 is three levels); a rules file needs 3.
inline constexpr size_t kMaxAlertFileBytes = 1 << 20;
inline constexpr size_t kMaxAlertNesting = 32;
inline constexpr size_t kMaxAlertRules = 256;
inline constexpr size_t kMaxNotifiers = 16;
// op = "bits": a mask of at most 53 bits, the most a threshold (a double) holds exactly.
inline constexpr int64_t kMaxAlertBitMask = (int64_t{1} << 53) - 1;

// issue 36: the GPU metrics a `forecast` rule may watch (memory runs out, temperature reaches the throttle point,
// utilisation), and the horizon's bounds.
inline constexpr std::string_view kForecastAlertMetrics[] = {"mem_used_bytes", "temp_gpu_c", "temp_mem_c",
                                                             "util_gpu_pct"};
inline constexpr std::chrono::milliseconds kMinForecastHorizon{1000};
inline constexpr std::chrono::milliseconds kMaxForecastHorizon{24 * 3600 * 1000};

// The built-in rules (issue 14): GPU utilisation > 90 %, memory > 80 %, temperature > 85 °C, power > 95 % of the
// limit, thermal and power throttling, a GPU lost, a GPU allocated but idle for 10 minutes.
std::vector<AlertRule> builtin_alert_rules();

// Parses a rules file: its [[rule]] tables are added to the built-in rules (one with a built-in's name replaces it;
// `enabled = false` removes it; `builtin_rules = false` at the top drops them all). Throws AlertConfigError naming
// the line of the first error.
AlertConfig parse_alert_config(std::string_view toml_text, const std::string& file_name);
AlertConfig load_alert_config(const std::string& path);

// The rules file used when none is given: $XDG_CONFIG_HOME/wattscope/alerts.toml (else
// $HOME/.config/wattscope/alerts.toml), then /etc/wattscope/alerts.toml. "" when none exists.
std::string default_alert_config_path();

// The metric names a scope offers, and the index of one ("did you mean" in the error when it is unknown).
std::vector<std::string_view> alert_metric_names(AlertScope scope);
std::optional<size_t> alert_metric_index(AlertScope scope, std::string_view name);
std::string_view alert_metric_unit(AlertScope scope, size_t index);

std::string_view to_string(AlertScope s);
std::string_view to_string(AlertOp op);
// One line per rule, for `wattscope alerts list`.
std::string describe_rule(const AlertRule& r);

} // namespace wattscope
