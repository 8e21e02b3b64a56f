// `--simulate` with a command that sends its own markers (issue 29): the command's phases and work are stored exactly
// as it sent them, never mixed with the scenario's; a command that sends none still gets the scenario's.
#include <gtest/gtest.h>

#include <signal.h>

#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"

namespace e2e_simulate_markers { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

std::map<std::string, std::string> no_gpu_env() {
  return {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
          {"WATTSCOPE_FAKE_NVML_SCENARIO", "\x01"},
          {"CUDA_VISIBLE_DEVICES", "\x01"},
          {"WATTSCOPE_SOCKET", "\x01"}};
}

// A script instrumented as a training script would be: an epoch of ~2.5 s with 900 samples, then an evaluation of
// ~1.2 s with 300 eval_samples. The built-in scenario meanwhile runs its warm-up and epoch 1 (2,400 samples a second).
std::string instrumented_script() {
  const std::string m = "'" + wattscope() + "' mark --strict ";
  return "set -e; sleep 0.3; " + m + "begin epoch --index 1; sleep 2.5; " + m + "work 900 samples; " + m +
         "end epoch; " + m + "begin eval --index 1; sleep 1.2; " + m + "work 300 eval_samples; " + m + "end eval";
}

} // namespace

TEST(SimulateMarkers, ACommandsOwnPhasesAndWorkAreStoredExactlyAsItSentThem) {
  TempDir dir;
  Result r = run({wattscope(), "run", "--simulate", "--interval", "100ms", "--task", "instrumented", "--", "/bin/sh",
                  "-c", instrumented_script()},
                 no_gpu_env(), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "wattscope.db";
  auto phases = query(db, "SELECT name, \"index\", end_ms - start_ms, parent FROM phases ORDER BY start_ms");
  ASSERT_EQ(phases.size(), 2u) << "the scenario's warmup and epoch are not the command's: " << r.err;
  EXPECT_EQ(*phases[0][0], "epoch");
  EXPECT_EQ(*phases[0][1], "1");
  EXPECT_NEAR(std::stod(*phases[0][2]), 2500, 400); // the script's 2.5 s and a marker's start-up or two
  EXPECT_FALSE(phases[0][3]) << "not nested in a phase of the scenario";
  EXPECT_EQ(*phases[1][0], "eval");
  EXPECT_NEAR(std::stod(*phases[1][2]), 1200, 400);
  EXPECT_FALSE(phases[1][3]);
  auto work = query(db, "SELECT unit, SUM(amount), COUNT(*) FROM work GROUP BY unit ORDER BY unit");
  ASSERT_EQ(work.size(), 2u);
  EXPECT_EQ(*work[0][0], "eval_samples");
  EXPECT_EQ(std::stod(*work[0][1]), 300);
  EXPECT_EQ(*work[1][0], "samples");
  EXPECT_EQ(std::stod(*work[1][1]), 900) << "none of the scenario's 2,400 samples a second";
  EXPECT_EQ(*work[1][2], "1");
  // It says why the scenario's are not there.
  EXPECT_EQ(scalar(db, "SELECT COUNT(*) FROM events WHERE kind = 'simulate-markers'"), "1");
  // The summary's work figures are the script's.
  EXPECT_EQ(r.err.find("2400"), std::string::npos) << r.err;
  // Still a simulated run: its GPUs are the scenario's.
  EXPECT_EQ(scalar(db, "SELECT COUNT(*) FROM gpu_devices WHERE energy_method = 'simulated'"), "4");
}

TEST(SimulateMarkers, ACommandWithoutMarkersGetsTheScenariosPhasesAndWork) {
  TempDir dir;
  Result r =
      run({wattscope(), "run", "--simulate", "--interval", "100ms", "--", "sleep", "3"}, no_gpu_env(), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "wattscope.db";
  auto phases = query(db, "SELECT name, \"index\", end_ms - start_ms FROM phases ORDER BY start_ms");
  ASSERT_EQ(phases.size(), 2u) << r.err;
  EXPECT_EQ(*phases[0][0], "warmup");
  EXPECT_NEAR(std::stod(*phases[0][2]), 1500, 150); // the scenario's 0-1.5 s
  EXPECT_EQ(*phases[1][0], "epoch");
  // Epoch 1 trains at 2,400 samples a second from 1.5 s; work goes every half second.
  const double samples = std::stod(scalar(db, "SELECT SUM(amount) FROM work WHERE unit = 'samples'"));
  EXPECT_GT(samples, 1000);
  EXPECT_LT(samples, 2400 * 3.0);
  EXPECT_EQ(scalar(db, "SELECT COUNT(*) FROM events WHERE kind = 'simulate-markers'"), "0");
}

// `record --simulate --socket`: the markers sent to the socket are the run's; the scenario sends none.
TEST(SimulateMarkers, RecordWithASocketTakesOnlyTheSocketsMarkers) {
  TempDir dir;
  const std::string sock = dir / "m.sock";
  const int pid =
      start({wattscope(), "record", "--simulate", "--interval", "100ms", "--socket", sock, "--db", dir / "w.db"},
            no_gpu_env(), dir.path(), dir / "rec.out", dir / "rec.err");
  for (int i = 0; i < 100 && !std::filesystem::exists(sock); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(std::filesystem::exists(sock)) << read_file(dir / "rec.err");
  auto mark = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {wattscope(), "mark", "--strict", "--socket", sock});
    EXPECT_EQ(run(args, {}, dir.path()).exit_code, 0);
  };
  mark({"begin", "step"});
  mark({"work", "7", "tokens"});
  std::this_thread::sleep_for(std::chrono::milliseconds(2000)); // past the scenario's warm-up (1.5 s)
  mark({"end", "step"});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid), 0) << read_file(dir / "rec.err");
  const std::string db = dir / "w.db";
  auto phases = query(db, "SELECT name FROM phases");
  ASSERT_EQ(phases.size(), 1u);
  EXPECT_EQ(*phases[0][0], "step");
  EXPECT_EQ(scalar(db, "SELECT GROUP_CONCAT(unit) || ':' || SUM(amount) FROM work"), "tokens:7.0");
}

// The record summary (serve's is the same text) of simulated GPUs, which list no process under record: the busy ones'
// energy is `unattributed`, only the GPU that sits at 0 % (GPU 3) is `idle` (issue 29: "idle 100 %" at 78 %).
TEST(SimulateMarkers, RecordSummaryCallsABusyGpusEnergyUnattributedAndOnlyAnIdleOneIdle) {
  TempDir dir;
  const int pid = start({wattscope(), "record", "--simulate", "--interval", "100ms", "--db", dir / "w.db"},
                        no_gpu_env(), dir.path(), dir / "rec.out", dir / "rec.err");
  std::this_thread::sleep_for(std::chrono::milliseconds(3500)); // into epoch 1: GPUs 0-2 at ~97 % SM
  ::kill(pid, SIGINT);
  ASSERT_EQ(wait_exit(pid), 0) << read_file(dir / "rec.err");
  const std::string err = read_file(dir / "rec.err");
  auto line_of = [&](const std::string& gpu) {
    const auto a = err.find("  " + gpu + "     processes:");
    return a == std::string::npos ? std::string() : err.substr(a, err.find('\n', a) - a);
  };
  const std::string busy = line_of("GPU 1"), idle = line_of("GPU 3");
  ASSERT_FALSE(busy.empty()) << err;
  ASSERT_FALSE(idle.empty()) << err;
  EXPECT_EQ(busy.find("idle 100.0 %"), std::string::npos) << busy;
  EXPECT_NE(busy.find("unattributed"), std::string::npos) << busy;
  EXPECT_NE(idle.find("unattributed 0.0 %; idle 100.0 %"), std::string::npos) << idle;
}

} // namespace e2e_simulate_markers
