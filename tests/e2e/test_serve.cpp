// `wattscope serve` end to end: real HTTP clients, promtool, a real Prometheus scraping it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <regex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/sysfs_fixtures.hpp"
#include "http_client.hpp"

namespace e2e_serve { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
namespace http = wstest::http;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

json scenario() {
  json m0 = {{"power_instant_mw", 250000},
             {"energy_mj", {{"linear", {1000000, 25000}}}},
             {"util_gpu", 97},
             {"util_mem", 40},
             {"mem_used_bytes", 42949672960LL},
             {"mem_total_bytes", 85899345920LL},
             {"temp_gpu", 64},
             {"temp_mem", 71},
             {"clock_sm", 1980},
             {"clock_mem", 2619},
             {"clock_gfx", 1980},
             {"power_limit_mw", 700000},
             {"pstate", 0},
             {"pcie_tx_kbs", 1000},
             {"pcie_rx_kbs", 2000},
             {"pcie_width", 16},
             {"pcie_width_max", 16},
             {"clock_events", 4},
             {"power_avg_mw", 240000},
             {"util_enc", 12},
             {"util_dec", 3}};
  json m1 = m0;
  m1["power_instant_mw"] = 125500;
  m1["fan_pct"] = 30;
  return {{"devices",
           {{{"name", "NVIDIA H100 \"SXM\""}, {"uuid", "GPU-0000"}, {"metrics", m0}, {"unsupported", {"fan_pct"}}},
            {{"name", "NVIDIA H100"}, {"uuid", "GPU-1111"}, {"metrics", m1}}}}};
}

// A running `wattscope serve` with two fake GPUs on a free loopback port.
class Serve {
public:
  explicit Serve(std::vector<std::string> extra = {}) {
    write_file(dir_ / "scenario.json", scenario().dump());
    std::vector<std::string> args = {wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "100ms"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = start(args,
                 {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                  {"WATTSCOPE_FAKE_NVML_SCENARIO", dir_ / "scenario.json"},
                  {"CUDA_VISIBLE_DEVICES", "\x01"}},
                 dir_.path(), dir_ / "out", dir_ / "err");
    port_ = wait_for_serve_port(dir_ / "err", 100);
    std::this_thread::sleep_for(300ms); // a few ticks
  }
  ~Serve() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      wait_exit(pid_);
    }
  }
  int stop() {
    kill(pid_, SIGTERM);
    int rc = wait_exit(pid_);
    pid_ = -1;
    return rc;
  }
  http::Response get(const std::string& target, const http::Headers& headers = {}) const {
    return http::get(port_, target, headers, 5s);
  }
  int port() const { return port_; }
  const TempDir& dir() const { return dir_; }

private:
  TempDir dir_;
  int pid_ = -1;
  int port_ = 0;
};

std::string sample_line(const std::string& metrics, const std::string& prefix) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return line;
  return {};
}

} // namespace

TEST(Serve, MetricsCarryTheDevicesValuesAndPassPromtool) {
  Serve s({"--task", "a \"quoted\" \\ task"});
  auto r = s.get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.header("content-type").find("text/plain; version=0.0.4"), std::string::npos);
  const std::string& m = r.body;
  const std::string power0 = sample_line(m, "wattscope_gpu_power_watts{gpu=\"0\"");
  EXPECT_NE(power0.find("uuid=\"GPU-0000\",name=\"NVIDIA H100 \\\"SXM\\\"\",host=\""), std::string::npos) << power0;
  EXPECT_TRUE(power0.ends_with("} 250")) << power0;
  EXPECT_NE(sample_line(m, "wattscope_gpu_power_watts{gpu=\"1\"").find("} 125.5"), std::string::npos);
  EXPECT_NE(sample_line(m, "wattscope_gpu_utilization_ratio{gpu=\"0\"").find("} 0.97"), std::string::npos);
  // Families generated from the metric registry: the video engines, added through it alone.
  EXPECT_NE(sample_line(m, "wattscope_gpu_encoder_utilization_ratio{gpu=\"0\"").find("} 0.12"), std::string::npos);
  EXPECT_NE(sample_line(m, "wattscope_gpu_decoder_utilization_ratio{gpu=\"0\"").find("} 0.03"), std::string::npos);
  EXPECT_NE(sample_line(m, "wattscope_gpu_memory_used_bytes{gpu=\"0\"").find("} 42949672960"), std::string::npos);
  EXPECT_NE(sample_line(m, "wattscope_gpu_clock_hertz{gpu=\"0\"").find("clock=\"sm\"} 1980000000"), std::string::npos);
  EXPECT_NE(m.find("# TYPE wattscope_gpu_energy_joules_total counter"), std::string::npos);
  EXPECT_NE(sample_line(m, "wattscope_gpu_energy_joules_total{gpu=\"0\"").find("method=\"counter\"}"),
            std::string::npos);
  // Fan speed: GPU 0 does not report it, so its line is absent (never 0); GPU 1's is there.
  EXPECT_EQ(sample_line(m, "wattscope_gpu_fan_speed_ratio{gpu=\"0\""), "");
  EXPECT_NE(m.find("wattscope_run_info{run_id=\""), std::string::npos);
  EXPECT_NE(m.find("task=\"a \\\"quoted\\\" \\\\ task\""), std::string::npos); // escaped label value
  EXPECT_NE(m.find("wattscope_sampler_ticks_total "), std::string::npos);
  EXPECT_NE(m.find("wattscope_build_info{version="), std::string::npos);
  // Serving without --db stores nothing, and says so where runs are asked for.
  auto runs = s.get("/api/v1/runs");
  ASSERT_TRUE(runs);
  EXPECT_EQ(runs.status, 404);
  EXPECT_NE(runs.body.find("without --db"), std::string::npos);
  write_file(s.dir() / "metrics.txt", m);
  auto check = run({"/bin/sh", "-c", "promtool check metrics < " + (s.dir() / "metrics.txt")});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_EQ(s.stop(), 0);
}

TEST(Serve, JsonApiAndItsErrors) {
  Serve s({"--db", "serve.db", "--record"});
  auto cur = s.get("/api/v1/current");
  ASSERT_TRUE(cur);
  auto j = json::parse(cur.body);
  ASSERT_EQ(j["gpus"].size(), 2u);
  EXPECT_EQ(j["gpus"][0]["power_w"], 250.0);
  EXPECT_EQ(j["run"]["task"], "serve");
  auto h = s.get("/api/v1/history?range=1h&step=1s");
  ASSERT_TRUE(h);
  EXPECT_EQ(h.status, 200);
  auto hj = json::parse(h.body);
  EXPECT_GE(hj["ts_ms"].size(), 1u);
  EXPECT_EQ(hj["gpus"][1]["power_w"][0], 125.5);
  for (const char* bad :
       {"/api/v1/history?range=abc", "/api/v1/history?range=0s", "/api/v1/history?range=1h&step=2h",
        "/api/v1/history?range=24h&step=1ms", "/api/v1/history?when=now", "/api/v1/runs/a%20b;DROP"}) {
    auto r = s.get(bad);
    ASSERT_TRUE(r) << bad;
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_TRUE(json::parse(r.body).contains("error")) << bad;
  }
  auto nf = s.get("/api/v2/everything");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf.status, 404);
  EXPECT_NE(json::parse(nf.body)["error"].get<std::string>().find("no such path"), std::string::npos);
  auto runs = s.get("/api/v1/runs");
  ASSERT_TRUE(runs);
  EXPECT_EQ(runs.status, 200);
  auto rj = json::parse(runs.body);
  ASSERT_EQ(rj.size(), 1u);
  auto one = s.get("/api/v1/runs/" + rj[0]["run_id"].get<std::string>());
  ASSERT_TRUE(one);
  EXPECT_EQ(json::parse(one.body)["task"], "serve");
  EXPECT_EQ(s.get("/api/v1/runs/nosuchrun").status, 404);
  EXPECT_EQ(s.stop(), 0);
  // SIGTERM finalised the run in the store: serve's normal end, exit 0.
  EXPECT_NE(scalar(s.dir() / "serve.db", "SELECT end_ms FROM runs"), "");
  EXPECT_EQ(scalar(s.dir() / "serve.db", "SELECT exit_status FROM runs"), "0");
}

TEST(Serve, EventStreamPushesEachFrameAndSlowClientsBlockNobody) {
  Serve s;
  // A client that opens the event stream and never reads, and one that sends garbage.
  auto raw = [&](const std::string& text) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(s.port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(send(fd, text.data(), text.size(), 0), static_cast<ssize_t>(text.size()));
    return fd;
  };
  std::vector<int> stuck;
  for (int i = 0; i < 5; ++i)
    stuck.push_back(raw("GET /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n"));
  int garbage = raw("\x16\x03\x01 not http at all\r\n\r\n");
  // Meanwhile another client gets three frames from the stream, and /metrics answers promptly.
  int frames = 0;
  http::stream(s.port(), "/api/v1/events", {}, [&](std::string_view chunk) {
    for (size_t p = chunk.find("data: "); p != std::string_view::npos; p = chunk.find("data: ", p + 1))
      ++frames;
    return frames < 4;
  });
  EXPECT_GE(frames, 4);
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = s.get("/metrics");
    ASSERT_TRUE(r);
    EXPECT_EQ(r.status, 200);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  }
  for (int fd : stuck)
    close(fd);
  close(garbage);
  EXPECT_EQ(s.stop(), 0);
}

TEST(Serve, BeyondLoopbackOnlyWithAToken) {
  TempDir dir;
  auto refused =
      run({wattscope(), "serve", "--listen", "0.0.0.0:0"}, {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent"}}, dir.path());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("--token-file"), std::string::npos) << refused.err;
  write_file(dir / "short", "abc\n");
  auto short_token =
      run({wattscope(), "serve", "--listen", "0.0.0.0:0", "--token-file", dir / "short"}, {}, dir.path());
  EXPECT_EQ(short_token.exit_code, 2);
  EXPECT_NE(short_token.err.find("at least 16"), std::string::npos) << short_token.err;
  auto bad_listen = run({wattscope(), "serve", "--listen", "localhost"}, {}, dir.path());
  EXPECT_EQ(bad_listen.exit_code, 2);
  EXPECT_NE(bad_listen.err.find("HOST:PORT"), std::string::npos);

  const std::string token = "s3cret-token-0123456789";
  write_file(dir / "token", token + "\n");
  Serve s({"--token-file", dir / "token"});
  auto no = s.get("/metrics");
  ASSERT_TRUE(no);
  EXPECT_EQ(no.status, 401);
  auto wrong = s.get("/metrics", {{"Authorization", "Bearer nope"}});
  EXPECT_EQ(wrong.status, 401);
  auto yes = s.get("/metrics", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(yes);
  EXPECT_EQ(yes.status, 200);
  EXPECT_NE(yes.body.find("wattscope_gpu_power_watts"), std::string::npos);
}

TEST(Serve, ARealPrometheusScrapesIt) {
  Serve s;
  TempDir prom;
  // A free port for Prometheus's own HTTP API.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int prom_port = ntohs(a.sin_port);
  close(fd);
  write_file(prom / "prometheus.yml", "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                      "scrape_configs:\n  - job_name: wattscope\n    static_configs:\n"
                                      "      - targets: ['127.0.0.1:" +
                                          std::to_string(s.port()) + "']\n");
  int pid =
      start({"/usr/bin/prometheus", "--config.file=" + (prom / "prometheus.yml"),
             "--storage.tsdb.path=" + (prom / "data"), "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
            {}, prom.path(), prom / "out", prom / "err");
  json result;
  for (int i = 0; i < 60 && result.empty(); ++i) {
    std::this_thread::sleep_for(500ms);
    auto r = http::get(prom_port, "/api/v1/query?query=wattscope_gpu_power_watts", {}, 5s);
    if (!r || r.status != 200) continue;
    auto j = json::parse(r.body, nullptr, false);
    if (!j.is_discarded() && j["data"]["result"].size() == 2) result = j["data"]["result"];
  }
  kill(pid, SIGTERM);
  wait_exit(pid);
  ASSERT_EQ(result.size(), 2u) << read_file(prom / "err");
  std::map<std::string, std::string> by_gpu;
  for (const auto& series : result)
    by_gpu[series["metric"]["gpu"]] = series["value"][1];
  EXPECT_EQ(by_gpu["0"], "250");
  EXPECT_EQ(by_gpu["1"], "125.5");
  EXPECT_EQ(result[0]["metric"]["job"], "wattscope");
}

TEST(Serve, DeployFilesWorkWithIt) {
  // The Prometheus config is valid, and every metric the Grafana dashboard queries is one serve exports.
  const std::string src = WATTSCOPE_SOURCE_DIR;
  auto check = run({"/usr/bin/promtool", "check", "config", src + "/deploy/prometheus.yml"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  TempDir sys;
  two_socket_rapl(sys.path());
  Serve s({"--sysfs-root", sys.path()});
  std::this_thread::sleep_for(1500ms); // PCIe throughput comes from the 1 s slow thread
  const std::string metrics = s.get("/metrics").body;
  const json dash = json::parse(read_file(src + "/deploy/grafana-dashboard.json"));
  std::set<std::string> used;
  const std::regex name("wattscope_[a-z_]+");
  std::function<void(const json&)> walk = [&](const json& j) {
    if (j.is_object()) {
      if (j.contains("expr") || j.contains("query"))
        for (const char* k : {"expr", "query"})
          if (j.contains(k) && j[k].is_string()) {
            const std::string e = j[k];
            for (auto it = std::sregex_iterator(e.begin(), e.end(), name); it != std::sregex_iterator(); ++it)
              used.insert(it->str());
          }
      for (const auto& [k, v] : j.items())
        walk(v);
    } else if (j.is_array()) {
      for (const auto& v : j)
        walk(v);
    }
  };
  walk(dash);
  EXPECT_GE(used.size(), 15u);
  // Units and firing alerts are exported only while there are some, and the --cpu-tdp estimate only where no RAPL
  // zone is (issue 32: the CPU power panels show it there): tests/grafana runs every query against a real Prometheus
  // on a fleet that has them.
  for (const auto& m : used) {
    if (m.rfind("wattscope_unit_", 0) != 0 && m != "wattscope_alerts_firing" &&
        m != "wattscope_cpu_package_power_watts") {
      EXPECT_TRUE(metrics.find("\n" + m + "{") != std::string::npos ||
                  metrics.find("\n" + m + " ") != std::string::npos)
          << m << " is not exported";
    }
  }
  std::set<std::string> variables;
  for (const auto& v : dash["templating"]["list"])
    variables.insert(v["name"].get<std::string>());
  EXPECT_EQ(variables, (std::set<std::string>{"host", "gpu"}));
}
} // namespace e2e_serve
