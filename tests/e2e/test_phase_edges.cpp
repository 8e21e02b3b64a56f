// Issue 33 end to end: a phase's begin and end read the GPU's energy counter at once, so a phase's energy rests on
// readings at its own edges instead of being interpolated between ticks a second apart. The real binary, the fake
// NVML (its counter the exact integral of a square wave of power, 150 W and 650 W, 0.3 s each), a child that marks
// three phases of 1.2-1.5 s over the socket, and the truth from the fake's own clock.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"

namespace e2e_phase_edges { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

constexpr double kLowW = 150, kHighW = 650, kHalfS = 0.3;

// J over [0, t] seconds since nvmlInit: the square wave's exact integral.
double energy_at(double t) {
  const double period = 2 * kHalfS;
  const double n = std::floor(t / period);
  const double r = t - n * period;
  const double in_period = r < kHalfS ? kLowW * r : kLowW * kHalfS + kHighW * (r - kHalfS);
  return n * (kLowW + kHighW) * kHalfS + in_period;
}

json scenario() {
  const json curve = {{"lo", kLowW * 1000}, {"hi", kHighW * 1000}};
  return {{"driver_version", "580.65.06"},
          {"nvml_version", "13.580.65.06"},
          {"timeline",
           {{"loop", true},
            {"segments", json::array({{{"label", "lo"}, {"s", kHalfS}}, {{"label", "hi"}, {"s", kHalfS}}})}}},
          {"devices", json::array({{{"name", "NVIDIA H100 80GB HBM3"},
                                    {"uuid", "GPU-edge-0"},
                                    {"metrics",
                                     {{"power_instant_mw", {{"timeline", curve}}},
                                      {"energy_mj", {{"timeline_integral", curve}}},
                                      {"util_gpu", 90},
                                      {"mem_used_bytes", 1 << 30},
                                      {"mem_total_bytes", 85899345920LL}}}}})}};
}

// Begin/end at absolute times from the child's start: three phases of 1.2, 1.5 and 1.3 s, 0.25 s apart.
const char* kPhases = R"(
import os, socket, time, json
path = os.environ["WATTSCOPE_SOCKET"]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
def send(**m): s.sendto((json.dumps(m) + "\n").encode(), path)
t0 = time.monotonic()
def at(t):
    d = t0 + t - time.monotonic()
    if d > 0: time.sleep(d)
for name, b, e in (("a", 0.4, 1.6), ("b", 1.85, 3.35), ("c", 3.6, 4.9)):
    at(b); send(kind="begin", name=name)
    at(e); send(kind="end", name=name)
at(5.2)
)";

// The environment of a run on dir/scenario.json, the fake's energy truth written to dir/energy.json.
std::map<std::string, std::string> wave_env(const TempDir& dir) {
  return {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
          {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
          {"WATTSCOPE_FAKE_NVML_ENERGY", dir / "energy.json"},
          {"CUDA_VISIBLE_DEVICES", "\x01"},
          {"WATTSCOPE_SOCKET", "\x01"}};
}

// kPhases under `wattscope -v run` at `interval` on the wave with a counter that moves every 100 ms (an H100's), each
// counter read costing `cost` (a "call_cost_us" value); the truth in dir/energy.json.
Result run_phases_on_a_100ms_counter(const TempDir& dir, const char* interval, const json& cost) {
  json sc = scenario();
  sc["devices"][0]["metrics"]["energy_mj"]["update_s"] = 0.1;
  sc["call_cost_us"] = {{"nvmlDeviceGetTotalEnergyConsumption", cost}};
  write_file(dir / "scenario.json", sc.dump());
  const std::map<std::string, std::string> env = wave_env(dir);
  return run({wattscope(), "-v", "run", "--interval", interval, "--top-processes", "0", "--", "python3", "-c", kPhases},
             env, dir.path());
}

} // namespace

TEST(PhaseEdges, AtOneSecondEachPhaseRestsOnCounterReadingsAtItsEdges) {
  TempDir dir;
  write_file(dir / "scenario.json", scenario().dump());
  const std::map<std::string, std::string> env = {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                                                  {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                                                  {"WATTSCOPE_FAKE_NVML_CALLS", dir / "calls.json"},
                                                  {"WATTSCOPE_FAKE_NVML_ENERGY", dir / "energy.json"},
                                                  {"CUDA_VISIBLE_DEVICES", "\x01"},
                                                  {"WATTSCOPE_SOCKET", "\x01"}};
  Result r = run({wattscope(), "run", "--interval", "1s", "--top-processes", "0", "--", "python3", "-c", kPhases}, env,
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json truth = json::parse(read_file(dir / "energy.json"));
  const json calls = json::parse(read_file(dir / "calls.json"));
  const double t0_ms = truth["t0_wall_ms"].get<double>();
  const std::string db = dir / "wattscope.db";

  // What the ticks alone would give a phase: energy_j interpolated between the two ticks around each edge.
  std::vector<std::pair<double, double>> ticks; // (ts_ms, energy_j)
  for (const auto& row : query(db, "SELECT ts_ms, energy_j FROM gpu_samples ORDER BY tick"))
    ticks.emplace_back(std::stod(*row[0]), std::stod(*row[1]));
  ASSERT_GE(ticks.size(), 5u);
  auto interpolated = [&](double ms) {
    for (size_t i = 1; i < ticks.size(); ++i)
      if (ms <= ticks[i].first) {
        const auto& [t_a, e_a] = ticks[i - 1];
        const auto& [t_b, e_b] = ticks[i];
        return e_a + (e_b - e_a) * (ms - t_a) / (t_b - t_a);
      }
    return ticks.back().second;
  };

  const auto phases = query(db, "SELECT name, start_ms, end_ms, energy_j FROM phases ORDER BY start_ms");
  ASSERT_EQ(phases.size(), 3u);
  double worst_read = 0, worst_ticks = 0;
  for (const auto& p : phases) {
    SCOPED_TRACE(*p[0]);
    const double start_ms = std::stod(*p[1]), end_ms = std::stod(*p[2]), stored = std::stod(*p[3]);
    const double exact = energy_at((end_ms - t0_ms) / 1000) - energy_at((start_ms - t0_ms) / 1000);
    ASSERT_GT(exact, 300);
    // Within 1 %, plus the stored times' millisecond and a reading's wake-up: 2 ms of the high power at each edge.
    EXPECT_NEAR(stored, exact, 0.01 * exact + 2 * 2e-3 * kHighW);
    worst_read = std::max(worst_read, std::abs(stored - exact) / exact);
    const double from_ticks = interpolated(end_ms) - interpolated(start_ms);
    worst_ticks = std::max(worst_ticks, std::abs(from_ticks - exact) / exact);
  }
  // The wave puts a step inside every tick: interpolated between ticks, some phase is off by 3.7 % or more for any
  // placement of the ticks and the child (computed over 20,000 placements), so the readings are what holds it.
  EXPECT_GT(worst_ticks, 0.02) << "worst phase from ticks alone " << worst_ticks;
  RecordProperty("worst_phase_error_pct_with_readings", std::to_string(100 * worst_read));
  RecordProperty("worst_phase_error_pct_ticks_alone", std::to_string(100 * worst_ticks));
  std::printf("worst phase error: %.3f %% with readings at the edges, %.2f %% from the ticks alone\n", 100 * worst_read,
              100 * worst_ticks);

  // One counter read per tick plus one per edge (six edges, none within 5 ms of another, within the budget of 4 and
  // one a second): never more.
  const int counter_calls = calls.value("nvmlDeviceGetTotalEnergyConsumption", 0);
  const int tick_count = static_cast<int>(ticks.size());
  // The first edge also learns whether the counter moves on a period (sources/counter_clock.hpp): this one moves at
  // every read, which four reads more tell.
  EXPECT_GE(counter_calls, tick_count + 5) << tick_count << " ticks";
  EXPECT_LE(counter_calls, tick_count + 6 + 4) << tick_count << " ticks";
  // The run's energy is still the counter's exact rise
  EXPECT_NEAR(ticks.back().second, (truth["0"]["last_mj"].get<double>() - truth["0"]["first_mj"].get<double>()) / 1000,
              1e-6);
}

// At an interval under 100 ms the ticks already hold an edge of a counter exact at every instant within a few joules,
// and, reading it every tick, show that it moves at every one: nothing reads it off the grid.
TEST(PhaseEdges, AtShortIntervalsAContinuousCounterIsNotReadOffTheGrid) {
  TempDir dir;
  write_file(dir / "scenario.json", scenario().dump());
  const std::map<std::string, std::string> env = {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                                                  {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                                                  {"WATTSCOPE_FAKE_NVML_CALLS", dir / "calls.json"},
                                                  {"CUDA_VISIBLE_DEVICES", "\x01"},
                                                  {"WATTSCOPE_SOCKET", "\x01"}};
  const char* program = R"(
import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for i in range(5):
    s.sendto(b'{"kind":"begin","name":"p"}\n', os.environ["WATTSCOPE_SOCKET"]); time.sleep(0.05)
    s.sendto(b'{"kind":"end","name":"p"}\n', os.environ["WATTSCOPE_SOCKET"]); time.sleep(0.05)
)";
  Result r = run({wattscope(), "run", "--interval", "50ms", "--max-read-cost", "0", "--top-processes", "0", "--",
                  "python3", "-c", program},
                 env, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json calls = json::parse(read_file(dir / "calls.json"));
  const int tick_count = std::stoi(scalar(dir / "wattscope.db", "SELECT count(*) FROM gpu_samples"));
  EXPECT_EQ(calls.value("nvmlDeviceGetTotalEnergyConsumption", 0), tick_count);
  EXPECT_EQ(scalar(dir / "wattscope.db", "SELECT count(*) FROM phases"), "5");
}

// An H100's counter moves only every 100 ms: a reading is the energy at its last update, up to 100 ms before it was
// made. Each phase edge learns when it moves (the first), reads it just after the first update past the edge and
// works back to the edge with the instant power read meanwhile: each phase within 1 % of the exact integral at 1 s,
// 100 ms and 20 ms. Without that (the counter's value placed at the time it was read), the same wave put phases
// 3.5-4.5 % off (bench/anchored_accuracy.py --counter-update-ms 100, last session's figures). A phase whose edge got
// no timely reading (the machine busy with other tests) may miss by more, and then says by how much it may: it is
// within the bound it states, which is over 1 %.
TEST(PhaseEdges, OnACounterThatMovesEvery100msEachPhaseIsWithinOnePercent) {
  for (const char* interval : {"1s", "100ms", "20ms"}) {
    SCOPED_TRACE(interval);
    TempDir dir;
    // An H100's counter costs 2.8 ms of CPU a read (bench/overhead.py): read on a schedule between the edges, and on a
    // loaded machine the reads stretch and come late.
    Result r = run_phases_on_a_100ms_counter(dir, interval, {{"cpu", 2800}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("its energy counter moves every 100.0 ms"), std::string::npos) << r.err;
    const json truth = json::parse(read_file(dir / "energy.json"));
    const double t0_ms = truth["t0_wall_ms"].get<double>();
    const auto phases = query(dir / "wattscope.db",
                              "SELECT name, start_ms, end_ms, energy_j, energy_bound_j FROM phases ORDER BY start_ms");
    ASSERT_EQ(phases.size(), 3u);
    double worst = 0;
    for (const auto& p : phases) {
      SCOPED_TRACE(*p[0]);
      const double start_ms = std::stod(*p[1]), end_ms = std::stod(*p[2]), stored = std::stod(*p[3]);
      const double exact = energy_at((end_ms - t0_ms) / 1000) - energy_at((start_ms - t0_ms) / 1000);
      ASSERT_GT(exact, 300);
      // Within 1 % (or the larger bound the phase states), plus the stored times' millisecond: 1 ms of the high power
      // at each edge.
      const double bound = std::max(0.01 * exact, p[4] ? std::stod(*p[4]) : 0.0);
      EXPECT_NEAR(stored, exact, bound + 2 * 1e-3 * kHighW);
      EXPECT_LE(bound, 0.2 * exact);
      if (bound > 0.01 * exact)
        std::printf("%s %s: %.3f %% off, within its stated bound of %.3f %%\n", interval, p[0]->c_str(),
                    100 * std::abs(stored - exact) / exact, 100 * bound / exact);
      worst = std::max(worst, std::abs(stored - exact) / exact);
    }
    std::printf("%s: worst phase error %.3f %% on a counter that moves every 100 ms\n", interval, 100 * worst);
  }
}

// A counter read that takes 23 ms (an H100's 2.8 ms of CPU stretched by a loaded machine, or a driver waiting) places
// each update only within a read's length: the counter is still learnt (learning from the middle of such a change, the
// next update was missed and three runs in four had no reading at any edge, each phase stating a bound of 65-126 %),
// and each phase is within the bound it states (energy_bound_j), a reading's: 4-9 % of the phase, under 20 % loaded.
TEST(PhaseEdges, WhenCounterReadsTakeLongEachPhaseIsWithinTheBoundItStates) {
  for (const char* interval : {"1s", "100ms"}) {
    SCOPED_TRACE(interval);
    TempDir dir;
    Result r = run_phases_on_a_100ms_counter(dir, interval, {{"cpu", 2800}, {"sleep", 20000}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json truth = json::parse(read_file(dir / "energy.json"));
    const double t0_ms = truth["t0_wall_ms"].get<double>();
    const auto phases =
        query(dir / "wattscope.db",
              "SELECT name, start_ms, end_ms, energy_j, energy_bound_j, start_edge, end_edge FROM phases "
              "ORDER BY start_ms");
    ASSERT_EQ(phases.size(), 3u);
    double worst = 0;
    for (const auto& p : phases) {
      SCOPED_TRACE(*p[0]);
      ASSERT_TRUE(p[4].has_value()) << "no stated bound";
      const double start_ms = std::stod(*p[1]), end_ms = std::stod(*p[2]), stored = std::stod(*p[3]);
      const double bound = std::stod(*p[4]);
      const double exact = energy_at((end_ms - t0_ms) / 1000) - energy_at((start_ms - t0_ms) / 1000);
      ASSERT_GT(exact, 300);
      // The stored times' millisecond: 1 ms of the high power at each edge.
      const double ms_slack = 2 * 1e-3 * kHighW;
      EXPECT_LE(std::abs(stored - exact), bound + ms_slack) << stored << " J against " << exact << " J";
      EXPECT_LE(bound, 0.2 * exact) << "edges " << *p[5] << ", " << *p[6];
      worst = std::max(worst, std::abs(stored - exact) / exact);
      std::printf("%s %s: %.2f J against %.2f J (%.3f %%), bound %.2f J, edges %s, %s\n", interval, p[0]->c_str(),
                  stored, exact, 100 * std::abs(stored - exact) / exact, bound, p[5]->c_str(), p[6]->c_str());
    }
    std::printf("%s: worst phase error %.3f %% with 23 ms counter reads\n", interval, 100 * worst);
  }
}

// The fake's "update_s" (bench/anchored_accuracy.py --counter-update-ms): a counter that moves only every 100 ms, as
// an H100's does. At 100 W, read every 20 ms, the stored energy rises in steps of 10 J, never between.
TEST(PhaseEdges, TheFakesCounterCanMoveOnlyEvery100ms) {
  TempDir dir;
  json sc = scenario();
  sc["devices"][0]["metrics"]["power_instant_mw"] = 100000;
  sc["devices"][0]["metrics"]["energy_mj"] = {{"sine_integral", {{"base", 100000}, {"amp", 0}, {"period_s", 1}}},
                                              {"update_s", 0.1}};
  write_file(dir / "scenario.json", sc.dump());
  const std::map<std::string, std::string> env = {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                                                  {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                                                  {"CUDA_VISIBLE_DEVICES", "\x01"}};
  Result r = run(
      {wattscope(), "run", "--interval", "20ms", "--max-read-cost", "0", "--top-processes", "0", "--", "sleep", "0.6"},
      env, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int steps = 0;
  double prev = 0;
  for (const auto& row : query(dir / "wattscope.db", "SELECT energy_j FROM gpu_samples ORDER BY tick")) {
    const double e = std::stod(*row[0]);
    const double rise = e - prev;
    EXPECT_NEAR(rise / 10.0, std::round(rise / 10.0), 1e-6) << e; // whole 100 ms steps of 10 J
    steps += rise > 0;
    prev = e;
  }
  EXPECT_GE(steps, 4);
  EXPECT_GE(prev, 50.0);
}

// A program whose markers wait in a queue (a busy data loader, a logging thread) sends each 150 ms after its edge,
// with its own time (mono_ns): the stored phases are the program's own, in time and in energy. Placed at their
// arrival, an end 163 ms late once made a 0.64 s phase 48 % heavier.
TEST(PhaseEdges, AMarkerSentLateKeepsTheProgramsOwnEdge) {
  TempDir dir;
  json sc = scenario();
  sc["devices"][0]["metrics"]["energy_mj"]["update_s"] = 0.1;
  write_file(dir / "scenario.json", sc.dump());
  const std::map<std::string, std::string> env = wave_env(dir);
  const char* program = R"(
import json, os, socket, time
path = os.environ["WATTSCOPE_SOCKET"]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
t0 = time.monotonic()
own = []
def at(t):
    d = t0 + t - time.monotonic()
    if d > 0: time.sleep(d)
for name, b, e in (("a", 0.4, 1.05), ("b", 1.6, 2.9)):
    for kind, t in (("begin", b), ("end", e)):
        at(t)
        mono, wall = time.monotonic_ns(), time.time()
        own.append((name, kind, wall * 1000))
        time.sleep(0.15)  # waits in a queue before it is sent
        s.sendto((json.dumps({"kind": kind, "name": name, "mono_ns": mono}) + "\n").encode(), path)
at(3.4)
with open("own.json", "w") as f: json.dump(own, f)
)";
  Result r = run({wattscope(), "run", "--interval", "1s", "--top-processes", "0", "--", "python3", "-c", program}, env,
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json own = json::parse(read_file(dir / "own.json"));
  const double t0_ms = json::parse(read_file(dir / "energy.json"))["t0_wall_ms"].get<double>();
  const auto phases = query(dir / "wattscope.db", "SELECT name, start_ms, end_ms, energy_j, start_edge, end_edge, "
                                                  "energy_bound_j FROM phases ORDER BY start_ms");
  ASSERT_EQ(phases.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE(*phases[i][0]);
    const double b_ms = own[2 * i][2].get<double>(), e_ms = own[2 * i + 1][2].get<double>();
    // The stored times are the program's own (the wall clock moved on with the monotonic one), not 150 ms later
    EXPECT_NEAR(std::stod(*phases[i][1]), b_ms, 3);
    EXPECT_NEAR(std::stod(*phases[i][2]), e_ms, 3);
    const double exact = energy_at((e_ms - t0_ms) / 1000) - energy_at((b_ms - t0_ms) / 1000);
    const double stored = std::stod(*phases[i][3]);
    // Read 150 ms after its edge, each edge rests between the counter values around it: within its stated bound
    ASSERT_TRUE(phases[i][6]);
    EXPECT_LE(std::abs(stored - exact), std::stod(*phases[i][6]) + 2 * 3e-3 * kHighW);
    EXPECT_NEAR(stored, exact, 0.25 * exact);
    EXPECT_TRUE(phases[i][4] && phases[i][5]);
    std::printf("late marker: phase %s off %.2f %%, stated bound %.1f %% (edges %s, %s)\n", phases[i][0]->c_str(),
                100 * (stored - exact) / exact, 100 * std::stod(*phases[i][6]) / exact, phases[i][4]->c_str(),
                phases[i][5]->c_str());
  }
}

} // namespace e2e_phase_edges
