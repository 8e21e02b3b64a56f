// Phases and work end to end (issue 15): children that send markers through `wattscope mark` and through the Python
// helper, under the real binary with the fake NVML library; per-phase energy checked against the fake's counters
// (interpolated at each marker, issue 29; tests/e2e/test_phase_energy.cpp checks it against a known constant power).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"

namespace e2e_phases { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

constexpr int kTicks = 400; // the fake's counter list is longer than any run here samples

// Two GPUs whose energy counters (mJ) rise by different, uneven steps on every call, so a phase's figure shows
// which ticks it was taken between.
json scenario() {
  json s = {{"driver_version", "550.54.15"}, {"nvml_version", "12.550.54.15"}, {"devices", json::array()}};
  for (int i = 0; i < 2; ++i) {
    json energy = json::array();
    long long e = 5'000'000LL * (i + 1);
    for (int k = 0; k < kTicks; ++k)
      energy.push_back(e += 1000 + (k * 37 + i * 11) % 500);
    s["devices"].push_back({{"name", "NVIDIA H100 80GB HBM3"},
                            {"uuid", "GPU-" + std::to_string(2000 + i)},
                            {"pci_bus_id", "00000000:" + std::to_string(20 + i) + ":00.0"},
                            {"metrics",
                             {{"power_mw", 200000 + 1000 * i},
                              {"energy_mj", energy},
                              {"util_gpu", 50},
                              {"mem_used_bytes", 1 << 30},
                              {"mem_total_bytes", 85899345920LL}}}});
  }
  return s;
}

struct Fixture {
  TempDir dir;
  json scen = scenario();
  std::map<std::string, std::string> env;
  Fixture() {
    write_file(dir / "scenario.json", scen.dump());
    env["WATTSCOPE_NVML_LIBRARY"] = fake_nvml();
    env["WATTSCOPE_FAKE_NVML_SCENARIO"] = dir / "scenario.json";
    env["CUDA_VISIBLE_DEVICES"] = "\x01";
    env["WATTSCOPE_SOCKET"] = "\x01";
    env["PYTHONDONTWRITEBYTECODE"] = "1";
    for (const char* rank : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"})
      env[rank] = "\x01"; // the Python child sends phases as a job's first rank does
  }
  std::string db() const { return dir / "wattscope.db"; }
  Result wattscope_run(const std::vector<std::string>& child, std::map<std::string, std::string> extra = {}) {
    std::vector<std::string> argv = {wattscope(), "run", "--interval", "50ms", "--task", "phases", "--"};
    argv.insert(argv.end(), child.begin(), child.end());
    auto e = env;
    for (auto& [k, v] : extra)
      e[k] = v;
    return run(argv, e, dir.path());
  }
};

std::string q(const std::string& s) {
  return "'" + s + "'";
}

// Every phase's energy per GPU is the fake's counter interpolated at its end minus at its begin (issue 29: linear
// between the ticks around each marker; before the first tick the first reading, after the last the last), and its
// start_tick/end_tick are those ticks: the last sample at or before its begin, the first at or after its end.
void expect_phase_energy_matches_the_counters(const Fixture& f) {
  for (int gpu = 0; gpu < 2; ++gpu) {
    auto samples = query(f.db(), "SELECT tick, ts_ms FROM gpu_samples WHERE gpu_index = " + std::to_string(gpu) +
                                     " ORDER BY tick");
    ASSERT_GE(samples.size(), 4u);
    // Row k of a GPU's samples holds the fake's k-th counter reading (one read per tick).
    auto row_of = [&](int64_t tick) {
      for (size_t k = 0; k < samples.size(); ++k)
        if (std::stoll(*samples[k][0]) == tick) return static_cast<int>(k);
      ADD_FAILURE() << "no sample at tick " << tick;
      return 0;
    };
    const int rows = static_cast<int>(samples.size());
    auto ts = [&](int row) { return std::stoll(*samples[static_cast<size_t>(row)][1]); };
    const json& counter = f.scen["devices"][gpu]["metrics"]["energy_mj"];
    auto c = [&](int row) { return counter[static_cast<size_t>(row)].get<double>(); };
    // The counter (mJ) at wall time t, and how far off it may be: the stored times are whole milliseconds of the
    // wall clock at each tick, the interpolation is between the reads' own times in the steady clock (a read comes up
    // to ~10 ms after its tick on a loaded machine: 10 ms either way, in the interval's share, still a fifth of a tick
    // at 50 ms, where the wrong tick is off by a whole step).
    auto position = [&](int64_t t, double& slack) {
      slack = 0;
      if (t <= ts(0)) return c(0);
      for (int k = 0; k + 1 < rows; ++k)
        if (t < ts(k + 1)) {
          const double span = static_cast<double>(ts(k + 1) - ts(k));
          slack = (c(k + 1) - c(k)) * std::min(1.0, 10.0 / std::max(span, 1.0));
          return c(k) + (c(k + 1) - c(k)) * static_cast<double>(t - ts(k)) / span;
        }
      return c(rows - 1);
    };
    for (const auto& p : query(f.db(), "SELECT name, start_ms, end_ms, start_tick, end_tick, device_energy_j, "
                                       "energy_j FROM phases ORDER BY phase_id")) {
      SCOPED_TRACE(*p[0] + " gpu" + std::to_string(gpu));
      const int a = row_of(std::stoll(*p[3]));
      const int b = row_of(std::stoll(*p[4]));
      const int64_t start = std::stoll(*p[1]), end = std::stoll(*p[2]);
      EXPECT_LE(ts(a), start + 1);
      if (a + 1 < rows) {
        EXPECT_GE(ts(a + 1), start - 1);
      }
      // An end after the last tick (the run's last moments, or the run's end closing the phase) has no later tick:
      // it sits at the last one, as the run's own total ends there.
      if (b + 1 < rows) {
        EXPECT_GE(ts(b), end - 1);
      }
      if (b > 0) {
        EXPECT_LE(ts(b - 1), end + 1);
      }
      double slack_start = 0, slack_end = 0;
      const double expected_j = (position(end, slack_end) - position(start, slack_start)) / 1000.0;
      const json dev = json::parse(*p[5]);
      ASSERT_TRUE(dev.contains("gpu" + std::to_string(gpu))) << *p[5];
      EXPECT_NEAR(dev["gpu" + std::to_string(gpu)].get<double>(), expected_j, (slack_start + slack_end) / 1000 + 1e-9);
    }
  }
  // The phase total is the sum over whatever devices it lists.
  for (const auto& p : query(f.db(), "SELECT device_energy_j, energy_j FROM phases")) {
    double sum = 0;
    const json devices = json::parse(*p[0]);
    for (const auto& [k, v] : devices.items())
      sum += v.get<double>();
    EXPECT_NEAR(std::stod(*p[1]), sum, 1e-9);
  }
}

} // namespace

TEST(Phases, ShellChildMarksPhasesNestingAndWork) {
  Fixture f;
  const std::string w = q(wattscope());
  const std::string script = w + " mark begin train && " + w + " mark begin epoch --index 0 && sleep 0.25 && " + w +
                             " mark work 32 samples && " + w + " mark work 32 && " + w + " mark end epoch && " + w +
                             " mark point checkpoint && " + w + " mark begin epoch --index 1 && sleep 0.25 && " + w +
                             " mark work 1000 tokens && " + w + " mark end && " + w + " mark end train && sleep 0.15";
  Result r = f.wattscope_run({"sh", "-c", script});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto phases = query(f.db(), "SELECT phase_id, name, \"index\", parent, closed_by_run_end, energy_method FROM phases "
                              "ORDER BY phase_id");
  ASSERT_EQ(phases.size(), 3u) << r.err;
  EXPECT_EQ(*phases[0][1], "train");
  EXPECT_FALSE(phases[0][2].has_value());
  EXPECT_FALSE(phases[0][3].has_value());
  EXPECT_EQ(*phases[1][1], "epoch");
  EXPECT_EQ(*phases[1][2], "0");
  EXPECT_EQ(*phases[1][3], "0");
  EXPECT_EQ(*phases[2][2], "1");
  EXPECT_EQ(*phases[2][3], "0");
  for (const auto& p : phases) {
    EXPECT_EQ(*p[4], "0");
    EXPECT_EQ(*p[5], "counter");
  }
  auto work = query(f.db(), "SELECT amount, unit, phase_id FROM work ORDER BY seq");
  ASSERT_EQ(work.size(), 3u);
  EXPECT_EQ(*work[0][1], "samples");
  EXPECT_EQ(*work[0][2], "1");
  EXPECT_EQ(*work[1][1], "samples"); // the default unit
  EXPECT_EQ(*work[2][0], "1000.0");
  EXPECT_EQ(*work[2][1], "tokens");
  EXPECT_EQ(*work[2][2], "2");
  EXPECT_EQ(scalar(f.db(), "SELECT source FROM events WHERE kind = 'mark'"), "checkpoint");
  expect_phase_energy_matches_the_counters(f);

  // show --json: phases[] with work figures computed from the stored energy and amounts; the text has the table.
  Result show = run({wattscope(), "show", "--json"}, {}, f.dir.path());
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const json j = json::parse(show.out);
  ASSERT_EQ(j["phases"].size(), 3u);
  const json& e0 = j["phases"][1];
  EXPECT_EQ(e0["name"], "epoch");
  EXPECT_EQ(e0["work"]["amount"]["samples"].get<double>(), 64.0);
  EXPECT_NEAR(e0["work"]["energy_per_unit_j"]["samples"].get<double>(), e0["energy_j"].get<double>() / 64.0, 1e-12);
  EXPECT_NEAR(e0["work"]["throughput_per_s"]["samples"].get<double>(), 64.0 / e0["duration_s"].get<double>(), 1e-9);
  // train holds both epochs' work.
  EXPECT_EQ(j["phases"][0]["work"]["amount"]["samples"].get<double>(), 64.0);
  EXPECT_EQ(j["phases"][0]["work"]["amount"]["tokens"].get<double>(), 1000.0);
  EXPECT_EQ(j["work"]["amount"]["tokens"].get<double>(), 1000.0);
  // issue 29: J/sample over the phase the samples were marked in (epoch [0]), not the whole run
  EXPECT_NEAR(j["work"]["energy_per_unit_j"]["samples"].get<double>(), e0["energy_j"].get<double>() / 64.0, 1e-9);
  EXPECT_EQ(j["work"]["covers"]["samples"]["description"], "1 × epoch");
  EXPECT_EQ(j["work"]["covers"]["tokens"]["phases"], json::array({2}));
  ASSERT_EQ(j["marks"].size(), 1u);
  EXPECT_EQ(j["marks"][0]["name"], "checkpoint");
  Result text = run({wattscope(), "show"}, {}, f.dir.path());
  EXPECT_NE(text.out.find("phases"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("epoch [1]"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("J/sample"), std::string::npos) << text.out;
}

TEST(Phases, PythonChildThroughTheHelper) {
  Fixture f;
  const std::string program = R"(
import wattscope
assert wattscope.enabled()

class P:
    def __init__(self, n): self.n = n
    def numel(self): return self.n

class Net:
    def parameters(self): return [P(1000), P(24)]

wattscope.describe_model(Net(), flops=2048)

@wattscope.phase("evaluate")
def evaluate():
    import time; time.sleep(0.15)
    wattscope.work(10, unit="images")

import time
with wattscope.phase("train"):
    for epoch in range(2):
        with wattscope.phase("epoch", index=epoch):
            time.sleep(0.15)
            wattscope.work(16)
            wattscope.work(16)
        wattscope.mark("checkpoint")
evaluate()
)";
  Result r =
      f.wattscope_run({"python3", "-c", program}, {{"PYTHONPATH", std::string(WATTSCOPE_SOURCE_DIR) + "/python"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto phases = query(f.db(), "SELECT name, \"index\", parent FROM phases ORDER BY phase_id");
  ASSERT_EQ(phases.size(), 4u) << r.err;
  EXPECT_EQ(*phases[0][0], "train");
  EXPECT_EQ(*phases[1][0], "epoch");
  EXPECT_EQ(*phases[1][1], "0");
  EXPECT_EQ(*phases[1][2], "0");
  EXPECT_EQ(*phases[2][1], "1");
  EXPECT_EQ(*phases[3][0], "evaluate");
  EXPECT_FALSE(phases[3][2].has_value());
  EXPECT_EQ(scalar(f.db(), "SELECT sum(amount) FROM work WHERE unit = 'samples'"), "64.0");
  EXPECT_EQ(scalar(f.db(), "SELECT phase_id FROM work WHERE unit = 'images'"), "3");
  EXPECT_EQ(scalar(f.db(), "SELECT count(*) FROM events WHERE kind = 'mark' AND source = 'checkpoint'"), "2");
  const json model = json::parse(scalar(f.db(), "SELECT detail FROM events WHERE kind = 'model'"));
  EXPECT_EQ(model["parameters"], 1024);
  EXPECT_EQ(model["flops"], 2048.0);
  EXPECT_EQ(scalar(f.db(), "SELECT source FROM events WHERE kind = 'model'"), "Net");
  expect_phase_energy_matches_the_counters(f);
}

TEST(Phases, APhaseLeftOpenEndsWithTheRun) {
  Fixture f;
  Result r = f.wattscope_run({"sh", "-c", q(wattscope()) + " mark begin forever && sleep 0.2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(scalar(f.db(), "SELECT name || ' ' || closed_by_run_end FROM phases"), "forever 1");
  EXPECT_EQ(scalar(f.db(), "SELECT end_ms = (SELECT end_ms FROM runs) FROM phases"), "1");
  expect_phase_energy_matches_the_counters(f);
}

TEST(Phases, MarkOutsideWattscopeIsANoOpAndBadArgumentsAreUsageErrors) {
  TempDir dir;
  const std::map<std::string, std::string> none = {{"WATTSCOPE_SOCKET", "\x01"}};
  Result r = run({wattscope(), "mark", "begin", "epoch"}, none, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  r = run({wattscope(), "mark", "work", "32"}, {{"WATTSCOPE_SOCKET", dir / "gone.sock"}}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run({wattscope(), "mark", "--strict", "point", "x"}, none, dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("WATTSCOPE_SOCKET is not set"), std::string::npos) << r.err;
  for (const auto& bad : std::vector<std::vector<std::string>>{{"begin"},
                                                               {"work", "lots"},
                                                               {"work", "-5"},
                                                               {"begin", "a\x1b[31m"},
                                                               {"begin", std::string(300, 'n')},
                                                               {"explode", "x"},
                                                               {"begin", "e", "--index", "-2"}}) {
    std::vector<std::string> argv = {wattscope(), "mark"};
    argv.insert(argv.end(), bad.begin(), bad.end());
    r = run(argv, none, dir.path());
    EXPECT_EQ(r.exit_code, 2) << bad[0] << ": " << r.err;
  }
  // No file is left behind by any of it.
  EXPECT_EQ(run({"/bin/sh", "-c", "ls -A | wc -l"}, {}, dir.path()).out, "0\n");
}

// A child that floods its socket with garbage: sampling goes on at its pace and the valid markers still count.
TEST(Phases, GarbageOnTheSocketNeitherCrashesNorStallsSampling) {
  Fixture f;
  const std::string program = R"(
import os, socket, time, json
path = os.environ["WATTSCOPE_SOCKET"]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setblocking(False)
def send(b):
    try: s.sendto(b, path)
    except OSError: pass
send(b'{"kind":"begin","name":"real"}\n')
junk = [b"{bad", b"\xff\xfe\x00", b"[" * 4000, b'{"kind":"begin","name":"\\u001b[2J"}', b'{"kind":"work","amount":1e400,"unit":"x"}',
        b'{"kind":"nope"}', b"x" * 60000, b'{"kind":"end","name":"never-begun"}']
deadline = time.time() + 0.6
while time.time() < deadline:
    for j in junk: send(j)
time.sleep(0.1)
send(b'{"kind":"end","name":"real"}\n')
time.sleep(0.1)
)";
  const auto t0 = std::chrono::steady_clock::now();
  Result r = f.wattscope_run({"python3", "-c", program});
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.exit_code, 0) << r.err.substr(0, 2000);
  EXPECT_EQ(scalar(f.db(), "SELECT name || ' ' || closed_by_run_end FROM phases"), "real 0");
  // 50 ms ticks over at least 0.8 s of child: a stalled sampler would have far fewer; generous bound.
  const int samples = std::stoi(scalar(f.db(), "SELECT count(*) FROM cpu_samples"));
  EXPECT_GE(samples, static_cast<int>(0.8 / 0.05 / 2)) << "took " << took_s << " s";
  EXPECT_NE(r.err.find("marker ignored"), std::string::npos);
  EXPECT_LT(r.err.size(), 20000u) << "the log of rejected markers is rate-limited";
  // The run says, once, that markers were ignored (and how many).
  const std::string said = scalar(f.db(), "SELECT detail FROM events WHERE kind = 'markers-ignored'");
  EXPECT_NE(said.find("marker lines rejected"), std::string::npos) << said;
  EXPECT_NE(said.find("'end' without an open phase"), std::string::npos) << said;
  EXPECT_EQ(said.find(" 0 'end'"), std::string::npos) << said; // the junk ends of a never-begun phase are counted
}

TEST(Phases, RecordListensOnTheSocketItIsGiven) {
  Fixture f;
  const std::string sock = f.dir / "m.sock";
  auto env = f.env;
  const int pid =
      start({wattscope(), "record", "--interval", "50ms", "--duration", "1500ms", "--task", "rec", "--socket", sock},
            env, f.dir.path(), f.dir / "out", f.dir / "err");
  for (int i = 0; i < 100 && ::access(sock.c_str(), F_OK) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  struct stat st {};
  ASSERT_EQ(::lstat(sock.c_str(), &st), 0) << read_file(f.dir / "err");
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(run({wattscope(), "mark", "--socket", sock, "--strict", "begin", "window"}).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(run({wattscope(), "mark", "--socket", sock, "--strict", "work", "5", "steps"}).exit_code, 0);
  EXPECT_EQ(run({wattscope(), "mark", "--socket", sock, "--strict", "end", "window"}).exit_code, 0);
  EXPECT_EQ(wait_exit(pid), 0) << read_file(f.dir / "err");
  EXPECT_EQ(scalar(f.db(), "SELECT name || ' ' || closed_by_run_end FROM phases"), "window 0");
  EXPECT_EQ(scalar(f.db(), "SELECT amount || ' ' || unit || ' ' || phase_id FROM work"), "5.0 steps 0");
  EXPECT_NE(::access(sock.c_str(), F_OK), 0) << "the socket is removed at the end";
  expect_phase_energy_matches_the_counters(f);
}

// --- stats and compare over repeated runs: every expected figure is computed here, from the stored values.
namespace {

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v)
    s += x;
  return s / static_cast<double>(v.size());
}
double sample_sd(const std::vector<double>& v) {
  const double m = mean(v);
  double ss = 0;
  for (double x : v)
    ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}
// Student's t density integrated by Simpson's rule: independent of wattscope's incomplete-beta code.
double two_sided_p(double t, double df) {
  auto pdf = [df](double x) {
    return std::exp(std::lgamma((df + 1) / 2) - std::lgamma(df / 2)) / std::sqrt(df * M_PI) *
           std::pow(1 + x * x / df, -(df + 1) / 2);
  };
  const int n = 200000;
  const double h = std::fabs(t) / n;
  double s = pdf(0) + pdf(std::fabs(t));
  for (int i = 1; i < n; ++i)
    s += (i % 2 ? 4 : 2) * pdf(i * h);
  return 1 - 2 * s * h / 3;
}

std::vector<double> column(const std::string& db, const std::string& sql) {
  std::vector<double> out;
  for (const auto& r : query(db, sql))
    out.push_back(std::stod(*r[0]));
  return out;
}

void record_runs(Fixture& f, const std::string& task, const std::vector<std::string>& sleeps) {
  const std::string w = q(wattscope());
  for (const auto& s : sleeps) {
    std::vector<std::string> argv = {wattscope(),
                                     "run",
                                     "--interval",
                                     "50ms",
                                     "--task",
                                     task,
                                     "--",
                                     "sh",
                                     "-c",
                                     w + " mark begin epoch && " + w + " mark work 100 samples && sleep " + s + " && " +
                                         w + " mark end epoch"};
    Result r = run(argv, f.env, f.dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
}

} // namespace

TEST(Phases, StatsAgreeWithFiguresComputedFromTheStoredRuns) {
  Fixture f;
  record_runs(f, "A", {"0.2", "0.35", "0.5", "0.3"});
  Result r = run({wattscope(), "stats", "--task", "A", "--json"}, {}, f.dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["n"], 4);
  const auto energy = column(f.db(), "SELECT total_energy_j FROM runs WHERE task = 'A' ORDER BY start_ms");
  ASSERT_EQ(energy.size(), 4u);
  const json& e = j["metrics"]["energy_j"];
  EXPECT_NEAR(e["mean"].get<double>(), mean(energy), 1e-9);
  EXPECT_NEAR(e["sd"].get<double>(), sample_sd(energy), 1e-9);
  // issue 29: an energy's interval cannot go below 0: the modified Cox interval of a log-normal mean.
  std::vector<double> logs;
  for (double x : energy)
    logs.push_back(std::log(x));
  const double s2 = sample_sd(logs) * sample_sd(logs);
  const double half = 3.182446305284263 * std::sqrt(s2 / 4 + s2 * s2 / 6); // t(0.975, 3) from the tables
  EXPECT_EQ(e["ci95_method"], "lognormal-cox");
  EXPECT_NEAR(e["ci95"][0].get<double>(), std::exp(mean(logs) + s2 / 2 - half), 1e-6);
  EXPECT_NEAR(e["ci95"][1].get<double>(), std::exp(mean(logs) + s2 / 2 + half), 1e-6);
  const auto duration = column(f.db(), "SELECT (end_ms - start_ms) / 1000.0 FROM runs WHERE task = 'A'");
  EXPECT_NEAR(j["metrics"]["duration_s"]["mean"].get<double>(), mean(duration), 1e-9);
  // Per device and per phase, from the samples and phases tables.
  const auto gpu1 = column(f.db(), "SELECT max(energy_j) FROM gpu_samples g JOIN runs r USING (run_id) WHERE "
                                   "r.task = 'A' AND gpu_index = 1 GROUP BY run_id ORDER BY r.start_ms");
  EXPECT_NEAR(j["metrics"]["gpu1.energy_j"]["mean"].get<double>(), mean(gpu1), 1e-9);
  const auto phase = column(f.db(), "SELECT p.energy_j FROM phases p JOIN runs r USING (run_id) WHERE r.task = 'A' "
                                    "ORDER BY r.start_ms");
  EXPECT_NEAR(j["metrics"]["phase.epoch.energy_j"]["mean"].get<double>(), mean(phase), 1e-9);
  EXPECT_NEAR(j["metrics"]["phase.epoch.energy_j"]["sd"].get<double>(), sample_sd(phase), 1e-9);
  std::vector<double> per_sample; // issue 29: over the epoch the samples were marked in
  for (double x : phase)
    per_sample.push_back(x / 100);
  EXPECT_NEAR(j["metrics"]["work.samples.energy_per_unit_j"]["mean"].get<double>(), mean(per_sample), 1e-9);

  // --last 2: the two latest runs only.
  r = run({wattscope(), "stats", "--task", "A", "--last", "2", "--json"}, {}, f.dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json last = json::parse(r.out);
  EXPECT_NEAR(last["metrics"]["energy_j"]["mean"].get<double>(), (energy[2] + energy[3]) / 2, 1e-9);
  // Text, and mistakes.
  r = run({wattscope(), "stats", "--task", "A"}, {}, f.dir.path());
  EXPECT_NE(r.out.find("95 % CI"), std::string::npos);
  EXPECT_EQ(run({wattscope(), "stats", "--task", "nope"}, {}, f.dir.path()).exit_code, 1);
  EXPECT_EQ(run({wattscope(), "stats"}, {}, f.dir.path()).exit_code, 2);
}

TEST(Phases, CompareSaysWhetherADifferenceIsLargerThanNoise) {
  Fixture f;
  record_runs(f, "short", {"0.15", "0.2", "0.25"});
  record_runs(f, "long", {"0.6", "0.65", "0.75"});
  Result r = run({wattscope(), "compare", "short", "long", "--json"}, {}, f.dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  const auto a = column(f.db(), "SELECT total_energy_j FROM runs WHERE task = 'short' ORDER BY start_ms");
  const auto b = column(f.db(), "SELECT total_energy_j FROM runs WHERE task = 'long' ORDER BY start_ms");
  const double va = sample_sd(a) * sample_sd(a) / 3, vb = sample_sd(b) * sample_sd(b) / 3;
  const double t = (mean(b) - mean(a)) / std::sqrt(va + vb);
  const double df = (va + vb) * (va + vb) / (va * va / 2 + vb * vb / 2);
  EXPECT_NEAR(j["welch"]["t"].get<double>(), t, 1e-9 * std::fabs(t));
  EXPECT_NEAR(j["welch"]["df"].get<double>(), df, 1e-9 * df);
  EXPECT_NEAR(j["welch"]["p"].get<double>(), two_sided_p(t, df), 1e-6);
  EXPECT_EQ(j["significant"].get<bool>(), two_sided_p(t, df) < 0.05);
  EXPECT_NEAR(j["difference_j"].get<double>(), mean(b) - mean(a), 1e-9);
  EXPECT_NEAR(j["difference_pct"].get<double>(), 100 * (mean(b) - mean(a)) / mean(a), 1e-9);
  r = run({wattscope(), "compare", "short", "long"}, {}, f.dir.path());
  EXPECT_NE(r.out.find("task long (3 runs) uses"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("more energy than task short"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Welch"), std::string::npos) << r.out;
  // Two single runs: the difference, and no verdict.
  const auto ids = query(f.db(), "SELECT run_id FROM runs ORDER BY start_ms");
  r = run({wattscope(), "compare", *ids[0][0], *ids[5][0], "--json"}, {}, f.dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json single = json::parse(r.out);
  EXPECT_TRUE(single["significant"].is_null());
  EXPECT_TRUE(single["welch"].is_null());
  EXPECT_NE(single["verdict"].get<std::string>().find("at least 2 runs"), std::string::npos);
}

// --- import of nvidia-smi logs: each fixture is read here with code of the test's own, and the stored run must hold
// the same values, with energy the trapezoid integral of power over the timestamps (labelled integrated).
namespace {

struct LogRow {
  int64_t ts_ms;
  std::string key;
  std::optional<double> power_w;
};

// The fixture's rows, read the simple way: comma-split, timestamp "YYYY/MM/DD HH:MM:SS.mmm" as UTC.
std::vector<LogRow> read_log(const std::string& path, std::vector<std::string> header = {}) {
  std::vector<LogRow> out;
  std::string text = read_file(path);
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string l = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (!l.empty()) lines.push_back(l);
  }
  auto split = [](const std::string& l) {
    std::vector<std::string> f;
    std::string cur;
    for (char c : l + ",") {
      if (c == ',') {
        const size_t a = cur.find_first_not_of(' '), b = cur.find_last_not_of(' ');
        f.push_back(a == std::string::npos ? "" : cur.substr(a, b - a + 1));
        cur.clear();
      } else {
        cur += c;
      }
    }
    return f;
  };
  size_t first = 0;
  if (header.empty()) header = split(lines[first++]);
  auto col = [&](const std::string& prefix) {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i].rfind(prefix, 0) == 0 && (header[i].size() == prefix.size() || header[i][prefix.size()] == ' '))
        return static_cast<int>(i);
    return -1;
  };
  const int ts = col("timestamp"), power = col("power.draw");
  int key = col("index");
  if (key < 0) key = col("uuid");
  if (key < 0) key = col("pci.bus_id");
  for (size_t i = first; i < lines.size(); ++i) {
    if (lines[i].rfind("timestamp", 0) == 0) continue;
    auto f = split(lines[i]);
    std::tm tm{};
    int ms = 0;
    std::sscanf(f[ts].c_str(), "%d/%d/%d %d:%d:%d.%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                &tm.tm_sec, &ms);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    LogRow r{static_cast<int64_t>(timegm(&tm)) * 1000 + ms, key >= 0 ? f[key] : "", std::nullopt};
    if (!f[power].empty() && f[power][0] != '[') r.power_w = std::stod(f[power]);
    out.push_back(r);
  }
  return out;
}

// Per GPU key: the trapezoid integral of power over the rows that have it.
std::map<std::string, double> trapezoid(const std::vector<LogRow>& rows) {
  std::map<std::string, double> energy;
  std::map<std::string, std::pair<int64_t, double>> last;
  for (const auto& r : rows) {
    if (!r.power_w) continue;
    auto it = last.find(r.key);
    if (it != last.end())
      energy[r.key] += 0.5 * (*r.power_w + it->second.second) * static_cast<double>(r.ts_ms - it->second.first) / 1000;
    else
      energy[r.key] += 0;
    last[r.key] = {r.ts_ms, *r.power_w};
  }
  return energy;
}

const std::string kFixtures = std::string(WATTSCOPE_SOURCE_DIR) + "/tests/fixtures/nvidia-smi/";

void expect_import_matches(const std::string& fixture, size_t gpus, size_t ticks,
                           std::vector<std::string> columns = {}) {
  SCOPED_TRACE(fixture);
  TempDir dir;
  std::vector<std::string> argv = {wattscope(), "import",   "nvidia-smi", kFixtures + fixture,
                                   "--task",    "imported", "--utc"};
  std::string cols;
  for (const auto& c : columns)
    cols += (cols.empty() ? "" : ",") + c;
  if (!columns.empty()) {
    argv.push_back("--columns");
    argv.push_back(cols);
  }
  Result r = run(argv, {{"TZ", "Pacific/Auckland"}}, dir.path()); // --utc: the machine's zone must not matter
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "wattscope.db";
  const auto rows = read_log(kFixtures + fixture, columns);
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM gpu_devices"), std::to_string(gpus));
  EXPECT_EQ(scalar(db, "SELECT count(DISTINCT tick) FROM gpu_samples"), std::to_string(ticks));
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM gpu_samples"), std::to_string(rows.size()));
  EXPECT_EQ(scalar(db, "SELECT group_concat(DISTINCT energy_method) FROM gpu_devices"), "integrated");
  EXPECT_EQ(scalar(db, "SELECT start_ms FROM runs"), std::to_string(rows.front().ts_ms));
  EXPECT_EQ(scalar(db, "SELECT end_ms FROM runs"), std::to_string(rows.back().ts_ms));
  // Power, row by row in file order (missing stays NULL), and the energy each GPU ends with.
  const auto by_tick_gpu = query(db, "SELECT power_w, ts_ms FROM gpu_samples ORDER BY tick, gpu_index");
  ASSERT_EQ(by_tick_gpu.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].power_w) {
      ASSERT_TRUE(by_tick_gpu[i][0].has_value()) << "row " << i;
      EXPECT_NEAR(std::stod(*by_tick_gpu[i][0]), *rows[i].power_w, 1e-9) << "row " << i;
    } else {
      EXPECT_FALSE(by_tick_gpu[i][0].has_value()) << "row " << i;
    }
  }
  double total = 0;
  for (const auto& [k, e] : trapezoid(rows))
    total += e;
  // A poll's rows share its first row's time; in these logs each GPU's offset within a poll is constant, so the
  // integral over each GPU's own timestamps is the same.
  EXPECT_NEAR(std::stod(scalar(db, "SELECT total_energy_j FROM runs")), total, 1e-6);
}

} // namespace

TEST(Import, NvidiaSmiLogsOfSeveralFormats) {
  expect_import_matches("a100x2_units.csv", 2, 6);
  expect_import_matches("h100_nounits.csv", 1, 7);
  expect_import_matches("t4_not_supported.csv", 1, 6);
  expect_import_matches("appended_crlf.csv", 2, 5);
  expect_import_matches("noheader_nounits.csv", 1, 4, {"timestamp", "index", "power.draw", "utilization.gpu"});
}

TEST(Import, UnitsMissingValuesAndDeviceFactsAreStoredAsTheLogSaysThem) {
  TempDir dir;
  Result r = run(
      {wattscope(), "import", "nvidia-smi", kFixtures + "a100x2_units.csv", "--task", "a", "--utc", "--host", "dgx-07"},
      {}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "wattscope.db";
  EXPECT_EQ(scalar(db, "SELECT mem_used_bytes FROM gpu_samples WHERE tick = 1 AND gpu_index = 1"),
            std::to_string(31246LL * 1048576));
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM gpu_samples WHERE fan_pct IS NULL"), "12"); // [N/A]
  EXPECT_EQ(scalar(db, "SELECT clock_sm_mhz || ' ' || pstate || ' ' || temp_gpu_c FROM gpu_samples WHERE tick = 2 "
                       "AND gpu_index = 0"),
            "1410 0 41.0");
  EXPECT_EQ(scalar(db, "SELECT uuid || ' ' || pci_bus_id || ' ' || name FROM gpu_devices WHERE gpu_index = 1"),
            "GPU-4b2c1e1a-7f0d-2b9e-1c3f-8d0a6e5b1c21 00000000:0F:00.0 NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(scalar(db, "SELECT host || ' ' || task FROM runs"), "dgx-07 a");
  r = run({wattscope(), "import", "nvidia-smi", kFixtures + "h100_nounits.csv", "--task", "h", "--utc"}, {},
          dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(scalar(db, "SELECT throttle_reasons FROM gpu_samples s JOIN runs USING (run_id) WHERE task = 'h' AND "
                       "tick = 2"),
            "4");
  EXPECT_EQ(scalar(db, "SELECT mem_used_bytes FROM gpu_samples s JOIN runs USING (run_id) WHERE task = 'h' AND "
                       "tick = 1"),
            std::to_string(60211LL * 1048576));
  // Local time by default: the same log read in another zone starts at another UTC instant.
  TempDir other;
  ASSERT_EQ(run({wattscope(), "import", "nvidia-smi", kFixtures + "h100_nounits.csv", "--task", "h"}, {{"TZ", "UTC+3"}},
                other.path())
                .exit_code,
            0);
  EXPECT_EQ(std::stoll(scalar(other / "wattscope.db", "SELECT start_ms FROM runs")) -
                std::stoll(scalar(db, "SELECT start_ms FROM runs WHERE task = 'h'")),
            3 * 3600 * 1000);
}

TEST(Import, AMalformedLogIsRefusedWithItsLineAndNothingIsStored) {
  TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {"bad_cut_short.csv", "line 5: 2 fields where the header has 3"},
      {"bad_number.csv", "line 3: column 'power.draw [W]': 'sixty W' is not a number"},
      {"bad_timestamp.csv", "line 4: timestamp '15.01.2024 10:00:02' is not a date and time"},
      {"noheader_nounits.csv", "line 1: no 'timestamp' column"},
  };
  for (const auto& [file, message] : cases) {
    Result r = run({wattscope(), "import", "nvidia-smi", kFixtures + file, "--task", "bad"}, {}, dir.path());
    EXPECT_EQ(r.exit_code, 1) << file;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(file), std::string::npos) << r.err;
  }
  EXPECT_NE(::access((dir / "wattscope.db").c_str(), F_OK), 0) << "a refused log leaves no store behind";
  write_file(dir / "empty.csv", "");
  Result r = run({wattscope(), "import", "nvidia-smi", dir / "empty.csv", "--task", "e"}, {}, dir.path());
  EXPECT_NE(r.err.find("empty"), std::string::npos) << r.err;
  write_file(dir / "header_only.csv", "timestamp, power.draw [W]\n");
  r = run({wattscope(), "import", "nvidia-smi", dir / "header_only.csv", "--task", "e"}, {}, dir.path());
  EXPECT_NE(r.err.find("no samples"), std::string::npos) << r.err;
  r = run({wattscope(), "import", "dcgm", dir / "empty.csv", "--task", "e"}, {}, dir.path());
  EXPECT_EQ(r.exit_code, 2);
}

TEST(Phases, ServeListensOnTheSocketItIsGivenAndStoresThePhases) {
  Fixture f;
  const std::string sock = f.dir / "serve.sock";
  const int pid = start({wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "50ms", "--db", f.db(),
                         "--record", "--socket", sock},
                        f.env, f.dir.path(), f.dir / "out", f.dir / "err");
  wait_for_serve_port(f.dir / "err", 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(run({wattscope(), "mark", "--socket", sock, "--strict", "begin", "served"}).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(run({wattscope(), "mark", "--socket", sock, "--strict", "end"}).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0) << read_file(f.dir / "err");
  EXPECT_EQ(scalar(f.db(), "SELECT name || ' ' || closed_by_run_end FROM phases"), "served 0");
  // Stopped by a signal, as serve always is: a normal end, not a killed run.
  EXPECT_EQ(scalar(f.db(), "SELECT task || ' ' || exit_status FROM runs"), "serve 0");
  expect_phase_energy_matches_the_counters(f);
}
} // namespace e2e_phases
