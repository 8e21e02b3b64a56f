#include "alerts/rules.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "alerts/evaluator.hpp"
#include "core/duration.hpp"
#include "core/metrics.hpp"
#include "core/protected_file.hpp"

namespace wattscope {

namespace {

// A unit's figures (UnitSample) are not in the metric registry: they are accounting's attribution, not a
// measurement. These are the ones a rule may watch.
struct UnitMetric {
  std::string_view name;
  std::string_view unit;
  double (*get)(const UnitSample&);
};
constexpr UnitMetric kUnitMetrics[] = {
    {"power_w", "W", [](const UnitSample& u) { return u.cpu_power_w + u.gpu_power_w; }},
    {"cpu_power_w", "W", [](const UnitSample& u) { return u.cpu_power_w; }},
    {"gpu_power_w", "W", [](const UnitSample& u) { return u.gpu_power_w; }},
    {"energy_j", "J", [](const UnitSample& u) { return u.cpu_energy_j + u.gpu_energy_j; }},
    {"cpu_energy_j", "J", [](const UnitSample& u) { return u.cpu_energy_j; }},
    {"gpu_energy_j", "J", [](const UnitSample& u) { return u.gpu_energy_j; }},
};

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& names) {
  std::string_view best;
  size_t best_d = SIZE_MAX;
  for (auto n : names) {
    size_t common = 0;
    while (common < word.size() && common < n.size() && word[common] == n[common])
      ++common;
    // A name that contains the word (or the reverse), or starts the same way ("temperature", "temp_gpu_c"), is a
    // better guess than one a few edits away.
    const size_t d = (n.find(word) != std::string_view::npos || word.find(n) != std::string_view::npos) ? 1
                     : common >= 4                                                                      ? 2
                                   : edit_distance(word, n);
    if (d < best_d) best_d = d, best = n;
  }
  if (best.empty() || best_d > std::max<size_t>(3, word.size() / 2)) return {};
  return fmt::format("; did you mean '{}'?", best);
}

std::string joined(const std::vector<std::string_view>& names) {
  std::string out;
  for (auto n : names)
    out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

bool valid_rule_name(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

AlertRule threshold_rule(std::string name, std::string metric, AlertOp op, double threshold, std::string relative_to,
                         std::optional<double> clear, int for_s, std::string severity, std::string message) {
  AlertRule r;
  r.name = std::move(name);
  r.metric = std::move(metric);
  r.op = op;
  r.threshold = threshold;
  r.relative_to = std::move(relative_to);
  r.clear = clear;
  r.for_ms = std::chrono::milliseconds(for_s * 1000LL);
  r.severity = std::move(severity);
  r.message = std::move(message);
  r.builtin = true;
  r.metric_index = *alert_metric_index(r.scope, r.metric);
  if (!r.relative_to.empty()) r.relative_index = *alert_metric_index(r.scope, r.relative_to);
  return r;
}

// NVML clock-event reason bits (nvml.h): SW power cap 0x4, HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40,
// HW power brake 0x80.
constexpr int64_t kThermalReasons = 0x8 | 0x20 | 0x40;
constexpr int64_t kPowerReasons = 0x4 | 0x80;

// toml++ builds a dotted key's tables (a.b.c = 1) and walks and destroys the document recursively, with no limit of
// its own on a dotted key's length: 40,000 levels overflowed the stack. So the nesting is measured first, cheaply
// and a little generously (a dot in a number counts too): each [ or { opens a level on top of the keys' levels
// around it, each dot outside strings and comments adds one. Strings are skipped as TOML writes them; text that is
// not valid TOML is left to toml++'s own error.
void check_toml_nesting(std::string_view text, const std::string& file) {
  std::vector<size_t> levels; // the level each open [ or { stands at
  size_t dots = 0;            // dots of the key (or number) being read, since the last [ { , or line end
  int line = 1;
  auto too_deep = [&] {
    throw AlertConfigError(file, line,
                           fmt::format("keys and tables nested deeper than {} levels (a rules file needs 3); "
                                       "refused before parsing",
                                       kMaxAlertNesting));
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const size_t base = levels.empty() ? 0 : levels.back();
    if (c == '\n') {
      ++line, dots = 0;
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n')
        ++i;
    } else if (c == '"' || c == '\'') {
      const bool multi = text.substr(i, 3) == std::string_view(c == '"' ? "\"\"\"" : "\'\'\'");
      const std::string_view close = multi ? text.substr(i, 3) : text.substr(i, 1);
      i += close.size();
      // To the closing quote(s); a basic string's backslash escapes the next character; a one-line string ends at
      // the line's end at the latest.
      while (i < text.size() && text.substr(i, close.size()) != close) {
        if (text[i] == '\n') {
          if (!multi) break;
          ++line;
        }
        if (text[i] == '\\' && c == '"' && i + 1 < text.size()) {
          if (text[i + 1] == '\n') ++line;
          ++i;
        }
        ++i;
      }
      if (i < text.size() && text[i] == '\n') {
        --i; // the line end is counted above
      } else {
        i += close.size() - 1;
      }
    } else if (c == '[' || c == '{') {
      if (base + dots + 1 > kMaxAlertNesting) too_deep();
      levels.push_back(base + dots + 1);
      dots = 0;
    } else if (c == ']' || c == '}') {
      if (!levels.empty()) levels.pop_back();
      dots = 0;
    } else if (c == ',') {
      dots = 0;
    } else if (c == '.') {
      if (base + ++dots > kMaxAlertNesting) too_deep();
    }
  }
}

} // namespace

AlertConfigError::AlertConfigError(const std::string& f, int l, const std::string& what)
    : std::runtime_error(l > 0 ? fmt::format("{}:{}: {}", f, l, what) : fmt::format("{}: {}", f, what)), file(f),
      line(l) {}

std::vector<std::string_view> alert_metric_names(AlertScope scope) {
  std::vector<std::string_view> out;
  switch (scope) {
  case AlertScope::Gpu:
    for (const auto& m : kGpuMetrics)
      out.push_back(m.info.column);
    break;
  case AlertScope::Cpu:
    for (const auto& m : kCpuMetrics)
      out.push_back(m.info.column);
    break;
  case AlertScope::Zone:
    for (const auto& m : kZoneMetrics)
      out.push_back(m.info.column);
    break;
  case AlertScope::Unit:
    for (const auto& m : kUnitMetrics)
      out.push_back(m.name);
    break;
  }
  return out;
}

std::optional<size_t> alert_metric_index(AlertScope scope, std::string_view name) {
  const auto names = alert_metric_names(scope);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return i;
  return std::nullopt;
}

std::string_view alert_metric_unit(AlertScope scope, size_t i) {
  switch (scope) {
  case AlertScope::Gpu:
    return kGpuMetrics[i].info.unit;
  case AlertScope::Cpu:
    return kCpuMetrics[i].info.unit;
  case AlertScope::Zone:
    return kZoneMetrics[i].info.unit;
  case AlertScope::Unit:
    return kUnitMetrics[i].unit;
  }
  return {};
}

std::optional<double> alert_unit_value(const UnitSample& u, size_t index) {
  return kUnitMetrics[index].get(u);
}

std::string_view to_string(AlertScope s) {
  switch (s) {
  case AlertScope::Gpu:
    return "gpu";
  case AlertScope::Cpu:
    return "cpu";
  case AlertScope::Zone:
    return "zone";
  case AlertScope::Unit:
    return "unit";
  }
  return "?";
}

std::string_view to_string(AlertOp op) {
  switch (op) {
  case AlertOp::Gt:
    return ">";
  case AlertOp::Ge:
    return ">=";
  case AlertOp::Lt:
    return "<";
  case AlertOp::Le:
    return "<=";
  case AlertOp::Bits:
    return "bits";
  }
  return "?";
}

std::vector<AlertRule> builtin_alert_rules() {
  using O = AlertOp;
  std::vector<AlertRule> out;
  out.push_back(threshold_rule("gpu_utilization_high", "util_gpu_pct", O::Gt, 90, "", 85, 300, "info",
                               "{scope} utilisation {value} % above {threshold} %"));
  out.push_back(threshold_rule("gpu_memory_high", "mem_used_bytes", O::Gt, 80, "mem_total_bytes", 75, 60, "warning",
                               "{scope} memory {value} % of its total, above {threshold} %"));
  out.push_back(threshold_rule("gpu_temperature_high", "temp_gpu_c", O::Gt, 85, "", 80, 60, "critical",
                               "{scope} at {value} °C, above {threshold} °C"));
  out.push_back(threshold_rule("gpu_power_near_limit", "power_w", O::Gt, 95, "power_limit_w", 90, 300, "warning",
                               "{scope} draws {value} % of its power limit, above {threshold} %"));
  out.push_back(threshold_rule("gpu_thermal_throttling", "throttle_reasons", O::Bits, kThermalReasons, "", {}, 60,
                               "warning", "{scope} clocks held back by temperature (reasons {value})"));
  out.push_back(threshold_rule("gpu_power_throttling", "throttle_reasons", O::Bits, kPowerReasons, "", {}, 300, "info",
                               "{scope} clocks held back by its power limit (reasons {value})"));
  AlertRule lost;
  lost.name = "gpu_lost";
  lost.kind = AlertKind::DeviceLost;
  lost.severity = "critical";
  lost.message = "{scope} fell off the bus (NVML: GPU is lost)";
  lost.builtin = true;
  out.push_back(std::move(lost));
  AlertRule idle = threshold_rule("gpu_idle_allocated", "util_gpu_pct", O::Lt, 1, "", 5, 600, "warning",
                                  "{scope} allocated but idle ({value} % utilisation) for 10 minutes");
  idle.allocated_only = true;
  out.push_back(std::move(idle));
  return out;
}

namespace {

int line_of(const toml::node& n) {
  return static_cast<int>(n.source().begin.line);
}

// A rules file's values read as the types they must have; each error names the file and the line of the node at
// fault.
class RulesReader {
public:
  RulesReader(const toml::table& root, const std::string& file) : root_(root), file_(file) {}
  AlertConfigError fail(const toml::node& n, const std::string& what) const {
    return AlertConfigError(file_, line_of(n), what);
  }
  void get_string(const toml::table& t, std::string_view key, std::string& out) const {
    if (const toml::node* n = t.get(key)) {
      if (!n->is_string()) throw fail(*n, fmt::format("'{}' must be a string", key));
      out = n->as_string()->get();
    }
  }
  std::optional<double> get_number(const toml::table& t, std::string_view key) const {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    if (n->is_integer()) return static_cast<double>(n->as_integer()->get());
    if (n->is_floating_point()) return n->as_floating_point()->get();
    throw fail(*n, fmt::format("'{}' must be a number", key));
  }
  void get_duration(const toml::table& t, std::string_view key, bool zero_ok, std::chrono::milliseconds& out) const;
  // [[key]] tables (or one [key] table); none when the key is absent.
  std::vector<const toml::table*> tables(std::string_view key) const;
  const toml::table& root() const { return root_; }

private:
  const toml::table& root_;
  const std::string& file_;
};

void RulesReader::get_duration(const toml::table& t, std::string_view key, bool zero_ok,
                               std::chrono::milliseconds& out) const {
  const toml::node* n = t.get(key);
  if (!n) return;
  if (n->is_integer() && zero_ok && n->as_integer()->get() == 0) {
    out = std::chrono::milliseconds(0);
    return;
  }
  if (!n->is_string())
    throw fail(*n,
               fmt::format("'{}' must be a duration in quotes, e.g. \"30s\", \"5m\"{}", key, zero_ok ? " (or 0)" : ""));
  const std::string s = n->as_string()->get();
  if (zero_ok && (s == "0" || s == "0s")) {
    out = std::chrono::milliseconds(0);
    return;
  }
  try {
    out = std::chrono::duration_cast<std::chrono::milliseconds>(parse_duration(s));
  } catch (const std::invalid_argument& e) {
    throw fail(*n, fmt::format("'{}': {}", key, e.what()));
  }
}

std::vector<const toml::table*> RulesReader::tables(std::string_view key) const {
  std::vector<const toml::table*> out;
  const toml::node* n = root_.get(key);
  if (!n) return out;
  if (n->is_table()) {
    out.push_back(n->as_table());
    return out;
  }
  if (!n->is_array_of_tables())
    throw fail(*n, fmt::format("'{}' must be a table: write [[{}]] above each one", key, key));
  for (const auto& t : *n->as_array())
    out.push_back(t.as_table());
  return out;
}

toml::table parse_toml(std::string_view text, const std::string& file) {
  if (text.size() > kMaxAlertFileBytes)
    throw AlertConfigError(file, 0,
                           fmt::format("larger than {} MiB; a rules file is a few KiB", kMaxAlertFileBytes >> 20));
  check_toml_nesting(text, file);
  try {
    return toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    throw AlertConfigError(file, static_cast<int>(e.source().begin.line), std::string(e.description()));
  }
}

// The file's top-level keys; whether the built-in rules apply.
bool read_top_level(const RulesReader& rd) {
  bool builtins = true;
  for (auto&& [k, v] : rd.root()) {
    const std::string_view key = k.str();
    if (key == "builtin_rules") {
      if (!v.is_boolean()) throw rd.fail(v, "'builtin_rules' must be true or false");
      builtins = v.as_boolean()->get();
    } else if (key != "rule" && key != "webhook" && key != "email" && key != "alertmanager") {
      throw rd.fail(v, fmt::format("unknown key '{}'; a rules file has builtin_rules, [[rule]], [[webhook]], [[email]] "
                                   "and [[alertmanager]]",
                                   key));
    }
  }
  return builtins;
}

// Counted before any is read: each notifier is a thread, each rule is evaluated on every frame for every device.
void check_counts(const RulesReader& rd) {
  if (const auto rules = rd.tables("rule"); rules.size() > kMaxAlertRules)
    throw rd.fail(*rules[kMaxAlertRules],
                  fmt::format("{} rules; a rules file holds at most {}", rules.size(), kMaxAlertRules));
  std::vector<const toml::table*> all;
  for (const char* key : {"webhook", "email", "alertmanager"})
    for (const toml::table* t : rd.tables(key))
      all.push_back(t);
  if (all.size() > kMaxNotifiers)
    throw rd.fail(*all[kMaxNotifiers],
                  fmt::format("{} notifiers ([[webhook]], [[email]] and [[alertmanager]] together); a rules file holds "
                              "at most {}, each one a thread",
                              all.size(), kMaxNotifiers));
}

constexpr std::string_view kRuleKeys[] = {
    "name",        "metric",         "scope", "op",           "threshold", "relative_to",
    "clear_below", "clear_above",    "for",   "repeat_every", "severity",  "message",
    "enabled",     "allocated_only", "zone",  "kind",         "forecast"};

void check_rule_keys(const RulesReader& rd, const toml::table& t) {
  for (auto&& [k, v] : t)
    if (k.str() != "anomaly" && std::find(std::begin(kRuleKeys), std::end(kRuleKeys), k.str()) == std::end(kRuleKeys)) {
      std::vector<std::string_view> keys(std::begin(kRuleKeys), std::end(kRuleKeys));
      throw rd.fail(v, fmt::format("unknown rule key '{}'{}", k.str(), did_you_mean(k.str(), keys)));
    }
}

// The rule's name: valid, and not a second one of this file.
void read_rule_name(const RulesReader& rd, const toml::table& t, AlertRule& r, std::vector<std::string>& file_rules) {
  rd.get_string(t, "name", r.name);
  if (r.name.empty()) throw rd.fail(t, "a rule needs a name (name = \"gpu_hot\")");
  if (!valid_rule_name(r.name))
    throw rd.fail(*t.get("name"), fmt::format("rule name '{}': use letters, digits, '_', '-' and '.' (at most 64)",
                                              r.name.substr(0, 80)));
  if (std::find(file_rules.begin(), file_rules.end(), r.name) != file_rules.end())
    throw rd.fail(*t.get("name"), fmt::format("a second rule named '{}'", r.name));
  file_rules.push_back(r.name);
}

// The rule's kind and scope; returns the scope as written, for the messages about its metrics.
std::string read_kind_and_scope(const RulesReader& rd, const toml::table& t, AlertRule& r) {
  std::string kind = "threshold";
  rd.get_string(t, "kind", kind);
  if (kind == "device_lost") {
    r.kind = AlertKind::DeviceLost;
  } else if (kind != "threshold") {
    throw rd.fail(*t.get("kind"), fmt::format("kind '{}': expected threshold or device_lost", kind));
  }
  std::string scope = "gpu";
  rd.get_string(t, "scope", scope);
  if (scope == "gpu")
    r.scope = AlertScope::Gpu;
  else if (scope == "cpu")
    r.scope = AlertScope::Cpu;
  else if (scope == "zone")
    r.scope = AlertScope::Zone;
  else if (scope == "unit")
    r.scope = AlertScope::Unit;
  else
    throw rd.fail(*t.get("scope"), fmt::format("scope '{}': expected gpu, cpu, zone or unit", scope));
  if (r.kind == AlertKind::DeviceLost && r.scope != AlertScope::Gpu)
    throw rd.fail(t, "kind = \"device_lost\" is for scope = \"gpu\"");
  return scope;
}

// What every kind of rule may have: severity, message, timing, the zone or the allocated GPUs it is for.
void read_rule_options(const RulesReader& rd, const toml::table& t, AlertRule& r) {
  rd.get_string(t, "severity", r.severity);
  if (r.severity != "info" && r.severity != "warning" && r.severity != "critical")
    throw rd.fail(*t.get("severity"), fmt::format("severity '{}': expected info, warning or critical", r.severity));
  rd.get_string(t, "message", r.message);
  if (r.message.size() > 1000) throw rd.fail(*t.get("message"), "message longer than 1000 bytes");
  rd.get_duration(t, "for", true, r.for_ms);
  rd.get_duration(t, "repeat_every", true, r.repeat_every);
  rd.get_string(t, "zone", r.zone);
  if (!r.zone.empty() && r.scope != AlertScope::Zone) throw rd.fail(*t.get("zone"), "'zone' is for scope = \"zone\"");
  if (const toml::node* n = t.get("allocated_only")) {
    if (!n->is_boolean()) throw rd.fail(*n, "'allocated_only' must be true or false");
    r.allocated_only = n->as_boolean()->get();
    if (r.allocated_only && r.scope != AlertScope::Gpu) throw rd.fail(*n, "'allocated_only' is for scope = \"gpu\"");
  }
}

// anomaly = true: the rule fires when the anomaly detector flags its metric, so it takes no condition of its own.
void read_anomaly(const RulesReader& rd, const toml::table& t, AlertRule& r) {
  const toml::node* an = t.get("anomaly");
  if (!an) return;
  if (!an->is_boolean()) throw rd.fail(*an, "'anomaly' must be true or false");
  if (!an->as_boolean()->get()) return;
  if (r.kind != AlertKind::Threshold) throw rd.fail(*an, "'anomaly = true' takes no kind");
  if (r.scope != AlertScope::Gpu) throw rd.fail(*an, "'anomaly = true' is for scope = \"gpu\"");
  for (const char* key : {"op", "threshold", "relative_to", "clear_below", "clear_above"})
    if (const toml::node* n = t.get(key))
      throw rd.fail(*n, fmt::format("'anomaly = true' fires when the anomaly detector flags the metric: it takes no "
                                    "'{}' (docs/anomalies.md)",
                                    key));
  rd.get_string(t, "metric", r.metric);
  const auto names = alert_metric_names(r.scope);
  if (r.metric.empty())
    throw rd.fail(t, fmt::format("rule '{}' needs a metric to watch for anomalies: {}", r.name, joined(names)));
  const auto idx = alert_metric_index(r.scope, r.metric);
  if (!idx)
    throw rd.fail(*t.get("metric"), fmt::format("unknown gpu metric '{}'{} (the gpu metrics: {})", r.metric,
                                                did_you_mean(r.metric, names), joined(names)));
  r.kind = AlertKind::Anomaly;
  r.metric_index = *idx;
  r.op = AlertOp::Gt;
  r.threshold = 0.5;
}

AlertOp parse_op(const RulesReader& rd, const toml::table& t) {
  std::string op = ">";
  rd.get_string(t, "op", op);
  if (op == ">") return AlertOp::Gt;
  if (op == ">=") return AlertOp::Ge;
  if (op == "<") return AlertOp::Lt;
  if (op == "<=") return AlertOp::Le;
  if (op == "bits") return AlertOp::Bits;
  throw rd.fail(*t.get("op"), fmt::format("op '{}': expected >, >=, <, <= or bits", op));
}

// A threshold rule's condition: the metric, the comparison, the threshold and what it is relative to.
void read_condition(const RulesReader& rd, const toml::table& t, AlertRule& r, const std::string& scope) {
  rd.get_string(t, "metric", r.metric);
  const auto names = alert_metric_names(r.scope);
  if (r.metric.empty())
    throw rd.fail(t, fmt::format("rule '{}' needs a metric; for scope {}: {}", r.name, scope, joined(names)));
  const auto idx = alert_metric_index(r.scope, r.metric);
  if (!idx)
    throw rd.fail(*t.get("metric"), fmt::format("unknown {} metric '{}'{} (the {} metrics: {})", scope, r.metric,
                                                did_you_mean(r.metric, names), scope, joined(names)));
  r.metric_index = *idx;
  r.op = parse_op(rd, t);
  const auto thr = rd.get_number(t, "threshold");
  if (!thr) throw rd.fail(t, fmt::format("rule '{}' needs a threshold", r.name));
  if (!std::isfinite(*thr)) throw rd.fail(*t.get("threshold"), "threshold must be a finite number");
  if (r.op == AlertOp::Bits &&
      !(t.get("threshold")->is_integer() && *thr >= 1 && *thr <= static_cast<double>(kMaxAlertBitMask)))
    throw rd.fail(
        *t.get("threshold"),
        fmt::format("op = \"bits\" needs a bit mask: a whole number from 1 to 0x{:x} (e.g. 0x68)", kMaxAlertBitMask));
  r.threshold = *thr;
  rd.get_string(t, "relative_to", r.relative_to);
  if (!r.relative_to.empty()) {
    const auto ri = alert_metric_index(r.scope, r.relative_to);
    if (!ri)
      throw rd.fail(*t.get("relative_to"),
                    fmt::format("unknown {} metric '{}'{}", scope, r.relative_to, did_you_mean(r.relative_to, names)));
    if (r.op == AlertOp::Bits) throw rd.fail(*t.get("relative_to"), "op = \"bits\" takes no relative_to");
    r.relative_index = *ri;
  }
}

// forecast = "15m": the rule fires on the metric's forecast that far ahead.
void read_forecast(const RulesReader& rd, const toml::table& t, AlertRule& r) {
  const toml::node* n = t.get("forecast");
  if (!n) return;
  rd.get_duration(t, "forecast", false, r.forecast);
  if (r.scope != AlertScope::Gpu || std::find(std::begin(kForecastAlertMetrics), std::end(kForecastAlertMetrics),
                                              r.metric) == std::end(kForecastAlertMetrics)) {
    std::vector<std::string_view> fm(std::begin(kForecastAlertMetrics), std::end(kForecastAlertMetrics));
    throw rd.fail(*n, fmt::format("'forecast' is for the GPU metrics wattscope forecasts: {}", joined(fm)));
  }
  if (r.op == AlertOp::Bits) throw rd.fail(*n, "op = \"bits\" takes no forecast");
  if (r.forecast < kMinForecastHorizon || r.forecast > kMaxForecastHorizon)
    throw rd.fail(*n, "'forecast' must be from \"1s\" to \"24h\"");
}

// clear_below / clear_above: the level at which a firing alert resolves, on the threshold's safe side.
void read_clear(const RulesReader& rd, const toml::table& t, AlertRule& r) {
  const auto below = rd.get_number(t, "clear_below");
  const auto above = rd.get_number(t, "clear_above");
  for (const char* key : {"clear_below", "clear_above"})
    if (const auto v = rd.get_number(t, key); v && !std::isfinite(*v))
      throw rd.fail(*t.get(key), fmt::format("{} must be a finite number", key));
  const bool upward = r.op == AlertOp::Gt || r.op == AlertOp::Ge;
  if (below) {
    if (!upward) throw rd.fail(*t.get("clear_below"), "clear_below is for > and >= rules (use clear_above)");
    if (*below > r.threshold)
      throw rd.fail(
          *t.get("clear_below"),
          fmt::format("clear_below {} is above the threshold {}: the alert could never resolve", *below, r.threshold));
    r.clear = below;
  }
  if (above) {
    if (upward || r.op == AlertOp::Bits)
      throw rd.fail(*t.get("clear_above"), "clear_above is for < and <= rules (use clear_below)");
    if (*above < r.threshold)
      throw rd.fail(
          *t.get("clear_above"),
          fmt::format("clear_above {} is below the threshold {}: the alert could never resolve", *above, r.threshold));
    r.clear = above;
  }
}

// One [[rule]]: added, or replacing the built-in rule of its name; enabled = false removes that one.
void read_rule(const RulesReader& rd, const toml::table& t, std::vector<std::string>& file_rules,
               std::vector<AlertRule>& rules) {
  check_rule_keys(rd, t);
  AlertRule r;
  r.line = line_of(t);
  read_rule_name(rd, t, r, file_rules);
  auto existing = std::find_if(rules.begin(), rules.end(), [&](const AlertRule& b) { return b.name == r.name; });
  if (const toml::node* en = t.get("enabled")) {
    if (!en->is_boolean()) throw rd.fail(*en, "'enabled' must be true or false");
    if (!en->as_boolean()->get()) {
      if (existing != rules.end()) rules.erase(existing);
      return;
    }
  }
  const std::string scope = read_kind_and_scope(rd, t, r);
  read_rule_options(rd, t, r);
  read_anomaly(rd, t, r);
  if (r.kind == AlertKind::Threshold) {
    read_condition(rd, t, r, scope);
    read_forecast(rd, t, r);
    read_clear(rd, t, r);
  }
  if (existing != rules.end())
    *existing = std::move(r);
  else
    rules.push_back(std::move(r));
}

constexpr std::string_view kNotifierKeys[] = {
    "url",      "timeout",      "retries",      "backoff",          "from",    "to",
    "starttls", "username_env", "password_env", "credentials_file", "ca_file", "header_file"};

void check_notifier_keys(const RulesReader& rd, const toml::table& t, std::string_view key) {
  for (auto&& [k, v] : t) {
    if (k.str() == "resend_every") continue; // [[alertmanager]]'s, checked with its value
    if (k.str() == "username" || k.str() == "password")
      throw rd.fail(v, "credentials never go in the rules file: use username_env/password_env or credentials_file");
    if (std::find(std::begin(kNotifierKeys), std::end(kNotifierKeys), k.str()) == std::end(kNotifierKeys)) {
      std::vector<std::string_view> keys(std::begin(kNotifierKeys), std::end(kNotifierKeys));
      throw rd.fail(v, fmt::format("unknown {} key '{}'{}", key, k.str(), did_you_mean(k.str(), keys)));
    }
  }
}

// [[email]]'s own keys: the sender, the recipients, TLS and credentials.
void read_email(const RulesReader& rd, const toml::table& t, NotifierConfig& n) {
  rd.get_string(t, "from", n.from);
  if (n.from.empty()) throw rd.fail(t, "[[email]] needs from = \"wattscope@example.org\"");
  if (const toml::node* to = t.get("to")) {
    if (to->is_string()) {
      n.to.push_back(to->as_string()->get());
    } else if (to->is_array()) {
      for (const auto& e : *to->as_array()) {
        if (!e.is_string()) throw rd.fail(e, "'to' holds addresses in quotes");
        n.to.push_back(e.as_string()->get());
      }
    } else {
      throw rd.fail(*to, "'to' is an address or a list of them");
    }
  }
  if (n.to.empty()) throw rd.fail(t, "[[email]] needs to = [\"ops@example.org\"]");
  for (const auto& a : n.to)
    if (a.find_first_of("\r\n<>") != std::string::npos || a.find('@') == std::string::npos)
      throw rd.fail(*t.get("to"), fmt::format("'{}' is not an e-mail address", a.substr(0, 80)));
  if (n.from.find_first_of("\r\n<>") != std::string::npos || n.from.find('@') == std::string::npos)
    throw rd.fail(*t.get("from"), fmt::format("'{}' is not an e-mail address", n.from.substr(0, 80)));
  rd.get_string(t, "starttls", n.starttls);
  if (n.starttls != "required" && n.starttls != "opportunistic" && n.starttls != "off")
    throw rd.fail(*t.get("starttls"), "starttls: required, opportunistic or off");
  rd.get_string(t, "username_env", n.username_env);
  rd.get_string(t, "password_env", n.password_env);
  rd.get_string(t, "credentials_file", n.credentials_file);
}

// One [[webhook]], [[email]] or [[alertmanager]], the i-th of its key.
NotifierConfig read_notifier(const RulesReader& rd, const toml::table& t, std::string_view key,
                             NotifierConfig::Kind kind, size_t i) {
  check_notifier_keys(rd, t, key);
  NotifierConfig n;
  n.kind = kind;
  n.name = fmt::format("{}[{}]", key, i);
  rd.get_string(t, "url", n.url);
  const bool smtp = n.url.starts_with("smtp://") || n.url.starts_with("smtps://");
  const bool http = n.url.starts_with("http://") || n.url.starts_with("https://");
  if (kind == NotifierConfig::Kind::Email ? !smtp : !http)
    throw rd.fail(t.get("url") ? *t.get("url") : static_cast<const toml::node&>(t),
                  fmt::format("[[{}]] needs url = \"{}\"", key,
                              kind == NotifierConfig::Kind::Email ? "smtp://HOST:587" : "http://HOST:PORT/..."));
  rd.get_duration(t, "timeout", false, n.timeout);
  rd.get_duration(t, "backoff", false, n.backoff);
  if (t.get("resend_every")) {
    if (kind != NotifierConfig::Kind::Alertmanager)
      throw rd.fail(*t.get("resend_every"), "resend_every is for [[alertmanager]] only");
    rd.get_duration(t, "resend_every", false, n.resend_every);
    if (n.resend_every < std::chrono::seconds(1) || n.resend_every > std::chrono::minutes(10))
      throw rd.fail(*t.get("resend_every"), "resend_every: 1s to 10m (Alertmanager's resolve_timeout is 5m)");
  }
  if (auto r = rd.get_number(t, "retries")) {
    if (*r < 0 || *r > 20 || *r != static_cast<int>(*r)) throw rd.fail(*t.get("retries"), "retries: 0 to 20");
    n.retries = static_cast<int>(*r);
  }
  rd.get_string(t, "header_file", n.header_file);
  rd.get_string(t, "ca_file", n.ca_file);
  if (kind == NotifierConfig::Kind::Email) read_email(rd, t, n);
  return n;
}

} // namespace

AlertConfig parse_alert_config(std::string_view text, const std::string& file) {
  const toml::table root = parse_toml(text, file);
  const RulesReader rd(root, file);
  AlertConfig cfg;
  cfg.source = file;
  if (read_top_level(rd)) cfg.rules = builtin_alert_rules();
  check_counts(rd);
  std::vector<std::string> file_rules;
  for (const toml::table* t : rd.tables("rule"))
    read_rule(rd, *t, file_rules, cfg.rules);
  for (const auto& [key, kind] :
       {std::pair{"webhook", NotifierConfig::Kind::Webhook}, std::pair{"email", NotifierConfig::Kind::Email},
        std::pair{"alertmanager", NotifierConfig::Kind::Alertmanager}}) {
    size_t i = 0;
    for (const toml::table* t : rd.tables(key))
      cfg.notifiers.push_back(read_notifier(rd, *t, key, kind, i++));
  }
  return cfg;
}

AlertConfig load_alert_config(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw AlertConfigError(path, 0, "cannot read the rules file (no such file)");
  if (!S_ISREG(st.st_mode)) throw AlertConfigError(path, 0, "not a regular file");
  if (static_cast<uintmax_t>(st.st_size) > kMaxAlertFileBytes)
    throw AlertConfigError(path, 0,
                           fmt::format("larger than {} MiB; a rules file is a few KiB", kMaxAlertFileBytes >> 20));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw AlertConfigError(path, 0, "cannot read the rules file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_alert_config(ss.str(), path);
}

std::string default_alert_config_path() {
  return default_config_path("alerts.toml");
}

std::string describe_rule(const AlertRule& r) {
  std::string what;
  if (r.kind == AlertKind::DeviceLost) {
    what = "each GPU: device lost";
  } else if (r.kind == AlertKind::Anomaly) { // issue 36
    what = fmt::format("each GPU{}: {} anomalous (anomaly detector)", r.allocated_only ? " (allocated)" : "", r.metric);
  } else {
    const std::string unit(alert_metric_unit(r.scope, r.metric_index));
    std::string scope = r.scope == AlertScope::Gpu    ? "each GPU"
                        : r.scope == AlertScope::Cpu  ? "the CPU"
                        : r.scope == AlertScope::Zone ? "each RAPL zone"
                                                      : "each unit";
    if (!r.zone.empty()) scope += " '" + r.zone + "'";
    if (r.allocated_only) scope += " (allocated)";
    auto level = [&](double v) {
      if (r.op == AlertOp::Bits) return fmt::format("0x{:x}", static_cast<int64_t>(v));
      if (!r.relative_to.empty()) return fmt::format("{:g} % of {}", v, r.relative_to);
      return fmt::format("{:g}{}{}", v, unit.empty() ? "" : " ", unit);
    };
    what = fmt::format("{}: {} {} {}", scope, r.metric, to_string(r.op), level(r.threshold));
    if (r.forecast.count()) what += fmt::format(" within {} (forecast)", format_duration(r.forecast)); // issue 36
    if (r.clear)
      what += fmt::format(", clears {} {}", r.op == AlertOp::Lt || r.op == AlertOp::Le ? "above" : "below",
                          level(*r.clear));
  }
  return fmt::format("{:<26} {:<8} {}; for {}; repeat every {}{}", r.name, r.severity, what,
                     r.for_ms.count() ? format_duration(r.for_ms) : std::string("0s"),
                     r.repeat_every.count() ? format_duration(r.repeat_every) : std::string("(never)"),
                     r.builtin ? " [built-in]" : fmt::format(" [line {}]", r.line));
}

} // namespace wattscope
