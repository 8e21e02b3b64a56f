#include "server/query.hpp"

#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/duration.hpp"

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
    params.push_back(std::move(p));
    if (amp == raw.size()) break;
  }
  return params;
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
