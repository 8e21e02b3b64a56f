// issue 35: MariaDB's keyed run_tags pages rest on runs.run_tags_keyed, a mark a writer sets with a run's run_tags
// rows, where they counted run_tags' @method rows against the runs at every query. What an older wattscope does to a
// store (adds runs it names its columns for, leaves their rows unkeyed) and what a person may do (delete runs) must
// still give the answer the runs' own JSON gives: the truth here is run_passes over every run, in C++.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../support/mariadb.hpp"
#include "../support/runs_filter.hpp"
#include "../support/runs_generator.hpp"
#include "server/query.hpp"
#include "sinks/runs_query.hpp"
#include "sinks/store.hpp"

namespace unit_run_tags_mark {
using namespace wstest;
using wattscope::RunsFilter;

namespace {

constexpr int64_t kRuns = 60;

RunsFilter parsed(const std::string& q) {
  return parsed_filter(q);
}

// Each one-filter query the keyed pages answer, in start order and by energy: the count and the runs are those that
// pass by the runs' own fields, in order.
void expect_truth(const wattscope::StoreSpec& spec) {
  auto reader = wattscope::open_reader(spec);
  const auto all = reader->runs();
  for (const char* filter : {"tag=seed%3D4", "tag=slurm_partition%3Ddebug", "user=user2", "method=mixed"})
    for (const char* sort : {"sort=start", "sort=-start", "sort=-energy"}) {
      const std::string q = std::string(filter) + "&" + sort;
      SCOPED_TRACE(q);
      const RunsFilter f = parsed(q);
      std::vector<const wattscope::RunInfo*> want;
      for (const auto& r : all)
        if (wattscope::run_passes(r, f)) want.push_back(&r);
      std::stable_sort(want.begin(), want.end(), [&](const auto* a, const auto* b) {
        if (f.sort == wattscope::RunsSortKey::Energy) {
          if (a->total_energy_j.has_value() != b->total_energy_j.has_value()) return a->total_energy_j.has_value();
          if (a->total_energy_j && *a->total_energy_j != *b->total_energy_j)
            return *a->total_energy_j > *b->total_energy_j;
        }
        const bool desc = f.descending;
        if (a->start_ms != b->start_ms) return desc ? a->start_ms > b->start_ms : a->start_ms < b->start_ms;
        return desc ? a->run_id > b->run_id : a->run_id < b->run_id;
      });
      std::vector<std::string> want_ids, got_ids;
      for (const auto* r : want)
        want_ids.push_back(r->run_id);
      const auto page = reader->runs_query(f, 0, 1000);
      for (const auto& r : page.runs)
        got_ids.push_back(r.run_id);
      EXPECT_EQ(page.total, want_ids.size());
      EXPECT_EQ(got_ids, want_ids);
    }
}

// Whether the reader answers `tag=seed=N` from run_tags' keyed index: a key changed there alone is what it finds.
bool answers_from_keys(MariaDb& db, const wattscope::StoreSpec& spec) {
  db.sql("UPDATE wattscope.run_tags SET value_key = 'keyed' WHERE run_id = 'gen-000001' AND tag_key = 'seed'");
  const auto page = wattscope::open_reader(spec)->runs_query(parsed("tag=seed%3Dkeyed"), 0, 10);
  db.sql("UPDATE wattscope.run_tags SET value_key = tag_value WHERE run_id = 'gen-000001' AND tag_key = 'seed'");
  return page.total == 1;
}

std::string count(MariaDb& db, const std::string& where) {
  return db.sql("SELECT COUNT(*) FROM wattscope." + where);
}

// An older wattscope's INSERT: the columns it knows, named (a copy of run `from`'s fields under another id).
void insert_as_older_writer(MariaDb& db, const std::string& id, const std::string& from) {
  const std::string cols = "task, command, host, cpu_model, start_ms, end_ms, duration_s, exit_status, interval_ms, "
                           "samples, total_energy_j, tags, wattscope_version, summary";
  db.sql("INSERT INTO wattscope.runs (run_id, " + cols + ") SELECT '" + id + "', " + cols +
         " FROM wattscope.runs WHERE run_id = '" + from + "'");
}

} // namespace

TEST(RunTagsMark, EveryWritersRunIsMarkedAndTheKeyedPagesAnswer) {
  MariaDb db;
  MysqlPassword pw;
  const auto spec = wattscope::parse_store(db.url());
  generate_runs(spec, kRuns);
  EXPECT_EQ(count(db, "runs WHERE run_tags_keyed IS NULL"), "0\n");
  EXPECT_EQ(count(db, "runs WHERE run_tags_keyed = 2"), std::to_string(kRuns) + "\n") << "keyed, and run_text written";
  EXPECT_TRUE(answers_from_keys(db, spec));
  expect_truth(spec);
}

// A run an older wattscope adds has no mark (the column's default): the pages answer from the runs' JSON until the
// next writer writes its rows and marks it. The two counts this replaces were equal when, beside it, a run had been
// deleted by hand (its rows left behind): they took the keyed pages, counting the deleted run and missing the new one.
TEST(RunTagsMark, AnOlderWritersRunIsReadTheOldWayUntilTheNextWriterMarksIt) {
  MariaDb db;
  MysqlPassword pw;
  const auto spec = wattscope::parse_store(db.url());
  generate_runs(spec, kRuns);
  db.sql("DELETE FROM wattscope.runs WHERE run_id = 'gen-000014'"); // seed 4, partition debug, method mixed
  insert_as_older_writer(db, "gen-000070", "gen-000009");           // seed 4, partition gpu, user3
  EXPECT_EQ(count(db, "runs"), count(db, "run_tags WHERE tag_key = '@method'")) << "the counts see nothing amiss";
  EXPECT_EQ(count(db, "runs WHERE run_tags_keyed IS NULL"), "1\n");
  EXPECT_FALSE(answers_from_keys(db, spec));
  expect_truth(spec);
  // The next writer writes the new run's rows and marks it, and removes the deleted run's rows.
  generate_runs(spec, 1, kRuns);
  EXPECT_EQ(count(db, "runs WHERE run_tags_keyed IS NULL"), "0\n");
  EXPECT_EQ(count(db, "run_tags WHERE run_id = 'gen-000014'"), "0\n");
  EXPECT_EQ(count(db, "run_tags WHERE run_id = 'gen-000070' AND tag_key = 'seed' AND value_key = '4'"), "1\n");
  EXPECT_TRUE(answers_from_keys(db, spec));
  expect_truth(spec);
}

// A run whose rows are whole and keyed but unmarked (written by the wattscope before the mark) is read the old way,
// then marked by the next writer without its rows rewritten (their start set where it was left 0); a run whose rows
// an older wattscope rewrote without keys (its @method row unkeyed) is read the old way until a writer keys it.
TEST(RunTagsMark, UnmarkedOrUnkeyedRunsAreReadTheOldWay) {
  MariaDb db;
  MysqlPassword pw;
  const auto spec = wattscope::parse_store(db.url());
  generate_runs(spec, kRuns);
  db.sql("UPDATE wattscope.runs SET run_tags_keyed = NULL WHERE run_id = 'gen-000005'");
  // as the wattscope before the mark left a run it back-filled: its keyed rows without its start
  db.sql("UPDATE wattscope.run_tags SET start_ms = 0 WHERE run_id = 'gen-000005'");
  EXPECT_FALSE(answers_from_keys(db, spec));
  expect_truth(spec);
  generate_runs(spec, 1, kRuns);
  EXPECT_EQ(count(db, "runs WHERE run_tags_keyed IS NULL"), "0\n");
  EXPECT_EQ(count(db, "run_tags t JOIN wattscope.runs r USING (run_id) WHERE t.start_ms <> r.start_ms"), "0\n");
  EXPECT_TRUE(answers_from_keys(db, spec));
  expect_truth(spec);
  db.sql("UPDATE wattscope.run_tags SET value_key = NULL, start_ms = NULL WHERE run_id = 'gen-000006'");
  EXPECT_FALSE(answers_from_keys(db, spec));
  expect_truth(spec);
  generate_runs(spec, 1, kRuns + 1);
  EXPECT_TRUE(answers_from_keys(db, spec));
  expect_truth(spec);
}

// A run deleted by hand leaves its run_tags rows until the next writer removes them: a page that would hold it is
// answered from the runs' JSON (its count included), not with the run missing and counted.
TEST(RunTagsMark, APageHoldingARunDeletedByHandIsReadTheOldWay) {
  MariaDb db;
  MysqlPassword pw;
  const auto spec = wattscope::parse_store(db.url());
  generate_runs(spec, kRuns);
  db.sql("DELETE FROM wattscope.runs WHERE run_id = 'gen-000014'");
  EXPECT_EQ(count(db, "run_tags WHERE run_id = 'gen-000014' AND tag_key = '@method'"), "1\n");
  expect_truth(spec); // every page of 1,000 holds it where the filter passes it
  generate_runs(spec, 1, kRuns);
  EXPECT_EQ(count(db, "run_tags WHERE run_id = 'gen-000014'"), "0\n");
  EXPECT_TRUE(answers_from_keys(db, spec));
  expect_truth(spec);
}

} // namespace unit_run_tags_mark
