// CSV: one file per table kind and run, named {task}_{start}_{table}.csv, columns named and ordered like the SQL
// tables. Missing values are empty cells. The runs file is rewritten atomically at start and end (core/output_file);
// a batch reaches every table file whole or not at all (a failed one is cut off again), so a disk that fills up
// mid-run leaves no duplicate and no half line once the writer's retry has gone through.
#pragma once

#include <memory>
#include <string>

#include "sinks/sink.hpp"

namespace wattscope {

std::unique_ptr<Sink> make_csv_sink(const std::string& dir);
std::unique_ptr<StoreReader> make_csv_reader(const std::string& dir);
std::string csv_file_name(const RunInfo& run, TableId table);
// Appends one CSV cell (RFC 4180 quoting, classic-locale numbers, shortest round-trip doubles).
void append_csv_cell(std::string& out, const Value& v);

} // namespace wattscope
