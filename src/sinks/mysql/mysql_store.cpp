#include "sinks/mysql/mysql_store.hpp"

#include "core/lazy/lazy_lib.hpp"

#include <mysql.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sinks/runs_query.hpp"
#include "sinks/sqlite/sqlite_store.hpp"
#include "sinks/store.hpp"

namespace wattscope {

namespace fs = std::filesystem;

namespace {

// The field of a one-column text result (a single value, a list of run ids): one column has no place to mistake;
// nullptr for NULL. Throws std::logic_error for a result of another width.
const char* only_field(MYSQL_RES* r, MYSQL_ROW row) {
  if (const unsigned int n = mysql_num_fields(r); n != 1)
    throw std::logic_error(fmt::format("a one-column query answered {} columns", n));
  return *row;
}
// The field `name` of a text result row whose columns are `cols` (its SELECT list written from them); nullptr for NULL.
const char* field(MYSQL_ROW row, std::span<const ResultColumn> cols, std::string_view name) {
  return row[result_index(cols, name)];
}

// Client error codes (errmsg.h) that mean "the server is not reachable now", as opposed to a configuration error.
bool is_outage(unsigned int err) {
  return err == 2002 /* CR_CONNECTION_ERROR */ || err == 2003 /* CR_CONN_HOST_ERROR */ ||
         err == 2006 /* CR_SERVER_GONE_ERROR */ || err == 2013 /* CR_SERVER_LOST */ ||
         err == 2055 /* CR_SERVER_LOST_EXTENDED */ || err == 1053 /* ER_SERVER_SHUTDOWN */ ||
         err == 1927 /* ER_CONNECTION_KILLED */ || err == 4031 /* ER_CLIENT_INTERACTION_TIMEOUT */;
}

// The client library ends a connection error with the system's errno in parentheses ("Can't connect to server on
// '10.0.0.5' (115)"): said in words, with what to check, since "(115)" alone tells a user nothing.
std::string explain_connect_error(const std::string& message, const MysqlUrl& url) {
  const auto open = message.rfind('(');
  if (open == std::string::npos || message.back() != ')') return message;
  int code = 0;
  const char* first = message.data() + open + 1;
  const char* last = message.data() + message.size() - 1;
  if (auto [p, ec] = std::from_chars(first, last, code); ec != std::errc() || p != last || code <= 0) return message;
  const std::string where = url.socket.empty() ? fmt::format("{}:{}", url.host, url.port) : url.socket;
  std::string why;
  // The connector connects without blocking and reports EINPROGRESS for a refused connection as for a host that never
  // answered: both are said.
  if (code == EINPROGRESS || code == ETIMEDOUT || code == EAGAIN || code == ECONNREFUSED)
    why = fmt::format("the connection to {} did not complete: is MariaDB/MySQL running there, on that port, and is "
                      "the port open in the firewall?",
                      where);
  else if (code == ENOENT)
    why = fmt::format("no socket {}: is the server running, and is that its socket?", where);
  else if (code == EHOSTUNREACH || code == ENETUNREACH)
    why = fmt::format("no route to {}: check the host name and the network", where);
  else
    why = std::strerror(code);
  return fmt::format("{} [errno {}: {}]", message, code, why);
}

std::string fix_for(unsigned int err, const MysqlUrl& url) {
  switch (err) {
  case 1045: // ER_ACCESS_DENIED_ERROR
    return fmt::format("check the password in WATTSCOPE_MYSQL_PASSWORD or the [client] section of ~/.my.cnf, and "
                       "that user '{}' may connect from this host",
                       url.user);
  case 1044: // ER_DBACCESS_DENIED_ERROR
    return fmt::format("grant user '{}' access: GRANT ALL ON `{}`.* TO '{}'@'%'", url.user, url.database, url.user);
  case 1049: // ER_BAD_DB_ERROR
    return fmt::format("create it first: CREATE DATABASE `{}` CHARACTER SET utf8mb4", url.database);
  case 2005: // CR_UNKNOWN_HOST
    return "check the host name in the URL";
  default:
    return "check the URL: mysql://USER@HOST[:PORT]/DATABASE";
  }
}

// issue 33: the longest INSERT built in memory, whatever max_allowed_packet a server allows (up to 1 GiB).
constexpr size_t kMaxStatementBytes = size_t{64} << 20;

struct MysqlError : std::runtime_error {
  MysqlError(unsigned int e, const std::string& msg) : std::runtime_error(msg), err(e) {}
  unsigned int err;
};

// Text columns that take part in a key or an index are VARCHAR (InnoDB indexes need a length); the rest MEDIUMTEXT.
bool keyed(const Table& t, std::string_view col) {
  for (auto k : t.primary_key)
    if (k == col) return true;
  return col == "host";
}
bool timed_key(const Table& t, std::string_view col) {
  return col == "ts_ms" && std::find(t.primary_key.begin(), t.primary_key.end(), "tick") != t.primary_key.end();
}

std::string column_list(const Table& t) {
  std::string cols;
  for (size_t i = 0; i < t.columns.size(); ++i)
    cols += fmt::format("{}`{}`", i ? ", " : "", t.columns[i].name);
  return cols;
}

// issue 33: the two tables that hold most of a fleet's rows (per-core and GPU samples, the latter in gpu_sample_rows
// since schema 7) are created compressed: their rows repeat the run, tick and time from row to row, which InnoDB's
// page compression halves, for a little of the server's CPU on a page's write. Existing tables are left as they are
// (docs/storage.md gives the ALTER TABLE); a server that refuses compressed tables gets plain ones.
bool compressed(const Table& t) {
  return t.name == "cpu_core_samples" || t.name == kGpuSampleRowsTable;
}
constexpr std::string_view kCompressed = " ROW_FORMAT=COMPRESSED KEY_BLOCK_SIZE=8";

std::string create_table_sql(const Table& t, bool compress = true) {
  std::string sql = fmt::format("CREATE TABLE IF NOT EXISTS `{}` (\n", t.name);
  for (const auto& c : t.columns) {
    std::string type = c.type == ColType::Int    ? "BIGINT"
                       : c.type == ColType::Real ? "DOUBLE"
                       : keyed(t, c.name)        ? "VARCHAR(255)"
                                                 : "MEDIUMTEXT";
    const bool not_null = (keyed(t, c.name) && c.name != "host") || timed_key(t, c.name);
    sql += fmt::format("  `{}` {}{},\n", c.name, type, not_null ? " NOT NULL" : "");
  }
  // Sample tables are clustered on (run_id, ts_ms, tick, ...): "all samples of a run in time order" and "a run's
  // samples in a time range" are both primary-key range scans, and no secondary index slows every insert (one cost
  // 25 % of the ingest rate). "A host's samples in a time range" finds the host's runs through runs_by_host_time.
  std::vector<std::string_view> key(t.primary_key.begin(), t.primary_key.end());
  const bool timed = std::find(key.begin(), key.end(), "tick") != key.end();
  if (timed) key.insert(key.begin() + 1, "ts_ms");
  sql += "  PRIMARY KEY (";
  for (size_t i = 0; i < key.size(); ++i)
    sql += fmt::format("{}`{}`", i ? ", " : "", key[i]);
  sql += ")";
  if (t.name == "runs") sql += ",\n  KEY `runs_by_host_time` (`host`, `start_ms`)";
  sql += "\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";
  if (compress && compressed(t)) sql += kCompressed;
  sql += ";\n";
  return sql;
}

class Conn {
public:
  explicit Conn(const MysqlUrl& url) : url_(url) {}
  ~Conn() { close(); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // Throws MysqlError; the error code says whether it is an outage or a configuration problem.
  void connect() {
    close();
    run_keys.clear();
    db_ = mysql_init(nullptr);
    if (!db_)
      throw MysqlError(0, lazy::mariadb().available() ? "out of memory" : "MySQL store: " + lazy::mariadb().error());
    unsigned int connect_timeout = 3, io_timeout = 15;
    // The client's own packet limit (libmariadb's default is below some servers'): the server's is what counts.
    unsigned long client_max = kMaxStatementBytes + 4096;
    mysql_options(db_, MYSQL_OPT_MAX_ALLOWED_PACKET, &client_max);
    mysql_options(db_, MYSQL_OPT_CONNECT_TIMEOUT, &connect_timeout);
    mysql_options(db_, MYSQL_OPT_READ_TIMEOUT, &io_timeout);
    mysql_options(db_, MYSQL_OPT_WRITE_TIMEOUT, &io_timeout);
    mysql_options(db_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    // The password never comes from the command line: WATTSCOPE_MYSQL_PASSWORD, else the [client] section of
    // ~/.my.cnf (as the mysql client reads it).
    const char* home = std::getenv("HOME");
    if (home && fs::exists(fs::path(home) / ".my.cnf")) {
      const std::string cnf = (fs::path(home) / ".my.cnf").string();
      mysql_options(db_, MYSQL_READ_DEFAULT_FILE, cnf.c_str());
      mysql_options(db_, MYSQL_READ_DEFAULT_GROUP, "client");
    }
    const char* password = std::getenv("WATTSCOPE_MYSQL_PASSWORD");
    const bool use_socket = !url_.socket.empty();
    if (!mysql_real_connect(db_, use_socket ? "localhost" : url_.host.c_str(), url_.user.c_str(), password,
                            url_.database.c_str(), use_socket ? 0 : url_.port,
                            use_socket ? url_.socket.c_str() : nullptr, 0)) {
      const unsigned int err = mysql_errno(db_);
      std::string msg = fmt::format("MySQL {}: {}", url_.text(), explain_connect_error(mysql_error(db_), url_));
      close();
      if (!is_outage(err)) msg += "; " + fix_for(err, url_);
      throw MysqlError(err, msg);
    }
    mysql_autocommit(db_, 0);
    // Writers of many hosts write the same tables at once: under READ COMMITTED InnoDB takes no gap locks for the
    // writer's searches (run_tags' DELETE and UPDATE by run id), which deadlocked two runs' ends against each other
    // (Mysql.EightConcurrentWriters, one in six runs on a loaded machine). Each statement of a writer reads only its
    // own run's rows, so it needs nothing stronger.
    exec("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    {
      std::lock_guard lock(fd_mu_);
      fd_ = mysql_get_socket(db_);
    }
    // issue 33: a statement may be as long as the server takes in one packet (less the command byte and a margin);
    // never more than kMaxStatementBytes, which bounds what one statement holds in this process's memory.
    unsigned long long server_max = 0;
    if (const auto v = value("SELECT @@max_allowed_packet"))
      std::from_chars(v->data(), v->data() + v->size(), server_max);
    max_statement_bytes_ = static_cast<size_t>(
        std::clamp<unsigned long long>(server_max > 64 ? server_max - 64 : 0, 1024, kMaxStatementBytes));
  }
  size_t max_statement_bytes() const { return max_statement_bytes_; }
  void close() {
    {
      std::lock_guard lock(fd_mu_);
      fd_ = -1;
    }
    for (auto& [k, st] : stmts_)
      mysql_stmt_close(st);
    stmts_.clear();
    if (db_) mysql_close(db_);
    db_ = nullptr;
  }
  bool connected() const { return db_ != nullptr; }
  [[noreturn]] void fail(std::string_view what) {
    const unsigned int err = mysql_errno(db_);
    throw MysqlError(err, fmt::format("MySQL {} {}: {}", url_.text(), what, mysql_error(db_)));
  }
  void exec(const std::string& sql) {
    if (mysql_real_query(db_, sql.data(), sql.size()) != 0) fail("query");
    if (MYSQL_RES* r = mysql_store_result(db_)) mysql_free_result(r);
  }
  // Single-value text query (no user input in `sql`).
  std::optional<std::string> value(const std::string& sql) {
    if (mysql_real_query(db_, sql.data(), sql.size()) != 0) fail("query");
    MYSQL_RES* r = mysql_store_result(db_);
    std::optional<std::string> out;
    if (r) {
      if (MYSQL_ROW row = mysql_fetch_row(r); row)
        if (const char* v = only_field(r, row)) out = v;
      mysql_free_result(r);
    }
    return out;
  }
  std::vector<std::string> columns(const std::string& table_name) {
    const std::string sql = fmt::format("SELECT * FROM `{}` LIMIT 0", table_name);
    if (mysql_real_query(db_, sql.data(), sql.size()) != 0) fail("query");
    std::vector<std::string> out;
    if (MYSQL_RES* r = mysql_store_result(db_)) {
      const unsigned int n = mysql_num_fields(r);
      MYSQL_FIELD* f = mysql_fetch_fields(r);
      for (unsigned int i = 0; i < n; ++i)
        out.emplace_back(f[i].name);
      mysql_free_result(r);
    }
    return out;
  }
  MYSQL_STMT* stmt(const std::string& key, const std::string& sql) {
    if (auto it = stmts_.find(key); it != stmts_.end()) return it->second;
    MYSQL_STMT* st = mysql_stmt_init(db_);
    if (!st) fail("statement");
    if (mysql_stmt_prepare(st, sql.data(), sql.size()) != 0) {
      std::string msg = mysql_stmt_error(st);
      const unsigned int err = mysql_stmt_errno(st);
      mysql_stmt_close(st);
      throw MysqlError(err, fmt::format("MySQL {} prepare: {}", url_.text(), msg));
    }
    stmts_[key] = st;
    return st;
  }
  [[noreturn]] void fail_stmt(MYSQL_STMT* st, std::string_view what) {
    throw MysqlError(mysql_stmt_errno(st), fmt::format("MySQL {} {}: {}", url_.text(), what, mysql_stmt_error(st)));
  }
  MYSQL* get() { return db_; }
  const MysqlUrl& url() const { return url_; }
  // From another thread: a call waiting on the server (a frozen one answers nothing until its read timeout) fails at
  // once as a lost connection. Shutting the socket down is what mariadb_cancel() does, minus its unlocked read of
  // the connection's internals while this thread may be replacing them. A connect under way is not reached: its own
  // timeout bounds it.
  void cancel() noexcept {
    std::lock_guard lock(fd_mu_);
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }

  // Run keys this connection made or read (insert_rows), by run id.
  std::map<std::string, int64_t, std::less<>> run_keys;

private:
  MysqlUrl url_;
  MYSQL* db_ = nullptr;
  std::mutex fd_mu_; // guards fd_: the socket stays open (mysql_close has not run) while fd_ holds it
  int fd_ = -1;
  std::map<std::string, MYSQL_STMT*> stmts_;
  size_t max_statement_bytes_ = 1024;
};

// issue 35: run_tags (sinks/runs_query.hpp) beside each runs row. Binary collation: a tag matches exactly, as
// run_matches compares it (the search's text and q are both lower case already).
// MariaDB's reader (runs_query) answers one such filter from the index alone, through `value_key` (the value whole
// where it has at most 191 characters, else NULL: an index holds it whole, where a prefix of the MEDIUMTEXT makes
// MariaDB read every row to compare the rest) and `start_ms` (the run's, for the page in start order). A user filter's
// rows are kept once more under `@user` (the distinct values of the run's user and slurm_user tags), so that it is one
// range.
constexpr std::string_view kRunTagsSchema =
    "CREATE TABLE IF NOT EXISTS `run_tags` (`run_id` VARCHAR(255) NOT NULL, "
    "`tag_key` VARCHAR(64) COLLATE utf8mb4_bin NOT NULL, `tag_value` MEDIUMTEXT COLLATE utf8mb4_bin NOT NULL, "
    "`value_key` VARCHAR(191) COLLATE utf8mb4_bin NULL, `start_ms` BIGINT NULL, "
    "KEY `run_tags_by_value` (`tag_key`, `tag_value`(191), `run_id`), KEY `run_tags_by_run` (`run_id`), "
    "KEY `run_tags_by_key_start` (`tag_key`, `value_key`, `start_ms`, `run_id`)) "
    "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";
// issue 35: run_text (runs_query.hpp: run_text_sql), the search's table: each run's @q text as bytes (a byte LIKE, no
// collation), clustered in start order, so that a search is one walk of short rows. A writer rewrites the run's row
// with its run_tags rows and marks the run kRunTextMark; a store's older runs get theirs from their @q rows
// (fill_run_text). The reader answers q from it only when every run is so marked (kRunTextWhole).
constexpr std::string_view kRunTextSchema =
    "CREATE TABLE IF NOT EXISTS `run_text` (`start_ms` BIGINT NOT NULL, `run_id` VARCHAR(255) COLLATE utf8mb4_bin NOT "
    "NULL, `text` MEDIUMBLOB NOT NULL, PRIMARY KEY (`start_ms`, `run_id`), KEY `run_text_by_run` (`run_id`)) "
    "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";
// runs.run_tags_keyed: 1 run_tags whole and keyed (an earlier writer of this schema), 2 that and run_text's row too.
constexpr int kRunTextMark = 2;
constexpr std::string_view kRunTextWhole =
    "SELECT NOT EXISTS (SELECT 1 FROM `runs` WHERE `run_tags_keyed` IS NULL OR `run_tags_keyed` < 2)";
constexpr std::string_view kRunTagsUserKey = "@user";
constexpr size_t kValueKeyChars = 191;
// The keyed columns hold every run when no run's @method row lacks them (one index lookup): a run an older wattscope
// wrote since has none, and the reader then answers as before.
constexpr std::string_view kRunTagsKeyed =
    "SELECT NOT EXISTS (SELECT 1 FROM `run_tags` WHERE `tag_key` = '@method' AND `value_key` IS NULL)";
// Filling the keyed columns of an older store: at most this long per writer that opens it (the rest is left for the
// next), in batches of this many runs, each its own transaction.
constexpr auto kKeyedFillBudget = std::chrono::seconds(3);
constexpr int kKeyedFillBatch = 2000;
// A tag or user filter naming fewer runs than this makes the MariaDB reader start from run_tags (runs_query).
constexpr int64_t kJoinRunTagsBelow = 1000;
constexpr std::string_view kRunTagsComplete =
    "SELECT (SELECT COUNT(*) FROM `runs`) = (SELECT COUNT(*) FROM `run_tags` WHERE `tag_key` = '@method')";
// The same two counts apart (MariaDB's reader keeps the first).
constexpr ResultColumn kRunTagsCounts[] = {
    {"runs", "(SELECT COUNT(*) FROM `runs`)", ColType::Int},
    {"method_rows", "(SELECT COUNT(*) FROM `run_tags` WHERE `tag_key` = '@method')", ColType::Int}};
// The runs columns the back-fill of run_tags reads: what write_run_tags keys and searches by.
constexpr ResultColumn kBackfillColumns[] = {{"run_id", "`run_id`", ColType::Text},
                                             {"task", "`task`", ColType::Text},
                                             {"host", "`host`", ColType::Text},
                                             {"command", "`command`", ColType::Text},
                                             {"tags", "`tags`", ColType::Text},
                                             {"summary", "`summary`", ColType::Text},
                                             {"total_energy_j", "`total_energy_j`", ColType::Real},
                                             {"start_ms", "`start_ms`", ColType::Int}};
// issue 35: runs.run_tags_keyed is 1 once the run's run_tags rows are written whole and keyed, in the transaction
// that writes them. An older wattscope names the runs' columns it knows in its INSERT, so a run it adds gets the
// column's default, NULL; one it rewrites keeps the mark, as it keeps the run's run_tags rows (the same caveat as the
// counts). The reader then needs two index lookups where the counts read 200,000 index entries (27 ms at 100,000
// runs): no run unmarked, and no @method row unkeyed (an older wattscope that rewrote a run's rows without keys).
constexpr std::string_view kRunTagsMarkColumn = "run_tags_keyed";
constexpr std::string_view kRunTagsMarked =
    "SELECT NOT EXISTS (SELECT 1 FROM `runs` WHERE `run_tags_keyed` IS NULL) AND NOT EXISTS (SELECT 1 FROM `run_tags` "
    "WHERE `tag_key` = '@method' AND `value_key` IS NULL)";

// A statement of text parameters only, prepared once per `key`.
void exec_texts(Conn& c, const std::string& key, const std::string& sql, const std::vector<std::string>& texts) {
  MYSQL_STMT* st = c.stmt(key, sql);
  std::vector<MYSQL_BIND> binds(texts.size());
  std::vector<unsigned long> lens(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    binds[i] = MYSQL_BIND{};
    lens[i] = texts[i].size();
    binds[i].buffer_type = MYSQL_TYPE_STRING;
    binds[i].buffer = const_cast<char*>(texts[i].data()); // input buffers are only read
    binds[i].buffer_length = texts[i].size();
    binds[i].length = &lens[i];
  }
  if (!texts.empty() && mysql_stmt_bind_param(st, binds.data()) != 0) c.fail_stmt(st, "bind");
  if (mysql_stmt_execute(st) != 0) c.fail_stmt(st, "run_tags");
}

// Rewrites a run's rows of run_tags (in the writer's transaction, with its runs row) and marks the run. A run id
// longer than the column (wattscope's own are far shorter) gets none (false), so the store's readers fall back to
// reading every run's JSON.
bool write_run_tags(Conn& c, const RunInfo& run) {
  if (run.run_id.size() > 255) return false;
  exec_texts(c, "run_tags:delete", "DELETE FROM `run_tags` WHERE `run_id` = ?", {run.run_id});
  std::vector<std::string> texts;
  std::string values, search_text;
  for (auto& row : run_tag_rows(run)) {
    if (row.key == kRunTagsTextKey) search_text = row.value;
    values += values.empty() ? "(?,?,?)" : ",(?,?,?)";
    texts.push_back(run.run_id);
    texts.push_back(std::move(row.key));
    texts.push_back(std::move(row.value));
  }
  // issue 35: the user filter's rows, each distinct value once (runs_query: one index range)
  std::vector<std::string> users;
  for (size_t i = 0; i + 2 < texts.size(); i += 3)
    if ((texts[i + 1] == "user" || texts[i + 1] == "slurm_user") &&
        std::find(users.begin(), users.end(), texts[i + 2]) == users.end())
      users.push_back(texts[i + 2]);
  for (auto& u : users) {
    values += values.empty() ? "(?,?,?)" : ",(?,?,?)";
    texts.push_back(run.run_id);
    texts.emplace_back(kRunTagsUserKey);
    texts.push_back(std::move(u));
  }
  exec_texts(c, fmt::format("run_tags:{}", texts.size() / 3),
             fmt::format("INSERT INTO `run_tags` (`run_id`, `tag_key`, `tag_value`) VALUES {}", values), texts);
  // The keyed columns, from the rows just written (the server counts the characters)
  exec_texts(c, "run_tags:keyed",
             fmt::format("UPDATE `run_tags` SET `value_key` = IF(CHAR_LENGTH(`tag_value`) <= {}, `tag_value`, NULL), "
                         "`start_ms` = ? WHERE `run_id` = ?",
                         kValueKeyChars),
             {std::to_string(run.start_ms), run.run_id});
  // issue 35: the search's row (kRunTextSchema), the @q row's text
  exec_texts(c, "run_text:delete", "DELETE FROM `run_text` WHERE `run_id` = ?", {run.run_id});
  exec_texts(c, "run_text:insert", "INSERT INTO `run_text` (`start_ms`, `run_id`, `text`) VALUES (?, ?, ?)",
             {std::to_string(run.start_ms), run.run_id, search_text});
  exec_texts(c, "runs:run_tags_keyed",
             fmt::format("UPDATE `runs` SET `run_tags_keyed` = {} WHERE `run_id` = ?", kRunTextMark), {run.run_id});
  return true;
}

// A batch of run ids (a query whose one column is the id, in id order): the first, the last, and how many.
struct IdBatch {
  std::string first, last;
  int64_t n = 0;
};
IdBatch id_batch(Conn& c, const std::string& sql) {
  if (mysql_real_query(c.get(), sql.data(), sql.size()) != 0) c.fail("query");
  IdBatch b;
  if (MYSQL_RES* r = mysql_store_result(c.get())) {
    while (MYSQL_ROW row = mysql_fetch_row(r)) {
      const char* id = only_field(r, row);
      if (!id) continue;
      if (b.n++ == 0) b.first = id;
      b.last = id;
    }
    mysql_free_result(r);
  }
  return b;
}

// issue 35: an older store's run_tags gets its keyed columns and @user rows, a batch of runs at a time, within
// kKeyedFillBudget per writer: a store of 100,000 runs (700,000 rows) took 22 s in one statement, past the I/O
// timeout. Each batch is its own transaction, so a reader sees a run either whole or not at all.
void fill_keyed_run_tags(Conn& c, std::chrono::steady_clock::time_point t0) {
  int64_t filled = 0;
  for (;;) {
    // The runs still to fill, in id order: an index range of (tag_key, value_key NULL, start_ms NULL, run_id)
    const std::string ids = fmt::format("SELECT `run_id` FROM `run_tags` WHERE `tag_key` = '@method' AND `value_key` "
                                        "IS NULL ORDER BY `run_id` LIMIT {}",
                                        kKeyedFillBatch);
    const auto [first, last, n] = id_batch(c, ids);
    if (n == 0) break;
    if (std::chrono::steady_clock::now() - t0 > kKeyedFillBudget) {
      spdlog::info("MySQL {}: run_tags: {} runs keyed for the runs pages; the rest is left for the next writer (until "
                   "then the pages filter as before)",
                   c.url().text(), filled);
      return;
    }
    // Every run in [first, last] (done ones again: the same values)
    exec_texts(c, "run_tags:fill:keyed",
               fmt::format("UPDATE `run_tags` t JOIN `runs` r ON r.`run_id` = t.`run_id` SET t.`start_ms` = "
                           "r.`start_ms`, t.`value_key` = IF(CHAR_LENGTH(t.`tag_value`) <= {}, t.`tag_value`, NULL) "
                           "WHERE t.`run_id` BETWEEN ? AND ?",
                           kValueKeyChars),
               {first, last});
    exec_texts(c, "run_tags:fill:user:delete",
               "DELETE FROM `run_tags` WHERE `tag_key` = '@user' AND `run_id` BETWEEN ? AND ?", {first, last});
    exec_texts(c, "run_tags:fill:user",
               "INSERT INTO `run_tags` (`run_id`, `tag_key`, `tag_value`, `value_key`, `start_ms`) SELECT DISTINCT "
               "`run_id`, '@user', `tag_value`, `value_key`, `start_ms` FROM `run_tags` WHERE `tag_key` IN ('user', "
               "'slurm_user') AND `run_id` BETWEEN ? AND ?",
               {first, last});
    if (mysql_commit(c.get()) != 0) c.fail("commit");
    filled += n;
  }
  if (filled > 0) spdlog::info("MySQL {}: run_tags: {} runs keyed for the runs pages", c.url().text(), filled);
}

// issue 35: marks the runs whose run_tags rows are whole and keyed (their @method row keyed: a writer writes a run's
// rows and keys in one transaction, and the fill keys every row of its runs at once), a batch of unmarked runs at a
// time in id order, within what is left of kKeyedFillBudget. Runs an older wattscope added since, or whose rows are
// not keyed yet, stay unmarked, and the readers answer the old way until a writer marks them.
void mark_run_tags(Conn& c, std::chrono::steady_clock::time_point t0) {
  std::string after;
  int64_t marked = 0;
  for (;;) {
    if (std::chrono::steady_clock::now() - t0 > kKeyedFillBudget) {
      spdlog::info("MySQL {}: run_tags: {} runs marked keyed; the rest is left for the next writer", c.url().text(),
                   marked);
      return;
    }
    // The cursor is a run id read from the store: escaped for the connection as any text.
    std::string escaped(2 * after.size() + 1, '\0');
    escaped.resize(mysql_real_escape_string(c.get(), escaped.data(), after.data(), after.size()));
    const std::string sql = fmt::format("SELECT `run_id` FROM `runs` WHERE `run_tags_keyed` IS NULL AND `run_id` > "
                                        "'{}' ORDER BY `run_id` LIMIT {}",
                                        escaped, kKeyedFillBatch);
    const auto [first, last, n] = id_batch(c, sql);
    if (n == 0) break;
    // A run back-filled before the keyed rows took its start had start_ms 0 there: its start, before it is marked.
    exec_texts(c, "run_tags:fill:start",
               "UPDATE `run_tags` t JOIN `runs` r ON r.`run_id` = t.`run_id` SET t.`start_ms` = r.`start_ms` WHERE "
               "t.`run_id` BETWEEN ? AND ? AND r.`run_tags_keyed` IS NULL AND t.`start_ms` <> r.`start_ms`",
               {first, last});
    exec_texts(c, "runs:run_tags_keyed:fill",
               "UPDATE `runs` r JOIN `run_tags` t ON t.`run_id` = r.`run_id` AND t.`tag_key` = '@method' AND "
               "t.`value_key` IS NOT NULL SET r.`run_tags_keyed` = 1 WHERE r.`run_tags_keyed` IS NULL AND r.`run_id` "
               "BETWEEN ? AND ?",
               {first, last});
    if (mysql_commit(c.get()) != 0) c.fail("commit");
    marked += n;
    after = last;
  }
}

// issue 35: the run_text rows of the runs marked 1 (their run_tags rows whole and keyed, @q among them: an earlier
// writer of this schema, or mark_run_tags), copied from their @q rows and marked kRunTextMark, a batch at a time in id
// order within what is left of kKeyedFillBudget. The batch's runs rows are locked first, as a writer locks its run's
// row before its run_tags and run_text rows, so a writer of one of them waits rather than deadlocks.
void fill_run_text(Conn& c, std::chrono::steady_clock::time_point t0) {
  std::string after;
  int64_t filled = 0;
  for (;;) {
    if (std::chrono::steady_clock::now() - t0 > kKeyedFillBudget) {
      spdlog::info("MySQL {}: run_text: {} runs filled for the search; the rest is left for the next writer (until "
                   "then the search reads every run)",
                   c.url().text(), filled);
      return;
    }
    std::string escaped(2 * after.size() + 1, '\0');
    escaped.resize(mysql_real_escape_string(c.get(), escaped.data(), after.data(), after.size()));
    const std::string sql = fmt::format("SELECT `run_id` FROM `runs` WHERE `run_tags_keyed` = 1 AND `run_id` > '{}' "
                                        "ORDER BY `run_id` LIMIT {} FOR UPDATE",
                                        escaped, kKeyedFillBatch);
    const auto [first, last, n] = id_batch(c, sql);
    if (n == 0) break;
    exec_texts(c, "run_text:fill:delete",
               "DELETE t FROM `run_text` t JOIN `runs` r ON r.`run_id` = t.`run_id` WHERE r.`run_id` BETWEEN ? AND ? "
               "AND r.`run_tags_keyed` = 1",
               {first, last});
    exec_texts(c, "run_text:fill",
               "INSERT INTO `run_text` (`start_ms`, `run_id`, `text`) SELECT COALESCE(r.`start_ms`, 0), r.`run_id`, "
               "q.`tag_value` FROM `runs` r JOIN `run_tags` q ON q.`run_id` = r.`run_id` AND q.`tag_key` = '@q' WHERE "
               "r.`run_id` BETWEEN ? AND ? AND r.`run_tags_keyed` = 1",
               {first, last});
    // Only the runs that got their row (a run without an @q row stays 1, and the search reads every run)
    exec_texts(c, "runs:run_text:fill",
               fmt::format("UPDATE `runs` r JOIN `run_text` t ON t.`run_id` = r.`run_id` SET r.`run_tags_keyed` = {} "
                           "WHERE r.`run_id` BETWEEN ? AND ? AND r.`run_tags_keyed` = 1",
                           kRunTextMark),
               {first, last});
    if (mysql_commit(c.get()) != 0) c.fail("commit");
    filled += n;
    after = last;
  }
  if (filled > 0) spdlog::info("MySQL {}: run_text: {} runs filled for the search", c.url().text(), filled);
}

// issue 35: runs.j_per_unit of one run, from its work rows as they stand (sinks/runs_query.hpp: when a writer calls
// it).
void update_j_per_unit(Conn& c, const std::string& run_id) {
  static const std::string sql =
      fmt::format("UPDATE `runs` SET `j_per_unit` = {} WHERE `run_id` = ?", j_per_unit_sql("`runs`"));
  exec_texts(c, "runs:j_per_unit", sql, {run_id});
}

// A run as the back-fill reads it (kBackfillColumns), its other fields left as they start.
RunInfo backfill_run(MYSQL_ROW row) {
  // Text up to a NUL byte (the text protocol's C strings): ids, names, JSON and commands hold none.
  auto text = [&](std::string_view name) {
    const char* v = field(row, kBackfillColumns, name);
    return v ? std::string(v) : std::string();
  };
  RunInfo run;
  run.run_id = text("run_id");
  run.task = text("task");
  run.host = text("host");
  run.command = text("command");
  run.tags = text("tags");
  run.summary = text("summary");
  if (const char* v = field(row, kBackfillColumns, "total_energy_j")) run.total_energy_j = std::strtod(v, nullptr);
  // the keyed rows' start_ms (the page in start order; was left 0 for a run back-filled here)
  if (const char* v = field(row, kBackfillColumns, "start_ms")) run.start_ms = std::strtoll(v, nullptr, 10);
  return run;
}

// The forward migration: runs recorded before run_tags existed, or by an older wattscope since, get their rows.
void backfill_run_tags(Conn& c) {
  int64_t runs = 0, method_rows = 0;
  const std::string counts = "SELECT " + result_select_list(kRunTagsCounts);
  if (mysql_real_query(c.get(), counts.data(), counts.size()) != 0) c.fail("query");
  if (MYSQL_RES* r = mysql_store_result(c.get())) {
    if (MYSQL_ROW row = mysql_fetch_row(r)) {
      const char* runs_text = field(row, kRunTagsCounts, "runs");
      const char* method_text = field(row, kRunTagsCounts, "method_rows");
      if (runs_text && method_text) {
        runs = std::strtoll(runs_text, nullptr, 10);
        method_rows = std::strtoll(method_text, nullptr, 10);
      }
    }
    mysql_free_result(r);
  }
  // The runs without rows: where the counts agree, only unmarked runs can be (an older wattscope's run beside one
  // deleted by hand, which the counts miss); otherwise any (run_tags new, or emptied).
  const std::string sql =
      fmt::format("SELECT {} FROM `runs` WHERE {}`run_id` NOT IN (SELECT `run_id` FROM `run_tags` WHERE `tag_key` = "
                  "'@method')",
                  result_select_list(kBackfillColumns), runs == method_rows ? "`run_tags_keyed` IS NULL AND " : "");
  if (mysql_real_query(c.get(), sql.data(), sql.size()) != 0) c.fail("query");
  std::vector<RunInfo> missing;
  if (MYSQL_RES* r = mysql_store_result(c.get())) {
    while (MYSQL_ROW row = mysql_fetch_row(r))
      missing.push_back(backfill_run(row));
    mysql_free_result(r);
  }
  int64_t written = 0;
  for (const auto& run : missing)
    written += write_run_tags(c, run);
  // issue 35: rows whose run is gone (runs deleted by hand without their run_tags rows) would be counted by the keyed
  // pages: removed here, once there are more @method rows than runs.
  if (method_rows + written > runs) {
    c.exec("DELETE t FROM `run_tags` t LEFT JOIN `runs` r ON r.`run_id` = t.`run_id` WHERE r.`run_id` IS NULL");
    spdlog::info("MySQL {}: run_tags: the rows of runs no longer in the store removed", c.url().text());
  }
  // The same for run_text, whose count of a search would hold them: once it has more rows than there are runs.
  if (c.value("SELECT (SELECT COUNT(*) FROM `run_text`) > (SELECT COUNT(*) FROM `runs`)").value_or("0") == "1") {
    c.exec("DELETE t FROM `run_text` t LEFT JOIN `runs` r ON r.`run_id` = t.`run_id` WHERE r.`run_id` IS NULL");
    spdlog::info("MySQL {}: run_text: the rows of runs no longer in the store removed", c.url().text());
  }
}

// Schema 7: each run's key in gpu_sample_rows (AUTO_INCREMENT: many writers of a fleet take theirs at once).
constexpr std::string_view kRunKeysSchema =
    "CREATE TABLE IF NOT EXISTS `run_keys` (`run_key` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, `run_id` "
    "VARCHAR(255) NOT NULL, UNIQUE KEY `run_keys_by_id` (`run_id`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE="
    "utf8mb4_bin";

// Whether `name` is a table of the store (not a view, not missing).
bool is_base_table(Conn& c, std::string_view name) {
  return c.value(fmt::format("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND "
                             "table_name = '{}' AND table_type = 'BASE TABLE'",
                             name))
             .value_or("0") != "0";
}

// Schema 6: gpu_samples without each GPU's uuid, name and vendor (kGpuIdentityColumns). A store that still has them
// gets them in gpu_devices first (where a run's device row lacks them or was never stored), then the columns dropped.
void move_gpu_identity(Conn& c) {
  if (!is_base_table(c, "gpu_samples")) return; // a store of schema 7, or a new one
  const std::vector<std::string> have = c.columns("gpu_samples");
  auto has = [&](std::string_view col) { return std::find(have.begin(), have.end(), col) != have.end(); };
  if (std::none_of(std::begin(kGpuIdentityColumns), std::end(kGpuIdentityColumns), has)) return;
  spdlog::info("MySQL {}: moving each GPU's uuid, name and vendor out of gpu_samples into gpu_devices (schema 6, once)",
               c.url().text());
  // A store of version 1 never had vendor: what it lacks is read as NULL.
  auto stored = [&](std::string_view col) { return has(col) ? fmt::format("MAX(`{}`)", col) : std::string("NULL"); };
  const std::string identity = fmt::format("SELECT `run_id`, `gpu_index`, {} AS `vendor`, {} AS `uuid`, {} AS `name` "
                                           "FROM `gpu_samples` GROUP BY `run_id`, `gpu_index`",
                                           stored("vendor"), stored("uuid"), stored("name"));
  c.exec(
      fmt::format("INSERT IGNORE INTO `gpu_devices` (`run_id`, `gpu_index`, `vendor`, `uuid`, `name`) {}", identity));
  std::string sets, drops;
  for (const auto& col : kGpuIdentityColumns) {
    sets += fmt::format("{0}d.`{1}` = COALESCE(NULLIF(d.`{1}`, ''), i.`{1}`)", sets.empty() ? "" : ", ", col);
    if (has(col)) drops += fmt::format("{}DROP COLUMN `{}`", drops.empty() ? "" : ", ", col);
  }
  c.exec(fmt::format("UPDATE `gpu_devices` d JOIN ({}) i ON i.`run_id` = d.`run_id` AND i.`gpu_index` = d.`gpu_index` "
                     "SET {}",
                     identity, sets));
  mysql_commit(c.get());
  c.exec(fmt::format("ALTER TABLE `gpu_samples` {}", drops));
}

// Schema 7: a store whose gpu_samples is still a table (each row naming its run by its id) gets a key per run in
// run_keys, in start order, and its rows copied once into gpu_sample_rows under those keys; the table is then dropped
// for the view of the two (make_samples_view). Writers of a fleet are upgraded together: an older one cannot write the
// view.
void key_gpu_samples(Conn& c) {
  if (!is_base_table(c, "gpu_samples")) return;
  spdlog::info("MySQL {}: storing each GPU sample's run as a small key (schema 7, once)", c.url().text());
  for (const auto& sql : gpu_rows_keying_sql("INSERT IGNORE", '`'))
    c.exec(sql);
  mysql_commit(c.get());
  c.exec(fmt::format("DROP VIEW IF EXISTS `{}`", kGpuSamplesNamedView));
  c.exec("DROP TABLE `gpu_samples`");
}

// The view gpu_samples (schema 7: the stored rows with their run_id), made again where its columns are not this
// version's. Readers of this version read the tables themselves; the view keeps queries written for the table
// running. An account that may not make views records all the same, and is told.
void make_samples_view(Conn& c) {
  std::vector<std::string> have;
  try {
    have = c.columns("gpu_samples");
  } catch (const MysqlError& e) {
    if (is_outage(e.err)) throw;
  }
  const Table& g = table(TableId::GpuSamples);
  if (std::equal(have.begin(), have.end(), g.columns.begin(), g.columns.end(),
                 [](const std::string& a, const Column& b) { return a == b.name; }))
    return;
  try {
    c.exec(fmt::format("CREATE OR REPLACE VIEW `gpu_samples` AS {}", gpu_samples_view_select('`')));
  } catch (const MysqlError& e) {
    if (is_outage(e.err)) throw;
    spdlog::warn("MySQL {}: the view gpu_samples (each stored GPU sample with its run_id) was not made: {}; queries "
                 "read gpu_sample_rows joined to run_keys",
                 c.url().text(), e.what());
  }
}

// The view gpu_samples_named, made again where its columns are not this version's (MySQL fixes a view's columns when
// it is made). A convenience for queries: an account that may not make views records all the same, and is told.
void make_named_view(Conn& c) {
  std::vector<std::string> have;
  try {
    have = c.columns(std::string(kGpuSamplesNamedView));
  } catch (const MysqlError& e) {
    if (is_outage(e.err)) throw;
  }
  const std::vector<std::string_view> want = gpu_samples_named_columns();
  if (std::equal(have.begin(), have.end(), want.begin(), want.end())) return;
  try {
    c.exec(fmt::format("CREATE OR REPLACE VIEW `{}` AS {}", kGpuSamplesNamedView, gpu_samples_named_select('`')));
  } catch (const MysqlError& e) {
    if (is_outage(e.err)) throw;
    spdlog::warn("MySQL {}: the view {} (each GPU sample with its uuid, name and vendor) was not made: {}",
                 c.url().text(), kGpuSamplesNamedView, e.what());
  }
}

void ensure_schema(Conn& c) {
  // Many hosts may start at once: one of them creates or migrates the schema at a time.
  c.value("SELECT GET_LOCK('wattscope_schema', 30)");
  try {
    c.exec("CREATE TABLE IF NOT EXISTS `meta` (`key` VARCHAR(64) NOT NULL PRIMARY KEY, `value` MEDIUMTEXT) "
           "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4");
    try {
      check_schema_version(c.value("SELECT `value` FROM `meta` WHERE `key`='schema_version'"),
                           fmt::format("MySQL {}", c.url().text()));
    } catch (const std::runtime_error& e) {
      throw MysqlError(0, e.what()); // a configuration error: not an outage to spill through
    }
    // gpu_samples is a view (schema 7), made below; an older store's table of that name is brought forward first.
    const bool gpu_table = is_base_table(c, "gpu_samples");
    c.exec(std::string(kRunKeysSchema));
    std::vector<Table> tables(all_tables().begin(), all_tables().end());
    tables.push_back(gpu_sample_rows_table());
    for (const auto& t : tables) {
      if (t.name == "gpu_samples" && !gpu_table) continue;
      try {
        c.exec(create_table_sql(t));
      } catch (const MysqlError& e) {
        // ER_ILLEGAL_HA_CREATE_OPTION / ER_CANT_CREATE_TABLE: compression off on this server (innodb_file_per_table=0,
        // innodb_read_only_compressed=ON); anything else is a real error, and the plain statement says it again.
        if (!compressed(t) || is_outage(e.err)) throw;
        spdlog::info("MySQL {}: table {} created without compression ({})", c.url().text(), t.name, e.what());
        c.exec(create_table_sql(t, false));
      }
      // Forward migration: add the columns this version has and the stored table lacks. The stored columns come
      // from an empty result's metadata: no information_schema query (and no server-side temporary table).
      const std::vector<std::string> have = c.columns(std::string(t.name));
      for (const auto& col : t.columns) {
        if (std::find(have.begin(), have.end(), col.name) == have.end()) {
          c.exec(fmt::format("ALTER TABLE `{}` ADD COLUMN `{}` {}", t.name, col.name,
                             col.type == ColType::Int    ? "BIGINT"
                             : col.type == ColType::Real ? "DOUBLE"
                                                         : "MEDIUMTEXT"));
        }
      }
    }
    // issue 35: serve's runs table filters by task and orders by start (host has runs_by_host_time). The task is
    // MEDIUMTEXT: its first 191 characters are indexed. Added to older stores by the next writer.
    c.exec("CREATE INDEX IF NOT EXISTS `runs_by_task_start` ON `runs` (`task`(191), `start_ms`)");
    // The runs table's default order, newest first, without sorting every run (110 ms at 100,000 runs).
    c.exec("CREATE INDEX IF NOT EXISTS `runs_by_start` ON `runs` (`start_ms`)");
    c.exec(std::string(kRunTagsSchema));
    c.exec(std::string(kRunTextSchema));
    // issue 35: the keyed columns and their index on a store made before them
    c.exec(fmt::format("ALTER TABLE `run_tags` ADD COLUMN IF NOT EXISTS `value_key` VARCHAR({}) COLLATE utf8mb4_bin "
                       "NULL, ADD COLUMN IF NOT EXISTS `start_ms` BIGINT NULL",
                       kValueKeyChars));
    c.exec("CREATE INDEX IF NOT EXISTS `run_tags_by_key_start` ON `run_tags` (`tag_key`, `value_key`, `start_ms`, "
           "`run_id`)");
    // issue 35: the runs' mark (kRunTagsMarked) and its index, before any run_tags row is written below
    c.exec(fmt::format("ALTER TABLE `runs` ADD COLUMN IF NOT EXISTS `{0}` TINYINT NULL, ADD INDEX IF NOT EXISTS "
                       "`runs_by_{0}` (`{0}`)",
                       kRunTagsMarkColumn));
    backfill_run_tags(c);
    const auto t0 = std::chrono::steady_clock::now();
    // The fills are for the readers' speed, not the writer's data: a batch that another writer's transaction gets in
    // the way of (a deadlock, a lock wait past its timeout) is rolled back and the rest left for the next writer.
    try {
      fill_keyed_run_tags(c, t0);
      mark_run_tags(c, t0);
      fill_run_text(c, t0);
    } catch (const MysqlError& e) {
      if (e.err != 1213 /* ER_LOCK_DEADLOCK */ && e.err != 1205 /* ER_LOCK_WAIT_TIMEOUT */) throw;
      mysql_rollback(c.get());
      spdlog::info("MySQL {}: the runs pages' fill stopped ({}); the next writer goes on", c.url().text(), e.what());
    }
    // issue 35: runs.j_per_unit and its index; a store that lacks the column gets it filled for every run once.
    const std::vector<std::string> run_cols = c.columns("runs");
    if (std::find(run_cols.begin(), run_cols.end(), kJPerUnitColumn) == run_cols.end()) {
      c.exec("ALTER TABLE `runs` ADD COLUMN `j_per_unit` DOUBLE");
      c.exec(fmt::format("UPDATE `runs` SET `j_per_unit` = {}", j_per_unit_sql("`runs`")));
    }
    c.exec("CREATE INDEX IF NOT EXISTS `runs_by_j_per_unit` ON `runs` (`j_per_unit`, `start_ms`)");
    // issue 35: the duration and energy orders' indexes (runs_query.hpp: kept_figure_column), in one statement, so
    // that a reader which finds the column finds both indexes. The server fills the column for every run as it builds
    // the index (once per store: 0.2-0.3 s at 100,000 runs); later rows, an older wattscope's too, get it on insert.
    if (std::find(run_cols.begin(), run_cols.end(), kDurationColumn) == run_cols.end())
      c.exec(fmt::format("ALTER TABLE `runs` ADD COLUMN IF NOT EXISTS `{0}` DECIMAL(20,0) AS (CAST(`end_ms` AS "
                         "DECIMAL(20,0)) - `start_ms`) VIRTUAL, ADD INDEX IF NOT EXISTS `runs_by_duration` (`{0}`, "
                         "`start_ms`), ADD INDEX IF NOT EXISTS `runs_by_energy` (`total_energy_j`, `start_ms`)",
                         kDurationColumn));
    // issue 35: the exit status order's index (figure_column), built once per store (0.2-0.3 s at 100,000 runs)
    c.exec("CREATE INDEX IF NOT EXISTS `runs_by_exit_status` ON `runs` (`exit_status`, `start_ms`)");
    move_gpu_identity(c);
    key_gpu_samples(c);
    make_samples_view(c);
    make_named_view(c);
    c.exec(fmt::format("INSERT INTO `meta` (`key`, `value`) VALUES ('schema_version', '{}') "
                       "ON DUPLICATE KEY UPDATE `value` = VALUES(`value`)",
                       kSchemaVersion));
    mysql_commit(c.get());
  } catch (...) {
    c.value("SELECT RELEASE_LOCK('wattscope_schema')");
    throw;
  }
  c.value("SELECT RELEASE_LOCK('wattscope_schema')");
}

// issue 33: rows go as multi-row INSERTs in the text protocol, as many rows in one statement as the server's
// max_allowed_packet takes: one statement per table and batch for a node's tick (224 per-core rows were 7 statements
// of prepared chunks of 256/32/4/1 rows before). Text, not prepared: a prepared statement as wide as a large batch
// holds one server-side parameter object per value for the connection's life (hundreds of connections of a fleet);
// a text statement holds nothing after it ran. Every string is escaped by the client library for the connection's
// character set and SQL mode (mysql_real_escape_string), and numbers are written by the code, never taken from text.
void append_literal(Conn& c, std::string& sql, const Value& v, std::string& scratch) {
  if (const auto* iv = std::get_if<int64_t>(&v)) {
    fmt::format_to(std::back_inserter(sql), "{}", *iv);
  } else if (const auto* dv = std::get_if<double>(&v)) {
    if (!std::isfinite(*dv)) { // no DOUBLE holds them: missing, as SQL knows it
      sql += "NULL";
      return;
    }
    // The shortest text that reads back as the same double, with an exponent so that the server parses it as an
    // approximate (DOUBLE) literal, not an exact DECIMAL one converted afterwards.
    const size_t at = sql.size();
    fmt::format_to(std::back_inserter(sql), "{}", *dv);
    if (sql.find_first_of("eE", at) == std::string::npos) sql += "e0";
  } else if (is_null(v)) {
    sql += "NULL";
  } else {
    const std::string_view s = value_text(v);
    scratch.resize(2 * s.size() + 1);
    const unsigned long n = mysql_real_escape_string(c.get(), scratch.data(), s.data(), s.size());
    if (n == static_cast<unsigned long>(-1)) throw MysqlError(0, "MySQL: a text value could not be escaped");
    sql += '\'';
    sql.append(scratch.data(), n);
    sql += '\'';
  }
}

// A run's key in run_keys (schema 7), made the first time the run's GPU rows are written, in that transaction (a
// batch rolled back forgets the keys it made: Conn::run_keys is cleared).
int64_t run_key(Conn& c, std::string_view run_id) {
  if (auto it = c.run_keys.find(run_id); it != c.run_keys.end()) return it->second;
  std::string literal, scratch;
  append_literal(c, literal, Value(run_id), scratch);
  c.exec(fmt::format("INSERT IGNORE INTO `run_keys` (`run_id`) VALUES ({})", literal));
  const auto key = c.value(fmt::format("SELECT `run_key` FROM `run_keys` WHERE `run_id` = {}", literal));
  int64_t k = 0;
  if (!key || std::from_chars(key->data(), key->data() + key->size(), k).ec != std::errc())
    throw MysqlError(0, fmt::format("MySQL {}: run {} has no key in run_keys", c.url().text(), run_id));
  c.run_keys.emplace(std::string(run_id), k);
  return k;
}

void insert_rows(Conn& c, const TableRows& rows) {
  if (rows.cells.empty()) return;
  // GPU rows are stored under their run's key (schema 7), in place of the run id.
  const bool keyed_rows = rows.table == TableId::GpuSamples;
  const Table& t = keyed_rows ? gpu_sample_rows_table() : table(rows.table);
  const size_t ncol = t.columns.size();
  const std::string head = fmt::format("INSERT INTO `{}` ({}) VALUES ", t.name, column_list(t));
  // Idempotent: a batch replayed after an ambiguous failure rewrites the same rows instead of duplicating them.
  std::string tail = " ON DUPLICATE KEY UPDATE ";
  for (size_t i = 0; i < ncol; ++i)
    tail += fmt::format("{}`{}` = VALUES(`{}`)", i ? ", " : "", t.columns[i].name, t.columns[i].name);
  const size_t limit = c.max_statement_bytes();
  std::string sql = head, row, scratch;
  size_t in_statement = 0;
  const size_t total = rows.rows();
  for (size_t r = 0; r < total; ++r) {
    row.assign(1, '(');
    for (size_t i = 0; i < ncol; ++i) {
      if (i) row += ',';
      const Value& v = rows.cells[r * ncol + i];
      if (i == 0 && keyed_rows)
        fmt::format_to(std::back_inserter(row), "{}", run_key(c, value_text(v)));
      else
        append_literal(c, row, v, scratch);
    }
    row += ')';
    if (head.size() + row.size() + tail.size() > limit)
      throw MysqlError(1153 /* ER_NET_PACKET_TOO_LARGE */,
                       fmt::format("MySQL {}: a row of {} takes {} bytes, more than the server's max_allowed_packet "
                                   "({} bytes) allows in one statement; raise max_allowed_packet on the server",
                                   c.url().text(), t.name, head.size() + row.size() + tail.size(), limit));
    if (in_statement && sql.size() + 1 + row.size() + tail.size() > limit) {
      sql += tail;
      c.exec(sql);
      sql.resize(head.size());
      in_statement = 0;
    }
    if (in_statement) sql += ',';
    sql += row;
    ++in_statement;
  }
  sql += tail;
  c.exec(sql);
}

void write_batch_once(Conn& c, const RowBatch& batch) {
  try {
    // Runs and devices first: a reader never sees samples of a run it cannot find.
    for (TableId id : {TableId::Runs, TableId::GpuDevices})
      insert_rows(c, batch.tables[static_cast<size_t>(id)]);
    if (const auto& runs = batch.tables[static_cast<size_t>(TableId::Runs)]; !runs.cells.empty()) {
      const std::span<const Value> cells(runs.cells);
      for (size_t r = 0; r < runs.rows(); ++r)
        write_run_tags(c, run_from_row(cells.subspan(r * runs.columns(), runs.columns())));
    }
    for (const auto& rows : batch.tables)
      if (rows.table != TableId::Runs && rows.table != TableId::GpuDevices) insert_rows(c, rows);
    if (const auto& runs = batch.tables[static_cast<size_t>(TableId::Runs)]; !runs.cells.empty()) {
      const size_t id_col = column_index(TableId::Runs, "run_id");
      for (size_t r = 0; r < runs.rows(); ++r) // after the batch's work rows, above
        update_j_per_unit(c, std::string(value_text(runs.cells[r * runs.columns() + id_col])));
    }
    if (mysql_commit(c.get()) != 0) c.fail("commit");
  } catch (...) {
    c.run_keys.clear(); // keys made in the batch's transaction went with it
    if (c.connected()) mysql_rollback(c.get());
    throw;
  }
}

// A deadlock (InnoDB rolled the transaction back) or a lock wait timeout (rolled back above) is another writer's
// transaction in the way, not an error of this batch: the batch is written again, whole (its rows are idempotent),
// a few times with a growing pause, before it counts as refused.
void write_batch(Conn& c, const RowBatch& batch) {
  constexpr int kAttempts = 5;
  for (int attempt = 1;; ++attempt) {
    try {
      write_batch_once(c, batch);
      return;
    } catch (const MysqlError& e) {
      const bool contention = e.err == 1213 /* ER_LOCK_DEADLOCK */ || e.err == 1205 /* ER_LOCK_WAIT_TIMEOUT */;
      if (!contention || attempt == kAttempts) throw;
      spdlog::debug("{} (attempt {} of {}); writing the batch again", e.what(), attempt, kAttempts);
      std::this_thread::sleep_for(std::chrono::milliseconds(20 * attempt));
    }
  }
}

class MysqlSink final : public Sink {
public:
  MysqlSink(MysqlUrl url, bool spill_on_outage)
      : url_(std::move(url)), conn_(url_), spill_on_outage_(spill_on_outage) {}
  std::string describe() const override { return "MySQL " + url_.text(); }
  std::string stored_text() const override {
    std::lock_guard lock(stored_mu_);
    return spilled_to_.empty() ? describe()
                               : fmt::format("spill file {}, not MySQL {} (unreachable at the end; replay with: "
                                             "wattscope export --from {} --to mysql://{})",
                                             spilled_to_, url_.text(), spilled_to_, url_.text());
  }

  void begin_run(const RunInfo& run) override {
    run_ = run;
    try {
      conn_.connect();
      ensure_schema(conn_);
      upsert_run(run);
    } catch (const MysqlError& e) {
      if (!is_outage(e.err) || !spill_on_outage_) throw std::runtime_error(e.what());
      go_down(e.what());
    }
  }

  void write(const RowBatch& batch) override {
    if (abandoned_ && !down_) go_down(fmt::format("MySQL {} did not take the end of the run in time", url_.text()));
    if (down_ && !try_recover()) {
      spill_->write(batch);
      return;
    }
    try {
      write_batch(conn_, batch);
    } catch (const MysqlError& e) {
      // The writer keeps the batch and retries a store that refuses it; once abandoned, it goes to the spill file.
      if (!is_outage(e.err) && !abandoned_) throw std::runtime_error(e.what());
      go_down(e.what());
      spill_->write(batch);
    }
  }

  void abandon() noexcept override {
    abandoned_ = true;
    conn_.cancel();
  }

  void end_run(const RunInfo& run) override {
    run_ = run;
    // The run is over: a few spaced attempts to bring the spilled rows home before giving up for now.
    for (int i = 0; down_ && !abandoned_ && i < 4; ++i) {
      next_attempt_ = {};
      if (try_recover()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    if (abandoned_ && !down_) go_down(fmt::format("MySQL {} did not take the end of the run in time", url_.text()));
    if (!down_) {
      try {
        upsert_run(run);
        return;
      } catch (const MysqlError& e) {
        if (!is_outage(e.err) && !abandoned_) throw std::runtime_error(e.what());
        go_down(e.what());
      }
    }
    spill_->end_run(run);
    spill_.reset();
    {
      std::lock_guard lock(stored_mu_);
      spilled_to_ = spill_path_;
    }
    spdlog::error("MySQL {} {}: the rows it has not stored are kept in {}; once the server answers, replay them "
                  "with: wattscope export --from {} --to {}",
                  url_.text(), abandoned_ ? "did not answer in time at the end of the run" : "is still unreachable",
                  spill_path_, spill_path_, "mysql://" + url_.text());
  }

private:
  void upsert_run(const RunInfo& run) {
    RowBatch b;
    append_run_row(run, b.tables[static_cast<size_t>(TableId::Runs)]);
    write_batch(conn_, b);
  }

  void go_down(const std::string& why) {
    conn_.close();
    down_ = true;
    backoff_ = std::chrono::milliseconds(250);
    next_attempt_ = SteadyClock::now() + backoff_;
    open_spill();
    if (abandoned_)
      spdlog::warn("{}; the rest of the run goes to the spill file {}", why, spill_path_);
    else
      spdlog::warn("{}; recording into the spill file {} and replaying it into MySQL when the server answers again",
                   why, spill_path_);
  }

  // The spill file is a SQLite store of this run: begun (schema and run row) before any batch goes in. Reopening an
  // existing one keeps what it holds.
  void open_spill() {
    if (spill_) return;
    const std::string dir = spill_dir();
    std::error_code ec;
    fs::create_directories(dir, ec);
    spill_path_ = dir + "/" + run_.run_id + ".db";
    spill_ = make_sqlite_sink(spill_path_);
    spill_->begin_run(run_);
  }

  // Reconnects (with backoff) and replays the spill file, in order. true when MySQL is usable again.
  bool try_recover() {
    const auto now = SteadyClock::now();
    if (now < next_attempt_ || abandoned_) return false;
    try {
      conn_.connect();
      ensure_schema(conn_);
      replay_spill();
      down_ = false;
      spdlog::info("MySQL {} is back; the spilled rows are stored", url_.text());
      return true;
    } catch (const MysqlError& e) {
      conn_.close();
      open_spill(); // a replay cut short closed it; what it holds is still there
      if (!is_outage(e.err)) spdlog::error("{}", e.what());
      backoff_ = std::min<std::chrono::milliseconds>(backoff_ * 2, std::chrono::seconds(10));
      next_attempt_ = now + backoff_;
      return false;
    }
  }

  void replay_spill() {
    if (!spill_) return;
    spill_.reset(); // closes the spill database; everything written to it is committed
    auto reader = make_sqlite_reader(spill_path_);
    for (const auto& run : reader->runs()) {
      copy_run(*reader, run, [this](const RowBatch& b) { write_batch(conn_, b); });
      // copy_run writes the runs row first, its work rows after: the figure once they are all in.
      update_j_per_unit(conn_, run.run_id);
      if (mysql_commit(conn_.get()) != 0) conn_.fail("commit");
    }
    reader.reset();
    for (const char* suffix : {"", "-wal", "-shm"})
      fs::remove(spill_path_ + suffix);
  }

  MysqlUrl url_;
  Conn conn_;
  RunInfo run_;
  bool down_ = false;
  std::unique_ptr<Sink> spill_;
  std::string spill_path_;
  bool spill_on_outage_ = true;
  std::chrono::milliseconds backoff_{250};
  SteadyClock::time_point next_attempt_{};
  std::atomic<bool> abandoned_{false}; // set from the finishing thread (abandon)
  mutable std::mutex stored_mu_;
  std::string spilled_to_; // the spill file the run ended in; empty when MySQL has it all
};

class MysqlReader final : public StoreReader {
public:
  explicit MysqlReader(MysqlUrl url) : url_(std::move(url)), conn_(url_) {
    try {
      conn_.connect();
    } catch (const MysqlError& e) {
      throw std::runtime_error(e.what());
    }
    // A store written by a newer wattscope (or with a version that is not a number) is refused, not misread. A
    // database without the meta table holds no wattscope runs yet: the queries below say so.
    std::optional<std::string> version;
    try {
      version = conn_.value("SELECT `value` FROM `meta` WHERE `key`='schema_version'");
    } catch (const MysqlError&) {
    }
    check_schema_version(version, fmt::format("MySQL {}", url_.text()));
  }
  std::string describe() const override { return "MySQL " + url_.text(); }

  std::vector<RunInfo> runs() override {
    std::vector<RunInfo> out;
    const Table& t = table(TableId::Runs);
    query(t, fmt::format("SELECT {} FROM `runs` ORDER BY `start_ms`, `run_id`", select_list(TableId::Runs)), nullptr,
          [&](std::span<const Value> row) { out.push_back(run_from_row(row)); });
    return out;
  }

  std::optional<RunInfo> run_by_id(const std::string& id) override {
    std::optional<RunInfo> out;
    query(table(TableId::Runs), fmt::format("SELECT {} FROM `runs` WHERE `run_id` = ?", select_list(TableId::Runs)),
          &id, [&](std::span<const Value> row) { out = run_from_row(row); });
    return out;
  }

  RunsPage runs_page(size_t offset, size_t limit) override {
    RunsPage page;
    if (const auto n = conn_.value("SELECT COUNT(*) FROM `runs`")) page.total = std::stoull(*n);
    const Table& t = table(TableId::Runs);
    query(t,
          fmt::format("SELECT {} FROM `runs` ORDER BY `start_ms`, `run_id` LIMIT {} OFFSET {}",
                      select_list(TableId::Runs), limit, offset),
          nullptr, [&](std::span<const Value> row) { page.runs.push_back(run_from_row(row)); });
    return page;
  }

  // issue 35: filters, order and page in one statement each for the count, the page and the page's work.
  RunsPage runs_query(const RunsFilter& filter, size_t offset, size_t limit) override {
    select_list(TableId::Work);
    const bool no_work = columns_[static_cast<size_t>(TableId::Work)]->empty() && table_may_be_absent(TableId::Work);
    RunsFilter f = filter;
    if (no_work && f.sort == RunsSortKey::JPerUnit) f.sort = RunsSortKey::Start; // an older store: no run has it
    // issue 35: a search is read from run_text when every run has its row there (kRunTextWhole: two index ranges)
    bool text = false;
    if (!f.q.empty()) {
      try {
        text = conn_.value(std::string(kRunTextWhole)).value_or("0") == "1";
      } catch (const std::runtime_error&) {
        // no run_text or no mark yet: a store no writer of this version has opened
      }
    }
    std::optional<RunsPage> fast = text ? text_runs_page(f, offset, limit) : std::nullopt;
    if (!fast) fast = keyed_runs_page(f, offset, limit);
    if (auto& page = fast) {
      page->work.resize(page->runs.size());
      if (page->runs.empty() || no_work) return std::move(*page);
      const PageWorkSql w = page_work_sql(page->runs);
      query_typed(w.types, w.sql, w.params,
                  [&](std::span<const Value> row) { add_page_work_row(page->runs, page->work, row); });
      return std::move(*page);
    }
    // run_tags only when a tag or user filter names few runs (a Slurm job: 3): MariaDB then starts from run_tags.
    // When many pass, MariaDB 10.11 answers `run_id IN (SELECT run_id FROM run_tags ...)` by scanning runs and
    // probing run_tags for each (FirstMatch), 1.2-1.8 s at 100,000 runs, where the runs' JSON takes 0.15 s a
    // statement (docs/runs.md). Counting a term's rows is one index range (5 ms at 100,000 runs).
    bool indexed = false;
    if (!f.tags.empty() || !f.user.empty()) {
      try {
        if (run_tags_whole()) {
          int64_t fewest = kJoinRunTagsBelow;
          auto count = [&](const std::string& where, std::vector<SqlParam> params) {
            fewest = std::min(fewest,
                              static_cast<int64_t>(count_of("SELECT COUNT(*) FROM run_tags WHERE " + where, params)));
          };
          for (const auto& [k, v] : f.tags)
            count("tag_key = ? AND tag_value = ?", {k, v});
          if (!f.user.empty()) count("tag_key IN ('user', 'slurm_user') AND tag_value = ?", {f.user});
          indexed = fewest < kJoinRunTagsBelow;
        }
      } catch (const std::runtime_error&) {
        // no run_tags: a store no writer of this version has opened
      }
    }
    const RunsSql sql = runs_sql(f, SqlDialect::Mysql, indexed, false, text);
    RunsPage page;
    auto count = [&](const RunsSql& q) { return count_of("SELECT COUNT(*) FROM runs" + q.where, q.params); };
    page.total = count(sql);
    // The page's ids, then their runs: the ids of a walk past a deep offset come from the order's index alone, where
    // the runs' rows were read for every run skipped (sort=-start&offset=50000: 221 ms at 100,000 runs).
    auto fetch = [&](const RunsSql& q, size_t part_offset, size_t part_limit) {
      std::vector<std::string> ids;
      read_ids(
          fmt::format("SELECT run_id FROM runs{}{} LIMIT {} OFFSET {}", q.where, q.order_by, part_limit, part_offset),
          q.params, ids);
      runs_by_ids(ids, 0, page.runs);
    };
    if (const auto figure = figure_column(f.sort);
        !figure.empty() && (sql.where.empty() ||
                            (offset + limit < page.total && walk_pays(count(RunsSql{}), page.total, offset + limit)))) {
      // issue 35: the figure's index in two walks, not every passing run sorted (at 100,000 runs 90-135 ms). Not
      // where few runs pass: MariaDB walks the index anyway, a row read per run (q matching 1 run of 100,000: 0.36-0.4
      // s, where reading them all and sorting the one took 40-90 ms). Fewer passing runs than the page's end never
      // pay (runs >= passing): the runs are not counted for them.
      RunsFilter by_start = f;
      by_start.sort = RunsSortKey::Start;
      const RunsSql base = runs_sql(by_start, SqlDialect::Mysql, indexed, false, text);
      two_walk_page(
          offset, limit,
          [&](bool with, size_t part_offset, size_t part_limit) {
            const size_t before = page.runs.size();
            fetch(kept_figure_part(base, figure, with, f.descending), part_offset, part_limit);
            return page.runs.size() - before;
          },
          [&] { return count(kept_figure_part(base, figure, true, f.descending)); });
    } else if (f.sort == RunsSortKey::JPerUnit && has_run_column(kJPerUnitColumn)) {
      // issue 35: the kept figure, in two parts (runs_query.hpp), not the figure computed for every run.
      RunsFilter by_start = f;
      by_start.sort = RunsSortKey::Start;
      const RunsSql base = runs_sql(by_start, SqlDialect::Mysql, indexed, false, text);
      for (const auto& part : j_per_unit_page(base, f.descending, count(with_j_per_unit(base)), offset, limit))
        fetch(part.sql, part.offset, part.limit);
    } else {
      fetch(sql, offset, limit);
    }
    page.work.resize(page.runs.size());
    if (page.runs.empty() || no_work) return page;
    const PageWorkSql w = page_work_sql(page.runs);
    query_typed(w.types, w.sql, w.params,
                [&](std::span<const Value> row) { add_page_work_row(page.runs, page.work, row); });
    return page;
  }

  void scan(TableId id, const RunInfo& run, const RowFn& fn) override {
    const Table& t = table(id);
    std::string order;
    for (size_t i = 0; i < t.primary_key.size(); ++i)
      order += fmt::format("{}`{}`", i ? ", " : "", t.primary_key[i]);
    if (id == TableId::GpuSamples && keyed_gpu_rows()) { // schema 7: the tables, whether or not the view was made
      query(t, fmt::format("{} WHERE k.`run_id` = ? ORDER BY s.`tick`, s.`gpu_index`", gpu_samples_view_select('`')),
            &run.run_id, fn);
      return;
    }
    const std::string cols = select_list(id);
    if (columns_[static_cast<size_t>(id)]->empty() && table_may_be_absent(id)) return; // an older store: no rows
    query(t, fmt::format("SELECT {} FROM `{}` WHERE `run_id` = ? ORDER BY {}", cols, t.name, order), &run.run_id, fn);
  }

private:
  // issue 35: one run_tags filter (a tag, user or method) with at most a date range, from run_tags' keyed index
  // (keyed_runs_sql): the count from the index alone and the page's run ids in start order from its first entries (or,
  // in another order, the passing entries joined to their runs), then those runs by id. At 100,000 runs a filter that
  // 24,000 pass took 0.2 s through the runs' JSON. Nothing where the store's run_tags is not keyed for every run yet.
  std::optional<RunsPage> keyed_runs_page(const RunsFilter& f, size_t offset, size_t limit,
                                          const std::string* text_like = nullptr) {
    auto keyed = keyed_runs_sql(f, "d.", kValueKeyChars, kRunTagsUserKey);
    if (!keyed) return std::nullopt;
    try {
      if (!run_tags_whole() || conn_.value(std::string(kRunTagsKeyed)).value_or("0") != "1") return std::nullopt;
    } catch (const std::runtime_error&) {
      return std::nullopt; // no run_tags, or not its keyed columns: a store no writer of this version has opened
    }
    // issue 35: a search beside the term (text_like: its LIKE pattern; text_runs_page) is each entry's row of
    // run_text, looked up by its whole key: the entries carry their run's start.
    std::string from = "run_tags d";
    if (text_like) {
      from += " STRAIGHT_JOIN run_text t ON t.start_ms = d.start_ms AND t.run_id = d.run_id";
      keyed->where += " AND t.text LIKE ? ESCAPE '!'";
      keyed->params.emplace_back(*text_like);
    }
    RunsPage page;
    page.total = count_of("SELECT COUNT(*) FROM " + from + keyed->where, keyed->params);
    if (offset >= page.total || limit == 0) return page;
    const char* dir = f.descending ? " DESC" : "";
    std::string sql;
    const std::vector<SqlParam>& params = keyed->params;
    std::vector<std::string> ids;
    const auto figure = figure_column(f.sort);
    // The runs' count only chooses the way (both give the same page), and only where a way is to be chosen.
    auto runs = [&] { return count_of("SELECT COUNT(*) FROM runs", {}); };
    if (!figure.empty() && offset + limit < page.total && walk_pays(runs(), page.total, offset + limit)) {
      // Many runs pass: walk the figure's index over every run and keep those with the filter's entry (one per run:
      // a tag key appears once in a run's tags, each @user value once), until the page is full. Reading (offset +
      // limit) / share of runs beats joining and sorting all that pass (33,000 in 111 ms at 100,000 runs). The entry
      // is looked up by its whole key (tag_key, value_key, start_ms, run_id): the keyed rows carry their run's start
      // (as the page in start order below relies on), and one index probe a run took 0.6 ms for a page where the run's
      // rows by run_tags_by_run took 7 ms.
      const RunsSql base{keyed->where, "", keyed->params};
      const std::string join =
          std::string("runs r STRAIGHT_JOIN run_tags d ON d.start_ms = r.start_ms AND d.run_id = r.run_id") +
          (text_like ? " STRAIGHT_JOIN run_text t ON t.start_ms = r.start_ms AND t.run_id = r.run_id" : "");
      auto part_sql = [&](bool with) { return kept_figure_part(base, figure, with, f.descending, "r."); };
      two_walk_page(
          offset, limit,
          [&](bool with, size_t part_offset, size_t part_limit) {
            const RunsSql part = part_sql(with);
            const size_t before = ids.size();
            read_ids(fmt::format("SELECT r.run_id FROM {}{}{} LIMIT {} OFFSET {}", join, part.where, part.order_by,
                                 part_limit, part_offset),
                     part.params, ids);
            return ids.size() - before;
          },
          [&] {
            const RunsSql part = part_sql(true);
            return count_of(fmt::format("SELECT COUNT(*) FROM {}{}", join, part.where), part.params);
          });
    } else if (f.sort == RunsSortKey::Start) {
      sql = fmt::format("SELECT d.run_id FROM {}{} ORDER BY d.start_ms{}, d.run_id{} LIMIT {} OFFSET {}", from,
                        keyed->where, dir, dir, limit, offset);
    } else {
      const std::string key = sort_key_sql(f.sort, "r");
      // runs_sql's order: the runs without the figure last either way, ties by start then id
      sql = fmt::format("SELECT d.run_id FROM {} JOIN runs r ON r.run_id = d.run_id{} ORDER BY ({} IS NULL), {}{}, "
                        "r.start_ms{}, r.run_id{} LIMIT {} OFFSET {}",
                        from, keyed->where, key, key, dir, dir, dir, limit, offset);
    }
    if (!sql.empty()) read_ids(sql, params, ids);
    // A page short of what the count promised: run_tags holds rows of runs deleted by hand (until the next writer
    // removes them), which the count holds too; the runs' JSON answers.
    if (!runs_by_ids(ids, std::min(limit, page.total - offset), page.runs)) return std::nullopt;
    return page;
  }

  // The runs of `ids` into `out`, in that order; false (nothing added) where fewer than `expected` are found.
  bool runs_by_ids(const std::vector<std::string>& ids, size_t expected, std::vector<RunInfo>& out) {
    if (ids.empty()) return expected == 0;
    std::string marks;
    std::vector<SqlParam> id_params;
    for (const auto& id : ids) {
      marks += marks.empty() ? "?" : ",?";
      id_params.emplace_back(id);
    }
    const Table& t = table(TableId::Runs);
    std::vector<ColType> types;
    for (const auto& c : t.columns)
      types.push_back(c.type);
    std::unordered_map<std::string, RunInfo> found;
    query_typed(types, fmt::format("SELECT {} FROM runs WHERE run_id IN ({})", select_list(TableId::Runs), marks),
                id_params, [&](std::span<const Value> row) {
                  RunInfo r = run_from_row(row);
                  std::string id = r.run_id;
                  found.emplace(std::move(id), std::move(r));
                });
    if (found.size() < expected) return false;
    for (const auto& id : ids)
      if (auto it = found.find(id); it != found.end()) out.push_back(std::move(it->second));
    return true;
  }

  // issue 35: the runs column a sort key's page walks by its index (runs_query.hpp: kept_figure_column), where the
  // store has it: duration_ms came with runs_by_duration and runs_by_energy, j_per_unit with runs_by_j_per_unit. The
  // exit status is a column of every store; a writer of this version indexes it (runs_by_exit_status), and without
  // the index the walk is the sort of the runs that pass, as before.
  std::string_view figure_column(RunsSortKey key) {
    switch (key) {
    case RunsSortKey::Duration:
    case RunsSortKey::Energy:
      return has_run_column(kDurationColumn) ? kept_figure_column(key) : std::string_view{};
    case RunsSortKey::JPerUnit:
      return has_run_column(kJPerUnitColumn) ? kept_figure_column(key) : std::string_view{};
    case RunsSortKey::ExitStatus:
      return kept_figure_column(key);
    case RunsSortKey::Start:
      break;
    }
    return {};
  }

  // A figure's SQL for ORDER BY, over the runs table named `runs_ref` (not the start: ties go by start anyway).
  std::string sort_key_sql(RunsSortKey sort, std::string_view runs_ref) {
    switch (sort) {
    case RunsSortKey::Duration:
      return has_run_column(kDurationColumn) ? fmt::format("{}.duration_ms", runs_ref)
                                             : fmt::format("({0}.end_ms - {0}.start_ms)", runs_ref);
    case RunsSortKey::Energy:
      return fmt::format("{}.total_energy_j", runs_ref);
    case RunsSortKey::ExitStatus:
      return fmt::format("{}.exit_status", runs_ref);
    case RunsSortKey::JPerUnit:
      return has_run_column(kJPerUnitColumn) ? fmt::format("{}.j_per_unit", runs_ref) : j_per_unit_sql(runs_ref);
    case RunsSortKey::Start:
      break;
    }
    return fmt::format("{}.start_ms", runs_ref);
  }
  // A search that at most this many runs pass is answered from one walk of run_text that lists them all.
  static constexpr size_t kFewMatches = 1000;

  // issue 35: a search from run_text (runs_query.hpp: run_text_sql). Alone (at most a date range beside it) in start
  // order, one walk of its clustered index gives the page and, read on to the end, the count (SQL_CALC_FOUND_ROWS;
  // 36-41 ms at 100,000 runs, where the runs' five columns compared took 125-290 ms for the count alone). Otherwise a
  // walk that stops past kFewMatches: where it did not stop, it holds every run the search passes, and the page is
  // those of them the other terms pass, sorted. Where it stopped: beside one run_tags term, that term's keyed pages
  // with each entry's text looked up by key (keyed_runs_page); alone, the count from run_text, then the figure's index
  // walked with each run's text looked up by its key where walk_pays, or the passing rows of run_text joined to their
  // runs and sorted; else nothing (runs_query looks each run's text up by key as the other terms pass it). Then the
  // page's runs by id.
  std::optional<RunsPage> text_runs_page(const RunsFilter& f, size_t offset, size_t limit) {
    const auto text = run_text_sql(f, "", false);
    if (!text) return std::nullopt;
    const bool alone = run_text_sql(f).has_value();
    RunsPage page;
    std::vector<std::string> ids;
    const char* dir = f.descending ? " DESC" : "";
    RunsFilter rest = f; // the filter's other terms
    rest.q.clear();
    if (alone && f.sort == RunsSortKey::Start && limit > 0) {
      read_ids(fmt::format("SELECT SQL_CALC_FOUND_ROWS run_id FROM run_text{} ORDER BY start_ms{}, run_id{} LIMIT {} "
                           "OFFSET {}",
                           text->where, dir, dir, limit, offset),
               text->params, ids);
      page.total = count_of("SELECT FOUND_ROWS()", {});
    } else if (read_ids(fmt::format("SELECT run_id FROM run_text{} LIMIT {}", text->where, kFewMatches + 1),
                        text->params, ids);
               ids.size() <= kFewMatches) {
      // Few pass the search: all of them from one walk (it reads to the end), then those of their runs that pass the
      // other terms, sorted, all of them: the count is of the runs found (a run deleted by hand, its row of run_text
      // left, is not).
      if (ids.empty()) return page;
      RunsSql sql = runs_sql(rest, SqlDialect::Mysql);
      std::string marks;
      for (auto& id : ids) {
        marks += marks.empty() ? "?" : ",?";
        sql.params.emplace_back(std::move(id));
      }
      ids.clear();
      sql.where += fmt::format("{}run_id IN ({})", sql.where.empty() ? " WHERE " : " AND ", marks);
      const std::string key = sort_key_sql(f.sort, "runs");
      read_ids(f.sort == RunsSortKey::Start
                   ? fmt::format("SELECT run_id FROM runs{} ORDER BY start_ms{}, run_id{}", sql.where, dir, dir)
                   : fmt::format("SELECT run_id FROM runs{} ORDER BY ({} IS NULL), {}{}, start_ms{}, run_id{}",
                                 sql.where, key, key, dir, dir, dir),
               sql.params, ids);
      page.total = ids.size();
      ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min(offset, ids.size())));
      ids.resize(std::min(ids.size(), limit));
    } else if (!alone) {
      // Many pass the search: beside one run_tags term, that term's index with each entry's text by key; else each
      // run's text by key as the other terms pass it (runs_query).
      const auto like = std::get<std::string>(text->params.front());
      return keyed_runs_page(rest, offset, limit, &like);
    } else {
      // Many pass (the walk above stopped early, at a few thousand rows of run_text where a run in five passes)
      ids.clear();
      page.total = count_of("SELECT COUNT(*) FROM run_text" + text->where, text->params);
      if (offset >= page.total || limit == 0) return page;
      const auto figure = figure_column(f.sort);
      if (!figure.empty() && offset + limit < page.total &&
          walk_pays(count_of("SELECT COUNT(*) FROM runs", {}), page.total, offset + limit)) {
        RunsFilter by_start = f;
        by_start.sort = RunsSortKey::Start;
        const RunsSql base = runs_sql(by_start, SqlDialect::Mysql, false, false, true);
        two_walk_page(
            offset, limit,
            [&](bool with, size_t part_offset, size_t part_limit) {
              const RunsSql part = kept_figure_part(base, figure, with, f.descending);
              const size_t before = ids.size();
              read_ids(fmt::format("SELECT run_id FROM runs{}{} LIMIT {} OFFSET {}", part.where, part.order_by,
                                   part_limit, part_offset),
                       part.params, ids);
              return ids.size() - before;
            },
            [&] {
              const RunsSql part = kept_figure_part(base, figure, true, f.descending);
              return count_of("SELECT COUNT(*) FROM runs" + part.where, part.params);
            });
      } else {
        const auto joined = run_text_sql(f, "t.");
        const std::string key = sort_key_sql(f.sort, "r");
        // runs_sql's order: the runs without the figure last either way, ties by start then id
        read_ids(fmt::format("SELECT r.run_id FROM run_text t STRAIGHT_JOIN runs r ON r.run_id = t.run_id{} ORDER BY "
                             "({} IS NULL), {}{}, r.start_ms{}, r.run_id{} LIMIT {} OFFSET {}",
                             joined->where, key, key, dir, dir, dir, limit, offset),
                 joined->params, ids);
      }
    }
    if (offset >= page.total || limit == 0) return page;
    // Short of the count: run_text holds the row of a run deleted by hand (until the next writer removes it).
    if (!runs_by_ids(ids, std::min(limit, page.total - offset), page.runs)) return std::nullopt;
    return page;
  }

  // A query whose one column is a count (COUNT(*), FOUND_ROWS()).
  size_t count_of(const std::string& sql, const std::vector<SqlParam>& params) {
    size_t n = 0;
    query_typed({ColType::Int}, sql, params,
                [&](std::span<const Value> row) { n = static_cast<size_t>(value_int(only_cell(row)).value_or(0)); });
    return n;
  }
  // A query whose one column is a run id: the ids appended to `out`, in the query's order.
  void read_ids(const std::string& sql, const std::vector<SqlParam>& params, std::vector<std::string>& out) {
    query_typed({ColType::Text}, sql, params,
                [&](std::span<const Value> row) { out.emplace_back(value_text(only_cell(row))); });
  }

  // Whether a page of a filter that `passing` of `runs` runs pass, ending at `end`, in a figure's order, costs fewer
  // rows as a walk of the figure's index over every run (about end / (passing / runs) entries) than as every passing
  // run read and sorted.
  static bool walk_pays(size_t runs, size_t passing, size_t end) {
    return static_cast<double>(end) * static_cast<double>(runs) <
           static_cast<double>(passing) * static_cast<double>(passing);
  }
  // Whether every run has its run_tags rows: the runs' marks where the store has them (two index lookups), else
  // run_tags' @method rows counted against the runs, as before the marks. Throws where the store has no run_tags yet.
  bool run_tags_whole() {
    if (has_run_column(kRunTagsMarkColumn)) return conn_.value(std::string(kRunTagsMarked)).value_or("0") == "1";
    return conn_.value(std::string(kRunTagsComplete)).value_or("0") == "1";
  }
  // Whether the store's runs table has a column outside the registry (runs.j_per_unit: an older store has not).
  bool has_run_column(std::string_view name) {
    if (!run_columns_) {
      try {
        run_columns_ = conn_.columns("runs");
      } catch (const MysqlError&) {
        run_columns_ = std::vector<std::string>{};
      }
    }
    return std::find(run_columns_->begin(), run_columns_->end(), name) != run_columns_->end();
  }
  std::optional<std::vector<std::string>> run_columns_;
  // The table's columns by name in this version's order; one an older store lacks reads as NULL. The names come
  // from the schema, never from the user.
  std::string select_list(TableId id) {
    const Table& t = table(id);
    auto& have = columns_[static_cast<size_t>(id)];
    if (!have) {
      try {
        have = conn_.columns(std::string(t.name));
      } catch (const MysqlError&) {
        have = std::vector<std::string>{}; // no such table: the query below says so
      }
    }
    std::string cols;
    for (size_t i = 0; i < t.columns.size(); ++i) {
      const bool stored = have->empty() || std::find(have->begin(), have->end(), t.columns[i].name) != have->end();
      cols += fmt::format("{}{}`{}`", i ? ", " : "", stored ? "" : "NULL AS ", t.columns[i].name);
    }
    return cols;
  }
  std::array<std::optional<std::vector<std::string>>, kTableCount> columns_;
  // Whether the store keeps GPU rows under run keys (schema 7), where gpu_samples is their view.
  bool keyed_gpu_rows() {
    if (!keyed_gpu_rows_) {
      try {
        conn_.columns(std::string(kGpuSampleRowsTable));
        keyed_gpu_rows_ = true;
      } catch (const MysqlError& e) {
        if (is_outage(e.err)) throw;
        keyed_gpu_rows_ = false;
      }
    }
    return *keyed_gpu_rows_;
  }
  std::optional<bool> keyed_gpu_rows_;
  // A prepared SELECT of a table's columns; the run id is a bound parameter, never spliced into SQL.
  void query(const Table& t, const std::string& sql, const std::string* run_id, const RowFn& fn) {
    std::vector<ColType> types;
    for (const auto& c : t.columns)
      types.push_back(c.type);
    std::vector<SqlParam> params;
    if (run_id) params.emplace_back(*run_id);
    query_typed(types, sql, params, fn);
  }
  // A prepared SELECT whose result columns have `types`; every value from outside is a bound parameter.
  void query_typed(const std::vector<ColType>& types, const std::string& sql, const std::vector<SqlParam>& params,
                   const RowFn& fn) {
    try {
      MYSQL_STMT* st = conn_.stmt(sql, sql);
      std::vector<MYSQL_BIND> binds(params.size());
      std::vector<unsigned long> param_lens(params.size());
      for (size_t i = 0; i < params.size(); ++i) {
        binds[i] = MYSQL_BIND{};
        if (const auto* n = std::get_if<int64_t>(&params[i])) {
          binds[i].buffer_type = MYSQL_TYPE_LONGLONG;
          binds[i].buffer = const_cast<int64_t*>(n);
        } else {
          const auto& text = std::get<std::string>(params[i]);
          param_lens[i] = text.size();
          binds[i].buffer_type = MYSQL_TYPE_STRING;
          binds[i].buffer = const_cast<char*>(text.data());
          binds[i].buffer_length = text.size();
          binds[i].length = &param_lens[i];
        }
      }
      if (!params.empty() && mysql_stmt_bind_param(st, binds.data()) != 0) conn_.fail_stmt(st, "bind");
      if (mysql_stmt_execute(st) != 0) conn_.fail_stmt(st, "select");
      const size_t n = types.size();
      std::vector<MYSQL_BIND> res(n);
      std::vector<int64_t> ints(n);
      std::vector<double> reals(n);
      std::vector<unsigned long> lens(n);
      std::vector<my_bool> nulls(n);
      for (size_t i = 0; i < n; ++i) {
        res[i] = MYSQL_BIND{};
        res[i].is_null = &nulls[i];
        res[i].length = &lens[i];
        if (types[i] == ColType::Int) {
          res[i].buffer_type = MYSQL_TYPE_LONGLONG;
          res[i].buffer = &ints[i];
        } else if (types[i] == ColType::Real) {
          res[i].buffer_type = MYSQL_TYPE_DOUBLE;
          res[i].buffer = &reals[i];
        } else {
          res[i].buffer_type = MYSQL_TYPE_STRING; // length only; the text is fetched per column below
        }
      }
      if (mysql_stmt_bind_result(st, res.data()) != 0) conn_.fail_stmt(st, "bind result");
      std::vector<Value> row(n);
      std::string text;
      for (;;) {
        int rc = mysql_stmt_fetch(st);
        if (rc == MYSQL_NO_DATA) break;
        if (rc == 1) conn_.fail_stmt(st, "fetch");
        for (size_t i = 0; i < n; ++i) {
          if (nulls[i]) {
            row[i] = Value();
          } else if (types[i] == ColType::Int) {
            row[i] = Value(ints[i]);
          } else if (types[i] == ColType::Real) {
            row[i] = Value(reals[i]);
          } else {
            text.assign(lens[i], '\0');
            MYSQL_BIND col{};
            col.buffer_type = MYSQL_TYPE_STRING;
            col.buffer = text.data();
            col.buffer_length = text.size();
            if (lens[i] && mysql_stmt_fetch_column(st, &col, static_cast<unsigned int>(i), 0) != 0)
              conn_.fail_stmt(st, "fetch column");
            row[i] = Value(text);
          }
        }
        fn(row);
      }
      mysql_stmt_free_result(st);
    } catch (const MysqlError& e) {
      throw std::runtime_error(e.what());
    }
  }

  MysqlUrl url_;
  Conn conn_;
};

} // namespace

std::unique_ptr<Sink> make_mysql_sink(const MysqlUrl& url, bool spill_on_outage) {
  return std::make_unique<MysqlSink>(url, spill_on_outage);
}
std::unique_ptr<StoreReader> make_mysql_reader(const MysqlUrl& url) {
  return std::make_unique<MysqlReader>(url);
}

std::string spill_dir() {
  if (const char* d = std::getenv("WATTSCOPE_SPILL_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) return std::string(x) + "/wattscope/spill";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/state/wattscope/spill";
  return "/tmp/wattscope-spill";
}

std::string mysql_schema_sql(bool compress) {
  std::string sql;
  for (const auto& t : all_tables())
    if (t.name != "gpu_samples") sql += create_table_sql(t, compress);
  sql += fmt::format("{};\n", kRunKeysSchema);
  sql += create_table_sql(gpu_sample_rows_table(), compress);
  sql += fmt::format("CREATE OR REPLACE VIEW `gpu_samples` AS {};\n", gpu_samples_view_select('`'));
  sql += fmt::format("CREATE OR REPLACE VIEW `{}` AS {};\n", kGpuSamplesNamedView, gpu_samples_named_select('`'));
  return sql;
}

} // namespace wattscope
