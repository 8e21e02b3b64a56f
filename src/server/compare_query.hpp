// The compare view's query string (issue 35): /runs/compare?runs=ID,ID,... or ?tasks=bert,gpt, with the runs table's
// filters from, to and host. Parsed like the rest of the API: never throws, never allocates without bound, and an
// error names the parameter and shows the offending value printable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "server/query.hpp"

namespace wattscope::query {

constexpr size_t kMaxCompareRuns = 100;       // runs named in runs=
constexpr size_t kMaxCompareTasks = 20;       // tasks named in tasks=
constexpr size_t kMaxCompareRunsPerTask = 50; // the latest of each task's runs that pass the filters

struct CompareQuery {
  std::vector<std::string> runs;  // run ids (or prefixes), as given
  std::vector<std::string> tasks; // task names, as given; exactly one of runs and tasks is non-empty
  std::optional<int64_t> from_ms; // runs started at or after (UTC ms)
  std::optional<int64_t> to_ms;   // runs started before
  std::string host;               // runs of this host only ("" for any)
  // The same query, its parameters in one order: the cache's key, and the link the page gives.
  std::string canonical() const;
};

// from and to: a UTC date (2026-11-26, its midnight) or time (2026-11-26T14:05:00Z, milliseconds optional). Any other
// parameter, one given twice, an empty or over-long name in a list, or more than the caps above is an Error.
std::variant<CompareQuery, Error> parse_compare(std::string_view raw);

} // namespace wattscope::query
