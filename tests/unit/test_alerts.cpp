// Alert rules (parsing, line numbers, did-you-mean) and the state machines, driven frame by frame (issue 14).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include <nlohmann/json.hpp>

#include "alerts/engine.hpp"
#include "alerts/evaluator.hpp"
#include "alerts/notifiers.hpp"
#include "alerts/rules.hpp"

namespace unit_alerts { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace std::chrono_literals;

namespace {

// Frames one second apart.
struct Clock {
  SteadyClock::time_point t0 = SteadyClock::now();
  int64_t tick = 0;
  Frame next() {
    Frame f;
    f.tick = tick;
    f.mono = t0 + std::chrono::seconds(tick);
    f.ts_ms = 1'700'000'000'000 + 1000 * tick;
    ++tick;
    return f;
  }
};

GpuSample gpu(int i, double temp_c) {
  GpuSample s;
  s.gpu_index = i;
  s.temp_gpu_c = temp_c;
  return s;
}

AlertConfig parse(const std::string& text) {
  return parse_alert_config(text, "rules.toml");
}

// Only the file's rules, no built-ins.
std::vector<AlertRule> rules(const std::string& text) {
  return parse("builtin_rules = false\n" + text).rules;
}

std::vector<std::string> changes(const std::vector<AlertTransition>& ts) {
  std::vector<std::string> out;
  for (const auto& t : ts)
    out.push_back(std::string(to_string(t.change)) + ":" + t.scope + (t.notify ? ":notify" : ""));
  return out;
}

const char* kHot = R"(
[[rule]]
name = "hot"
metric = "temp_gpu_c"
op = ">"
threshold = 85
clear_below = 80
for = "3s"
)";

} // namespace

TEST(AlertRules, BuiltinsAreTheIssuesDefaults) {
  auto b = builtin_alert_rules();
  auto find = [&](const std::string& n) {
    auto it = std::find_if(b.begin(), b.end(), [&](const AlertRule& r) { return r.name == n; });
    EXPECT_NE(it, b.end()) << n;
    return it == b.end() ? AlertRule{} : *it;
  };
  EXPECT_EQ(find("gpu_utilization_high").threshold, 90);
  EXPECT_EQ(find("gpu_memory_high").relative_to, "mem_total_bytes");
  EXPECT_EQ(find("gpu_memory_high").threshold, 80);
  EXPECT_EQ(find("gpu_temperature_high").threshold, 85);
  EXPECT_EQ(find("gpu_power_near_limit").relative_to, "power_limit_w");
  EXPECT_EQ(find("gpu_power_near_limit").threshold, 95);
  EXPECT_EQ(find("gpu_thermal_throttling").op, AlertOp::Bits);
  EXPECT_EQ(find("gpu_lost").kind, AlertKind::DeviceLost);
  EXPECT_EQ(find("gpu_idle_allocated").for_ms, 600s);
  EXPECT_TRUE(find("gpu_idle_allocated").allocated_only);
}

TEST(AlertRules, AFileAddsReplacesAndRemovesBuiltins) {
  auto cfg = parse(R"(
[[rule]]
name = "gpu_temperature_high"
metric = "temp_gpu_c"
threshold = 70

[[rule]]
name = "gpu_utilization_high"
enabled = false

[[rule]]
name = "cpu_busy"
scope = "cpu"
metric = "util_pct"
threshold = 95
for = "1m"
severity = "info"
)");
  const auto n = builtin_alert_rules().size();
  EXPECT_EQ(cfg.rules.size(), n); // one replaced, one removed, one added
  auto hot = std::find_if(cfg.rules.begin(), cfg.rules.end(), [](auto& r) { return r.name == "gpu_temperature_high"; });
  ASSERT_NE(hot, cfg.rules.end());
  EXPECT_EQ(hot->threshold, 70);
  EXPECT_FALSE(hot->builtin);
  EXPECT_EQ(hot->line, 2);
  EXPECT_EQ(std::count_if(cfg.rules.begin(), cfg.rules.end(), [](auto& r) { return r.name == "gpu_utilization_high"; }),
            0);
  auto cpu = std::find_if(cfg.rules.begin(), cfg.rules.end(), [](auto& r) { return r.name == "cpu_busy"; });
  ASSERT_NE(cpu, cfg.rules.end());
  EXPECT_EQ(cpu->scope, AlertScope::Cpu);
  EXPECT_EQ(cpu->for_ms, 60s);
  EXPECT_EQ(parse("builtin_rules = false\n").rules.size(), 0u);
}

TEST(AlertRules, ASyntaxErrorNamesItsLine) {
  try {
    parse("builtin_rules = false\n\n[[rule]]\nname = \"x\nmetric = \"temp_gpu_c\"\n");
    FAIL() << "parsed";
  } catch (const AlertConfigError& e) {
    EXPECT_EQ(e.line, 4) << e.what();
    EXPECT_NE(std::string(e.what()).find("rules.toml:4:"), std::string::npos) << e.what();
  }
}

TEST(AlertRules, AnUnknownMetricNamesItsLineAndTheNearestName) {
  try {
    parse("[[rule]]\nname = \"hot\"\nthreshold = 85\nmetric = \"temp_gpu\"\n");
    FAIL() << "parsed";
  } catch (const AlertConfigError& e) {
    EXPECT_EQ(e.line, 4) << e.what();
    EXPECT_NE(std::string(e.what()).find("did you mean 'temp_gpu_c'"), std::string::npos) << e.what();
  }
  // The names come from the registry, per scope: a CPU metric is not a GPU one.
  try {
    parse("[[rule]]\nname = \"x\"\nscope = \"cpu\"\nmetric = \"temp_gpu_c\"\nthreshold = 1\n");
    FAIL() << "parsed";
  } catch (const AlertConfigError& e) {
    EXPECT_EQ(e.line, 4) << e.what();
    EXPECT_NE(std::string(e.what()).find("util_pct"), std::string::npos) << e.what();
  }
}

TEST(AlertRules, SemanticMistakesNameTheirLine) {
  struct Case {
    std::string text;
    int line;
    std::string says;
  } cases[] = {
      {"[[rule]]\nname = \"a\"\nmetric = \"temp_gpu_c\"\nthreshold = 85\nclear_below = 90\n", 5, "never resolve"},
      {"[[rule]]\nname = \"a\"\nmetric = \"temp_gpu_c\"\nthreshold = 85\nfor = \"soon\"\n", 5, "'for'"},
      {"[[rule]]\nname = \"a\"\nmetric = \"temp_gpu_c\"\nthreshold = 85\nseverity = \"panic\"\n", 5, "severity"},
      {"[[rule]]\nname = \"a\"\nmetric = \"temp_gpu_c\"\nthreshold = 85\nthreshhold = 3\n", 5,
       "did you mean 'threshold'"},
      {"[[rule]]\nname = \"a\"\nmetric = \"temp_gpu_c\"\n", 1, "needs a threshold"},
      {"\n[[email]]\nurl = \"smtp://x:25\"\nfrom = \"a@b\"\nto = [\"c@d\"]\npassword = \"hunter2\"\n", 6,
       "never go in the rules file"},
      {"[[webhook]]\nurl = \"ftp://x\"\n", 2, "needs url"},
      {"colour = 3\n", 1, "unknown key 'colour'"},
  };
  for (const auto& c : cases) {
    try {
      parse(c.text);
      ADD_FAILURE() << "parsed: " << c.text;
    } catch (const AlertConfigError& e) {
      EXPECT_EQ(e.line, c.line) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
}

TEST(AlertEvaluator, FiresAfterForAndResolvesWithHysteresis) {
  AlertEvaluator ev(rules(kHot));
  Clock c;
  std::vector<AlertTransition> out;
  std::vector<std::string> seen;
  // 70, then 90 for 5 s, then 82 (between clear and threshold: still firing), then 79 (resolved).
  const double temps[] = {70, 90, 90, 90, 90, 90, 82, 82, 79, 79};
  for (double t : temps) {
    Frame f = c.next();
    f.gpus.push_back(gpu(0, t));
    ev.evaluate(f, out);
    for (auto& s : changes(out))
      seen.push_back(std::to_string(f.tick) + ":" + s);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"1:pending:gpu0", "4:firing:gpu0:notify", "8:resolved:gpu0:notify"}));
}

TEST(AlertEvaluator, AFlappingValueDoesNotStorm) {
  auto r = rules(std::string(kHot) + "repeat_every = \"1h\"\n");
  r[0].for_ms = 0ms;
  AlertEvaluator ev(r);
  Clock c;
  std::vector<AlertTransition> out;
  int notified = 0, fired = 0;
  // Around the threshold but never below the clear level: one firing, nothing more.
  for (int k = 0; k < 100; ++k) {
    Frame f = c.next();
    f.gpus.push_back(gpu(0, k % 2 ? 86 : 84));
    ev.evaluate(f, out);
    for (auto& t : out) {
      fired += t.change == AlertChange::Firing;
      notified += t.notify;
    }
  }
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(notified, 1);
  // Across both levels each tick: transitions are recorded, but within repeat_every only the first firing and its
  // resolution are notified.
  fired = notified = 0;
  for (int k = 0; k < 100; ++k) {
    Frame f = c.next();
    f.gpus.push_back(gpu(0, k % 2 ? 90 : 70));
    ev.evaluate(f, out);
    for (auto& t : out) {
      fired += t.change == AlertChange::Firing;
      notified += t.notify;
    }
  }
  EXPECT_GE(fired, 49);
  EXPECT_LE(notified, 1); // the episode open from above resolves once, notified; the rest are not
}

TEST(AlertEvaluator, RepeatsNoMoreOftenThanRepeatEvery) {
  auto r = rules(std::string(kHot) + "repeat_every = \"10s\"\n");
  AlertEvaluator ev(r);
  Clock c;
  std::vector<AlertTransition> out;
  int repeats = 0;
  for (int k = 0; k < 45; ++k) {
    Frame f = c.next();
    f.gpus.push_back(gpu(0, 95));
    ev.evaluate(f, out);
    for (auto& t : out)
      repeats += t.change == AlertChange::Repeat;
  }
  // Fired at tick 3, repeated at 13, 23, 33, 43.
  EXPECT_EQ(repeats, 4);
}

TEST(AlertEvaluator, ASteadyHealthyGpuTripsNothing) {
  AlertEvaluator ev(builtin_alert_rules());
  ev.set_run_mode(false);
  Clock c;
  std::vector<AlertTransition> out;
  for (int k = 0; k < 2000; ++k) {
    Frame f = c.next();
    for (int i = 0; i < 4; ++i) {
      GpuSample s = gpu(i, 65);
      s.util_gpu_pct = 75;
      s.mem_used_bytes = 40LL << 30;
      s.mem_total_bytes = 80LL << 30;
      s.power_w = 400;
      s.power_limit_w = 700;
      s.throttle_reasons = 0x1; // GPU idle bit only: no thermal or power reason
      f.gpus.push_back(s);
    }
    ev.evaluate(f, out);
    ASSERT_TRUE(out.empty()) << changes(out)[0];
  }
}

TEST(AlertEvaluator, RelativeThresholdsUseTheDevicesOwnLimit) {
  AlertEvaluator ev(rules(R"(
[[rule]]
name = "vram"
metric = "mem_used_bytes"
threshold = 80
relative_to = "mem_total_bytes"
clear_below = 70
)"));
  Clock c;
  std::vector<AlertTransition> out;
  Frame f = c.next();
  GpuSample s;
  s.mem_total_bytes = 1000;
  s.mem_used_bytes = 790;
  f.gpus.push_back(s);
  ev.evaluate(f, out);
  EXPECT_TRUE(out.empty());
  // The total is read once (a later tick may not repeat it): the latest known value is used.
  f = c.next();
  s.mem_total_bytes.reset();
  s.mem_used_bytes = 810;
  f.gpus = {s};
  ev.evaluate(f, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].change, AlertChange::Firing);
  EXPECT_DOUBLE_EQ(*out[0].value, 81);
  EXPECT_DOUBLE_EQ(*out[0].raw, 810);
  EXPECT_NE(ev.message(out[0]).find("81"), std::string::npos);
}

TEST(AlertEvaluator, ThrottleBitsDeviceLostAndMissingValues) {
  auto r = rules(R"(
[[rule]]
name = "thermal"
metric = "throttle_reasons"
op = "bits"
threshold = 0x60

[[rule]]
name = "lost"
kind = "device_lost"
)");
  AlertEvaluator ev(r);
  Clock c;
  std::vector<AlertTransition> out;
  Frame f = c.next();
  GpuSample s;
  s.throttle_reasons = 0x4; // power cap only
  f.gpus = {s};
  ev.evaluate(f, out);
  EXPECT_TRUE(out.empty());
  f = c.next();
  s.throttle_reasons = 0x24; // + SW thermal
  f.gpus = {s};
  ev.evaluate(f, out);
  EXPECT_EQ(changes(out), std::vector<std::string>{"firing:gpu0:notify"});
  // A tick where the value is missing changes nothing (missing is not 0).
  f = c.next();
  s.throttle_reasons.reset();
  f.gpus = {s};
  ev.evaluate(f, out);
  EXPECT_TRUE(out.empty());
  f = c.next();
  f.events.push_back({0, f.ts_ms, "device-lost", "gpu3", "GPU_IS_LOST"});
  ev.evaluate(f, out);
  EXPECT_EQ(changes(out), std::vector<std::string>{"firing:gpu3:notify"});
  f = c.next();
  f.events.push_back({0, f.ts_ms, "device-lost", "gpu3", "GPU_IS_LOST"});
  ev.evaluate(f, out);
  EXPECT_TRUE(out.empty()); // once
  auto firing = ev.firing();
  EXPECT_EQ(firing.size(), 2u);
}

TEST(AlertEvaluator, IdleAllocatedOnlyCountsGpusAProcessHolds) {
  auto r = rules(R"(
[[rule]]
name = "idle"
metric = "util_gpu_pct"
op = "<"
threshold = 1
clear_above = 5
for = "10s"
allocated_only = true
)");
  AlertEvaluator ev(r);
  Clock c;
  std::vector<AlertTransition> out;
  std::vector<std::string> seen;
  for (int k = 0; k < 30; ++k) {
    Frame f = c.next();
    if (k % 5 == 0) { // a process scan: gpu1 is held by a process from the start, gpu0 by none
      f.processes = std::make_shared<ProcessSnapshot>();
      GpuProcessSample gp;
      gp.gpu_index = 1;
      f.processes->gpu_procs.push_back(gp);
    }
    for (int i = 0; i < 2; ++i) {
      GpuSample s;
      s.gpu_index = i;
      s.util_gpu_pct = 0;
      f.gpus.push_back(s);
    }
    ev.evaluate(f, out);
    for (auto& s : changes(out))
      seen.push_back(s);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"pending:gpu1", "firing:gpu1:notify"}));
  // In `run`, every GPU the run records is the run's.
  AlertEvaluator run(r);
  run.set_run_mode(true);
  int fired = 0;
  for (int k = 0; k < 15; ++k) {
    Frame f = c.next();
    GpuSample s;
    s.util_gpu_pct = 0;
    f.gpus = {s};
    run.evaluate(f, out);
    for (auto& t : out)
      fired += t.change == AlertChange::Firing;
  }
  EXPECT_EQ(fired, 1);
}

TEST(AlertEvaluator, UnitAndZoneScopes) {
  AlertEvaluator ev(rules(R"(
[[rule]]
name = "unit_power"
scope = "unit"
metric = "power_w"
threshold = 300

[[rule]]
name = "dram"
scope = "zone"
zone = "dram"
metric = "power_w"
threshold = 20
)"));
  Clock c;
  std::vector<AlertTransition> out;
  Frame f = c.next();
  f.processes = std::make_shared<ProcessSnapshot>();
  UnitSample u;
  u.unit = "slurm job 42";
  u.cpu_power_w = 100;
  u.gpu_power_w = 250;
  f.processes->units.push_back(u);
  f.cpu.zones.push_back({"package", "intel-rapl:0", 0, 50.0, 1.0});
  f.cpu.zones.push_back({"dram", "intel-rapl:0:0", 0, 25.0, 1.0});
  ev.evaluate(f, out);
  EXPECT_EQ(changes(out), (std::vector<std::string>{"firing:slurm job 42:notify", "firing:intel-rapl:0:0:notify"}));
}

TEST(AlertNotifier, ADeadEndpointIsReportedAndStopsAtTheDeadline) {
  // A port that accepts (the kernel's backlog) and never answers.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  NotifierConfig cfg;
  cfg.name = "webhook[0]";
  cfg.url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "/hook";
  cfg.timeout = 300ms;
  cfg.retries = 1;
  cfg.backoff = 50ms;
  std::mutex mu;
  std::vector<std::string> failures;
  Notifier n(cfg, [&](const AlertNotification& an, const std::string& why) {
    std::lock_guard l(mu);
    failures.push_back(an.rule + ": " + why);
  });
  n.start();
  AlertNotification an;
  an.rule = "hot";
  const auto t0 = SteadyClock::now();
  for (int i = 0; i < 3; ++i)
    n.enqueue(an); // never blocks
  EXPECT_LT(SteadyClock::now() - t0, 100ms);
  std::this_thread::sleep_for(900ms); // the first one: two attempts of 300 ms and a 50 ms back-off
  n.stop(SteadyClock::now() + 200ms);
  EXPECT_LT(SteadyClock::now() - t0, 2500ms);
  close(fd);
  std::lock_guard l(mu);
  ASSERT_EQ(failures.size(), 3u);
  EXPECT_NE(failures[0].find("after 2 attempts"), std::string::npos) << failures[0];
  EXPECT_EQ(n.stats().sent.load(), 0);
  EXPECT_EQ(n.stats().failed.load(), 3);
}

TEST(AlertEngine, TransitionsBecomeEventsAndOfferNeverBlocks) {
  AlertConfig cfg;
  cfg.rules = rules(kHot);
  std::mutex mu;
  std::vector<Event> events;
  AlertEngine engine(cfg, {"node7", "run1", "t", false}, [&](Event e) {
    std::lock_guard l(mu);
    events.push_back(std::move(e));
  });
  engine.start();
  Clock c;
  for (int k = 0; k < 10; ++k) {
    Frame f = c.next();
    f.gpus.push_back(gpu(0, k < 6 ? 90 : 70));
    engine.offer(std::make_shared<const Frame>(std::move(f)));
  }
  engine.stop(SteadyClock::now());
  std::lock_guard l(mu);
  ASSERT_EQ(events.size(), 3u);
  std::vector<std::string> states;
  for (const auto& e : events) {
    EXPECT_EQ(e.kind, "alert");
    EXPECT_EQ(e.source, "gpu0");
    auto d = nlohmann::json::parse(e.detail);
    EXPECT_EQ(d["rule"], "hot");
    EXPECT_EQ(d["threshold"], 85);
    states.push_back(d["state"]);
  }
  EXPECT_EQ(states, (std::vector<std::string>{"pending", "firing", "resolved"}));
  auto j = engine.json();
  EXPECT_EQ(j["firing"].size(), 0u);
  EXPECT_EQ(j["recent"].size(), 3u);
  EXPECT_EQ(j["recent"][0]["state"], "resolved"); // newest first
}
} // namespace unit_alerts
