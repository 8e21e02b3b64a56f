// SQLite: the embedded default store. WAL journal, one transaction per batch, prepared statements per table.
#pragma once

#include <memory>
#include <string>

#include "sinks/sink.hpp"

namespace wattscope {

std::unique_ptr<Sink> make_sqlite_sink(const std::string& path);
std::unique_ptr<StoreReader> make_sqlite_reader(const std::string& path);
// The CREATE TABLE statements, derived from the schema (also shown by `wattscope schema`).
std::string sqlite_schema_sql();

} // namespace wattscope
