// CSV stores read back by show, report, export and import: files that may come from another machine or a
// spreadsheet. The first byte picks the table and the mode:
//  - raw: the rest is a file, read as that table;
//  - round trip: the rest describes a row; it is written as wattscope writes CSV, read back and compared.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <stdio.h> // fmemopen (POSIX)

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "sinks/csv/csv_reader.hpp"
#include "sinks/csv/csv_store.hpp"

using namespace wattscope;

namespace {

// Reads `bytes` as a file of `id`, calling fn for each row.
void read_bytes(std::string bytes, TableId id, const std::function<void(std::span<const Value>)>& fn) {
  // fmemopen refuses a zero-sized buffer; an empty file reads the same as a file of one unterminated empty line
  // for the header check, so give it one byte of room and no content.
  std::FILE* f = bytes.empty() ? ::fmemopen(nullptr, 1, "w+") : ::fmemopen(bytes.data(), bytes.size(), "r");
  CsvReader in(f, "fuzz.csv");
  read_table_csv(in, id, fn);
}

bool same(const Value& a, const Value& b) {
  if (is_null(a) || is_null(b)) return is_null(a) && is_null(b);
  if (auto* x = std::get_if<int64_t>(&a)) return std::holds_alternative<int64_t>(b) && std::get<int64_t>(b) == *x;
  if (std::holds_alternative<double>(a)) {
    if (!std::holds_alternative<double>(b)) return false;
    const double x = std::get<double>(a), y = std::get<double>(b);
    return std::isnan(x) ? std::isnan(y) : x == y && std::signbit(x) == std::signbit(y);
  }
  return value_text(a) == value_text(b);
}

void raw(TableId id, std::string bytes) {
  const size_t width = table(id).columns.size();
  try {
    read_bytes(std::move(bytes), id, [&](std::span<const Value> row) {
      FUZZ_CHECK(row.size() == width);
      for (size_t c = 0; c < width; ++c) {
        const Value& v = row[c];
        switch (table(id).columns[c].type) {
        case ColType::Int:
          FUZZ_CHECK(is_null(v) || std::holds_alternative<int64_t>(v));
          break;
        case ColType::Real:
          FUZZ_CHECK(is_null(v) || std::holds_alternative<double>(v));
          break;
        case ColType::Text:
          FUZZ_CHECK(is_null(v) || std::holds_alternative<std::string>(v));
          break;
        }
      }
    });
  } catch (const std::runtime_error& e) {
    // A broken file is an error that names the file and the line.
    FUZZ_CHECK(std::strncmp(e.what(), "fuzz.csv:", 9) == 0 || std::strncmp(e.what(), "cannot", 6) == 0);
  }
}

void round_trip(TableId id, FuzzedDataProvider& in) {
  const Table& t = table(id);
  std::vector<Value> row;
  for (const Column& col : t.columns) {
    if (in.ConsumeBool()) {
      row.emplace_back();
      continue;
    }
    switch (col.type) {
    case ColType::Int:
      row.emplace_back(in.ConsumeIntegral<int64_t>());
      break;
    case ColType::Real:
      row.emplace_back(in.ConsumeFloatingPoint<double>());
      break;
    case ColType::Text:
      row.emplace_back(in.ConsumeRandomLengthString(64));
      break;
    }
  }
  std::string file;
  for (size_t c = 0; c < t.columns.size(); ++c)
    file += std::string(c ? "," : "") + std::string(t.columns[c].name);
  file += '\n';
  for (size_t c = 0; c < row.size(); ++c) {
    if (c) file += ',';
    append_csv_cell(file, row[c]);
  }
  file += '\n';
  int rows = 0;
  read_bytes(file, id, [&](std::span<const Value> back) {
    ++rows;
    FUZZ_CHECK(back.size() == row.size());
    for (size_t c = 0; c < row.size(); ++c) {
      if (!same(row[c], back[c]))
        std::fprintf(stderr, "column %s reads back differently from this file:\n%s\n",
                     std::string(t.columns[c].name).c_str(), file.c_str());
      FUZZ_CHECK(same(row[c], back[c]));
    }
  });
  FUZZ_CHECK(rows == 1);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto id = static_cast<TableId>((data[0] >> 1) % kTableCount);
  if (data[0] & 1) {
    FuzzedDataProvider in(data + 1, size - 1);
    round_trip(id, in);
  } else {
    raw(id, std::string(fuzz_text(data + 1, size - 1)));
  }
  return 0;
}
