// The MySQL/MariaDB store against a real, private MariaDB server per test.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../support/mariadb.hpp"
#include "sinks/store.hpp"

namespace e2e_mysql { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string two_gpu_scenario(const TempDir& dir) {
  json devs = json::array();
  for (int i = 0; i < 2; ++i)
    devs.push_back({{"name", "NVIDIA H100 80GB HBM3"},
                    {"uuid", "GPU-" + std::to_string(i)},
                    {"metrics",
                     {{"power_instant_mw", {{"linear", {200000 + i, 250}}}},
                      {"energy_mj", {{"linear", {1000000, 12345 + i}}}},
                      {"util_gpu", {{"linear", {1, 1}}}},
                      {"mem_used_bytes", 1 << 30},
                      {"mem_total_bytes", 85899345920LL},
                      {"temp_gpu", 60}}}});
  const std::string path = dir / "scenario.json";
  write_file(path, json{{"devices", devs}}.dump());
  return path;
}

std::map<std::string, std::string> env_for(const TempDir& dir, bool gpus = false) {
  std::map<std::string, std::string> env = {{"WATTSCOPE_MYSQL_PASSWORD", "secret"},
                                            {"WATTSCOPE_SPILL_DIR", dir / "spill"},
                                            {"HOME", dir.path()},
                                            {"CUDA_VISIBLE_DEVICES", "\x01"}};
  if (gpus) {
    env["WATTSCOPE_NVML_LIBRARY"] = fake_nvml();
    env["WATTSCOPE_FAKE_NVML_SCENARIO"] = two_gpu_scenario(dir);
  } else {
    env["WATTSCOPE_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1";
  }
  return env;
}

// Every row of every table of every run, through the store's own reader, as text.
std::vector<std::string> dump_store(const std::string& store) {
  using namespace wattscope;
  auto reader = open_reader(parse_store(store));
  std::vector<std::string> out;
  for (const auto& run : reader->runs()) {
    out.push_back(fmt::format("run {} {} {} {} {}", run.run_id, run.task, run.samples, *run.exit_status, run.summary));
    for (size_t t = 1; t < kTableCount; ++t) {
      reader->scan(static_cast<TableId>(t), run, [&](std::span<const Value> row) {
        std::string line(table(static_cast<TableId>(t)).name);
        for (const auto& v : row) {
          if (is_null(v))
            line += "|NULL";
          else if (auto i = std::get_if<int64_t>(&v))
            line += fmt::format("|{}", *i);
          else if (auto d = std::get_if<double>(&v))
            line += fmt::format("|{}", *d);
          else
            line += fmt::format("|{}", value_text(v));
        }
        out.push_back(line);
      });
    }
  }
  return out;
}

void expect_exact_rows(const MariaDb& db, const std::string& task) {
  // Grid slots the sampler skipped under load are recorded as skipped_ticks: they are not rows that went missing.
  auto row = db.sql("SELECT r.samples, (SELECT COUNT(*) FROM cpu_samples c WHERE c.run_id = r.run_id), "
                    "(SELECT COUNT(DISTINCT tick) FROM cpu_samples c WHERE c.run_id = r.run_id), "
                    "(SELECT MAX(tick) - MIN(tick) + 1 FROM cpu_samples c WHERE c.run_id = r.run_id), "
                    "JSON_VALUE(r.summary, '$.skipped_ticks'), r.end_ms IS NOT NULL FROM runs r WHERE r.task = '" +
                    task + "'");
  int samples = 0, rows = 0, distinct = 0, span = 0, skipped = 0, finished = 0;
  ASSERT_EQ(std::sscanf(row.c_str(), "%d\t%d\t%d\t%d\t%d\t%d", &samples, &rows, &distinct, &span, &skipped, &finished),
            6)
      << row;
  EXPECT_GT(samples, 5);
  EXPECT_EQ(rows, samples);           // exactly as many rows as ticks taken
  EXPECT_EQ(distinct, samples);       // no duplicate
  EXPECT_EQ(span, samples + skipped); // no gap other than slots the sampler itself skipped
  EXPECT_EQ(finished, 1);
}

} // namespace

TEST(Mysql, RoundTripReadsBackLikeTheOtherStores) {
  MariaDb db;
  TempDir dir;
  // The child marks a phase and work (issue 15), so the phases and work tables make the round trip too.
  const std::string mark = "'" + wstest::wattscope() + "' mark ";
  auto r = run({wstest::wattscope(), "run", "--task", "rt", "--interval", "50ms", "--db", db.url(), "--csv", "csv",
                "--", "sh", "-c",
                mark + "begin 'epoch \"1\"' --index 2 && " + mark + "work 5 tokens && sleep 0.5 && " + mark + "end"},
               env_for(dir, true), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("stored    MySQL ws@127.0.0.1"), std::string::npos) << r.err;
  // The MySQL copy and the CSV copy of the run hold the same rows, read back through each store's reader.
  setenv("WATTSCOPE_MYSQL_PASSWORD", "secret", 1);
  const auto in_mysql = dump_store(db.url()), in_csv = dump_store("csv:" + (dir / "csv"));
  EXPECT_EQ(in_mysql, in_csv);
  if (in_mysql != in_csv) { // say which rows differ: the whole dumps are truncated in the message
    auto a = in_mysql, b = in_csv;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::vector<std::string> only_mysql, only_csv;
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only_mysql));
    std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(only_csv));
    if (only_mysql.empty() && only_csv.empty()) ADD_FAILURE() << "the same rows, in another order";
    for (const auto& l : only_mysql)
      ADD_FAILURE() << "only in MySQL: " << l;
    for (const auto& l : only_csv)
      ADD_FAILURE() << "only in CSV: " << l;
  }
  EXPECT_EQ(db.sql("SELECT `name`, `index`, `closed_by_run_end` FROM phases"), "epoch \"1\"\t2\t0\n");
  EXPECT_EQ(db.sql("SELECT `amount`, `unit`, `phase_id` FROM work"), "5\ttokens\t0\n");
  EXPECT_EQ(db.sql("SELECT value FROM meta WHERE `key` = 'schema_version'"),
            fmt::format("{}\n", wattscope::kSchemaVersion));
  auto shown = run({wstest::wattscope(), "show", "--db", db.url(), "--json"}, env_for(dir), dir.path());
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  auto j = json::parse(shown.out);
  EXPECT_EQ(j["task"], "rt");
  EXPECT_EQ(j["gpus"].size(), 2u);
  EXPECT_EQ(j["gpus"][0]["energy_method"], "counter");
  auto listed = run({wstest::wattscope(), "list", "--db", db.socket_url()}, env_for(dir), dir.path());
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("rt"), std::string::npos);
  // InnoDB, utf8mb4, the time-order key and the host/time index; GPU rows keyed by their run's key, gpu_samples
  // their view.
  const std::string gpu_rows = db.sql("SHOW CREATE TABLE gpu_sample_rows");
  EXPECT_NE(gpu_rows.find("ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"), std::string::npos) << gpu_rows;
  EXPECT_NE(gpu_rows.find("PRIMARY KEY (`run_key`,`ts_ms`,`tick`,`gpu_index`)"), std::string::npos) << gpu_rows;
  EXPECT_EQ(gpu_rows.find("`run_id`"), std::string::npos) << gpu_rows;
  EXPECT_EQ(db.sql("SELECT table_type FROM information_schema.tables WHERE table_schema = 'wattscope' AND table_name "
                   "= 'gpu_samples'"),
            "VIEW\n");
  EXPECT_NE(db.sql("SHOW CREATE TABLE runs").find("KEY `runs_by_host_time` (`host`,`start_ms`)"), std::string::npos);
  // Readers refuse a store from a newer wattscope, or one whose version is not a number, rather than misread it.
  db.sql("UPDATE meta SET `value` = '99' WHERE `key` = 'schema_version'");
  auto newer = run({wstest::wattscope(), "show", "--db", db.url()}, env_for(dir), dir.path());
  EXPECT_NE(newer.exit_code, 0);
  EXPECT_NE(newer.err.find("schema version 99, newer than this wattscope's"), std::string::npos) << newer.err;
  db.sql("UPDATE meta SET `value` = 'x9' WHERE `key` = 'schema_version'");
  auto garbled = run({wstest::wattscope(), "list", "--db", db.url()}, env_for(dir), dir.path());
  EXPECT_NE(garbled.exit_code, 0);
  EXPECT_NE(garbled.err.find("'x9', which is not a version number"), std::string::npos) << garbled.err;
}

TEST(Mysql, OlderSchemaIsMigratedForward) {
  MariaDb db;
  TempDir dir;
  db.sql("CREATE TABLE meta (`key` VARCHAR(64) NOT NULL PRIMARY KEY, `value` MEDIUMTEXT);"
         "INSERT INTO meta VALUES ('schema_version', '1');"
         "CREATE TABLE cpu_samples (run_id VARCHAR(255) NOT NULL, tick BIGINT NOT NULL, ts_ms BIGINT, util_pct DOUBLE,"
         " mem_used_bytes BIGINT, mem_total_bytes BIGINT, PRIMARY KEY (run_id, tick)) ENGINE=InnoDB;"
         "INSERT INTO cpu_samples VALUES ('old', 0, 1, 2.5, 3, 4);");
  auto r = run({wstest::wattscope(), "run", "--db", db.url(), "--", "true"}, env_for(dir), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(db.sql("SELECT value FROM meta WHERE `key` = 'schema_version'"),
            fmt::format("{}\n", wattscope::kSchemaVersion));
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = 'wattscope' AND "
                   "table_name = 'cpu_samples' AND column_name IN ('package_power_w', 'power_method')"),
            "2\n");
  EXPECT_EQ(db.sql("SELECT util_pct, package_power_w FROM cpu_samples WHERE run_id = 'old'"), "2.5\tNULL\n");
  // The old run's row, and the new run's: its first sample and (unless it ended within a millisecond) its last.
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM cpu_samples WHERE run_id = 'old'"), "1\n");
  const int mine = std::stoi(db.sql("SELECT COUNT(*) FROM cpu_samples WHERE run_id <> 'old'"));
  EXPECT_GE(mine, 1);
  EXPECT_LE(mine, 2);
}

// Version 5 to 6: gpu_samples repeated each GPU's uuid, name and vendor. The next writer moves them into gpu_devices
// (a run whose device row was lost gets one from its samples) and drops the columns; every sample stays, and the view
// gpu_samples_named shows them beside each sample again.
TEST(Mysql, AVersion5StoreMovesEachGpusIdentityIntoGpuDevices) {
  MariaDb db;
  TempDir dir;
  db.sql("CREATE TABLE meta (`key` VARCHAR(64) NOT NULL PRIMARY KEY, `value` MEDIUMTEXT);"
         "INSERT INTO meta VALUES ('schema_version', '5');"
         "CREATE TABLE gpu_samples (run_id VARCHAR(255) NOT NULL, tick BIGINT NOT NULL, ts_ms BIGINT NOT NULL, "
         "gpu_index BIGINT NOT NULL, uuid MEDIUMTEXT, name MEDIUMTEXT, vendor MEDIUMTEXT, power_w DOUBLE, "
         "PRIMARY KEY (run_id, ts_ms, tick, gpu_index)) ENGINE=InnoDB;"
         "INSERT INTO gpu_samples VALUES ('old', 0, 1, 0, 'GPU-old0', 'NVIDIA H100', 'nvidia', 250), "
         "('old', 0, 1, 1, 'GPU-old1', 'NVIDIA H100', 'nvidia', 260), "
         "('old', 1, 2, 0, 'GPU-old0', 'NVIDIA H100', 'nvidia', 251);");
  auto r = run({wstest::wattscope(), "run", "--db", db.url(), "--", "true"}, env_for(dir, true), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(db.sql("SELECT value FROM meta WHERE `key` = 'schema_version'"),
            fmt::format("{}\n", wattscope::kSchemaVersion));
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = 'wattscope' AND "
                   "table_name = 'gpu_samples' AND column_name IN ('uuid', 'name', 'vendor')"),
            "0\n");
  EXPECT_EQ(db.sql("SELECT tick, gpu_index, power_w FROM gpu_samples WHERE run_id = 'old' ORDER BY tick, gpu_index"),
            "0\t0\t250\n0\t1\t260\n1\t0\t251\n");
  EXPECT_EQ(db.sql("SELECT gpu_index, uuid, name, vendor FROM gpu_devices WHERE run_id = 'old' ORDER BY gpu_index"),
            "0\tGPU-old0\tNVIDIA H100\tnvidia\n1\tGPU-old1\tNVIDIA H100\tnvidia\n");
  EXPECT_EQ(db.sql("SELECT tick, uuid, power_w FROM gpu_samples_named WHERE run_id = 'old' AND gpu_index = 0 ORDER "
                   "BY tick"),
            "0\tGPU-old0\t250\n1\tGPU-old0\t251\n");
  // Schema 7: the rows under their run's key (the old run's first, in start order), gpu_samples their view.
  EXPECT_EQ(db.sql("SELECT run_key FROM run_keys WHERE run_id = 'old'"), "1\n");
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM gpu_sample_rows WHERE run_key = 1"), "3\n");
  EXPECT_EQ(db.sql("SELECT table_type FROM information_schema.tables WHERE table_schema = 'wattscope' AND table_name "
                   "= 'gpu_samples'"),
            "VIEW\n");
  // The new run's samples are named through the view too (the fake's two GPUs).
  EXPECT_EQ(db.sql("SELECT COUNT(*) = COUNT(uuid) AND COUNT(*) > 0 FROM gpu_samples_named WHERE run_id <> 'old'"),
            "1\n");
}

TEST(Mysql, ServerKilledAndRestartedMidRunLosesAndDuplicatesNothing) {
  MariaDb db;
  TempDir dir;
  int pid = start(
      {wstest::wattscope(), "run", "--task", "killed", "--interval", "50ms", "--db", db.url(), "--", "sleep", "4"},
      env_for(dir, true), dir.path(), dir / "out", dir / "err");
  std::this_thread::sleep_for(1s);
  db.kill();
  std::this_thread::sleep_for(1500ms);
  db.start();
  ASSERT_EQ(wait_exit(pid), 0) << read_file(dir / "err");
  const std::string err = read_file(dir / "err");
  EXPECT_NE(err.find("recording into the spill file"), std::string::npos) << err;
  EXPECT_NE(err.find("is back; the spilled rows are stored"), std::string::npos) << err;
  expect_exact_rows(db, "killed");
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM gpu_samples g JOIN runs r USING (run_id) WHERE r.task = 'killed'"),
            std::to_string(2 * std::stoi(db.sql("SELECT samples FROM runs WHERE task = 'killed'"))) + "\n");
  EXPECT_TRUE(fs::is_empty(dir / "spill")); // replayed, then removed
}

TEST(Mysql, ServerDownAtStartRecordsAndReplaysWhenItIsBack) {
  MariaDb db;
  TempDir dir;
  db.stop();
  int pid = start(
      {wstest::wattscope(), "run", "--task", "late", "--interval", "50ms", "--db", db.url(), "--", "sleep", "2.5"},
      env_for(dir), dir.path(), dir / "out", dir / "err");
  std::this_thread::sleep_for(1s);
  db.start();
  ASSERT_EQ(wait_exit(pid), 0) << read_file(dir / "err");
  const std::string err = read_file(dir / "err");
  EXPECT_NE(err.find("Can't connect"), std::string::npos) << err;
  EXPECT_EQ(err.find("recording into the spill file"), err.rfind("recording into the spill file")); // said once
  expect_exact_rows(db, "late");
}

TEST(Mysql, RunEndingWhileDownLeavesASpillFileThatExportReplays) {
  MariaDb db;
  TempDir dir;
  db.stop();
  auto r = run(
      {wstest::wattscope(), "run", "--task", "offline", "--interval", "50ms", "--db", db.url(), "--", "sleep", "0.5"},
      env_for(dir), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("wattscope export --from"), std::string::npos) << r.err;
  // The summary says where the run is: the spill file, not MySQL.
  EXPECT_NE(r.err.find("stored    spill file "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("stored    MySQL"), std::string::npos) << r.err;
  std::vector<fs::path> spills;
  for (const auto& e : fs::directory_iterator(dir / "spill"))
    if (e.path().extension() == ".db") spills.push_back(e.path());
  ASSERT_EQ(spills.size(), 1u);
  // Export refuses to spill: with the server still down it fails clearly.
  auto down =
      run({wstest::wattscope(), "export", "--from", spills[0].string(), "--to", db.url()}, env_for(dir), dir.path());
  EXPECT_NE(down.exit_code, 0);
  EXPECT_NE(down.err.find("Can't connect"), std::string::npos) << down.err;
  // The client's bare "(111)" said in words, with what to check.
  EXPECT_NE(down.err.find("[errno "), std::string::npos) << down.err;
  EXPECT_NE(down.err.find("is MariaDB/MySQL running there"), std::string::npos) << down.err;
  db.start();
  auto ex =
      run({wstest::wattscope(), "export", "--from", spills[0].string(), "--to", db.url()}, env_for(dir), dir.path());
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  expect_exact_rows(db, "offline");
  // Replaying twice duplicates nothing.
  ASSERT_EQ(
      run({wstest::wattscope(), "export", "--from", spills[0].string(), "--to", db.url()}, env_for(dir), dir.path())
          .exit_code,
      0);
  expect_exact_rows(db, "offline");
}

TEST(Mysql, EightConcurrentWriters) {
  MariaDb db;
  TempDir dir;
  std::vector<int> pids;
  for (int i = 0; i < 8; ++i)
    pids.push_back(start({wstest::wattscope(), "run", "--task", "w" + std::to_string(i), "--interval", "20ms",
                          "--commit-every", "5", "--db", db.url(), "--", "sleep", "1"},
                         env_for(dir, true), dir.path(), dir / ("out" + std::to_string(i)),
                         dir / ("err" + std::to_string(i))));
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(wait_exit(pids[i]), 0) << read_file(dir / ("err" + std::to_string(i)));
  EXPECT_EQ(db.sql("SELECT COUNT(DISTINCT run_id), COUNT(*) FROM runs"), "8\t8\n");
  for (int i = 0; i < 8; ++i)
    expect_exact_rows(db, "w" + std::to_string(i));
}

TEST(Mysql, TaskNamesFullOfQuotesAndSqlAreData) {
  MariaDb db;
  TempDir dir;
  const std::string task = "x'); DROP TABLE runs; -- \"q\" `b` \\ ü";
  auto r = run({wstest::wattscope(), "run", "--task", task, "--db", db.url(), "--tag", "note=it's; DELETE FROM runs",
                "--", "true"},
               env_for(dir), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  setenv("WATTSCOPE_MYSQL_PASSWORD", "secret", 1);
  auto reader = wattscope::open_reader(wattscope::parse_store(db.url()));
  auto runs = reader->runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].task, task);
  EXPECT_EQ(json::parse(runs[0].tags)["note"], "it's; DELETE FROM runs");
}

struct BadMysql {
  std::string url; // {port} is replaced
  std::string password;
  std::string needle;
};

void PrintTo(const BadMysql& b, std::ostream* os) {
  *os << b.url;
}

class MysqlErrors : public ::testing::TestWithParam<BadMysql> {};

TEST_P(MysqlErrors, ClearMessageNoCrashNoSpill) {
  static MariaDb db; // one server for all the error cases
  TempDir dir;
  std::string url = GetParam().url;
  if (auto p = url.find("{port}"); p != std::string::npos) url.replace(p, 6, std::to_string(db.port()));
  auto env = env_for(dir);
  env["WATTSCOPE_MYSQL_PASSWORD"] = GetParam().password;
  auto r = run({wstest::wattscope(), "run", "--db", url, "--", "true"}, env, dir.path());
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find(GetParam().needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("secret"), std::string::npos); // a password is never echoed
  EXPECT_FALSE(fs::exists(dir / "spill"));            // configuration errors are not outages
}

INSTANTIATE_TEST_SUITE_P(
    Cli, MysqlErrors,
    ::testing::Values(BadMysql{"mysql://ws@127.0.0.1:{port}/wattscope", "wrong", "Access denied"},
                      BadMysql{"mysql://ws@127.0.0.1:{port}/no_such_db", "secret", "CREATE DATABASE `no_such_db`"},
                      BadMysql{"mysql://ws:secret@127.0.0.1:{port}/wattscope", "", "does not belong in the URL"},
                      BadMysql{"mysql://127.0.0.1/wattscope", "secret", "no user"},
                      BadMysql{"mysql://ws@127.0.0.1:99999/wattscope", "secret", "bad port"},
                      BadMysql{"mysql://ws@127.0.0.1:{port}/", "secret", "no database"},
                      BadMysql{"mysql://ws@127.0.0.1:{port}/x;DROP", "secret", "letters, digits"},
                      BadMysql{"mysql://ws@127.0.0.1:{port}/wattscope?ssl=1", "secret", "?socket=PATH"}),
    [](const ::testing::TestParamInfo<BadMysql>& info) { return "case" + std::to_string(info.index); });

TEST(Mysql, ExportSqliteToMysqlToCsvLosesNothing) {
  MariaDb db;
  TempDir dir;
  for (const char* task : {"a", "b"})
    ASSERT_EQ(run({wstest::wattscope(), "run", "--task", task, "--interval", "50ms", "--", "sleep", "0.3"},
                  env_for(dir, true), dir.path())
                  .exit_code,
              0);
  const std::string sqlite = dir / "wattscope.db";
  auto e1 = run({wstest::wattscope(), "export", "--from", sqlite, "--to", db.url()}, env_for(dir), dir.path());
  ASSERT_EQ(e1.exit_code, 0) << e1.err;
  EXPECT_NE(e1.err.find("2 run(s)"), std::string::npos) << e1.err;
  auto e2 = run({wstest::wattscope(), "export", "--from", db.url(), "--to", "csv:" + (dir / "out")}, env_for(dir),
                dir.path());
  ASSERT_EQ(e2.exit_code, 0) << e2.err;
  setenv("WATTSCOPE_MYSQL_PASSWORD", "secret", 1);
  const auto a = dump_store(sqlite), b = dump_store(db.url()), c = dump_store("csv:" + (dir / "out"));
  EXPECT_GT(a.size(), 20u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(b, c);
  // Exporting into the same CSV directory again would duplicate rows: refused.
  auto again = run({wstest::wattscope(), "export", "--from", db.url(), "--to", "csv:" + (dir / "out")}, env_for(dir),
                   dir.path());
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("already exist"), std::string::npos) << again.err;
}
} // namespace e2e_mysql
