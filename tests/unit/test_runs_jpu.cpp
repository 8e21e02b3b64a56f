// issue 35: sort=j_per_unit reads runs.j_per_unit, which a SQL store's writer sets whenever it writes a runs row (never
// per work row), through its index in two walks; every figure is the generator's closed formula, and a store without
// the column is answered as before and filled by its next writer.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <sqlite3.h>

#include <optional>
#include <string>
#include <vector>

#include "../support/runs_filter.hpp"
#include "../support/runs_generator.hpp"
#include "../support/support.hpp"
#include "core/schema.hpp"
#include "server/query.hpp"
#include "sinks/runs_query.hpp"
#include "sinks/sink.hpp"
#include "sinks/store.hpp"

namespace unit_runs_jpu {

using namespace wstest;

namespace {

constexpr int64_t kRuns = 300;

// Run i's J per unit from the generator's formulas (tests/support/runs_generator.hpp): energy over samples, for the
// runs with one unit (i % 3 == 0) and energy (i % 25 != 24).
std::optional<double> expected_jpu(int64_t i) {
  if (i % 3 != 0 || i % 25 == 24) return std::nullopt;
  const double energy = 100 + static_cast<double>((7919 * i) % 10000) / 10.0;
  return energy / (100.0 * static_cast<double>(i % 7 + 1) + 50);
}

wattscope::RunsFilter parsed(const std::string& q) {
  return parsed_filter(q);
}

void exec(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(h, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(h);
  sqlite3_close(h);
}

std::optional<double> stored(const std::string& db, const std::string& run_id) {
  const auto rows = query(db, "SELECT CASE WHEN j_per_unit IS NOT NULL THEN printf('%.17g', j_per_unit) END FROM runs "
                              "WHERE run_id = '" +
                                  run_id + "'");
  if (rows.size() != 1 || !rows[0][0]) return std::nullopt;
  return std::stod(*rows[0][0]);
}

// The run ids of the whole store in the order `q` gives, in pages of 11.
std::vector<std::string> order(const wattscope::StoreSpec& spec, const std::string& q, int64_t n) {
  auto reader = wattscope::open_reader(spec);
  std::vector<std::string> ids;
  for (size_t off = 0; off < static_cast<size_t>(n); off += 11) {
    const auto page = reader->runs_query(parsed(q), off, 11);
    EXPECT_EQ(page.total, static_cast<size_t>(n));
    for (const auto& r : page.runs)
      ids.push_back(r.run_id);
  }
  return ids;
}

std::string plan(const std::string& db, const std::string& sql) {
  std::string out;
  for (const auto& row : query(db, "EXPLAIN QUERY PLAN " + sql))
    out += (row.back() ? *row.back() : std::string()) + "\n";
  return out;
}

// A work row (run_id, seq, ts_ms, amount, unit, phase_id, total), its amount NULL where none is given.
void add_work(wattscope::RowBatch& rows, const std::string& run_id, int64_t seq, std::optional<double> amount,
              const char* unit) {
  using wattscope::Value;
  auto& work = rows.tables[static_cast<size_t>(wattscope::TableId::Work)];
  for (Value v : {Value(run_id), Value(seq), Value(seq), amount ? Value(*amount) : Value(), Value(std::string(unit)),
                  Value(), Value()})
    work.cells.push_back(std::move(v));
}

} // namespace

TEST(RunsQuery, SqliteJPerUnitIsAColumnSetWithTheRunsRowAndWalkedByItsIndex) {
  TempDir dir;
  const std::string db = dir / "gen.db";
  const auto spec = wattscope::parse_store(db);
  generate_runs(spec, kRuns);
  // Every run's column is the formula (energy over the one unit's amount), NULL where the run has none.
  size_t with = 0;
  for (int64_t i = 0; i < kRuns; ++i) {
    const std::string id = fmt::format("gen-{:06d}", i);
    const auto got = stored(db, id), want = expected_jpu(i);
    EXPECT_EQ(got.has_value(), want.has_value()) << id;
    if (got && want) {
      EXPECT_DOUBLE_EQ(*got, *want) << id;
      ++with;
    }
  }
  EXPECT_EQ(with, 96u); // i % 3 == 0: 100 runs, less i = 24, 99, 174, 249 (i % 25 == 24)
  // Each walk of a J-per-unit page reads an index in order: no sort of every run.
  for (const bool desc : {false, true}) {
    wattscope::RunsFilter by_start;
    by_start.descending = desc;
    const auto base = wattscope::runs_sql(by_start, wattscope::SqlDialect::Sqlite);
    const auto parts = wattscope::j_per_unit_page(base, desc, with, 90, 20); // straddles: 6 with it, 14 without
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_EQ(parts[0].offset, 90u);
    EXPECT_EQ(parts[0].limit, 6u);
    EXPECT_EQ(parts[1].offset, 0u);
    EXPECT_EQ(parts[1].limit, 14u);
    for (const auto& part : parts) {
      const std::string p = plan(db, "SELECT run_id FROM runs" + part.sql.where + part.sql.order_by + " LIMIT 20");
      EXPECT_EQ(p.find("TEMP B-TREE"), std::string::npos) << p;
    }
  }
  // A run's figure follows its runs row: work added after the run began counts once its end is written.
  {
    auto sink = wattscope::open_sink(spec, false);
    wattscope::RunInfo r = generated_run(kRuns);
    r.run_id = "late-work";
    r.total_energy_j = 90;
    sink->begin_run(r);
    EXPECT_FALSE(stored(db, "late-work")) << "no work yet";
    wattscope::RowBatch rows;
    auto& work = rows.tables[static_cast<size_t>(wattscope::TableId::Work)];
    for (int k = 0; k < 3; ++k) {
      const auto before = work.cells.size();
      for (const auto& c : wattscope::table(wattscope::TableId::Work).columns) {
        const std::string name(c.name);
        if (name == "run_id")
          work.cells.emplace_back(std::string("late-work"));
        else if (name == "unit")
          work.cells.emplace_back(std::string("steps"));
        else if (name == "amount")
          work.cells.emplace_back(10.0);
        else if (c.type == wattscope::ColType::Int)
          work.cells.emplace_back(int64_t{k});
        else
          work.cells.emplace_back(std::monostate{});
      }
      ASSERT_EQ(work.cells.size() - before, wattscope::table(wattscope::TableId::Work).columns.size());
    }
    sink->write(rows);
    sink->end_run(r);
    ASSERT_TRUE(stored(db, "late-work"));
    EXPECT_DOUBLE_EQ(*stored(db, "late-work"), 3.0) << "90 J over 30 steps";
  }

  // A store from before the column: the reader computes the figure per run, to the same order; its next writer adds
  // the column and fills it for every run (the forward migration).
  const auto asc = order(spec, "sort=j_per_unit", kRuns + 1);
  const auto desc = order(spec, "sort=-j_per_unit", kRuns + 1);
  exec(db, "DROP INDEX runs_by_j_per_unit; ALTER TABLE runs DROP COLUMN j_per_unit;");
  EXPECT_EQ(order(spec, "sort=j_per_unit", kRuns + 1), asc);
  EXPECT_EQ(order(spec, "sort=-j_per_unit", kRuns + 1), desc);
  generate_runs(spec, 3, kRuns + 1);
  EXPECT_EQ(query(db, "SELECT COUNT(*) FROM runs WHERE j_per_unit IS NOT NULL")[0][0], std::optional<std::string>("98"))
      << "96, late-work, and run 303 (of 301-303, the one with a single unit)";
  EXPECT_EQ(order(spec, "sort=j_per_unit", kRuns + 4).size(), static_cast<size_t>(kRuns + 4));
}

// The column against j_per_unit() of the stored work, case by case, and for a run still going (from h10, issue 35).
TEST(RunsQuery, SqliteJPerUnitColumnEqualsJPerUnitOfTheStoredWork) {
  using namespace wattscope;
  TempDir dir;
  const std::string db = dir / "cases.db";
  const auto spec = parse_store(db);
  struct Case {
    const char* id;
    std::optional<double> energy;
    std::vector<std::pair<std::optional<double>, const char*>> work;
    std::optional<double> want;
  };
  const std::vector<Case> cases = {
      {"none", 50.0, {}, std::nullopt},
      {"one", 50.0, {{10.0, "samples"}}, 5.0},
      {"one-in-three-rows", 60.0, {{10.0, "samples"}, {0.0, "samples"}, {20.0, "samples"}}, 2.0},
      {"two-units", 50.0, {{10.0, "samples"}, {20.0, "tokens"}}, std::nullopt},
      {"amount-zero", 50.0, {{0.0, "samples"}}, std::nullopt},
      {"zero-and-one", 50.0, {{0.0, "tokens"}, {25.0, "samples"}}, std::nullopt},     // two units, one of them at 0
      {"null-amount-unit", 50.0, {{std::nullopt, "tokens"}, {25.0, "samples"}}, 2.0}, // a NULL amount is no work
      {"no-energy", std::nullopt, {{10.0, "samples"}}, std::nullopt},
  };
  int64_t start = kGenBaseMs;
  for (const auto& c : cases) {
    auto sink = open_sink(spec, false);
    RunInfo r;
    r.run_id = c.id;
    r.task = "t";
    r.host = "h";
    r.start_ms = start += 1000;
    sink->begin_run(r);
    RowBatch rows;
    int64_t seq = 0;
    for (const auto& [amount, unit] : c.work)
      add_work(rows, c.id, seq++, amount, unit);
    sink->write(rows);
    r.end_ms = r.start_ms + 500;
    r.total_energy_j = c.energy;
    sink->end_run(r);
  }
  auto reader = open_reader(spec);
  for (const auto& run : reader->runs()) {
    const auto& c = *std::find_if(cases.begin(), cases.end(), [&](const Case& k) { return run.run_id == k.id; });
    const auto from_work = j_per_unit(run, read_run_work(*reader, run));
    EXPECT_EQ(from_work, c.want) << c.id;
    EXPECT_EQ(stored(db, run.run_id), from_work) << c.id;
  }

  // A run still going: work without a runs row leaves the column as the last runs row set it; the checkpoint (the
  // runs row in a batch, with more work) brings it to j_per_unit() of all its work so far.
  auto sink = open_sink(spec, false);
  RunInfo r;
  r.run_id = "going";
  r.task = "t";
  r.host = "h";
  r.start_ms = start += 1000;
  r.total_energy_j = 30.0;
  sink->begin_run(r);
  RowBatch first;
  add_work(first, "going", 0, 10.0, "samples");
  sink->write(first);
  EXPECT_EQ(stored(db, "going"), std::nullopt) << "no runs row written since its work";
  RowBatch checkpoint;
  add_work(checkpoint, "going", 1, 5.0, "samples");
  r.total_energy_j = 45.0;
  append_run_row(r, checkpoint.tables[static_cast<size_t>(TableId::Runs)]);
  sink->write(checkpoint);
  EXPECT_EQ(stored(db, "going"), std::optional<double>(3.0));
  {
    auto rd = open_reader(spec);
    RunInfo going;
    for (const auto& run : rd->runs())
      if (run.run_id == "going") going = run;
    EXPECT_EQ(stored(db, "going"), j_per_unit(going, read_run_work(*rd, going)));
    // It sorts among the finished runs by its figure: 2.0 (two runs, by start), 3.0, 5.0, then the runs without one.
    const auto page = rd->runs_query(parsed("sort=j_per_unit"), 0, 50);
    ASSERT_GE(page.runs.size(), 4u);
    EXPECT_EQ(page.runs[0].run_id, "one-in-three-rows");
    EXPECT_EQ(page.runs[1].run_id, "null-amount-unit");
    EXPECT_EQ(page.runs[2].run_id, "going");
    EXPECT_EQ(page.runs[3].run_id, "one");
    const auto down = rd->runs_query(parsed("sort=-j_per_unit"), 0, 50);
    ASSERT_EQ(down.runs.size(), 9u);
    EXPECT_EQ(down.runs[0].run_id, "one");
    EXPECT_EQ(down.runs[1].run_id, "going");
    EXPECT_FALSE(j_per_unit(down.runs[4], down.work[4])) << "runs without the figure last in either direction";
    EXPECT_FALSE(j_per_unit(down.runs[8], down.work[8]));
  }
  sink->end_run(r);
  EXPECT_EQ(stored(db, "going"), std::optional<double>(3.0));
}

// MariaDB: the same column, through its virtual-column indexes, and the same migration.
} // namespace unit_runs_jpu
