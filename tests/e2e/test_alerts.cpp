// Alerts end to end (issue 14): the real binary, the fake NVML library playing scripted values, and REAL endpoints
// started here inside the test's temp dir: an HTTP webhook receiver (in this process), an SMTP server (Debian's
// python3-aiosmtpd, tests/support/smtp_sink.py) and Prometheus Alertmanager (Debian's prometheus-alertmanager).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "http_client.hpp"

namespace e2e_alerts { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

int listen_loopback(int backlog = 16) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, backlog) != 0) return -1;
  return fd;
}
int port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// A webhook receiver: answers every POST 200 and keeps its body.
class WebhookReceiver {
public:
  WebhookReceiver() : fd_(listen_loopback()) {
    thread_ = std::thread([this] { loop(); });
  }
  ~WebhookReceiver() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  int port() const { return port_of(fd_); }
  std::vector<json> bodies() {
    std::lock_guard l(mu_);
    return bodies_;
  }

private:
  void loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string raw;
      const auto deadline = std::chrono::steady_clock::now() + 2s;
      size_t body_at = std::string::npos, length = 0;
      while (std::chrono::steady_clock::now() < deadline) {
        if (http::read_some(c, raw, deadline) <= 0) break;
        if (body_at == std::string::npos && (body_at = raw.find("\r\n\r\n")) != std::string::npos) {
          body_at += 4;
          std::string head = raw.substr(0, body_at);
          for (auto& ch : head)
            ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
          const auto cl = head.find("content-length:");
          if (cl != std::string::npos) length = std::stoul(head.substr(cl + 15));
        }
        if (body_at != std::string::npos && raw.size() >= body_at + length) break;
      }
      if (body_at != std::string::npos) {
        std::lock_guard l(mu_);
        try {
          bodies_.push_back(json::parse(raw.substr(body_at, length)));
        } catch (const std::exception&) {
          bodies_.push_back(json(raw.substr(body_at)));
        }
      }
      http::send_all(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
      close(c);
    }
  }
  int fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<json> bodies_;
};

// A child process (a real server) stopped with SIGTERM at the end of the test.
struct Child {
  int pid = -1;
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      wait_exit(pid);
    }
  }
};

std::string wait_for_file(const std::string& path, std::chrono::milliseconds within = 15s) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string s = read_file(path);
    if (!s.empty()) return s;
    std::this_thread::sleep_for(50ms);
  }
  return {};
}

// tests/support/smtp_sink.py in `dir`: its port, its mails in dir/mail-N.eml.
int start_smtp(const TempDir& t, const std::string& dir, Child& child) {
  std::filesystem::create_directories(dir);
  child.pid = start({"/usr/bin/python3", std::string(WATTSCOPE_SOURCE_DIR) + "/tests/support/smtp_sink.py", dir}, {},
                    t.path(), dir + "/out.txt", dir + "/err.txt");
  const std::string port = wait_for_file(dir + "/port");
  if (port.empty()) throw std::runtime_error("smtp_sink did not start: " + read_file(dir + "/err.txt"));
  return std::stoi(port);
}

std::vector<std::string> mails(const std::string& dir) {
  std::vector<std::string> out;
  for (int i = 1;; ++i) {
    std::string m = read_file(dir + "/mail-" + std::to_string(i) + ".eml");
    if (m.empty()) break;
    out.push_back(m);
  }
  return out;
}

// One GPU's metrics: constants, or a list per call (the last repeats).
json gpu(int i, json overrides = json::object()) {
  json m = {{"power_instant_mw", 300000},
            {"power_avg_mw", 300000},
            {"power_mw", 300000},
            {"energy_mj", json{{"linear", {1000000, 30}}}},
            {"util_gpu", 60},
            {"util_mem", 30},
            {"mem_used_bytes", 20LL << 30},
            {"mem_total_bytes", 80LL << 30},
            {"temp_gpu", 60},
            {"temp_mem", 60},
            {"clock_sm", 1500},
            {"clock_gfx", 1500},
            {"clock_mem", 2600},
            {"pcie_width", 16},
            {"pcie_width_max", 16},
            {"pcie_tx_kbs", 1000},
            {"pcie_rx_kbs", 1000},
            {"fan_pct", 40},
            {"pstate", 0},
            {"power_limit_mw", 700000},
            {"clock_events", 0},
            {"util_enc", 0},
            {"util_dec", 0}};
  for (auto& [k, v] : overrides.items())
    m[k] = v;
  return {{"name", "NVIDIA H100 80GB HBM3"},
          {"uuid", "GPU-alert-" + std::to_string(i)},
          {"pci_bus_id", "00000000:" + std::to_string(20 + i) + ":00.0"},
          {"max_clock_sm_mhz", 1980},
          {"max_clock_mem_mhz", 2619},
          {"metrics", m}};
}

json list(std::initializer_list<std::pair<int, double>> runs) {
  json a = json::array();
  for (auto [n, v] : runs)
    for (int i = 0; i < n; ++i)
      a.push_back(v);
  return a;
}

struct AlertRun {
  Result result;
  std::string db;
  double seconds = 0;
};

AlertRun run_fake(const TempDir& t, const json& devices, const std::string& rules, std::vector<std::string> args,
                  std::map<std::string, std::string> env = {}) {
  json scen = {{"driver_version", "550.54.15"}, {"nvml_version", "12.550.54.15"}, {"devices", devices}};
  write_file(t / "scenario.json", scen.dump());
  if (!rules.empty()) write_file(t / "alerts.toml", rules);
  env["WATTSCOPE_NVML_LIBRARY"] = fake_nvml();
  env["WATTSCOPE_FAKE_NVML_SCENARIO"] = t / "scenario.json";
  env["CUDA_VISIBLE_DEVICES"] = "\x01";
  env.emplace("HOME", t.path()); // never the real ~/.config/wattscope/alerts.toml
  env.emplace("XDG_CONFIG_HOME", t / "config");
  std::vector<std::string> argv = {wattscope()};
  argv.insert(argv.end(), args.begin(), args.end());
  if (!rules.empty()) {
    argv.insert(argv.begin() + 2, t / "alerts.toml");
    argv.insert(argv.begin() + 2, "--alerts");
  }
  AlertRun r;
  const auto t0 = std::chrono::steady_clock::now();
  r.result = run(argv, env, t.path());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.db = t / "wattscope.db";
  return r;
}

// The alert events of a run: (source, rule, state).
std::vector<std::tuple<std::string, std::string, std::string>> alert_events(const std::string& db) {
  std::vector<std::tuple<std::string, std::string, std::string>> out;
  for (const auto& row : query(db, "SELECT source, detail FROM events WHERE kind = 'alert' ORDER BY seq")) {
    auto d = json::parse(*row[1]);
    out.emplace_back(*row[0], d["rule"].get<std::string>(), d["state"].get<std::string>());
  }
  return out;
}

const char* kHotRule = R"(builtin_rules = false

[[rule]]
name = "hot"
metric = "temp_gpu_c"
op = ">"
threshold = 85
clear_below = 80
for = "300ms"
severity = "critical"
message = "{scope} at {value} C"
)";

} // namespace

TEST(Alerts, FireAfterForResolveWithHysteresisAndArriveOnceAtTheWebhookAndSmtp) {
  TempDir t;
  WebhookReceiver hook;
  Child smtp;
  const int smtp_port = start_smtp(t, t / "smtp", smtp);
  // gpu0: 70 °C, 90 °C for 12 ticks, 83 °C (between the clear level and the threshold: still firing), then 75 °C.
  // gpu1: a steady 60 °C.
  json devs = json::array({gpu(0, {{"temp_gpu", list({{5, 70}, {12, 90}, {6, 83}, {1, 75}})}}), gpu(1)});
  std::string rules = std::string(kHotRule) + "\n[[webhook]]\nurl = \"http://127.0.0.1:" + std::to_string(hook.port()) +
                      "/hook\"\n\n[[email]]\nurl = \"smtp://127.0.0.1:" + std::to_string(smtp_port) +
                      "\"\nfrom = \"wattscope@test.invalid\"\nto = [\"ops@test.invalid\"]\nstarttls = \"off\"\n";
  AlertRun r = run_fake(t, devs, rules, {"run", "--interval", "100ms", "--", "sleep", "3.5"});
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;

  auto ev = alert_events(r.db);
  using E = std::tuple<std::string, std::string, std::string>;
  EXPECT_EQ(ev, (std::vector<E>{{"gpu0", "hot", "pending"}, {"gpu0", "hot", "firing"}, {"gpu0", "hot", "resolved"}}));
  // It fired after `for` (ticks 5, 6, 7, 8 at 100 ms: pending at the first hot tick, firing >= 300 ms later) and
  // resolved at the first tick below 80 (the 24th), not at the first below 85.
  auto ticks = query(r.db, "SELECT e.ts_ms, json_extract(e.detail, '$.state'), json_extract(e.detail, '$.value') "
                           "FROM events e WHERE kind = 'alert' ORDER BY seq");
  ASSERT_EQ(ticks.size(), 3u);
  EXPECT_GE(std::stoll(*ticks[1][0]) - std::stoll(*ticks[0][0]), 250);
  EXPECT_EQ(*ticks[2][2], "75.0");

  auto bodies = hook.bodies();
  ASSERT_EQ(bodies.size(), 2u) << json(bodies).dump();
  EXPECT_EQ(bodies[0]["state"], "firing");
  EXPECT_EQ(bodies[0]["rule"], "hot");
  EXPECT_EQ(bodies[0]["scope"], "gpu0");
  EXPECT_EQ(bodies[0]["value"], 90);
  EXPECT_EQ(bodies[0]["threshold"], 85);
  EXPECT_EQ(bodies[0]["message"], "gpu0 at 90 C");
  EXPECT_NE(bodies[0]["text"].get<std::string>().find("[FIRING] hot on gpu0"), std::string::npos);
  EXPECT_EQ(bodies[1]["state"], "resolved");

  auto m = mails(t / "smtp");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_NE(m[0].find("X-Envelope-To: ops@test.invalid"), std::string::npos) << m[0];
  EXPECT_NE(m[0].find("Subject: [wattscope] [FIRING] hot on gpu0"), std::string::npos) << m[0];
  EXPECT_NE(m[0].find("gpu0 at 90 C"), std::string::npos) << m[0];
  EXPECT_NE(m[1].find("[RESOLVED] hot on gpu0"), std::string::npos) << m[1];
  EXPECT_EQ(scalar(r.db, "SELECT count(*) FROM events WHERE kind = 'alert-delivery-failed'"), "0");
}

TEST(Alerts, EveryBuiltinRuleTripsOnItsGpuAndAHealthyGpuTripsNothing) {
  TempDir t;
  // The built-in rules, restated with short `for`s (a file can say everything a built-in says).
  std::string rules = "builtin_rules = false\n";
  for (const char* r : {
           R"(name = "gpu_utilization_high"
metric = "util_gpu_pct"
threshold = 90
clear_below = 85
for = "300ms")",
           R"(name = "gpu_memory_high"
metric = "mem_used_bytes"
threshold = 80
relative_to = "mem_total_bytes"
clear_below = 75
for = "300ms")",
           R"(name = "gpu_temperature_high"
metric = "temp_gpu_c"
threshold = 85
clear_below = 80
for = "300ms")",
           R"(name = "gpu_power_near_limit"
metric = "power_w"
threshold = 95
relative_to = "power_limit_w"
clear_below = 90
for = "300ms")",
           R"(name = "gpu_thermal_throttling"
metric = "throttle_reasons"
op = "bits"
threshold = 0x68
for = "300ms")",
           R"(name = "gpu_power_throttling"
metric = "throttle_reasons"
op = "bits"
threshold = 0x84
for = "300ms")",
           R"(name = "gpu_lost"
kind = "device_lost")",
           R"(name = "gpu_idle_allocated"
metric = "util_gpu_pct"
op = "<"
threshold = 1
clear_above = 5
allocated_only = true
for = "300ms")"})
    rules += std::string("\n[[rule]]\n") + r + "\n";
  json devs = json::array({
      gpu(0, {{"temp_gpu", 90}, {"util_gpu", 95}}),
      gpu(1, {{"mem_used_bytes", 70LL << 30}, {"power_instant_mw", 690000}, {"power_mw", 690000}}),
      gpu(2, {{"clock_events", 0x20}}), gpu(3, {{"clock_events", 0x4}, {"util_gpu", 0}}),
      gpu(4), // healthy
  });
  devs[2]["lost_at_tick"] = 12;
  AlertRun r = run_fake(t, devs, rules, {"run", "--interval", "100ms", "--", "sleep", "2"});
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
  std::set<std::pair<std::string, std::string>> fired;
  for (const auto& [src, rule, state] : alert_events(r.db))
    if (state == "firing") fired.insert({src, rule});
  EXPECT_EQ(fired, (std::set<std::pair<std::string, std::string>>{
                       {"gpu0", "gpu_temperature_high"},
                       {"gpu0", "gpu_utilization_high"},
                       {"gpu1", "gpu_memory_high"},
                       {"gpu1", "gpu_power_near_limit"},
                       {"gpu2", "gpu_thermal_throttling"},
                       {"gpu2", "gpu_lost"},
                       {"gpu3", "gpu_power_throttling"},
                       {"gpu3", "gpu_idle_allocated"},
                   }));
  EXPECT_EQ(scalar(r.db, "SELECT count(*) FROM events WHERE kind = 'alert' AND source = 'gpu4'"), "0");
  // The memory value is the share of the device's own total: 70 of 80 GiB.
  EXPECT_EQ(scalar(r.db, "SELECT json_extract(detail, '$.value') FROM events WHERE kind = 'alert' AND source = 'gpu1' "
                         "AND json_extract(detail, '$.rule') = 'gpu_memory_high' LIMIT 1"),
            "87.5");
}

TEST(Alerts, ADeadWebhookDoesNotStallSampling) {
  TempDir t;
  // Accepts (the kernel's backlog) and never answers.
  const int dead = listen_loopback(64);
  ASSERT_GE(dead, 0);
  std::string rules = std::string(kHotRule) +
                      "\n[[webhook]]\nurl = \"http://127.0.0.1:" + std::to_string(port_of(dead)) +
                      "/hook\"\ntimeout = \"1s\"\nretries = 10\nbackoff = \"100ms\"\n";
  // Hot and cool in turns of 12 ticks (600 ms; the rule's `for` is 300 ms): several firings, each one waiting behind
  // the dead endpoint.
  json temps = json::array();
  for (int k = 0; k < 80; ++k)
    temps.push_back((k / 12) % 2 ? 70 : 95);
  AlertRun r = run_fake(t, json::array({gpu(0, {{"temp_gpu", temps}})}), rules,
                        {"run", "--interval", "50ms", "--", "sleep", "3"});
  close(dead);
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
  // Every tick was sampled and stored: 3 s at 50 ms is ~60 ticks, and none was skipped for the webhook.
  const int samples = std::stoi(scalar(r.db, "SELECT count(*) FROM cpu_samples"));
  EXPECT_GE(samples, 45) << r.result.err;
  // The GPU answered nearly every tick: a stall behind the webhook (1 s a try) would cost whole seconds of them, where
  // a loaded machine's fake library can miss a tick's deadline now and then (48 of 52 seen at -j8 on 2 cores).
  EXPECT_GE(std::stoi(scalar(r.db, "SELECT count(*) FROM gpu_samples")), samples - samples / 10) << r.result.err;
  EXPECT_EQ(scalar(r.db, "SELECT samples FROM runs"), std::to_string(samples));
  EXPECT_GE(std::stoi(scalar(r.db, "SELECT count(*) FROM events WHERE kind = 'alert' AND "
                                   "json_extract(detail, '$.state') = 'firing'")),
            2);
  // The undelivered notifications are events, and the run's end waited a bounded time for them.
  EXPECT_GE(std::stoi(scalar(r.db, "SELECT count(*) FROM events WHERE kind = 'alert-delivery-failed'")), 1);
  EXPECT_LT(r.seconds, 3 + 5 + 4) << r.result.err;
}

TEST(Alerts, AlertmanagerReceivesTheAlertThroughItsV2Api) {
  TempDir t;
  // A free port for Alertmanager (closed just before it binds it).
  const int probe = listen_loopback();
  const int am_port = port_of(probe);
  close(probe);
  write_file(t / "am.yml", "route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n");
  Child am;
  am.pid = start({"/usr/bin/prometheus-alertmanager", "--config.file=" + (t / "am.yml"), "--storage.path=" + (t / "am"),
                  "--web.listen-address=127.0.0.1:" + std::to_string(am_port), "--cluster.listen-address="},
                 {}, t.path(), t / "am.out", t / "am.err");
  bool ready = false;
  for (int i = 0; i < 200 && !ready; ++i) {
    ready = http::get(am_port, "/-/ready").status == 200;
    if (!ready) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(ready) << read_file(t / "am.err");
  std::string rules =
      std::string(kHotRule) + "\n[[alertmanager]]\nurl = \"http://127.0.0.1:" + std::to_string(am_port) + "\"\n";
  AlertRun r = run_fake(t, json::array({gpu(0, {{"temp_gpu", 95}})}), rules,
                        {"run", "--interval", "100ms", "--tag", "x=y", "--", "sleep", "1.5"});
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
  auto resp = http::get(am_port, "/api/v2/alerts?active=true&silenced=true&inhibited=true&unprocessed=true");
  ASSERT_EQ(resp.status, 200) << resp.error;
  // Issue 32: the run ended while it fired, so wattscope resolved it (endsAt now) and Alertmanager lists it no more;
  // tests/e2e/test_prom_native.cpp checks what Alertmanager holds while it fires.
  EXPECT_EQ(json::parse(resp.body).size(), 0u) << resp.body;
  EXPECT_EQ(scalar(r.db, "SELECT count(*) FROM events WHERE kind = 'alert-delivery-failed'"), "0");
}

TEST(Alerts, CheckNamesTheLineOfABrokenFile) {
  TempDir t;
  write_file(t / "broken.toml", "builtin_rules = false\n\n[[rule]]\nname = \"hot\"\nmetric = \"temp_gpu_c\"\n"
                                "threshold = 85\nfor = 30s\n");
  auto r = run({wattscope(), "alerts", "check", t / "broken.toml"}, {}, t.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("broken.toml:7:"), std::string::npos) << r.err;
  write_file(t / "typo.toml", "[[rule]]\nname = \"hot\"\nthreshold = 85\nmetric = \"temperature\"\n");
  r = run({wattscope(), "alerts", "check", t / "typo.toml"}, {}, t.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("typo.toml:4:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean"), std::string::npos) << r.err;
  r = run({wattscope(), "alerts", "check", std::string(WATTSCOPE_SOURCE_DIR) + "/deploy/alerts.example.toml"}, {},
          t.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ok"), std::string::npos);
  // `run --alerts` refuses a broken file before starting anything, naming the line.
  r = run({wattscope(), "run", "--alerts", t / "broken.toml", "--", "true"}, {}, t.path());
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("broken.toml:7:"), std::string::npos) << r.err;
}

TEST(Alerts, ListShowsTheDefaultFileFromXdgConfigHome) {
  TempDir t;
  std::map<std::string, std::string> env = {{"HOME", t.path()}, {"XDG_CONFIG_HOME", t / "cfg"}};
  auto r = run({wattscope(), "alerts", "list"}, env, t.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("alerts are off"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gpu_temperature_high"), std::string::npos) << r.out;
  std::filesystem::create_directories(t / "cfg/wattscope");
  write_file(t / "cfg/wattscope/alerts.toml", std::string(kHotRule));
  r = run({wattscope(), "alerts", "list"}, env, t.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(t / "cfg/wattscope/alerts.toml"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hot"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("gpu_temperature_high"), std::string::npos) << r.out; // builtin_rules = false
}

TEST(Alerts, ServeAnswersApiAlertsAndExportsFiringAlerts) {
  TempDir t;
  json scen = {{"driver_version", "550.54.15"},
               {"nvml_version", "12.550.54.15"},
               {"devices", json::array({gpu(0, {{"temp_gpu", 95}}), gpu(1)})}};
  write_file(t / "scenario.json", scen.dump());
  write_file(t / "alerts.toml", std::string(kHotRule));
  const int pid =
      start({wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "100ms", "--alerts", t / "alerts.toml"},
            {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
             {"WATTSCOPE_FAKE_NVML_SCENARIO", t / "scenario.json"},
             {"CUDA_VISIBLE_DEVICES", "\x01"},
             {"HOME", t.path()}},
            t.path(), t / "out.txt", t / "err.txt");
  const int port = wait_for_serve_port(t / "err.txt");
  json j;
  for (int i = 0; i < 100; ++i) {
    auto r = http::get(port, "/api/v1/alerts");
    ASSERT_EQ(r.status, 200);
    j = json::parse(r.body);
    if (!j["firing"].empty()) break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(j["firing"].size(), 1u) << j.dump();
  EXPECT_EQ(j["firing"][0]["rule"], "hot");
  EXPECT_EQ(j["firing"][0]["scope"], "gpu0");
  EXPECT_EQ(j["rules"], 1);
  EXPECT_EQ(j["recent"][0]["state"], "firing");
  auto m = http::get(port, "/metrics");
  EXPECT_NE(m.body.find("wattscope_alerts_firing{rule=\"hot\",severity=\"critical\",scope=\"gpu0\""), std::string::npos)
      << m.body.substr(0, 2000);
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
}

TEST(Alerts, EmailGoesThroughStartTlsWithCredentialsFromTheEnvironment) {
  TempDir t;
  auto r = run({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", t / "key.pem", "-out",
                t / "cert.pem", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"},
               {}, t.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::filesystem::create_directories(t / "smtp");
  Child smtp;
  smtp.pid = start({"/usr/bin/python3", std::string(WATTSCOPE_SOURCE_DIR) + "/tests/support/smtp_sink.py", t / "smtp",
                    "--tls", t / "cert.pem", t / "key.pem", "--auth", "alerts-bot", "pa ss"},
                   {}, t.path(), t / "smtp/out.txt", t / "smtp/err.txt");
  const std::string port = wait_for_file(t / "smtp/port");
  ASSERT_FALSE(port.empty()) << read_file(t / "smtp/err.txt");
  const std::string rules =
      std::string(kHotRule) + "\n[[email]]\nurl = \"smtp://127.0.0.1:" + port +
      "\"\nfrom = \"wattscope@test.invalid\"\nto = [\"ops@test.invalid\", \"oncall@test.invalid\"]"
      "\nstarttls = \"required\"\nca_file = \"" +
      (t / "cert.pem") + "\"\nusername_env = \"T_SMTP_USER\"\npassword_env = \"T_SMTP_PASSWORD\"\n";
  AlertRun a =
      run_fake(t, json::array({gpu(0, {{"temp_gpu", 95}})}), rules, {"run", "--interval", "100ms", "--", "sleep", "1"},
               {{"T_SMTP_USER", "alerts-bot"}, {"T_SMTP_PASSWORD", "pa ss"}});
  ASSERT_EQ(a.result.exit_code, 0) << a.result.err;
  auto m = mails(t / "smtp");
  // The firing, and (issue 32) its resolution when the run ended while it still fired.
  ASSERT_EQ(m.size(), 2u) << a.result.err;
  EXPECT_NE(m[1].find("[RESOLVED] hot on gpu0"), std::string::npos) << m[1];
  EXPECT_NE(m[1].find("no longer watched (the run ended while it fired)"), std::string::npos) << m[1];
  EXPECT_NE(m[0].find("X-Tls: yes"), std::string::npos) << m[0];
  EXPECT_NE(m[0].find("X-Auth-User: alerts-bot"), std::string::npos) << m[0];
  EXPECT_NE(m[0].find("X-Envelope-To: ops@test.invalid, oncall@test.invalid"), std::string::npos) << m[0];
  // The password is in no argument of any process and in no stored row.
  EXPECT_EQ(a.result.err.find("pa ss"), std::string::npos);
  EXPECT_EQ(scalar(a.db, "SELECT count(*) FROM events WHERE detail LIKE '%pa ss%'"), "0");
  // Without the credentials the server refuses the mail: the failure is an event, and the run is unharmed.
  TempDir t2;
  AlertRun b = run_fake(t2, json::array({gpu(0, {{"temp_gpu", 95}})}), rules + "retries = 0\n",
                        {"run", "--interval", "100ms", "--", "sleep", "0.5"});
  ASSERT_EQ(b.result.exit_code, 0) << b.result.err;
  EXPECT_EQ(mails(t / "smtp").size(), 2u); // the first run's two
  // The firing, and its resolution when the run ended (issue 32).
  EXPECT_EQ(scalar(b.db, "SELECT count(*) FROM events WHERE kind = 'alert-delivery-failed' AND source = 'email[0]'"),
            "2");
}
} // namespace e2e_alerts
