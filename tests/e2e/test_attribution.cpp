// Attribution end to end (issue 13): the real binary, the fake NVML listing test processes by pid file, and a run
// whose child tree spans several processes. Per device the attributed, other and unattributed energy add up to the
// measured energy exactly.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "http_client.hpp"

namespace e2e_attribution { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

json gpu(int i, json processes) {
  json m = {{"power_mw", 200000 + 10000 * i},
            {"energy_mj", {{"linear", {1e6 * (i + 1), 40000 + 1000 * i}}}},
            {"util_gpu", 50},
            {"util_mem", 10},
            {"mem_used_bytes", 1LL << 30},
            {"mem_total_bytes", 80LL << 30}};
  return {{"name", "NVIDIA H100"},
          {"uuid", "GPU-attr-" + std::to_string(i)},
          {"pci_bus_id", "00000000:" + std::to_string(20 + i) + ":00.0"},
          {"metrics", m},
          {"processes", processes}};
}

double rel_diff(double a, double b) {
  return std::fabs(a - b) / std::max(1e-12, std::max(std::fabs(a), std::fabs(b)));
}

TEST(Attribution, RunTreeNeighbourAndIdleGpuAddUpToDeviceEnergy) {
  TempDir dir;
  // A neighbour: a process outside the run, on GPU 0.
  const int neighbour = start({"/bin/sleep", "30"}, {}, dir.path(), dir / "n.out", dir / "n.err");
  write_file(dir / "n.pid", std::to_string(neighbour));
  json scen = {
      {"driver_version", "550.54.15"},
      {"devices",
       {gpu(0, {{{"pid_file", dir / "a.pid"}, {"sm", 60}, {"mem", 30}, {"mem_bytes", 4LL << 30}},
                {{"pid_file", dir / "n.pid"}, {"sm", 20}, {"mem", 5}, {"mem_bytes", 2LL << 30}}}),
        // GPU 1: a worker that exits between scans, then nobody: its energy after that is idle
        gpu(1, {{{"pid_file", dir / "b.pid"}, {"sm", 90}, {"mem_bytes", 1LL << 30}}}), gpu(2, json::array())}}};
  write_file(dir / "scenario.json", scen.dump());
  // The run's tree: the shell, a long worker (a), a worker that exits after 1.3 s (b), and a short-lived /bin/true.
  const std::string script = "sleep 3.2 & echo $! > a.pid; sleep 1.3 & echo $! > b.pid; /bin/true; wait";
  Result r = run({wattscope(), "run", "--interval", "200ms", "--db", dir / "w.db", "--", "/bin/sh", "-c", script},
                 {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                  {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                  {"CUDA_VISIBLE_DEVICES", "\x01"}},
                 dir.path());
  ::kill(neighbour, SIGTERM);
  wait_exit(neighbour);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("your processes:"), std::string::npos) << r.err;

  Result show = run({wattscope(), "show", "--db", dir / "w.db", "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const json j = json::parse(show.out);
  const json& a = j["attribution"];
  ASSERT_TRUE(a.is_object()) << show.out;
  for (const auto& g : j["gpus"]) {
    const std::string name = "gpu" + std::to_string(g["index"].get<int>());
    SCOPED_TRACE(name);
    ASSERT_TRUE(a["devices"].contains(name)) << a.dump(2);
    const json& d = a["devices"][name];
    const double measured = g["energy_j"].get<double>();
    ASSERT_GT(measured, 0);
    const double sum = d["attributed_j"].get<double>() + d["other_j"].get<double>() + d["unattributed_j"].get<double>();
    EXPECT_LT(rel_diff(sum, measured), 1e-9) << sum << " vs " << measured;
    EXPECT_EQ(d["method"], "attributed");
  }
  const json& g0 = a["devices"]["gpu0"];
  const json& g1 = a["devices"]["gpu1"];
  const json& g2 = a["devices"]["gpu2"];
  // GPU 0: the run's worker at 60 % SM, the neighbour at 20 %: while both are listed, three quarters is the run's;
  // before the worker's pid file exists (a loaded machine delays it), the neighbour's alone. Never more than 3:1.
  EXPECT_GT(g0["attributed_j"].get<double>(), 0);
  EXPECT_GT(g0["other_j"].get<double>(), 0);
  EXPECT_LE(g0["attributed_j"].get<double>() / g0["other_j"].get<double>(), 3.0 + 1e-9);
  // GPU 1: the run's only while b lived; idle afterwards.
  EXPECT_GT(g1["attributed_j"].get<double>(), 0);
  EXPECT_EQ(g1["other_j"].get<double>(), 0);
  EXPECT_GT(g1["unattributed_j"].get<double>(), 0);
  // GPU 2: nobody.
  EXPECT_EQ(g2["attributed_j"].get<double>(), 0);
  EXPECT_EQ(g2["other_j"].get<double>(), 0);
  EXPECT_GT(g2["unattributed_j"].get<double>(), 0);

  // Stored: a row per process of the tree, the workers' GPU samples, and nothing of the neighbour in `processes`.
  const std::string db = dir / "w.db";
  const std::string a_pid = read_file(dir / "a.pid");
  const std::string b_pid = read_file(dir / "b.pid");
  auto rows = query(db, "SELECT pid, start_time, comm, first_tick, last_tick FROM processes ORDER BY first_tick");
  EXPECT_GE(rows.size(), 3u);
  std::set<std::string> comms;
  for (const auto& row : rows) {
    comms.insert(row[2].value_or(""));
    EXPECT_TRUE(row[1].has_value());
    EXPECT_TRUE(row[4].has_value()) << "every process has its last tick at the end of the run";
  }
  EXPECT_TRUE(comms.count("sh")) << "the shell";
  EXPECT_TRUE(comms.count("sleep")) << "the workers";
  EXPECT_EQ(scalar(db, "SELECT COUNT(*) FROM processes WHERE pid = " + std::to_string(neighbour)), "0");
  EXPECT_EQ(scalar(db, "SELECT MAX(sm_pct) FROM process_gpu_samples WHERE gpu_index = 0 AND pid = " +
                           std::to_string(std::stoi(a_pid))),
            "60.0");
  EXPECT_NE(scalar(db, "SELECT COUNT(*) FROM process_gpu_samples WHERE gpu_index = 1 AND pid = " +
                           std::to_string(std::stoi(b_pid))),
            "0");
  EXPECT_NE(scalar(db, "SELECT COUNT(*) FROM process_samples"), "0");
  // The run's worker's GPU energy is stored and matches the summary's figure for it.
  const double stored =
      std::stod(scalar(db, "SELECT MAX(energy_j) FROM process_gpu_samples WHERE gpu_index = 0 AND pid = " +
                               std::to_string(std::stoi(a_pid))));
  EXPECT_GT(stored, 0);
}

// The value of the first sample line starting with `prefix`, or NaN.
double sample_value(const std::string& metrics, const std::string& prefix) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(line.rfind(' ') + 1));
  return NAN;
}

TEST(Attribution, ServeExportsTheTopProcessesAndFoldsTheRestIntoOther) {
  TempDir dir;
  const int worker = start({"/bin/sleep", "30"}, {}, dir.path(), dir / "w.out", dir / "w.err");
  const int neighbour = start({"/bin/sleep", "30"}, {}, dir.path(), dir / "n.out", dir / "n.err");
  write_file(dir / "w.pid", std::to_string(worker));
  write_file(dir / "n.pid", std::to_string(neighbour));
  json scen = {{"devices",
                {gpu(0, {{{"pid_file", dir / "w.pid"}, {"sm", 60}, {"mem_bytes", 4LL << 30}},
                         {{"pid_file", dir / "n.pid"}, {"sm", 20}, {"mem_bytes", 2LL << 30}}})}}};
  write_file(dir / "scenario.json", scen.dump());
  // --top-processes 1: the worker is exported on its own, the neighbour only inside `other`.
  const int serve = start({wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "200ms", "--top-processes",
                           "1", "--process-interval", "1s", "--process-metrics"}, // issue 32: opt-in
                          {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                           {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                           {"CUDA_VISIBLE_DEVICES", "\x01"}},
                          dir.path(), dir / "s.out", dir / "s.err");
  const int port = wait_for_serve_port(dir / "s.err", 200);
  const std::string mine = "wattscope_process_power_watts{pid=\"" + std::to_string(worker) + "\",";
  const std::string mine_j = "wattscope_process_energy_joules_total{pid=\"" + std::to_string(worker) + "\",";
  std::string m;
  // Scans are once a second: wait for two, so energy has accrued between them.
  for (int i = 0; i < 100; ++i) {
    auto r = wstest::http::get(port, "/metrics", {}, std::chrono::seconds(5));
    ASSERT_TRUE(r) << r.error;
    m = r.body;
    if (sample_value(m, mine_j) > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto cur = wstest::http::get(port, "/api/v1/current", {}, std::chrono::seconds(5));
  ::kill(serve, SIGTERM);
  EXPECT_EQ(wait_exit(serve), 0);
  for (int pid : {worker, neighbour}) {
    ::kill(pid, SIGTERM);
    wait_exit(pid);
  }
  SCOPED_TRACE(m);
  // GPU 0's power splits 60:20 between the worker and the neighbour, who is `other`.
  const double w = sample_value(m, mine);
  const double other = sample_value(m, "wattscope_process_power_watts{pid=\"other\",start_time=\"\",comm=\"\","
                                       "unit=\"\",host=\"");
  ASSERT_GT(w, 0);
  EXPECT_NE(m.find("comm=\"sleep\""), std::string::npos);
  std::istringstream in(m);
  std::string line;
  double other_gpu0 = NAN;
  while (std::getline(in, line))
    if (line.starts_with("wattscope_process_power_watts{pid=\"other\"") && line.find("device=\"gpu0\"") != line.npos)
      other_gpu0 = std::stod(line.substr(line.rfind(' ') + 1));
  EXPECT_NEAR(w / other_gpu0, 3.0, 1e-9) << w << " vs " << other_gpu0 << " (any other: " << other << ")";
  EXPECT_EQ(m.find("wattscope_process_power_watts{pid=\"" + std::to_string(neighbour) + "\""), std::string::npos)
      << "the neighbour is folded into other";
  EXPECT_GT(sample_value(m, mine_j), 0);
  EXPECT_NE(m.find("top 1 processes by power"), std::string::npos);
  EXPECT_NE(m.find("# TYPE wattscope_process_energy_joules_total counter"), std::string::npos);
  write_file(dir / "metrics.txt", m);
  auto check = run({"/bin/sh", "-c", "promtool check metrics < " + (dir / "metrics.txt")});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  // The same in /api/v1/current.
  ASSERT_TRUE(cur) << cur.error;
  const json j = json::parse(cur.body);
  ASSERT_EQ(j["processes"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["processes"][0]["pid"], worker);
  EXPECT_EQ(j["processes"][0]["gpus"][0]["index"], 0);
  EXPECT_GE(j["processes_other"]["processes"].get<int>(), 1);
  EXPECT_TRUE(j["units"].is_array());
}

// Issue 12: a machine-wide scan reads every process on the machine, so `record` scans every 5 s unless told otherwise;
// `--process-interval` sets it, never below a second.
TEST(Attribution, RecordScansTheMachineEveryFiveSecondsUnlessToldOtherwise) {
  TempDir dir;
  auto scan_ticks = [&](const std::string& db) {
    std::vector<int64_t> ticks;
    for (const auto& row : query(db, "SELECT DISTINCT tick FROM process_samples ORDER BY tick"))
      ticks.push_back(std::stoll(row.at(0).value_or("-1")));
    return ticks;
  };
  // A process on a (fake) GPU: one of the top N at every scan, the first included. A process that used neither a CPU
  // nor a GPU in a scan's window gets no row, and on a quiet machine that could be every other one.
  const int worker = start({"/bin/sleep", "30"}, {}, dir.path(), dir / "w.out", dir / "w.err");
  const int idle = start({"/bin/sleep", "30"}, {}, dir.path(), dir / "i.out", dir / "i.err"); // on no GPU, no CPU
  write_file(dir / "w.pid", std::to_string(worker));
  write_file(dir / "scenario.json",
             json{{"devices", {gpu(0, {{{"pid_file", dir / "w.pid"}, {"sm", 60}, {"mem_bytes", 4LL << 30}}})}}}.dump());
  const std::map<std::string, std::string> env{{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                                               {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                                               {"CUDA_VISIBLE_DEVICES", "\x01"}};
  // 200 ms ticks for 6.5 s: the default scans at the first tick and 5 s later; 1 s scans about every 5th tick.
  Result def = run({wattscope(), "record", "--interval", "200ms", "--duration", "6500ms", "--db", dir / "d.db"}, env,
                   dir.path());
  ASSERT_EQ(def.exit_code, 0) << def.err;
  Result fast = run({wattscope(), "record", "--interval", "200ms", "--duration", "6500ms", "--process-interval", "1s",
                     "--db", dir / "f.db"},
                    env, dir.path());
  for (int pid : {worker, idle}) {
    ::kill(pid, SIGTERM);
    wait_exit(pid);
  }
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  const std::string rows_of = "SELECT COUNT(*) FROM process_samples WHERE pid = ";
  EXPECT_NE(scalar(dir / "f.db", rows_of + std::to_string(worker)), "0");
  EXPECT_EQ(scalar(dir / "f.db", rows_of + std::to_string(idle)), "0") << "a process that did nothing is no one's top";
  const auto d = scan_ticks(dir / "d.db");
  const auto f = scan_ticks(dir / "f.db");
  ASSERT_GE(d.size(), 1u);
  EXPECT_LE(d.front(), 1) << "the GPU's process is sampled from the first scan (stored by the tick after it)";
  // The run's end takes a last scan with its last sample (issue 29: the end of the run is measured too), however
  // soon after the one before: the spacing holds between the others.
  EXPECT_LE(d.size(), 3u) << "default record scans every 5 s, and at the end";
  for (size_t i = 1; i + 1 < d.size(); ++i)
    EXPECT_GE(d[i] - d[i - 1], 24) << "ticks of 200 ms between scans";
  EXPECT_GE(f.size(), 5u) << "--process-interval 1s scans every second";
  for (size_t i = 1; i + 1 < f.size(); ++i)
    EXPECT_GE(f[i] - f[i - 1], 4);

  Result bad = run({wattscope(), "record", "--process-interval", "500ms", "--duration", "1s", "--db", dir / "b.db"}, {},
                   dir.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--process-interval 500ms: processes are scanned at most once a second"), std::string::npos)
      << bad.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "b.db"));
}

// Issue 12: on an H100 the per-process utilisation samples cost 2.7 ms of CPU a GPU a scan, even where no process is
// on the GPU, and a count-only list call 84 us against 13 us for the list itself. So a GPU that lists no process is
// not asked for samples, and the lists are asked with room from the start. The scans are counted from -v's lines.
TEST(Attribution, UtilisationSamplesAreAskedOnlyOfGpusThatListAProcess) {
  TempDir dir;
  write_file(
      dir / "scenario.json",
      json{{"devices",
            {gpu(0, {{{"pid_file", dir / "a.pid"}, {"sm", 60}, {"mem_bytes", 1LL << 30}}}), gpu(1, json::array())}}}
          .dump());
  Result r = run({wattscope(), "-v", "run", "--interval", "200ms", "--process-interval", "1s", "--db", dir / "w.db",
                  "--", "/bin/sh", "-c", "sleep 4.2 & echo $! > a.pid; wait"},
                 {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                  {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                  {"WATTSCOPE_FAKE_NVML_CALLS", dir / "calls.json"},
                  {"CUDA_VISIBLE_DEVICES", "\x01"}},
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int scans = 0;
  for (size_t at = r.err.find("process scan "); at != std::string::npos; at = r.err.find("process scan ", at + 1))
    scans = std::max(scans, std::atoi(r.err.c_str() + at + 13));
  ASSERT_GE(scans, 4) << r.err;
  const json calls = json::parse(read_file(dir / "calls.json"));
  auto n = [&](const char* symbol) { return calls.value(symbol, 0LL); };
  EXPECT_EQ(n("nvmlDeviceGetComputeRunningProcesses_v3"), 2 * scans) << "one call a GPU a scan: " << calls.dump(2);
  EXPECT_EQ(n("nvmlDeviceGetGraphicsRunningProcesses_v3"), 2 * scans) << calls.dump(2);
  const long long samples = n("nvmlDeviceGetProcessesUtilizationInfo (samples)");
  EXPECT_GE(samples, scans - 2) << "GPU 0's process, from the scan after its pid file exists: " << calls.dump(2);
  EXPECT_LE(samples, scans) << calls.dump(2);
  EXPECT_EQ(n("nvmlDeviceGetProcessesUtilizationInfo"), 2 * samples)
      << "a count and the samples for GPU 0 when it lists the process, nothing for GPU 1: " << calls.dump(2);
  // The process still gets its GPU's use.
  EXPECT_NE(scalar(dir / "w.db", "SELECT COUNT(*) FROM process_gpu_samples WHERE gpu_index = 0 AND sm_pct = 60"), "0");
  EXPECT_EQ(scalar(dir / "w.db", "SELECT COUNT(*) FROM process_gpu_samples WHERE gpu_index = 1"), "0");
}

} // namespace

namespace {

// The run's cgroup is made where WATTSCOPE_CGROUP_ROOT says (the test suite sets `none`, so that no test writes under
// /sys/fs/cgroup): a plain directory is no cgroup2 hierarchy, so the run says why it follows by parent pid only, and
// leaves nothing behind.
TEST(Attribution, CgroupRootComesFromTheEnvironment) {
  TempDir dir;
  std::filesystem::create_directories(dir / "cg");
  Result r = run({wattscope(), "run", "--interval", "100ms", "--db", dir / "w.db", "--", "/bin/true"},
                 {{"WATTSCOPE_CGROUP_ROOT", dir / "cg"}, {"WATTSCOPE_NVML_LIBRARY", "/nonexistent"}}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("followed by parent pid only"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir / "cg"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::is_empty(dir / "cg"));
  Result none = run({wattscope(), "run", "--interval", "100ms", "--db", dir / "n.db", "--", "/bin/true"},
                    {{"WATTSCOPE_CGROUP_ROOT", "none"}, {"WATTSCOPE_NVML_LIBRARY", "/nonexistent"}}, dir.path());
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.err.find("(WATTSCOPE_CGROUP_ROOT=none)"), std::string::npos) << none.err;
}

} // namespace
} // namespace e2e_attribution
