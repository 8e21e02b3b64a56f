// Issue 31, items 9, 10 and part of 15, through the real binary: `import nvidia-smi` refuses endless streams and
// logs of more GPUs than a machine has, places the repeated hour of a daylight-saving change by the order of the rows
// (analytic truth), refuses time going back and powers no GPU draws, keeps escape sequences out of names and out of
// `show`.
#include <gtest/gtest.h>

#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../support/support.hpp"

namespace unit_import_hardening {

using namespace wstest;
using wstest::wattscope;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string local_text(int64_t utc_s, int offset_s) {
  const time_t t = static_cast<time_t>(utc_s + offset_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}/{:02}/{:02} {:02}:{:02}:{:02}.000", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec);
}

void exec_sql(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "") << " in " << sql.substr(0, 200);
  sqlite3_free(err);
  sqlite3_close(h);
}

} // namespace

// 2026-10-25, Europe/Berlin: 03:00 CEST (01:00 UTC) becomes 02:00 CET. A 90-minute log at 10 s, 300 W, written in
// local time: truth 300 W x 5,390 s = 1,617,000 J from 23:50:00 UTC to 01:19:50 UTC (it was stored as 537 kJ over
// 3,590 s: the second pass of 02:xx read as the first).
TEST(ImportTime, TheRepeatedHourOfADaylightSavingChangeIsPlacedByRowOrder) {
  TempDir dir;
  const int64_t start_utc = 1792885800;  // 2026-10-24 23:50:00 UTC
  const int64_t switch_utc = 1792890000; // 2026-10-25 01:00:00 UTC
  ASSERT_EQ(local_text(start_utc, 7200), "2026/10/25 01:50:00.000");
  ASSERT_EQ(local_text(switch_utc, 3600), "2026/10/25 02:00:00.000");
  std::string log = "timestamp, index, power.draw [W]\n";
  for (int i = 0; i < 540; ++i) {
    const int64_t t = start_utc + 10 * i;
    log += local_text(t, t < switch_utc ? 7200 : 3600) + ", 0, 300.00 W\n";
  }
  write_file(dir / "berlin.csv", log);
  const Result r = run({wattscope(), "import", "nvidia-smi", dir / "berlin.csv", "--task", "dst"},
                       {{"TZ", "Europe/Berlin"}}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "wattscope.db";
  EXPECT_EQ(scalar(db, "SELECT start_ms FROM runs"), std::to_string(start_utc * 1000));
  EXPECT_EQ(scalar(db, "SELECT end_ms FROM runs"), std::to_string((start_utc + 5390) * 1000));
  EXPECT_NEAR(std::stod(scalar(db, "SELECT total_energy_j FROM runs")), 300.0 * 5390, 1e-6);
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM gpu_samples"), "540");
  // Said on stderr and kept with the run: 480 rows of 02:xx local time (360 before, 120 after the clocks went back).
  EXPECT_TRUE(contains(r.err, "480 row(s)") && contains(r.err, "120 in the repeated hour")) << r.err;
  EXPECT_TRUE(contains(scalar(db, "SELECT tags FROM runs"), "imported_repeated_hour")) << "the note is not stored";

  // The same instants written in UTC, with --utc, give the same run: nothing to resolve.
  std::string utc_log = "timestamp, index, power.draw [W]\n";
  for (int i = 0; i < 540; ++i)
    utc_log += local_text(start_utc + 10 * i, 0) + ", 0, 300.00 W\n";
  write_file(dir / "utc.csv", utc_log);
  TempDir other;
  const Result u = run({wattscope(), "import", "nvidia-smi", dir / "utc.csv", "--task", "dst", "--utc"},
                       {{"TZ", "Europe/Berlin"}}, other.path());
  ASSERT_EQ(u.exit_code, 0) << u.err;
  EXPECT_FALSE(contains(u.err, "occurs twice")) << u.err;
  EXPECT_NEAR(std::stod(scalar(other / "wattscope.db", "SELECT total_energy_j FROM runs")), 300.0 * 5390, 1e-6);
}

TEST(ImportTime, TimeGoingBackIsRefusedNamingTheLine) {
  TempDir dir;
  // The case: -2,704.5 J was stored for a log whose fourth row is earlier than the third.
  write_file(dir / "back.csv", "timestamp, power.draw [W]\n2026/01/01 10:00:00.000, 100 W\n"
                               "2026/01/01 10:00:10.000, 100 W\n2026/01/01 10:00:20.000, 100 W\n"
                               "2026/01/01 09:15:00.000, 100 W\n2026/01/01 09:15:10.000, 100 W\n");
  const Result r = run({wattscope(), "import", "nvidia-smi", dir / "back.csv", "--task", "b", "--utc"}, {}, dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "line 5: the time goes back 2720.000 s") && contains(r.err, "on line 4")) << r.err;
  EXPECT_NE(::access((dir / "wattscope.db").c_str(), F_OK), 0) << "a refused log leaves no store behind";
}

TEST(ImportBounds, EndlessStreamsAndTooManyGpusAreRefusedQuickly) {
  TempDir dir;
  auto timed = [&](const std::vector<std::string>& argv) {
    const auto t0 = std::chrono::steady_clock::now();
    Result r = run(argv, {}, dir.path());
    return std::make_pair(r, std::chrono::steady_clock::now() - t0);
  };
  // /dev/zero used to be read until memory ran out.
  auto [zero, zero_took] = timed({wattscope(), "import", "nvidia-smi", "/dev/zero", "--task", "z"});
  EXPECT_EQ(zero.exit_code, 1);
  EXPECT_TRUE(contains(zero.err, "NUL byte at offset 0")) << zero.err;
  EXPECT_LT(zero_took, 5s);
  // A stream of text without an end of line: refused at the line cap, not read on.
  const std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // The import stops reading long before the writer stops writing: its write then fails (EPIPE) rather than kill us.
  const auto old_pipe = ::signal(SIGPIPE, SIG_IGN);
  std::thread writer([&] {
    std::ofstream out(fifo);
    const std::string chunk(1 << 16, 'a');
    for (int i = 0; i < 1024 && out; ++i) // 64 MiB at most, if nobody stops reading
      out << chunk;
  });
  auto [endless, endless_took] = timed({wattscope(), "import", "nvidia-smi", fifo, "--task", "f"});
  writer.join();
  ::signal(SIGPIPE, old_pipe);
  EXPECT_EQ(endless.exit_code, 1);
  EXPECT_TRUE(contains(endless.err, "a line of more than 65536 bytes")) << endless.err;
  EXPECT_LT(endless_took, 5s);

  // 200,000 distinct uuids (15 MB) ran for over a minute at 817 MiB: refused at the 1,025th.
  std::string log = "timestamp, uuid, power.draw [W]\n";
  for (int i = 0; i < 200000; ++i)
    log += fmt::format("2026/01/01 10:00:00.000, GPU-{:08x}-0000-0000-0000-000000000000, 100 W\n", i);
  write_file(dir / "many.csv", log);
  auto [many, many_took] = timed({wattscope(), "import", "nvidia-smi", dir / "many.csv", "--task", "m", "--utc"});
  EXPECT_EQ(many.exit_code, 1);
  EXPECT_TRUE(contains(many.err, "line 1026: more than 1024 distinct GPUs")) << many.err;
  EXPECT_LT(many_took, 10s);
  EXPECT_NE(::access((dir / "wattscope.db").c_str(), F_OK), 0);
}

TEST(ImportBounds, ValuesBeyondAnyGpuAreRefusedNeverStoredAsInf) {
  TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {"1e308 W", "'1e308 W' is out of range"}, // stored inf J before
      {"-250 W", "'-250 W' is not a GPU's power"},
      {"150 kW", "'150 kW' is not a GPU's power"},
  };
  for (const auto& [value, message] : cases) {
    write_file(dir / "big.csv", "timestamp, power.draw [W]\n2026/01/01 10:00:00.000, 100 W\n"
                                "2026/01/01 10:00:01.000, " +
                                    value + "\n");
    const Result r =
        run({wattscope(), "import", "nvidia-smi", dir / "big.csv", "--task", "x", "--utc"}, {}, dir.path());
    EXPECT_EQ(r.exit_code, 1) << value;
    EXPECT_TRUE(contains(r.err, "line 3: column 'power.draw [W]': " + message)) << r.err;
  }
  write_file(dir / "mem.csv", "timestamp, memory.used [MiB]\n2026/01/01 10:00:00.000, 1e300 MiB\n");
  const Result m = run({wattscope(), "import", "nvidia-smi", dir / "mem.csv", "--task", "x", "--utc"}, {}, dir.path());
  EXPECT_EQ(m.exit_code, 1);
  EXPECT_TRUE(contains(m.err, "is out of range")) << m.err;
  EXPECT_NE(::access((dir / "wattscope.db").c_str(), F_OK), 0);
}

TEST(ImportNames, EscapeSequencesNeverReachTheTerminalThroughShow) {
  TempDir dir;
  write_file(dir / "esc.csv", "timestamp, index, name, power.draw [W]\n"
                              "2026/01/01 10:00:00.000, 0, NVIDIA \x1b]0;pwned\x07H100\x1b[2J, 100 W\n"
                              "2026/01/01 10:00:01.000, 0, NVIDIA \x1b]0;pwned\x07H100\x1b[2J, 100 W\n");
  Result r = run({wattscope(), "import", "nvidia-smi", dir / "esc.csv", "--task", "esc", "--utc"}, {}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "wattscope.db";
  EXPECT_EQ(scalar(db, "SELECT name FROM gpu_devices"), "NVIDIA ?]0;pwned?H100?[2J");
  r = run({wattscope(), "show", "--db", db}, {}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "NVIDIA ?]0;pwned?H100?[2J")) << r.out;
  // A store written by something else (an older wattscope, another tool): show cleans what it prints, C1 controls
  // (CSI as U+009B) included; UTF-8 text stays.
  exec_sql(db, "UPDATE runs SET summary = replace(summary, 'NVIDIA', 'NVIDIA\\u001b[31m\\u009b2J°')");
  r = run({wattscope(), "show", "--db", db}, {}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.out, "\x1b")) << r.out;
  EXPECT_FALSE(contains(r.out, "\xc2\x9b")) << r.out;
  EXPECT_TRUE(contains(r.out, "NVIDIA?[31m?2J°")) << r.out;
}

} // namespace unit_import_hardening
