#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>

#include "../support/support.hpp"
#include "core/schema.hpp"
#include "sinks/csv/csv_reader.hpp"
#include "sinks/csv/csv_store.hpp"
#include "sinks/sqlite/sqlite_store.hpp"
#include "sinks/store.hpp"

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

void write_run(Sink& sink, RunInfo& run, const std::vector<GpuDevice>& devs, int ticks) {
  sink.begin_run(run);
  RowBatch batch;
  for (int t = 0; t < ticks; ++t) {
    Frame f = sample_frame(t);
    f.device_rows = t == 0 ? devs : std::vector<GpuDevice>{};
    append_frame_rows(run.run_id, f, devs, batch);
  }
  sink.write(batch);
  run.end_ms = run.start_ms + 1000;
  run.exit_status = 0;
  run.samples = ticks;
  sink.end_run(run);
}

} // namespace

TEST(Schema, TablesAndColumnsCarryUnits) {
  EXPECT_TRUE(table_by_name("cpu_samples"));
  EXPECT_TRUE(table_by_name("gpu_samples"));
  EXPECT_TRUE(table_by_name("events"));
  EXPECT_FALSE(table_by_name("nope"));
  bool has_power = false;
  for (const auto& c : table(TableId::GpuSamples).columns)
    has_power = has_power || c.name == "power_w";
  EXPECT_TRUE(has_power);
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
  EXPECT_EQ(a.size(), 2u /*devices*/ + 5 /*cpu*/ + 10 /*cores*/ + 10 /*gpu*/ + 1 /*event*/);
  // Missing stays missing; a measured zero stays zero.
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT count(*) FROM cpu_samples WHERE util_pct IS NULL"), "1");
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT count(*) FROM gpu_samples WHERE util_gpu_pct = 0"), "10");
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT count(*) FROM gpu_samples WHERE temp_gpu_c IS NULL"), "10");
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT detail FROM events"), "epoch 1, \"quoted\"\nsecond line");
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT value FROM meta WHERE key='schema_version'"),
            std::to_string(kSchemaVersion));
}

TEST(Stores, CsvColumnsMatchTheSqlTables) {
  wstest::TempDir dir;
  RunInfo run = sample_run("t");
  auto devs = two_gpus();
  auto csv = make_csv_sink(dir / "csv");
  write_run(*csv, run, devs, 2);
  for (TableId t : {TableId::Runs, TableId::CpuSamples, TableId::GpuSamples, TableId::Events}) {
    std::string file = dir / ("csv/" + csv_file_name(run, t));
    std::string text = wstest::read_file(file);
    std::string header = text.substr(0, text.find('\n'));
    std::string expect;
    for (const auto& c : table(t).columns)
      expect += (expect.empty() ? "" : ",") + std::string(c.name);
    EXPECT_EQ(header, expect) << file;
    EXPECT_EQ(csv_file_name(run, t).rfind("t_20261121T120329Z_", 0), 0u);
  }
}

TEST(Stores, ReplayedBatchIsIdempotentInSqlite) {
  wstest::TempDir dir;
  RunInfo run = sample_run("t");
  auto devs = two_gpus();
  auto sq = make_sqlite_sink(dir / "w.db");
  sq->begin_run(run);
  RowBatch batch;
  append_frame_rows(run.run_id, sample_frame(0), devs, batch);
  sq->write(batch);
  sq->write(batch); // a retry after an ambiguous failure must not duplicate rows
  EXPECT_EQ(wstest::scalar(dir / "w.db", "SELECT count(*) FROM gpu_samples"), "2");
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
  expect_error("run_id,tick,ts_ms\nr,1,2\n", "column 'util_pct' is missing");
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
  EXPECT_EQ(wstest::scalar(db, "SELECT count(*) FROM cpu_power_samples"), "0");
}
