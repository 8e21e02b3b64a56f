// A vendor library that hangs (a GPU falling off the bus) must cost only its own samples: the CPU and RAPL keep their
// schedule, the hung source's devices are missing for those ticks with one event, energy counters span the gap, and
// the end of the run does not wait for the hung call.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"

namespace e2e_stalls { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

// Constant power, and an energy counter that is the exact integral of it over the time since nvmlInit: whatever
// ticks are missing, the stored energy must equal power x elapsed time.
json device(int i, double power_w) {
  const double mw = power_w * 1000;
  return {{"name", "NVIDIA H100 80GB HBM3"},
          {"uuid", "GPU-stall-" + std::to_string(i)},
          {"pci_bus_id", "00000000:" + std::to_string(20 + i) + ":00.0"},
          {"metrics",
           {{"power_instant_mw", mw},
            {"energy_mj", {{"sine_integral", {{"base", mw}, {"amp", 0}, {"period_s", 1}}}}},
            {"util_gpu", 50},
            {"mem_used_bytes", 1 << 30},
            {"mem_total_bytes", 85899345920LL},
            {"temp_gpu", 60}}}};
}

struct StallRun {
  TempDir dir;
  Result result;
  double wall_s = 0;
  std::string db() const { return dir / "wattscope.db"; }
};

std::unique_ptr<StallRun> run_with(const json& scen, const std::vector<std::string>& args) {
  auto r = std::make_unique<StallRun>();
  write_file(r->dir / "scenario.json", scen.dump());
  std::vector<std::string> argv = {wattscope()};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto t0 = std::chrono::steady_clock::now();
  r->result = run(argv,
                  {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                   {"WATTSCOPE_FAKE_NVML_SCENARIO", r->dir / "scenario.json"},
                   {"CUDA_VISIBLE_DEVICES", "\x01"}},
                  r->dir.path());
  r->wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

long long num(const std::string& db, const std::string& sql) {
  return std::stoll(scalar(db, sql));
}

} // namespace

TEST(Stalls, HungNvmlLeavesItsGpusMissingWhileTheCpuKeepsItsSchedule) {
  json scen = {{"devices", {device(0, 250), device(1, 300)}}};
  // GPU 1's 10th sample (about 1 s in) blocks NVML for 3 s.
  scen["devices"][1]["hang"] = {{"at_tick", 10}, {"ms", 3000}};
  auto r = run_with(scen, {"run", "--task", "stall", "--interval", "100ms", "--", "sleep", "5"});
  ASSERT_EQ(r->result.exit_code, 0) << r->result.err;
  const std::string db = r->db();
  const std::string& err = r->result.err;

  // The CPU kept the grid: no gap of more than a few slots anywhere (the stall alone would make one of 30).
  auto cpu_ticks = query(db, "SELECT tick FROM cpu_samples ORDER BY tick");
  ASSERT_GE(cpu_ticks.size(), 30u) << err;
  long long worst_gap = 0;
  for (size_t i = 1; i < cpu_ticks.size(); ++i)
    worst_gap = std::max(worst_gap, std::stoll(*cpu_ticks[i][0]) - std::stoll(*cpu_ticks[i - 1][0]));
  EXPECT_LE(worst_gap, 5) << "a hung NVML call stalled CPU sampling";
  const auto summary = json::parse(scalar(db, "SELECT summary FROM runs"));
  EXPECT_LE(summary["skipped_ticks"].get<int>(), 10) << summary.dump();

  // One event when NVML went late, one when it answered again: not one per tick.
  ASSERT_EQ(num(db, "SELECT COUNT(*) FROM events WHERE kind = 'source-late' AND source = 'nvml'"), 1) << err;
  ASSERT_EQ(num(db, "SELECT COUNT(*) FROM events WHERE kind = 'source-recovered' AND source = 'nvml'"), 1) << err;
  EXPECT_NE(err.find("nvml did not answer within 250 ms"), std::string::npos) << err;
  const long long late = num(db, "SELECT e.ts_ms FROM events e WHERE kind = 'source-late'");
  const long long back = num(db, "SELECT e.ts_ms FROM events e WHERE kind = 'source-recovered'");
  const long long late_tick = num(db, "SELECT tick FROM cpu_samples WHERE ts_ms = " + std::to_string(late));
  const long long back_tick = num(db, "SELECT tick FROM cpu_samples WHERE ts_ms = " + std::to_string(back));
  EXPECT_NEAR(back_tick - late_tick, 30, 4); // 3 s at 100 ms
  // The CPU was recorded on (nearly) every tick of the hang.
  const long long cpu_during = num(db, "SELECT COUNT(*) FROM cpu_samples WHERE tick >= " + std::to_string(late_tick) +
                                           " AND tick < " + std::to_string(back_tick));
  EXPECT_GE(cpu_during, (back_tick - late_tick) * 8 / 10);

  // Both GPUs (NVML is sampled as one source) are missing, not zero and not repeated, from the late tick until it
  // answered again, and present on every other tick the CPU was sampled.
  for (int g = 0; g < 2; ++g) {
    SCOPED_TRACE("gpu " + std::to_string(g));
    const std::string where = " FROM gpu_samples WHERE gpu_index = " + std::to_string(g);
    EXPECT_EQ(num(db, "SELECT COUNT(*)" + where + " AND tick >= " + std::to_string(late_tick) + " AND tick < " +
                          std::to_string(back_tick)),
              0);
    EXPECT_EQ(num(db, "SELECT COUNT(*)" + where + " AND (tick < " + std::to_string(late_tick) +
                          " OR tick >= " + std::to_string(back_tick) + ")"),
              num(db, "SELECT COUNT(*) FROM cpu_samples WHERE tick < " + std::to_string(late_tick) +
                          " OR tick >= " + std::to_string(back_tick)));
    EXPECT_EQ(num(db, "SELECT COUNT(*)" + where + " AND (power_w IS NULL OR power_w = 0)"), 0);

    // Energy adds up across the gap: the counter delta spans it, so energy = power x time between the first and the
    // last reading (a counter re-based after the gap would miss ~3 s of it: -60 %).
    const double power = g == 0 ? 250 : 300;
    auto rows = query(db, "SELECT ts_ms, energy_j" + where + " ORDER BY tick");
    ASSERT_GE(rows.size(), 10u);
    const double span_s = (std::stod(*rows.back()[0]) - std::stod(*rows.front()[0])) / 1000;
    const double energy = std::stod(*rows.back()[1]);
    EXPECT_NEAR(energy, power * span_s, 0.02 * power * span_s);
    // ... and in particular across the hang itself.
    const std::string before = "SELECT energy_j" + where + " AND tick = " + std::to_string(late_tick - 1);
    const std::string after = "SELECT energy_j" + where + " AND tick = " + std::to_string(back_tick);
    const double gap_s = (back - late) / 1000.0 + 0.1;
    EXPECT_NEAR(std::stod(scalar(db, after)) - std::stod(scalar(db, before)), power * gap_s, 0.05 * power * gap_s);
    EXPECT_NEAR(summary["gpus"][g]["energy_j"].get<double>(), energy, 1e-6);
    EXPECT_EQ(summary["gpus"][g]["energy_method"], "counter");
  }
}

TEST(Stalls, TheEndOfARunDoesNotWaitForAHungDriver) {
  json scen = {{"devices", {device(0, 250)}}};
  scen["hang"] = {{"at_tick", 3}, {"ms", 15000}}; // NVML as a whole hangs for 15 s, past the end of the run
  auto r = run_with(scen, {"run", "--task", "hung-at-end", "--interval", "100ms", "--", "sleep", "1"});
  ASSERT_EQ(r->result.exit_code, 0) << r->result.err;
  EXPECT_LT(r->wall_s, 6) << r->result.err;
  const std::string db = r->db();
  EXPECT_EQ(num(db, "SELECT COUNT(*) FROM runs WHERE end_ms IS NOT NULL"), 1);
  EXPECT_GE(num(db, "SELECT COUNT(*) FROM cpu_samples"), 8);
  EXPECT_EQ(num(db, "SELECT COUNT(*) FROM gpu_samples"), 3); // ticks 0-2; the 4th call never came back
  EXPECT_EQ(num(db, "SELECT COUNT(*) FROM events WHERE kind = 'source-late'"), 1);
  EXPECT_NE(r->result.err.find("still inside a driver call at the end of the run"), std::string::npos) << r->result.err;
}
} // namespace e2e_stalls
