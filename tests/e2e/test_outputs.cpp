// What wattscope writes, end to end: the report at a device, a FIFO, a link or beside a planted temporary; the CSV and
// SQLite stores on a disk that fills up mid-run and frees again; hostile strings in the report. Every file, device,
// FIFO, link and mount is made by the test inside its own temporary directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/fifo_reader.hpp"
#include "../support/support.hpp"
#include "../support/tmpfs.hpp"

namespace e2e_outputs { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::map<std::string, std::string> kNoGpu = {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}};

std::vector<std::string> ws(std::vector<std::string> args) {
  args.insert(args.begin(), wattscope());
  return args;
}

// One short run into dir/wattscope.db.
void record(const TempDir& dir, const std::string& task = "t") {
  auto r = run(ws({"run", "--task", task, "--interval", "50ms", "--", "sleep", "0.2"}), kNoGpu, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool is_report(const std::string& text) {
  return text.rfind("<!doctype html>", 0) == 0 && text.find("</html>") != std::string::npos;
}

// Our own null device (major 1, minor 3) in the test's directory; empty when this machine cannot make or open one.
std::string own_null_device(const TempDir& dir) {
  const std::string dev = dir / "null";
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) return {};
  const int fd = ::open(dev.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return {};
  ::close(fd);
  return dev;
}

void expect_still_null_device(const std::string& dev) {
  struct stat st {};
  ASSERT_EQ(::lstat(dev.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << dev << " was replaced";
  EXPECT_EQ(st.st_rdev, makedev(1, 3));
}

} // namespace

TEST(Outputs, ReportToACharacterDeviceWritesThroughIt) {
  TempDir dir;
  const std::string dev = own_null_device(dir);
  if (dev.empty()) GTEST_SKIP() << "cannot make a device node here (needs root, and a file system without nodev)";
  record(dir);
  auto r = run(ws({"report", "-o", dev}), kNoGpu, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  expect_still_null_device(dev);
  // run --report takes the same path.
  auto rr = run(ws({"run", "--report", dev, "--interval", "50ms", "--", "sleep", "0.1"}), kNoGpu, dir.path());
  EXPECT_EQ(rr.exit_code, 0) << rr.err;
  EXPECT_EQ(rr.err.find("cannot write the report"), std::string::npos) << rr.err;
  expect_still_null_device(dev);
  for (const auto& n : names_in(dir.path()))
    EXPECT_TRUE(n == "null" || n.rfind("wattscope.db", 0) == 0) << "left behind: " << n;
}

TEST(Outputs, ReportToAFifoStreamsIntoIt) {
  TempDir dir;
  record(dir);
  const std::string fifo = dir / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  FifoReader reader(fifo);
  ASSERT_TRUE(reader.ok());
  auto r = run(ws({"report", "-o", fifo}), kNoGpu, dir.path());
  const std::string got = reader.finish();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(is_report(got)) << got.size() << " bytes";
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(Outputs, ReportToDashGoesToStandardOutput) {
  TempDir dir;
  record(dir);
  auto r = run(ws({"report", "-o", "-"}), kNoGpu, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(is_report(r.out)) << r.out.substr(0, 200);
  EXPECT_FALSE(fs::exists(dir / "-"));
  // /dev/stdout is a link (into /proc/self/fd): refused like any other, with the way to say it.
  std::error_code ec;
  if (fs::is_symlink("/dev/stdout", ec)) {
    auto dev = run(ws({"report", "-o", "/dev/stdout"}), kNoGpu, dir.path());
    EXPECT_NE(dev.exit_code, 0);
    EXPECT_NE(dev.err.find("for standard output, give -"), std::string::npos) << dev.err;
    EXPECT_EQ(dev.out, "");
  }
}

TEST(Outputs, ReportToASymlinkIsRefusedAndNamesIt) {
  TempDir dir;
  record(dir);
  write_file(dir / "real.html", "keep me");
  fs::create_symlink("real.html", dir / "link.html");
  auto r = run(ws({"report", "-o", "link.html"}), kNoGpu, dir.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("'link.html'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("symbolic link to 'real.html'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir / "real.html"), std::string::npos) << r.err; // the path to give instead
  EXPECT_EQ(read_file(dir / "real.html"), "keep me");
  EXPECT_TRUE(fs::is_symlink(dir / "link.html"));
  // A link to a device is refused the same way: nothing is written through it, nothing replaces it.
  const std::string dev = own_null_device(dir);
  if (!dev.empty()) {
    fs::create_symlink(dev, dir / "to-null");
    EXPECT_NE(run(ws({"report", "-o", "to-null"}), kNoGpu, dir.path()).exit_code, 0);
    EXPECT_TRUE(fs::is_symlink(dir / "to-null"));
    expect_still_null_device(dev);
  }
  // The real path works.
  EXPECT_EQ(run(ws({"report", "-o", "real.html"}), kNoGpu, dir.path()).exit_code, 0);
  EXPECT_TRUE(is_report(read_file(dir / "real.html")));
}

TEST(Outputs, PlantedTemporaryIsNeverFollowed) {
  TempDir dir;
  record(dir);
  write_file(dir / "victim", "precious");
  // The names the old code wrote to, predictably: the report's and the CSV runs file's.
  fs::create_symlink(dir / "victim", dir / "r.html.tmp");
  auto r = run(ws({"report", "-o", "r.html"}), kNoGpu, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(dir / "victim"), "precious");
  EXPECT_TRUE(fs::is_symlink(dir / "r.html.tmp"));
  EXPECT_TRUE(is_report(read_file(dir / "r.html")));
  // Replacing a report keeps its permissions.
  ::chmod((dir / "r.html").c_str(), 0600);
  EXPECT_EQ(run(ws({"report", "-o", "r.html"}), kNoGpu, dir.path()).exit_code, 0);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "r.html").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// ---- a disk that fills up mid-run and frees again ----

namespace {

json scenario(int gpus) {
  json devices = json::array();
  for (int i = 0; i < gpus; ++i)
    devices.push_back({{"name", "NVIDIA H100 80GB HBM3"},
                       {"uuid", "GPU-" + std::to_string(i) + "-full"},
                       {"metrics",
                        {{"power_instant_mw", {{"sine", {{"base", 300000}, {"amp", 80000}, {"period_s", 0.7}}}}},
                         {"energy_mj", {{"sine_integral", {{"base", 300000}, {"amp", 80000}, {"period_s", 0.7}}}}},
                         {"util_gpu", 50},
                         {"mem_used_bytes", 1e9},
                         {"mem_total_bytes", 85899345920LL},
                         {"temp_gpu", 60}}}});
  return {{"devices", devices}};
}

// Records for ~4 s at 20 ms into `store_args`; fills the disk at 1 s and frees it at 2.5 s. Returns the stderr.
std::string record_through_a_full_disk(const TempDir& dir, const TmpfsMount& mnt,
                                       const std::vector<std::string>& store_args) {
  write_file(dir / "scenario.json", scenario(4).dump());
  std::vector<std::string> args = {"record", "--task", "full", "--interval", "20ms", "--duration", "4s"};
  args.insert(args.end(), store_args.begin(), store_args.end());
  const std::map<std::string, std::string> env = {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                                                  {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                                                  {"CUDA_VISIBLE_DEVICES", "\x01"}};
  const int pid = start(ws(args), env, dir.path(), dir / "out", dir / "err");
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const size_t filled = mnt.fill("filler");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  mnt.unfill("filler");
  const int rc = wait_exit(pid);
  const std::string err = read_file(dir / "err");
  EXPECT_GT(filled, 0u);
  EXPECT_EQ(rc, 0) << err;
  // The disk was full for a while (the store said so, then said it was back): otherwise this test proves nothing.
  EXPECT_NE(err.find("cannot write to"), std::string::npos) << err;
  EXPECT_NE(err.find("writable again"), std::string::npos) << err;
  return err;
}

// Every tick of the run exactly once (4 GPU rows each), read back through `export` into a fresh SQLite file. (Tick
// numbers may have gaps: on a loaded machine the sampler skips grid slots it missed.)
void expect_every_tick_once(const TempDir& dir, const std::string& from) {
  const std::string db = dir / "exported.db";
  auto e = run(ws({"export", "--from", from, "--to", db}), kNoGpu, dir.path());
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const int samples = std::stoi(scalar(db, "SELECT samples FROM runs"));
  EXPECT_GE(samples, 150);
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM cpu_samples"), std::to_string(samples));
  EXPECT_EQ(scalar(db, "SELECT count(DISTINCT tick) FROM cpu_samples"), std::to_string(samples));
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM gpu_samples"), std::to_string(4 * samples));
  EXPECT_EQ(scalar(db, "SELECT count(DISTINCT tick) FROM gpu_samples"), std::to_string(samples));
  auto r = run(ws({"report", "--db", db, "-o", dir / "exported.html"}), kNoGpu, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

} // namespace

TEST(FullDisk, CsvStoreReadsBackWholeAfterTheDiskFilledAndFreed) {
  TempDir dir;
  TmpfsMount mnt(dir / "mnt", 16384); // room for the run on a machine with many cores, until filled
  if (!mnt.ok()) GTEST_SKIP() << mnt.why();
  const std::string csv = mnt.path() + "/csv";
  record_through_a_full_disk(dir, mnt, {"--no-db", "--csv", csv});
  // Every line of every file has the header's number of fields.
  for (const auto& f : fs::directory_iterator(csv)) {
    const std::string text = read_file(f.path().string());
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
    fields.pop_back();
    for (size_t i = 1; i < fields.size(); ++i)
      ASSERT_EQ(fields[i], fields[0]) << f.path() << " line " << i + 1;
  }
  auto r = run(ws({"report", "--csv", csv, "-o", dir / "r.html"}), kNoGpu, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  expect_every_tick_once(dir, "csv:" + csv);
}

TEST(FullDisk, SqliteStoreHoldsThroughTheDiskFillingAndFreeing) {
  TempDir dir;
  TmpfsMount mnt(dir / "mnt", 16384);
  if (!mnt.ok()) GTEST_SKIP() << mnt.why();
  const std::string db = mnt.path() + "/w.db";
  record_through_a_full_disk(dir, mnt, {"--db", db});
  auto r = run(ws({"report", "--db", db, "-o", dir / "r.html"}), kNoGpu, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  expect_every_tick_once(dir, db);
}

// ---- hostile strings in the report ----

namespace {

// The report's data block as the HTML parser delimits it: from the data element to the first "</script".
json embedded_data(const std::string& html) {
  const std::string open = "<script id=\"ws-data\" type=\"application/json\">";
  const auto a = html.find(open);
  EXPECT_NE(a, std::string::npos);
  if (a == std::string::npos) return {};
  const auto b = html.find("</script", a + open.size());
  const std::string body = html.substr(a + open.size(), b - a - open.size());
  // No "<" at all: nothing in the data can close the element or open a comment ("<!--") that would hide the rest.
  EXPECT_EQ(body.find('<'), std::string::npos) << body.substr(body.find('<'), 80);
  EXPECT_EQ(body.find('>'), std::string::npos);
  EXPECT_EQ(body.find('&'), std::string::npos);
  return json::parse(body, nullptr, false);
}

const std::vector<std::string> kHostile = {"<!--<script>", "</script><script>alert(1)</script>",
                                           "a&amp;b<!-- x -->\xe2\x80\xa8\xe2\x80\xa9"};

} // namespace

TEST(Report, HostileStringsStayData) {
  TempDir dir;
  for (const auto& task : kHostile) {
    auto r = run(
        ws({"run", "--task", task, "--tag", "k=" + task, "--interval", "50ms", "--", "sh", "-c", "sleep 0.1", task}),
        kNoGpu, dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  auto list = json::parse(run(ws({"list", "--json"}), kNoGpu, dir.path()).out);
  ASSERT_EQ(list.size(), kHostile.size());
  std::vector<std::string> all = {"report", "-o", "all.html"};
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string id = list[i]["run_id"];
    auto one = run(ws({"report", id, "-o", "one.html"}), kNoGpu, dir.path());
    ASSERT_EQ(one.exit_code, 0) << one.err;
    const json d = embedded_data(read_file(dir / "one.html"));
    ASSERT_TRUE(d.is_object());
    EXPECT_EQ(d["runs"][0]["summary"]["task"], list[i]["task"]);
    // The command as stored (shell-quoted), hostile argument included.
    EXPECT_NE(d["runs"][0]["summary"]["command"].get<std::string>().find(list[i]["task"].get<std::string>()),
              std::string::npos);
    all.push_back(id);
  }
  auto cmp = run(ws(all), kNoGpu, dir.path());
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  const json d = embedded_data(read_file(dir / "all.html"));
  ASSERT_TRUE(d.is_object());
  ASSERT_EQ(d["runs"].size(), kHostile.size());
  for (size_t i = 0; i < kHostile.size(); ++i)
    EXPECT_EQ(d["runs"][i]["summary"]["task"], list[i]["task"]);
}
} // namespace e2e_outputs
