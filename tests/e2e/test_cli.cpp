// The real wattscope binary, real child processes, real SQLite and CSV files.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "cli/command.hpp"

namespace e2e_cli { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {
// No NVML in these tests: the CPU path alone, whatever the machine has.
const std::map<std::string, std::string> kNoGpu = {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}};

std::vector<std::string> ws(std::vector<std::string> args) {
  args.insert(args.begin(), wstest::wattscope());
  return args;
}
} // namespace

TEST(Run, SleepTwoSecondsAt100msStoresAboutTwentyRows) {
  TempDir dir;
  auto r = run(ws({"run", "--task", "t", "--interval", "100ms", "--", "sleep", "2"}), kNoGpu, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "wattscope.db";
  auto n = std::stoi(scalar(db, "SELECT count(*) FROM cpu_samples c JOIN runs r USING (run_id) WHERE r.task='t'"));
  EXPECT_GE(n, 19);
  EXPECT_LE(n, 22); // 20 grid ticks (one more or less by the start's timing) and the last sample, at the run's end
  EXPECT_EQ(scalar(db, "SELECT samples FROM runs"), std::to_string(n));
  EXPECT_EQ(scalar(db, "SELECT exit_status FROM runs"), "0");
  EXPECT_EQ(scalar(db, "SELECT command FROM runs"), "sleep 2");
  // Timestamps 100 ms apart on the grid (ms rounding and scheduling jitter allowed), then the last sample at the
  // run's end, at most one interval after the last grid tick.
  auto rows = query(db, "SELECT ts_ms FROM cpu_samples ORDER BY tick");
  ASSERT_GE(rows.size(), 3u);
  const int64_t first = std::stoll(*rows.front()[0]), last = std::stoll(*rows[rows.size() - 2][0]);
  EXPECT_NEAR(static_cast<double>(last - first), 100.0 * (static_cast<double>(rows.size()) - 2), 60.0);
  EXPECT_LE(std::stoll(*rows.back()[0]) - last, 160);
  EXPECT_NE(r.err.find("samples every 100ms"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no NVIDIA GPU"), std::string::npos) << r.err;
  // Per-core rows every 5 s, as record stores them, though run scans its processes every second: one set here.
  EXPECT_EQ(scalar(db, "SELECT COUNT(DISTINCT tick) FROM cpu_core_samples"), "1");
}

TEST(Run, ExitStatusIsTheChilds) {
  TempDir dir;
  EXPECT_EQ(run(ws({"run", "--", "sh", "-c", "exit 3"}), kNoGpu, dir.path()).exit_code, 3);
  EXPECT_EQ(run(ws({"run", "--", "sh", "-c", "kill -TERM $$"}), kNoGpu, dir.path()).exit_code, 128 + SIGTERM);
  EXPECT_EQ(run(ws({"run", "--", "sh", "-c", "kill -KILL $$"}), kNoGpu, dir.path()).exit_code, 128 + SIGKILL);
  auto nf = run(ws({"run", "--", "no-such-command-xyz"}), kNoGpu, dir.path());
  EXPECT_EQ(nf.exit_code, 127);
  EXPECT_NE(nf.err.find("command not found: 'no-such-command-xyz'"), std::string::npos) << nf.err;
  write_file(dir / "noexec.sh", "#!/bin/sh\n");
  EXPECT_EQ(run(ws({"run", "--", dir / "noexec.sh"}), kNoGpu, dir.path()).exit_code, 126);
  // The statuses are stored with the runs.
  auto st = query(dir / "wattscope.db", "SELECT exit_status FROM runs ORDER BY start_ms");
  ASSERT_EQ(st.size(), 3u); // not-found and not-executable commands make no run
  EXPECT_EQ(*st[0][0], "3");
  EXPECT_EQ(*st[1][0], "143");
  EXPECT_EQ(*st[2][0], "137");
}

TEST(Run, CommandArgumentsAreNotTakenForOptions) {
  TempDir dir;
  auto r = run(ws({"run", "--task", "x", "--", "sh", "-c", "test \"$1\" = --interval", "sh", "--interval"}), kNoGpu,
               dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Without --, the first non-option word starts the command.
  auto r2 = run(ws({"run", "sh", "-c", "exit 4", "--help"}), kNoGpu, dir.path());
  EXPECT_EQ(r2.exit_code, 4) << r2.err;
  EXPECT_EQ(scalar(dir / "wattscope.db", "SELECT task FROM runs ORDER BY start_ms DESC LIMIT 1"), "sh");
}

TEST(Run, ForwardsSigtermAndFinalisesTheRun) {
  TempDir dir;
  // The child records that it got SIGTERM, then exits 42 itself: we see both the forwarding and the status.
  const std::string script = "trap 'echo got-term > " + (dir / "term") + "; exit 42' TERM; sleep 30 & wait";
  int pid = start(ws({"run", "--interval", "50ms", "--commit-every", "1000", "--", "sh", "-c", script}), kNoGpu,
                  dir.path(), dir / "out", dir / "err");
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 42) << read_file(dir / "err");
  EXPECT_EQ(read_file(dir / "term"), "got-term\n");
  const std::string db = dir / "wattscope.db";
  EXPECT_EQ(scalar(db, "SELECT exit_status FROM runs"), "42");
  EXPECT_NE(scalar(db, "SELECT end_ms FROM runs"), "");
  // Every sample taken was flushed, although the commit threshold (1000 rows) was never reached.
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM cpu_samples"), scalar(db, "SELECT samples FROM runs"));
  EXPECT_GE(std::stoi(scalar(db, "SELECT samples FROM runs")), 8);
}

TEST(Run, ChildKilledBySignalForwarded) {
  TempDir dir;
  int pid =
      start(ws({"run", "--interval", "100ms", "--", "sleep", "30"}), kNoGpu, dir.path(), dir / "out", dir / "err");
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid), 128 + SIGINT);
  EXPECT_EQ(scalar(dir / "wattscope.db", "SELECT exit_status FROM runs"), "130");
}

TEST(Run, CsvAndSqliteCopiesHoldTheSameRows) {
  TempDir dir;
  auto r = run(
      ws({"run", "--task", "both", "--interval", "50ms", "--db", "wattscope.db", "--csv", "out", "--", "sleep", "0.5"}),
      kNoGpu, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "wattscope.db";
  std::string csv_file;
  for (const auto& e : std::filesystem::directory_iterator(dir / "out"))
    if (e.path().filename().string().ends_with("_cpu_samples.csv")) csv_file = e.path().string();
  ASSERT_FALSE(csv_file.empty());
  EXPECT_EQ(std::filesystem::path(csv_file).filename().string().rfind("both_2", 0), 0u);
  // Same rows: import the CSV into a scratch table and compare with EXCEPT both ways.
  run({"/usr/bin/sqlite3", db, ".mode csv", ".import " + csv_file + " csv_cpu"});
  const std::string cols = "run_id, tick, ts_ms, util_pct, mem_used_bytes, mem_total_bytes";
  const std::string a = "SELECT " + cols + " FROM cpu_samples";
  const std::string b = "SELECT run_id, CAST(tick AS INTEGER), CAST(ts_ms AS INTEGER), "
                        "CASE util_pct WHEN '' THEN NULL ELSE CAST(util_pct AS REAL) END, "
                        "CAST(mem_used_bytes AS INTEGER), CAST(mem_total_bytes AS INTEGER) FROM csv_cpu";
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM (" + a + " EXCEPT " + b + ")"), "0");
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM (" + b + " EXCEPT " + a + ")"), "0");
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM csv_cpu"), scalar(db, "SELECT count(*) FROM cpu_samples"));
  // list/show read the CSV directory as a store too.
  auto shown = run(ws({"show", "--csv", "out", "--json"}), {}, dir.path());
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(json::parse(shown.out)["samples"], std::stoi(scalar(db, "SELECT count(*) FROM cpu_samples")));
}

TEST(Run, NoDbWithCsvOnly) {
  TempDir dir;
  auto r = run(ws({"run", "--no-db", "--csv", "c", "--", "true"}), kNoGpu, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "wattscope.db"));
  EXPECT_TRUE(std::filesystem::is_directory(dir / "c"));
  // --csv alone writes CSV alone; and a directory given to --db is read as the CSV store it is.
  auto csv_only = run(ws({"run", "--csv", "d", "--", "true"}), kNoGpu, dir.path());
  EXPECT_EQ(csv_only.exit_code, 0) << csv_only.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "wattscope.db"));
  auto shown = run(ws({"show", "--db", "d", "--json"}), {}, dir.path());
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(json::parse(shown.out)["exit_status"], 0);
  // Writing SQLite into a directory says what to pass, not "disk I/O error".
  auto into_dir = run(ws({"run", "--db", "d", "--", "true"}), kNoGpu, dir.path());
  EXPECT_EQ(into_dir.exit_code, 125);
  EXPECT_NE(into_dir.err.find("'d' is a directory"), std::string::npos) << into_dir.err;
  EXPECT_NE(into_dir.err.find("--csv d"), std::string::npos) << into_dir.err;
}

TEST(Show, JsonReportsWhatTheRunDid) {
  TempDir dir;
  ASSERT_EQ(run(ws({"run", "--task", "first", "--", "true"}), kNoGpu, dir.path()).exit_code, 0);
  ASSERT_EQ(run(ws({"run", "--task", "second", "--interval", "100ms", "--tag", "lr=3e-4", "--", "sh", "-c",
                    "sleep 0.35; exit 5"}),
                kNoGpu, dir.path())
                .exit_code,
            5);
  auto r = run(ws({"show", "--json"}), {}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = json::parse(r.out);
  for (const char* key : {"run_id", "task", "command", "host", "start", "end", "duration_s", "exit_status", "samples",
                          "interval_s", "gpus", "total_energy_j", "cpu"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["task"], "second");
  EXPECT_EQ(j["exit_status"], 5);
  EXPECT_EQ(j["interval_s"], 0.1);
  EXPECT_EQ(j["command"], "sh -c 'sleep 0.35; exit 5'");
  EXPECT_GE(j["samples"].get<int>(), 3);
  EXPECT_LE(j["samples"].get<int>(), 6);
  EXPECT_GT(j["duration_s"].get<double>(), 0.3);
  EXPECT_TRUE(j["total_energy_j"].is_null()); // nothing measured energy here: null, not 0
  EXPECT_EQ(j["tags"]["lr"], "3e-4");
  EXPECT_TRUE(j["end"].get<std::string>().ends_with("Z"));
  // By id prefix, and the list.
  auto first_id = json::parse(run(ws({"list", "--json"}), {}, dir.path()).out)[0]["run_id"].get<std::string>();
  auto by_id = json::parse(run(ws({"show", first_id.substr(0, 20), "--json"}), {}, dir.path()).out);
  EXPECT_EQ(by_id["task"], "first");
  auto text = run(ws({"list"}), {}, dir.path());
  EXPECT_NE(text.out.find("second"), std::string::npos);
  auto missing = run(ws({"show", "nope"}), {}, dir.path());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("no run 'nope'"), std::string::npos) << missing.err;
}

TEST(Record, ForADuration) {
  TempDir dir;
  auto r = run(ws({"record", "--task", "idle", "--duration", "500ms", "--interval", "100ms"}), kNoGpu, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto n = std::stoi(scalar(dir / "wattscope.db", "SELECT count(*) FROM cpu_samples"));
  EXPECT_GE(n, 4);
  EXPECT_LE(n, 7);
  EXPECT_EQ(scalar(dir / "wattscope.db", "SELECT task FROM runs"), "idle");
}

TEST(Record, UntilSigterm) {
  TempDir dir;
  int pid = start(ws({"record", "--interval", "100ms"}), kNoGpu, dir.path(), dir / "out", dir / "err");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
  const std::string db = dir / "wattscope.db";
  EXPECT_EQ(scalar(db, "SELECT exit_status FROM runs"), "143");
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM cpu_samples"), scalar(db, "SELECT samples FROM runs"));
}

struct BadInput {
  std::vector<std::string> args;
  std::string needle;
};
void PrintTo(const BadInput& b, std::ostream* os) {
  for (const auto& a : b.args)
    *os << (a.size() > 20 ? a.substr(0, 20) + "..." : a) << ' ';
}

class Errors : public ::testing::TestWithParam<BadInput> {};

TEST_P(Errors, OneClearLineAndNonZeroExit) {
  TempDir dir;
  auto r = run(ws(GetParam().args), kNoGpu, dir.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(GetParam().needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Aborted"), std::string::npos);
  // No run was left half-written.
  if (std::filesystem::exists(dir / "wattscope.db")) {
    EXPECT_EQ(scalar(dir / "wattscope.db", "SELECT count(*) FROM runs WHERE end_ms IS NULL"), "0");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cli, Errors,
    ::testing::Values(BadInput{{"run", "--bogus", "--", "true"}, "--bogus"},
                      BadInput{{"run", "--interval", "abc", "--", "true"}, "--interval: 'abc'"},
                      BadInput{{"run", "--interval", "0", "--", "true"}, "--interval: '0'"},
                      BadInput{{"run", "--interval", "-5ms", "--", "true"}, "--interval: '-5ms'"},
                      BadInput{{"run", "--interval", "1ns", "--", "true"}, "minimum"},
                      BadInput{{"run", "--db", "/nonexistent/dir/w.db", "--", "true"}, "cannot open SQLite"},
                      BadInput{{"run", "--task", std::string(200, 'x'), "--", "true"}, "limit is 128 bytes"},
                      BadInput{{"run", "--task", "a\x1b[31mred", "--", "true"}, "control character"},
                      BadInput{{"run"}, "no command to run"}, BadInput{{"run", "--"}, "no command to run"},
                      BadInput{{"run", "--commit-every", "sometimes", "--", "true"}, "--commit-every"},
                      BadInput{{"run", "--tag", "novalue", "--", "true"}, "KEY=VALUE"},
                      BadInput{{"run", "--no-db", "--", "true"}, "would store nothing"},
                      BadInput{{"run", "--db", "mysql://u@h/db", "--", "true"}, "MySQL"},
                      BadInput{{"run", "--gpus", "first", "--", "true"}, "--gpus"},
                      BadInput{{"record", "--duration", "forever"}, "--duration"},
                      BadInput{{"show", "--db", "/nonexistent.db"}, "no database"},
                      BadInput{{"frobnicate"}, "unknown command 'frobnicate'"}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return "case" + std::to_string(info.index); });

// Every command in the command table (the one list the binary dispatches from) teaches with an example, and the
// top-level help lists it.
TEST(Help, EveryCommandTeachesWithAnExample) {
  auto top = run(ws({"--help"}));
  EXPECT_EQ(top.exit_code, 0);
  ASSERT_GE(wattscope::command_table().size(), 8u);
  for (const auto& c : wattscope::command_table()) {
    const std::string cmd(c.name);
    auto r = run(ws({cmd, "--help"}));
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find("Example"), std::string::npos) << cmd << ": " << r.out;
    EXPECT_NE(top.out.find(cmd), std::string::npos) << cmd << " missing from wattscope --help";
  }
  EXPECT_NE(top.out.find("wattscope run --task"), std::string::npos);
  EXPECT_EQ(run(ws({"--version"})).exit_code, 0);
}

TEST(Report, WrittenByRunAndFromStores) {
  TempDir dir;
  auto r = run(ws({"run", "--task", "rep", "--interval", "50ms", "--csv", "csv", "--report", "--", "sleep", "0.3"}),
               kNoGpu, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto at = r.err.find("report    ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string path = r.err.substr(at + 10, r.err.find('\n', at) - at - 10);
  EXPECT_TRUE(path.rfind("wattscope-report-rep-", 0) == 0) << path;
  const std::string html = read_file(dir / path);
  EXPECT_GT(html.size(), 1'000'000u);                                // plotly.js is inside
  EXPECT_EQ(html.find("/*__WATTSCOPE_DATA__*/"), std::string::npos); // the data went in
  EXPECT_NE(html.find("\"task\":\"rep\""), std::string::npos);
  // From the CSV directory, and from one of its files.
  EXPECT_EQ(run(ws({"report", "--csv", "csv", "-o", "a.html"}), {}, dir.path()).exit_code, 0);
  std::string one;
  for (const auto& e : std::filesystem::directory_iterator(dir / "csv"))
    if (e.path().string().ends_with("_cpu_samples.csv")) one = e.path().string();
  auto from_file = run(ws({"report", "--csv", one, "-o", "b.html"}), {}, dir.path());
  EXPECT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_NE(read_file(dir / "b.html").find("\"task\":\"rep\""), std::string::npos);
}

TEST(Report, BadInputGetsAClearMessage) {
  TempDir dir;
  ASSERT_EQ(run(ws({"run", "--db", "wattscope.db", "--csv", "csv", "--", "true"}), kNoGpu, dir.path()).exit_code, 0);
  auto unknown = run(ws({"report", "nope", "-o", "x.html"}), {}, dir.path());
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("no run 'nope'"), std::string::npos) << unknown.err;
  auto no_out = run(ws({"report"}), {}, dir.path());
  EXPECT_NE(no_out.exit_code, 0);
  EXPECT_NE(no_out.err.find("--output"), std::string::npos) << no_out.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "x.html"));
  // A CSV file with a missing column, and one with a broken row: the file and line are named.
  std::string cpu;
  for (const auto& e : std::filesystem::directory_iterator(dir / "csv"))
    if (e.path().string().ends_with("_cpu_samples.csv")) cpu = e.path().string();
  const std::string good = read_file(cpu);
  write_file(cpu, good.substr(good.find(',') + 1)); // header and rows lose their first column
  auto missing = run(ws({"report", "--csv", "csv", "-o", "y.html"}), {}, dir.path());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("column 'run_id' is missing"), std::string::npos) << missing.err;
  write_file(cpu, good + "broken,row\n");
  auto broken = run(ws({"report", "--csv", "csv", "-o", "y.html"}), {}, dir.path());
  EXPECT_NE(broken.exit_code, 0);
  const auto lines = std::count(good.begin(), good.end(), '\n'); // the header and the run's samples
  EXPECT_NE(broken.err.find("_cpu_samples.csv:" + std::to_string(lines + 1) + ":"), std::string::npos) << broken.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "y.html"));
  auto not_ws = run(ws({"report", "--csv", dir / "csv/nothing.txt", "-o", "z.html"}), {}, dir.path());
  EXPECT_NE(not_ws.exit_code, 0);
}
// The run's own processes' energy beside the devices' total: in show --json, show's text, stats and the work's J per
// unit, each labelled. A sysfs without RAPL makes the CPU an estimate (--cpu-tdp), so its method is known exactly.
TEST(Run, TheRunsOwnEnergyStandsBesideTheDevicesTotal) {
  TempDir dir;
  std::filesystem::create_directories(dir / "sys");
  // -q after the command's name: the global flag is taken there too.
  auto r = run(
      ws({"run", "-q", "--task", "mine", "--interval", "100ms", "--cpu-tdp", "100", "--sysfs-root", dir / "sys", "--",
          "sh", "-c", "timeout 1.6 sh -c 'while :; do :; done'; \"$0\" mark work 64 --unit samples", wattscope()}),
      kNoGpu, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("wattscope: run "), std::string::npos) << "-q prints no summary: " << r.err;
  auto shown = run(ws({"show", "--json"}), {}, dir.path());
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  const json j = json::parse(shown.out);
  ASSERT_TRUE(j["attribution"].is_object()) << j.dump(2);
  double sum = 0;
  for (const auto& [name, d] : j["attribution"]["devices"].items())
    sum += d["attributed_j"].get<double>();
  ASSERT_TRUE(j["attributed_energy_j"].is_number()) << j.dump(2);
  EXPECT_NEAR(j["attributed_energy_j"].get<double>(), sum, 1e-9);
  EXPECT_GT(sum, 0);
  EXPECT_LE(sum, j["total_energy_j"].get<double>() + 1e-9);
  EXPECT_EQ(j["attributed_energy_method"], "attributed (estimated)");
  EXPECT_EQ(j["energy_method"], "estimated");
  // The work's J per unit, of the devices and of the run's own processes.
  EXPECT_NEAR(j["work"]["energy_per_unit_j"]["samples"].get<double>(), j["total_energy_j"].get<double>() / 64, 1e-9);
  EXPECT_NEAR(j["work"]["attributed_energy_per_unit_j"]["samples"].get<double>(), sum / 64, 1e-9);
  auto text = run(ws({"show"}), {}, dir.path());
  EXPECT_NE(text.out.find("your processes: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("[attributed (estimated)]"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("J/sample [attributed (estimated)]"), std::string::npos) << text.out;
  auto stats = run(ws({"stats", j["run_id"].get<std::string>(), "--json"}), {}, dir.path());
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  const json m = json::parse(stats.out)["metrics"];
  EXPECT_NEAR(m["attributed_energy_j"]["mean"].get<double>(), sum, 1e-9) << m.dump(2);
  EXPECT_EQ(m["attributed_energy_j"]["energy_method"], "attributed (estimated)");
  EXPECT_EQ(m["work.samples.attributed_energy_per_unit_j"]["energy_method"], "attributed (estimated)");
}

TEST(Report, SeveralTasksCompared) {
  TempDir dir;
  for (const char* task : {"alpha", "beta", "gamma"})
    ASSERT_EQ(run(ws({"run", "--task", task, "--interval", "100ms", "--", "true"}), kNoGpu, dir.path()).exit_code, 0);
  auto r = run(ws({"report", "--task", "alpha", "--task", "beta", "-o", "r.html"}), {}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("report of 2 run(s)"), std::string::npos) << r.err;
  const std::string html = read_file(dir / "r.html");
  EXPECT_NE(html.find("\"task\":\"alpha\""), std::string::npos);
  EXPECT_NE(html.find("\"task\":\"beta\""), std::string::npos);
  EXPECT_EQ(html.find("\"task\":\"gamma\""), std::string::npos);
  auto none = run(ws({"report", "--task", "alpha", "--task", "nope", "-o", "n.html"}), {}, dir.path());
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("of task nope"), std::string::npos) << none.err;
}
} // namespace e2e_cli
