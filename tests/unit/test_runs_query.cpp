// issue 35: /api/v1/runs filters, orders and pages in SQL (SQLite, MySQL) and by a scan (CSV). Every count here is a
// closed formula of the generator (tests/support/runs_generator.hpp), never what the code under test said before.
#include <gtest/gtest.h>

#include <signal.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../e2e/http_client.hpp"
#include "../support/mariadb.hpp"
#include "../support/runs_filter.hpp"
#include "../support/runs_generator.hpp"
#include "../support/support.hpp"
#include "runs/run_view.hpp"
#include "server/query.hpp"
#include "sinks/runs_query.hpp"
#include "sinks/store.hpp"

namespace unit_runs_query {

using namespace wstest;
using wstest::wattscope;
using json = nlohmann::json;
using wattscope::RunsFilter;
using wattscope::RunsSortKey;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kRuns = 600; // 30 per task, 200 per host, 200 Slurm jobs of 3

int64_t utc_ms(int y, int mo, int d, int h = 0, int mi = 0, int s = 0) {
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

RunsFilter parsed(const std::string& q) {
  return parsed_filter(q);
}

std::string error_of(const std::string& q) {
  auto r = wattscope::query::parse_runs_list(q);
  if (auto* e = std::get_if<wattscope::query::Error>(&r)) return e->message;
  return "";
}

// Every filter's count, in closed form for kRuns = 600 runs.
struct Expect {
  const char* query;
  size_t count;
};
const Expect kCounts[] = {
    {"", 600},
    {"task=task03", 30},                            // (i/3) % 20 == 3: 10 jobs of 3
    {"host=node1", 200},                            // i % 3 == 1
    {"task=task03&host=node1", 10},                 // one run of each of the 10 jobs
    {"tag=slurm_partition%3Ddebug", 150},           // (i/3) % 4 == 0: 50 jobs
    {"tag=slurm_job_id%3D5010", 3},                 // runs 30, 31, 32
    {"tag=slurm_job_id%3D5010&host=node2", 1},      // run 32
    {"tag=seed%3D3", 120},                          // a JSON number matched by its spelling: i % 5 == 3
    {"tag=seed%3D3&tag=slurm_partition%3Dgpu", 90}, // i%5==3 and (i/3)%4!=0: 120 - 30 (i/3 ≡ 0 mod 4, i%5==3)
    {"user=user3", 87},                             // slurm_user: (i/3) % 7 == 3, jobs 3, 10, ..., 199: 29 jobs
    {"method=none", 24},                            // i % 25 == 24
    {"method=counter", 144},                        // i % 4 == 0: 150, less i ≡ 24 mod 100: 6
    {"method=integrated", 144},                     // i % 4 == 1: 150, less i ≡ 49 mod 100: 6
    {"method=mixed", 144},                          // i % 4 == 2: 150, less i ≡ 74 mod 100: 6
    {"method=estimated", 144},                      // i % 4 == 3: 150, less i ≡ 99 mod 100: 6
    {"method=unknown", 0},
    {"q=100%25", 1},     // run 7's command; '%' is no wildcard
    {"q=DONE_X", 1},     // '_' is no wildcard, case does not matter
    {"q=gen-00012", 10}, // gen-000120 .. gen-000129
    {"q=task19", 30},
    {"from=2026-11-01T01:00Z&to=2026-11-01T02:00", 60}, // one run a minute: runs 60..119
    {"from=1793494800000", 540},                        // runs 60.. (epoch ms of 2026-11-01T01:00Z)
    {"to=2026-11-01", 600},                             // a date alone as `to`: the whole day (runs 0..599 are in it)
    {"from=2026-11-02", 0},
    // How runs ended: unfinished i % 97 == 96 (96, 193, ..., 581), failed i % 10 == 9 of the rest (none of those six).
    {"exit=unfinished", 6},
    {"exit=failed", 60},
    {"exit=ok", 534},
    // Duration ((37 i) % 600 + 1) s of a finished run: 37 is prime to 600, so each residue once; the six unfinished
    // have residues 497..552, all at least 299.
    {"min_duration_s=300", 295},
    {"max_duration_s=1", 1}, // run 0
    // Energy 100 + ((7919 i) % 10000) / 10 J where i % 25 != 24 (counted by the same formula in doubles).
    {"min_energy_j=1000", 55},
    {"min_energy_j=500&max_energy_j=600", 58},
    {"exit=failed&min_energy_j=1000", 5},
};

} // namespace

TEST(RunsQueryParser, ParsesEveryParameter) {
  const auto r =
      wattscope::query::parse_runs_list("task=bert&host=n1&user=ann&tag=slurm_job_id%3D123&tag=slurm_partition=gpu&"
                                        "from=2026-11-20&to=2026-11-21T08:30:15."
                                        "250Z&method=counter&q=lr%3D3e-4&sort=-j_per_unit&limit=20&offset=40");
  ASSERT_TRUE(std::holds_alternative<wattscope::query::RunsListQuery>(r))
      << std::get<wattscope::query::Error>(r).message;
  const auto& q = std::get<wattscope::query::RunsListQuery>(r);
  EXPECT_EQ(q.limit, 20u);
  EXPECT_EQ(q.offset, 40u);
  EXPECT_EQ(q.filter.task, "bert");
  EXPECT_EQ(q.filter.host, "n1");
  EXPECT_EQ(q.filter.user, "ann");
  ASSERT_EQ(q.filter.tags.size(), 2u);
  EXPECT_EQ(q.filter.tags[0], (std::pair<std::string, std::string>{"slurm_job_id", "123"}));
  EXPECT_EQ(q.filter.tags[1], (std::pair<std::string, std::string>{"slurm_partition", "gpu"}));
  EXPECT_EQ(q.filter.from_ms, utc_ms(2026, 11, 20));
  EXPECT_EQ(q.filter.to_ms, utc_ms(2026, 11, 21, 8, 30, 15) + 250);
  EXPECT_EQ(q.filter.method, "counter");
  EXPECT_EQ(q.filter.q, "lr=3e-4");
  EXPECT_EQ(q.filter.sort, RunsSortKey::JPerUnit);
  EXPECT_TRUE(q.filter.descending);
  EXPECT_EQ(parsed("sort=duration").sort, RunsSortKey::Duration);
  EXPECT_FALSE(parsed("sort=duration").descending);
  EXPECT_EQ(parsed("sort=exit_status").sort, RunsSortKey::ExitStatus);
  EXPECT_EQ(parsed("sort=-energy").sort, RunsSortKey::Energy);
  EXPECT_EQ(parsed("").sort, RunsSortKey::Start);
}

TEST(RunsQueryParser, TimesAreUtcDatesTimesOrEpochMilliseconds) {
  using wattscope::query::parse_time_ms;
  EXPECT_EQ(parse_time_ms("2026-11-20"), utc_ms(2026, 11, 20));
  EXPECT_EQ(parse_time_ms("2026-11-20", true), utc_ms(2026, 11, 21)) << "a date as `to` takes in the whole day";
  EXPECT_EQ(parse_time_ms("2024-02-29T23:59"), utc_ms(2024, 2, 29, 23, 59));
  EXPECT_EQ(parse_time_ms("2000-03-01 00:00:01Z"), utc_ms(2000, 3, 1, 0, 0, 1));
  EXPECT_EQ(parse_time_ms("1970-01-01T00:00:00.001Z"), 1);
  EXPECT_EQ(parse_time_ms("1793491200000"), utc_ms(2026, 11, 1));
  for (const char* bad :
       {"", "2026-13-01", "2026-02-29", "2023-02-29", "2026-11-31", "2026-11-20T24:00", "2026-11-20T08",
        "2026-11-20T08:60", "2026-11-20T08:00:61", "2026-11-20T08:00:00.1", "2026-1120", "1969-12-31", "2026-11-20Z",
        "-5", "1234567890123456", "2026-11-20T08:00:00.000+01:00", "yesterday"})
    EXPECT_FALSE(parse_time_ms(bad).has_value()) << bad;
}

TEST(RunsQueryParser, RefusesWithTheParameterNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"sort=power", "'sort'"},
      {"sort=--start", "'sort'"},
      {"method=guessed", "'method'"},
      {"tag=slurm_job_id", "KEY=VALUE"},
      {"tag=%22a%22%3D1", "'tag'"}, // a quote in the key would reach the JSON path
      {"tag==1", "'tag'"},
      {"from=last%20week", "'from'"},
      {"to=2026-02-30", "'to'"},
      {"from=2026-11-02&to=2026-11-01", "from must be before to"},
      {"task=a&task=b", "given twice"},
      {"q=a&q=b", "given twice"},
      {"limit=abc", "1 to 1000"},
      {"limit=5%26offset%3D3", "'limit'"}, // a decoded '&' must not become a second parameter
      {"offset=-1", "'offset'"},
      {"limit=0", "1 to 1000"},
      {"color=red", "unknown query parameter 'color'"},
      {"exit=crashed", "'exit'"},
      {"min_energy_j=-1", "'min_energy_j'"},
      {"max_duration_s=1e3", "'max_duration_s'"},
      {"min_energy_j=2e12", "'min_energy_j'"},
      {"min_duration_s=5&max_duration_s=1", "minimum is above the maximum"},
      {"format=xml", "'format'"},
      {"a=1&b=2&c=3&d=4&e=5&f=6&g=7&h=8&i=9&j=10&k=11&l=12&m=13&n=14&o=15&p=16&q=17", "at most 16"},
  };
  for (const auto& [q, want] : cases) {
    const std::string e = error_of(q);
    EXPECT_NE(e.find(want), std::string::npos) << q << " gave: " << e;
  }
  EXPECT_NE(error_of("task=" + std::string(300, 'x')).find("longer than 256"), std::string::npos);
  std::string nine;
  for (int i = 0; i < 9; ++i)
    nine += fmt::format("{}tag=k{}=v", i ? "&" : "", i);
  EXPECT_NE(error_of(nine).find("at most 8 tags"), std::string::npos);
  EXPECT_EQ(error_of("tag=a=b=c"), "") << "the value may hold '='";
  EXPECT_EQ(parsed("tag=a=b=c").tags[0].second, "b=c");
}

namespace {

// Filters and order on one store: the total of every filter is its closed form, and the page is run_passes's and
// the same order as sorting the runs in C++.
void expect_filters(const wattscope::StoreSpec& spec, int64_t n) {
  auto reader = wattscope::open_reader(spec);
  for (const auto& e : kCounts) {
    if (n != kRuns) break;
    SCOPED_TRACE(e.query);
    const auto page = reader->runs_query(parsed(e.query), 0, 1000);
    EXPECT_EQ(page.total, e.count);
    EXPECT_EQ(page.runs.size(), std::min<size_t>(e.count, 1000));
    for (const auto& r : page.runs)
      EXPECT_TRUE(wattscope::run_passes(r, parsed(e.query))) << r.run_id;
  }
  // Method: the filter's word is the run's own label (run_view's), for every run.
  for (const char* m : {"counter", "integrated", "mixed", "estimated", "none"}) {
    const auto page = reader->runs_query(parsed(std::string("method=") + m), 0, 1000);
    for (const auto& r : page.runs) {
      const std::string label = wattscope::run_energy_method(r).label();
      EXPECT_EQ(label.empty() ? "none" : label.starts_with("mixed") ? "mixed" : label, m) << r.run_id;
    }
  }
  // Order: energy descending, runs without energy last; ties by start.
  {
    const auto page = reader->runs_query(parsed("sort=-energy"), 0, 1000);
    ASSERT_EQ(page.runs.size(), static_cast<size_t>(n));
    const size_t with = static_cast<size_t>(n - n / 25);
    for (size_t i = 0; i < page.runs.size(); ++i) {
      EXPECT_EQ(page.runs[i].total_energy_j.has_value(), i < with) << i;
      if (i > 0 && i < with) {
        EXPECT_GE(*page.runs[i - 1].total_energy_j, *page.runs[i].total_energy_j) << i;
      }
    }
    double most = 0;
    for (int64_t i = 0; i < n; ++i)
      if (i % 25 != 24) most = std::max(most, 100 + static_cast<double>((7919 * i) % 10000) / 10.0);
    EXPECT_EQ(*page.runs[0].total_energy_j, most);
  }
  // Duration ascending: 1 s is the shortest (i = 0, 600, ...), unfinished runs last.
  {
    const auto page = reader->runs_query(parsed("sort=duration&limit=3"), 0, 3);
    ASSERT_FALSE(page.runs.empty());
    EXPECT_EQ(page.runs[0].run_id, "gen-000000");
    const auto last = reader->runs_query(parsed("sort=duration"), static_cast<size_t>(n - 1), 1);
    ASSERT_EQ(last.runs.size(), 1u);
    EXPECT_FALSE(last.runs[0].end_ms.has_value());
  }
  // J per unit: only runs with one unit of work (i % 3 == 0) and energy; i = 0 has 150 samples and 100 J.
  {
    const auto page = reader->runs_query(parsed("sort=j_per_unit&task=task00"), 0, 1000);
    ASSERT_FALSE(page.runs.empty());
    ASSERT_EQ(page.work.size(), page.runs.size());
    std::optional<double> prev;
    bool missing_seen = false;
    for (size_t i = 0; i < page.runs.size(); ++i) {
      const auto jpu = wattscope::j_per_unit(page.runs[i], page.work[i]);
      const int64_t idx = std::stoll(page.runs[i].run_id.substr(4));
      const bool expect_jpu = idx % 3 == 0 && idx % 25 != 24;
      EXPECT_EQ(jpu.has_value(), expect_jpu) << page.runs[i].run_id;
      if (jpu) {
        EXPECT_FALSE(missing_seen) << "runs without J per unit come last";
        const double samples = 100.0 * static_cast<double>(idx % 7 + 1) + 50;
        EXPECT_DOUBLE_EQ(*jpu, *page.runs[i].total_energy_j / samples);
        if (prev) {
          EXPECT_LE(*prev, *jpu);
        }
        prev = jpu;
      } else {
        missing_seen = true;
      }
      if (idx % 6 == 1) {
        EXPECT_EQ(page.work[i].size(), 2u) << "samples and tokens";
      }
    }
  }
  // J per unit over the whole store, both ways, in pages of 7 (pages straddle the runs with the figure and those
  // without): the order of each run's j_per_unit() sorted here, the missing last, ties by start then id.
  for (const bool desc : {false, true}) {
    SCOPED_TRACE(desc ? "sort=-j_per_unit" : "sort=j_per_unit");
    const auto all = reader->runs_query(parsed("sort=start"), 0, 1000);
    ASSERT_EQ(all.runs.size(), static_cast<size_t>(n));
    std::vector<std::pair<std::optional<double>, const wattscope::RunInfo*>> want;
    for (size_t i = 0; i < all.runs.size(); ++i)
      want.emplace_back(wattscope::j_per_unit(all.runs[i], all.work[i]), &all.runs[i]);
    std::stable_sort(want.begin(), want.end(), [&](const auto& a, const auto& b) {
      if (a.first.has_value() != b.first.has_value()) return a.first.has_value();
      if (a.first && *a.first != *b.first) return desc ? *a.first > *b.first : *a.first < *b.first;
      if (a.second->start_ms != b.second->start_ms)
        return desc ? a.second->start_ms > b.second->start_ms : a.second->start_ms < b.second->start_ms;
      return desc ? a.second->run_id > b.second->run_id : a.second->run_id < b.second->run_id;
    });
    std::vector<std::string> want_ids, got_ids;
    for (const auto& w : want)
      want_ids.push_back(w.second->run_id);
    for (size_t off = 0; off < static_cast<size_t>(n); off += 7) {
      const auto page = reader->runs_query(parsed(desc ? "sort=-j_per_unit" : "sort=j_per_unit"), off, 7);
      EXPECT_EQ(page.total, static_cast<size_t>(n));
      ASSERT_EQ(page.work.size(), page.runs.size());
      for (const auto& r : page.runs)
        got_ids.push_back(r.run_id);
    }
    EXPECT_EQ(got_ids, want_ids);
  }
  // One filter of run_tags that many runs pass, in start order both ways, in pages of 7: the runs that pass, in start
  // order, without gap or repeat.
  for (const char* q : {"user=user3", "method=mixed", "q=task19", "tag=slurm_partition%3Ddebug", "tag=seed%3D3"})
    for (const bool desc : {false, true}) {
      SCOPED_TRACE(std::string(q) + (desc ? " descending" : ""));
      const auto all = reader->runs_query(parsed(""), 0, 1000);
      std::vector<std::string> want, got;
      for (const auto& r : all.runs)
        if (wattscope::run_passes(r, parsed(q))) want.push_back(r.run_id); // generated ids follow their start
      if (desc) std::reverse(want.begin(), want.end());
      const std::string query = std::string(q) + (desc ? "&sort=-start" : "&sort=start");
      for (size_t off = 0; off < want.size() + 7; off += 7) {
        const auto page = reader->runs_query(parsed(query), off, 7);
        EXPECT_EQ(page.total, want.size());
        ASSERT_EQ(page.work.size(), page.runs.size());
        for (const auto& r : page.runs)
          got.push_back(r.run_id);
      }
      EXPECT_EQ(got, want);
    }
  // Exit status descending: the failed runs (i % 10 == 9, finished) first.
  {
    const auto page = reader->runs_query(parsed("sort=-exit_status"), 0, 1000);
    size_t failed = 0;
    for (int64_t i = 0; i < n; ++i)
      failed += i % 10 == 9 && i % 97 != 96;
    for (size_t i = 0; i < page.runs.size(); ++i)
      EXPECT_EQ(page.runs[i].exit_status.value_or(-1) == 1, i < failed) << i;
  }
  // Start descending pages: offset walks without gap or repeat.
  {
    std::vector<std::string> ids;
    for (size_t off = 0; off < static_cast<size_t>(n); off += 7) {
      const auto page = reader->runs_query(parsed("sort=-start&task=task05"), off, 7);
      for (const auto& r : page.runs)
        ids.push_back(r.run_id);
    }
    ASSERT_EQ(ids.size(), static_cast<size_t>(n / 20));
    for (size_t i = 1; i < ids.size(); ++i)
      EXPECT_GT(ids[i - 1], ids[i]);
  }
  // A user string that would be SQL is a value like any other.
  EXPECT_EQ(reader->runs_query(parsed("task=x%27%20OR%201%3D1%20--"), 0, 10).total, 0u);
  EXPECT_EQ(reader->runs_query(parsed("q=%27)%20OR%201%3D1%20--"), 0, 10).total, 0u);
  EXPECT_EQ(reader->runs_query(parsed("tag=slurm_job_id%3D5010%22%20OR%20%221"), 0, 10).total, 0u);
  // Bytes that are not UTF-8 (JSON cannot quote them) match nothing, without an error.
  EXPECT_EQ(reader->runs_query(parsed("tag=slurm_job_id%3D50%FF10"), 0, 10).total, 0u);
  EXPECT_EQ(reader->runs_query(parsed("user=user%FF"), 0, 10).total, 0u);
}

} // namespace

TEST(RunsQuery, SqliteFiltersAndOrdersAsTheGeneratorSays) {
  TempDir dir;
  const auto spec = wattscope::parse_store(dir / "gen.db");
  generate_runs(spec, kRuns);
  expect_filters(spec, kRuns);
}

// The filters by task and host are answered from an index, not a scan of every run; a store made before them gets
// them from its next writer (the forward migration).
TEST(RunsQuery, SqliteAnswersTaskAndHostFromAnIndex) {
  TempDir dir;
  const auto spec = wattscope::parse_store(dir / "gen.db");
  generate_runs(spec, 30);
  auto plan = [&](const std::string& sql) {
    std::string out;
    for (const auto& row : query(dir / "gen.db", "EXPLAIN QUERY PLAN " + sql))
      out += (row.back() ? *row.back() : std::string()) + "\n";
    return out;
  };
  EXPECT_NE(plan("SELECT COUNT(*) FROM runs WHERE task = 'task01'").find("runs_by_task_start"), std::string::npos);
  EXPECT_NE(
      plan("SELECT run_id FROM runs WHERE host = 'node1' ORDER BY start_ms DESC LIMIT 5").find("runs_by_host_start"),
      std::string::npos);
  // An older store: the indexes dropped, as before this version; recording into it brings them back.
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "gen.db").c_str(), &h), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(h, "DROP INDEX runs_by_task_start; DROP INDEX runs_by_host_start;", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(h);
  EXPECT_EQ(plan("SELECT COUNT(*) FROM runs WHERE task = 'task01'").find("runs_by_task_start"), std::string::npos);
  generate_runs(spec, 3, 30);
  EXPECT_NE(plan("SELECT COUNT(*) FROM runs WHERE task = 'task01'").find("runs_by_task_start"), std::string::npos);
}

// The tag, user, method and search filters read run_tags (one index range each) when it holds every run, and the
// runs' own JSON when it does not: a store no writer of this version has opened, or one an older wattscope added runs
// to. Both give the generator's counts; the next writer back-fills the table (the forward migration).
TEST(RunsQuery, SqliteTagFiltersReadRunTagsAndFallBackWithoutIt) {
  TempDir dir;
  const std::string db = dir / "gen.db";
  const auto spec = wattscope::parse_store(db);
  generate_runs(spec, kRuns);
  auto one = [&](const std::string& sql) {
    const auto rows = query(db, sql);
    return rows.empty() || !rows[0][0] ? std::string() : *rows[0][0];
  };
  auto exec = [&](const std::string& sql) {
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(h, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sql;
    sqlite3_close(h);
  };
  auto total = [&](const std::string& q) { return wattscope::open_reader(spec)->runs_query(parsed(q), 0, 10).total; };
  EXPECT_EQ(one("SELECT COUNT(*) FROM run_tags WHERE tag_key = '@method'"), "600");
  EXPECT_EQ(one("SELECT tag_value FROM run_tags WHERE run_id = 'gen-000003' AND tag_key = 'seed'"), "3");
  EXPECT_EQ(one("SELECT tag_value FROM run_tags WHERE run_id = 'gen-000002' AND tag_key = '@method'"), "mixed");
  // Each filter is a search of run_tags_by_value, not a scan.
  for (const char* q : {"tag=slurm_job_id%3D5010", "user=user3", "method=counter", "q=DONE_X"}) {
    const auto sql = wattscope::runs_sql(parsed(q), wattscope::SqlDialect::Sqlite, true);
    std::string explain = "EXPLAIN QUERY PLAN SELECT COUNT(*) FROM runs" + sql.where;
    for (const auto& p : sql.params) {
      const auto pos = explain.find('?');
      ASSERT_NE(pos, std::string::npos);
      const auto& text = std::get<std::string>(p);
      explain.replace(pos, 1, "'" + text + "'");
    }
    std::string plan;
    for (const auto& row : query(db, explain))
      plan += (row.back() ? *row.back() : std::string()) + "\n";
    EXPECT_NE(plan.find("SEARCH run_tags USING COVERING INDEX run_tags_by_value"), std::string::npos) << q << plan;
  }
  expect_filters(spec, kRuns);
  // The reader answers from run_tags: a value changed there alone is what the filter finds.
  exec("UPDATE run_tags SET tag_value = 'zzz' WHERE run_id = 'gen-000000' AND tag_key = 'slurm_partition'");
  EXPECT_EQ(total("tag=slurm_partition%3Dzzz"), 1u);
  // A run without its rows (as an older wattscope records it): the table no longer answers for every run, and the
  // filters read the runs' JSON, where no run has that value.
  exec("DELETE FROM run_tags WHERE run_id = 'gen-000001'");
  EXPECT_EQ(total("tag=slurm_partition%3Dzzz"), 0u);
  expect_filters(spec, kRuns);
  // A store from before run_tags: read as before (serve only reads), then back-filled by its next writer.
  exec("DROP TABLE run_tags");
  expect_filters(spec, kRuns);
  generate_runs(spec, 3, kRuns);
  EXPECT_EQ(one("SELECT COUNT(*) FROM run_tags WHERE tag_key = '@method'"), std::to_string(kRuns + 3));
  EXPECT_EQ(total("tag=slurm_job_id%3D5010"), 3u);
  EXPECT_EQ(total("tag=slurm_job_id%3D" + std::to_string(5000 + kRuns / 3)), 3u) << "the new runs' own rows";
  exec("UPDATE run_tags SET tag_value = 'zzz' WHERE run_id = 'gen-000000' AND tag_key = 'slurm_partition'");
  EXPECT_EQ(total("tag=slurm_partition%3Dzzz"), 1u) << "the back-filled table answers again";
}

// Many runs passing a run_tags filter: the page in start order comes from walking the start index, and is the same
// page (all runs but run 7 have "python" in their command).
TEST(RunsQuery, SqliteManyRunsPassingATagFilterPageInStartOrder) {
  TempDir dir;
  const auto spec = wattscope::parse_store(dir / "gen.db");
  generate_runs(spec, 2000);
  auto reader = wattscope::open_reader(spec);
  auto ids = [&](const std::string& q, size_t offset) {
    const auto page = reader->runs_query(parsed(q), offset, 3);
    std::string out;
    for (const auto& r : page.runs)
      out += r.run_id + " ";
    return std::to_string(page.total) + ": " + out;
  };
  EXPECT_EQ(ids("q=PYTHON", 0), "1999: gen-000000 gen-000001 gen-000002 ");
  EXPECT_EQ(ids("q=PYTHON", 6), "1999: gen-000006 gen-000008 gen-000009 ") << "run 7 runs echo";
  EXPECT_EQ(ids("q=PYTHON&sort=-start", 1000), "1999: gen-000999 gen-000998 gen-000997 ");
  // user0: slurm_user of the jobs j = i/3 with j % 7 == 0: j = 0, 7, ..., 665, 96 jobs of 3 runs; the 2nd is 21..23.
  EXPECT_EQ(ids("user=user0", 3), "288: gen-000021 gen-000022 gen-000023 ");
  // Partition debug: j % 4 == 0, j = 0, 4, ..., 664, 167 jobs of 3; the rest, 1499 runs, gpu, from run 3 on.
  EXPECT_EQ(ids("tag=slurm_partition%3Dgpu", 3), "1499: gen-000006 gen-000007 gen-000008 ");
}

TEST(RunsQuery, CsvScansToTheSameAnswers) {
  TempDir dir;
  const auto spec = wattscope::parse_store("csv:" + dir / "csv");
  generate_runs(spec, kRuns);
  expect_filters(spec, kRuns);
}

TEST(RunsQuery, MysqlFiltersAndOrdersAsTheGeneratorSays) {
  MariaDb db;
  MysqlPassword pw;
  const auto spec = wattscope::parse_store(db.url());
  generate_runs(spec, kRuns);
  expect_filters(spec, kRuns);
  // Every writer keeps run_tags whole, and the next writer of a store without it back-fills it.
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM wattscope.run_tags WHERE tag_key = '@method'"), "600\n");
  EXPECT_EQ(db.sql("SELECT tag_value FROM wattscope.run_tags WHERE run_id = 'gen-000003' AND tag_key = 'seed'"), "3\n");
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM wattscope.run_tags WHERE tag_key = 'slurm_partition' AND tag_value = 'GPU'"),
            "0\n")
      << "a tag compares exactly (utf8mb4_bin)";
  // A tag filter is answered from run_tags: a value changed there alone is found.
  db.sql("UPDATE wattscope.run_tags SET tag_value = '5010', value_key = '5010' WHERE run_id = 'gen-000100' AND "
         "tag_key = 'slurm_job_id'");
  EXPECT_EQ(wattscope::open_reader(spec)->runs_query(parsed("tag=slurm_job_id%3D5010"), 0, 10).total, 4u);
  db.sql("UPDATE wattscope.run_tags SET tag_value = '5033', value_key = '5033' WHERE run_id = 'gen-000100' AND "
         "tag_key = 'slurm_job_id'");
  // One filter that many runs pass (user, method, a tag) is answered from run_tags' keyed index alone (value_key, the
  // @user rows): a key changed there alone is what the filter finds, in every order.
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM wattscope.run_tags WHERE value_key IS NULL OR start_ms IS NULL"), "0\n");
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM wattscope.run_tags WHERE tag_key = '@user'"), "600\n");
  db.sql("UPDATE wattscope.run_tags SET value_key = 'someone' WHERE run_id = 'gen-000007' AND tag_key = '@user'");
  for (const char* sort : {"", "&sort=-energy", "&sort=duration", "&sort=-exit_status"}) {
    SCOPED_TRACE(sort);
    const auto page = wattscope::open_reader(spec)->runs_query(parsed(std::string("user=someone") + sort), 0, 10);
    ASSERT_EQ(page.total, 1u);
    ASSERT_EQ(page.runs.size(), 1u);
    EXPECT_EQ(page.runs[0].run_id, "gen-000007");
  }
  db.sql("UPDATE wattscope.run_tags SET value_key = 'none' WHERE run_id = 'gen-000008' AND tag_key = '@method'");
  const auto none = wattscope::open_reader(spec)->runs_query(parsed("method=none&sort=-start"), 0, 1000);
  ASSERT_FALSE(none.runs.empty());
  EXPECT_EQ(none.runs.back().run_id, "gen-000008") << "the oldest run with the method, last";
  // A store whose run_tags has no keyed columns yet (an older wattscope's): read as before, then keyed by its next
  // writer.
  db.sql(
      "ALTER TABLE wattscope.run_tags DROP INDEX run_tags_by_key_start, DROP COLUMN value_key, DROP COLUMN start_ms");
  db.sql("DELETE FROM wattscope.run_tags WHERE tag_key = '@user'");
  EXPECT_EQ(wattscope::open_reader(spec)->runs_query(parsed("tag=slurm_job_id%3D5010"), 0, 10).total, 3u);
  expect_filters(spec, kRuns);
  generate_runs(spec, 3, 0);
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM wattscope.run_tags WHERE value_key IS NULL OR start_ms IS NULL"), "0\n");
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM wattscope.run_tags WHERE tag_key = '@user'"), "600\n");
  expect_filters(spec, kRuns);
  // A run an older wattscope writes since (no keyed columns): the filters read as before until the next writer.
  db.sql("UPDATE wattscope.run_tags SET value_key = NULL, start_ms = NULL WHERE run_id = 'gen-000009'");
  expect_filters(spec, kRuns);
  db.sql("DROP TABLE wattscope.run_tags");
  EXPECT_EQ(wattscope::open_reader(spec)->runs_query(parsed("tag=slurm_job_id%3D5010"), 0, 10).total, 3u);
  expect_filters(spec, kRuns);
  generate_runs(spec, 3, 0);
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM wattscope.run_tags WHERE tag_key = '@method'"), "600\n");
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM wattscope.run_tags WHERE tag_key = 'slurm_partition' AND tag_value = 'gpu'"),
            "450\n");
}

namespace {

// The runs `f` passes in its order as the C++ statement of it: the figure's order, the runs without it last, ties by
// start then id, each in the page's direction.
std::vector<std::string> ordered_ids(const std::vector<wattscope::RunInfo>& all, const RunsFilter& f) {
  auto figure = [&](const wattscope::RunInfo& r) -> std::optional<double> {
    if (f.sort == RunsSortKey::Energy) return r.total_energy_j;
    if (r.end_ms) return static_cast<double>(*r.end_ms - r.start_ms);
    return std::nullopt;
  };
  std::vector<std::pair<std::optional<double>, const wattscope::RunInfo*>> runs;
  for (const auto& r : all)
    if (wattscope::run_passes(r, f)) runs.emplace_back(figure(r), &r);
  const bool desc = f.descending;
  std::sort(runs.begin(), runs.end(), [&](const auto& a, const auto& b) {
    if (a.first.has_value() != b.first.has_value()) return a.first.has_value();
    if (a.first && *a.first != *b.first) return desc ? *a.first > *b.first : *a.first < *b.first;
    if (a.second->start_ms != b.second->start_ms)
      return desc ? a.second->start_ms > b.second->start_ms : a.second->start_ms < b.second->start_ms;
    return desc ? a.second->run_id > b.second->run_id : a.second->run_id < b.second->run_id;
  });
  std::vector<std::string> ids;
  for (const auto& r : runs)
    ids.push_back(r.second->run_id);
  return ids;
}

// Every page of `page_size` of each query, both ways, duration and energy, is the C++ order's slice; the total is
// how many pass.
void expect_figure_orders(const wattscope::StoreSpec& spec, const std::vector<std::string>& filters, size_t page_size) {
  auto reader = wattscope::open_reader(spec);
  const auto all = reader->runs_query(parsed("sort=start"), 0, 100000).runs;
  for (const auto& filter : filters)
    for (const char* sort :
         {"duration", "-duration", "energy", "-energy", "exit_status", "-exit_status", "j_per_unit", "-j_per_unit"}) {
      const std::string q = filter + (filter.empty() ? "" : "&") + "sort=" + sort;
      SCOPED_TRACE(q);
      // The exit status and J per unit as the scan every store shares sorts them (StoreReader::runs_query)
      std::vector<std::string> want;
      if (parsed(q).sort == RunsSortKey::Duration || parsed(q).sort == RunsSortKey::Energy) {
        want = ordered_ids(all, parsed(q));
      } else {
        for (const auto& r : reader->wattscope::StoreReader::runs_query(parsed(q), 0, 100000).runs)
          want.push_back(r.run_id);
      }
      std::vector<std::string> got;
      for (size_t offset = 0; offset < want.size() + page_size; offset += page_size) {
        const auto page = reader->runs_query(parsed(q), offset, page_size);
        ASSERT_EQ(page.total, want.size()) << offset;
        ASSERT_EQ(page.runs.size(), page.work.size());
        for (const auto& r : page.runs)
          got.push_back(r.run_id);
      }
      EXPECT_EQ(got, want);
    }
}

} // namespace

// issue 35: a page of a two-walk order is the slice of "runs with the figure, then those without", and the runs with
// the figure are counted only when the page starts past them.
TEST(RunsQuery, TwoWalkPageIsTheSliceOfBothSides) {
  const size_t with = 10, without = 5;
  for (size_t offset = 0; offset <= with + without + 2; ++offset)
    for (size_t limit = 0; limit <= with + without + 2; ++limit) {
      SCOPED_TRACE(fmt::format("offset {} limit {}", offset, limit));
      std::vector<size_t> got;
      int counted = 0;
      wattscope::two_walk_page(
          offset, limit,
          [&](bool side, size_t o, size_t l) {
            const size_t first = side ? 0 : with, n = side ? with : without;
            size_t found = 0;
            for (size_t i = o; i < n && found < l; ++i, ++found)
              got.push_back(first + i);
            return found;
          },
          [&] {
            ++counted;
            return with;
          });
      std::vector<size_t> want;
      for (size_t i = offset; i < with + without && want.size() < limit; ++i)
        want.push_back(i);
      EXPECT_EQ(got, want);
      EXPECT_EQ(counted, limit > 0 && offset >= with ? 1 : 0);
    }
}

// A query's own columns are read by name: the SELECT list written from them names each column as declared, in that
// order (as SQLite reports the result's columns), so result_index finds what the query answered there; a name the list
// lacks, or a one-column read of a wider row, is the reader's mistake and throws.
TEST(RunsQuery, AQueryRowIsReadByItsColumnsName) {
  using wattscope::ColType;
  using wattscope::ResultColumn;
  using wattscope::Value;
  constexpr ResultColumn cols[] = {{"unit", "'tokens'", ColType::Text},
                                   {"amount_done", "2.5 * 4", ColType::Real},
                                   {"run_id", "'r1'", ColType::Text}};
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  const std::string sql = "SELECT " + wattscope::result_select_list(cols);
  ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql;
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  ASSERT_EQ(sqlite3_column_count(st), 3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sqlite3_column_name(st, static_cast<int>(i)), cols[i].name);
    EXPECT_EQ(wattscope::result_index(cols, cols[i].name), i);
  }
  const std::vector<Value> row = {std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))),
                                  sqlite3_column_double(st, 1),
                                  std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 2)))};
  sqlite3_finalize(st);
  sqlite3_close(db);
  EXPECT_EQ(wattscope::value_text(row[wattscope::result_index(cols, "run_id")]), "r1");
  EXPECT_EQ(wattscope::value_text(row[wattscope::result_index(cols, "unit")]), "tokens");
  EXPECT_EQ(wattscope::value_real(row[wattscope::result_index(cols, "amount_done")]), 10.0);
  EXPECT_EQ(wattscope::result_types(cols), (std::vector<ColType>{ColType::Text, ColType::Real, ColType::Text}));
  EXPECT_THROW(wattscope::result_index(cols, "amount"), std::logic_error);

  const std::vector<Value> one = {int64_t{42}};
  EXPECT_EQ(wattscope::value_int(wattscope::only_cell(one)), 42);
  EXPECT_THROW(wattscope::only_cell(row), std::logic_error);
  EXPECT_THROW(wattscope::only_cell(std::span<const Value>{}), std::logic_error);
}

// issue 35: on MariaDB the duration and energy orders walk runs_by_duration (a generated duration_ms) and
// runs_by_energy, alone and under a keyed filter (the runs' index joined to run_tags, or run_tags joined and sorted
// when few pass): every page as the C++ order says, ties included; a store without the column reads as before, and
// its next writer adds it.
TEST(RunsQuery, MysqlDurationAndEnergyOrdersWalkTheirIndexes) {
  MariaDb db;
  MysqlPassword pw;
  const auto spec = wattscope::parse_store(db.url());
  generate_runs(spec, kRuns);
  EXPECT_EQ(db.sql("SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics WHERE table_schema = "
                   "'wattscope' AND table_name = 'runs' AND index_name IN ('runs_by_duration', 'runs_by_energy')"),
            "2\n");
  // Run i lasts (37 i) % 600 + 1 s (distinct for i < 600) unless unfinished (i % 97 == 96).
  EXPECT_EQ(db.sql("SELECT duration_ms FROM wattscope.runs WHERE run_id = 'gen-000001'"), "38000\n");
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM wattscope.runs WHERE duration_ms IS NULL"), "6\n");
  // Ties: the generator's durations and energies are all distinct, so some runs get equal ones.
  db.sql("UPDATE wattscope.runs SET end_ms = start_ms + 5000 WHERE end_ms IS NOT NULL AND "
         "MOD(CAST(SUBSTRING(run_id, 5) AS UNSIGNED), 11) = 0");
  db.sql("UPDATE wattscope.runs SET total_energy_j = 321.5 WHERE total_energy_j IS NOT NULL AND "
         "MOD(CAST(SUBSTRING(run_id, 5) AS UNSIGNED), 13) = 0");
  // ... and the J per unit a writer keeps beside each run, as it would from that energy
  db.sql("UPDATE wattscope.runs SET j_per_unit = " + wattscope::j_per_unit_sql("wattscope.runs"));
  // 54 of the 55 multiples of 11 (484 is unfinished), and run 292, whose own duration is 5 s
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM wattscope.runs WHERE duration_ms = 5000"), "55\n");
  // Keyed filters many pass (the index walk for the first pages, the join past them), few pass (the join), and
  // filters read from the runs (task, host, q, several terms: the walk where many pass, else each passing run sorted).
  const std::vector<std::string> filters = {"",
                                            "user=user3",
                                            "tag=slurm_partition%3Dgpu",
                                            "tag=slurm_partition%3Ddebug&from=2026-11-01T02:00&to=2026-11-01T09:00",
                                            "method=mixed",
                                            "tag=slurm_job_id%3D5010",
                                            "task=task03",
                                            "host=node1",
                                            "q=python",
                                            "q=seed%203",
                                            "user=user3&method=counter"};
  expect_figure_orders(spec, filters, 29);
  // A keyed filter every run passes walks the index to its end: the pages straddle the runs without the figure and
  // pass them (their count asked). Only run_tags' keys changed: the reader answers from them.
  db.sql("UPDATE wattscope.run_tags SET value_key = 'all' WHERE tag_key = 'slurm_partition'");
  {
    auto reader = wattscope::open_reader(spec);
    const auto all = reader->runs_query(parsed("sort=start"), 0, 1000).runs;
    for (const char* sort : {"sort=-energy", "sort=duration"}) {
      SCOPED_TRACE(sort);
      const auto want = ordered_ids(all, parsed(sort));
      std::vector<std::string> got;
      for (size_t offset = 0; offset < want.size(); offset += 13)
        for (const auto& r :
             reader->runs_query(parsed(std::string("tag=slurm_partition%3Dall&") + sort), offset, 13).runs)
          got.push_back(r.run_id);
      EXPECT_EQ(got, want);
    }
  }
  db.sql("UPDATE wattscope.run_tags SET value_key = tag_value WHERE tag_key = 'slurm_partition'");
  // A run an older wattscope ends (its rows name only the registry's columns): the server computes its duration.
  db.sql("UPDATE wattscope.runs SET end_ms = start_ms + 3 WHERE run_id = 'gen-000096'");
  EXPECT_EQ(wattscope::open_reader(spec)->runs_query(parsed("sort=duration"), 0, 1).runs.at(0).run_id, "gen-000096");
  // A store from before the column: the same orders (each passing run sorted), then the next writer adds it.
  db.sql("ALTER TABLE wattscope.runs DROP INDEX runs_by_duration, DROP INDEX runs_by_energy, DROP INDEX "
         "runs_by_exit_status, DROP COLUMN duration_ms");
  expect_figure_orders(spec, {"", "user=user3", "tag=slurm_partition%3Dgpu"}, 29);
  generate_runs(spec, 3, 0);
  EXPECT_EQ(db.sql("SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics WHERE table_schema = "
                   "'wattscope' AND table_name = 'runs' AND index_name = 'runs_by_exit_status'"),
            "1\n");
  EXPECT_EQ(db.sql("SELECT COUNT(*) FROM wattscope.runs WHERE duration_ms IS NULL"), "5\n") << "96 has ended";
  EXPECT_EQ(db.sql("SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics WHERE table_schema = "
                   "'wattscope' AND table_name = 'runs' AND index_name IN ('runs_by_duration', 'runs_by_energy')"),
            "2\n");
  expect_figure_orders(spec, {"", "user=user3", "tag=slurm_partition%3Dgpu"}, 29);
  // Times that no BIGINT difference holds: the row is written (the column is a DECIMAL), and it sorts first.
  db.sql("UPDATE wattscope.runs SET start_ms = -9000000000000000000, end_ms = 9000000000000000000 WHERE run_id = "
         "'gen-000005'");
  EXPECT_EQ(wattscope::open_reader(spec)->runs_query(parsed("sort=-duration"), 0, 1).runs.at(0).run_id, "gen-000005");
}

namespace {

// serve over a generated store: the JSON of the runs table, a run, a job; the pages; their errors. Returns the
// slowest of the filtered queries, in ms.
void expect_serve(const std::string& db_arg, const TempDir& dir, int64_t n, double& slowest) {
  const int pid = start({wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "500ms", "--db", db_arg},
                        {{"WATTSCOPE_NVML_LIBRARY", dir / "absent-nvml.so"}, {"WATTSCOPE_CGROUP_ROOT", "none"}},
                        dir.path(), dir / "out", dir / "err");
  const int port = wait_for_serve_port(dir / "err", 200);
  auto get = [&](const std::string& target) { return http::get(port, target, {}, 10s); };
  slowest = 0;
  auto timed = [&](const std::string& target) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = get(target);
    slowest =
        std::max(slowest, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    return r;
  };

  // task03 on node1: run 3k + 1 of each job k with k % 20 == 3; the Link keeps the filters.
  size_t want = 0;
  for (int64_t k = 0; 3 * k + 1 < n; ++k)
    want += k % 20 == 3;
  auto r = timed("/api/v1/runs?task=task03&host=node1&sort=-energy&limit=5");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-total-count"), std::to_string(want));
  EXPECT_EQ(r.header("link"), "</api/v1/runs?task=task03&host=node1&sort=-energy&limit=5&offset=5>; rel=\"next\"");
  auto rows = json::parse(r.body);
  EXPECT_EQ(rows.size(), 5u);
  for (size_t i = 1; i < rows.size(); ++i)
    EXPECT_GE(rows[i - 1]["total_energy_j"].get<double>(), rows[i]["total_energy_j"].get<double>());
  for (const auto& row : rows) {
    EXPECT_EQ(row["task"], "task03");
    EXPECT_EQ(row["host"], "node1");
    EXPECT_TRUE(row["energy_method"].is_string()) << "every energy carries its method";
    EXPECT_TRUE(row.contains("duration_s") && row.contains("exit_status") && row.contains("tags"));
    EXPECT_EQ(row["user"], fmt::format("user{}", (std::stoll(row["run_id"].get<std::string>().substr(4)) / 3) % 7));
  }
  // Run 0: 150 samples of work, energy 100 J: 2/3 J per sample.
  r = timed("/api/v1/runs?q=gen-000000");
  rows = json::parse(r.body);
  ASSERT_EQ(rows.size(), 1u) << r.body;
  EXPECT_DOUBLE_EQ(rows[0]["j_per_unit"].get<double>(), 100.0 / 150.0);
  EXPECT_EQ(rows[0]["work_unit"], "samples");
  EXPECT_TRUE(json::parse(get("/api/v1/runs?q=gen-000001").body)[0]["j_per_unit"].is_null()) << "two units";
  auto one = json::parse(get("/api/v1/runs/gen-000000").body);
  EXPECT_DOUBLE_EQ(one["j_per_unit"].get<double>(), 100.0 / 150.0);

  // Job 5010: runs 30, 31, 32 on node0..2, the total with its method.
  r = timed("/api/v1/jobs/5010");
  ASSERT_EQ(r.status, 200) << r.body;
  auto job = json::parse(r.body);
  EXPECT_EQ(job["nodes"], json::array({"node0", "node1", "node2"}));
  auto e = [](int64_t i) { return 100 + static_cast<double>((7919 * i) % 10000) / 10.0; };
  EXPECT_DOUBLE_EQ(job["total_energy_j"].get<double>(), e(30) + e(31) + e(32));
  EXPECT_TRUE(job["energy_method"].get<std::string>().starts_with("mixed"));
  EXPECT_EQ(job["slurm"]["slurm_partition"], "gpu");
  EXPECT_EQ(get("/api/v1/jobs/424242").status, 404);
  EXPECT_EQ(get("/api/v1/jobs/a%20b").status, 400);

  // Bad queries are 400s that name the parameter; the pages are there; the comparison's path is not ours.
  for (const char* bad : {"/api/v1/runs?sort=power", "/api/v1/runs?from=yesterday", "/api/v1/runs?tag=x",
                          "/api/v1/runs?method=guess", "/api/v1/runs?task=a&task=b"}) {
    auto b = get(bad);
    EXPECT_EQ(b.status, 400) << bad;
    EXPECT_NE(b.body.find("query parameter"), std::string::npos) << b.body;
  }
  r = get("/runs?task=task03");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("/api/v1/runs"), std::string::npos);
  EXPECT_EQ(r.body.find("plotly"), std::string::npos) << "/runs draws no chart";
  EXPECT_EQ(get("/jobs/5010").status, 200);
  r = get("/runs/gen-000042");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("x-wattscope-cache"), "miss");
  EXPECT_NE(r.body.find("/assets/plotly-"), std::string::npos) << "plotly.js linked, not embedded";
  EXPECT_LT(r.body.size(), 1u << 20);
  EXPECT_EQ(get("/runs/gen-000042").header("x-wattscope-cache"), "hit");
  EXPECT_EQ(get("/runs/no-such-run").status, 404);
  EXPECT_NE(get("/runs/compare").status, 200) << "not served here (the comparison view is its own route)";

  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
}

} // namespace

TEST(RunsApi, ServesFiltersRunsJobsAndPagesFromSqlite) {
  TempDir dir;
  generate_runs(wattscope::parse_store(dir / "gen.db"), 10000);
  double slowest = 0;
  expect_serve(dir / "gen.db", dir, 10000, slowest);
  std::cout << "[ RUNS ] sqlite, 10,000 runs: slowest filtered /api/v1/runs or job answer " << slowest << " ms\n";
}

TEST(RunsApi, ServesFiltersRunsJobsAndPagesFromMariaDb) {
  MariaDb db;
  MysqlPassword pw;
  generate_runs(wattscope::parse_store(db.url()), 10000);
  TempDir dir;
  double slowest = 0;
  expect_serve(db.url(), dir, 10000, slowest);
  std::cout << "[ RUNS ] mariadb, 10,000 runs: slowest filtered /api/v1/runs or job answer " << slowest << " ms\n";
}

} // namespace unit_runs_query
