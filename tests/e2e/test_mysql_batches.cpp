// Issue 33: the MySQL store writes a batch as multi-row INSERTs, as many rows a statement as max_allowed_packet
// takes, and the batch lands whole (every row, NULLs and awkward text included) or not at all.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "../support/mariadb.hpp"
#include "core/schema.hpp"
#include "core/time_util.hpp"
#include "sinks/mysql/mysql_store.hpp"

namespace e2e_mysql_batches { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using namespace wattscope;

namespace {

constexpr int kPacket = 65536; // the server's max_allowed_packet in these tests: a large batch needs many statements

// A private server whose connections take kPacket-byte packets and treat a backslash as an ordinary character
// (NO_BACKSLASH_ESCAPES: text escaped the default way would break out of its quotes there).
struct Server {
  MariaDb db;
  TempDir dir;
  Server() {
    db.sql(fmt::format("SET GLOBAL max_allowed_packet = {}; SET GLOBAL sql_mode = "
                       "CONCAT(@@GLOBAL.sql_mode, ',NO_BACKSLASH_ESCAPES')",
                       kPacket));
    setenv("WATTSCOPE_MYSQL_PASSWORD", "secret", 1);
    setenv("WATTSCOPE_SPILL_DIR", (dir / "spill").c_str(), 1);
  }
  long status(const char* name) const {
    const std::string r = db.sql(fmt::format("SHOW GLOBAL STATUS LIKE '{}'", name));
    return std::stol(r.substr(r.find('\t') + 1));
  }
  long inserts() const { return status("Com_insert"); }
  long prepared_executions() const { return status("Com_stmt_execute"); }
};

RunInfo new_run() {
  RunInfo run;
  run.start_ms = wall_now_ms();
  run.run_id = new_run_id(run.start_ms);
  run.task = "batches";
  run.host = "h";
  run.interval_ms = 1000;
  return run;
}

void add(TableRows& t, std::initializer_list<Value> row) {
  ASSERT_EQ(row.size(), t.columns());
  t.cells.insert(t.cells.end(), row.begin(), row.end());
}

// Values that a decimal round trip would lose if written carelessly, and missing ones.
Value util_of(int r) {
  if (r % 7 == 3) return Value();
  if (r % 11 == 5) return Value(1.0 / 3.0 * r);
  if (r % 13 == 1) return Value(std::nextafter(50.0, 100.0));
  if (r == 17) return Value(1e-300);
  if (r == 19) return Value(NAN); // no DOUBLE holds it: stored as missing
  return Value(0.1 * r);
}

const std::string kTexts[] = {"plain",
                              "it's",
                              "back\\slash\\",
                              "x'); DROP TABLE runs; -- \"q\" `b`",
                              "\\'; DELETE FROM events; --",
                              "ünïcödé ✓ 𝄞",
                              std::string("nul\0inside", 10),
                              ""};

// Every row of one table of the run, as text, through the store's own reader.
std::vector<std::string> stored(const std::string& url, const RunInfo& run, TableId id) {
  auto reader = make_mysql_reader(parse_mysql_url(url));
  std::vector<std::string> out;
  reader->scan(id, run, [&](std::span<const Value> row) {
    std::string line;
    for (const auto& v : row) {
      if (is_null(v))
        line += "|NULL";
      else if (auto i = std::get_if<int64_t>(&v))
        line += fmt::format("|{}", *i);
      else if (auto d = std::get_if<double>(&v))
        line += fmt::format("|{}", *d); // the shortest text that reads back as this double: exact
      else
        line += "|" + std::string(value_text(v));
    }
    out.push_back(line);
  });
  return out;
}

std::vector<std::string> expected(const TableRows& t) {
  std::vector<std::string> out;
  for (size_t r = 0; r < t.rows(); ++r) {
    std::string line;
    for (size_t c = 0; c < t.columns(); ++c) {
      const Value& v = t.cells[r * t.columns() + c];
      const auto* d = std::get_if<double>(&v);
      if (is_null(v) || (d && !std::isfinite(*d)))
        line += "|NULL";
      else if (auto i = std::get_if<int64_t>(&v))
        line += fmt::format("|{}", *i);
      else if (d)
        line += fmt::format("|{}", *d);
      else
        line += "|" + std::string(value_text(v));
    }
    out.push_back(line);
  }
  return out;
}

} // namespace

TEST(MysqlBatches, EveryRowOfABatchLargerThanOneStatementLands) {
  Server s;
  const RunInfo run = new_run();
  auto sink = make_mysql_sink(parse_mysql_url(s.db.url()), /*spill_on_outage=*/false);
  sink->begin_run(run);

  RowBatch b;
  auto& cores = b.tables[static_cast<size_t>(TableId::CpuCoreSamples)];
  constexpr int kRows = 5000; // about 60 bytes of SQL each: 300 KB, several kPacket statements
  for (int r = 0; r < kRows; ++r)
    add(cores, {Value(run.run_id), Value(int64_t{r / 100}), Value(run.start_ms + 1000 * (r / 100)),
                Value(int64_t{r % 100}), util_of(r)});
  auto& events = b.tables[static_cast<size_t>(TableId::Events)];
  for (int r = 0; r < 400; ++r)
    add(events, {Value(run.run_id), Value(int64_t{r}), Value(run.start_ms + r), Value(kTexts[r % std::size(kTexts)]),
                 r % 3 ? Value(std::string("source")) : Value(),
                 Value(kTexts[(r + 3) % std::size(kTexts)] + std::string(static_cast<size_t>(r), 'x'))});

  const long before = s.inserts(), prepared_before = s.prepared_executions();
  sink->write(b);
  const long statements = s.inserts() - before;
  EXPECT_EQ(s.prepared_executions() - prepared_before, 0) << "text statements, nothing held by the server after them";

  EXPECT_EQ(stored(s.db.url(), run, TableId::CpuCoreSamples), expected(cores));
  EXPECT_EQ(stored(s.db.url(), run, TableId::Events), expected(events));
  EXPECT_EQ(s.db.sql("SELECT COUNT(*) FROM runs"), "1\n") << "no text broke out of its quotes";

  // As few statements as the packet allows: each full statement holds at least kPacket less one row and the
  // statement's own words (under 1 KiB here). The rows' SQL is at most 75 bytes for the per-core table; events take
  // 400 rows of at most ~600 bytes. Prepared chunks of 256/32/4/1 rows took 26 statements for the per-core rows alone.
  const double core_bytes = kRows * 75.0, event_bytes = 400 * 600.0;
  const long most =
      2 + static_cast<long>(core_bytes / (kPacket - 1024)) + static_cast<long>(event_bytes / (kPacket - 1024));
  EXPECT_GE(statements, 1 + static_cast<long>(kRows * 50.0 / kPacket)) << "the batch is larger than one statement";
  EXPECT_LE(statements, most);
  sink->end_run(run);
}

TEST(MysqlBatches, ABatchLandsWholeOrNotAtAll) {
  Server s;
  const RunInfo run = new_run();
  auto sink = make_mysql_sink(parse_mysql_url(s.db.url()), /*spill_on_outage=*/false);
  sink->begin_run(run);

  // Per-core rows that fit, then an event no statement can carry: its table comes after, so the per-core rows were
  // already sent when the batch fails.
  RowBatch b;
  auto& cores = b.tables[static_cast<size_t>(TableId::CpuCoreSamples)];
  for (int r = 0; r < 3000; ++r)
    add(cores, {Value(run.run_id), Value(int64_t{r / 100}), Value(run.start_ms), Value(int64_t{r % 100}), util_of(r)});
  auto& events = b.tables[static_cast<size_t>(TableId::Events)];
  add(events, {Value(run.run_id), Value(int64_t{0}), Value(run.start_ms), Value(std::string("big")), Value(),
               Value(std::string(2 * kPacket, 'y'))});
  try {
    sink->write(b);
    FAIL() << "a row larger than max_allowed_packet was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("max_allowed_packet"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.db.sql(fmt::format("SELECT COUNT(*) FROM cpu_core_samples WHERE run_id = '{}'", run.run_id)), "0\n");
  EXPECT_EQ(s.db.sql("SELECT COUNT(*) FROM events"), "0\n");

  // The same connection takes the next batch whole.
  events.cells.clear();
  sink->write(b);
  EXPECT_EQ(stored(s.db.url(), run, TableId::CpuCoreSamples), expected(cores));
  sink->end_run(run);
}

} // namespace e2e_mysql_batches
