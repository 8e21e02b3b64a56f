// Issue 31, item 4: serve's /api/v1/runs answers one page at a time (limit, offset; X-Total-Count and a Link to the
// next page) from a store of 20,003 runs, in bounded memory.
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

#include "../e2e/http_client.hpp"
#include "../support/mariadb.hpp"
#include "../support/runs_filter.hpp"
#include "../support/support.hpp"
#include "sinks/store.hpp"

namespace unit_runs_api {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

using namespace wstest;
using wstest::wattscope;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
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

int64_t vm_hwm_kib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

} // namespace

// 20,003 runs gave 48 MB per request and took serve from 12.8 to 770 MiB, which it kept.
TEST(RunsApi, PagesWithADefaultAndAMaximumInBoundedMemory) {
  TempDir dir;
  write_file(dir / "one.csv", "timestamp, index, power.draw [W]\n2026/01/01 10:00:00.000, 0, 100 W\n"
                              "2026/01/01 10:00:01.000, 0, 100 W\n");
  const std::string db = dir / "runs.db";
  ASSERT_EQ(
      run({wattscope(), "import", "nvidia-smi", dir / "one.csv", "--task", "seed", "--utc", "--db", db}, {}, dir.path())
          .exit_code,
      0);
  // 20,002 more, copies of that run under new ids, one second apart and older than it (so the seed run is last).
  std::string cols, select;
  for (const auto& row : query(db, "SELECT name FROM pragma_table_info('runs')")) {
    const std::string c = *row[0];
    cols += (cols.empty() ? "" : ", ") + ("\"" + c + "\"");
    select += (select.empty() ? "" : ", ") + (c == "run_id"     ? std::string("printf('bulk-%06d', n.i)")
                                              : c == "start_ms" ? std::string("r.start_ms - 100000000 + n.i * 1000")
                                              : c == "task"     ? std::string("'bulk'")
                                                                : "r.\"" + c + "\"");
  }
  exec_sql(db, "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 20001) INSERT INTO runs (" +
                   cols + ") SELECT " + select + " FROM n, runs r WHERE r.task = 'seed'");
  ASSERT_EQ(scalar(db, "SELECT count(*) FROM runs"), "20003");

  const int pid = start({wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "200ms", "--db", db},
                        {{"WATTSCOPE_NVML_LIBRARY", dir / "absent-nvml.so"}}, dir.path(), dir / "out", dir / "err");
  const int port = wait_for_serve_port(dir / "err", 200);
  std::this_thread::sleep_for(300ms);
  const int64_t before = vm_hwm_kib(pid);
  auto get = [&](const std::string& target) { return http::get(port, target, {}, 10s); };

  // serve browses the store and stores nothing there: 20,003 runs, as written.
  auto first = get("/api/v1/runs");
  ASSERT_EQ(first.status, 200) << first.body;
  auto j = json::parse(first.body);
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j.size(), 100u) << "the default page";
  EXPECT_EQ(j[0]["run_id"], "bulk-000000") << "oldest first, as before";
  EXPECT_EQ(first.header("x-total-count"), "20003");
  EXPECT_EQ(first.header("link"), "</api/v1/runs?limit=100&offset=100>; rel=\"next\"");
  auto page = get("/api/v1/runs?limit=1000&offset=19500");
  ASSERT_EQ(page.status, 200);
  j = json::parse(page.body);
  ASSERT_EQ(j.size(), 503u);
  EXPECT_EQ(j[0]["run_id"], "bulk-019500");
  EXPECT_EQ(j[502]["task"], "seed");
  EXPECT_EQ(page.header("link"), "") << "the last page has no next";
  EXPECT_EQ(json::parse(get("/api/v1/runs?offset=20003").body).size(), 0u);
  for (const char* bad :
       {"/api/v1/runs?limit=1001", "/api/v1/runs?limit=0", "/api/v1/runs?limit=-1", "/api/v1/runs?offset=x",
        "/api/v1/runs?limit=10&limit=20", "/api/v1/runs?page=2", "/api/v1/runs?limit=99999999999999999999"}) {
    auto b = get(bad);
    EXPECT_EQ(b.status, 400) << bad << ": " << b.body;
    EXPECT_TRUE(json::parse(b.body).contains("error")) << bad;
  }
  EXPECT_TRUE(contains(get("/api/v1/runs?limit=1001").body, "1 to 1000"));
  // Walking every page costs one page at a time.
  size_t seen = 0;
  for (size_t offset = 0; offset < 20003; offset += 1000) {
    auto p = get(fmt::format("/api/v1/runs?limit=1000&offset={}", offset));
    ASSERT_EQ(p.status, 200);
    seen += json::parse(p.body).size();
  }
  EXPECT_EQ(seen, 20003u);
  const int64_t after = vm_hwm_kib(pid);
  // Under AddressSanitizer the figure is ASan's, not serve's: freed blocks wait in its quarantine (up to 256 MiB) and
  // every block has red zones (412 MiB of growth measured there). The release build checks the bound.
  if (!kAddressSanitizer) {
    EXPECT_LT(after - before, 64 * 1024) << "serve's peak memory grew from " << before << " to " << after << " KiB";
  }
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM runs"), "20003") << "serve --db without --record stores nothing";
}

namespace {

// Every store's runs_page is the slice of runs() (oldest first) with the total beside it.
void expect_pages_slice_runs(const wattscope::StoreSpec& spec) {
  {
    auto sink = wattscope::open_sink(spec, false);
    for (int i = 0; i < 23; ++i) {
      wattscope::RunInfo r;
      r.run_id = fmt::format("page-{:02}", (i * 7) % 23); // ids out of start order: the order is by start time
      r.task = "pages";
      r.host = "h";
      r.start_ms = 1'700'000'000'000 + i * 1000;
      r.end_ms = r.start_ms + 500;
      sink->begin_run(r);
      sink->end_run(r);
    }
  }
  auto reader = wattscope::open_reader(spec);
  const auto all = reader->runs();
  ASSERT_EQ(all.size(), 23u);
  for (const auto& [offset, limit] : {std::pair<size_t, size_t>{0, 100}, {0, 1}, {5, 10}, {20, 10}, {23, 5}, {40, 3}}) {
    const auto page = reader->runs_page(offset, limit);
    EXPECT_EQ(page.total, 23u);
    ASSERT_EQ(page.runs.size(), offset >= 23 ? 0 : std::min(limit, 23 - offset)) << offset << " " << limit;
    for (size_t i = 0; i < page.runs.size(); ++i)
      EXPECT_EQ(page.runs[i].run_id, all[offset + i].run_id) << offset << " " << limit << " " << i;
  }
}

} // namespace

TEST(RunsPage, EveryStoreGivesTheSliceOfItsRunsAndTheTotal) {
  TempDir dir;
  {
    SCOPED_TRACE("sqlite");
    expect_pages_slice_runs(wattscope::parse_store(dir / "p.db"));
  }
  {
    SCOPED_TRACE("csv");
    expect_pages_slice_runs(wattscope::parse_store("csv:" + dir / "csv"));
  }
  SCOPED_TRACE("mysql");
  MariaDb db;
  MysqlPassword pw;
  expect_pages_slice_runs(wattscope::parse_store(db.url()));
}

} // namespace unit_runs_api
