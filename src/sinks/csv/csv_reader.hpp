#pragma once

#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/schema.hpp"

namespace wattscope {

// A longer record (line) is refused rather than read into memory whole: wattscope writes nothing near this long.
inline constexpr size_t kMaxCsvRecordBytes = size_t{16} << 20;

// Streams an RFC 4180 file. Errors name the file and line.
class CsvReader {
public:
  explicit CsvReader(const std::string& path);
  // An open stream (the fuzz target's fmemopen'ed bytes), closed at destruction; name is for messages.
  CsvReader(std::FILE* f, std::string name);
  ~CsvReader();
  CsvReader(const CsvReader&) = delete;
  CsvReader& operator=(const CsvReader&) = delete;
  bool next(std::vector<std::string>& fields, std::vector<bool>& quoted);
  size_t line() const { return record_line_; }
  const std::string& path() const { return path_; }

private:
  int get();
  bool at_line_end();
  std::FILE* f_ = nullptr;
  std::string path_;
  size_t line_ = 1;
  size_t record_line_ = 0;
};

// Whether a table's CSV file leaves out run_id (schema 7): gpu_samples, its rows most of a run's bytes, in a file of
// one run's rows whose name carries the run. Its reader is given the run's id.
inline bool csv_omits_run_id(TableId id) {
  return id == TableId::GpuSamples;
}

// Reads a wattscope table file: checks the header against the schema and converts cells to typed values.
// fn gets each row; throws std::runtime_error "FILE:LINE: problem" on a missing column or a broken row. A file that
// leaves out run_id where csv_omits_run_id reads it as `run_id` (NULL when that is empty).
void read_table_csv(const std::string& path, TableId table, const std::function<void(std::span<const Value>)>& fn,
                    std::string_view run_id = {});
void read_table_csv(CsvReader& in, TableId table, const std::function<void(std::span<const Value>)>& fn,
                    std::string_view run_id = {});

} // namespace wattscope
