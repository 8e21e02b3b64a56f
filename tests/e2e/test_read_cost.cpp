// Issue 33 end to end: the real binary on the fake NVML spending an H100's measured CPU per call (the fake counts
// every call). A read over the --max-read-cost budget is made about once a second, cheap ones every tick, and the
// run's energy is still the energy counter's exact rise.
#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "core/instrumented.hpp"

namespace e2e_read_cost { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

// One GPU whose power is a sine and whose energy counter is that sine's exact integral; the fan answers 10 + k on its
// k-th read (so a carried value shows as a repeat). Costs as measured on an H100 (docs/nvidia.md), the energy counter's
// scaled down to 400 us so the test stays light on a shared machine (still 8x the budget). Under a sanitizer every cost
// and the default budget are kInstrumentedCostFactor times larger (core/instrumented.hpp), so the same calls are
// costly.
json scenario() {
  json sine = {{"base", 300000}, {"amp", 100000}, {"period_s", 1.5}};
  json m = {{"power_instant_mw", {{"sine", sine}}},
            {"energy_mj", {{"sine_integral", sine}}},
            {"util_gpu", 50},
            {"util_mem", 20},
            {"fan_pct", {{"linear", {10, 1}}}},
            {"pcie_width", 16},
            {"temp_gpu", 40}};
  return {{"driver_version", "580.65.06"},
          {"nvml_version", "13.580.65.06"},
          {"call_cost_us",
           {{"nvmlDeviceGetTotalEnergyConsumption", {{"cpu", 400 * wattscope::kInstrumentedCostFactor}}},
            {"nvmlDeviceGetFanSpeed", 136 * wattscope::kInstrumentedCostFactor},
            {"nvmlDeviceGetCurrPcieLinkWidth", 25 * wattscope::kInstrumentedCostFactor}}},
          {"devices", json::array({{{"name", "NVIDIA H100 80GB HBM3"}, {"uuid", "GPU-cost-0"}, {"metrics", m}}})}};
}

struct FakeRun {
  TempDir dir;
  Result result;
  json calls;
  json energy;
  std::string db() const { return dir / "wattscope.db"; }
};

std::unique_ptr<FakeRun> run_fake(std::vector<std::string> args) {
  auto fr = std::make_unique<FakeRun>();
  write_file(fr->dir / "scenario.json", scenario().dump());
  std::map<std::string, std::string> env = {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                                            {"WATTSCOPE_FAKE_NVML_SCENARIO", fr->dir / "scenario.json"},
                                            {"WATTSCOPE_FAKE_NVML_CALLS", fr->dir / "calls.json"},
                                            {"WATTSCOPE_FAKE_NVML_ENERGY", fr->dir / "energy.json"},
                                            {"CUDA_VISIBLE_DEVICES", "\x01"}};
  args.insert(args.begin(), wattscope());
  fr->result = run(args, env, fr->dir.path());
  const std::string calls = read_file(fr->dir / "calls.json");
  fr->calls = calls.empty() ? json::object() : json::parse(calls);
  const std::string energy = read_file(fr->dir / "energy.json");
  fr->energy = energy.empty() ? json::object() : json::parse(energy);
  return fr;
}

int calls(const FakeRun& fr, const char* symbol) {
  return fr.calls.value(symbol, 0);
}

} // namespace

TEST(ReadCost, ACostlyCallIsReadAboutOnceASecondAndCheapOnesEveryTick) {
  auto fr = run_fake({"run", "--interval", "10ms", "--", "sleep", "2.5"});
  ASSERT_EQ(fr->result.exit_code, 0) << fr->result.err;
  const int ticks = std::stoi(scalar(fr->db(), "SELECT count(*) FROM gpu_samples"));
  ASSERT_GE(ticks, 100) << fr->result.err;
  // Cheap: every tick (the link width's 25 us is under the 50 us budget)
  EXPECT_EQ(calls(*fr, "nvmlDeviceGetUtilizationRates"), ticks);
  EXPECT_EQ(calls(*fr, "nvmlDeviceGetCurrPcieLinkWidth"), ticks);
  // Costly: the fan after five timed reads, then once a second (less a tenth) over the ~2.4 s left. The energy counter,
  // eight times its budget, from its first read: it only anchors the energy the instant power shapes, every 5 s (none
  // in the ~2.5 s left), the round's other timed reads at that rate too (at 10 ms, timing five reads of eight counters
  // on consecutive ticks overran them); and on the last tick.
  const int fan = calls(*fr, "nvmlDeviceGetFanSpeed");
  const int energy = calls(*fr, "nvmlDeviceGetTotalEnergyConsumption");
  EXPECT_GE(fan, 5 + 2) << ticks << " ticks";
  EXPECT_LE(fan, 5 + 4) << ticks << " ticks";
  EXPECT_GE(energy, 1 + 1) << ticks << " ticks";
  EXPECT_LE(energy, 1 + 2) << ticks << " ticks";
  EXPECT_NE(fr->result.err.find("fan_speed costs"), std::string::npos) << fr->result.err;
  EXPECT_NE(fr->result.err.find("its energy counter costs"), std::string::npos) << fr->result.err;
  // The rows between two fan reads carry the last one (the k-th read answers 10 + k): one distinct value per read,
  // in order, never missing.
  std::set<double> seen;
  double prev = 0;
  for (const auto& r : query(fr->db(), "SELECT fan_pct FROM gpu_samples ORDER BY tick")) {
    ASSERT_TRUE(r[0].has_value());
    const double v = std::stod(*r[0]);
    EXPECT_GE(v, prev);
    prev = v;
    seen.insert(v);
  }
  EXPECT_EQ(static_cast<int>(seen.size()), fan);
  // The run's energy: the counter's exact rise from its first reading to its last (the run's last tick reads it)
  ASSERT_TRUE(fr->energy.contains("0")) << fr->energy.dump();
  const double truth_j = (fr->energy["0"]["last_mj"].get<double>() - fr->energy["0"]["first_mj"].get<double>()) / 1000;
  const double stored_j = std::stod(scalar(fr->db(), "SELECT energy_j FROM gpu_samples ORDER BY tick DESC LIMIT 1"));
  EXPECT_NEAR(stored_j, truth_j, 1e-6);
  EXPECT_GT(truth_j, 500); // ~2.5 s at 200-400 W
  EXPECT_EQ(scalar(fr->db(), "SELECT energy_method FROM gpu_devices"), "counter");
  // Between the counter's reads the energy follows the power: far more distinct values than reads
  EXPECT_GT(std::stoi(scalar(fr->db(), "SELECT count(DISTINCT energy_j) FROM gpu_samples")), ticks / 2);
}

TEST(ReadCost, ZeroReadsEverythingEveryTick) {
  auto fr = run_fake({"run", "--interval", "20ms", "--max-read-cost", "0", "--", "sleep", "0.6"});
  ASSERT_EQ(fr->result.exit_code, 0) << fr->result.err;
  const int ticks = std::stoi(scalar(fr->db(), "SELECT count(*) FROM gpu_samples"));
  ASSERT_GE(ticks, 15);
  EXPECT_EQ(calls(*fr, "nvmlDeviceGetFanSpeed"), ticks);
  EXPECT_EQ(calls(*fr, "nvmlDeviceGetTotalEnergyConsumption"), ticks);
  EXPECT_EQ(fr->result.err.find("costs"), std::string::npos) << fr->result.err;
}

TEST(ReadCost, ABadBudgetIsAUsageError) {
  for (const char* bad : {"fast", "-5us", "2s"}) {
    auto fr = run_fake({"run", "--max-read-cost", bad, "--", "true"});
    EXPECT_NE(fr->result.exit_code, 0) << bad;
    EXPECT_NE(fr->result.err.find("--max-read-cost"), std::string::npos) << bad << ": " << fr->result.err;
  }
}

TEST(ReadCost, DoctorVerbosePrintsEachCallsCostAndPeriod) {
  auto fr = run_fake({"-v", "doctor"});
  const std::string& out = fr->result.out;
  EXPECT_NE(out.find("fan_speed"), std::string::npos) << out << fr->result.err;
  auto line_of = [&](const std::string& name) {
    const auto at = out.find("  " + name + " ");
    if (at == std::string::npos) return std::string();
    return out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_NE(line_of("fan_speed").find("read every 1000 ms"), std::string::npos) << out;
  // The counter only anchors where the instant power field shapes the energy: every 5 ticks at doctor's 1 s.
  EXPECT_NE(line_of("total_energy").find("read every 5000 ms"), std::string::npos) << out;
  EXPECT_NE(line_of("utilization").find("read every tick"), std::string::npos) << out;
  EXPECT_NE(line_of("pcie_link_width").find("read every tick"), std::string::npos) << out;
}

} // namespace e2e_read_cost
