// Runs that never finished: `show` rebuilds their figures from the stored samples and says so; `repair` finalises
// them. The run is recorded by the real binary with the fake NVML (three GPUs) and killed with SIGKILL mid-run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"

namespace e2e_repair { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

json scenario() {
  json devices = json::array();
  for (int i = 0; i < 3; ++i)
    devices.push_back({{"name", "NVIDIA H100"},
                       {"uuid", "GPU-" + std::to_string(i)},
                       {"pci_bus_id", "00000000:1" + std::to_string(i) + ":00.0"},
                       {"metrics",
                        {{"power_instant_mw", 100000 + 50000 * i},
                         {"energy_mj", {{"linear", {5000000, 1000 * (i + 1)}}}},
                         {"util_gpu", 50 + i},
                         {"mem_used_bytes", 1 << 30},
                         {"mem_total_bytes", 85899345920LL}}}});
  return {{"driver_version", "550.54.15"}, {"devices", devices}};
}

struct Killed {
  TempDir dir;
  std::string db() const { return dir / "w.db"; }
  std::map<std::string, std::string> env() const {
    return {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
            {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
            {"CUDA_VISIBLE_DEVICES", "\x01"}};
  }
  Result ws(std::vector<std::string> args) const {
    args.insert(args.begin(), wattscope());
    return run(args, env(), dir.path());
  }
};

// Records until at least `rows` GPU rows are committed, then SIGKILLs wattscope: no summary, no end.
std::unique_ptr<Killed> record_and_kill(int rows) {
  auto k = std::make_unique<Killed>();
  write_file(k->dir / "scenario.json", scenario().dump());
  const int pid = start({wattscope(), "record", "--task", "killed", "--interval", "50ms", "--commit-every", "100ms",
                         "--db", k->db(), "--csv", k->dir / "csv"},
                        k->env(), k->dir.path(), k->dir / "out", k->dir / "err");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::string n = "0";
    try {
      n = scalar(k->db(), "SELECT count(*) FROM gpu_samples");
    } catch (...) {
    }
    if (std::stoi(n.empty() ? "0" : n) >= rows) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      wait_exit(pid);
      ADD_FAILURE() << "no samples after 30 s: " << read_file(k->dir / "err");
      return k;
    }
  }
  ::kill(pid, SIGKILL);
  wait_exit(pid);
  return k;
}

} // namespace

TEST(Repair, UnfinishedRunIsShownFromItsSamplesThenFinalised) {
  auto k = record_and_kill(30);
  ASSERT_EQ(scalar(k->db(), "SELECT end_ms IS NULL FROM runs"), "1");
  const int ticks = std::stoi(scalar(k->db(), "SELECT count(*) FROM cpu_samples"));
  ASSERT_GE(ticks, 10);
  // The energy each GPU stored last: what the run used, as far as anything knows.
  std::vector<double> last(3);
  for (int g = 0; g < 3; ++g)
    last[g] = std::stod(scalar(k->db(), "SELECT energy_j FROM gpu_samples WHERE gpu_index = " + std::to_string(g) +
                                            " ORDER BY tick DESC LIMIT 1"));

  auto shown = k->ws({"show", "--db", k->db(), "--json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  json j = json::parse(shown.out);
  EXPECT_FALSE(j["finished"].get<bool>());
  EXPECT_TRUE(j["rebuilt_from_samples"].get<bool>());
  EXPECT_EQ(j["samples"].get<int>(), ticks);
  ASSERT_EQ(j["gpus"].size(), 3u);
  double total = 0;
  for (int g = 0; g < 3; ++g) {
    EXPECT_NEAR(j["gpus"][g]["energy_j"].get<double>(), last[g], 1e-9) << g;
    EXPECT_GT(j["gpus"][g]["avg_power_w"].get<double>(), 0);
    total += last[g];
  }
  ASSERT_TRUE(j["total_energy_j"].is_number()) << shown.out;
  EXPECT_NEAR(j["total_energy_j"].get<double>(), total, 1e-6);
  EXPECT_GT(j["duration_s"].get<double>(), 0);

  auto text = k->ws({"show", "--db", k->db()});
  EXPECT_NE(text.out.find("not finished"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("wattscope repair"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("energy not measured"), std::string::npos) << text.out;

  auto repaired = k->ws({"repair", "--db", k->db()});
  ASSERT_EQ(repaired.exit_code, 0) << repaired.err;
  EXPECT_EQ(scalar(k->db(), "SELECT end_ms = (SELECT max(ts_ms) FROM cpu_samples) FROM runs"), "1");
  EXPECT_EQ(scalar(k->db(), "SELECT samples FROM runs"), std::to_string(ticks));
  EXPECT_NEAR(std::stod(scalar(k->db(), "SELECT total_energy_j FROM runs")), total, 1e-6);
  auto after = json::parse(k->ws({"show", "--db", k->db(), "--json"}).out);
  EXPECT_TRUE(after["finished"].get<bool>());
  EXPECT_TRUE(after["exit_status"].is_null());
  // Once finished, there is nothing left to repair.
  auto again = k->ws({"repair", "--db", k->db()});
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_NE(again.err.find("nothing to repair"), std::string::npos) << again.err;

  // The CSV copy of the same run is repaired the same way: only its runs file is rewritten.
  auto csv_before = json::parse(k->ws({"show", "--csv", k->dir / "csv", "--json"}).out);
  EXPECT_FALSE(csv_before["finished"].get<bool>());
  EXPECT_GT(csv_before["samples"].get<int>(), 0);
  auto csv_repaired = k->ws({"repair", "--db", "csv:" + k->dir / "csv"});
  ASSERT_EQ(csv_repaired.exit_code, 0) << csv_repaired.err;
  auto csv_after = json::parse(k->ws({"show", "--csv", k->dir / "csv", "--json"}).out);
  EXPECT_TRUE(csv_after["finished"].get<bool>());
  EXPECT_EQ(csv_after["samples"], csv_before["samples"]);
  EXPECT_TRUE(csv_after["total_energy_j"].is_number());
}
} // namespace e2e_repair
