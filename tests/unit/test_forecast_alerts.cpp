// issue 36: alert rules with `forecast = "15m"`: they fire when the metric's forecast (its robust trend, projected
// the horizon ahead) crosses the threshold, so a memory that grows 1 % of the device a minute from 50 % fires a 95 %
// rule 15 min before it gets there (at 30 min, not 45), and a steady one never does.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "alerts/evaluator.hpp"
#include "alerts/rules.hpp"

namespace unit_forecast_alerts { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;

namespace {

constexpr double kDevice = 80e9;

std::vector<AlertRule> rules(const std::string& text) {
  return parse_alert_config("builtin_rules = false\n" + text, "rules.toml").rules;
}

std::string error_of(const std::string& text) {
  try {
    rules(text);
  } catch (const AlertConfigError& e) {
    return e.what();
  }
  return "";
}

const char* kOom = R"(
[[rule]]
name = "oom_soon"
metric = "mem_used_bytes"
relative_to = "mem_total_bytes"
op = ">="
threshold = 95
forecast = "15m"
)";

// Steps the evaluator one frame a second with GPU 0's memory at mem(t) for t in [0, seconds); the tick the rule
// fired at, or -1.
template <class F>
int64_t fires_at(const std::vector<AlertRule>& r, int64_t seconds, F mem, std::string* message = nullptr) {
  AlertEvaluator ev(r);
  const auto t0 = SteadyClock::now();
  std::vector<AlertTransition> out;
  for (int64_t t = 0; t < seconds; ++t) {
    Frame f;
    f.tick = t;
    f.mono = t0 + std::chrono::seconds(t);
    f.ts_ms = 1'700'000'000'000 + 1000 * t;
    GpuSample g;
    g.gpu_index = 0;
    g.mem_used_bytes = static_cast<int64_t>(mem(static_cast<double>(t)));
    g.mem_total_bytes = static_cast<int64_t>(kDevice);
    f.gpus.push_back(g);
    ev.evaluate(f, out);
    for (const auto& tr : out)
      if (tr.change == AlertChange::Firing) {
        if (message) *message = ev.message(tr);
        return t;
      }
  }
  return -1;
}

} // namespace

TEST(ForecastAlerts, ParsedAndValidated) {
  const auto r = rules(kOom);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].forecast, std::chrono::minutes(15));
  EXPECT_NE(describe_rule(r[0]).find("within 15m (forecast)"), std::string::npos) << describe_rule(r[0]);
  const std::string base = "[[rule]]\nname = \"x\"\n";
  // Only the metrics wattscope forecasts; named in the error.
  EXPECT_NE(error_of(base + "metric = \"power_w\"\nthreshold = 1\nforecast = \"5m\"\n")
                .find("'forecast' is for the GPU metrics wattscope forecasts: mem_used_bytes"),
            std::string::npos);
  EXPECT_NE(error_of(base + "scope = \"cpu\"\nmetric = \"util_pct\"\nthreshold = 1\nforecast = \"5m\"\n")
                .find("'forecast' is for the GPU metrics"),
            std::string::npos);
  EXPECT_NE(error_of(base + "metric = \"temp_gpu_c\"\nthreshold = 1\nforecast = \"0s\"\n").find("forecast"),
            std::string::npos);
  EXPECT_NE(error_of(base + "metric = \"temp_gpu_c\"\nthreshold = 1\nforecast = \"25h\"\n").find("24h"),
            std::string::npos);
  EXPECT_NE(error_of(base + "metric = \"temp_gpu_c\"\nthreshold = 1\nforecast = 15\n").find("'forecast'"),
            std::string::npos);
  EXPECT_EQ(error_of(base + "metric = \"temp_gpu_c\"\nthreshold = 87\nforecast = \"10m\"\n"), "");
}

// 50 % + 1 %/min of 80 GB: 95 % at 45 min. The forecast rule fires when 95 % is 15 min ahead: at 30 min (within the
// minute); the same rule without `forecast` at 45 min.
TEST(ForecastAlerts, FiresWhenTheForecastCrossesWithinTheHorizon) {
  const auto grow = [](double t) { return kDevice * (0.50 + 0.01 * t / 60.0); };
  std::string said;
  const int64_t forecast = fires_at(rules(kOom), 3000, grow, &said);
  EXPECT_NEAR(static_cast<double>(forecast), 30 * 60.0, 60.0);
  // It says it is a forecast, its horizon and the reading now (about 64 GB at 30 min), not only "95 >= 95".
  EXPECT_EQ(said.find("oom_soon on gpu0: forecast: mem_used_bytes >= 95 within 15m ("), 0u) << said;
  EXPECT_NE(said.find(" projected; 6."), std::string::npos) << said;
  EXPECT_NE(said.find("e+10 "), std::string::npos) << said;
  std::string plain = kOom;
  plain.erase(plain.find("forecast = \"15m\"\n"));
  const int64_t now = fires_at(rules(plain), 3000, grow);
  EXPECT_NEAR(static_cast<double>(now), 45 * 60.0, 2.0);
}

// Steady at 90 %, with ±1 % noise and spikes: the trend is flat, 95 % is never forecast.
TEST(ForecastAlerts, SteadyMemoryNeverFires) {
  const auto steady = [](double t) {
    const auto k = static_cast<int64_t>(t);
    return kDevice * (0.90 + 0.01 * std::sin(t * 1.7) + (k % 97 == 50 ? 0.04 : 0.0));
  };
  EXPECT_EQ(fires_at(rules(kOom), 3600, steady), -1);
}

} // namespace unit_forecast_alerts
