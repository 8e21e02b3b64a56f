// issue 35: the runs table sorted by J per unit reads runs.j_per_unit through its index (SQLite), kept by triggers;
// every figure is the generator's closed formula, and a store without the column is answered as before.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <optional>
#include <string>
#include <vector>

#include "../support/runs_generator.hpp"
#include "../support/support.hpp"
#include "server/query.hpp"
#include "sinks/runs_query.hpp"
#include "sinks/store.hpp"

namespace unit_runs_jpu {

using namespace wstest;

namespace {

constexpr int64_t kRuns = 300;

// Run i's J per unit from the generator's formulas: energy over samples, for runs with one unit and energy.
std::optional<double> expected_jpu(int64_t i) {
  if (i % 3 != 0 || i % 25 == 24) return std::nullopt;
  const double energy = 100 + static_cast<double>((7919 * i) % 10000) / 10.0;
  return energy / (100.0 * static_cast<double>(i % 7 + 1) + 50);
}

wattscope::RunsFilter parsed(const std::string& q) {
  auto r = wattscope::query::parse_runs_list(q);
  EXPECT_TRUE(std::holds_alternative<wattscope::query::RunsListQuery>(r)) << q;
  return std::get<wattscope::query::RunsListQuery>(r).filter;
}

void exec(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(h, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(h);
  sqlite3_close(h);
}

// The run ids of the whole store in the order `q` gives, checked against the formulas on the way: figures in order,
// the runs without one last, ties by start.
std::vector<std::string> order(const wattscope::StoreSpec& spec, const std::string& q, int64_t n) {
  auto reader = wattscope::open_reader(spec);
  const auto page = reader->runs_query(parsed(q), 0, 1000);
  EXPECT_EQ(page.total, static_cast<size_t>(n));
  const bool desc = q.find("-j_per_unit") != std::string::npos;
  std::vector<std::string> ids;
  std::optional<double> prev;
  bool missing_seen = false;
  for (size_t k = 0; k < page.runs.size(); ++k) {
    const int64_t i = std::stoll(page.runs[k].run_id.substr(4));
    const auto want = expected_jpu(i);
    const auto got = wattscope::j_per_unit(page.runs[k], page.work[k]);
    EXPECT_EQ(got.has_value(), want.has_value()) << page.runs[k].run_id;
    if (want) {
      EXPECT_FALSE(missing_seen) << "runs without J per unit come last: " << page.runs[k].run_id;
      if (got) EXPECT_DOUBLE_EQ(*got, *want);
      if (prev) EXPECT_TRUE(desc ? *prev >= *want : *prev <= *want) << page.runs[k].run_id;
      prev = want;
    } else {
      missing_seen = true;
    }
    ids.push_back(page.runs[k].run_id);
  }
  return ids;
}

std::string plan(const std::string& db, bool desc) {
  auto sql = wattscope::runs_sql(parsed(desc ? "sort=-j_per_unit" : "sort=j_per_unit"), wattscope::SqlDialect::Sqlite,
                                 false, false, true);
  std::string out;
  for (const auto& row : query(db, "EXPLAIN QUERY PLAN SELECT run_id FROM runs" + sql.order_by + " LIMIT 50"))
    out += (row.back() ? *row.back() : std::string()) + "\n";
  return out;
}

} // namespace

TEST(RunsQuery, SqliteJPerUnitIsAnIndexedColumnKeptByTriggers) {
  TempDir dir;
  const std::string db = dir / "gen.db";
  const auto spec = wattscope::parse_store(db);
  generate_runs(spec, kRuns);
  // Every run's column is the formula (energy over the one unit's amount), NULL where the run has none.
  size_t with = 0;
  for (const auto& row :
       query(db, "SELECT run_id, CASE WHEN j_per_unit IS NOT NULL THEN printf('%.17g', j_per_unit) END FROM runs")) {
    ASSERT_TRUE(row[0]);
    const auto want = expected_jpu(std::stoll(row[0]->substr(4)));
    EXPECT_EQ(row[1].has_value(), want.has_value()) << *row[0];
    if (row[1] && want) {
      EXPECT_DOUBLE_EQ(std::stod(*row[1]), *want) << *row[0];
      ++with;
    }
  }
  EXPECT_EQ(with, 96u); // i % 3 == 0: 100 runs, less i = 24, 99, 174, 249 (i % 25 == 24)
  // Both directions walk an index: no sort of every run.
  for (bool desc : {false, true}) {
    const std::string p = plan(db, desc);
    EXPECT_NE(p.find(desc ? "runs_by_j_per_unit_desc" : "runs_by_j_per_unit"), std::string::npos) << p;
    EXPECT_EQ(p.find("TEMP B-TREE"), std::string::npos) << p;
  }
  const auto asc = order(spec, "sort=j_per_unit", kRuns);
  const auto desc = order(spec, "sort=-j_per_unit", kRuns);
  // A work row removed: run 1 (10 samples, 20 tokens) now has one unit, so 10 samples: its energy / 10.
  exec(db, "DELETE FROM work WHERE run_id = 'gen-000001' AND unit = 'tokens'");
  const auto one = query(db, "SELECT CASE WHEN j_per_unit IS NOT NULL THEN printf('%.17g', j_per_unit) END FROM runs "
                             "WHERE run_id = 'gen-000001'");
  ASSERT_EQ(one.size(), 1u);
  ASSERT_TRUE(one[0][0]);
  EXPECT_DOUBLE_EQ(std::stod(*one[0][0]), (100 + static_cast<double>(7919 % 10000) / 10.0) / 10);
  // The run's energy rewritten: the figure follows.
  exec(db, "UPDATE runs SET total_energy_j = 20 WHERE run_id = 'gen-000001'");
  EXPECT_DOUBLE_EQ(std::stod(query(db, "SELECT j_per_unit FROM runs WHERE run_id = 'gen-000001'")[0][0].value_or("0")),
                   2.0);
  exec(db, "UPDATE runs SET total_energy_j = NULL WHERE run_id = 'gen-000001'");
  EXPECT_FALSE(query(db, "SELECT j_per_unit FROM runs WHERE run_id = 'gen-000001'")[0][0]);

  // A store from before the column (no column, index or trigger): the reader computes the figure per run, to the
  // same order; its next writer adds the column and fills it for every run (the forward migration).
  TempDir old_dir;
  const std::string old_db = old_dir / "old.db";
  const auto old_spec = wattscope::parse_store(old_db);
  generate_runs(old_spec, kRuns);
  exec(old_db,
       "DROP TRIGGER runs_j_per_unit_insert; DROP TRIGGER runs_j_per_unit_energy; "
       "DROP TRIGGER work_j_per_unit_insert; DROP TRIGGER work_j_per_unit_update; "
       "DROP TRIGGER work_j_per_unit_delete; DROP INDEX runs_by_j_per_unit; DROP INDEX runs_by_j_per_unit_desc; "
       "ALTER TABLE runs DROP COLUMN j_per_unit;");
  EXPECT_EQ(order(old_spec, "sort=j_per_unit", kRuns), asc);
  EXPECT_EQ(order(old_spec, "sort=-j_per_unit", kRuns), desc);
  generate_runs(old_spec, 3, kRuns);
  EXPECT_EQ(query(old_db, "SELECT COUNT(*) FROM runs WHERE j_per_unit IS NOT NULL")[0][0],
            std::optional<std::string>("97"))
      << "96, and run 300";
  EXPECT_NE(plan(old_db, false).find("runs_by_j_per_unit"), std::string::npos);
  order(old_spec, "sort=j_per_unit", kRuns + 3);
}

} // namespace unit_runs_jpu
