// The runs table of `serve` (issue 35): which runs, in which order, one page at a time. SQLite and MySQL answer it in
// SQL built here from fixed text and bound parameters only (no user string is ever part of the SQL); the CSV store,
// which has no index to ask, scans its runs with the same rules in C++ (run_passes), so every store gives one answer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/schema.hpp"

namespace wattscope {

enum class RunsSortKey { Start, Duration, Energy, JPerUnit, ExitStatus };

struct RunsFilter {
  std::string task;                                      // exact; "" any
  std::string host;                                      // exact; "" any
  std::string user;                                      // the tag user, else slurm_user, exactly; "" any
  std::vector<std::pair<std::string, std::string>> tags; // KEY=VALUE each, as `list --tag` matches them
  std::optional<int64_t> from_ms;                        // start_ms >= from_ms
  std::optional<int64_t> to_ms;                          // start_ms < to_ms
  // The methods the run's summary records for its energy: counter, integrated, estimated or simulated (that one
  // alone), mixed (two or more), unknown (energy but no method recorded: an old run), none (no energy). "" any.
  std::string method;
  std::string q; // a substring of run id, task, host, command or tags, ASCII case-insensitive; "" any
  // How the run ended: "ok" (exit status 0), "failed" (another status), "unfinished" (no end stored: still recording,
  // or its recorder died). "" any. A run ended with no status (finalised by `repair`) is neither ok nor failed.
  std::string exit;
  // The run's stored energy (total_energy_j) in millijoules and duration (end - start) in ms, within the bounds
  // (inclusive). A run without the figure passes no bound on it.
  std::optional<int64_t> min_energy_mj, max_energy_mj;
  std::optional<int64_t> min_duration_ms, max_duration_ms;
  RunsSortKey sort = RunsSortKey::Start;
  bool descending = false;
};

// The words `exit` takes.
inline constexpr std::string_view kRunExits[] = {"ok", "failed", "unfinished"};
// Whether the filter bounds how a run ended or one of its figures (no run_tags or run_text row answers those).
inline bool bounds_figures(const RunsFilter& f) {
  return !f.exit.empty() || f.min_energy_mj || f.max_energy_mj || f.min_duration_ms || f.max_duration_ms;
}

// The method words `method` takes, for messages and the parser.
inline constexpr std::string_view kRunMethods[] = {"counter", "integrated", "estimated", "simulated",
                                                   "mixed",   "unknown",    "none"};
// A tag key the filters accept: 1 to 64 of letters, digits, '_', '-', '.' and ':' (it becomes a JSON path, bound
// as a parameter, so it must not hold quotes).
// Inline: the query parser (and its fuzz target) needs no more than this header.
inline bool valid_tag_key(std::string_view key) {
  if (key.empty() || key.size() > 64) return false;
  for (char c : key)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
          c == '.' || c == ':'))
      return false;
  return true;
}

// The run's method word as `method` filters it (the summary's text, as the SQL reads it).
std::string run_method_word(const RunInfo& run);
// Whether the run passes every filter (the C++ statement of what the SQL asks).
bool run_passes(const RunInfo& run, const RunsFilter& filter);

// A run's work from the work table: per unit, the amount done. J per unit exists when there is exactly one unit
// with an amount above 0, and energy.
struct RunWork {
  std::string unit;
  double amount = 0;
};
std::optional<double> j_per_unit(const RunInfo& run, const std::vector<RunWork>& work);

class StoreReader;
// The run's rows of the work table summed per unit, units in name order.
std::vector<RunWork> read_run_work(StoreReader& store, const RunInfo& run);

using SqlParam = std::variant<int64_t, std::string>;
enum class SqlDialect { Sqlite, Mysql };
struct RunsSql {
  std::string where;            // " WHERE ..." or ""
  std::string order_by;         // " ORDER BY ..."
  std::vector<SqlParam> params; // for the '?' of `where`, in order
};
// `run_tags`: true when the store's run_tags table holds every run (see run_tag_rows); the tag, user, method and q
// filters are then index lookups on it instead of reading every run's tags and summary.
// `scan_by_start` (SQLite, with run_tags): the run_tags terms are tests of each run met in start order instead of
// the runs to fetch: for a page in start order when many runs pass (the first page is found after a few hundred
// runs, where fetching every run that passes and sorting them costs as many lookups as runs pass).
// `run_text` (MariaDB): the store's run_text table holds every run's (run_text_sql); q is then a lookup of the run's
// row there.
RunsSql runs_sql(const RunsFilter& filter, SqlDialect dialect, bool run_tags = false, bool scan_by_start = false,
                 bool run_text = false);
// Whether the filter has one that run_tags answers (so a store need not be asked whether it can).
inline bool reads_tags(const RunsFilter& f) {
  return !f.user.empty() || !f.tags.empty() || !f.method.empty() || !f.q.empty();
}

// issue 35: the rows a SQL store keeps in its table run_tags (run_id, tag_key, tag_value), indexed on (tag_key,
// tag_value, run_id), rewritten with the run's row by every writer. One row per tag whose key a filter can name (the
// value as run_matches compares it: a string as it is, anything else as JSON spells it), the run's method word under
// kRunTagsMethodKey and its searchable text under kRunTagsTextKey. Those two keys start with '@', which no tag key
// a filter accepts can hold (valid_tag_key), so they never meet a tag.
inline constexpr std::string_view kRunTagsMethodKey = "@method";
inline constexpr std::string_view kRunTagsTextKey = "@q";
struct RunTagRow {
  std::string key;
  std::string value;
};
std::vector<RunTagRow> run_tag_rows(const RunInfo& run);

// issue 35 (MariaDB): a filter of exactly one run_tags term (one tag, user or method) and at most a date range,
// answered from run_tags alone through its keyed columns (value_key: the value whole where it has at most
// `key_chars` characters, else NULL; start_ms: the run's) and their index (tag_key, value_key, start_ms, run_id): the
// count is an index range, the page in start order its first rows. The user's rows are those under `user_key` (each
// distinct value of the run's user and slurm_user tags once). `where` names run_tags' columns with `prefix` ("d." in a
// join). Nothing where the filter has another term, a task or host, or an exact value the key cannot hold whole.
struct KeyedRunsSql {
  std::string where; // " WHERE ..."
  std::vector<SqlParam> params;
};
std::optional<KeyedRunsSql> keyed_runs_sql(const RunsFilter& filter, std::string_view prefix, size_t key_chars,
                                           std::string_view user_key);

// issue 35 (MariaDB): the table run_text (start_ms, run_id, text), clustered on (start_ms, run_id), one row a run: its
// kRunTagsTextKey text (run_tag_rows) as bytes. A search (`q`) with at most a date range is one walk of it in start
// order, a byte LIKE of short rows (no JSON, no summary read): the count and a page in start order in one pass. The
// where clause over run_text's columns (`prefix`: "t." in a join) for q and the date range, or nothing where q is
// empty or holds a control byte (a match could then span two fields of the text), or (`alone`) the filter has another
// term.
std::optional<KeyedRunsSql> run_text_sql(const RunsFilter& filter, std::string_view prefix = "", bool alone = true);

// issue 35: J per unit kept beside each runs row by the SQL stores (runs.j_per_unit, not a registry column: the CSV
// store has none), so that sort=j_per_unit walks an index instead of computing the figure for every run. A writer
// sets it whenever it writes a runs row (the run's start, its end, an export or a spilled run replayed: after the
// run's work rows), never per work row: a marker flood costs it nothing. j_per_unit()'s rule: one unit with an
// amount (above 0), and energy; else NULL. `runs_ref` names the runs table as the statement spells it.
std::string j_per_unit_sql(std::string_view runs_ref);
inline constexpr std::string_view kJPerUnitColumn = "j_per_unit";

// A page in J-per-unit order as at most two walks of an index: the runs that have the figure in its order, then those
// without in start order (NULLS LAST over the whole table would read and sort every run). `base` is runs_sql of the
// filter in start order; `with_figure` how many runs passing it have the figure.
struct RunsPagePart {
  RunsSql sql;
  size_t offset = 0;
  size_t limit = 0;
};
std::vector<RunsPagePart> j_per_unit_page(const RunsSql& base, bool descending, size_t with_figure, size_t offset,
                                          size_t limit);
// `base` restricted to the runs with the figure (for their count).
RunsSql with_j_per_unit(const RunsSql& base);

// issue 35 (MariaDB): the duration and energy orders walk an index on a runs column each: runs.total_energy_j, and
// runs.duration_ms, which the server computes from end_ms - start_ms (a generated column, so every writer's rows have
// it, an older wattscope's too; exact, and never out of range: the difference of two BIGINTs as a DECIMAL). Each index
// is (column, start_ms) and InnoDB appends the primary key, run_id: runs_sql's order, ties included. So are
// runs.exit_status (runs_by_exit_status) and runs.j_per_unit (runs_by_j_per_unit). The column a sort key walks, or ""
// where it has none (the start has its own index).
inline constexpr std::string_view kDurationColumn = "duration_ms";
std::string_view kept_figure_column(RunsSortKey key);
// One walk of a page in a kept figure's order: the runs of `base` with the figure (`with`) in its order, or those
// without in start order; ties by start then id, each in the page's direction (runs_sql's order, which puts the runs
// without the figure last either way). `prefix` names the runs table's columns ("r." in a join).
RunsSql kept_figure_part(const RunsSql& base, std::string_view column, bool with, bool descending,
                         std::string_view prefix = "");

// The page [offset, offset + limit) of the runs with a figure followed by those without, as at most two walks:
// `walk(with, part_offset, part_limit)` reads the page's share of one side and returns how many runs it found;
// `count_with()` (how many runs have the figure) is asked only when the page starts past them, so a page among the
// runs with the figure costs no count of them.
template <class Walk, class CountWith>
void two_walk_page(size_t offset, size_t limit, Walk&& walk, CountWith&& count_with) {
  if (limit == 0) return;
  const size_t got = walk(true, offset, limit);
  if (got >= limit) return;
  // A short first walk ended the runs with the figure: there are offset + got of them.
  const size_t with = got > 0 ? offset + got : std::min<size_t>(count_with(), offset);
  walk(false, offset + got - with, limit - got);
}

// The columns of a query's own result (a sum, a window count, a few columns of a table): not a stored table's rows,
// which are read through the schema (column_index). The SELECT list is written from them and a row is read by a
// column's name, so the reading code never counts places in a SELECT list and the two cannot drift apart.
struct ResultColumn {
  std::string_view name;
  std::string_view sql; // what is selected under that name
  ColType type;
};
// "sql AS name, ..." for `cols`, in their order.
std::string result_select_list(std::span<const ResultColumn> cols);
// The types of `cols` in their order (a prepared MySQL statement binds its result by them).
std::vector<ColType> result_types(std::span<const ResultColumn> cols);
// Where the column `name` is in a row of `cols`. Throws std::logic_error for a name `cols` lacks.
size_t result_index(std::span<const ResultColumn> cols, std::string_view name);
// The cell of a one-column result (a count, a list of run ids): one column has no place to mistake. Throws
// std::logic_error for a row of another width, a query that no longer answers what its reader reads.
const Value& only_cell(std::span<const Value> row);

// A page of runs' work per unit in one query (every SQL store): one '?' per run. add_page_work_row files a row of its
// answer (the run's id, a unit and its amount summed) under its run in `work` (parallel to `runs`).
struct PageWorkSql {
  std::string sql;
  std::vector<SqlParam> params;
  std::vector<ColType> types; // of the answer's columns, in order
};
PageWorkSql page_work_sql(const std::vector<RunInfo>& runs);
void add_page_work_row(const std::vector<RunInfo>& runs, std::vector<std::vector<RunWork>>& work,
                       std::span<const Value> row);

} // namespace wattscope
