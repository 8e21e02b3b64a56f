// Anomalies (issue 36): the detector on synthetic series whose anomalies start at a known tick, the straggler test,
// the `anomaly = true` alert rule and the live monitor's events. Every expected onset is the tick the series was built
// to change at; the tolerance each test allows is stated beside it (docs/anomalies.md repeats them).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "alerts/evaluator.hpp"
#include "alerts/rules.hpp"
#include "forecast/anomaly.hpp"
#include "forecast/anomaly_monitor.hpp"

namespace unit_anomaly { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wattscope::forecast;

namespace {

constexpr int64_t kT0 = 1'700'000'000'000;
constexpr int64_t kTickMs = 1000;
int64_t ts(int k) {
  return kT0 + k * kTickMs;
}

struct Run {
  std::vector<AnomalyChange> changes;
  std::vector<int> onset_ticks; // tick index of each onset's onset_ms
};

// Feeds values (one per tick); `boundaries`: ticks at which a phase boundary is reported.
Run feed(AnomalyDetector& d, const std::vector<double>& v, const std::vector<int>& boundaries = {}) {
  Run r;
  for (int k = 0; k < static_cast<int>(v.size()); ++k) {
    const bool b = std::find(boundaries.begin(), boundaries.end(), k) != boundaries.end();
    if (auto c = d.observe(ts(k), v[static_cast<size_t>(k)], b)) {
      r.changes.push_back(*c);
      if (c->onset) r.onset_ticks.push_back(static_cast<int>((c->onset_ms - kT0) / kTickMs));
    }
  }
  return r;
}

// A busy GPU's utilisation: 95 % ± 3 points, whole numbers as NVML gives them.
std::vector<double> busy_util(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 1.5);
  std::vector<double> v;
  for (int k = 0; k < n; ++k)
    v.push_back(std::round(std::clamp(95 + noise(rng), 0.0, 100.0)));
  return v;
}

// Power at 600 W ± 4 %, with a one-tick spike (a boost step, a late sample) every 97 ticks.
std::vector<double> busy_power(int n, uint32_t seed, double level = 600) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 0.02 * level);
  std::vector<double> v;
  for (int k = 0; k < n; ++k)
    v.push_back(level + noise(rng) + (k % 97 == 50 ? 0.5 * level : 0));
  return v;
}

} // namespace

TEST(Anomaly, SteadyNoisySeriesFlagNothing) {
  // 5,000 ticks of each metric's healthy noise, outliers included: the false-positive rate on steady runs is zero.
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    AnomalyDetector u(anomaly_config_for("util_gpu_pct")), p(anomaly_config_for("power_w"));
    EXPECT_TRUE(feed(u, busy_util(5000, seed)).changes.empty()) << "seed " << seed;
    EXPECT_TRUE(feed(p, busy_power(5000, seed)).changes.empty()) << "seed " << seed;
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> jitter(-1, 1);
    std::vector<double> temp, clock;
    for (int k = 0; k < 5000; ++k) {
      temp.push_back(70 + jitter(rng));         // whole degrees, ±1
      clock.push_back(1980 + 15 * jitter(rng)); // 15 MHz boost bins
    }
    AnomalyDetector t(anomaly_config_for("temp_gpu_c")), c(anomaly_config_for("clock_sm_mhz"));
    EXPECT_TRUE(feed(t, temp).changes.empty()) << "seed " << seed;
    EXPECT_TRUE(feed(c, clock).changes.empty()) << "seed " << seed;
  }
}

TEST(Anomaly, StallFoundAtItsOnsetAndEnds) {
  auto v = busy_util(400, 7);
  for (int k = 200; k < 230; ++k)
    v[static_cast<size_t>(k)] = 8; // the data loader stops feeding it: 30 ticks at 8 %
  AnomalyDetector d(anomaly_config_for("util_gpu_pct"));
  const auto r = feed(d, v);
  ASSERT_EQ(r.changes.size(), 2u);
  EXPECT_TRUE(r.changes[0].onset);
  EXPECT_EQ(r.changes[0].kind, AnomalyKind::Stall);
  EXPECT_EQ(r.onset_ticks[0], 200);       // tolerance 0: the first tick below is the onset
  EXPECT_EQ(r.changes[0].ts_ms, ts(205)); // confirmed after min_ticks (6)
  EXPECT_NEAR(r.changes[0].value, 8, 1e-9);
  EXPECT_NEAR(r.changes[0].expected, 95, 2);
  EXPECT_FALSE(r.changes[1].onset);
  EXPECT_EQ(r.changes[1].ts_ms, ts(233)); // back at 230, ended after end_ticks (4)
}

TEST(Anomaly, ShortDipsAndSpikesAreNotAnomalies) {
  auto v = busy_util(400, 9);
  for (int k : {100, 101, 102, 103, 104, 250, 300, 301}) // five ticks (< min_ticks), then one and two
    v[static_cast<size_t>(k)] = 5;
  AnomalyDetector d(anomaly_config_for("util_gpu_pct"));
  EXPECT_TRUE(feed(d, v).changes.empty());
}

TEST(Anomaly, LevelChangeWithoutPhaseChangeIsFlaggedAtAPhaseBoundaryIsNot) {
  auto v = busy_power(600, 3);
  for (int k = 300; k < 600; ++k)
    v[static_cast<size_t>(k)] *= 0.75; // a power cap lowered from 600 to 450 W
  {
    AnomalyDetector d(anomaly_config_for("power_w"));
    const auto r = feed(d, v);
    ASSERT_FALSE(r.changes.empty());
    EXPECT_EQ(r.changes[0].kind, AnomalyKind::LevelChange);
    EXPECT_EQ(r.onset_ticks[0], 300);
    // It stays: after adopt_ticks (240) it is the new level, and nothing more is flagged.
    ASSERT_EQ(r.changes.size(), 2u);
    EXPECT_TRUE(r.changes[1].adopted);
  }
  // The same change with a phase boundary at the change, or settled up to boundary_grace ticks either side of it.
  for (int b : {297, 300, 301, 303}) {
    AnomalyDetector d(anomaly_config_for("power_w"));
    EXPECT_TRUE(feed(d, v, {b}).changes.empty()) << "boundary at tick " << b;
  }
  // A boundary long before the change excuses nothing.
  AnomalyDetector d(anomaly_config_for("power_w"));
  const auto r = feed(d, v, {200});
  ASSERT_FALSE(r.changes.empty());
  EXPECT_EQ(r.onset_ticks[0], 300);
}

TEST(Anomaly, ClocksStepDown) {
  std::vector<double> v;
  for (int k = 0; k < 500; ++k)
    v.push_back(k < 250 ? 1980 : 1410); // a thermal slowdown without a phase change
  AnomalyDetector d(anomaly_config_for("clock_sm_mhz"));
  const auto r = feed(d, v);
  ASSERT_FALSE(r.changes.empty());
  EXPECT_EQ(r.changes[0].kind, AnomalyKind::LevelChange);
  EXPECT_EQ(r.onset_ticks[0], 250);
  EXPECT_EQ(r.changes[0].value, 1410);
}

TEST(Anomaly, TemperatureRampFoundWithinItsLag) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> jitter(-1, 1);
  std::vector<double> v;
  for (int k = 0; k < 600; ++k) // 65 °C ± 1, then from tick 400 rising 0.5 °C a tick (a fan that stopped)
    v.push_back(std::round(65 + jitter(rng) + (k >= 400 ? 0.5 * (k - 400) : 0)));
  AnomalyDetector d(anomaly_config_for("temp_gpu_c"));
  const auto r = feed(d, v);
  ASSERT_FALSE(r.changes.empty());
  EXPECT_EQ(r.changes[0].kind, AnomalyKind::TempRamp);
  // Tolerance: the rise is judged over rate_lag (16) ticks, so the onset is found within 16 ticks after it began.
  EXPECT_GE(r.onset_ticks[0], 400);
  EXPECT_LE(r.onset_ticks[0], 400 + anomaly_config_for("temp_gpu_c").rate_lag);
  // A GPU warming up as it starts work, after a phase boundary, is the phase's: not flagged.
  std::vector<double> warm;
  for (int k = 0; k < 400; ++k)
    warm.push_back(k < 100 ? 40 : std::round(40 + 35 * (1 - std::exp(-(k - 100) / 40.0))));
  AnomalyDetector w(anomaly_config_for("temp_gpu_c"));
  EXPECT_TRUE(feed(w, warm, {100}).changes.empty());
  // Coming back from a stall (67 -> 60 -> 67 °C within 10 ticks) rises as fast as a ramp, but only back to its level.
  std::vector<double> back;
  for (int k = 0; k < 400; ++k)
    back.push_back(k >= 300 && k < 308 ? 60 : 67 + jitter(rng));
  AnomalyDetector s(anomaly_config_for("temp_gpu_c"));
  EXPECT_TRUE(feed(s, back).changes.empty());
}

TEST(Anomaly, SeasonalDipsAreUsualALongerOneIsNot) {
  // Epochs of 50 ticks: 40 training at 600 W, 10 evaluating at 150 W, for 30 epochs; no phase markers.
  std::vector<double> v;
  for (int k = 0; k < 1500; ++k)
    v.push_back(k % 50 < 40 ? 600 : 150);
  for (int k = 1010; k < 1036; ++k)
    v[static_cast<size_t>(k)] = 150; // epoch 20: a 26-tick stall mid-training
  AnomalyDetector d(anomaly_config_for("power_w"));
  const auto r = feed(d, v);
  ASSERT_TRUE(d.period());
  EXPECT_EQ(*d.period(), 50u);
  // Before a period is known (two periods of history), the evaluations are flagged; afterwards only the stall.
  std::vector<int> late;
  for (int t : r.onset_ticks)
    if (t >= 200) late.push_back(t);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0], 1010);
  for (const auto& c : r.changes)
    if (c.onset && c.onset_ms == ts(1010)) {
      EXPECT_EQ(c.kind, AnomalyKind::Stall);
    }
}

TEST(Anomaly, MissingValuesNeitherCountNorBreak) {
  auto v = busy_util(300, 11);
  for (int k = 150; k < 180; ++k)
    v[static_cast<size_t>(k)] = k % 2 ? std::nan("") : 6.0;
  AnomalyDetector d(anomaly_config_for("util_gpu_pct"));
  const auto r = feed(d, v);
  ASSERT_FALSE(r.changes.empty());
  EXPECT_EQ(r.onset_ticks[0], 150);
  EXPECT_EQ(r.changes[0].ts_ms, ts(160)); // the 6th stalled value is at tick 160 (every other tick is missing)
}

TEST(Anomaly, IdleToBusyIsWorkStartingNotAnAnomaly) {
  std::vector<double> v(100, 0);
  const auto busy = busy_util(300, 2);
  v.insert(v.end(), busy.begin(), busy.end());
  AnomalyDetector d(anomaly_config_for("util_gpu_pct"));
  EXPECT_TRUE(feed(d, v).changes.empty());
}

TEST(Straggler, MarkMatchesTheAdviceTest) {
  const StragglerTick sib{1980, 97, 600};
  const std::vector<StragglerTick> sibs(7, sib);
  const auto m = straggler_mark({1410, 97, 560}, sibs);
  EXPECT_TRUE(m.clock);
  EXPECT_FALSE(m.util);
  EXPECT_EQ(*m.sib_clock, 1980);
  EXPECT_FALSE(straggler_mark({1800, 97, 600}, sibs).apart()); // 9 % below: the spread of healthy GPUs
  EXPECT_TRUE(straggler_mark({1980, 70, 600}, sibs).util);     // 27 points below
  EXPECT_TRUE(straggler_mark({1980, 97, 450}, sibs).power);    // 25 % less at the same utilisation
  // Siblings between steps (under 60 %) make no comparison; an idle GPU is not a straggler.
  EXPECT_FALSE(straggler_mark({1410, 97, 560}, std::vector<StragglerTick>(7, {1980, 40, 300})).apart());
  EXPECT_FALSE(straggler_mark({1410, 2, 80}, sibs).apart());
  EXPECT_EQ(straggler_reason_names(0x4 | 0x40), "SW power cap, HW thermal slowdown");
}

namespace {
// Eight GPUs at 1 s: training at 1,980 MHz / 97 % / 600 W / 65 °C with whole-number noise; `tweak` changes one.
Frame frame(int k, const std::function<void(int, int, GpuSample&)>& tweak) {
  Frame f;
  f.tick = k;
  f.ts_ms = ts(k);
  for (int i = 0; i < 8; ++i) {
    GpuSample g;
    g.gpu_index = i;
    const int j = (k * 7 + i * 3) % 5 - 2; // -2..2, deterministic
    g.util_gpu_pct = 96 + j % 2;
    g.power_w = 600 + 5 * j;
    g.clock_sm_mhz = 1980 + 15 * (j % 2);
    g.temp_gpu_c = 65 + j % 2;
    g.throttle_reasons = 0;
    tweak(k, i, g);
    f.gpus.push_back(g);
  }
  return f;
}
} // namespace

TEST(AnomalyMonitor, StragglerAndStallEventsLive) {
  std::vector<Event> events;
  AnomalyMonitor mon({}, [&](Event e) { events.push_back(std::move(e)); });
  for (int k = 0; k < 400; ++k) {
    Frame f = frame(k, [](int k, int i, GpuSample& g) {
      if (i == 3 && k >= 100 && k < 300) { // GPU 3 throttled for 200 s
        g.clock_sm_mhz = 1410;
        g.throttle_reasons = 0x40;
      }
      if (i == 5 && k >= 200 && k < 230) { // GPU 5 stalls for 30 s
        g.util_gpu_pct = 3;
        g.power_w = 90;
      }
    });
    mon.process(f, 0);
    if (k == 150) {
      const auto a = mon.active();
      ASSERT_EQ(a.size(), 2u); // the straggler, and gpu3's clocks, changed level without a phase change
      EXPECT_TRUE(std::any_of(a.begin(), a.end(), [](const ActiveAnomaly& x) { return x.kind == "straggler"; }));
    }
  }
  std::vector<nlohmann::json> strag, stall;
  for (const auto& e : events) {
    const auto d = nlohmann::json::parse(e.detail);
    if (e.kind == "straggler") strag.push_back(d);
    if (e.kind == "anomaly" && d["anomaly"] == "stall") stall.push_back(d);
    if (e.kind == "straggler" || e.kind == "anomaly") {
      EXPECT_TRUE(e.source == "gpu3" || e.source == "gpu5") << e.detail;
    }
  }
  ASSERT_EQ(strag.size(), 2u); // onset, ended
  EXPECT_EQ(strag[0]["state"], "onset");
  EXPECT_EQ(strag[0]["onset"], "2023-11-14T22:15:00.000Z"); // tick 100
  const std::string msg = strag[1]["message"];
  EXPECT_NE(msg.find("gpu3 was at 1,410 MHz for 3 min"), std::string::npos) << msg;
  EXPECT_NE(msg.find("its 7 siblings ran at 1,9"), std::string::npos) << msg; // their median: 1,980 or 1,995
  EXPECT_NE(msg.find("its throttle reasons: HW thermal slowdown"), std::string::npos) << msg;
  // The stall: on utilisation and on power, each with its onset at tick 200.
  std::string all;
  for (const auto& e : events)
    all += e.kind + " " + e.source + " " + e.detail + "\n";
  ASSERT_EQ(stall.size(), 4u) << all; // onset and end, on both
  for (const auto& d : stall)
    EXPECT_EQ(d["onset"], "2023-11-14T22:16:40.000Z"); // tick 200
}

TEST(AnomalyMonitor, PhaseBoundaryExcusesALevelChangeOnEveryMetric) {
  std::vector<Event> events;
  AnomalyMonitor mon({}, [&](Event e) { events.push_back(std::move(e)); });
  for (int k = 0; k < 300; ++k) {
    Frame f = frame(k, [](int k, int, GpuSample& g) {
      if (k >= 150) { // every GPU moves to an evaluation phase: less power, lower clocks
        g.power_w = *g.power_w * 0.6;
        g.clock_sm_mhz = *g.clock_sm_mhz - 300;
        g.util_gpu_pct = 64;
      }
    });
    mon.process(f, k >= 151 ? 1 : 0); // the `begin` settles a tick after the change
  }
  for (const auto& e : events)
    ADD_FAILURE() << e.kind << " " << e.detail;
}

TEST(AlertRules, AnomalyRuleParsesAndValidates) {
  const auto cfg = parse_alert_config("[[rule]]\nname = \"odd_power\"\nmetric = \"power_w\"\nanomaly = true\n"
                                      "for = \"10s\"\n",
                                      "rules.toml");
  const auto it =
      std::find_if(cfg.rules.begin(), cfg.rules.end(), [](const AlertRule& r) { return r.name == "odd_power"; });
  ASSERT_NE(it, cfg.rules.end());
  EXPECT_EQ(it->kind, AlertKind::Anomaly);
  EXPECT_NE(describe_rule(*it).find("power_w anomalous"), std::string::npos);
  auto error = [](const std::string& text) {
    try {
      parse_alert_config(text, "rules.toml");
    } catch (const AlertConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error("[[rule]]\nname = \"a\"\nmetric = \"power_w\"\nanomaly = true\nthreshold = 3\n")
                .find("takes no 'threshold'"),
            std::string::npos);
  EXPECT_NE(
      error("[[rule]]\nname = \"a\"\nmetric = \"util_pct\"\nscope = \"cpu\"\nanomaly = true\n").find("scope = \"gpu\""),
      std::string::npos);
  EXPECT_NE(error("[[rule]]\nname = \"a\"\nmetric = \"pwer_w\"\nanomaly = true\n").find("unknown gpu metric 'pwer_w'"),
            std::string::npos);
  EXPECT_NE(error("[[rule]]\nname = \"a\"\nmetric = \"power_w\"\nanomaly = \"yes\"\n").find("true or false"),
            std::string::npos);
  EXPECT_NE(error("[[rule]]\nname = \"a\"\nanomaly = true\n").find("needs a metric"), std::string::npos);
}

TEST(AlertRules, AnomalyRuleFiresWhileFlaggedAndResolves) {
  auto cfg = parse_alert_config("builtin_rules = false\n[[rule]]\nname = \"odd_power\"\nmetric = \"power_w\"\n"
                                "anomaly = true\n",
                                "rules.toml");
  AlertEvaluator ev(cfg.rules);
  std::vector<AlertTransition> out;
  std::vector<AlertChange> seen;
  for (int k = 0; k < 6; ++k) {
    Frame f;
    f.ts_ms = ts(k);
    f.mono = SteadyClock::time_point(std::chrono::seconds(k + 1));
    GpuSample g;
    g.gpu_index = 1;
    g.power_w = 400;
    f.gpus.push_back(g);
    if (k == 2 || k == 3) f.anomalies.emplace_back(1, "power_w");
    if (k == 3) f.anomalies.emplace_back(0, "power_w"); // another GPU's flag is not gpu1's
    ev.evaluate(f, out);
    for (const auto& t : out) {
      seen.push_back(t.change);
      EXPECT_EQ(t.scope, "gpu1");
      if (t.change == AlertChange::Firing) {
        EXPECT_EQ(ev.message(t), "odd_power on gpu1: power_w is anomalous (the `anomaly` event says how)");
      }
      if (t.change == AlertChange::Resolved) {
        EXPECT_EQ(ev.message(t), "odd_power on gpu1 resolved: power_w is no longer anomalous");
      }
    }
  }
  EXPECT_EQ(seen, (std::vector<AlertChange>{AlertChange::Firing, AlertChange::Resolved}));
}

} // namespace unit_anomaly
