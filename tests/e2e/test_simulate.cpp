// --simulate end to end (issue 19): the real binary with no fake library on disk and no scenario in the environment
// (the simulated library is embedded), checked for what it records and for the word "simulated" in every view.
#include <gtest/gtest.h>

#include <signal.h>

#include <cmath>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "http_client.hpp"

namespace e2e_simulate { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

// The environment of a machine without a GPU: no NVML library to find, and a real-GPU variable that must not select
// among simulated GPUs.
std::map<std::string, std::string> no_gpu_env() {
  return {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
          {"WATTSCOPE_FAKE_NVML_SCENARIO", "\x01"},
          {"CUDA_VISIBLE_DEVICES", "0"},
          {"WATTSCOPE_SOCKET", "\x01"}};
}

// One simulated run of the built-in scenario, shared by the tests that read it: 6 s covers the warm-up, epoch 1 with
// GPU 1's power-cap stretch (2.5-5 s) and the start of epoch 2.
class SimulatedRun : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    // --max-read-cost 0: the simulated library's calls cost the emulator's own CPU, and on a loaded machine the
    // quickest of a call's first reads can pass the 50 us budget; the clock would then be read once a second and the
    // straggler found by its power instead (seen once in CI: "metric": "power").
    result_ = new Result(run({wattscope(), "run", "--simulate", "--interval", "100ms", "--max-read-cost", "0", "--task",
                              "sim", "--report", *dir_ / "report.html", "sleep", "6"},
                             no_gpu_env(), dir_->path()));
  }
  static void TearDownTestSuite() {
    delete result_;
    delete dir_;
  }
  static std::string db() { return *dir_ / "wattscope.db"; }
  static TempDir* dir_;
  static Result* result_;
};
TempDir* SimulatedRun::dir_ = nullptr;
Result* SimulatedRun::result_ = nullptr;

TEST_F(SimulatedRun, RecordsFourSimulatedGpusLabelledSimulated) {
  ASSERT_EQ(result_->exit_code, 0) << result_->err;
  // CUDA_VISIBLE_DEVICES=0 names a real GPU: it does not pick among the simulated ones.
  auto devs = query(db(), "SELECT gpu_index, energy_method, name FROM gpu_devices ORDER BY gpu_index");
  ASSERT_EQ(devs.size(), 4u);
  for (const auto& d : devs) {
    EXPECT_EQ(*d[1], "simulated");
    EXPECT_NE(d[2]->find("(simulated)"), std::string::npos) << *d[2];
  }
  const json tags = json::parse(scalar(db(), "SELECT tags FROM runs"));
  EXPECT_EQ(tags.value("simulated", ""), "true");
  EXPECT_EQ(tags.value("simulate_scenario", ""), "training (built-in)");
  // Energy comes from the simulated counter: GPU 0 trains at ~610 W, GPU 3 idles at ~69 W.
  const double e0 = std::stod(scalar(db(), "SELECT MAX(energy_j) FROM gpu_samples WHERE gpu_index = 0"));
  const double e3 = std::stod(scalar(db(), "SELECT MAX(energy_j) FROM gpu_samples WHERE gpu_index = 3"));
  EXPECT_GT(e0, 4 * e3);
  EXPECT_GT(e3, 69.0 * 4); // at least 4 s of idle power
}

TEST_F(SimulatedRun, GpuOneIsPowerCappedAtItsLimitWithTheReasonBit) {
  ASSERT_EQ(result_->exit_code, 0) << result_->err;
  // NVML's software power cap reason is bit 0x4; while it is set, GPU 1 draws its lowered 450 W limit.
  auto rows = query(db(), "SELECT power_w, power_limit_w FROM gpu_samples WHERE gpu_index = 1 AND "
                          "(throttle_reasons & 4) != 0");
  ASSERT_GE(rows.size(), 5u);
  for (const auto& r : rows) {
    EXPECT_NEAR(std::stod(*r[1]), 450.0, 0.5);
    EXPECT_LE(std::stod(*r[0]), 450.5);
    EXPECT_GT(std::stod(*r[0]), 400.0);
  }
  EXPECT_EQ(scalar(db(), "SELECT COUNT(*) FROM gpu_samples WHERE gpu_index <> 1 AND (throttle_reasons & 4) != 0"), "0");
}

TEST_F(SimulatedRun, TheTimelineBecomesThePhasesAndWorkOfTheRun) {
  ASSERT_EQ(result_->exit_code, 0) << result_->err;
  auto phases = query(db(), "SELECT name, \"index\", energy_method FROM phases ORDER BY phase_id");
  ASSERT_GE(phases.size(), 2u);
  EXPECT_EQ(*phases[0][0], "warmup");
  EXPECT_EQ(*phases[1][0], "epoch");
  EXPECT_EQ(*phases[1][1], "1");
  for (const auto& p : phases)
    EXPECT_EQ(*p[2], "simulated"); // a phase total that includes a simulated GPU says so
  EXPECT_GT(std::stod(scalar(db(), "SELECT SUM(amount) FROM work WHERE unit = 'samples'")), 1000.0);
}

TEST_F(SimulatedRun, SimulatedGpusListTheWrappedCommandsProcess) {
  ASSERT_EQ(result_->exit_code, 0) << result_->err;
  // The busy GPUs name the command (sleep) as their process; the idle GPU 3 names none.
  const std::string pid = scalar(db(), "SELECT pid FROM processes WHERE comm = 'sleep'");
  ASSERT_FALSE(pid.empty());
  EXPECT_GT(std::stoi(scalar(db(), "SELECT COUNT(DISTINCT gpu_index) FROM process_gpu_samples WHERE pid = " + pid)), 2);
  EXPECT_EQ(scalar(db(), "SELECT COUNT(*) FROM process_gpu_samples WHERE gpu_index = 3"), "0");
  Result show = run({wattscope(), "show", "--json"}, {}, dir_->path());
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const json a = json::parse(show.out)["attribution"]["devices"]["gpu0"];
  EXPECT_EQ(a["method"], "attributed (simulated)");
  EXPECT_GT(a["attributed_j"].get<double>(), 0.5 * a["measured_j"].get<double>());
}

TEST_F(SimulatedRun, SummaryShowAndListSaySimulatedInWords) {
  ASSERT_EQ(result_->exit_code, 0) << result_->err;
  EXPECT_NE(result_->err.find("SIMULATED the GPUs of this run are simulated"), std::string::npos) << result_->err;
  const std::string& err = result_->err;
  const std::regex gpu_line(R"(\n  GPU \d+ [^\n]*)");
  // Every GPU line of the summary carries the method in words.
  int gpu_lines = 0;
  for (std::sregex_iterator it(err.begin(), err.end(), gpu_line), end; it != end; ++it) {
    ++gpu_lines;
    EXPECT_NE(it->str().find("simulated"), std::string::npos) << it->str();
  }
  EXPECT_GE(gpu_lines, 4);
  // issue 29: the headline total names its devices and its method ("mixed (simulated: ...; counter: cpu_package)"
  // where RAPL measured the CPU)
  EXPECT_TRUE(std::regex_search(err, std::regex(R"(energy +[^\n]* total \(4 GPUs[^)]*\) \[[^\n]*simulated)"))) << err;

  Result show = run({wattscope(), "show"}, {}, dir_->path());
  EXPECT_NE(show.out.find("SIMULATED"), std::string::npos) << show.out;
  Result js = run({wattscope(), "show", "--json"}, {}, dir_->path());
  const json j = json::parse(js.out);
  EXPECT_EQ(j["simulated"], true);
  for (const auto& g : j["gpus"])
    EXPECT_EQ(g["energy_method"], "simulated");
  Result list = run({wattscope(), "list"}, {}, dir_->path());
  EXPECT_NE(list.out.find("simulated"), std::string::npos) << list.out;
}

TEST_F(SimulatedRun, TheReportCarriesTheFlagItsBannerShows) {
  ASSERT_EQ(result_->exit_code, 0) << result_->err;
  const std::string html = read_file(*dir_ / "report.html");
  EXPECT_NE(html.find("<div id=\"ws-simulated\" hidden></div>"), std::string::npos);
  EXPECT_NE(html.find("\"simulated\":true"), std::string::npos); // what the banner (browser test) is drawn from
}

TEST(Simulate, AFlagNeverTakesTheCommandForAScenario) {
  TempDir dir;
  // `run --simulate true` runs the command `true`: a scenario is only ever given with '='.
  Result r = run({wattscope(), "run", "--simulate", "--interval", "100ms", "true"}, no_gpu_env(), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(scalar(dir / "wattscope.db", "SELECT command FROM runs"), "true");
  EXPECT_EQ(scalar(dir / "wattscope.db", "SELECT COUNT(*) FROM gpu_devices"), "4");
}

TEST(Simulate, AScenarioFileOfOnesOwn) {
  TempDir dir;
  // One GPU alternating 100 W and 300 W every half second: its energy counter is the exact integral (200 W on
  // average), and its process is the command.
  const json sc = {{"timeline", {{"segments", {{{"label", "low"}, {"s", 0.5}}, {{"label", "high"}, {"s", 0.5}}}}}},
                   {"devices",
                    {{{"name", "Test GPU (simulated)"},
                      {"uuid", "GPU-test"},
                      {"metrics",
                       {{"power_mw", {{"timeline", {{"low", 100000}, {"high", 300000}}}}},
                        {"energy_mj", {{"timeline_integral", {{"low", 100000}, {"high", 300000}}}}},
                        {"util_gpu", 50}}},
                      {"processes", {{{"pid", "command"}, {"sm", 50}, {"mem_bytes", 1 << 30}}}}}}}};
  write_file(dir / "mine.json", sc.dump());
  Result r = run({wattscope(), "run", "--simulate=" + (dir / "mine.json"), "--interval", "100ms", "sleep", "3"},
                 no_gpu_env(), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "wattscope.db";
  EXPECT_EQ(scalar(db, "SELECT name FROM gpu_devices"), "Test GPU (simulated)");
  EXPECT_EQ(json::parse(scalar(db, "SELECT tags FROM runs")).value("simulate_scenario", ""), dir / "mine.json");
  // Energy between the first and last sample over the time between them: the average power, ~200 W.
  auto e = query(db, "SELECT MIN(ts_ms), MAX(ts_ms), MIN(energy_j), MAX(energy_j) FROM gpu_samples");
  const double s = (std::stod(*e[0][1]) - std::stod(*e[0][0])) / 1000.0;
  ASSERT_GT(s, 2.0);
  EXPECT_NEAR((std::stod(*e[0][3]) - std::stod(*e[0][2])) / s, 200.0, 30.0);
  // The power readings follow the timeline: both levels are seen.
  EXPECT_EQ(scalar(db, "SELECT COUNT(DISTINCT ROUND(power_w)) FROM gpu_samples"), "2");
  EXPECT_NE(scalar(db, "SELECT COUNT(*) FROM process_gpu_samples"), "0");
}

TEST(Simulate, ABadScenarioIsAnErrorThatNamesTheProblem) {
  TempDir dir;
  auto attempt = [&](const std::string& text) {
    write_file(dir / "bad.json", text);
    return run({wattscope(), "run", "--simulate=" + (dir / "bad.json"), "true"}, no_gpu_env(), dir.path());
  };
  struct Case {
    std::string text;
    std::string says;
  };
  const Case cases[] = {
      {"{\"devices\": [", "not valid JSON"},
      {"[]", "expected a JSON object"},
      {"{\"devices\": []}", "devices: expected a non-empty list"},
      {R"({"devices": [{"name": "x", "uuid": "GPU-x", "metrics": {"power_mw": "lots"}}]})",
       "devices[0].metrics.power_mw: expected a number"},
      {R"({"timeline": {"segments": [{"label": "a", "s": 1}]},
           "devices": [{"name": "x", "uuid": "GPU-x", "metrics": {"power_mw": {"timeline": {"b": 1}}}}]})",
       "devices[0].metrics.power_mw.timeline.b: no segment of the timeline has this label"},
      {R"({"timeline": {"segments": [{"label": "a", "s": -1}]}, "devices": []})",
       "timeline.segments[0]: expected {\"label\": NAME, \"s\": SECONDS > 0}"},
      {R"({"devices": [{"name": "x", "uuid": "GPU-x", "metrics": {"util_gpu": 1},
                        "processes": [{"pid": "me"}]}]})",
       "devices[0].processes[0].pid: expected \"command\""},
  };
  for (const auto& c : cases) {
    Result r = attempt(c.text);
    EXPECT_EQ(r.exit_code, 125) << c.text;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.text << "\n" << r.err;
    EXPECT_NE(r.err.find(dir / "bad.json"), std::string::npos) << r.err; // the file is named
  }
  Result missing = run({wattscope(), "run", "--simulate=" + (dir / "none.json"), "true"}, no_gpu_env(), dir.path());
  EXPECT_EQ(missing.exit_code, 125);
  EXPECT_NE(missing.err.find("no such scenario file"), std::string::npos) << missing.err;
  // Nothing was recorded by the failed attempts.
  EXPECT_EQ(run({wattscope(), "list"}, {}, dir.path()).out.find("true"), std::string::npos);
}

TEST(Simulate, ServeLabelsMetricsAndTheLiveApi) {
  TempDir dir;
  const int pid = start({wattscope(), "serve", "--simulate", "--listen", "127.0.0.1:0", "--interval", "100ms"},
                        no_gpu_env(), dir.path(), dir / "out", dir / "err");
  const int port = wait_for_serve_port(dir / "err", 200);
  // A few ticks, so every GPU series has a value.
  std::string metrics;
  for (int i = 0; i < 100 && metrics.find("wattscope_gpu_power_watts{") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    metrics = http::get(port, "/metrics").body;
  }
  const json cur = json::parse(http::get(port, "/api/v1/current").body);
  const json hist = json::parse(http::get(port, "/api/v1/history?range=1h").body);
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
  EXPECT_NE(metrics.find("simulated=\"true\"} 1"), std::string::npos) << metrics; // wattscope_run_info
  // Every sample of a GPU family carries the label.
  int gpu_series = 0;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("wattscope_gpu_")) continue;
    ++gpu_series;
    EXPECT_NE(line.find("simulated=\"true\""), std::string::npos) << line;
  }
  EXPECT_GT(gpu_series, 20);
  EXPECT_EQ(cur["run"]["simulated"], true);
  EXPECT_EQ(cur["run"]["simulate_scenario"], "training (built-in)");
  for (const auto& g : cur["gpus"])
    EXPECT_EQ(g["energy_method"], "simulated");
  EXPECT_EQ(hist["simulated"], true);
}

TEST(Simulate, ARealRunIsNotLabelledSimulated) {
  TempDir dir;
  Result r = run({wattscope(), "run", "--interval", "100ms", "true"}, no_gpu_env(), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("SIMULATED"), std::string::npos);
  EXPECT_FALSE(json::parse(scalar(dir / "wattscope.db", "SELECT tags FROM runs")).contains("simulated"));
}

} // namespace
} // namespace e2e_simulate

namespace e2e_simulate {
// Issue 36: the built-in scenario's one slow GPU is GPU 1, power-capped to 1,410 MHz for 2.5 s of epoch 1 while GPUs 0
// and 2 run at 1,980 MHz; GPU 3 is idle through the run and no sibling. show --json's advice names GPU 1 as the
// straggler and no other GPU.
TEST_F(SimulatedRun, ShowJsonNamesGpuOneTheStragglerAndNoHealthyGpu) {
  ASSERT_EQ(result_->exit_code, 0) << result_->err;
  auto show = run({wattscope(), "show", "--json"}, no_gpu_env(), dir_->path());
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const json advice = json::parse(show.out)["advice"];
  std::vector<json> found;
  for (const auto& a : advice)
    if (a["kind"] == "straggler") found.push_back(a);
  ASSERT_EQ(found.size(), 1u) << advice.dump(2);
  const json& ev = found[0]["evidence"];
  EXPECT_EQ(ev["device"], "gpu1");
  EXPECT_EQ(ev["metric"], "clock_sm");
  EXPECT_EQ(ev["siblings"], 2);
  EXPECT_DOUBLE_EQ(ev["clock_sm_mhz"].get<double>(), 1410);
  EXPECT_DOUBLE_EQ(ev["siblings_clock_sm_mhz"].get<double>(), 1980);
  EXPECT_EQ(ev["reasons"], "SW power cap");
  // The truth from GPU 1's recorded samples: the intervals ending at a capped clock are its stretch by the clock, and
  // waited Σ dt·(1 − clock/1,980). The interval after the last of them straddles the cap's end: apart by its power
  // alone or not at all, so the stretch is the clock's, or that plus the one interval, which waited nothing. (Late
  // ticks on a loaded machine move the edges; the figures follow the samples.)
  // GPU 1's clock against its siblings' (GPUs 0 and 2, at the same tick): the straggler's 10 % gap.
  const auto samples = query(db(), "SELECT a.ts_ms, a.clock_sm_mhz, b.clock_sm_mhz, c.clock_sm_mhz FROM gpu_samples a "
                                   "JOIN gpu_samples b ON b.ts_ms = a.ts_ms AND b.gpu_index = 0 "
                                   "JOIN gpu_samples c ON c.ts_ms = a.ts_ms AND c.gpu_index = 2 "
                                   "WHERE a.gpu_index = 1 ORDER BY a.ts_ms");
  double clock_s = 0, waited = 0, first_dt = 0, after_dt = 0;
  int capped = 0;
  for (size_t k = 1; k < samples.size(); ++k) {
    if (!samples[k][1] || !samples[k][2] || !samples[k][3]) continue;
    const double dt = (std::stod(*samples[k][0]) - std::stod(*samples[k - 1][0])) / 1000;
    const double c = std::stod(*samples[k][1]);
    const double sib =
        std::max(std::stod(*samples[k][2]), std::stod(*samples[k][3])); // the median of two, as advice takes it
    if (c < 0.9 * sib) {
      if (capped++ == 0) first_dt = dt;
      clock_s += dt, waited += dt * (1 - c / sib);
    } else if (capped > 0 && after_dt == 0) {
      after_dt = dt;
    }
  }
  ASSERT_GE(capped, 3);
  // The scenario's 2.5 s, to within the edge intervals the samples fell on.
  EXPECT_NEAR(clock_s, 2.5, std::max(first_dt, after_dt) + 0.002);
  EXPECT_GE(ev["seconds"].get<double>(), clock_s - 0.002);
  EXPECT_LE(ev["seconds"].get<double>(), clock_s + after_dt + 0.002);
  EXPECT_NEAR(ev["waited_s"].get<double>(), waited, 0.002);
  EXPECT_EQ(ev["stretches"], 1);
  const std::string text = found[0]["text"].get<std::string>();
  EXPECT_NE(text.find("at 1,410 MHz for "), std::string::npos) << text;
  EXPECT_NE(text.find("while its 2 siblings ran at 1,980 MHz; its throttle reasons: SW power cap"), std::string::npos)
      << text;
}

// Issue 36: the scenario's memory rises in the warm-up and then stays: no out-of-memory forecast for any GPU.
TEST_F(SimulatedRun, ShowJsonForecastsNoOutOfMemory) {
  ASSERT_EQ(result_->exit_code, 0) << result_->err;
  auto show = run({wattscope(), "show", "--json"}, no_gpu_env(), dir_->path());
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const json advice = json::parse(show.out)["advice"];
  ASSERT_FALSE(advice.empty());
  for (const auto& a : advice)
    EXPECT_NE(a["kind"], "oom_forecast") << a.dump(2);
}
} // namespace e2e_simulate
