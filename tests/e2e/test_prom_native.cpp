// Issue 32: `serve` as a native of the Prometheus ecosystem, checked with the real programs where installed: promtool
// and Pushgateway accept every body, process series only on request, gzip on the wire, counters beside gauges,
// labels that join, Alertmanager kept in step.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/sysfs_fixtures.hpp"
#include "http_client.hpp"

namespace e2e_prom_native { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope;
namespace http = wstest::http;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// Every metric the fake NVML can fill, on two GPUs: the video clock included (it made a second
// wattscope_gpu_clock_hertz block), the health counters, violation times, Xid events and a process.
json full_device(const std::string& uuid, const std::string& bus, const std::string& pid_file) {
  json m = {{"power_instant_mw", 250000},
            {"power_avg_mw", 240000},
            {"energy_mj", {{"linear", {1000000, 25000}}}},
            {"util_gpu", 70},
            {"util_mem", 40},
            {"mem_used_bytes", 42949672960LL},
            {"mem_total_bytes", 85899345920LL},
            {"mem_reserved_bytes", 536870912LL},
            {"temp_gpu", 64},
            {"temp_mem", 71},
            {"clock_sm", 1980},
            {"clock_mem", 2619},
            {"clock_gfx", 1980},
            {"clock_video", 1755},
            {"power_limit_mw", 700000},
            {"pstate", 0},
            {"pcie_tx_kbs", 1000},
            {"pcie_rx_kbs", 2000},
            {"pcie_width", 16},
            {"pcie_width_max", 16},
            {"fan_pct", 30},
            {"clock_events", 0x4 | 0x20 | 0x40},
            {"util_enc", 12},
            {"util_dec", 3},
            {"ecc_corrected", {{"linear", {5, 1}}}},
            {"ecc_uncorrected", 0},
            {"remapped_cor", 1},
            {"remapped_unc", 0},
            {"remap_pending", 0},
            {"remap_failed", 0},
            {"pcie_replays", {{"linear", {100, 1}}}},
            {"violation_power_ns", {{"linear", {7'000'000'000LL, 50'000'000LL}}}},
            {"violation_thermal_ns", {{"linear", {2'000'000'000LL, 10'000'000LL}}}},
            {"nvlink_tx_kib", {{"linear", {1'000'000, 50}}}},
            {"nvlink_rx_kib", {{"linear", {2'000'000, 30}}}},
            {"field_timestamp_us", {{"linear", {5'000'000, 100'000}}}}};
  return {{"name", "NVIDIA H100 80GB HBM3"},
          {"uuid", uuid},
          {"pci_bus_id", bus},
          {"max_clock_sm_mhz", 1980},
          {"max_clock_mem_mhz", 2619},
          {"metrics", m},
          {"xid", {{{"after_s", 0.2}, {"xid", 79}}, {{"after_s", 0.4}, {"xid", 48}}}},
          {"processes", {{{"pid_file", pid_file}, {"type", "compute"}, {"sm", 60}, {"mem_bytes", 1LL << 30}}}}};
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

bool exists(const std::string& path) {
  return access(path.c_str(), X_OK) == 0;
}

// Busy CPU time in the procfs fixture's /proc/stat, in clock ticks: user + nice + system + irq + softirq + steal.
constexpr int64_t kBusyTicks = 4000 + 100 + 900 + 50 + 25 + 25;

// A procfs root: this machine's /proc (as links), but a `stat` whose CPU lines are fixed (two logical CPUs) and, for
// the worker, a cgroup file that puts it in Slurm job 4242.
void procfs_fixture(const std::string& root, const std::vector<int>& in_job, bool live = false) {
  std::filesystem::create_directories(root);
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    const bool pid_dir = name.find_first_not_of("0123456789") == std::string::npos;
    if ((name == "stat" && !live) || (pid_dir && !live) ||
        (pid_dir && std::find(in_job.begin(), in_job.end(), std::stoi(name)) != in_job.end()))
      continue;
    std::filesystem::create_directory_symlink(e.path(), root + "/" + name);
  }
  std::string stat = "cpu  4000 100 900 20000 300 50 25 25 0 0\n"
                     "cpu0 2000 50 450 10000 150 25 12 13 0 0\n"
                     "cpu1 2000 50 450 10000 150 25 13 12 0 0\n";
  std::istringstream real(read_file("/proc/stat"));
  for (std::string line; std::getline(real, line);)
    if (!line.starts_with("cpu")) stat += line + "\n";
  if (!live) write_file(root + "/stat", stat);
  for (const int worker : in_job) {
    const std::string pid = std::to_string(worker), dir = root + "/" + pid;
    std::filesystem::create_directory(dir);
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + pid)) {
      const std::string name = e.path().filename();
      if (name != "cgroup") std::filesystem::create_symlink(e.path(), dir + "/" + name);
    }
    write_file(dir + "/cgroup", "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n");
  }
}

// `wattscope serve` on the full-capability fake NVML, RAPL fixtures and a worker process the GPUs list, which the
// procfs fixture puts in a Slurm job.
class FullServe {
public:
  explicit FullServe(std::vector<std::string> extra = {}, const std::string& interval = "100ms") {
    worker_ = start({"/bin/sh", "-c", "echo $$ > worker.pid; exec sleep 60"}, {}, dir_.path(), dir_ / "w.out",
                    dir_ / "w.err");
    for (int i = 0; i < 200 && read_file(dir_ / "worker.pid").empty(); ++i)
      std::this_thread::sleep_for(10ms);
    write_file(dir_ / "scenario.json", json{{"devices",
                                             {full_device("GPU-full-0", "00000000:3B:00.0", dir_ / "worker.pid"),
                                              full_device("GPU-full-1", "00000000:5E:00.0", dir_ / "worker.pid")}}}
                                           .dump());
    two_socket_rapl(dir_ / "sys");
    procfs_fixture(dir_ / "proc", {worker_});
    std::vector<std::string> args = {wattscope(),     "serve",       "--listen",           "127.0.0.1:0",
                                     "--interval",    interval,      "--sysfs-root",       dir_ / "sys",
                                     "--procfs-root", dir_ / "proc", "--process-interval", "1s"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = start(args,
                 {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                  {"WATTSCOPE_FAKE_NVML_SCENARIO", dir_ / "scenario.json"},
                  {"CUDA_VISIBLE_DEVICES", "\x01"},
                  {"HOME", dir_.path()}},
                 dir_.path(), dir_ / "out", dir_ / "err");
    port_ = wait_for_serve_port(dir_ / "err", 100);
  }
  ~FullServe() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      wait_exit(pid_);
    }
    kill(worker_, SIGKILL);
    wait_exit(worker_);
  }
  int stop() {
    kill(pid_, SIGTERM);
    const int rc = wait_exit(pid_);
    pid_ = -1;
    return rc;
  }
  http::Response get(const std::string& target, const http::Headers& headers = {}) const {
    return http::get(port_, target, headers, 5s);
  }
  // /metrics once it has what `ready` wants (PCIe, processes and units come from slower threads), up to 8 s.
  std::string metrics_when(const std::function<bool(const std::string&)>& ready) const {
    std::string body;
    for (int i = 0; i < 80; ++i) {
      body = get("/metrics").body;
      if (ready(body)) break;
      std::this_thread::sleep_for(100ms);
    }
    return body;
  }
  const TempDir& dir() const { return dir_; }
  int port() const { return port_; }

private:
  TempDir dir_;
  int pid_ = -1, worker_ = -1;
  int port_ = 0;
};

bool has(const std::string& body, const std::string& what) {
  return body.find(what) != std::string::npos;
}

std::string gunzip(const std::string& in) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) return {};
  std::string out;
  char buf[65536];
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof buf - zs.avail_out);
  }
  inflateEnd(&zs);
  return rc == Z_STREAM_END ? out : std::string();
}

// The value of the first sample line starting with `prefix`; NaN when there is none.
double value_of(const std::string& metrics, const std::string& prefix) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(line.rfind(' ') + 1));
  return NAN;
}

// The exposition format's rule: each family's HELP and TYPE once, and all its samples in one block. Returns what is
// wrong, one line per fault (empty: none).
std::string family_faults(const std::string& body) {
  std::map<std::string, int> help, type;
  std::set<std::string> closed; // families whose block has ended
  std::string current, faults;
  std::istringstream in(body);
  std::string line;
  std::map<std::string, std::string> type_of;
  auto family_of = [&](const std::string& name) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (name.size() > s.size() && name.ends_with(s) && type_of.count(name.substr(0, name.size() - s.size())))
        return name.substr(0, name.size() - s.size());
    }
    return name;
  };
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::string fam;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::istringstream w(line.substr(7));
      w >> fam;
      if (line[2] == 'H' && ++help[fam] > 1) faults += "HELP twice: " + fam + "\n";
      if (line[2] == 'T') {
        if (++type[fam] > 1) faults += "TYPE twice: " + fam + "\n";
        std::string t;
        w >> t;
        type_of[fam] = t;
      }
    } else if (line[0] == '#') {
      continue;
    } else {
      fam = family_of(line.substr(0, line.find_first_of("{ ")));
    }
    if (fam != current) {
      if (closed.count(fam)) faults += "family split in two blocks: " + fam + "\n";
      if (!current.empty()) closed.insert(current);
      current = fam;
    }
  }
  return faults;
}

std::string sample_line(const std::string& metrics, const std::string& prefix) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return line;
  return {};
}

} // namespace

// 32.1 / 30.7: every family once, whatever order the registry lists its members in; promtool and a real Pushgateway
// accept the body.
TEST(PromNative, EveryMetricAnyBackendFillsPassesPromtoolAndPushgateway) {
  FullServe s({"--process-metrics", "--cpu-tdp", "200"});
  const std::string m = s.metrics_when([](const std::string& b) {
    return b.find("clock=\"video\"") != std::string::npos &&
           b.find("wattscope_gpu_pcie_transmit_bytes_per_second{") != std::string::npos &&
           b.find("wattscope_process_power_watts{") != std::string::npos &&
           b.find("wattscope_cpu_power_watts{") != std::string::npos;
  });
  // What the test stands on: the video clock, the health families, processes and RAPL zones are there.
  ASSERT_NE(m.find("clock=\"video\"} 1755000000"), std::string::npos) << m;
  ASSERT_NE(m.find("clock=\"sm\"} 1980000000"), std::string::npos);
  ASSERT_NE(m.find("wattscope_gpu_throttle_seconds_total{"), std::string::npos);
  ASSERT_NE(m.find("wattscope_cpu_power_watts{"), std::string::npos);
  ASSERT_NE(m.find("wattscope_process_power_watts{"), std::string::npos) << m;
  EXPECT_EQ(family_faults(m), "");
  // docs/prometheus.md's RAPL example names the labels serve writes (it once showed zone="package-0").
  const std::string doc = read_file(std::string(WATTSCOPE_SOURCE_DIR) + "/docs/prometheus.md");
  std::smatch example;
  ASSERT_TRUE(std::regex_search(doc, example, std::regex("`wattscope_cpu_energy_joules_total\\{(zone=\"[^}]*)\\}`")));
  std::string zone_line;
  for (std::istringstream in(m); std::getline(in, zone_line);)
    if (zone_line.starts_with("wattscope_cpu_energy_joules_total{") &&
        zone_line.find("," + example[1].str() + "}") != std::string::npos)
      break;
  EXPECT_TRUE(zone_line.starts_with("wattscope_cpu_energy_joules_total{"))
      << "no series with the labels docs/prometheus.md shows: " << example[1] << "\n"
      << m;
  write_file(s.dir() / "metrics.txt", m);
  auto check = run({"/bin/sh", "-c", "promtool check metrics < " + (s.dir() / "metrics.txt")});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;

  // Pushgateway (Debian's prometheus-pushgateway) parses bodies strictly: a family split in two is HTTP 400.
  const std::string pgw = "/usr/bin/prometheus-pushgateway";
  if (!exists(pgw)) {
    std::cerr << "[ NOTE ] " << pgw << " is not installed (scripts/setup.sh): the body was not pushed\n";
    return;
  }
  const int port = free_port();
  TempDir p;
  const int pid =
      start({pgw, "--web.listen-address=127.0.0.1:" + std::to_string(port)}, {}, p.path(), p / "out", p / "err");
  std::string status;
  for (int i = 0; i < 50; ++i) {
    auto r = run({"/usr/bin/curl", "-s", "-o", p / "answer", "-w", "%{http_code}", "--data-binary",
                  "@" + (s.dir() / "metrics.txt"), "http://127.0.0.1:" + std::to_string(port) + "/metrics/job/ws"});
    status = r.out;
    if (status != "000") break;
    std::this_thread::sleep_for(100ms);
  }
  kill(pid, SIGTERM);
  wait_exit(pid);
  EXPECT_EQ(status, "200") << read_file(p / "answer") << read_file(p / "err");
}

// 32.2: per-process series only with --process-metrics (each process start is a new series); units always, their
// kind under `unit_kind` (32.5: `kind` meant current/max on the link-width family).
TEST(PromNative, ProcessSeriesOnlyOnRequestUnitsAlways) {
  FullServe s;
  const std::string m = s.metrics_when([](const std::string& b) { return has(b, "wattscope_unit_power_watts{"); });
  ASSERT_TRUE(has(m, "wattscope_unit_power_watts{unit=\"slurm job 4242\",unit_kind=\"slurm-job\"")) << m;
  EXPECT_FALSE(has(m, ",kind=\"slurm-job\""));
  EXPECT_FALSE(has(m, "wattscope_process_")) << "per-process series without --process-metrics";
  // The dashboard and the JSON API still list the processes.
  auto cur = json::parse(s.get("/api/v1/current").body);
  ASSERT_FALSE(cur["processes"].empty()) << cur.dump();
  EXPECT_EQ(s.stop(), 0);

  FullServe on({"--process-metrics"});
  const std::string m2 = on.metrics_when([](const std::string& b) { return has(b, "wattscope_process_power_watts{"); });
  EXPECT_TRUE(has(m2, "wattscope_process_energy_joules_total{")) << m2;
  EXPECT_TRUE(has(m2, "wattscope_unit_power_watts{"));
}

// --process-metrics exports GPU processes, not every process with a CPU share (a node's shells, daemons and kernel
// threads, each a new series per start); --process-metrics-unit adds the CPU-only processes of a unit. The machine's
// own /proc, live, with no RAPL: --cpu-tdp gives every busy process a share of the estimated CPU power.
class ProcessServe {
public:
  explicit ProcessServe(std::vector<std::string> extra) {
    gpu_worker_ = start({"/bin/sh", "-c", "echo $$ > worker.pid; exec sleep 60"}, {}, dir_.path(), dir_ / "w.out",
                        dir_ / "w.err");
    for (int i = 0; i < 200 && read_file(dir_ / "worker.pid").empty(); ++i)
      std::this_thread::sleep_for(10ms);
    const std::string busy = "while :; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.05; done";
    cpu_in_job_ = start({"/bin/sh", "-c", busy}, {}, dir_.path(), dir_ / "c1.out", dir_ / "c1.err");
    cpu_outside_ = start({"/bin/sh", "-c", busy}, {}, dir_.path(), dir_ / "c2.out", dir_ / "c2.err");
    write_file(dir_ / "scenario.json",
               json{{"devices", {full_device("GPU-full-0", "00000000:3B:00.0", dir_ / "worker.pid")}}}.dump());
    std::filesystem::create_directories(dir_ / "sys");
    procfs_fixture(dir_ / "proc", {gpu_worker_, cpu_in_job_}, /*live=*/true);
    std::vector<std::string> args = {wattscope(),          "serve",       "--listen",        "127.0.0.1:0",
                                     "--interval",         "100ms",       "--sysfs-root",    dir_ / "sys",
                                     "--procfs-root",      dir_ / "proc", "--cpu-tdp",       "200",
                                     "--process-interval", "1s",          "--top-processes", "100"};
    args.insert(args.end(), extra.begin(), extra.end());
    serve_ = start(args,
                   {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                    {"WATTSCOPE_FAKE_NVML_SCENARIO", dir_ / "scenario.json"},
                    {"CUDA_VISIBLE_DEVICES", "\x01"}},
                   dir_.path(), dir_ / "out", dir_ / "err");
    port_ = wait_for_serve_port(dir_ / "err", 100);
  }
  ~ProcessServe() {
    for (const int p : {serve_, gpu_worker_, cpu_in_job_, cpu_outside_}) {
      kill(p, SIGKILL);
      wait_exit(p);
    }
  }
  // The pids with series of their own, once the scans have seen `want` (up to 10 s), and the body they were read in.
  std::set<std::string> pids_once(const std::function<bool(const std::string&)>& want, std::string& body) const {
    std::set<std::string> out;
    for (int i = 0; i < 100; ++i) {
      body = http::get(port_, "/metrics", {}, 5s).body;
      if (want(body)) break;
      std::this_thread::sleep_for(100ms);
    }
    std::istringstream in(body);
    for (std::string line; std::getline(in, line);)
      if (line.starts_with("wattscope_process_power_watts{pid=\"")) {
        const size_t a = line.find('"') + 1;
        out.insert(line.substr(a, line.find('"', a) - a));
      }
    return out;
  }
  std::string current() const { return http::get(port_, "/api/v1/current", {}, 5s).body; }
  std::string gpu_worker() const { return std::to_string(gpu_worker_); }
  std::string cpu_in_job() const { return std::to_string(cpu_in_job_); }
  std::string cpu_outside() const { return std::to_string(cpu_outside_); }

private:
  TempDir dir_;
  int serve_ = -1, gpu_worker_ = -1, cpu_in_job_ = -1, cpu_outside_ = -1, port_ = 0;
};

TEST(PromNative, ProcessSeriesAreTheGpuProcessesAndTheCpuProcessesOfUnitsAskedFor) {
  {
    ProcessServe s({"--process-metrics"});
    std::string m;
    // Until the busy CPU processes are in the JSON list with a power share: the scan has attributed CPU energy.
    const auto p = s.pids_once(
        [&](const std::string& b) {
          const std::string cur = s.current();
          return has(b, "wattscope_process_power_watts{pid=\"" + s.gpu_worker() + "\"") &&
                 has(cur, "\"pid\":" + s.cpu_in_job() + ",") && has(cur, "\"pid\":" + s.cpu_outside() + ",");
        },
        m);
    EXPECT_TRUE(p.count(s.gpu_worker())) << m;
    const std::string cur = s.current();
    ASSERT_TRUE(has(cur, "\"pid\":" + s.cpu_in_job() + ",")) << "the dashboard's list keeps every process: " << cur;
    for (const auto& pid : p)
      EXPECT_TRUE(pid == s.gpu_worker() || pid == "other") << "pid " << pid << " has a series: no GPU process\n" << m;
  }
  ProcessServe s({"--process-metrics-unit", "slurm job 4242"});
  std::string m;
  const auto p = s.pids_once(
      [&](const std::string& b) {
        return has(b, "wattscope_process_power_watts{pid=\"" + s.cpu_in_job() + "\"") &&
               has(s.current(), "\"pid\":" + s.cpu_outside() + ",");
      },
      m);
  EXPECT_TRUE(p.count(s.gpu_worker())) << "--process-metrics-unit implies --process-metrics: " << m;
  EXPECT_TRUE(p.count(s.cpu_in_job())) << "the unit's CPU process: " << m;
  EXPECT_FALSE(p.count(s.cpu_outside())) << "a CPU process outside the unit: " << m;
}

// 32.3: gzip for a client that asks, compressed once per body: two scrapes of one frame get the same bytes.
TEST(PromNative, MetricsAreGzippedForAClientThatAsks) {
  FullServe s({}, "10s"); // one frame for the whole test
  s.metrics_when([](const std::string& b) { return has(b, "wattscope_gpu_power_watts{"); });
  const http::Headers gz = {{"Accept-Encoding", "gzip, deflate"}};
  auto a = s.get("/metrics", gz);
  auto b = s.get("/metrics", gz);
  auto plain = s.get("/metrics");
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.header("content-encoding"), "gzip");
  EXPECT_EQ(a.header("vary"), "Accept-Encoding, Accept");
  EXPECT_EQ(plain.header("content-encoding"), "");
  EXPECT_EQ(plain.header("vary"), "Accept-Encoding, Accept");
  const std::string text = gunzip(a.body);
  EXPECT_EQ(text, plain.body); // the same frame, the same body
  EXPECT_EQ(b.body, a.body);
  EXPECT_LT(a.body.size() * 4, text.size()) << a.body.size() << " of " << text.size();
  EXPECT_EQ(family_faults(text), "");
  // gzip;q=0 refuses it (RFC 9110 12.5.3).
  auto refused = s.get("/metrics", {{"Accept-Encoding", "gzip;q=0"}});
  EXPECT_EQ(refused.header("content-encoding"), "");
  EXPECT_EQ(refused.body, plain.body);
}

// 32.4 and 32.5: counters beside the gauges, a series per throttle reason, Xid errors counted per GPU, ratios without
// float noise, the alert series joinable to the GPU series.
TEST(PromNative, CountersReasonsXidsAndLabelsThatJoin) {
  TempDir rules;
  write_file(rules / "alerts.toml", "builtin_rules = false\n[[rule]]\nname = \"warm\"\nmetric = \"temp_gpu_c\"\n"
                                    "threshold = 60\nfor = \"0s\"\n");
  FullServe s({"--alerts", rules / "alerts.toml"});
  const std::string m = s.metrics_when([](const std::string& b) {
    return has(b, "wattscope_alerts_firing{") && has(b, "wattscope_gpu_xid_errors_total{gpu=\"1\"") &&
           value_of(b, "wattscope_gpu_xid_errors_total{gpu=\"1\"") == 2;
  });
  const std::string gpu0 = "{gpu=\"0\",uuid=\"GPU-full-0\",name=\"NVIDIA H100 80GB HBM3\",host=\"";
  // Busy CPU time: the fixture's /proc/stat, exactly.
  EXPECT_TRUE(has(m, "# TYPE wattscope_cpu_busy_seconds_total counter"));
  EXPECT_DOUBLE_EQ(value_of(m, "wattscope_cpu_busy_seconds_total{"),
                   static_cast<double>(kBusyTicks) / static_cast<double>(sysconf(_SC_CLK_TCK)));
  EXPECT_EQ(value_of(m, "wattscope_cpu_logical_cpus{"), 2);
  // clock_events 0x64: SW power cap, SW thermal, HW thermal; the rest 0.
  std::map<std::string, double> reasons;
  std::istringstream in(m);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("wattscope_gpu_throttle_active" + gpu0, 0) == 0) {
      const auto at = line.find("reason=\"") + 8;
      reasons[line.substr(at, line.find('"', at) - at)] = std::stod(line.substr(line.rfind(' ') + 1));
    }
  EXPECT_EQ(reasons, (std::map<std::string, double>{{"applications_clocks_setting", 0},
                                                    {"display_clock_setting", 0},
                                                    {"gpu_idle", 0},
                                                    {"hw_power_brake", 0},
                                                    {"hw_slowdown", 0},
                                                    {"hw_thermal", 1},
                                                    {"sw_power_cap", 1},
                                                    {"sw_thermal", 1},
                                                    {"sync_boost", 0}}));
  // Two Xid events per GPU in the scenario.
  EXPECT_TRUE(has(m, "# TYPE wattscope_gpu_xid_errors_total counter"));
  EXPECT_EQ(value_of(m, "wattscope_gpu_xid_errors_total" + gpu0), 2);
  // 70 % is 0.7, not 0.7000000000000001; 40 % is 0.4.
  EXPECT_TRUE(sample_line(m, "wattscope_gpu_utilization_ratio" + gpu0).ends_with("} 0.7")) << m;
  EXPECT_TRUE(sample_line(m, "wattscope_gpu_memory_utilization_ratio" + gpu0).ends_with("} 0.4"));
  EXPECT_TRUE(sample_line(m, "wattscope_gpu_fan_speed_ratio" + gpu0).ends_with("} 0.3"));
  // The alert carries the gpu and uuid of its GPU's series.
  const std::string alert = sample_line(m, "wattscope_alerts_firing{rule=\"warm\",severity=\"warning\",scope=\"gpu0\"");
  EXPECT_TRUE(has(alert, ",gpu=\"0\",uuid=\"GPU-full-0\"")) << alert;
  write_file(s.dir() / "metrics.txt", m);
  auto check = run({"/bin/sh", "-c", "promtool check metrics < " + (s.dir() / "metrics.txt")});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

// ---- 32.6: Alertmanager in step with wattscope ---------------------------------------------------------------------

namespace {

class Alertmanager {
public:
  explicit Alertmanager(const std::string& resolve_timeout = "") {
    port_ = free_port();
    write_file(t_ / "am.yml", (resolve_timeout.empty() ? "" : "global:\n  resolve_timeout: " + resolve_timeout + "\n") +
                                  "route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n");
    pid_ =
        start({"/usr/bin/prometheus-alertmanager", "--config.file=" + (t_ / "am.yml"), "--storage.path=" + (t_ / "am"),
               "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--cluster.listen-address="},
              {}, t_.path(), t_ / "am.out", t_ / "am.err");
    for (int i = 0; i < 200 && http::get(port_, "/-/ready").status != 200; ++i)
      std::this_thread::sleep_for(50ms);
  }
  ~Alertmanager() {
    kill(pid_, SIGTERM);
    wait_exit(pid_);
  }
  // The alerts Alertmanager holds as not resolved (its API lists no resolved alert).
  json alerts() const {
    auto r = http::get(port_, "/api/v2/alerts", {}, 5s);
    return r.status == 200 ? json::parse(r.body) : json::array();
  }
  int port() const { return port_; }
  std::string log() const { return read_file(t_ / "am.err"); }

private:
  TempDir t_;
  int pid_ = -1, port_ = 0;
};

std::string hot_rules(int am_port) {
  return "builtin_rules = false\n[[rule]]\nname = \"hot\"\nmetric = \"temp_gpu_c\"\nthreshold = 60\nfor = \"0s\"\n"
         "severity = \"critical\"\nmessage = \"{scope} at {value} C\"\n\n[[alertmanager]]\nurl = \"http://127.0.0.1:" +
         std::to_string(am_port) + "\"\nresend_every = \"1s\"\n";
}

} // namespace

// A run that ends while its alert fires: Alertmanager hears it resolved at once, not by its own timeout minutes later.
// While it fires, Alertmanager holds it with an endsAt a few re-sends ahead, and the labels of the GPU.
TEST(PromNative, AlertmanagerHearsARunEndWhileFiringAsResolved) {
  Alertmanager am;
  TempDir t;
  write_file(t / "alerts.toml", hot_rules(am.port()));
  write_file(t / "scenario.json",
             json{{"devices", {full_device("GPU-full-0", "00000000:3B:00.0", t / "none.pid")}}}.dump());
  const int pid = start({wattscope(), "run", "--alerts", t / "alerts.toml", "--interval", "100ms", "--db", t / "w.db",
                         "--", "sleep", "3"},
                        {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                         {"WATTSCOPE_FAKE_NVML_SCENARIO", t / "scenario.json"},
                         {"CUDA_VISIBLE_DEVICES", "\x01"},
                         {"HOME", t.path()}},
                        t.path(), t / "out", t / "err");
  json firing;
  for (int i = 0; i < 40 && firing.empty(); ++i) {
    std::this_thread::sleep_for(100ms);
    firing = am.alerts();
  }
  ASSERT_EQ(firing.size(), 1u) << read_file(t / "err") << am.log();
  const json& a = firing[0];
  EXPECT_EQ(a["labels"]["alertname"], "hot");
  EXPECT_EQ(a["labels"]["scope"], "gpu0");
  EXPECT_EQ(a["labels"]["gpu"], "0");
  EXPECT_EQ(a["labels"]["uuid"], "GPU-full-0");
  EXPECT_EQ(a["status"]["state"], "active");
  EXPECT_EQ(a["annotations"]["summary"], "gpu0 at 64 C");
  EXPECT_EQ(wait_exit(pid), 0) << read_file(t / "err");
  // Resolved with the run: gone from Alertmanager's list within a second (its default resolve_timeout is 5 minutes).
  json left = am.alerts();
  for (int i = 0; i < 10 && !left.empty(); ++i) {
    std::this_thread::sleep_for(100ms);
    left = am.alerts();
  }
  EXPECT_TRUE(left.empty()) << left.dump();
  EXPECT_EQ(scalar(t / "w.db", "SELECT count(*) FROM events WHERE kind = 'alert' AND "
                               "json_extract(detail, '$.state') = 'resolved'"),
            "1");
}

// An alert firing longer than Alertmanager's resolve_timeout stays active there (wattscope re-sends it with endsAt
// ahead), whatever the rule's repeat_every; serve's end resolves it.
TEST(PromNative, ALongFiringAlertOutlivesAlertmanagersResolveTimeout) {
  Alertmanager am("2s");
  TempDir t;
  write_file(t / "alerts.toml", hot_rules(am.port()));
  write_file(t / "scenario.json",
             json{{"devices", {full_device("GPU-full-0", "00000000:3B:00.0", t / "none.pid")}}}.dump());
  const int pid =
      start({wattscope(), "serve", "--listen", "127.0.0.1:0", "--alerts", t / "alerts.toml", "--interval", "100ms"},
            {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
             {"WATTSCOPE_FAKE_NVML_SCENARIO", t / "scenario.json"},
             {"CUDA_VISIBLE_DEVICES", "\x01"},
             {"HOME", t.path()}},
            t.path(), t / "out", t / "err");
  wait_for_serve_port(t / "err", 100);
  json now;
  for (int i = 0; i < 40 && now.empty(); ++i) {
    std::this_thread::sleep_for(100ms);
    now = am.alerts();
  }
  ASSERT_EQ(now.size(), 1u) << read_file(t / "err");
  // Three resolve_timeouts later it is still active, where once it lapsed after the first.
  std::this_thread::sleep_for(6s);
  now = am.alerts();
  ASSERT_EQ(now.size(), 1u) << read_file(t / "err") << am.log();
  EXPECT_EQ(now[0]["status"]["state"], "active");
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
  json left = am.alerts();
  for (int i = 0; i < 10 && !left.empty(); ++i) {
    std::this_thread::sleep_for(100ms);
    left = am.alerts();
  }
  EXPECT_TRUE(left.empty()) << left.dump();
}

} // namespace e2e_prom_native
