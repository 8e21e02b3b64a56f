// Alert rules files (issue 14; bounded in issue 31): TOML a user writes, or finds at ~/.config/wattscope/alerts.toml,
// read by every run. Parsed, then its rules described and evaluated against a frame, as `alerts list` and a run do.
#include <cmath>
#include <string>
#include <vector>

#include "alerts/evaluator.hpp"
#include "alerts/rules.hpp"
#include "check.hpp"

using namespace wattscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz_text(data, size);
  AlertConfig cfg;
  try {
    cfg = parse_alert_config(text, "rules.toml");
  } catch (const AlertConfigError& e) {
    FUZZ_CHECK(std::string_view(e.what()).starts_with("rules.toml"));
    return 0; // refused with a reason: fine. Anything else thrown escapes and is a finding.
  }
  FUZZ_CHECK(text.size() <= kMaxAlertFileBytes);
  FUZZ_CHECK(cfg.notifiers.size() <= kMaxNotifiers);
  FUZZ_CHECK(cfg.rules.size() <= kMaxAlertRules + builtin_alert_rules().size());
  for (const auto& r : cfg.rules) {
    FUZZ_CHECK(!r.name.empty() && r.name.size() <= 64);
    FUZZ_CHECK(std::isfinite(r.threshold));
    if (r.clear) FUZZ_CHECK(std::isfinite(*r.clear));
    if (r.op == AlertOp::Bits) FUZZ_CHECK(r.threshold >= 1 && r.threshold <= static_cast<double>(kMaxAlertBitMask));
    FUZZ_CHECK(r.kind != AlertKind::Threshold || alert_metric_index(r.scope, r.metric) == r.metric_index);
    FUZZ_CHECK(!describe_rule(r).empty());
  }
  for (const auto& n : cfg.notifiers)
    FUZZ_CHECK(n.retries >= 0 && n.retries <= 20 && !n.url.empty());
  // Every rule against one frame of extreme values: a GPU, the CPU and a zone (what a rule may watch).
  AlertEvaluator ev(cfg.rules);
  Frame f;
  f.tick = 1;
  GpuSample g;
  g.power_w = -1e308;
  g.power_limit_w = 0;
  g.temp_gpu_c = NAN;
  g.util_gpu_pct = 1e308;
  g.throttle_reasons = -1;
  g.mem_used_bytes = INT64_MAX;
  g.mem_total_bytes = 0;
  f.gpus = {g};
  std::vector<AlertTransition> out;
  ev.evaluate(f, out);
  for (const auto& t : out)
    (void)ev.message(t);
  (void)ev.firing();
  return 0;
}
