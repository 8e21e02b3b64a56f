// Query strings of the JSON API, parsed by free functions that never throw and never allocate without bound, so a
// fuzz target can call them with any bytes. Errors name the parameter and show the offending value printable.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sinks/runs_query.hpp"

namespace wattscope::query {

struct Param {
  std::string name;  // percent-decoded
  std::string value; // percent-decoded ('+' is a space)
};

// What went wrong, as a sentence for the client ("parameter 'range': ...").
struct Error {
  std::string message;
};

// "a=1&b=x%20y" -> {a, 1}, {b, x y}. An empty query gives no parameters; "a" alone is {a, ""}. At most
// kMaxParams parameters; a bad percent escape, too many parameters, or a control character (a byte below 0x20, or
// 0x7f: %00, %0A, ...) decoded into a name or a value is an Error, so no endpoint ever sees one.
constexpr size_t kMaxParams = 16;
std::variant<std::vector<Param>, Error> parse(std::string_view raw);

// An endpoint that takes no parameters (/api/v1/forecast, /api/v1/current, /metrics, ...): any parameter is an Error
// naming it, as an unknown one is everywhere else; nullopt for an empty query.
std::optional<Error> parse_none(std::string_view raw, std::string_view endpoint);

// /api/v1/history's parameters: range (default 1 h, at most 31 days) and step (default range / 300 but at least 1 ms;
// at most range, at most 10000 steps). Any other parameter, or one given twice, is an Error.
struct HistoryQuery {
  std::chrono::nanoseconds range;
  std::chrono::nanoseconds step;
};
std::variant<HistoryQuery, Error> parse_history(std::string_view raw);

// /api/v1/runs's parameters: limit (default kDefaultRunsLimit, 1 to kMaxRunsLimit) and offset (default 0, a count of
// runs from the oldest). A page is what one request costs: never the whole store (issue 31). Any other parameter, one
// given twice, or a value that is not such a number is an Error.
constexpr size_t kDefaultRunsLimit = 100;
constexpr size_t kMaxRunsLimit = 1000;
struct RunsPageQuery {
  size_t limit = kDefaultRunsLimit;
  size_t offset = 0;
};
std::variant<RunsPageQuery, Error> parse_runs_page(std::string_view raw);

// issue 35: /api/v1/runs's filters and order beside limit and offset. task, host, user, method and q at most once
// each; tag=KEY=VALUE up to kMaxRunTags times (all must match); from and to a date (2026-11-20), a UTC time
// (2026-11-20T08:00, :SS, .mmm and a final Z allowed) or epoch milliseconds (from inclusive, to exclusive; a date
// alone as `to` takes in that whole day); sort one of start, duration, energy, j_per_unit, exit_status with '-' for
// descending (default start, oldest first, as the pages always were). Values are at most kMaxRunsValue bytes.
constexpr size_t kMaxRunTags = 8;
constexpr size_t kMaxRunsValue = 256;
struct RunsListQuery {
  size_t limit = kDefaultRunsLimit;
  size_t offset = 0;
  RunsFilter filter;
  bool csv = false;         // format=csv: every run that passes (from offset, limit if given), as CSV
  bool limit_given = false; // limit= was in the query
};
std::variant<RunsListQuery, Error> parse_runs_list(std::string_view raw);
// A time as `from`/`to` take it; `end_of_day`: a date alone means the end of that day. nullopt when malformed.
std::optional<int64_t> parse_time_ms(std::string_view text, bool end_of_day = false);

// `text` for an error message: printable ASCII kept, quotes and backslashes escaped, every other byte as \xHH,
// cut at `max_chars` with "..." so a long value cannot make a long answer.
std::string printable(std::string_view text, size_t max_chars = 64);

} // namespace wattscope::query
