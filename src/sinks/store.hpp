// Naming a store on the command line: "wattscope.db", "sqlite:PATH", "csv:DIR", "mysql://USER@HOST[:PORT]/DB".
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "sinks/sink.hpp"

namespace wattscope {

struct StoreSpec {
  enum class Kind { Sqlite, Csv, Mysql };
  Kind kind = Kind::Sqlite;
  std::string location;
};

inline constexpr const char* kDefaultDb = "wattscope.db";

// Throws std::invalid_argument naming the problem (a malformed URL, a password in it, an unknown scheme).
StoreSpec parse_store(std::string_view text);
// spill_on_outage: a MySQL store that becomes unreachable spills to a local file (run, record) or fails (export).
std::unique_ptr<Sink> open_sink(const StoreSpec& spec, bool spill_on_outage = true);
std::unique_ptr<StoreReader> open_reader(const StoreSpec& spec);
// Every row of a run (its runs row first, then each table in key order), handed to `write` in batches of about
// `batch_rows` rows: export and the MySQL spill replay share it. Returns the number of rows read.
int64_t copy_run(StoreReader& from, const RunInfo& run, const std::function<void(const RowBatch&)>& write,
                 size_t batch_rows = 10000);

// A run by exact id or unique prefix; empty id means the latest run. Throws with the candidates when ambiguous.
RunInfo resolve_run(StoreReader& store, std::string_view id);

} // namespace wattscope
