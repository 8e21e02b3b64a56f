// The file-writing policy (core/output_file), the move-only descriptor (core/fd.hpp), and the stores on a disk that
// fills up and frees again: a batch reaches a store whole or not at all.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <type_traits>

#include "../support/fifo_reader.hpp"
#include "../support/support.hpp"
#include "../support/tmpfs.hpp"
#include "core/fd.hpp"
#include "core/output_file.hpp"
#include "core/schema.hpp"
#include "report/report.hpp"
#include "sinks/csv/csv_store.hpp"
#include "sinks/sqlite/sqlite_store.hpp"

namespace unit_output_file { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
namespace fs = std::filesystem;

namespace {

bool fd_open(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

} // namespace

// ---- UniqueFd ----

static_assert(!std::is_copy_constructible_v<UniqueFd> && !std::is_copy_assignable_v<UniqueFd>);
static_assert(std::is_nothrow_move_constructible_v<UniqueFd> && std::is_nothrow_move_assignable_v<UniqueFd>);

TEST(UniqueFd, ClosesOnceWhenTheLastOwnerGoes) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ::close(p[1]);
  {
    UniqueFd a(p[0]);
    EXPECT_TRUE(a.valid());
    UniqueFd b(std::move(a));
    EXPECT_FALSE(a.valid()); // NOLINT(bugprone-use-after-move): the moved-from state is the point
    EXPECT_EQ(a.get(), -1);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(b.get(), p[0]);
    {
      UniqueFd c;
      c = std::move(b);
      EXPECT_TRUE(fd_open(p[0])); // moving did not close it
    }
    EXPECT_FALSE(fd_open(p[0])); // c, the last owner, closed it
  }
}

TEST(UniqueFd, MoveAssignClosesWhatWasHeldAndSelfMoveKeepsIt) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd r(p[0]), w(p[1]);
  r = std::move(w);
  EXPECT_FALSE(fd_open(p[0]));
  EXPECT_EQ(r.get(), p[1]);
  UniqueFd& same = r;
  r = std::move(same);
  EXPECT_EQ(r.get(), p[1]);
  EXPECT_TRUE(fd_open(p[1]));
}

TEST(UniqueFd, ReleaseGivesUpResetReplacesCloseReports) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  int released = -1;
  {
    UniqueFd a(p[0]);
    released = a.release();
    EXPECT_FALSE(a);
  }
  EXPECT_TRUE(fd_open(released)); // released, so not closed by a
  UniqueFd b(released);
  b.reset(p[1]);
  EXPECT_FALSE(fd_open(p[0]));
  EXPECT_EQ(b.close(), 0);
  EXPECT_FALSE(fd_open(p[1]));
  EXPECT_EQ(b.close(), 0); // nothing held: nothing closed twice
  EXPECT_EQ(UniqueFd(12345).close(), EBADF);
}

// ---- OutputFile ----

TEST(OutputFile, NewFileAppearsWholeOnCommitOnly) {
  wstest::TempDir dir;
  const std::string target = dir / "r.html";
  {
    OutputFile out(target);
    EXPECT_EQ(out.kind(), OutputFile::Kind::Replace);
    out.write("hello ");
    out.write("world");
    EXPECT_FALSE(fs::exists(target));
    // The temporary: hidden, beside the target, with an unpredictable name.
    auto names = names_in(dir.path());
    ASSERT_EQ(names.size(), 1u);
    EXPECT_EQ(names[0].rfind(".r.html.", 0), 0u) << names[0];
    EXPECT_NE(names[0], ".r.html.tmp");
    out.commit();
  }
  EXPECT_EQ(wstest::read_file(target), "hello world");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"r.html"});
  const mode_t mask = ::umask(022);
  ::umask(mask);
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
}

TEST(OutputFile, TwoTemporariesNeverShareAName) {
  wstest::TempDir dir;
  OutputFile a(dir / "r.html"), b(dir / "r.html");
  EXPECT_EQ(names_in(dir.path()).size(), 2u);
}

TEST(OutputFile, ReplacedFileKeepsItsModeAndAnAbortLeavesItAlone) {
  wstest::TempDir dir;
  const std::string target = dir / "r.html";
  wstest::write_file(target, "old");
  ::chmod(target.c_str(), 0640);
  {
    OutputFile out(target);
    out.write("new, never committed");
  } // destroyed without commit
  EXPECT_EQ(wstest::read_file(target), "old");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"r.html"});
  write_output(target, "new");
  EXPECT_EQ(wstest::read_file(target), "new");
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

TEST(OutputFile, CharacterDeviceIsWrittenInPlaceNeverReplaced) {
  wstest::TempDir dir;
  // Our own null device, in our own directory: the system's /dev/null is never touched by a test.
  const std::string dev = dir / "null";
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod needs root";
  if (UniqueFd probe(::open(dev.c_str(), O_WRONLY | O_CLOEXEC)); !probe)
    GTEST_SKIP() << "device nodes cannot be opened here (nodev?)";
  write_output(dev, std::string(1 << 20, 'x'));
  struct stat st {};
  ASSERT_EQ(::lstat(dev.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(1, 3));
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"null"}); // no temporary left either
}

TEST(OutputFile, FifoIsWrittenInPlace) {
  wstest::TempDir dir;
  const std::string fifo = dir / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  wstest::FifoReader reader(fifo);
  ASSERT_TRUE(reader.ok());
  const std::string body(300000, 'y'); // more than a pipe holds: the writer must wait for the reader
  write_output(fifo, body);
  const std::string got = reader.finish();
  EXPECT_EQ(got, body);
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(OutputFile, SymlinkIsRefusedNamingItUnlessFollowingIsAsked) {
  wstest::TempDir dir;
  wstest::write_file(dir / "real.html", "real");
  fs::create_symlink("real.html", dir / "link.html");
  const std::string msg = what_of([&] { write_output(dir / "link.html", "through the link"); });
  EXPECT_NE(msg.find("link.html"), std::string::npos) << msg;
  EXPECT_NE(msg.find("symbolic link to 'real.html'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir / "real.html"), std::string::npos) << msg; // the path to give instead
  EXPECT_EQ(wstest::read_file(dir / "real.html"), "real");
  EXPECT_TRUE(fs::is_symlink(dir / "link.html"));

  OutputOptions follow;
  follow.follow_symlinks = true;
  write_output(dir / "link.html", "through the link", follow);
  EXPECT_EQ(wstest::read_file(dir / "real.html"), "through the link");
  EXPECT_TRUE(fs::is_symlink(dir / "link.html")); // the link stays a link
  EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"link.html", "real.html"}));

  // A dangling link, followed, creates its target; a loop is an error, not a hang.
  fs::create_symlink("sub/new.html", dir / "dangling");
  fs::create_directory(dir / "sub");
  write_output(dir / "dangling", "made", follow);
  EXPECT_EQ(wstest::read_file(dir / "sub/new.html"), "made");
  fs::create_symlink("loop", dir / "loop");
  EXPECT_NE(what_of([&] { write_output(dir / "loop", "x", follow); }).find("symbolic links"), std::string::npos);
}

TEST(OutputFile, PlantedLinkAtTheOldTemporaryNameIsNotFollowed) {
  wstest::TempDir dir;
  wstest::write_file(dir / "victim", "precious");
  fs::create_symlink(dir / "victim", dir / "r.html.tmp"); // the name the old code wrote to, predictably
  write_output(dir / "r.html", "report");
  EXPECT_EQ(wstest::read_file(dir / "victim"), "precious");
  EXPECT_EQ(wstest::read_file(dir / "r.html"), "report");
  EXPECT_TRUE(fs::is_symlink(dir / "r.html.tmp"));
}

TEST(OutputFile, WhatCannotBeWrittenSaysWhy) {
  wstest::TempDir dir;
  fs::create_directory(dir / "d");
  EXPECT_NE(what_of([&] { write_output(dir / "d", "x"); }).find("is a directory"), std::string::npos);
  EXPECT_NE(what_of([&] { write_output(dir / "d/", "x"); }).find("directory"), std::string::npos);
  const std::string missing = what_of([&] { write_output(dir / "no/such/r.html", "x"); });
  EXPECT_NE(missing.find("no/such/r.html"), std::string::npos) << missing;
  EXPECT_NE(missing.find("No such file or directory"), std::string::npos) << missing;
  EXPECT_NE(what_of([&] { write_output("", "x"); }).find("empty name"), std::string::npos);
  EXPECT_TRUE(fs::is_directory(dir / "d"));
}

TEST(OutputFile, FullDiskLeavesTheOldFileAndNoTemporary) {
  wstest::TempDir dir;
  wstest::TmpfsMount mnt(dir / "mnt", 64);
  if (!mnt.ok()) GTEST_SKIP() << mnt.why();
  write_output(mnt.path() + "/r.html", "old");
  const std::string msg = what_of([&] { write_output(mnt.path() + "/r.html", std::string(200 << 10, 'x')); });
  EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
  EXPECT_EQ(wstest::read_file(mnt.path() + "/r.html"), "old");
  EXPECT_EQ(names_in(mnt.path()), std::vector<std::string>{"r.html"});
}

// ---- stores on a disk that fills and frees ----

namespace {

std::vector<GpuDevice> gpus() {
  std::vector<GpuDevice> out;
  for (int i = 0; i < 2; ++i) {
    GpuDevice d;
    d.gpu_index = i;
    d.vendor = "nvidia";
    d.uuid = "GPU-" + std::to_string(i);
    d.name = "NVIDIA H100";
    d.energy_method = "counter";
    out.push_back(d);
  }
  return out;
}

Frame frame(int64_t tick, const std::vector<GpuDevice>& devs) {
  Frame f;
  f.tick = tick;
  f.ts_ms = 1795262609833 + tick * 100;
  f.cpu.util_pct = 12.5 + static_cast<double>(tick);
  f.cpu.core_util_pct = {OptF(100.0), OptF(3.25), std::nullopt, OptF(50.0)};
  f.cpu.mem_used_bytes = 1000 + tick;
  f.cpu.mem_total_bytes = 5000;
  if (tick == 0) f.device_rows = devs;
  for (int g = 0; g < 2; ++g) {
    GpuSample s;
    s.gpu_index = g;
    s.power_w = 100.0 * g + static_cast<double>(tick) / 7.0;
    s.energy_j = 1e-3 * static_cast<double>(tick);
    s.util_gpu_pct = 50.0;
    f.gpus.push_back(s);
  }
  if (tick % 10 == 0) f.events.push_back({tick, f.ts_ms, "marker", "test", "tick " + std::to_string(tick) + ", \"q\""});
  return f;
}

// Writes `batches` batches of `per_batch` ticks; after `fill_after` batches the disk is filled, two writes are tried
// (they must fail), the disk is freed and the same batch is written again, as the sink writer does.
void fill_and_free(Sink& sink, const wstest::TmpfsMount& mnt, RunInfo& run, int batches, int per_batch,
                   int fill_after) {
  const auto devs = gpus();
  sink.begin_run(run);
  int failures = 0;
  for (int b = 0; b < batches; ++b) {
    RowBatch batch;
    for (int t = b * per_batch; t < (b + 1) * per_batch; ++t)
      append_frame_rows(run.run_id, frame(t, devs), batch);
    if (b == fill_after) {
      ASSERT_GT(mnt.fill("filler"), 0u);
      for (int attempt = 0; attempt < 2; ++attempt) {
        try {
          sink.write(batch);
        } catch (const std::exception&) {
          ++failures;
        }
      }
      mnt.unfill("filler");
    }
    try {
      sink.write(batch);
    } catch (const std::exception& e) {
      FAIL() << "batch " << b << (b >= fill_after ? ", after the disk was freed" : "") << ": " << e.what();
    }
  }
  EXPECT_EQ(failures, 2) << "the filled disk took the batch: the test proves nothing";
  run.end_ms = run.start_ms + batches * per_batch * 100;
  run.samples = batches * per_batch;
  run.exit_status = 0;
  sink.end_run(run);
}

// Every tick exactly once per table, in order.
void expect_every_tick_once(StoreReader& reader, int ticks) {
  auto runs = reader.runs();
  ASSERT_EQ(runs.size(), 1u);
  std::map<TableId, std::vector<int64_t>> seen;
  for (TableId t : {TableId::CpuSamples, TableId::GpuSamples, TableId::CpuCoreSamples, TableId::Events})
    reader.scan(t, runs[0],
                [&](std::span<const Value> row) { seen[t].push_back(*value_int(row[1])); }); // tick, or seq = tick
  auto expect = [&](TableId t, int per_tick, int every) {
    std::vector<int64_t> want;
    for (int i = 0; i < ticks; i += every)
      for (int k = 0; k < per_tick; ++k)
        want.push_back(i);
    EXPECT_EQ(seen[t], want) << table(t).name;
  };
  expect(TableId::CpuSamples, 1, 1);
  expect(TableId::GpuSamples, 2, 1);
  expect(TableId::CpuCoreSamples, 4, 1);
  expect(TableId::Events, 1, 10);
}

} // namespace

TEST(FullDisk, CsvBatchReachesEveryFileWholeOrNotAtAll) {
  wstest::TempDir dir;
  wstest::TmpfsMount mnt(dir / "mnt", 512);
  if (!mnt.ok()) GTEST_SKIP() << mnt.why();
  RunInfo run;
  run.start_ms = 1795262609833;
  run.run_id = new_run_id(run.start_ms);
  run.task = "full";
  run.interval_ms = 100;
  auto sink = make_csv_sink(mnt.path() + "/csv");
  fill_and_free(*sink, mnt, run, 12, 40, 5);
  // Every line of every file has the header's number of fields.
  for (const auto& e : fs::directory_iterator(mnt.path() + "/csv")) {
    const std::string text = wstest::read_file(e.path().string());
    std::vector<int> fields{1};
    bool quoted = false;
    for (char c : text) {
      if (c == '"')
        quoted = !quoted;
      else if (!quoted && c == ',')
        ++fields.back();
      else if (!quoted && c == '\n')
        fields.push_back(1);
    }
    fields.pop_back(); // after the last newline
    ASSERT_FALSE(fields.empty()) << e.path();
    for (size_t i = 1; i < fields.size(); ++i)
      ASSERT_EQ(fields[i], fields[0]) << e.path() << " line " << i + 1;
  }
  auto reader = make_csv_reader(mnt.path() + "/csv");
  expect_every_tick_once(*reader, 12 * 40);
}

// The SQLite store (and so the MySQL spill file, which is a SQLite store made by make_sqlite_sink) rolls a failed
// batch back: the retry stores it once.
TEST(FullDisk, SqliteBatchReachesTheStoreWholeOrNotAtAll) {
  wstest::TempDir dir;
  wstest::TmpfsMount mnt(dir / "mnt", 16384); // room for a WAL of 1000 pages (4 MiB) between checkpoints
  if (!mnt.ok()) GTEST_SKIP() << mnt.why();
  RunInfo run;
  run.start_ms = 1795262609833;
  run.run_id = new_run_id(run.start_ms);
  run.task = "full";
  run.interval_ms = 100;
  {
    auto sink = make_sqlite_sink(mnt.path() + "/w.db");
    fill_and_free(*sink, mnt, run, 12, 200, 5);
  }
  auto reader = make_sqlite_reader(mnt.path() + "/w.db");
  expect_every_tick_once(*reader, 12 * 200);
}

TEST(FullDisk, SqliteSinkRefusesALinkOrAFifo) {
  wstest::TempDir dir;
  RunInfo run;
  run.start_ms = 1795262609833;
  run.run_id = new_run_id(run.start_ms);
  make_sqlite_sink(dir / "real.db")->begin_run(run);
  fs::create_symlink("real.db", dir / "link.db");
  const std::string link = what_of([&] { make_sqlite_sink(dir / "link.db")->begin_run(run); });
  EXPECT_NE(link.find("link.db': it is a symbolic link"), std::string::npos) << link;
  EXPECT_NE(link.find(dir / "real.db"), std::string::npos) << link;
  ASSERT_EQ(::mkfifo((dir / "fifo.db").c_str(), 0600), 0);
  const std::string fifo = what_of([&] { make_sqlite_sink(dir / "fifo.db")->begin_run(run); });
  EXPECT_NE(fifo.find("not a regular file"), std::string::npos) << fifo;
  EXPECT_FALSE(fs::exists(dir / "fifo.db-wal"));
}

// ---- the report's embedded data ----

TEST(ReportJson, NoStringCanEndOrHideTheScriptBlock) {
  const std::string hostile = "</script><!--<script>&amp;\xe2\x80\xa8\xe2\x80\xa9 caf\xc3\xa9";
  const nlohmann::json data = {{"task", hostile}, {"tags", {{"k<>", hostile}}}, {"n", 1.5}};
  const std::string safe = script_safe_json(data);
  EXPECT_EQ(safe.find_first_of("<>&"), std::string::npos) << safe;
  EXPECT_EQ(safe.find("\xe2\x80\xa8"), std::string::npos);
  EXPECT_EQ(safe.find("\xe2\x80\xa9"), std::string::npos);
  EXPECT_NE(safe.find("\\u003c/script\\u003e\\u003c!--"), std::string::npos) << safe;
  EXPECT_NE(safe.find("caf\xc3\xa9"), std::string::npos); // other text stays as it is
  EXPECT_EQ(nlohmann::json::parse(safe), data);           // the same data, read back
  // And in the page: the data element ends where the template ends it, not before.
  const std::string html = render_report({{"runs", nlohmann::json::array()}, {"x", hostile}});
  const auto open = html.find("<script id=\"ws-data\" type=\"application/json\">");
  ASSERT_NE(open, std::string::npos);
  const auto close = html.find("</script>", open);
  EXPECT_EQ(nlohmann::json::parse(html.substr(open + 45, close - open - 45))["x"], hostile);
}
} // namespace unit_output_file
