#include "server/query.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/duration.hpp"
#include "core/time_util.hpp"

namespace wattscope::query {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `in`; false on a '%' not followed by two hex digits.
bool decode(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '+') {
      out.push_back(' ');
    } else if (c == '%') {
      const int hi = i + 1 < in.size() ? hex_value(in[i + 1]) : -1;
      const int lo = i + 2 < in.size() ? hex_value(in[i + 2]) : -1;
      if (hi < 0 || lo < 0) return false;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return true;
}

// A control character (C0 or DEL) in a decoded name or value: none has a meaning in any parameter, and a NUL would
// end the string where a store or a C API reads it (q=%00zzzz once searched for "" and matched every run).
bool has_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

// A bound of a numeric filter: a plain decimal number from 0 to 1e12, in thousandths (rounded).
std::optional<int64_t> parse_bound(const std::string& text) {
  if (text.empty() || text.size() > 32 || text.find_first_not_of("0123456789.") != std::string::npos)
    return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !(v >= 0) || v > 1e12) return std::nullopt;
  return std::llround(v * 1000);
}

} // namespace

std::string printable(std::string_view text, size_t max_chars) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\' || c == '\'' || c == '"') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

std::variant<std::vector<Param>, Error> parse(std::string_view raw) {
  std::vector<Param> params;
  size_t pos = 0;
  while (pos <= raw.size() && !raw.empty()) {
    size_t amp = raw.find('&', pos);
    if (amp == std::string_view::npos) amp = raw.size();
    const std::string_view pair = raw.substr(pos, amp - pos);
    pos = amp + 1;
    if (pair.empty()) {
      if (amp == raw.size()) break;
      continue; // "a=1&&b=2": an empty pair means nothing
    }
    if (params.size() == kMaxParams) return Error{fmt::format("at most {} query parameters are accepted", kMaxParams)};
    const size_t eq = pair.find('=');
    const std::string_view name = pair.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    Param p;
    if (!decode(name, p.name))
      return Error{
          fmt::format("query parameter '{}': bad percent escape (use %XX with two hex digits)", printable(name))};
    if (!decode(value, p.value))
      return Error{fmt::format("query parameter '{}': bad percent escape in value '{}' (use %XX with two hex digits)",
                               printable(p.name), printable(value))};
    if (has_control(p.name))
      return Error{fmt::format("query parameter '{}': control characters are not accepted in a parameter's name",
                               printable(p.name))};
    if (has_control(p.value))
      return Error{fmt::format("query parameter '{}': '{}' holds a control character (a byte below 0x20, or 0x7f); "
                               "none is accepted in a value",
                               printable(p.name), printable(p.value))};
    params.push_back(std::move(p));
    if (amp == raw.size()) break;
  }
  return params;
}

std::optional<Error> parse_none(std::string_view raw, std::string_view endpoint) {
  auto parsed = parse(raw);
  if (auto* e = std::get_if<Error>(&parsed)) return *e;
  const auto& params = std::get<std::vector<Param>>(parsed);
  if (params.empty()) return std::nullopt;
  return Error{
      fmt::format("unknown query parameter '{}' ({} takes no parameters)", printable(params.front().name), endpoint)};
}

std::variant<HistoryQuery, Error> parse_history(std::string_view raw) {
  auto parsed = parse(raw);
  if (auto* e = std::get_if<Error>(&parsed)) return *e;
  std::optional<std::chrono::nanoseconds> range, step;
  for (const Param& p : std::get<std::vector<Param>>(parsed)) {
    std::optional<std::chrono::nanoseconds>* slot = nullptr;
    if (p.name == "range")
      slot = &range;
    else if (p.name == "step")
      slot = &step;
    else
      return Error{fmt::format("unknown query parameter '{}' (history takes range and step)", printable(p.name))};
    if (*slot) return Error{fmt::format("query parameter '{}' is given twice", p.name)};
    try {
      *slot = parse_duration(p.value);
    } catch (const std::invalid_argument& e) {
      // parse_duration's message quotes the raw bytes (and a NUL would end it early): pass it on only when the value
      // prints as it is.
      if (p.value.size() <= 64 && printable(p.value, p.value.size()) == p.value)
        return Error{fmt::format("query parameter '{}': {}", p.name, e.what())};
      return Error{fmt::format("query parameter '{}': '{}' is not a duration; use a number and a unit, e.g. 15m, "
                               "1h, 30s, 500ms",
                               p.name, printable(p.value))};
    }
  }
  HistoryQuery q{range.value_or(std::chrono::hours(1)), step.value_or(std::chrono::nanoseconds(0))};
  if (q.range > std::chrono::hours(24 * 31))
    return Error{
        fmt::format("query parameter 'range': '{}' is more than 31 days", printable(format_duration(q.range)))};
  if (q.step.count() == 0) q.step = std::max<std::chrono::nanoseconds>(q.range / 300, std::chrono::milliseconds(1));
  if (q.step > q.range)
    return Error{fmt::format("query parameter 'step': '{}' exceeds the range '{}'", format_duration(q.step),
                             format_duration(q.range))};
  if (q.range / q.step > 10000)
    return Error{fmt::format("query parameter 'step': '{}' gives more than 10000 steps over '{}'; use a larger step",
                             format_duration(q.step), format_duration(q.range))};
  return q;
}

std::variant<RunsPageQuery, Error> parse_runs_page(std::string_view raw) {
  auto parsed = parse(raw);
  if (auto* e = std::get_if<Error>(&parsed)) return *e;
  RunsPageQuery q;
  bool have_limit = false, have_offset = false;
  // Offsets past any real store are refused rather than wrapped: 10^12 runs is far beyond what a store holds.
  constexpr uint64_t kMaxOffset = 1'000'000'000'000ULL;
  for (const Param& p : std::get<std::vector<Param>>(parsed)) {
    bool* seen = nullptr;
    if (p.name == "limit")
      seen = &have_limit;
    else if (p.name == "offset")
      seen = &have_offset;
    else
      return Error{fmt::format("unknown query parameter '{}' (runs takes limit and offset)", printable(p.name))};
    if (*seen) return Error{fmt::format("query parameter '{}' is given twice", p.name)};
    *seen = true;
    uint64_t v = 0;
    const bool digits =
        !p.value.empty() && p.value.size() <= 13 && p.value.find_first_not_of("0123456789") == std::string::npos;
    if (digits) v = std::stoull(p.value);
    if (p.name == "limit") {
      if (!digits || v < 1 || v > kMaxRunsLimit)
        return Error{fmt::format("query parameter 'limit': '{}' is not a number of runs from 1 to {}",
                                 printable(p.value), kMaxRunsLimit)};
      q.limit = static_cast<size_t>(v);
    } else {
      if (!digits || v > kMaxOffset)
        return Error{
            fmt::format("query parameter 'offset': '{}' is not a count of runs (0 or more)", printable(p.value))};
      q.offset = static_cast<size_t>(v);
    }
  }
  return q;
}

} // namespace wattscope::query

namespace wattscope::query {

namespace {

// `n` digits at text[pos] as a number, or -1.
int digits(std::string_view text, size_t pos, size_t n) {
  if (pos + n > text.size()) return -1;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    const char c = text[pos + i];
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

} // namespace

std::optional<int64_t> parse_time_ms(std::string_view t, bool end_of_day) {
  if (t.empty() || t.size() > 32) return std::nullopt;
  if (t.find_first_not_of("0123456789") == std::string_view::npos) {
    if (t.size() > 15) return std::nullopt; // past the year 30000 in ms
    return static_cast<int64_t>(std::stoll(std::string(t)));
  }
  const int y = digits(t, 0, 4), mo = digits(t, 5, 2), d = digits(t, 8, 2);
  if (y < 1970 || t.size() < 10 || t[4] != '-' || t[7] != '-' || mo < 1 || mo > 12 || d < 1) return std::nullopt;
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (d > kDays[mo - 1] + (mo == 2 && leap ? 1 : 0)) return std::nullopt;
  int64_t ms = days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) * 86'400'000;
  if (t.size() == 10) return end_of_day ? ms + 86'400'000 : ms;
  std::string_view rest = t.substr(10);
  if (rest.back() == 'Z') rest.remove_suffix(1);
  const int h = digits(rest, 1, 2), mi = digits(rest, 4, 2);
  if ((rest[0] != 'T' && rest[0] != ' ') || rest.size() < 6 || rest[3] != ':' || h < 0 || h > 23 || mi < 0 || mi > 59)
    return std::nullopt;
  ms += (h * 60LL + mi) * 60'000;
  rest = rest.substr(6);
  if (rest.empty()) return ms;
  const int s = digits(rest, 1, 2);
  if (rest[0] != ':' || s < 0 || s > 59) return std::nullopt;
  ms += s * 1000LL;
  rest = rest.substr(3);
  if (rest.empty()) return ms;
  const int frac = digits(rest, 1, 3);
  if (rest.size() != 4 || rest[0] != '.' || frac < 0) return std::nullopt;
  return ms + frac;
}

std::variant<RunsListQuery, Error> parse_runs_list(std::string_view raw) {
  auto parsed = parse(raw);
  if (auto* e = std::get_if<Error>(&parsed)) return *e;
  std::vector<Param> params = std::move(std::get<std::vector<Param>>(parsed));
  RunsListQuery out;
  // limit and offset keep their rules and messages: they go to parse_runs_page as a query of their own.
  std::string page_query;
  std::vector<std::string> seen;
  for (const Param& p : params) {
    if (p.name == "limit" || p.name == "offset") {
      if (p.value.find_first_not_of("0123456789") != std::string::npos) // '&' or '=' must not reach the re-parse
        return Error{
            p.name == "limit"
                ? fmt::format("query parameter 'limit': '{}' is not a number of runs from 1 to {}", printable(p.value),
                              kMaxRunsLimit)
                : fmt::format("query parameter 'offset': '{}' is not a count of runs (0 or more)", printable(p.value))};
      page_query += fmt::format("{}{}={}", page_query.empty() ? "" : "&", p.name, p.value);
      continue;
    }
    if (p.value.size() > kMaxRunsValue)
      return Error{
          fmt::format("query parameter '{}': the value is longer than {} bytes", printable(p.name), kMaxRunsValue)};
    if (p.name != "tag") {
      if (std::find(seen.begin(), seen.end(), p.name) != seen.end())
        return Error{fmt::format("query parameter '{}' is given twice", printable(p.name))};
      seen.push_back(p.name);
    }
    RunsFilter& f = out.filter;
    if (p.name == "task") {
      f.task = p.value;
    } else if (p.name == "host") {
      f.host = p.value;
    } else if (p.name == "user") {
      f.user = p.value;
    } else if (p.name == "q") {
      f.q = p.value;
    } else if (p.name == "tag") {
      if (f.tags.size() == kMaxRunTags)
        return Error{fmt::format("query parameter 'tag': at most {} tags are accepted", kMaxRunTags)};
      const size_t eq = p.value.find('=');
      const std::string key = p.value.substr(0, eq);
      if (eq == std::string::npos || !valid_tag_key(key))
        return Error{fmt::format("query parameter 'tag': '{}' is not KEY=VALUE with a key of letters, digits, '_', "
                                 "'-', '.' or ':' (e.g. tag=slurm_job_id=123)",
                                 printable(p.value))};
      f.tags.emplace_back(key, p.value.substr(eq + 1));
    } else if (p.name == "from" || p.name == "to") {
      const auto ms = parse_time_ms(p.value, p.name == "to");
      if (!ms)
        return Error{fmt::format("query parameter '{}': '{}' is not a date (2026-11-20), a UTC time "
                                 "(2026-11-20T08:00:00Z) or epoch milliseconds",
                                 p.name, printable(p.value))};
      (p.name == "from" ? f.from_ms : f.to_ms) = *ms;
    } else if (p.name == "method") {
      if (std::find(std::begin(kRunMethods), std::end(kRunMethods), p.value) == std::end(kRunMethods))
        return Error{fmt::format("query parameter 'method': '{}' is not one of counter, integrated, estimated, "
                                 "simulated, mixed, unknown, none",
                                 printable(p.value))};
      f.method = p.value;
    } else if (p.name == "format") {
      if (p.value != "json" && p.value != "csv")
        return Error{fmt::format("query parameter 'format': '{}' is not json or csv", printable(p.value))};
      out.csv = p.value == "csv";
    } else if (p.name == "exit") {
      if (std::find(std::begin(kRunExits), std::end(kRunExits), p.value) == std::end(kRunExits))
        return Error{
            fmt::format("query parameter 'exit': '{}' is not one of ok, failed, unfinished", printable(p.value))};
      f.exit = p.value;
    } else if (p.name == "min_energy_j" || p.name == "max_energy_j" || p.name == "min_duration_s" ||
               p.name == "max_duration_s") {
      // In thousandths: the stores compare millijoules and milliseconds.
      const auto milli = parse_bound(p.value);
      if (!milli)
        return Error{fmt::format("query parameter '{}': '{}' is not a number from 0 to 1e12 ({})", p.name,
                                 printable(p.value), p.name.ends_with("_j") ? "joules" : "seconds")};
      (p.name == "min_energy_j"     ? f.min_energy_mj
       : p.name == "max_energy_j"   ? f.max_energy_mj
       : p.name == "min_duration_s" ? f.min_duration_ms
                                    : f.max_duration_ms) = *milli;
    } else if (p.name == "sort") {
      std::string_view key = p.value;
      f.descending = key.starts_with('-');
      if (f.descending) key.remove_prefix(1);
      if (key == "start")
        f.sort = RunsSortKey::Start;
      else if (key == "duration")
        f.sort = RunsSortKey::Duration;
      else if (key == "energy")
        f.sort = RunsSortKey::Energy;
      else if (key == "j_per_unit")
        f.sort = RunsSortKey::JPerUnit;
      else if (key == "exit_status")
        f.sort = RunsSortKey::ExitStatus;
      else
        return Error{fmt::format("query parameter 'sort': '{}' is not one of start, duration, energy, j_per_unit, "
                                 "exit_status (a '-' before it sorts descending)",
                                 printable(p.value))};
    } else {
      return Error{fmt::format("unknown query parameter '{}' (runs takes limit, offset, task, host, user, tag, from, "
                               "to, method, exit, min_energy_j, max_energy_j, min_duration_s, max_duration_s, q, "
                               "sort and format)",
                               printable(p.name))};
    }
  }
  auto page = parse_runs_page(page_query);
  if (auto* e = std::get_if<Error>(&page)) return *e;
  out.limit = std::get<RunsPageQuery>(page).limit;
  out.offset = std::get<RunsPageQuery>(page).offset;
  out.limit_given = page_query.find("limit=") != std::string::npos;
  if (out.filter.from_ms && out.filter.to_ms && *out.filter.from_ms >= *out.filter.to_ms)
    return Error{"query parameters 'from' and 'to': from must be before to"};
  const RunsFilter& f = out.filter;
  if (f.min_energy_mj && f.max_energy_mj && *f.min_energy_mj > *f.max_energy_mj)
    return Error{"query parameters 'min_energy_j' and 'max_energy_j': the minimum is above the maximum"};
  if (f.min_duration_ms && f.max_duration_ms && *f.min_duration_ms > *f.max_duration_ms)
    return Error{"query parameters 'min_duration_s' and 'max_duration_s': the minimum is above the maximum"};
  return out;
}

} // namespace wattscope::query
