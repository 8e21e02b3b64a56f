// A MariaDB server that freezes (SIGSTOP: connections open, nothing answered) near the end of a run: the run still
// ends on time, the rows MySQL did not take are in the spill file, and once the server is back `wattscope export`
// stores every tick exactly once.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/mariadb.hpp"

namespace e2e_mysql_stalls { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::map<std::string, std::string> env_in(const TempDir& dir) {
  json devs = json::array();
  for (int i = 0; i < 2; ++i)
    devs.push_back({{"name", "NVIDIA H100 80GB HBM3"},
                    {"uuid", "GPU-" + std::to_string(i)},
                    {"metrics",
                     {{"power_instant_mw", {{"linear", {200000 + i, 250}}}},
                      {"energy_mj", {{"linear", {1000000, 12345 + i}}}},
                      {"util_gpu", 10},
                      {"mem_used_bytes", 1 << 30},
                      {"mem_total_bytes", 85899345920LL}}}});
  write_file(dir / "scenario.json", json{{"devices", devs}}.dump());
  return {{"WATTSCOPE_MYSQL_PASSWORD", "secret"},
          {"WATTSCOPE_SPILL_DIR", dir / "spill"},
          {"HOME", dir.path()},
          {"CUDA_VISIBLE_DEVICES", "\x01"},
          {"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
          {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"}};
}

} // namespace

TEST(MysqlStalls, ServerFrozenAtTheEndSpillsAndTheRunEndsOnTime) {
  MariaDb db;
  TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  int pid = start({wattscope(), "run", "--task", "frozen", "--interval", "50ms", "--db", db.url(), "--", "sleep", "3"},
                  env_in(dir), dir.path(), dir / "out", dir / "err");
  std::this_thread::sleep_for(2s); // a commit or two have gone in; the next one meets a frozen server
  db.freeze();
  const int rc = wait_exit(pid);
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string err = read_file(dir / "err");
  EXPECT_EQ(rc, 0) << err;
  // 3 s of job + the 5 s drain deadline (+ a grace only a reconnect under way uses); a frozen server used to hold
  // the exit for 30 s and more.
  EXPECT_LT(took_s, 13) << err;
  EXPECT_NE(err.find("did not finish storing the run in time"), std::string::npos) << err;
  EXPECT_NE(err.find("wattscope export --from"), std::string::npos) << err;
  std::vector<fs::path> spills;
  for (const auto& e : fs::directory_iterator(dir / "spill"))
    if (e.path().extension() == ".db") spills.push_back(e.path());
  ASSERT_EQ(spills.size(), 1u) << err;

  db.thaw();
  auto ex = run({wattscope(), "export", "--from", spills[0].string(), "--to", db.url()}, env_in(dir), dir.path());
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  // Every tick the sampler took is stored exactly once (the batch cut off mid-commit was rolled back by the server or
  // rewritten by the replay's idempotent insert), and the run row is final.
  auto row = db.sql("SELECT r.samples, (SELECT COUNT(*) FROM cpu_samples c WHERE c.run_id = r.run_id), "
                    "(SELECT COUNT(DISTINCT tick) FROM cpu_samples c WHERE c.run_id = r.run_id), "
                    "(SELECT MAX(tick) - MIN(tick) + 1 FROM cpu_samples c WHERE c.run_id = r.run_id), "
                    "JSON_VALUE(r.summary, '$.skipped_ticks'), r.end_ms IS NOT NULL, "
                    "(SELECT COUNT(*) FROM gpu_samples g WHERE g.run_id = r.run_id) FROM runs r WHERE r.task = "
                    "'frozen'");
  int samples = 0, rows = 0, distinct = 0, span = 0, skipped = 0, finished = 0, gpu_rows = 0;
  ASSERT_EQ(std::sscanf(row.c_str(), "%d\t%d\t%d\t%d\t%d\t%d\t%d", &samples, &rows, &distinct, &span, &skipped,
                        &finished, &gpu_rows),
            7)
      << row;
  EXPECT_GT(samples, 40);
  EXPECT_EQ(rows, samples);
  EXPECT_EQ(distinct, samples);
  EXPECT_EQ(span, samples + skipped);
  EXPECT_EQ(finished, 1);
  EXPECT_EQ(gpu_rows, 2 * samples);
}
} // namespace e2e_mysql_stalls
