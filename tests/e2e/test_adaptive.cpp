// Adaptive sampling (issue 18) end to end: the real binary with the fake NVML, whose GPUs are quiet for a few seconds
// and then busy (a timeline of time since nvmlInit), and a /proc fixture whose /proc/stat a thread of the test
// advances as a quiet CPU would.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "http_client.hpp"

namespace e2e_adaptive { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

constexpr int kEnergyCalls = 400;

// GPU 0 has an energy counter whose increments differ call by call (so a row paired with the wrong reading shows);
// GPU 1 has none, a constant 100 W, and is integrated. Both are quiet (1 %) for `quiet_s`, then busy (70 %).
json scenario(double quiet_s) {
  json energy = json::array();
  long long e = 5'000'000'000LL;
  for (int k = 0; k < kEnergyCalls; ++k)
    energy.push_back(e += 1000 + (k * 7919) % 5003);
  json util = {{"timeline", {{"quiet", 1}, {"busy", 70}}}};
  json m0 = {{"power_instant_mw", 90000}, {"energy_mj", energy}, {"util_gpu", util}, {"util_mem", 0}};
  json m1 = {{"power_instant_mw", 100000}, {"util_gpu", util}, {"util_mem", 0}}; // one call answers both
  return {{"timeline",
           {{"loop", false}, {"segments", {{{"label", "quiet"}, {"s", quiet_s}}, {{"label", "busy"}, {"s", 1000}}}}}},
          {"devices",
           {{{"name", "counter"}, {"uuid", "GPU-adaptive-0"}, {"metrics", m0}},
            {{"name", "integrated"}, {"uuid", "GPU-adaptive-1"}, {"metrics", m1}}}}};
}

// A /proc with a stat file whose idle time a thread advances (two CPUs, 2 idle jiffies each every 10 ms; busy time
// never moves), written in place at a fixed width so the source's open fd reads it whole.
class QuietProc {
public:
  explicit QuietProc(const std::string& dir) : path_(dir + "/stat") {
    write_file(dir + "/meminfo", "MemTotal:       16000000 kB\nMemAvailable:   12000000 kB\n");
    write(0);
    thread_ = std::thread([this] {
      for (long long idle = 1; !stop_; ++idle) {
        write(idle * 2);
        std::this_thread::sleep_for(10ms);
      }
    });
  }
  ~QuietProc() {
    stop_ = true;
    thread_.join();
  }

private:
  void write(long long idle) {
    char buf[256];
    const int n = std::snprintf(buf, sizeof buf,
                                "cpu  100 0 100 %015lld 0 0 0 0 0 0\ncpu0 50 0 50 %015lld 0 0 0 0 0 0\n"
                                "cpu1 50 0 50 %015lld 0 0 0 0 0 0\nintr 0\n",
                                1000 + 2 * idle, 500 + idle, 500 + idle);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (::pwrite(fd, buf, static_cast<size_t>(n), 0) != n) std::perror("pwrite");
    ::close(fd);
  }
  std::string path_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::map<std::string, std::string> fake_env(const TempDir& dir) {
  return {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
          {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
          {"WATTSCOPE_FAKE_NVML_CALLS", dir / "calls.json"},
          {"CUDA_VISIBLE_DEVICES", "\x01"}};
}

std::vector<std::string> adaptive_args(const TempDir& dir) {
  return {"--interval",      "100ms", "--idle-interval", "500ms",      "--idle-after", "400ms",
          "--top-processes", "0",     "--procfs-root",   dir / "proc", "--sysfs-root", dir / "sys"};
}

int64_t num(const std::optional<std::string>& s) {
  return s ? std::stoll(*s) : -1;
}

} // namespace

// An Xid while idle is news: the idle probes poll the event set too (no thread waits for it), so the error is stored
// when it comes, with a full sample, not at the next full sample 10 s later (here: the run's end).
TEST(Adaptive, AnXidWhileIdleIsTakenByTheProbesAndStoredAtOnce) {
  TempDir dir;
  json scen = scenario(1000); // quiet throughout
  scen["devices"][0]["xid"] = {{{"after_s", 1.5}, {"xid", 79}}};
  write_file(dir / "scenario.json", scen.dump());
  std::filesystem::create_directories(dir / "sys");
  QuietProc proc(dir / "proc");
  Result r = run({wattscope(), "record", "--duration", "4s", "--db", dir / "w.db", "--interval", "100ms",
                  "--idle-interval", "10s", "--idle-after", "400ms", "--top-processes", "0", "--procfs-root",
                  dir / "proc", "--sysfs-root", dir / "sys"},
                 fake_env(dir), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "w.db";
  const int64_t start_ms = num(query(db, "SELECT start_ms FROM runs")[0][0]);
  auto xid = query(db, "SELECT ts_ms FROM events WHERE kind = 'xid'");
  ASSERT_EQ(xid.size(), 1u) << r.err;
  EXPECT_GE(num(xid[0][0]) - start_ms, 1400);
  EXPECT_LT(num(xid[0][0]) - start_ms, 3000) << "taken by a probe, not by the sample at the run's end";
  // The tick that took it was stored in full: the sampler went back to full rate, saying why.
  auto active = query(db, "SELECT detail FROM events WHERE kind = 'sampling-active'");
  ASSERT_GE(active.size(), 1u) << r.err;
  EXPECT_NE(active[0][0]->find("xid gpu0"), std::string::npos) << *active[0][0];
}

TEST(Adaptive, IdleTakesOverAfterIdleAfterAndGivesWayOnTheFirstBusyTick) {
  TempDir dir;
  write_file(dir / "scenario.json", scenario(3.5).dump());
  std::filesystem::create_directories(dir / "sys");
  QuietProc proc(dir / "proc");
  std::vector<std::string> args = {wattscope(), "record", "--duration", "5s", "--db", dir / "w.db"};
  for (auto& a : adaptive_args(dir))
    args.push_back(a);
  Result r = run(args, fake_env(dir), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "w.db";

  // One switch each way, in that order: idle after the quiet start, active when the GPUs get busy at 3.5 s.
  auto events = query(db, "SELECT kind, ts_ms, detail FROM events WHERE kind LIKE 'sampling-%' ORDER BY seq");
  ASSERT_EQ(events.size(), 2u) << r.err;
  EXPECT_EQ(events[0][0], "sampling-idle");
  EXPECT_EQ(events[1][0], "sampling-active");
  EXPECT_NE(events[0][2]->find("interval 0.5 s"), std::string::npos) << *events[0][2];
  EXPECT_NE(events[0][2]->find("integrated over 0.5 s steps"), std::string::npos) << *events[0][2];
  EXPECT_NE(events[1][2]->find("gpu0 at 70 %"), std::string::npos) << *events[1][2];
  const int64_t start_ms = num(query(db, "SELECT start_ms FROM runs")[0][0]);
  const int64_t idle_ms = num(events[0][1]) - start_ms, active_ms = num(events[1][1]) - start_ms;
  EXPECT_GE(idle_ms, 400);  // not before --idle-after of quiet
  EXPECT_LT(idle_ms, 2000); // nor long after (generous for a loaded machine)
  EXPECT_GE(active_ms, 3400);
  EXPECT_LT(active_ms, 3500 + 400); // the first probe after the GPUs got busy, not the next full sample

  // Rows of GPU 0 by tick: 5 slots apart while idle, 1 apart again from the busy tick on.
  auto rows = query(db, "SELECT tick, ts_ms, util_gpu_pct, power_w, energy_j FROM gpu_samples WHERE gpu_index = 0 "
                        "ORDER BY tick");
  int idle_gaps = 0;
  bool busy_seen = false;
  for (size_t i = 1; i < rows.size(); ++i) {
    const int64_t ts = num(rows[i][1]) - start_ms, gap = num(rows[i][0]) - num(rows[i - 1][0]);
    if (ts > idle_ms + 50 && ts < active_ms - 50) {
      EXPECT_GE(gap, 5) << "row at " << ts << " ms is inside the idle stretch";
      ++idle_gaps;
    }
    if (ts >= active_ms && !busy_seen) {
      busy_seen = true;
      // The tick that saw activity is stored in full: its utilisation is the busy one, and it has power and energy.
      ASSERT_TRUE(rows[i][2].has_value());
      EXPECT_EQ(std::stod(*rows[i][2]), 70);
      EXPECT_TRUE(rows[i][3].has_value());
      EXPECT_TRUE(rows[i][4].has_value());
    } else if (ts > active_ms + 50) {
      EXPECT_LE(gap, 3) << "row at " << ts << " ms is after the switch back"; // 1, or a stall's skipped slot
    }
  }
  EXPECT_TRUE(busy_seen);
  EXPECT_GE(idle_gaps, 3);

  // Energy from the counter: every row is exactly the counter's difference from the first reading, across the idle
  // stretch as anywhere (the probe reads utilisation only, so the k-th stored row holds the k-th energy reading).
  const json energy = scenario(0)["devices"][0]["metrics"]["energy_mj"];
  ASSERT_LT(rows.size(), static_cast<size_t>(kEnergyCalls));
  for (size_t k = 0; k < rows.size(); ++k) {
    const double expected = (energy[k].get<double>() - energy[0].get<double>()) / 1000.0;
    EXPECT_NEAR(std::stod(*rows[k][4]), expected, 1e-6) << "row " << k;
  }
  // The probe made only utilisation calls: energy was read once per stored row, utilisation more often.
  const json calls = json::parse(read_file(dir / "calls.json"));
  // (GPU 1 asked once, on tick 0: it answers NOT_SUPPORTED and is not asked again.)
  const int64_t energy_calls = calls["nvmlDeviceGetTotalEnergyConsumption"].get<int64_t>();
  EXPECT_GE(energy_calls, static_cast<int64_t>(rows.size()));
  EXPECT_LE(energy_calls, static_cast<int64_t>(rows.size()) + 1);
  EXPECT_GE(calls["nvmlDeviceGetUtilizationRates"].get<int64_t>() / 2 - static_cast<int64_t>(rows.size()), 15);

  // show: the run had an idle stretch sampled at 0.5 s; the integrated GPU says its steps; probe ticks are not
  // skipped ticks.
  const json j = json::parse(run({wattscope(), "show", "--json", "--db", db}).out);
  ASSERT_TRUE(j["sampling"].is_object()) << j.dump();
  EXPECT_EQ(j["sampling"]["idle_stretches"], 1);
  EXPECT_DOUBLE_EQ(j["sampling"]["idle_interval_s"].get<double>(), 0.5);
  EXPECT_GT(j["sampling"]["probe_ticks"].get<int64_t>(), 10);
  EXPECT_GT(j["sampling"]["idle_s"].get<double>(), 1.5);
  EXPECT_EQ(j["gpus"][0]["energy_method"], "counter");
  EXPECT_EQ(j["gpus"][1]["energy_method"], "integrated");
  EXPECT_GE(j["gpus"][1]["max_integration_step_s"].get<double>(), 0.45);
  const int64_t max_tick = num(query(db, "SELECT max(tick) FROM cpu_samples")[0][0]);
  EXPECT_EQ(j["samples"].get<int64_t>() + j["sampling"]["probe_ticks"].get<int64_t>() +
                j["skipped_ticks"].get<int64_t>(),
            max_tick + 1);
  EXPECT_LT(j["skipped_ticks"].get<int64_t>(), j["sampling"]["probe_ticks"].get<int64_t>());
  const std::string text = run({wattscope(), "show", "--db", db}).out;
  EXPECT_NE(text.find("1 idle stretch"), std::string::npos) << text;
  EXPECT_NE(text.find("sampled at 0.5 s instead of 0.1 s"), std::string::npos) << text;
  EXPECT_NE(text.find("[integrated, steps up to"), std::string::npos) << text;
  EXPECT_EQ(text.find("[counter, steps"), std::string::npos) << text;
}

TEST(Adaptive, IntegratedEnergyStaysRightAcrossTheIdleStretch) {
  // GPU 1 draws a constant 100 W: the trapezoid is exact whatever its steps, so its energy is 100 W x the time
  // between its first and last rows, idle stretch included.
  TempDir dir;
  write_file(dir / "scenario.json", scenario(100).dump()); // quiet throughout
  std::filesystem::create_directories(dir / "sys");
  QuietProc proc(dir / "proc");
  std::vector<std::string> args = {wattscope(), "record", "--duration", "3s", "--db", dir / "w.db"};
  for (auto& a : adaptive_args(dir))
    args.push_back(a);
  Result r = run(args, fake_env(dir), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = query(dir / "w.db", "SELECT min(ts_ms), max(ts_ms), max(energy_j), count(*) FROM gpu_samples WHERE "
                                  "gpu_index = 1");
  const double span_s = static_cast<double>(num(rows[0][1]) - num(rows[0][0])) / 1000.0;
  EXPECT_NEAR(std::stod(*rows[0][2]), 100.0 * span_s, 3.0); // ts_ms is the wall clock, in ms
  EXPECT_LT(num(rows[0][3]), 20);                           // 30 at full rate
  EXPECT_EQ(scalar(dir / "w.db", "SELECT count(*) FROM events WHERE kind = 'sampling-active'"), "0")
      << scalar(dir / "w.db", "SELECT group_concat(detail, ' | ') FROM events WHERE kind = 'sampling-active'");
  // The run ended while idle: its last row is at the end, not an idle interval before it.
  const int64_t end_ms = num(query(dir / "w.db", "SELECT end_ms FROM runs")[0][0]);
  EXPECT_LT(end_ms - num(rows[0][1]), 300);
}

TEST(Adaptive, MetricsShowTheIntervalInForce) {
  TempDir dir;
  write_file(dir / "scenario.json", scenario(2.5).dump());
  std::filesystem::create_directories(dir / "sys");
  QuietProc proc(dir / "proc");
  std::vector<std::string> args = {wattscope(), "serve", "--listen", "127.0.0.1:0"};
  for (auto& a : adaptive_args(dir))
    args.push_back(a);
  const int pid = start(args, fake_env(dir), dir.path(), dir / "out", dir / "err");
  const int port = wait_for_serve_port(dir / "err", 100);
  auto interval = [&]() -> std::string {
    auto resp = http::get(port, "/metrics", {}, 5s);
    std::istringstream in(resp.body);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("wattscope_sampler_interval_seconds{host=", 0) == 0) return line.substr(line.rfind(' ') + 1);
    return "";
  };
  std::vector<std::string> seen;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < 4s) {
    const std::string v = interval();
    if (seen.empty() || seen.back() != v) seen.push_back(v);
    std::this_thread::sleep_for(50ms);
  }
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
  // 0.1 at first, 0.5 while idle, 0.1 again once the GPUs are busy.
  ASSERT_EQ(seen.size(), 3u) << read_file(dir / "err");
  EXPECT_EQ(seen[0], "0.1");
  EXPECT_EQ(seen[1], "0.5");
  EXPECT_EQ(seen[2], "0.1");
  const std::string err = read_file(dir / "err");
  EXPECT_NE(err.find("sampling-idle"), std::string::npos) << err;
}

TEST(Adaptive, BadFlagValuesAreRejectedWithAClearMessage) {
  TempDir dir;
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--interval", "1s", "--idle-interval", "500ms"},
       "--idle-interval 500ms must be longer than the sampling "
       "interval (1s)"},
      {{"--interval", "1s", "--idle-interval", "1s"}, "must be longer than the sampling interval"},
      {{"--idle-interval", "0"}, "--idle-interval"},
      {{"--idle-interval", "0s"}, "--idle-interval"},
      {{"--idle-interval", "ten"}, "--idle-interval"},
      {{"--idle-interval", "2h"}, "at most 1h"},
      {{"--idle-interval", "10s", "--idle-after", "soon"}, "--idle-after"},
      {{"--idle-interval", "10s", "--idle-after", "0"}, "--idle-after"},
      {{"--idle-after", "5m"}, "--idle-after 5m has no effect without --idle-interval"},
  };
  for (const auto& c : cases) {
    for (const std::string cmd : {"record", "serve", "run"}) {
      std::vector<std::string> args = {wattscope(), cmd, "--db", dir / "w.db"};
      if (cmd == "serve") args = {wattscope(), cmd, "--listen", "127.0.0.1:0"};
      args.insert(args.end(), c.flags.begin(), c.flags.end());
      if (cmd == "run") {
        args.push_back("--");
        args.push_back("true");
      }
      SCOPED_TRACE(cmd + " " + c.flags.front() + " " + c.flags[1]);
      Result r = run(args, {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}}, dir.path());
      EXPECT_EQ(r.exit_code, cmd == "run" ? 125 : 2) << r.err;
      EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "w.db")); // nothing was recorded by any of them
}

TEST(Adaptive, GoodFlagsAreAcceptedByRun) {
  TempDir dir;
  Result r =
      run({wattscope(), "run", "--db", dir / "w.db", "--idle-interval", "10s", "--idle-after", "30s", "--", "true"},
          {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(run({wattscope(), "show", "--json", "--db", dir / "w.db"}).out);
  EXPECT_EQ(j["sampling"]["adaptive"], true);
  EXPECT_DOUBLE_EQ(j["sampling"]["idle_interval_s"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(j["sampling"]["idle_after_s"].get<double>(), 30);
  EXPECT_EQ(j["sampling"]["idle_stretches"], 0);
  // Off unless given.
  Result off = run({wattscope(), "run", "--db", dir / "off.db", "--", "true"},
                   {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}}, dir.path());
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_TRUE(json::parse(run({wattscope(), "show", "--json", "--db", dir / "off.db"}).out)["sampling"].is_null());
}
} // namespace e2e_adaptive

namespace e2e_adaptive {
namespace {

// A /proc whose stat file a thread advances as a machine busy with other users' work: two CPUs, 1.5 cores busy
// (3 busy and 1 idle jiffy every 20 ms), written in place at a fixed width.
class BusyProc {
public:
  explicit BusyProc(const std::string& dir) : path_(dir + "/stat") {
    std::filesystem::create_directories(dir);
    write_file(dir + "/meminfo", "MemTotal:       16000000 kB\nMemAvailable:   12000000 kB\n");
    write(0);
    thread_ = std::thread([this] {
      for (long long step = 1; !stop_; ++step) {
        write(step);
        std::this_thread::sleep_for(20ms);
      }
    });
  }
  ~BusyProc() {
    stop_ = true;
    thread_.join();
  }

private:
  void write(long long step) {
    char buf[256];
    const long long busy = 3 * step, idle = step;
    const int n = std::snprintf(buf, sizeof buf,
                                "cpu  %015lld 0 100 %015lld 0 0 0 0 0 0\ncpu0 %015lld 0 50 %015lld 0 0 0 0 0 0\n"
                                "cpu1 %015lld 0 50 %015lld 0 0 0 0 0 0\nintr 0\n",
                                100 + busy, 1000 + idle, 50 + busy / 2, 500 + idle / 2, 50 + busy - busy / 2,
                                500 + idle - idle / 2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (::pwrite(fd, buf, static_cast<size_t>(n), 0) != n) std::perror("pwrite");
    ::close(fd);
  }
  std::string path_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

} // namespace

// Issue 33: `run` is idle when its command is. Quiet GPUs, a machine 1.5 of 2 cores busy with other work, a command
// that sleeps: the run goes idle (before, the machine's CPU kept it at the full rate throughout). `record` on the same
// machine stays at the full rate: there the machine is the scope, and it is busy.
TEST(Adaptive, RunJudgesItsCommandNotOtherUsersWork) {
  TempDir dir;
  write_file(dir / "scenario.json", scenario(1000).dump()); // quiet throughout
  std::filesystem::create_directories(dir / "sys");
  BusyProc proc(dir / "proc");
  auto count_idle = [&](std::vector<std::string> args, const std::string& db, std::vector<std::string> command) {
    for (auto& a : adaptive_args(dir))
      args.push_back(a);
    for (auto& a : command)
      args.push_back(a);
    Result r = run(args, fake_env(dir), dir.path());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return query(db, "SELECT detail FROM events WHERE kind = 'sampling-idle'").size();
  };
  EXPECT_GE(count_idle({wattscope(), "run", "--db", dir / "run.db"}, dir / "run.db", {"--", "sleep", "3"}), 1u);
  EXPECT_EQ(count_idle({wattscope(), "record", "--duration", "3s", "--db", dir / "rec.db"}, dir / "rec.db", {}), 0u);
}

} // namespace e2e_adaptive
