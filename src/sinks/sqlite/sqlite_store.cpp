#include "sinks/sqlite/sqlite_store.hpp"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sinks/runs_query.hpp"

namespace wattscope {

namespace {

std::string_view sql_type(ColType t) {
  switch (t) {
  case ColType::Int:
    return "INTEGER";
  case ColType::Real:
    return "REAL";
  case ColType::Text:
    return "TEXT";
  }
  return "TEXT";
}

std::string sqlite_create_table(const Table& t) {
  std::string sql = fmt::format("CREATE TABLE IF NOT EXISTS {} (", t.name);
  for (const auto& c : t.columns)
    sql += fmt::format("\"{}\" {}, ", c.name, sql_type(c.type)); // quoted: phases has a column "index"
  sql += "PRIMARY KEY (";
  for (size_t i = 0; i < t.primary_key.size(); ++i)
    sql += fmt::format("{}{}", i ? ", " : "", t.primary_key[i]);
  sql += "))";
  // Sample tables are only ever looked up by (run_id, tick...): clustering rows on that key makes the primary key the
  // time-order index and saves a second b-tree on every insert.
  if (t.name != "runs") sql += " WITHOUT ROWID";
  sql += ";\n";
  if (!t.index.empty()) {
    sql += fmt::format("CREATE INDEX IF NOT EXISTS {}_by_{} ON {} (", t.name, t.index[0], t.name);
    for (size_t i = 0; i < t.index.size(); ++i)
      sql += fmt::format("{}{}", i ? ", " : "", t.index[i]);
    sql += ");\n";
  }
  return sql;
}

class Db {
public:
  Db(const std::string& path, bool create) : path_(path) {
    int flags = create ? (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW) : SQLITE_OPEN_READONLY;
    if (sqlite3_open_v2(path.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
      std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      db_ = nullptr;
      throw std::runtime_error(fmt::format("cannot open SQLite database '{}': {}{}", path, msg,
                                           create ? "; pass --db with a path in a writable directory" : ""));
    }
    sqlite3_busy_timeout(db_, 5000);
  }
  ~Db() {
    for (auto* s : stmts_)
      if (s) sqlite3_finalize(s);
    sqlite3_close(db_);
  }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : sqlite3_errmsg(db_);
      sqlite3_free(err);
      throw std::runtime_error(fmt::format("SQLite '{}': {}", path_, msg));
    }
  }
  sqlite3_stmt* prepare(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK)
      throw std::runtime_error(fmt::format("SQLite '{}': {}", path_, sqlite3_errmsg(db_)));
    stmts_.push_back(s);
    return s;
  }
  // One statement per text for the connection's life (prepared once, however often it runs).
  sqlite3_stmt* cached(const std::string& sql) {
    auto it = cache_.find(sql);
    if (it == cache_.end()) it = cache_.emplace(sql, prepare(sql)).first;
    return it->second;
  }
  void check(int rc, std::string_view what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
      throw std::runtime_error(fmt::format("SQLite '{}' {}: {}", path_, what, sqlite3_errmsg(db_)));
  }
  sqlite3* get() { return db_; }
  const std::string& path() const { return path_; }

private:
  std::string path_;
  sqlite3* db_ = nullptr;
  std::vector<sqlite3_stmt*> stmts_;
  std::map<std::string, sqlite3_stmt*> cache_;
};

// Rows per multi-row INSERT: one statement step amortises the VDBE setup over many rows (+25-40% rows/s here).
constexpr size_t kRowsPerInsert = 64;
// The writer's page cache (negative: KiB). See begin_run.
constexpr std::string_view kCachePragma = "PRAGMA cache_size=-2048;";

void bind_row(Db& db, sqlite3_stmt* st, std::span<const Value> row, int first = 1) {
  for (size_t i = 0; i < row.size(); ++i) {
    const int idx = static_cast<int>(i) + first;
    const Value& v = row[i];
    int rc = SQLITE_OK;
    if (auto* iv = std::get_if<int64_t>(&v))
      rc = sqlite3_bind_int64(st, idx, *iv);
    else if (auto* dv = std::get_if<double>(&v))
      rc = sqlite3_bind_double(st, idx, *dv);
    else if (auto* sv = std::get_if<std::string_view>(&v))
      rc = sqlite3_bind_text(st, idx, sv->data(), static_cast<int>(sv->size()), SQLITE_STATIC);
    else if (auto* s = std::get_if<std::string>(&v))
      rc = sqlite3_bind_text(st, idx, s->data(), static_cast<int>(s->size()), SQLITE_STATIC);
    else
      rc = sqlite3_bind_null(st, idx);
    db.check(rc, "bind");
  }
}

Value column_value(sqlite3_stmt* st, int i) {
  switch (sqlite3_column_type(st, i)) {
  case SQLITE_INTEGER:
    return Value(static_cast<int64_t>(sqlite3_column_int64(st, i)));
  case SQLITE_FLOAT:
    return Value(sqlite3_column_double(st, i));
  case SQLITE_NULL:
    return Value();
  default: {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, i));
    return Value(std::string(p ? p : "", static_cast<size_t>(sqlite3_column_bytes(st, i))));
  }
  }
}

std::string sqlite_columns(const Table& t) {
  std::string cols;
  for (size_t i = 0; i < t.columns.size(); ++i)
    cols += fmt::format("{}\"{}\"", i ? ", " : "", t.columns[i].name);
  return cols;
}

// meta.schema_version as stored, nullopt when the database has none (new, or not wattscope's).
std::optional<std::string> stored_version(Db& db) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db.get(), "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st, nullptr) !=
      SQLITE_OK)
    return std::nullopt; // no meta table
  std::optional<std::string> out;
  if (sqlite3_step(st) == SQLITE_ROW) {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    out = p ? std::string(p) : std::string();
  }
  sqlite3_finalize(st);
  return out;
}

// The columns a stored table really has (an older store lacks the newer ones).
std::vector<std::string> stored_columns(Db& db, std::string_view table) {
  std::vector<std::string> have;
  sqlite3_stmt* info = nullptr;
  sqlite3_prepare_v2(db.get(), fmt::format("PRAGMA table_info({})", table).c_str(), -1, &info, nullptr);
  while (sqlite3_step(info) == SQLITE_ROW)
    have.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(info, 1)));
  sqlite3_finalize(info);
  return have;
}

// issue 35: run_tags (sinks/runs_query.hpp) beside each runs row: the runs table's filters by tag, user, method and
// search read one index range of it instead of every run's JSON.
constexpr std::string_view kRunTagsSchema =
    "CREATE TABLE IF NOT EXISTS run_tags (run_id TEXT NOT NULL, tag_key TEXT NOT NULL, tag_value TEXT NOT NULL);\n"
    "CREATE INDEX IF NOT EXISTS run_tags_by_value ON run_tags (tag_key, tag_value, run_id);\n"
    "CREATE INDEX IF NOT EXISTS run_tags_by_run ON run_tags (run_id);";
// From this many runs passing a run_tags filter, a page in start order walks the start index (runs_query).
constexpr size_t kScanByStartFrom = 1000;
// Every run has a row under kRunTagsMethodKey once its writer knew run_tags; a run recorded by an older wattscope has
// none. Equal counts: the table answers for every run.
constexpr std::string_view kRunTagsComplete =
    "SELECT (SELECT COUNT(*) FROM runs) = (SELECT COUNT(*) FROM run_tags WHERE tag_key = '@method')";

// Rewrites a run's rows of run_tags (with its runs row, in the writer's transaction).
void write_run_tags(Db& db, const RunInfo& run) {
  sqlite3_stmt* del = db.cached("DELETE FROM run_tags WHERE run_id = ?");
  sqlite3_stmt* ins = db.cached("INSERT INTO run_tags (run_id, tag_key, tag_value) VALUES (?, ?, ?)");
  auto step = [&](sqlite3_stmt* st) {
    const int rc = sqlite3_step(st);
    sqlite3_reset(st);
    db.check(rc, "writing run_tags");
  };
  sqlite3_bind_text(del, 1, run.run_id.data(), static_cast<int>(run.run_id.size()), SQLITE_TRANSIENT);
  step(del);
  for (const auto& row : run_tag_rows(run)) {
    sqlite3_bind_text(ins, 1, run.run_id.data(), static_cast<int>(run.run_id.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(ins, 2, row.key.data(), static_cast<int>(row.key.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(ins, 3, row.value.data(), static_cast<int>(row.value.size()), SQLITE_TRANSIENT);
    step(ins);
  }
}

// issue 35: runs.j_per_unit of one run, from its work rows as they stand (sinks/runs_query.hpp: when a writer calls
// it).
void update_j_per_unit(Db& db, const std::string& run_id) {
  static const std::string sql =
      fmt::format("UPDATE runs SET j_per_unit = {} WHERE run_id = ?", j_per_unit_sql("runs"));
  sqlite3_stmt* st = db.cached(sql);
  sqlite3_bind_text(st, 1, run_id.data(), static_cast<int>(run_id.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st);
  sqlite3_reset(st);
  db.check(rc, "writing runs.j_per_unit");
}

bool query_true(Db& db, std::string_view sql) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db.get(), sql.data(), static_cast<int>(sql.size()), &st, nullptr) != SQLITE_OK) {
    sqlite3_finalize(st);
    return false;
  }
  const bool yes = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) != 0;
  sqlite3_finalize(st);
  return yes;
}

// A store made before run_tags, or with runs an older wattscope recorded since: their rows are written now (the
// forward migration, by the next writer).
void backfill_run_tags(Db& db) {
  if (query_true(db, kRunTagsComplete)) return;
  std::vector<RunInfo> missing;
  sqlite3_stmt* st = nullptr;
  const std::string sql =
      fmt::format("SELECT {} FROM runs WHERE run_id NOT IN (SELECT run_id FROM run_tags WHERE tag_key = '@method')",
                  sqlite_columns(table(TableId::Runs)));
  if (sqlite3_prepare_v2(db.get(), sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    sqlite3_finalize(st);
    db.check(SQLITE_ERROR, "reading runs for run_tags");
  }
  std::vector<Value> row(static_cast<size_t>(sqlite3_column_count(st)));
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    for (size_t i = 0; i < row.size(); ++i)
      row[i] = column_value(st, static_cast<int>(i));
    missing.push_back(run_from_row(row));
  }
  sqlite3_finalize(st);
  db.check(rc, "reading runs for run_tags");
  for (const auto& r : missing)
    write_run_tags(db, r);
}

// Schema 6: a store whose gpu_samples still repeats each GPU's uuid, name and vendor (kGpuIdentityColumns) gets them
// in gpu_devices (where a run's device row lacks them or was never stored) and gpu_samples rebuilt without them, in one
// copy of the table. Inside the writer's schema transaction: a failure leaves the store as it was.
void move_gpu_identity(Db& db) {
  const std::vector<std::string> have = stored_columns(db, "gpu_samples");
  if (std::none_of(std::begin(kGpuIdentityColumns), std::end(kGpuIdentityColumns),
                   [&](std::string_view c) { return std::find(have.begin(), have.end(), c) != have.end(); }))
    return;
  // A view on the table would stop its rebuild; ensure_schema makes ours again after.
  db.exec(fmt::format("DROP VIEW IF EXISTS {};", kGpuSamplesNamedView));
  // A store of version 1 never had vendor: what it lacks is read as NULL.
  auto stored = [&](std::string_view c) {
    return std::find(have.begin(), have.end(), c) != have.end() ? fmt::format("max(\"{}\")", c) : std::string("NULL");
  };
  int64_t rows = 0;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db.get(), "SELECT count(*) FROM gpu_samples", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    rows = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  spdlog::info("database '{}': moving each GPU's uuid, name and vendor out of its {} sample rows into gpu_devices "
               "(schema 6, once; VACUUM returns the space)",
               db.path(), rows);
  db.exec(
      fmt::format("CREATE TEMP TABLE gpu_identity AS SELECT run_id, gpu_index, {} AS vendor, {} AS uuid, {} AS name "
                  "FROM gpu_samples GROUP BY run_id, gpu_index;",
                  stored("vendor"), stored("uuid"), stored("name")));
  db.exec("INSERT OR IGNORE INTO gpu_devices (run_id, gpu_index, vendor, uuid, name) "
          "SELECT run_id, gpu_index, vendor, uuid, name FROM temp.gpu_identity;");
  std::string sets;
  for (const auto& c : kGpuIdentityColumns)
    sets += fmt::format("{0}\"{1}\" = coalesce(nullif(\"{1}\", ''), (SELECT i.\"{1}\" FROM temp.gpu_identity i WHERE "
                        "i.run_id = gpu_devices.run_id AND i.gpu_index = gpu_devices.gpu_index))",
                        sets.empty() ? "" : ", ", c);
  db.exec(fmt::format("UPDATE gpu_devices SET {};", sets));
  db.exec("DROP TABLE temp.gpu_identity;");
  const Table& g = table(TableId::GpuSamples);
  Table lean = g;
  lean.name = "gpu_samples_v6";
  const std::string cols = sqlite_columns(g);
  db.exec(sqlite_create_table(lean));
  db.exec(fmt::format("INSERT INTO gpu_samples_v6 ({0}) SELECT {0} FROM gpu_samples;", cols));
  db.exec("DROP TABLE gpu_samples;");
  db.exec("ALTER TABLE gpu_samples_v6 RENAME TO gpu_samples;");
}

// Schema 7: each run's key in gpu_sample_rows, given in the order runs are first written (so a new run's rows are
// appended at the end of that table's b-tree, which keeps its pages full).
constexpr std::string_view kRunKeysSchema =
    "CREATE TABLE IF NOT EXISTS run_keys (run_key INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE);";

bool is_table(Db& db, std::string_view name) {
  return query_true(db, fmt::format("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '{}'", name));
}

// Schema 7: a store whose gpu_samples is still a table (each row naming its run by its 24-character id) gets a key
// per run in run_keys, in start order, and its rows copied once into gpu_sample_rows under those keys; the view
// gpu_samples (ensure_schema) then shows them as before. Inside the writer's schema transaction.
void key_gpu_samples(Db& db) {
  if (!is_table(db, "gpu_samples")) return;
  db.exec(fmt::format("DROP VIEW IF EXISTS {};", kGpuSamplesNamedView)); // it reads the table; made again after
  spdlog::info("database '{}': storing each GPU sample's run as a small key (schema 7, once; VACUUM returns the space)",
               db.path());
  for (const auto& sql : gpu_rows_keying_sql("INSERT OR IGNORE", '"'))
    db.exec(sql);
  db.exec("DROP TABLE gpu_samples;");
}

void ensure_schema(Db& db) {
  db.exec("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);");
  check_schema_version(stored_version(db), fmt::format("database '{}'", db.path()));
  db.exec("BEGIN IMMEDIATE;");
  try {
    // gpu_samples is a view (schema 7), made below; an older store's table of that name is brought forward first.
    const bool gpu_table = is_table(db, "gpu_samples");
    for (const auto& t : all_tables())
      if (t.name != "gpu_samples") db.exec(sqlite_create_table(t));
    db.exec(sqlite_create_table(gpu_sample_rows_table()));
    db.exec(std::string(kRunKeysSchema));
    std::vector<Table> tables(all_tables().begin(), all_tables().end());
    tables.push_back(gpu_sample_rows_table());
    // Forward migration: a column this version has and the stored table lacks is added (NULL in old rows). Columns
    // are only ever added, so every older database can be brought forward this way.
    for (const auto& t : tables) {
      if (t.name == "gpu_samples" && !gpu_table) continue;
      const std::vector<std::string> have = stored_columns(db, t.name);
      for (const auto& c : t.columns)
        if (std::find(have.begin(), have.end(), c.name) == have.end())
          db.exec(fmt::format("ALTER TABLE {} ADD COLUMN \"{}\" {};", t.name, c.name, sql_type(c.type)));
    }
    // issue 35: serve's runs table filters by task or host and orders by start; at 100,000 runs a scan of the runs
    // (their summaries inline) is most of an answer. Older stores get them the next time a run is recorded.
    db.exec("CREATE INDEX IF NOT EXISTS runs_by_task_start ON runs (task, start_ms);\n"
            "CREATE INDEX IF NOT EXISTS runs_by_host_start ON runs (host, start_ms);");
    db.exec(std::string(kRunTagsSchema));
    backfill_run_tags(db);
    // issue 35: runs.j_per_unit and its index; a store that lacks the column gets it filled for every run once.
    const std::vector<std::string> run_cols = stored_columns(db, "runs");
    if (std::find(run_cols.begin(), run_cols.end(), kJPerUnitColumn) == run_cols.end()) {
      db.exec("ALTER TABLE runs ADD COLUMN j_per_unit REAL;");
      db.exec(fmt::format("UPDATE runs SET j_per_unit = {};", j_per_unit_sql("runs")));
    }
    db.exec("CREATE INDEX IF NOT EXISTS runs_by_j_per_unit ON runs (j_per_unit, start_ms, run_id);");
    move_gpu_identity(db);
    key_gpu_samples(db);
    // The views, made again where their columns are not this version's (or they are missing).
    const std::vector<std::string> samples = stored_columns(db, "gpu_samples");
    const Table& g = table(TableId::GpuSamples);
    if (!std::equal(samples.begin(), samples.end(), g.columns.begin(), g.columns.end(),
                    [](const std::string& a, const Column& b) { return a == b.name; })) {
      db.exec(fmt::format("DROP VIEW IF EXISTS {};", kGpuSamplesNamedView));
      db.exec("DROP VIEW IF EXISTS gpu_samples;");
      db.exec(fmt::format("CREATE VIEW gpu_samples AS {};", gpu_samples_view_select('"')));
    }
    const std::vector<std::string> view = stored_columns(db, kGpuSamplesNamedView);
    const std::vector<std::string_view> want = gpu_samples_named_columns();
    if (!std::equal(view.begin(), view.end(), want.begin(), want.end())) {
      db.exec(fmt::format("DROP VIEW IF EXISTS {};", kGpuSamplesNamedView));
      db.exec(fmt::format("CREATE VIEW {} AS {};", kGpuSamplesNamedView, gpu_samples_named_select('"')));
    }
    db.exec(fmt::format("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', '{}');", kSchemaVersion));
    db.exec("COMMIT;");
  } catch (...) {
    sqlite3_exec(db.get(), "ROLLBACK;", nullptr, nullptr, nullptr);
    throw;
  }
}

// A database is written in place (SQLite's journal keeps it whole), so the output policy's rename does not apply,
// but its refusals do (core/output_file.hpp): no writing through a symbolic link, and a device or FIFO is no database.
void check_writable_path(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return; // a new file: SQLite creates it
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const auto real = std::filesystem::weakly_canonical(std::filesystem::absolute(path), ec);
    throw std::runtime_error(fmt::format("cannot write SQLite database '{}': it is a symbolic link, and wattscope does "
                                         "not write through links; pass --db with the file's own path{}",
                                         path, ec ? std::string() : fmt::format(" ('{}')", real.string())));
  }
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error(fmt::format(
        "cannot write SQLite database '{}': it is not a regular file; pass --db with a database file", path));
}

class SqliteSink final : public Sink {
public:
  explicit SqliteSink(std::string path) : path_(std::move(path)) {}
  std::string describe() const override { return fmt::format("SQLite {}", path_); }

  void begin_run(const RunInfo& run) override {
    check_writable_path(path_);
    // A sink may write run after run: what was prepared on the last connection goes with it.
    begin_ = commit_ = nullptr;
    insert_many_.fill(nullptr);
    run_keys_.clear();
    db_ = std::make_unique<Db>(path_, true);
    // WAL lets `wattscope list` and other readers see committed batches while the run goes on; NORMAL sync is
    // durable across a process crash, which is the failure a monitor must survive.
    // 4 KiB pages (SQLite's default; the page size only takes effect on a new database): a commit appends the pages
    // it changed to the WAL, checksummed, and a run's commit changes the right-most leaf of each table it writes (5
    // pages a tick with 8 GPUs). With 16 KiB pages that was 80 KiB a commit, and its checksum a quarter of the
    // writer's instructions (issue 12: the writer thread 218 -> 184 us a tick at 1 s, median of 5 paired runs); a
    // report over 45,000 ticks of 8 GPUs reads them as fast (1.36 s either way). The page cache is bounded at 2 MiB
    // (kCachePragma): a run only appends, so a write touches the right-most path of each b-tree (a few pages per table)
    // and the cache needs no more, while a larger one grows with the file up to its size (at 64 MiB, RSS reached ~100
    // MiB; issue 12).
    db_->exec(
        fmt::format("PRAGMA page_size=4096; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; {}", kCachePragma));
    ensure_schema(*db_);
    begin_run_ = db_->prepare("BEGIN;");
    commit_run_ = db_->prepare("COMMIT;");
    for (size_t i = 0; i < kTableCount; ++i) {
      // GPU rows are stored under their run's key (schema 7): bound by bind_run_keys in place of the run id.
      const Table& t = i == kGpuRows ? gpu_sample_rows_table() : all_tables()[i];
      std::string one = "(";
      for (size_t c = 0; c < t.columns.size(); ++c)
        one += c ? ",?" : "?";
      one += ")";
      std::string many = one;
      for (size_t r = 1; r < kRowsPerInsert; ++r)
        many += "," + one;
      // OR REPLACE: the runs row is rewritten at the end; replayed sample batches are idempotent on their key.
      const std::string head = fmt::format("INSERT OR REPLACE INTO {} ({}) VALUES ", t.name, sqlite_columns(t));
      insert_[i] = db_->prepare(head + one);
      // The many-row form is prepared on first use: a 64-row statement takes ~1 ms to compile, and a run at 1 s with
      // commits every second never fills one (issue 12: start-up is part of what a run costs).
      many_sql_[i] = head + many;
    }
    upsert_run(run);
    run_key(run.run_id);
  }

  void write(const RowBatch& batch) override {
    // BEGIN and COMMIT prepared once: sqlite3_exec would compile them on every commit (issue 12: one commit a second).
    if (!begin_) {
      begin_ = db_->prepare("BEGIN;");
      commit_ = db_->prepare("COMMIT;");
    }
    step_once(begin_, "BEGIN");
    try {
      for (const auto& rows : batch.tables) {
        if (rows.cells.empty()) continue;
        const size_t t = static_cast<size_t>(rows.table);
        const size_t ncol = rows.columns();
        const std::span<const Value> cells(rows.cells);
        size_t r = 0;
        for (; r + kRowsPerInsert <= rows.rows(); r += kRowsPerInsert) {
          if (!insert_many_[t]) insert_many_[t] = db_->prepare(many_sql_[t]);
          bind_row(*db_, insert_many_[t], cells.subspan(r * ncol, kRowsPerInsert * ncol));
          if (t == kGpuRows) bind_run_keys(insert_many_[t], cells.subspan(r * ncol, kRowsPerInsert * ncol), ncol);
          db_->check(sqlite3_step(insert_many_[t]), "insert");
          sqlite3_reset(insert_many_[t]);
        }
        for (; r < rows.rows(); ++r) {
          bind_row(*db_, insert_[t], cells.subspan(r * ncol, ncol));
          if (t == kGpuRows) bind_run_keys(insert_[t], cells.subspan(r * ncol, ncol), ncol);
          db_->check(sqlite3_step(insert_[t]), "insert");
          sqlite3_reset(insert_[t]);
        }
      }
      if (const auto& runs = batch.tables[static_cast<size_t>(TableId::Runs)]; !runs.cells.empty()) {
        const std::span<const Value> cells(runs.cells);
        for (size_t r = 0; r < runs.rows(); ++r) {
          const RunInfo run = run_from_row(cells.subspan(r * runs.columns(), runs.columns()));
          write_run_tags(*db_, run);
          update_j_per_unit(*db_, run.run_id); // after the batch's work rows, above
        }
      }
      step_once(commit_, "COMMIT");
    } catch (...) {
      run_keys_.clear(); // keys made in the batch's transaction go with it
      for (auto* st : insert_)
        sqlite3_reset(st);
      for (auto* st : insert_many_)
        if (st) sqlite3_reset(st);
      sqlite3_exec(db_->get(), "ROLLBACK;", nullptr, nullptr, nullptr);
      throw;
    }
  }

  void end_run(const RunInfo& run) override { upsert_run(run); }

private:
  static constexpr size_t kGpuRows = static_cast<size_t>(TableId::GpuSamples);
  // A run's key in run_keys, made the first time the run is written (a replayed batch may name an earlier run).
  int64_t run_key(std::string_view id) {
    if (auto it = run_keys_.find(id); it != run_keys_.end()) return it->second;
    const std::string run_id(id);
    for (const char* sql :
         {"INSERT OR IGNORE INTO run_keys (run_id) VALUES (?)", "SELECT run_key FROM run_keys WHERE run_id = ?"}) {
      sqlite3_stmt* st = db_->cached(sql);
      sqlite3_bind_text(st, 1, run_id.c_str(), static_cast<int>(run_id.size()), SQLITE_TRANSIENT);
      const int rc = sqlite3_step(st);
      if (rc == SQLITE_ROW) run_keys_.emplace(run_id, sqlite3_column_int64(st, 0));
      sqlite3_reset(st);
      db_->check(rc, "keying the run");
    }
    const auto it = run_keys_.find(run_id);
    if (it == run_keys_.end()) throw std::runtime_error(fmt::format("SQLite '{}': run {} has no key", path_, run_id));
    return it->second;
  }
  // The first parameter of each GPU row bound (by bind_row) to its run id, bound again to the run's key.
  void bind_run_keys(sqlite3_stmt* st, std::span<const Value> cells, size_t ncol) {
    for (size_t r = 0; r * ncol < cells.size(); ++r)
      sqlite3_bind_int64(st, static_cast<int>(r * ncol + 1), run_key(value_text(cells[r * ncol])));
  }
  void step_once(sqlite3_stmt* st, std::string_view what) {
    const int rc = sqlite3_step(st);
    sqlite3_reset(st);
    db_->check(rc, what);
  }
  void upsert_run(const RunInfo& run) {
    TableRows rows;
    rows.table = TableId::Runs;
    append_run_row(run, rows);
    sqlite3_stmt* st = insert_[static_cast<size_t>(TableId::Runs)];
    step_once(begin_run_, "BEGIN");
    try {
      bind_row(*db_, st, rows.cells);
      int rc = sqlite3_step(st);
      sqlite3_reset(st);
      db_->check(rc, "writing the runs row");
      write_run_tags(*db_, run);
      update_j_per_unit(*db_, run.run_id);
      step_once(commit_run_, "COMMIT");
    } catch (...) {
      sqlite3_exec(db_->get(), "ROLLBACK;", nullptr, nullptr, nullptr);
      throw;
    }
  }

  std::string path_;
  std::unique_ptr<Db> db_;
  std::map<std::string, int64_t, std::less<>> run_keys_;
  std::array<sqlite3_stmt*, kTableCount> insert_{};
  std::array<sqlite3_stmt*, kTableCount> insert_many_{};
  std::array<std::string, kTableCount> many_sql_;
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
  sqlite3_stmt* begin_run_ = nullptr;
  sqlite3_stmt* commit_run_ = nullptr;
};

// A search's page of run ids, each row carrying how many runs pass (a window over every passing row).
constexpr ResultColumn kCountedIds[] = {{"run_id", "run_id", ColType::Text},
                                        {"passing", "COUNT(*) OVER ()", ColType::Int}};

class SqliteReader final : public StoreReader {
public:
  explicit SqliteReader(const std::string& path) {
    struct stat sb {};
    if (::stat(path.c_str(), &sb) != 0)
      throw std::runtime_error(
          fmt::format("no database at '{}'; record a run first (wattscope run -- CMD) or pass --db PATH", path));
    db_ = std::make_unique<Db>(path, false);
    // A store written by a newer wattscope (or with a version that is not a number) is refused, not misread.
    check_schema_version(stored_version(*db_), fmt::format("database '{}'", path));
  }
  std::string describe() const override { return fmt::format("SQLite {}", db_->path()); }

  std::vector<RunInfo> runs() override {
    std::vector<RunInfo> out;
    query(fmt::format("SELECT {} FROM runs ORDER BY start_ms, run_id", select_list(TableId::Runs)), {},
          [&](std::span<const Value> row) { out.push_back(run_from_row(row)); });
    return out;
  }

  std::optional<RunInfo> run_by_id(const std::string& id) override {
    std::optional<RunInfo> out;
    query(fmt::format("SELECT {} FROM runs WHERE run_id = ?", select_list(TableId::Runs)), id,
          [&](std::span<const Value> row) { out = run_from_row(row); });
    return out;
  }

  RunsPage runs_page(size_t offset, size_t limit) override {
    RunsPage page;
    page.total = count_of("SELECT COUNT(*) FROM runs", {});
    query(fmt::format("SELECT {} FROM runs ORDER BY start_ms, run_id LIMIT {} OFFSET {}", select_list(TableId::Runs),
                      limit, offset),
          {}, [&](std::span<const Value> row) { page.runs.push_back(run_from_row(row)); });
    return page;
  }

  // issue 35: filters, order and page in one statement each for the count, the page and the page's work.
  RunsPage runs_query(const RunsFilter& filter, size_t offset, size_t limit) override {
    select_list(TableId::Work);
    const bool no_work = columns_[static_cast<size_t>(TableId::Work)]->empty() && table_may_be_absent(TableId::Work);
    RunsFilter f = filter;
    if (no_work && f.sort == RunsSortKey::JPerUnit) f.sort = RunsSortKey::Start; // an older store: no run has it
    // run_tags when it answers for every run; else (a store no writer of this version has opened since, or one an
    // older wattscope added runs to) the filters read the runs' own JSON, as they did before it.
    const bool indexed = reads_tags(f) && query_true(*db_, kRunTagsComplete);
    RunsSql sql = runs_sql(f, SqlDialect::Sqlite, indexed);
    RunsPage page;
    auto count = [&](const RunsSql& q) { return count_of("SELECT COUNT(*) FROM runs" + q.where, q.params); };
    if (!f.q.empty() && f.sort != RunsSortKey::JPerUnit && limit > 0) {
      // issue 35: a search compares every run's text for its count anyway: the page and the count in one statement
      // (COUNT(*) OVER () in each row), the texts compared once (q=seed 3 at 100,000 runs: 63 ms, where the count
      // and the page apart took 85; beside method=mixed by energy 53 against 121).
      // The ids only: the window holds every passing row until the page is cut, and a run's whole row (its summary)
      // made that slower than two statements.
      std::vector<SqlParam> ids;
      const size_t id_col = result_index(kCountedIds, "run_id"), passing_col = result_index(kCountedIds, "passing");
      query_params(fmt::format("SELECT {} FROM runs{}{} LIMIT {} OFFSET {}", result_select_list(kCountedIds), sql.where,
                               sql.order_by, limit, offset),
                   sql.params, [&](std::span<const Value> row) {
                     ids.emplace_back(std::string(value_text(row[id_col])));
                     page.total = static_cast<size_t>(value_int(row[passing_col]).value_or(0));
                   });
      if (ids.empty()) {
        page.total = count(sql); // past the end: no row carried it
        return page;
      }
      runs_by_ids(ids, page.runs);
      add_page_work(page, no_work);
      return page;
    }
    page.total = count(sql);
    if (f.sort == RunsSortKey::JPerUnit && has_run_column(kJPerUnitColumn)) {
      // issue 35: the kept figure's index, in two walks (runs_query.hpp), not the figure computed for every run.
      RunsFilter by_start = f;
      by_start.sort = RunsSortKey::Start;
      const RunsSql base = runs_sql(by_start, SqlDialect::Sqlite, indexed);
      for (const auto& part : j_per_unit_page(base, f.descending, count(with_j_per_unit(base)), offset, limit))
        fetch_page(part.sql, part.offset, part.limit, page.runs);
      add_page_work(page, no_work);
      return page;
    }
    // Many runs pass (at 100,000 runs, method=mixed: 24,000): a page in start order is found by walking the start
    // index (6 ms) rather than fetching all that pass and sorting them (29 ms). Few pass (a Slurm job): fetch them.
    if (indexed && f.sort == RunsSortKey::Start && page.total >= kScanByStartFrom)
      sql = runs_sql(f, SqlDialect::Sqlite, true, true);
    fetch_page(sql, offset, limit, page.runs);
    add_page_work(page, no_work);
    return page;
  }

  void scan(TableId id, const RunInfo& run, const RowFn& fn) override {
    const Table& t = table(id);
    std::string order;
    for (size_t i = 0; i < t.primary_key.size(); ++i)
      order += fmt::format("{}{}", i ? ", " : "", t.primary_key[i]);
    const std::string cols = select_list(id);
    if (columns_[static_cast<size_t>(id)]->empty() && table_may_be_absent(id)) return; // an older store: no rows
    query(fmt::format("SELECT {} FROM {} WHERE run_id = ? ORDER BY {}", cols, t.name, order), run.run_id, fn);
  }

private:
  // issue 35: a page's run ids, then those runs in that order: the sort and the offset carry ids, not whole rows
  // (their summaries; 100,000 runs by energy at offset 5,000: 31 ms against 71).
  void fetch_page(const RunsSql& q, size_t offset, size_t limit, std::vector<RunInfo>& out) {
    std::vector<SqlParam> ids;
    query_params(fmt::format("SELECT run_id FROM runs{}{} LIMIT {} OFFSET {}", q.where, q.order_by, limit, offset),
                 q.params,
                 [&](std::span<const Value> row) { ids.emplace_back(std::string(value_text(only_cell(row)))); });
    runs_by_ids(ids, out);
  }
  void runs_by_ids(const std::vector<SqlParam>& ids, std::vector<RunInfo>& out) {
    if (ids.empty()) return;
    std::string marks;
    for (size_t i = 0; i < ids.size(); ++i)
      marks += i ? ",?" : "?";
    std::unordered_map<std::string, RunInfo> found;
    query_params(fmt::format("SELECT {} FROM runs WHERE run_id IN ({})", select_list(TableId::Runs), marks), ids,
                 [&](std::span<const Value> row) {
                   RunInfo r = run_from_row(row);
                   std::string id = r.run_id;
                   found.emplace(std::move(id), std::move(r));
                 });
    for (const auto& id : ids) // in the page's order
      if (auto it = found.find(std::get<std::string>(id)); it != found.end()) out.push_back(std::move(it->second));
  }
  void add_page_work(RunsPage& page, bool no_work) {
    page.work.resize(page.runs.size());
    if (page.runs.empty() || no_work) return;
    const PageWorkSql w = page_work_sql(page.runs);
    query_params(w.sql, w.params, [&](std::span<const Value> row) { add_page_work_row(page.runs, page.work, row); });
  }
  // A query whose one column is a count.
  size_t count_of(const std::string& sql, const std::vector<SqlParam>& params) {
    size_t n = 0;
    query_params(sql, params, [&](std::span<const Value> row) {
      if (const auto v = value_int(only_cell(row))) n = static_cast<size_t>(*v);
    });
    return n;
  }
  // Whether the store's runs table has a column outside the registry (runs.j_per_unit: an older store has not).
  bool has_run_column(std::string_view name) {
    if (!run_columns_) run_columns_ = stored_columns(*db_, "runs");
    return std::find(run_columns_->begin(), run_columns_->end(), name) != run_columns_->end();
  }
  std::optional<std::vector<std::string>> run_columns_;
  // The table's columns by name, in this version's order; a column an older store lacks reads as NULL. Names come
  // from the schema, never from the user.
  std::string select_list(TableId id) {
    const Table& t = table(id);
    auto& have = columns_[static_cast<size_t>(id)];
    if (!have) have = stored_columns(*db_, t.name);
    std::string cols;
    for (size_t i = 0; i < t.columns.size(); ++i) {
      const bool stored = have->empty() || std::find(have->begin(), have->end(), t.columns[i].name) != have->end();
      cols += fmt::format("{}{}\"{}\"", i ? ", " : "", stored ? "" : "NULL AS ", t.columns[i].name);
    }
    return cols;
  }
  std::array<std::optional<std::vector<std::string>>, kTableCount> columns_;
  // A query with at most one parameter, the run's id ("" for none).
  void query(const std::string& sql, const std::string& run_id, const RowFn& fn) {
    query_params(sql, run_id.empty() ? std::vector<SqlParam>{} : std::vector<SqlParam>{run_id}, fn);
  }
  void query_params(const std::string& sql, const std::vector<SqlParam>& params, const RowFn& fn) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_->get(), sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      std::string msg = sqlite3_errmsg(db_->get());
      throw std::runtime_error(fmt::format("'{}' is not a wattscope database or is damaged ({})", db_->path(), msg));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const int at = static_cast<int>(i + 1);
      if (const auto* n = std::get_if<int64_t>(&params[i]))
        sqlite3_bind_int64(st, at, *n);
      else {
        const auto& text = std::get<std::string>(params[i]);
        sqlite3_bind_text(st, at, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
      }
    }
    std::vector<Value> row(static_cast<size_t>(sqlite3_column_count(st)));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      for (size_t i = 0; i < row.size(); ++i)
        row[i] = column_value(st, static_cast<int>(i));
      fn(row);
    }
    sqlite3_finalize(st);
    db_->check(rc, "reading");
  }
  std::unique_ptr<Db> db_;
};

} // namespace

std::unique_ptr<Sink> make_sqlite_sink(const std::string& path) {
  return std::make_unique<SqliteSink>(path);
}
std::unique_ptr<StoreReader> make_sqlite_reader(const std::string& path) {
  return std::make_unique<SqliteReader>(path);
}
std::string sqlite_schema_sql() {
  std::string sql;
  for (const auto& t : all_tables())
    if (t.name != "gpu_samples") sql += sqlite_create_table(t);
  sql += fmt::format("{}\n", kRunKeysSchema);
  sql += sqlite_create_table(gpu_sample_rows_table());
  sql += fmt::format("CREATE VIEW gpu_samples AS {};\n", gpu_samples_view_select('"'));
  sql += fmt::format("CREATE VIEW {} AS {};\n", kGpuSamplesNamedView, gpu_samples_named_select('"'));
  return sql;
}

} // namespace wattscope
