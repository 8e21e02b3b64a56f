#include "sinks/csv/csv_reader.hpp"

#include <algorithm>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <functional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/text.hpp"

namespace wattscope {

CsvReader::CsvReader(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) throw std::runtime_error(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
}
CsvReader::CsvReader(std::FILE* f, std::string name) : f_(f), path_(std::move(name)) {
  if (!f_) throw std::runtime_error(fmt::format("cannot read '{}'", path_));
}
CsvReader::~CsvReader() {
  if (f_) std::fclose(f_);
}
int CsvReader::get() {
  int c = std::getc(f_);
  if (c == '\n') ++line_;
  return c;
}

// After a CR: whether an LF (consumed) or the end of the file follows.
bool CsvReader::at_line_end() {
  const int n = get();
  if (n == '\n' || n == EOF) return true;
  std::ungetc(n, f_);
  return false;
}

bool CsvReader::next(std::vector<std::string>& fields, std::vector<bool>& quoted) {
  fields.clear();
  quoted.clear();
  record_line_ = line_;
  int c = get();
  if (c == EOF) return false;
  std::string cur;
  bool in_quotes = false, was_quoted = false;
  size_t record_bytes = 0;
  for (;; c = get()) {
    if (++record_bytes > kMaxCsvRecordBytes)
      throw std::runtime_error(fmt::format("{}:{}: a record longer than {} MiB; this is not a wattscope CSV file",
                                           path_, record_line_, kMaxCsvRecordBytes >> 20));
    if (in_quotes) {
      if (c == EOF) throw std::runtime_error(fmt::format("{}:{}: unterminated quoted field", path_, record_line_));
      if (c == '"') {
        int n = std::getc(f_);
        if (n == '"') {
          cur.push_back('"');
        } else {
          in_quotes = false;
          if (n != EOF) std::ungetc(n, f_);
        }
      } else {
        cur.push_back(static_cast<char>(c));
      }
      continue;
    }
    if (c == '"' && cur.empty() && !was_quoted) {
      in_quotes = was_quoted = true;
    } else if (c == ',') {
      fields.push_back(std::move(cur));
      quoted.push_back(was_quoted);
      cur.clear();
      was_quoted = false;
    } else if (c == '\n' || c == EOF || (c == '\r' && at_line_end())) {
      // A record ends at LF or CRLF (RFC 4180, and what a spreadsheet saves); a CR inside quotes is data.
      fields.push_back(std::move(cur));
      quoted.push_back(was_quoted);
      return true;
    } else {
      if (was_quoted) throw std::runtime_error(fmt::format("{}:{}: text after a closing quote", path_, record_line_));
      cur.push_back(static_cast<char>(c));
    }
  }
}

void read_table_csv(const std::string& path, TableId id, const std::function<void(std::span<const Value>)>& fn,
                    std::string_view run_id) {
  CsvReader in(path);
  read_table_csv(in, id, fn, run_id);
}

void read_table_csv(CsvReader& in, TableId id, const std::function<void(std::span<const Value>)>& fn,
                    std::string_view run_id) {
  const Table& t = table(id);
  const std::string& path = in.path();
  std::vector<std::string> fields;
  std::vector<bool> quoted;
  if (!in.next(fields, quoted)) throw std::runtime_error(fmt::format("{}: empty file, expected a header line", path));
  // Map schema columns to file positions by name. A key column must be there; any other column a file lacks (one
  // written by an older wattscope, before that column existed) reads as missing. An extra column is ignored.
  std::vector<int> pos(t.columns.size(), -1);
  for (size_t i = 0; i < fields.size(); ++i)
    for (size_t c = 0; c < t.columns.size(); ++c)
      if (fields[i] == t.columns[c].name) pos[c] = static_cast<int>(i);
  const size_t run_col = column_index(id, "run_id");
  const Value run = csv_omits_run_id(id) && pos[run_col] < 0 && !run_id.empty() ? Value(run_id) : Value();
  for (size_t c = 0; c < t.columns.size(); ++c)
    if (pos[c] < 0 && !(c == run_col && csv_omits_run_id(id)) &&
        std::find(t.primary_key.begin(), t.primary_key.end(), t.columns[c].name) != t.primary_key.end())
      throw std::runtime_error(
          fmt::format("{}:1: column '{}' is missing from the header of this {} file", path, t.columns[c].name, t.name));
  const size_t width = fields.size();
  std::vector<Value> row(t.columns.size());
  while (in.next(fields, quoted)) {
    if (fields.size() == 1 && fields[0].empty() && !quoted[0]) continue; // blank line
    if (fields.size() != width)
      throw std::runtime_error(
          fmt::format("{}:{}: {} fields, the header has {}", path, in.line(), fields.size(), width));
    for (size_t c = 0; c < t.columns.size(); ++c) {
      if (pos[c] < 0) {
        row[c] = c == run_col ? run : Value();
        continue;
      }
      const std::string& s = fields[static_cast<size_t>(pos[c])];
      const bool q = quoted[static_cast<size_t>(pos[c])];
      if (s.empty() && !q) {
        row[c] = Value();
        continue;
      }
      switch (t.columns[c].type) {
      case ColType::Text:
        row[c] = Value(s);
        break;
      case ColType::Int: {
        int64_t v = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size())
          throw std::runtime_error(fmt::format("{}:{}: column '{}': '{}' is not an integer", path, in.line(),
                                               t.columns[c].name, excerpt(s)));
        row[c] = Value(v);
        break;
      }
      case ColType::Real: {
        double v = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size())
          throw std::runtime_error(
              fmt::format("{}:{}: column '{}': '{}' is not a number", path, in.line(), t.columns[c].name, excerpt(s)));
        row[c] = Value(v);
        break;
      }
      }
    }
    fn(row);
  }
}

} // namespace wattscope
