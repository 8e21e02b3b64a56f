#include "sinks/runs_query.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/tag_filter.hpp"
#include "sinks/sink.hpp"

namespace wattscope {

namespace {

// The four single methods, as the summary spells them ("energy_method":"counter"): the summary is written compact
// (json::dump without indent), so this text is what both the SQL LIKE and run_method_word look for.
constexpr std::string_view kSingleMethods[] = {"counter", "integrated", "estimated", "simulated"};
std::string method_mark(std::string_view m) {
  return fmt::format("\"energy_method\":\"{}\"", m);
}

// ASCII case-insensitive, every other byte as it is (whatever the process's locale): q's rule on every store.
bool icontains(std::string_view hay, std::string_view needle) {
  if (needle.empty()) return true;
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end(),
                     [&](char a, char b) { return lower(a) == lower(b); }) != hay.end();
}

bool tag_is(const RunInfo& run, const std::string& key, const std::string& value) {
  return run_matches(run, {TagFilter{key, value}});
}

// A LIKE pattern for "contains `text`", with '!' as the escape character: the same in SQLite and MySQL, where a
// backslash would be read differently.
std::string like_contains(std::string_view text) {
  std::string p = "%";
  for (char c : text) {
    if (c == '%' || c == '_' || c == '!') p.push_back('!');
    p.push_back(c);
  }
  return p + "%";
}

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool has_control(std::string_view text) {
  return std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
}

// A PCRE pattern for "contains `text`, ASCII letters in either case": every ASCII character that is not a letter or
// digit escaped (a backslash before one is always that character itself), every other byte as it is. MariaDB's REGEXP
// on a binary string compiles it byte by byte, where (?i) folds ASCII letters only: q's rule. (Its LOWER() folds more:
// `É` would find `é`, and `k` the Kelvin sign.)
std::string regexp_contains(std::string_view text) {
  std::string p = "(?i)";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (u < 0x80 && !word) p.push_back('\\');
    p.push_back(c);
  }
  return p;
}

// The filter's date range on the start_ms of a table that has one (run_tags' keyed rows, run_text).
void add_date_range(KeyedRunsSql& out, const RunsFilter& f, std::string_view prefix) {
  if (f.from_ms) {
    out.where += fmt::format(" AND {}start_ms >= ?", prefix);
    out.params.emplace_back(*f.from_ms);
  }
  if (f.to_ms) {
    out.where += fmt::format(" AND {}start_ms < ?", prefix);
    out.params.emplace_back(*f.to_ms);
  }
}

} // namespace

std::vector<RunTagRow> run_tag_rows(const RunInfo& run) {
  std::vector<RunTagRow> out;
  const auto tags = run_tags_json(run);
  for (const auto& [k, v] : tags.items())
    if (valid_tag_key(k))
      out.push_back(
          {k, v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)});
  out.push_back({std::string(kRunTagsMethodKey), run_method_word(run)});
  // One text for the search, its fields apart by a newline: a q holds no control byte when answered from this row
  // (runs_sql), so a match never spans two fields. Lower case, as q is made before it is compared.
  out.push_back({std::string(kRunTagsTextKey),
                 ascii_lower(run.run_id + "\n" + run.task + "\n" + run.host + "\n" + run.command + "\n" + run.tags)});
  return out;
}

std::string run_method_word(const RunInfo& run) {
  if (!run.total_energy_j) return "none";
  std::string one;
  int n = 0;
  for (auto m : kSingleMethods)
    if (run.summary.find(method_mark(m)) != std::string::npos) {
      ++n;
      one = m;
    }
  return n == 0 ? "unknown" : n == 1 ? one : "mixed";
}

bool run_passes(const RunInfo& run, const RunsFilter& f) {
  if (!f.task.empty() && run.task != f.task) return false;
  if (!f.host.empty() && run.host != f.host) return false;
  if (!f.user.empty() && !tag_is(run, "user", f.user) && !tag_is(run, "slurm_user", f.user)) return false;
  for (const auto& [k, v] : f.tags)
    if (!tag_is(run, k, v)) return false;
  if (f.from_ms && run.start_ms < *f.from_ms) return false;
  if (f.to_ms && run.start_ms >= *f.to_ms) return false;
  if (!f.method.empty() && run_method_word(run) != f.method) return false;
  if (f.exit == "ok" && run.exit_status != 0) return false;
  if (f.exit == "failed" && (!run.end_ms || !run.exit_status || *run.exit_status == 0)) return false;
  if (f.exit == "unfinished" && run.end_ms) return false;
  // As the SQL computes them: energy * 1000 (a double), end - start (an integer).
  if ((f.min_energy_mj || f.max_energy_mj) && !run.total_energy_j) return false;
  if (f.min_energy_mj && !(*run.total_energy_j * 1000 >= static_cast<double>(*f.min_energy_mj))) return false;
  if (f.max_energy_mj && !(*run.total_energy_j * 1000 <= static_cast<double>(*f.max_energy_mj))) return false;
  if ((f.min_duration_ms || f.max_duration_ms) && !run.end_ms) return false;
  if (f.min_duration_ms && *run.end_ms - run.start_ms < *f.min_duration_ms) return false;
  if (f.max_duration_ms && *run.end_ms - run.start_ms > *f.max_duration_ms) return false;
  if (!f.q.empty() && !icontains(run.run_id, f.q) && !icontains(run.task, f.q) && !icontains(run.host, f.q) &&
      !icontains(run.command, f.q) && !icontains(run.tags, f.q))
    return false;
  return true;
}

std::optional<double> j_per_unit(const RunInfo& run, const std::vector<RunWork>& work) {
  if (!run.total_energy_j || work.size() != 1 || !(work[0].amount > 0)) return std::nullopt;
  return *run.total_energy_j / work[0].amount;
}

std::string j_per_unit_sql(std::string_view runs_ref) {
  // Rows without an amount are no unit's work (read_run_work skips them).
  return fmt::format("(SELECT {0}.total_energy_j / CASE WHEN COUNT(DISTINCT w.unit) = 1 AND SUM(w.amount) > 0 THEN "
                     "SUM(w.amount) END FROM work w WHERE w.run_id = {0}.run_id AND w.amount IS NOT NULL)",
                     runs_ref);
}

RunsSql with_j_per_unit(const RunsSql& base) {
  RunsSql out = base;
  out.where += base.where.empty() ? " WHERE j_per_unit IS NOT NULL" : " AND j_per_unit IS NOT NULL";
  return out;
}

std::vector<RunsPagePart> j_per_unit_page(const RunsSql& base, bool descending, size_t with_figure, size_t offset,
                                          size_t limit) {
  const char* dir = descending ? " DESC" : "";
  std::vector<RunsPagePart> parts;
  if (limit == 0) return parts;
  if (offset < with_figure) {
    RunsPagePart p{with_j_per_unit(base), offset, std::min(limit, with_figure - offset)};
    p.sql.order_by = fmt::format(" ORDER BY j_per_unit{0}, start_ms{0}, run_id{0}", dir);
    parts.push_back(std::move(p));
  }
  const size_t taken = parts.empty() ? 0 : parts.front().limit;
  if (taken < limit) {
    RunsPagePart p{base, offset > with_figure ? offset - with_figure : 0, limit - taken};
    p.sql.where += base.where.empty() ? " WHERE j_per_unit IS NULL" : " AND j_per_unit IS NULL";
    p.sql.order_by = fmt::format(" ORDER BY start_ms{0}, run_id{0}", dir);
    parts.push_back(std::move(p));
  }
  return parts;
}

std::string_view kept_figure_column(RunsSortKey key) {
  switch (key) {
  case RunsSortKey::Duration:
    return kDurationColumn;
  case RunsSortKey::Energy:
    return "total_energy_j";
  case RunsSortKey::ExitStatus:
    return "exit_status";
  case RunsSortKey::JPerUnit:
    return kJPerUnitColumn;
  case RunsSortKey::Start:
    break;
  }
  return {};
}

RunsSql kept_figure_part(const RunsSql& base, std::string_view column, bool with, bool descending,
                         std::string_view prefix) {
  const char* dir = descending ? " DESC" : "";
  RunsSql out = base;
  out.where +=
      fmt::format("{}{}{} IS {}NULL", base.where.empty() ? " WHERE " : " AND ", prefix, column, with ? "NOT " : "");
  out.order_by = with ? fmt::format(" ORDER BY {0}{1}{2}, {0}start_ms{2}, {0}run_id{2}", prefix, column, dir)
                      : fmt::format(" ORDER BY {0}start_ms{1}, {0}run_id{1}", prefix, dir);
  return out;
}

std::optional<KeyedRunsSql> keyed_runs_sql(const RunsFilter& f, std::string_view prefix, size_t key_chars,
                                           std::string_view user_key) {
  // The search is not among them: a LIKE '%q%' over 100,000 texts of the index took 0.1-0.18 s on MariaDB 10.11, no
  // faster than over the runs' own columns.
  if (!f.task.empty() || !f.host.empty() || !f.q.empty() || bounds_figures(f)) return std::nullopt;
  const int terms = static_cast<int>(f.tags.size()) + !f.user.empty() + !f.method.empty();
  if (terms != 1) return std::nullopt;
  auto chars = [](std::string_view s) {
    return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
  };
  KeyedRunsSql out;
  std::string key, value;
  if (!f.tags.empty()) {
    key = f.tags.front().first;
    value = f.tags.front().second;
  } else if (!f.user.empty()) {
    key = user_key;
    value = f.user;
  } else if (!f.method.empty()) {
    key = kRunTagsMethodKey;
    value = f.method;
  }
  if (chars(value) > key_chars) return std::nullopt;
  out.where = fmt::format(" WHERE {0}tag_key = ? AND {0}value_key = ?", prefix);
  out.params = {key, value};
  add_date_range(out, f, prefix);
  return out;
}

std::optional<KeyedRunsSql> run_text_sql(const RunsFilter& f, std::string_view prefix, bool alone) {
  if (f.q.empty() || has_control(f.q)) return std::nullopt;
  if (alone && (!f.task.empty() || !f.host.empty() || !f.user.empty() || !f.tags.empty() || !f.method.empty() ||
                bounds_figures(f)))
    return std::nullopt;
  KeyedRunsSql out;
  out.where = fmt::format(" WHERE {}text LIKE ? ESCAPE '!'", prefix);
  out.params.emplace_back(like_contains(ascii_lower(f.q)));
  add_date_range(out, f, prefix);
  return out;
}

RunsSql runs_sql(const RunsFilter& f, SqlDialect d, bool run_tags, bool scan_by_start, bool run_text) {
  RunsSql out;
  std::vector<std::string> terms;
  auto& params = out.params;
  // With run_tags, each of these filters is one range of its index (tag_key, tag_value, run_id): the runs it names,
  // whatever the store's size, instead of every run's JSON read and parsed.
  auto indexed = [&](std::string_view keys, std::string_view op, std::string value) {
    params.emplace_back(std::move(value));
    // SQLite's unary + makes the column an expression, which no index answers: the planner then walks the order's
    // index and tests each run against the subquery's set.
    return fmt::format("{}run_id IN (SELECT run_id FROM run_tags WHERE tag_key {} AND tag_value {})",
                       scan_by_start && d == SqlDialect::Sqlite ? "+" : "", keys, op);
  };
  // A tag's JSON text (a string quoted, a number or boolean as spelled) compared with the value both quoted and
  // bare, so 42 matches a tag recorded as 42 or as "42", as run_matches does. A run whose tags are not JSON matches
  // no tag (SQLite would otherwise fail the whole query).
  // A value JSON writes as it is (no quote, backslash or control byte) must appear in the tags' text: a LIKE on the
  // text first spares parsing the JSON of every run (at 100,000 runs, 2.5 ms of CPU against 38 ms).
  auto tag_term = [&](const std::string& key, const std::string& value) {
    std::string term;
    const bool verbatim = std::none_of(value.begin(), value.end(), [](char c) {
      return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
    });
    if (verbatim) {
      params.emplace_back(like_contains(value));
      term = "tags LIKE ? ESCAPE '!' AND ";
    }
    params.emplace_back(fmt::format("$.\"{}\"", key));
    params.emplace_back(nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    params.emplace_back(value);
    return "(" + term +
           (d == SqlDialect::Sqlite ? "(CASE WHEN json_valid(tags) THEN tags -> ? END) IN (?, ?)"
                                    : "JSON_EXTRACT(tags, ?) IN (?, ?)") +
           ")";
  };
  if (!f.task.empty()) {
    terms.push_back("task = ?");
    params.emplace_back(f.task);
  }
  if (!f.host.empty()) {
    terms.push_back("host = ?");
    params.emplace_back(f.host);
  }
  if (!f.user.empty() && run_tags) {
    terms.push_back(indexed("IN ('user', 'slurm_user')", "= ?", f.user));
  } else if (!f.user.empty()) {
    std::string a = tag_term("user", f.user);
    std::string b = tag_term("slurm_user", f.user);
    terms.push_back("(" + a + " OR " + b + ")");
  }
  for (const auto& [k, v] : f.tags) {
    if (run_tags) {
      params.emplace_back(k);
      terms.push_back(indexed("= ?", "= ?", v));
    } else {
      terms.push_back(tag_term(k, v));
    }
  }
  if (f.from_ms) {
    terms.push_back("start_ms >= ?");
    params.emplace_back(*f.from_ms);
  }
  if (f.to_ms) {
    terms.push_back("start_ms < ?");
    params.emplace_back(*f.to_ms);
  }
  if (!f.method.empty() && run_tags) {
    params.emplace_back(std::string(kRunTagsMethodKey));
    terms.push_back(indexed("= ?", "= ?", f.method));
  } else if (!f.method.empty()) {
    // Each single method is a fixed LIKE on the summary's text (see method_mark); the word itself never enters SQL.
    auto has = [&](std::string_view m) {
      params.emplace_back(like_contains(method_mark(m)));
      return std::string("(summary LIKE ? ESCAPE '!')");
    };
    if (f.method == "none") {
      terms.push_back("total_energy_j IS NULL");
    } else {
      std::string count;
      for (auto m : kSingleMethods)
        count += (count.empty() ? "" : " + ") + has(m);
      std::string term = "total_energy_j IS NOT NULL AND (" + count + ")";
      if (f.method == "unknown") {
        term += " = 0";
      } else if (f.method == "mixed") {
        term += " >= 2";
      } else {
        term += " = 1 AND " + has(f.method);
      }
      terms.push_back("(" + term + ")");
    }
  }
  if (!f.q.empty() && run_text && d == SqlDialect::Mysql && !has_control(f.q)) {
    // The run's row of run_text by its whole key (start_ms, run_id): one lookup of the run met.
    params.emplace_back(like_contains(ascii_lower(f.q)));
    terms.push_back("EXISTS (SELECT 1 FROM run_text t WHERE t.start_ms = runs.start_ms AND t.run_id = runs.run_id AND "
                    "t.text LIKE ? ESCAPE '!')");
  } else if (!f.q.empty() && run_tags && !has_control(f.q)) {
    params.emplace_back(std::string(kRunTagsTextKey));
    terms.push_back(indexed("= ?", "LIKE ? ESCAPE '!'", like_contains(ascii_lower(f.q))));
  } else if (!f.q.empty()) {
    std::string any;
    for (const char* col : {"run_id", "task", "host", "command", "tags"}) {
      // SQLite's LIKE is ASCII case-insensitive. MariaDB's columns are utf8mb4_bin: their bytes, where REGEXP's (?i)
      // folds ASCII letters alone (regexp_contains).
      any += d == SqlDialect::Sqlite ? fmt::format("{}{} LIKE ? ESCAPE '!'", any.empty() ? "" : " OR ", col)
                                     : fmt::format("{}CAST({} AS BINARY) REGEXP ?", any.empty() ? "" : " OR ", col);
      params.emplace_back(d == SqlDialect::Sqlite ? like_contains(f.q) : regexp_contains(f.q));
    }
    terms.push_back("(" + any + ")");
  }
  if (f.exit == "ok") terms.push_back("exit_status = 0");
  if (f.exit == "failed") terms.push_back("(end_ms IS NOT NULL AND exit_status <> 0)");
  if (f.exit == "unfinished") terms.push_back("end_ms IS NULL");
  auto bound = [&](const std::optional<int64_t>& v, const char* term) {
    if (!v) return;
    terms.push_back(term);
    params.emplace_back(*v);
  };
  bound(f.min_energy_mj, "total_energy_j * 1000 >= ?");
  bound(f.max_energy_mj, "total_energy_j * 1000 <= ?");
  bound(f.min_duration_ms, "end_ms - start_ms >= ?");
  bound(f.max_duration_ms, "end_ms - start_ms <= ?");
  for (size_t i = 0; i < terms.size(); ++i)
    out.where += (i ? " AND " : " WHERE ") + terms[i];

  const char* dir = f.descending ? " DESC" : "";
  std::string key;
  switch (f.sort) {
  case RunsSortKey::Start:
    break;
  case RunsSortKey::Duration:
    key = "(end_ms - start_ms)";
    break;
  case RunsSortKey::Energy:
    key = "total_energy_j";
    break;
  case RunsSortKey::ExitStatus:
    key = "exit_status";
    break;
  case RunsSortKey::JPerUnit:
    // j_per_unit's rule in SQL: one unit with an amount above 0.
    key = "(total_energy_j / (SELECT CASE WHEN COUNT(DISTINCT w.unit) = 1 AND SUM(w.amount) > 0 THEN SUM(w.amount) "
          "END FROM work w WHERE w.run_id = runs.run_id))";
    break;
  }
  // Runs without the figure come last in either direction; ties go by start, then id.
  out.order_by = " ORDER BY ";
  // SQLite says NULLS LAST and evaluates the key once (J per unit's subquery is most of that sort's cost); MariaDB has
  // no NULLS LAST.
  if (!key.empty())
    out.order_by += d == SqlDialect::Sqlite ? fmt::format("{}{} NULLS LAST, ", key, dir)
                                            : fmt::format("({} IS NULL), {}{}, ", key, key, dir);
  out.order_by += fmt::format("start_ms{}, run_id{}", dir, dir);
  return out;
}

} // namespace wattscope

namespace wattscope {

std::vector<RunWork> read_run_work(StoreReader& store, const RunInfo& run) {
  std::vector<RunWork> out;
  const size_t amount_col = column_index(TableId::Work, "amount"), unit_col = column_index(TableId::Work, "unit");
  store.scan(TableId::Work, run, [&](std::span<const Value> row) {
    const auto amount = value_real(row[amount_col]);
    if (!amount) return;
    const std::string unit(value_text(row[unit_col]));
    auto it = std::find_if(out.begin(), out.end(), [&](const RunWork& w) { return w.unit == unit; });
    if (it == out.end())
      out.push_back({unit, *amount});
    else
      it->amount += *amount;
  });
  std::sort(out.begin(), out.end(), [](const RunWork& a, const RunWork& b) { return a.unit < b.unit; });
  return out;
}

StoreReader::RunsPage StoreReader::runs_query(const RunsFilter& filter, size_t offset, size_t limit) {
  struct Item {
    RunInfo run;
    std::vector<RunWork> work;
    std::optional<double> key;
  };
  std::vector<Item> items;
  for (auto& r : runs()) {
    if (!run_passes(r, filter)) continue;
    Item it{std::move(r), {}, {}};
    if (filter.sort == RunsSortKey::JPerUnit) it.work = read_run_work(*this, it.run);
    switch (filter.sort) {
    case RunsSortKey::Start:
      break;
    case RunsSortKey::Duration:
      if (it.run.end_ms) it.key = static_cast<double>(*it.run.end_ms - it.run.start_ms);
      break;
    case RunsSortKey::Energy:
      it.key = it.run.total_energy_j;
      break;
    case RunsSortKey::ExitStatus:
      if (it.run.exit_status) it.key = static_cast<double>(*it.run.exit_status);
      break;
    case RunsSortKey::JPerUnit:
      it.key = j_per_unit(it.run, it.work);
      break;
    }
    items.push_back(std::move(it));
  }
  const bool desc = filter.descending;
  const bool keyed = filter.sort != RunsSortKey::Start;
  std::stable_sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    if (keyed) {
      if (a.key.has_value() != b.key.has_value()) return a.key.has_value(); // missing last either way
      if (a.key && *a.key != *b.key) return desc ? *a.key > *b.key : *a.key < *b.key;
    }
    if (a.run.start_ms != b.run.start_ms)
      return desc ? a.run.start_ms > b.run.start_ms : a.run.start_ms < b.run.start_ms;
    return desc ? a.run.run_id > b.run.run_id : a.run.run_id < b.run.run_id;
  });
  RunsPage page;
  page.total = items.size();
  for (size_t i = offset; i < items.size() && i - offset < limit; ++i) {
    if (filter.sort != RunsSortKey::JPerUnit) items[i].work = read_run_work(*this, items[i].run);
    page.runs.push_back(std::move(items[i].run));
    page.work.push_back(std::move(items[i].work));
  }
  return page;
}

std::string result_select_list(std::span<const ResultColumn> cols) {
  std::string out;
  for (const auto& c : cols)
    out += fmt::format("{}{} AS {}", out.empty() ? "" : ", ", c.sql, c.name);
  return out;
}

std::vector<ColType> result_types(std::span<const ResultColumn> cols) {
  std::vector<ColType> out;
  for (const auto& c : cols)
    out.push_back(c.type);
  return out;
}

size_t result_index(std::span<const ResultColumn> cols, std::string_view name) {
  for (size_t i = 0; i < cols.size(); ++i)
    if (cols[i].name == name) return i;
  throw std::logic_error(fmt::format("a query's result has no column {}", name));
}

const Value& only_cell(std::span<const Value> row) {
  if (row.size() != 1) throw std::logic_error(fmt::format("a one-column query answered {} columns", row.size()));
  return row.front();
}

namespace {

// A page's work: per run and unit, the amounts summed (the alias is no column of `work`, whose WHERE reads amount).
constexpr ResultColumn kPageWorkColumns[] = {{"run_id", "run_id", ColType::Text},
                                             {"unit", "unit", ColType::Text},
                                             {"amount_done", "SUM(amount)", ColType::Real}};
struct PageWorkRow {
  std::string_view run_id;
  std::string_view unit;
  double amount = 0;
};
PageWorkRow page_work_row(std::span<const Value> row) {
  const auto cell = [&](std::string_view name) -> const Value& { return row[result_index(kPageWorkColumns, name)]; };
  return {value_text(cell("run_id")), value_text(cell("unit")), value_real(cell("amount_done")).value_or(0)};
}

} // namespace

PageWorkSql page_work_sql(const std::vector<RunInfo>& runs) {
  PageWorkSql w;
  std::string marks;
  for (const auto& r : runs) {
    marks += marks.empty() ? "?" : ", ?";
    w.params.emplace_back(r.run_id);
  }
  w.sql = fmt::format("SELECT {} FROM work WHERE run_id IN ({}) AND amount IS NOT NULL GROUP BY run_id, unit ORDER BY "
                      "run_id, unit",
                      result_select_list(kPageWorkColumns), marks);
  w.types = result_types(kPageWorkColumns);
  return w;
}

void add_page_work_row(const std::vector<RunInfo>& runs, std::vector<std::vector<RunWork>>& work,
                       std::span<const Value> row) {
  const PageWorkRow r = page_work_row(row);
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i].run_id == r.run_id) work[i].push_back({std::string(r.unit), r.amount});
}

} // namespace wattscope
