#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "../support/support.hpp"
#include <sqlite3.h>

#include "core/metrics.hpp"
#include "core/schema.hpp"
#include "sinks/csv/csv_reader.hpp"
#include "sinks/csv/csv_store.hpp"
#include "sinks/runs_query.hpp"
#include "sinks/sqlite/sqlite_store.hpp"
#include "sinks/store.hpp"

namespace unit_stores { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;

namespace {

RunInfo sample_run(const std::string& task) {
  RunInfo r;
  r.start_ms = 1795262609833;
  r.run_id = new_run_id(r.start_ms);
  r.task = task;
  r.command = "python train.py --lr 3e-4";
  r.host = "host, with \"quotes\"";
  r.interval_ms = 100;
  r.version = "test";
  return r;
}

std::vector<GpuDevice> two_gpus() {
  GpuDevice a;
  a.gpu_index = 0;
  a.vendor = "nvidia";
  a.uuid = "GPU-a";
  a.name = "NVIDIA H100";
  a.energy_method = "counter";
  GpuDevice b = a;
  b.gpu_index = 1;
  b.uuid = "GPU-b";
  return {a, b};
}

Frame sample_frame(int64_t tick) {
  Frame f;
  f.tick = tick;
  f.ts_ms = 1795262609833 + tick * 100;
  f.cpu.util_pct = 12.5 + static_cast<double>(tick);
  f.cpu.core_util_pct = {OptF(100.0), std::nullopt};
  f.cpu.mem_used_bytes = 1000 + tick;
  f.cpu.mem_total_bytes = 5000; // mem_total present, util missing on tick 0 below
  if (tick == 0) f.cpu.util_pct.reset();
  for (int g = 0; g < 2; ++g) {
    GpuSample s;
    s.gpu_index = g;
    s.power_w = 0.1 + 100.0 * g + static_cast<double>(tick); // 0.1 exercises shortest round-trip formatting
    s.energy_j = 1e-3 * static_cast<double>(tick);
    s.util_gpu_pct = 0.0; // a real zero must stay a zero, not become missing
    s.throttle_reasons = (int64_t{1} << 40) + tick;
    f.gpus.push_back(s);
  }
  if (tick == 1) f.events.push_back({0, f.ts_ms, "marker", "test", "epoch 1, \"quoted\"\nsecond line"});
  if (tick == 1) { // issue 15: a phase (its name hostile to CSV and SQL) and work reach every store alike
    PhaseRecord p;
    p.phase_id = 0;
    p.name = "epoch, \"one\"; DROP TABLE phases;--";
    p.index = 1;
    p.start_ms = f.ts_ms - 90;
    p.end_ms = f.ts_ms - 5;
    p.start_tick = 0;
    p.end_tick = 1;
    p.device_energy_j = {{"gpu0", 0.001}, {"gpu1", 0.1}};
    p.energy_j = 0.101;
    p.energy_method = "counter";
    f.phases.push_back(p);
    f.work.push_back({0, f.ts_ms - 10, 64, "samples", int64_t{0}});
  }
  f.cpu.zones.push_back({"package", "intel-rapl:0", int64_t{0}, 41.5 + static_cast<double>(tick), 4.15 * tick});
  if (tick == 1) { // attribution (issue 13): one process, its sample, its use of GPU 1
    f.processes = std::make_shared<ProcessSnapshot>();
    ProcessRow r;
    r.id = {4242, 987654};
    r.comm = "python";
    r.cmdline = "python train.py --lr 3e-4";
    r.unit = "slurm job 7";
    r.unit_kind = "slurm-job";
    r.first_tick = 0;
    r.last_tick = 1;
    f.processes->rows.push_back(r);
    ProcessSample p;
    p.id = r.id;
    p.sampled = true;
    p.cpu_pct = 0.1;
    p.rss_bytes = 1 << 20; // pss, uss, io missing
    p.cpu_energy_j = 0.0;
    f.processes->procs.push_back(p);
    GpuProcessSample g;
    g.id = r.id;
    g.gpu_index = 1;
    g.sm_pct = 0.0;
    g.mem_used_bytes = 1 << 30;
    g.energy_j = 12.5;
    f.processes->gpu_procs.push_back(g);
  }
  return f;
}

// Every row of every table, as comparable strings, via a reader.
std::vector<std::string> dump(StoreReader& r, const RunInfo& run) {
  std::vector<std::string> out;
  for (size_t t = 1; t < kTableCount; ++t) {
    r.scan(static_cast<TableId>(t), run, [&](std::span<const Value> row) {
      std::string line = std::string(table(static_cast<TableId>(t)).name) + ":";
      for (const auto& v : row) {
        if (is_null(v))
          line += "<null>|";
        else if (auto i = std::get_if<int64_t>(&v))
          line += std::to_string(*i) + "|";
        else if (auto d = std::get_if<double>(&v))
          line += fmt::format("{}|", *d);
        else
          line += std::string(value_text(v)) + "|";
      }
      out.push_back(line);
    });
  }
  return out;
}

// SQL that turns a store of this version into version 6's layout: gpu_samples a table whose rows carry their run's
// id, without run_keys and gpu_sample_rows.
std::string version6_layout_sql() {
  std::string cols;
  for (const auto& c : table(TableId::GpuSamples).columns)
    cols += fmt::format("\"{}\" {}, ", c.name,
                        c.type == ColType::Text  ? "TEXT"
                        : c.type == ColType::Int ? "INTEGER"
                                                 : "REAL");
  return fmt::format("DROP VIEW gpu_samples_named; CREATE TABLE g6 ({}PRIMARY KEY (run_id, tick, gpu_index)) WITHOUT "
                     "ROWID; INSERT INTO g6 SELECT * FROM gpu_samples; DROP VIEW gpu_samples; DROP TABLE "
                     "gpu_sample_rows; DROP TABLE run_keys; ALTER TABLE g6 RENAME TO gpu_samples; CREATE VIEW "
                     "gpu_samples_named AS {}; UPDATE meta SET value = '6' WHERE key = 'schema_version';",
                     cols, gpu_samples_named_select('"'));
}

// sqlite3 SQL that must succeed (a test's set-up that failed quietly would leave it testing nothing).
void sqlite_sql(const std::string& db, const std::string& sql) {
  const auto r = wstest::run({"/usr/bin/sqlite3", "-bail", db, sql});
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

void write_run(Sink& sink, RunInfo& run, const std::vector<GpuDevice>& devs, int ticks) {
  sink.begin_run(run);
  RowBatch batch;
  for (int t = 0; t < ticks; ++t) {
    Frame f = sample_frame(t);
    f.device_rows = t == 0 ? devs : std::vector<GpuDevice>{};
    append_frame_rows(run.run_id, f, batch);
  }
  sink.write(batch);
  run.end_ms = run.start_ms + 1000;
  run.exit_status = 0;
  run.samples = ticks;
  sink.end_run(run);
}

} // namespace

// Every column of every table either names its unit in a suffix the registry's unit implies, or is one of the
// identity, time and text columns listed here. A new column with neither fails.
TEST(Schema, TablesAndColumnsCarryUnits) {
  EXPECT_TRUE(table_by_name("cpu_samples"));
  EXPECT_TRUE(table_by_name("gpu_samples"));
  EXPECT_TRUE(table_by_name("events"));
  EXPECT_FALSE(table_by_name("nope"));
  const std::vector<std::pair<std::string_view, std::string_view>> unit_suffix = {
      {"W", "_w"},          {"J", "_j"},     {"%", "_pct"},           {"bytes", "_bytes"},
      {"C", "_c"},          {"MHz", "_mhz"}, {"B/s", "_bytes_per_s"}, {"s", "_s"},
      {"errors", "_errors"}};
  // Unitless by nature: a lane count, a P-state number, a bit mask, a mode, flags, counts of replays and of rows.
  const std::vector<std::string_view> unitless = {"pcie_link_width",
                                                  "pcie_link_width_max",
                                                  "pstate",
                                                  "throttle_reasons",
                                                  "mig_mode",
                                                  "remap_pending",
                                                  "remap_failed",
                                                  "pcie_replays",
                                                  "remapped_rows_correctable",
                                                  "remapped_rows_uncorrectable"};
  const std::vector<std::string_view> not_measurements = {
      "run_id", "task", "command", "host", "cpu_model", "exit_status", "samples", "tags", "wattscope_version",
      "summary", "gpu_index", "vendor", "uuid", "name", "pci_bus_id", "energy_method", "power_source", "tick", "core",
      "zone", "socket", "domain", "power_method", "seq", "kind", "source", "detail",
      // attribution (issue 13): identities and names
      "pid", "start_time", "ppid", "comm", "cmdline", "uid", "unit", "unit_kind", "first_tick", "last_tick",
      // issue 15: phases and work
      "phase_id", "index", "parent", "start_tick", "end_tick", "closed_by_run_end", "amount",
      // how a phase's edges were placed, and whether repair closed it
      "start_edge", "end_edge", "closed_by_repair",
      // issue 36: a declared total of work, in the row's `unit` as `amount` is
      "total"};
  auto check = [&](std::string_view column, std::string_view unit) {
    if (std::find(unitless.begin(), unitless.end(), column) != unitless.end()) {
      EXPECT_TRUE(unit.empty() || unit == "lanes" || unit == "rows") << column;
      return;
    }
    bool found = false;
    for (const auto& [u, suffix] : unit_suffix)
      if (u == unit) {
        found = true;
        EXPECT_TRUE(column.ends_with(suffix)) << column << " is in " << unit << " but does not end in " << suffix;
      }
    EXPECT_TRUE(found) << column << ": unit '" << unit << "' has no suffix rule";
  };
  auto registry_unit = [](std::string_view column) -> std::optional<std::string_view> {
    for (const auto& m : kGpuMetrics)
      if (m.info.column == column) return m.info.unit;
    for (const auto& m : kCpuMetrics)
      if (m.info.column == column) return m.info.unit;
    for (const auto& m : kZoneMetrics)
      if (m.info.column == column) return m.info.unit;
    return std::nullopt;
  };
  size_t checked = 0;
  for (const auto& t : all_tables()) {
    for (const auto& c : t.columns) {
      ++checked;
      if (std::find(not_measurements.begin(), not_measurements.end(), c.name) != not_measurements.end()) continue;
      if (auto unit = registry_unit(c.name)) {
        check(c.name, *unit);
        continue;
      }
      // Not from the registry: run and device facts, which still carry their unit in the name.
      const bool has_suffix = c.name.ends_with("_ms") || c.name.ends_with("_s") || c.name.ends_with("_w") ||
                              c.name.ends_with("_j") || c.name.ends_with("_bytes") || c.name.ends_with("_mhz") ||
                              c.name.ends_with("_pct") || c.name.ends_with("_c");
      EXPECT_TRUE(has_suffix) << t.name << "." << c.name << " names no unit";
    }
  }
  EXPECT_GT(checked, 60u);
}

TEST(Stores, SqliteAndCsvHoldTheSameRows) {
  wstest::TempDir dir;
  RunInfo run = sample_run("bert, \"big\"; DROP TABLE runs;--");
  auto devs = two_gpus();
  auto sq = make_sqlite_sink(dir / "w.db");
  write_run(*sq, run, devs, 5);
  auto csv = make_csv_sink(dir / "csv");
  write_run(*csv, run, devs, 5);

  auto rs = make_sqlite_reader(dir / "w.db");
  auto rc = make_csv_reader(dir / "csv");
  auto runs_s = rs->runs();
  auto runs_c = rc->runs();
  ASSERT_EQ(runs_s.size(), 1u);
  ASSERT_EQ(runs_c.size(), 1u);
  EXPECT_EQ(runs_s[0].task, run.task);
  EXPECT_EQ(runs_c[0].task, run.task);
  EXPECT_EQ(runs_c[0].host, run.host);
  EXPECT_EQ(runs_c[0].exit_status, 0);
  auto a = dump(*rs, runs_s[0]);
  auto b = dump(*rc, runs_c[0]);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 2u /*devices*/ + 5 /*cpu*/ + 10 /*cores*/ + 5 /*zones*/ + 10 /*gpu*/ + 1 /*event*/ +
                          3 /*process, its sample, its GPU sample*/ + 1 /*phase*/ + 1 /*work*/);
  // Missing stays missing; a measured zero stays zero.
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT count(*) FROM cpu_samples WHERE util_pct IS NULL"), "1");
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT count(*) FROM gpu_samples WHERE util_gpu_pct = 0"), "10");
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT count(*) FROM gpu_samples WHERE temp_gpu_c IS NULL"), "10");
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT detail FROM events"), "epoch 1, \"quoted\"\nsecond line");
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT \"index\" || ' ' || device_energy_j FROM phases"),
            "1 {\"gpu0\":0.001,\"gpu1\":0.1}");
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT value FROM meta WHERE key='schema_version'"),
            std::to_string(kSchemaVersion));
}

// The CSV header of every table equals the columns SQLite really created for it (pragma table_info), in order.
TEST(Stores, CsvColumnsMatchTheSqlTables) {
  wstest::TempDir dir;
  RunInfo run = sample_run("t");
  auto devs = two_gpus();
  auto csv = make_csv_sink(dir / "csv");
  write_run(*csv, run, devs, 2);
  auto sq = make_sqlite_sink(dir / "w.db");
  write_run(*sq, run, devs, 2);
  sq.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2((dir / "w.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  for (const auto& t : all_tables()) {
    const TableId id = *table_by_name(t.name);
    std::string file = dir / ("csv/" + csv_file_name(run, id));
    std::string text = wstest::read_file(file);
    std::string header = text.substr(0, text.find('\n'));
    std::string sql_columns;
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, fmt::format("PRAGMA table_info({})", t.name).c_str(), -1, &st, nullptr),
              SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
      const std::string name(reinterpret_cast<const char*>(sqlite3_column_text(st, 1)));
      // runs.j_per_unit is the SQL stores' sort key for the runs pages (sinks/runs_query.hpp), not a figure of the run:
      // a CSV store has no index to keep it for.
      if (id == TableId::Runs && name == kJPerUnitColumn) continue;
      // A gpu_samples file holds one run's rows, and leaves the run's id out of each.
      if (csv_omits_run_id(id) && name == "run_id") continue;
      sql_columns += (sql_columns.empty() ? "" : ",") + name;
    }
    sqlite3_finalize(st);
    EXPECT_FALSE(sql_columns.empty()) << t.name;
    EXPECT_EQ(header, sql_columns) << file;
    EXPECT_EQ(csv_file_name(run, id).rfind("t_20261121T120329Z_", 0), 0u);
  }
  sqlite3_close(db);
}

TEST(Stores, ReplayedBatchIsIdempotentInSqlite) {
  wstest::TempDir dir;
  RunInfo run = sample_run("t");
  auto devs = two_gpus();
  auto sq = make_sqlite_sink(dir / "w.db");
  sq->begin_run(run);
  RowBatch batch;
  append_frame_rows(run.run_id, sample_frame(0), batch);
  sq->write(batch);
  sq->write(batch); // a retry after an ambiguous failure must not duplicate rows
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT count(*) FROM gpu_samples"), "2");
}

// A run's key made in a batch that is rolled back goes with it: the key may be given to the next run, so the sink
// must not keep it for the first.
TEST(Stores, ARunKeyMadeInARolledBackBatchIsNotReused) {
  wstest::TempDir dir;
  RunInfo run = sample_run("t");
  auto sq = make_sqlite_sink(dir / "w.db");
  sq->begin_run(run);
  // The rows' cells point at their run ids: they outlive the batches.
  const std::string b = "replayed-b", c = "replayed-c";
  auto gpu_rows_of = [](const std::string& run_id) {
    RowBatch batch;
    append_frame_rows(run_id, sample_frame(0), batch);
    return batch;
  };
  RowBatch failing = gpu_rows_of(b);
  // An event without its key, stored after the GPU rows: the whole batch is rolled back.
  auto& events = failing.tables[static_cast<size_t>(TableId::Events)].cells;
  events = {Value(std::string_view(b)), Value(), Value(int64_t{0}), Value(std::string_view("mark")), Value(), Value()};
  EXPECT_THROW(sq->write(failing), std::runtime_error);
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT group_concat(run_key || ' ' || run_id) FROM run_keys"),
            "1 " + run.run_id);
  sq->write(gpu_rows_of(c));
  sq->write(gpu_rows_of(b));
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT group_concat(run_id || ':' || n, ' ') FROM (SELECT run_id, count(*) "
                                         "AS n FROM gpu_samples WHERE run_id LIKE 'replayed-%' GROUP BY run_id)"),
            "replayed-b:2 replayed-c:2");
}

TEST(Stores, NewerSchemaIsRefusedWithAMessage) {
  wstest::TempDir dir;
  RunInfo run = sample_run("t");
  { make_sqlite_sink(dir / "w.db")->begin_run(run); }
  wstest::run({"/usr/bin/sqlite3", dir / "w.db", "UPDATE meta SET value='99' WHERE key='schema_version'"});
  try {
    make_sqlite_sink(dir / "w.db")->begin_run(run);
    FAIL() << "accepted a newer schema";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("schema version 99"), std::string::npos) << e.what();
  }
  // Readers (list, show, report, export) refuse it too, rather than misread it.
  try {
    make_sqlite_reader(dir / "w.db")->runs();
    FAIL() << "a reader accepted a newer schema";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("newer than this wattscope's"), std::string::npos) << e.what();
  }
  // A version that is not a number is refused by both, naming the value.
  wstest::run({"/usr/bin/sqlite3", dir / "w.db", "UPDATE meta SET value='3x' WHERE key='schema_version'"});
  for (int reader = 0; reader < 2; ++reader) {
    try {
      if (reader)
        make_sqlite_reader(dir / "w.db")->runs();
      else
        make_sqlite_sink(dir / "w.db")->begin_run(run);
      FAIL() << "accepted schema version '3x'";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("'3x', which is not a version number"), std::string::npos) << e.what();
    }
  }
}

// An older store (without the columns added since) is read by name: the missing columns read as NULL.
TEST(Stores, OlderStoreIsReadWithMissingColumnsAsNull) {
  wstest::TempDir dir;
  RunInfo run = sample_run("t");
  auto devs = two_gpus();
  {
    auto sq = make_sqlite_sink(dir / "w.db");
    write_run(*sq, run, devs, 2);
  }
  // Make it look like a version-2 store: no encoder/decoder columns.
  sqlite_sql(dir / "w.db", version6_layout_sql() + "DROP VIEW gpu_samples_named; ALTER TABLE gpu_samples DROP COLUMN "
                                                   "util_enc_pct; ALTER TABLE gpu_samples DROP COLUMN util_dec_pct; "
                                                   "UPDATE meta SET value='2' WHERE key='schema_version'");
  auto r = make_sqlite_reader(dir / "w.db");
  const auto runs = r->runs();
  ASSERT_EQ(runs.size(), 1u);
  size_t rows = 0;
  const size_t enc = column_index(TableId::GpuSamples, "util_enc_pct");
  const size_t power = column_index(TableId::GpuSamples, "power_w");
  r->scan(TableId::GpuSamples, runs[0], [&](std::span<const Value> row) {
    ++rows;
    EXPECT_TRUE(is_null(row[enc]));
    EXPECT_TRUE(value_real(row[power]).has_value());
  });
  EXPECT_EQ(rows, 4u);
}

TEST(Stores, UnwritablePlacesSayWhatToDo) {
  RunInfo run = sample_run("t");
  try {
    make_sqlite_sink("/nonexistent/dir/w.db")->begin_run(run);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--db"), std::string::npos);
  }
  try {
    make_csv_sink("/proc/nope")->begin_run(run);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--csv"), std::string::npos);
  }
}

TEST(StoreSpec, Parsing) {
  EXPECT_EQ(parse_store("w.db").kind, StoreSpec::Kind::Sqlite);
  EXPECT_EQ(parse_store("csv:out").kind, StoreSpec::Kind::Csv);
  EXPECT_EQ(parse_store("sqlite:x.db").location, "x.db");
  EXPECT_THROW(parse_store("ftp://x"), std::invalid_argument);
  EXPECT_THROW(parse_store(""), std::invalid_argument);
}

TEST(CsvReader, BrokenFilesNameTheLine) {
  wstest::TempDir dir;
  std::string header;
  for (const auto& c : table(TableId::CpuSamples).columns)
    header += (header.empty() ? "" : ",") + std::string(c.name);
  auto expect_error = [&](const std::string& body, const std::string& needle) {
    wstest::write_file(dir / "f.csv", body);
    try {
      read_table_csv(dir / "f.csv", TableId::CpuSamples, [](std::span<const Value>) {});
      ADD_FAILURE() << "accepted: " << body;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const size_t width = table(TableId::CpuSamples).columns.size();
  // A row of the right width: run_id, tick, ts_ms, then `rest` and empty cells for the remaining columns.
  auto row = [&](const std::string& first, const std::string& rest, size_t fields) {
    std::string r = first + "," + rest;
    for (size_t n = 2 + static_cast<size_t>(std::count(rest.begin(), rest.end(), ',')); n < fields; ++n)
      r += ",";
    return r + "\n";
  };
  expect_error("run_id,ts_ms,util_pct\nr,1,2\n", "column 'tick' is missing");
  expect_error(header + "\n" + row("r", "1,2,3.5,4,5", width) + row("r", "2,3,x,4,5", width),
               "f.csv:3: column 'util_pct': 'x' is not a number");
  expect_error(header + "\n" + row("r", "1,2,3.5,4", width - 1),
               fmt::format("f.csv:2: {} fields, the header has {}", width - 1, width));
  expect_error(header + "\n\"r,1,2,3.5,4,5\n", "unterminated");
  expect_error("", "empty file");
  // Quoted newlines keep line numbers right.
  expect_error(header + "\n" + row("\"a\nb\"", "1,2,3,4,5", width) + row("r", "1.5,2,3,4,5", width),
               "f.csv:4: column 'tick'");
}

// A CSV file written before a column existed reads it as missing; only key columns are required.
TEST(Stores, OlderCsvFileReadsNewerColumnsAsMissing) {
  wstest::TempDir dir;
  wstest::write_file(dir / "g.csv", "run_id,tick,ts_ms,gpu_index,power_w\nr,0,5,1,250.5\n");
  size_t rows = 0;
  read_table_csv(dir / "g.csv", TableId::GpuSamples, [&](std::span<const Value> row) {
    ++rows;
    EXPECT_EQ(value_real(row[column_index(TableId::GpuSamples, "power_w")]), 250.5);
    EXPECT_EQ(value_int(row[column_index(TableId::GpuSamples, "gpu_index")]), 1);
    EXPECT_TRUE(is_null(row[column_index(TableId::GpuSamples, "util_enc_pct")]));
  });
  EXPECT_EQ(rows, 1u);
}

TEST(Stores, OlderSchemaIsMigratedForward) {
  wstest::TempDir dir;
  const std::string db = dir / "old.db";
  // A version-1 database: cpu_samples without the power columns, no cpu_power_samples table.
  wstest::run({"/usr/bin/sqlite3", db,
               "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES ('schema_version','1');"
               "CREATE TABLE cpu_samples (run_id TEXT, tick INTEGER, ts_ms INTEGER, util_pct REAL, mem_used_bytes "
               "INTEGER, mem_total_bytes INTEGER, PRIMARY KEY (run_id, tick)) WITHOUT ROWID;"
               "INSERT INTO cpu_samples VALUES ('old-run', 0, 1, 5.0, 10, 20);"});
  RunInfo run = sample_run("t");
  auto sink = make_sqlite_sink(db);
  write_run(*sink, run, two_gpus(), 2);
  EXPECT_EQ(wstest::scalar(db, "SELECT value FROM meta WHERE key='schema_version'"), std::to_string(kSchemaVersion));
  EXPECT_EQ(wstest::scalar(db, "SELECT count(*) FROM cpu_samples"), "3");
  EXPECT_EQ(wstest::scalar(db, "SELECT package_power_w IS NULL FROM cpu_samples WHERE run_id='old-run'"), "1");
  EXPECT_EQ(wstest::scalar(db, "SELECT count(*) FROM cpu_power_samples"), "2");
}

// Version 2 to 3: gpu_samples gains the encoder and decoder columns; old rows read them as NULL.
TEST(Stores, EncoderColumnsAreAddedToAVersion2Store) {
  wstest::TempDir dir;
  const std::string db = dir / "v2.db";
  wstest::run({"/usr/bin/sqlite3", db,
               "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES ('schema_version','2');"
               "CREATE TABLE gpu_samples (run_id TEXT, tick INTEGER, ts_ms INTEGER, gpu_index INTEGER, uuid TEXT, "
               "name TEXT, vendor TEXT, power_w REAL, power_avg_w REAL, energy_j REAL, util_gpu_pct REAL, "
               "util_mem_pct REAL, mem_used_bytes INTEGER, mem_total_bytes INTEGER, temp_gpu_c REAL, temp_mem_c REAL, "
               "clock_sm_mhz INTEGER, clock_gfx_mhz INTEGER, clock_mem_mhz INTEGER, pcie_link_width INTEGER, "
               "pcie_link_width_max INTEGER, pcie_tx_bytes_per_s INTEGER, pcie_rx_bytes_per_s INTEGER, fan_pct REAL, "
               "pstate INTEGER, power_limit_w REAL, throttle_reasons INTEGER, PRIMARY KEY (run_id, tick, gpu_index)) "
               "WITHOUT ROWID; INSERT INTO gpu_samples (run_id, tick, ts_ms, gpu_index, power_w) VALUES "
               "('old-run', 0, 1, 0, 250.0);"});
  RunInfo run = sample_run("t");
  auto sink = make_sqlite_sink(db);
  sink->begin_run(run);
  RowBatch batch;
  Frame f = sample_frame(0);
  f.gpus[0].util_enc_pct = 37.0;
  append_frame_rows(run.run_id, f, batch);
  sink->write(batch);
  EXPECT_EQ(wstest::scalar(db, "SELECT value FROM meta WHERE key='schema_version'"), std::to_string(kSchemaVersion));
  EXPECT_EQ(wstest::scalar(db, "SELECT util_enc_pct IS NULL AND util_dec_pct IS NULL FROM gpu_samples WHERE "
                               "run_id='old-run'"),
            "1");
  EXPECT_EQ(wstest::scalar(
                db, fmt::format("SELECT util_enc_pct FROM gpu_samples WHERE run_id='{}' AND gpu_index=0", run.run_id)),
            "37.0");
  EXPECT_EQ(wstest::scalar(db, fmt::format("SELECT util_dec_pct IS NULL FROM gpu_samples WHERE run_id='{}' AND "
                                           "gpu_index=0",
                                           run.run_id)),
            "1");
}

// Version 5 to 6: gpu_samples repeated each GPU's uuid, name and vendor in every row. A version-5 store is read as it
// is; its next writer moves them into gpu_devices (a GPU whose device row was lost gets one from its samples, an empty
// vendor is filled) and rebuilds gpu_samples without them, every sample kept, and gpu_samples_named shows them again.
TEST(Stores, AVersion5StoreMovesEachGpusIdentityIntoGpuDevices) {
  wstest::TempDir dir;
  const std::string db = dir / "v5.db";
  RunInfo old = sample_run("old");
  {
    auto sink = make_sqlite_sink(db);
    write_run(*sink, old, two_gpus(), 3);
  }
  const std::string before = wstest::scalar(db, "SELECT group_concat(tick || ':' || gpu_index || ':' || power_w, ' ') "
                                                "FROM (SELECT * FROM gpu_samples ORDER BY tick, gpu_index)");
  // The layout of version 5, its rows named as a version-5 writer named them.
  sqlite_sql(db, version6_layout_sql());
  sqlite_sql(db, "DROP VIEW gpu_samples_named; CREATE TABLE g5 (run_id TEXT, tick INTEGER, ts_ms INTEGER, gpu_index "
                 "INTEGER, uuid TEXT, name TEXT, vendor TEXT, power_w REAL, energy_j REAL, PRIMARY KEY (run_id, tick, "
                 "gpu_index)) WITHOUT ROWID; INSERT INTO g5 SELECT s.run_id, s.tick, s.ts_ms, s.gpu_index, d.uuid, "
                 "d.name, d.vendor, s.power_w, s.energy_j FROM gpu_samples s JOIN gpu_devices d USING (run_id, "
                 "gpu_index); DROP TABLE gpu_samples; ALTER TABLE g5 RENAME TO gpu_samples; DELETE FROM gpu_devices "
                 "WHERE gpu_index = 1; UPDATE gpu_devices SET vendor = ''; UPDATE meta SET value = '5';");
  {
    auto reader = make_sqlite_reader(db);
    int rows = 0;
    reader->scan(TableId::GpuSamples, reader->runs().at(0), [&](std::span<const Value>) { ++rows; });
    EXPECT_EQ(rows, 6);
  }
  RunInfo next = sample_run("next");
  next.run_id = "20261121-120330-00000002";
  {
    auto sink = make_sqlite_sink(db);
    write_run(*sink, next, two_gpus(), 2);
  }
  EXPECT_EQ(wstest::scalar(db, "SELECT value FROM meta WHERE key='schema_version'"), std::to_string(kSchemaVersion));
  EXPECT_EQ(wstest::scalar(db, "SELECT count(*) FROM pragma_table_info('gpu_samples') WHERE name IN ('uuid', 'name', "
                               "'vendor')"),
            "0");
  EXPECT_EQ(wstest::scalar(db, fmt::format("SELECT group_concat(tick || ':' || gpu_index || ':' || power_w, ' ') FROM "
                                           "(SELECT * FROM gpu_samples WHERE run_id = '{}' ORDER BY tick, gpu_index)",
                                           old.run_id)),
            before);
  EXPECT_EQ(wstest::scalar(db, fmt::format("SELECT group_concat(gpu_index || ' ' || uuid || ' ' || name || ' ' || "
                                           "vendor, ', ') FROM (SELECT * FROM gpu_devices WHERE run_id = '{}' ORDER "
                                           "BY gpu_index)",
                                           old.run_id)),
            "0 GPU-a NVIDIA H100 nvidia, 1 GPU-b NVIDIA H100 nvidia");
  // The view: every sample of both runs, named, in the columns of version 5.
  EXPECT_EQ(wstest::scalar(db, "SELECT count(*) || ' ' || count(uuid) || ' ' || sum(vendor = 'nvidia') FROM "
                               "gpu_samples_named"),
            "10 10 10");
  EXPECT_EQ(wstest::scalar(db, "SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_table_info("
                               "'gpu_samples_named') LIMIT 8)"),
            "run_id,tick,ts_ms,gpu_index,uuid,name,vendor,power_w");
  // A second writer finds nothing left to move.
  {
    auto sink = make_sqlite_sink(db);
    RunInfo third = sample_run("third");
    third.run_id = "20261121-120400-00000003";
    write_run(*sink, third, two_gpus(), 1);
  }
  EXPECT_EQ(wstest::scalar(db, "SELECT count(*) FROM gpu_samples_named WHERE uuid IS NOT NULL"), "12");
  // ...nor a view to make again: the schema is left as it is (readers keep their prepared statements)...
  auto write_one = [&] {
    RunInfo more = sample_run("more");
    write_run(*make_sqlite_sink(db), more, two_gpus(), 1);
  };
  const std::string cookie = wstest::scalar(db, "PRAGMA schema_version");
  write_one();
  EXPECT_EQ(wstest::scalar(db, "PRAGMA schema_version"), cookie);
  // ...unless the view is not this version's.
  wstest::run({"/usr/bin/sqlite3", db,
               "DROP VIEW gpu_samples_named; CREATE VIEW gpu_samples_named AS SELECT run_id FROM gpu_samples;"});
  write_one();
  EXPECT_EQ(wstest::scalar(db, "SELECT count(*) FROM pragma_table_info('gpu_samples_named')"),
            std::to_string(gpu_samples_named_columns().size()));
}

// Version 6 to 7: gpu_samples' rows named their run by its id. A version-6 store is read as it is; its next writer
// gives each run a key (in start order), copies every row once into gpu_sample_rows under its run's key, and makes
// gpu_samples the view of the two, so that what read the table (by run_id, joined on it) reads the same rows.
TEST(Stores, AVersion6StoreKeysItsGpuRowsByRun) {
  wstest::TempDir dir;
  const std::string db = dir / "v6.db";
  RunInfo first = sample_run("first"), second = sample_run("second");
  second.run_id = "20261121-120200-00000000"; // an id that sorts before the first's, started after it
  second.start_ms = first.start_ms + 60000;
  {
    auto sink = make_sqlite_sink(db);
    write_run(*sink, first, two_gpus(), 3);
    write_run(*sink, second, two_gpus(), 2);
  }
  sqlite_sql(db, version6_layout_sql());
  const std::string rows_sql = "SELECT group_concat(run_id || ':' || tick || ':' || gpu_index || ':' || power_w || ':' "
                               "|| uuid, ' ') FROM (SELECT * FROM gpu_samples_named ORDER BY run_id, tick, gpu_index)";
  const std::string before = wstest::scalar(db, rows_sql);
  ASSERT_EQ(wstest::scalar(db, "SELECT count(*) FROM gpu_samples"), "10");
  {
    auto reader = make_sqlite_reader(db);
    int rows = 0;
    reader->scan(TableId::GpuSamples, *reader->run_by_id(first.run_id), [&](std::span<const Value>) { ++rows; });
    EXPECT_EQ(rows, 6);
  }
  RunInfo third = sample_run("third");
  third.run_id = "20261121-120400-00000003";
  third.start_ms = second.start_ms + 60000;
  {
    auto sink = make_sqlite_sink(db);
    write_run(*sink, third, two_gpus(), 1);
  }
  EXPECT_EQ(wstest::scalar(db, "SELECT value FROM meta WHERE key='schema_version'"), std::to_string(kSchemaVersion));
  EXPECT_EQ(wstest::scalar(db, "SELECT type FROM sqlite_master WHERE name = 'gpu_samples'"), "view");
  EXPECT_EQ(wstest::scalar(db, "SELECT group_concat(run_key || ' ' || run_id, ', ') FROM run_keys"),
            fmt::format("1 {}, 2 {}, 3 {}", first.run_id, second.run_id, third.run_id));
  EXPECT_EQ(wstest::scalar(db, "SELECT count(*) FROM gpu_sample_rows"), "12");
  EXPECT_EQ(wstest::scalar(db, "SELECT count(*) FROM pragma_table_info('gpu_sample_rows') WHERE name = 'run_id'"), "0");
  // Every row as it was, by the view and by the join a version-6 query wrote.
  EXPECT_EQ(wstest::scalar(db, rows_sql + " WHERE run_id <> '" + third.run_id + "'"), before) << rows_sql;
  EXPECT_EQ(wstest::scalar(db, fmt::format("SELECT count(*) || ' ' || sum(d.uuid = 'GPU-a') FROM gpu_samples s JOIN "
                                           "gpu_devices d USING (run_id, gpu_index) WHERE s.run_id = '{}'",
                                           second.run_id)),
            "4 2");
  // A run's rows are read in their stored order, one range of the table: no sort that grows with the run.
  std::string plan;
  for (const auto& step : wstest::query(db, "EXPLAIN QUERY PLAN SELECT * FROM gpu_samples WHERE run_id = 'x' ORDER BY "
                                            "run_id, tick, gpu_index"))
    plan += step.back().value_or("") + "; ";
  EXPECT_EQ(plan.find("TEMP B-TREE"), std::string::npos) << plan;
  EXPECT_NE(plan.find("PRIMARY KEY (run_key=?)"), std::string::npos) << plan;
  auto reader = make_sqlite_reader(db);
  std::vector<std::string> seen;
  const size_t run_col = column_index(TableId::GpuSamples, "run_id"), tick = column_index(TableId::GpuSamples, "tick");
  reader->scan(TableId::GpuSamples, *reader->run_by_id(second.run_id), [&](std::span<const Value> row) {
    seen.push_back(fmt::format("{}:{}", value_text(row[run_col]), value_int(row[tick]).value_or(-1)));
  });
  EXPECT_EQ(fmt::format("{}", fmt::join(seen, " ")), fmt::format("{0}:0 {0}:0 {0}:1 {0}:1", second.run_id));
}

// issue 15: a version-3 store (before phases and work) is read with no phases rather than refused as damaged, and a
// write brings it forward with both tables.
TEST(Stores, AVersion3StoreReadsWithNoPhasesAndGainsTheTablesWhenWritten) {
  wstest::TempDir dir;
  const std::string db = dir / "v3.db";
  RunInfo run = sample_run("t");
  {
    auto sink = make_sqlite_sink(db);
    write_run(*sink, run, two_gpus(), 2);
  }
  wstest::run({"/usr/bin/sqlite3", db, "DROP TABLE phases; DROP TABLE work; UPDATE meta SET value='3';"});
  auto reader = make_sqlite_reader(db);
  const RunInfo back = reader->runs().at(0);
  int rows = 0;
  EXPECT_NO_THROW(reader->scan(TableId::Phases, back, [&](std::span<const Value>) { ++rows; }));
  EXPECT_NO_THROW(reader->scan(TableId::Work, back, [&](std::span<const Value>) { ++rows; }));
  EXPECT_EQ(rows, 0);
  EXPECT_GT(dump(*reader, back).size(), 0u);
  reader.reset();
  RunInfo run2 = sample_run("t2");
  run2.run_id = "20261121-120330-00000002";
  auto sink = make_sqlite_sink(db);
  write_run(*sink, run2, two_gpus(), 2);
  EXPECT_EQ(wstest::scalar(db, "SELECT count(*) FROM phases"), "1");
  EXPECT_EQ(wstest::scalar(db, "SELECT count(*) FROM work"), "1");
}
} // namespace unit_stores
