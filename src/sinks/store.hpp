// Naming a store on the command line: "wattscope.db", "sqlite:PATH", "csv:DIR"; MySQL URLs come with the MySQL store.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "sinks/sink.hpp"

namespace wattscope {

struct StoreSpec {
  enum class Kind { Sqlite, Csv };
  Kind kind = Kind::Sqlite;
  std::string location;
};

inline constexpr const char* kDefaultDb = "wattscope.db";

// Throws std::invalid_argument naming the problem (e.g. a mysql:// URL in a build without MySQL).
StoreSpec parse_store(std::string_view text);
std::unique_ptr<Sink> open_sink(const StoreSpec& spec);
std::unique_ptr<StoreReader> open_reader(const StoreSpec& spec);
// A run by exact id or unique prefix; empty id means the latest run. Throws with the candidates when ambiguous.
RunInfo resolve_run(StoreReader& store, std::string_view id);

} // namespace wattscope
