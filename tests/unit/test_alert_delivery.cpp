// Issue 32 (a resolution that reads true, Alertmanager's endsAt) and issue 31 (one end-of-run delivery deadline for
// all notifiers together).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "alerts/engine.hpp"
#include "alerts/evaluator.hpp"
#include "alerts/notifiers.hpp"
#include "alerts/rules.hpp"

namespace unit_alert_delivery { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace std::chrono_literals;

namespace {

Frame frame(int64_t tick, double util_pct, double temp_c) {
  Frame f;
  f.tick = tick;
  f.mono = SteadyClock::time_point(std::chrono::seconds(1000 + tick));
  f.ts_ms = 1'700'000'000'000 + 1000 * tick;
  GpuSample g;
  g.gpu_index = 0;
  g.util_gpu_pct = util_pct;
  g.temp_gpu_c = temp_c;
  f.gpus.push_back(g);
  return f;
}

// A loopback port whose connections the kernel accepts (its backlog) and nobody ever answers.
struct DeadPort {
  int fd = -1, port = 0;
  DeadPort() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd, 16);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~DeadPort() { close(fd); }
};

} // namespace

TEST(AlertResolution, TheMessageSaysWhatHoldsNow) {
  // A stalled GPU: utilisation below 50 %, cleared above 60 %. The firing message is the rule's template; the
  // resolution once read "gpu_stalled on gpu0: 98 < 50".
  auto cfg = parse_alert_config(R"(builtin_rules = false
[[rule]]
name = "gpu_stalled"
metric = "util_gpu_pct"
op = "<"
threshold = 50
clear_above = 60
for = "0s"

[[rule]]
name = "warm"
metric = "temp_gpu_c"
op = ">="
threshold = 80
for = "0s"
message = "{scope} at {value} °C, above {threshold} °C"
)",
                                "rules.toml");
  AlertEvaluator ev(cfg.rules);
  std::vector<AlertTransition> out;
  ev.evaluate(frame(0, 20, 85), out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].change, AlertChange::Firing);
  EXPECT_EQ(ev.message(out[0]), "gpu_stalled on gpu0: 20 < 50");
  EXPECT_EQ(ev.message(out[1]), "gpu0 at 85 °C, above 80 °C");
  ev.evaluate(frame(1, 98, 79), out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].change, AlertChange::Resolved);
  EXPECT_EQ(ev.message(out[0]), "gpu_stalled on gpu0 resolved: 98 > 60 %");
  // Without a clear level it resolves as soon as the condition stops holding: >= 80 no longer, so below 80.
  EXPECT_EQ(out[1].change, AlertChange::Resolved);
  EXPECT_EQ(ev.message(out[1]), "warm on gpu0 resolved: 79 < 80 C");
}

TEST(AlertmanagerBody, FiringCarriesEndsAtAheadAndTheGpuLabels) {
  AlertNotification n;
  n.rule = "hot";
  n.severity = "critical";
  n.scope = "gpu3";
  n.state = "firing";
  n.message = "gpu3 at 90 C";
  n.ts_ms = 1'700'000'000'000;
  n.since_ms = 1'699'999'990'000;
  n.host = "node7";
  n.task = "train";
  n.gpu = "3";
  n.uuid = "GPU-abc";
  n.ends_ms = n.ts_ms + 4 * 60'000;
  auto a = nlohmann::json::parse(alertmanager_body(n))[0];
  EXPECT_EQ(a["labels"]["gpu"], "3");
  EXPECT_EQ(a["labels"]["uuid"], "GPU-abc");
  EXPECT_EQ(a["labels"]["host"], "node7");
  EXPECT_EQ(a["labels"]["scope"], "gpu3");
  EXPECT_EQ(a["startsAt"], "2023-11-14T22:13:10.000Z");
  EXPECT_EQ(a["endsAt"], "2023-11-14T22:17:20.000Z"); // four minutes ahead: Alertmanager keeps it until then
  n.state = "resolved";
  n.ends_ms = n.ts_ms;
  a = nlohmann::json::parse(alertmanager_body(n))[0];
  EXPECT_EQ(a["endsAt"], "2023-11-14T22:13:20.000Z");
  n.scope = "cpu"; // no GPU: no gpu label, rather than an empty one
  n.gpu.clear();
  n.uuid.clear();
  a = nlohmann::json::parse(alertmanager_body(n))[0];
  EXPECT_FALSE(a["labels"].contains("gpu"));
}

TEST(AlertEngine, ThreeDeadNotifiersShareOneDeliveryDeadline) {
  // Each notifier waits on an endpoint that never answers, with a timeout far past the deadline: stopping them one
  // after the other once added each one's abort latency (up to a second, libcurl's progress interval) to the others'.
  DeadPort d1, d2, d3;
  AlertConfig cfg = parse_alert_config("builtin_rules = false\n[[rule]]\nname = \"hot\"\nmetric = \"temp_gpu_c\"\n"
                                       "threshold = 85\nfor = \"0s\"\n",
                                       "rules.toml");
  for (int port : {d1.port, d2.port, d3.port}) {
    NotifierConfig n;
    n.kind = NotifierConfig::Kind::Webhook;
    n.name = "webhook[" + std::to_string(port) + "]";
    n.url = "http://127.0.0.1:" + std::to_string(port) + "/hook";
    n.timeout = 30s;
    n.retries = 0;
    cfg.notifiers.push_back(n);
  }
  std::atomic<int> failed{0};
  AlertEngine engine(cfg, {"node7", "run1", "t", true}, [&](Event e) {
    if (e.kind == "alert-delivery-failed") failed++;
  });
  engine.start();
  engine.offer(std::make_shared<const Frame>(frame(0, 50, 90)));
  std::this_thread::sleep_for(300ms); // all three are waiting on their endpoints
  const auto t0 = SteadyClock::now();
  engine.stop(t0 + 1s);
  const auto took = SteadyClock::now() - t0;
  EXPECT_GE(took, 950ms);
  EXPECT_LT(took, 1200ms) << std::chrono::duration<double>(took).count() << " s";
  EXPECT_EQ(failed.load(), 6); // per notifier: the firing one cut short, and the run's end resolving it, left
}

TEST(AlertRules, ResendEveryIsAlertmanagersBoundedAndNamedWithItsLine) {
  auto cfg = parse_alert_config("[[alertmanager]]\nurl = \"http://am:9093\"\nresend_every = \"30s\"\n", "r.toml");
  ASSERT_EQ(cfg.notifiers.size(), 1u);
  EXPECT_EQ(cfg.notifiers[0].resend_every, 30s);
  EXPECT_EQ(parse_alert_config("[[alertmanager]]\nurl = \"http://am:9093\"\n", "r.toml").notifiers[0].resend_every,
            60s);
  auto error = [](const std::string& text) {
    try {
      parse_alert_config(text, "r.toml");
    } catch (const AlertConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error("[[webhook]]\nurl = \"http://x/\"\nresend_every = \"1m\"\n")
                .find("r.toml:3: resend_every is for "
                      "[[alertmanager]] only"),
            std::string::npos);
  for (const char* bad : {"\"1h\"", "\"100ms\"", "0", "\"soon\""})
    EXPECT_NE(
        error(std::string("[[alertmanager]]\nurl = \"http://am/\"\nresend_every = ") + bad + "\n").find("r.toml:3:"),
        std::string::npos)
        << bad;
}

} // namespace unit_alert_delivery
