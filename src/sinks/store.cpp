#include "sinks/store.hpp"

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "sinks/csv/csv_store.hpp"
#ifdef WATTSCOPE_HAVE_MYSQL
#include "sinks/mysql/mysql_store.hpp"
#endif
#include "sinks/sqlite/sqlite_store.hpp"

namespace wattscope {

namespace {
bool is_directory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}
} // namespace

std::unique_ptr<Sink> open_sink(const StoreSpec& spec, bool spill_on_outage) {
  (void)spill_on_outage; // only MySQL spills
  switch (spec.kind) {
  case StoreSpec::Kind::Csv:
    return make_csv_sink(spec.location);
#ifdef WATTSCOPE_HAVE_MYSQL
  case StoreSpec::Kind::Mysql:
    return make_mysql_sink(parse_mysql_url(spec.location), spill_on_outage);
#endif
  default:
    if (is_directory(spec.location))
      throw std::runtime_error(fmt::format("'{}' is a directory, and a SQLite store is a file: for CSV files in it use "
                                           "--csv {} (or --db csv:{}); for SQLite, a file name such as {}/wattscope.db",
                                           spec.location, spec.location, spec.location, spec.location));
    return make_sqlite_sink(spec.location);
  }
}

std::unique_ptr<StoreReader> open_reader(const StoreSpec& spec) {
  switch (spec.kind) {
  case StoreSpec::Kind::Csv:
    return make_csv_reader(spec.location);
#ifdef WATTSCOPE_HAVE_MYSQL
  case StoreSpec::Kind::Mysql:
    return make_mysql_reader(parse_mysql_url(spec.location));
#endif
  default:
    // A directory cannot be a SQLite file: it is read as the CSV store it can be (as the Python reader does).
    if (is_directory(spec.location)) return make_csv_reader(spec.location);
    return make_sqlite_reader(spec.location);
  }
}

int64_t copy_run(StoreReader& from, const RunInfo& run, const std::function<void(const RowBatch&)>& write,
                 size_t batch_rows) {
  RowBatch batch;
  append_run_row(run, batch.tables[static_cast<size_t>(TableId::Runs)]);
  int64_t rows = 0;
  size_t pending = 0;
  for (size_t t = 1; t < kTableCount; ++t) {
    from.scan(static_cast<TableId>(t), run, [&](std::span<const Value> row) {
      auto& cells = batch.tables[t].cells;
      cells.insert(cells.end(), row.begin(), row.end());
      ++rows;
      if (++pending >= batch_rows) {
        write(batch);
        batch.clear();
        pending = 0;
      }
    });
  }
  write(batch);
  return rows;
}

RunInfo resolve_run(StoreReader& store, std::string_view id) {
  // A whole id (every link serve writes) is one lookup by the runs table's key; a part of one reads every run.
  if (!id.empty() && id != "latest")
    if (auto exact = store.run_by_id(std::string(id))) return std::move(*exact);
  auto runs = store.runs();
  if (runs.empty()) throw std::runtime_error(fmt::format("{} holds no runs yet", store.describe()));
  if (id.empty() || id == "latest") return runs.back();
  std::vector<const RunInfo*> matches;
  for (const auto& r : runs) {
    if (r.run_id == id) return r;
    if (r.run_id.starts_with(id) || r.run_id.ends_with(id)) matches.push_back(&r);
  }
  if (matches.size() == 1) return *matches[0];
  if (matches.empty())
    throw std::runtime_error(fmt::format("no run '{}' in {}; 'wattscope list' shows the runs", id, store.describe()));
  std::string names;
  for (size_t i = 0; i < matches.size() && i < 5; ++i)
    names += fmt::format("{}{}", i ? ", " : "", matches[i]->run_id);
  throw std::runtime_error(fmt::format("'{}' matches {} runs ({}); give more of the id", id, matches.size(), names));
}

} // namespace wattscope
