// issue 35: MariaDB answers a search (q) from run_text, a table of each run's searchable text in start order, where
// it compared five columns of every run (127-170 ms at 100,000 runs). The truth here is the scan every store shares
// (StoreReader::runs_query: run_passes over every run, sorted in C++), never what the code under test said before.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../support/mariadb.hpp"
#include "../support/runs_filter.hpp"
#include "../support/runs_generator.hpp"
#include "../support/support.hpp"
#include "server/query.hpp"
#include "sinks/runs_query.hpp"
#include "sinks/sink.hpp"
#include "sinks/store.hpp"

namespace unit_run_text {
using namespace wstest;
using wattscope::RunsFilter;

namespace {

constexpr int64_t kRuns = 60;

RunsFilter parsed(const std::string& q) {
  return parsed_filter(q);
}

std::vector<std::string> ids_of(const std::vector<wattscope::RunInfo>& runs) {
  std::vector<std::string> out;
  for (const auto& r : runs)
    out.push_back(r.run_id);
  return out;
}

// Every page of `page_size` of `query` is the scan's slice, with the scan's total.
void expect_scan_pages(wattscope::StoreReader& reader, const std::string& query, size_t page_size) {
  SCOPED_TRACE(query);
  const RunsFilter f = parsed(query);
  const auto truth = reader.wattscope::StoreReader::runs_query(f, 0, 100000);
  std::vector<std::string> got;
  for (size_t offset = 0; offset < truth.runs.size() + page_size; offset += page_size) {
    const auto page = reader.runs_query(f, offset, page_size);
    ASSERT_EQ(page.total, truth.total) << "offset " << offset;
    ASSERT_EQ(page.work.size(), page.runs.size());
    for (const auto& r : page.runs)
      got.push_back(r.run_id);
  }
  EXPECT_EQ(got, ids_of(truth.runs));
}

constexpr const char* kSorts[] = {"start",   "-start",      "duration",     "-duration",  "energy",
                                  "-energy", "exit_status", "-exit_status", "j_per_unit", "-j_per_unit"};

// Searches many runs pass and few, cases changed, LIKE's own characters, JSON's quote, a date range, and beside
// other filters (those read each run's row of run_text by its key), in every order.
void expect_searches(const wattscope::StoreSpec& spec) {
  auto reader = wattscope::open_reader(spec);
  for (const char* q : {"seed%203", "TASK1", "gen-00000", "node2", "100%25", "done_x", "_x", "%22seed%22%3A4",
                        "GEN-000007", "no-such-text"})
    for (const char* sort : kSorts)
      expect_scan_pages(*reader, fmt::format("q={}&sort={}", q, sort), 7);
  for (const char* sort : {"start", "-start", "-energy", "duration"}) {
    expect_scan_pages(
        *reader, fmt::format("q=seed&from={}&to={}&sort={}", kGenBaseMs + 10 * 60000, kGenBaseMs + 40 * 60000, sort),
        4);
    expect_scan_pages(*reader, fmt::format("q=seed%201&task=task01&sort={}", sort), 2);
    expect_scan_pages(*reader, fmt::format("q=node&user=user2&sort={}", sort), 5);
    expect_scan_pages(*reader, fmt::format("q=SEED&tag=slurm_partition%3Ddebug&sort={}", sort), 5);
    expect_scan_pages(*reader, fmt::format("q=gen-00001&method=counter&sort={}", sort), 2);
    expect_scan_pages(*reader, fmt::format("q=node&tag=seed%3D2&tag=slurm_partition%3Dgpu&sort={}", sort), 3);
  }
}

std::string count(MariaDb& db, const std::string& where) {
  return db.sql("SELECT COUNT(*) FROM wattscope." + where);
}

// Whether the reader answers the search from run_text: texts changed there alone are what it finds, one run (few
// pass: run_text joined to the runs) and 40 runs (many pass: the energy index walked, each run's text looked up), in
// start order and by energy.
bool answers_from_text(MariaDb& db, const wattscope::StoreSpec& spec) {
  db.sql("UPDATE wattscope.run_text SET text = CONCAT(text, '\\nonezzz') WHERE run_id = 'gen-000001'");
  db.sql("UPDATE wattscope.run_text SET text = CONCAT(text, '\\nmanyzzz') WHERE run_id < 'gen-000040'");
  auto reader = wattscope::open_reader(spec);
  bool all = true;
  for (const char* sort : {"&sort=-start", "&sort=-energy"}) {
    const auto one = reader->runs_query(parsed(std::string("q=ONEZZZ") + sort), 0, 10);
    all = all && one.total == 1 && one.runs.size() == 1 && one.runs[0].run_id == "gen-000001";
    const auto many = reader->runs_query(parsed(std::string("q=manyzzz") + sort), 0, 7);
    all = all && many.total == 40 && many.runs.size() == 7;
  }
  db.sql("UPDATE wattscope.run_text SET text = SUBSTRING_INDEX(text, '\\nmanyzzz', 1)");
  db.sql("UPDATE wattscope.run_text SET text = SUBSTRING_INDEX(text, '\\nonezzz', 1)");
  return all;
}

// Runs whose text is past ASCII or holds the search's own characters: q's rule is ASCII letters in either case and
// every other byte as it is, on every store.
std::vector<wattscope::RunInfo> odd_runs() {
  std::vector<wattscope::RunInfo> out;
  auto add = [&](int64_t i, std::string task, std::string command, std::string tags) {
    auto r = generated_run(i);
    r.task = std::move(task);
    r.command = std::move(command);
    r.tags = std::move(tags);
    out.push_back(std::move(r));
  };
  add(kRuns, "CAFÉ-ÉCOLE", "python train.py", "{}");
  add(kRuns + 1, "kelvin", "python \u212Aelvin.py --rate 100%", "{\"note\":\"Straße\"}");
  add(kRuns + 2, "x_y", "echo 'a!b' 50%_off", "{\"tab\":\"a\\tb\"}");
  return out;
}

void write_runs(const wattscope::StoreSpec& spec, const std::vector<wattscope::RunInfo>& runs) {
  for (const auto& r : runs) {
    auto sink = wattscope::open_sink(spec, false);
    sink->begin_run(r);
    sink->end_run(r);
  }
}

constexpr const char* kOddQueries[] = {
    "%C3%89",         // É: CAFÉ's
    "%C3%A9",         // é: nobody's (MariaDB's LOWER() would find CAFÉ)
    "caf%C3%89",      // cafÉ: CAFÉ (ASCII letters folded, É as it is)
    "caf%C3%A9",      // café: nobody's
    "kelvin",         // the task only, not the Kelvin sign's command
    "%E2%84%AAELVIN", // the Kelvin sign's command
    "stra%C3%9Fe",    // Straße
    "STRASSE",        // nobody's: no fold of ß
    "100%25",         // % as itself
    "%25_o",          // % then _ as themselves
    "x_y",            // _ as itself
    "a!b",            // LIKE's escape character as itself
    "!",              //
    "%FF",            // not UTF-8: nobody's, no error
    "a%5Ctb",         // the JSON escape as text: the tab tag's
    "%5C",            // a backslash
};

} // namespace

TEST(RunText, EveryWritersRunHasItsRowAndEverySearchIsTheScans) {
  MariaDb db;
  MysqlPassword pw;
  const auto spec = wattscope::parse_store(db.url());
  generate_runs(spec, kRuns);
  EXPECT_EQ(count(db, "run_text"), std::to_string(kRuns) + "\n");
  EXPECT_EQ(count(db, "runs WHERE run_tags_keyed IS NULL OR run_tags_keyed <> 2"), "0\n");
  EXPECT_EQ(count(db, "run_text t JOIN wattscope.run_tags q ON q.run_id = t.run_id AND q.tag_key = '@q' JOIN "
                      "wattscope.runs r ON r.run_id = t.run_id WHERE t.text = CAST(q.tag_value AS BINARY) AND "
                      "t.start_ms = r.start_ms"),
            std::to_string(kRuns) + "\n")
      << "each run's row: its @q text, its start";
  EXPECT_TRUE(answers_from_text(db, spec));
  expect_searches(spec);
  // A run written again (its end) keeps one row.
  generate_runs(spec, 2, 0);
  EXPECT_EQ(count(db, "run_text"), std::to_string(kRuns) + "\n");
}

// SQLite answers a search in one statement (the count in each row of the page): the same pages as the scan.
TEST(RunText, SqliteSearchesAreTheScans) {
  TempDir dir;
  const auto spec = wattscope::parse_store(dir / "search.db");
  generate_runs(spec, kRuns);
  expect_searches(spec);
}

// More runs pass than one walk lists (the reader's kFewMatches, 1,000): the count from run_text, then the figure's
// index walked (where it pays) or run_text joined to the runs and sorted, in every order.
TEST(RunText, ManyPassingRunsAreCountedThenWalkedOrJoined) {
  MariaDb db;
  MysqlPassword pw;
  const auto spec = wattscope::parse_store(db.url());
  constexpr int64_t kMany = 2400;
  generate_runs(spec, kMany);
  auto reader = wattscope::open_reader(spec);
  // node: every run (the walk pays on every page); task1: task01 and task10-19, 1,320 runs; gen-0001: 1,100 runs
  // (the walk pays for the first pages only); seed 3: 480 runs, one walk.
  for (const char* q : {"node", "TASK1", "gen-0001", "seed%203"})
    for (const char* sort : kSorts)
      expect_scan_pages(*reader, fmt::format("q={}&sort={}", q, sort), 200);
  // Beside one run_tags term, many passing the search: that term's index, each entry's text by key; beside a task,
  // each run's text by key.
  for (const char* other : {"user=user3", "method=mixed", "tag=slurm_partition%3Dgpu", "task=task04"})
    for (const char* sort : kSorts)
      expect_scan_pages(*reader, fmt::format("q=NODE&{}&sort={}", other, sort), 150);
  // Read from run_text: texts changed there alone, on 1,500 runs.
  db.sql("UPDATE wattscope.run_text SET text = CONCAT(text, '\\nmanyzzz') WHERE run_id < 'gen-001500'");
  for (const char* sort : {"-start", "-energy", "duration", "exit_status", "-j_per_unit"}) {
    SCOPED_TRACE(sort);
    const auto page = reader->runs_query(parsed(std::string("q=MANYZZZ&sort=") + sort), 1400, 200);
    EXPECT_EQ(page.total, 1500u);
    EXPECT_EQ(page.runs.size(), 100u);
    for (const auto& r : page.runs)
      EXPECT_LT(r.run_id, "gen-001500");
  }
}

TEST(RunText, TheSearchIsAsciiCaseInsensitiveAndByteExactOnEveryStore) {
  TempDir dir;
  MariaDb db;
  MysqlPassword pw;
  const std::vector<wattscope::StoreSpec> specs = {wattscope::parse_store(dir / "odd.db"),
                                                   wattscope::parse_store("csv:" + dir / "csv"),
                                                   wattscope::parse_store(db.url())};
  for (const auto& spec : specs) {
    generate_runs(spec, 6);
    write_runs(spec, odd_runs());
  }
  auto expect_rule = [&](const wattscope::StoreSpec& spec) {
    auto reader = wattscope::open_reader(spec);
    for (const char* q : kOddQueries)
      for (const char* sort : {"start", "-energy"})
        expect_scan_pages(*reader, fmt::format("q={}&sort={}", q, sort), 2);
  };
  for (const auto& spec : specs) {
    SCOPED_TRACE(spec.location);
    expect_rule(spec);
  }
  // The rule itself, as the scan states it, for the cases where MariaDB's LOWER() would answer otherwise.
  auto reader = wattscope::open_reader(specs[0]);
  auto found = [&](const char* q) { return ids_of(reader->runs_query(parsed(std::string("q=") + q), 0, 10).runs); };
  const std::string cafe = fmt::format("gen-{:06d}", kRuns), kelvin = fmt::format("gen-{:06d}", kRuns + 1);
  EXPECT_EQ(found("caf%C3%89"), std::vector<std::string>{cafe});
  EXPECT_TRUE(found("caf%C3%A9").empty());
  EXPECT_EQ(found("kelvin"), std::vector<std::string>{kelvin}) << "its task, not the sign";
  EXPECT_TRUE(found("STRASSE").empty());
  // MariaDB's way for a store not filled yet (every run's five columns) keeps the rule too.
  db.sql("UPDATE wattscope.runs SET run_tags_keyed = 1 WHERE run_id = 'gen-000002'");
  SCOPED_TRACE("MariaDB, run_text not whole");
  expect_rule(specs[2]);
  EXPECT_FALSE(answers_from_text(db, specs[2]));
}

// A store whose runs have no run_text row (made by an earlier wattscope) is searched the old way until its next writer
// fills the table from run_tags' @q rows; a run written since by an earlier writer (marked 1) sends the search the old
// way until it is filled; rows of runs deleted by hand are removed by the next writer.
TEST(RunText, AnOlderStoreIsSearchedTheOldWayUntilItsNextWriterFillsIt) {
  MariaDb db;
  MysqlPassword pw;
  const auto spec = wattscope::parse_store(db.url());
  generate_runs(spec, kRuns);
  db.sql("DROP TABLE wattscope.run_text");
  db.sql("UPDATE wattscope.runs SET run_tags_keyed = 1");
  for (const char* sort : {"start", "-energy"})
    expect_scan_pages(*wattscope::open_reader(spec), fmt::format("q=seed%203&sort={}", sort), 7);
  generate_runs(spec, 1, kRuns); // the next writer
  EXPECT_EQ(count(db, "run_text"), std::to_string(kRuns + 1) + "\n");
  EXPECT_EQ(count(db, "runs WHERE run_tags_keyed <> 2"), "0\n");
  EXPECT_TRUE(answers_from_text(db, spec));
  expect_searches(spec);
  // An earlier writer's run since: marked 1, its run_text row stale.
  db.sql("UPDATE wattscope.runs SET run_tags_keyed = 1 WHERE run_id = 'gen-000003'");
  db.sql("UPDATE wattscope.run_text SET text = 'stale' WHERE run_id = 'gen-000003'");
  EXPECT_FALSE(answers_from_text(db, spec));
  expect_scan_pages(*wattscope::open_reader(spec), "q=seed%203&sort=-start", 7);
  generate_runs(spec, 1, kRuns + 1);
  EXPECT_EQ(count(db, "run_text WHERE text = 'stale'"), "0\n");
  EXPECT_TRUE(answers_from_text(db, spec));
  // Runs deleted by hand, their run_tags rows with them or not: their run_text rows go at the next writer.
  db.sql("DELETE FROM wattscope.runs WHERE run_id IN ('gen-000013', 'gen-000023')");
  db.sql("DELETE FROM wattscope.run_tags WHERE run_id = 'gen-000013'");
  // Until then a search few runs pass counts the runs found, in any figure's order.
  for (const char* sort : {"energy", "-duration", "exit_status"})
    expect_scan_pages(*wattscope::open_reader(spec), fmt::format("q=gen-00001&sort={}", sort), 4);
  generate_runs(spec, 1, kRuns + 2);
  EXPECT_EQ(count(db, "run_text WHERE run_id IN ('gen-000013', 'gen-000023')"), "0\n");
  EXPECT_EQ(count(db, "run_text"), count(db, "runs"));
  expect_scan_pages(*wattscope::open_reader(spec), "q=seed%203&sort=-start", 7);
  expect_scan_pages(*wattscope::open_reader(spec), "q=seed%203&sort=energy", 3);
}

} // namespace unit_run_text
