#include "server/compare_query.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/time_util.hpp"

namespace wattscope::query {

namespace {

// Percent-encodes what a list element or value needs to travel back in a URL.
std::string encode(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || (u >= '0' && u <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~')
      out.push_back(c);
    else
      out += fmt::format("%{:02X}", u);
  }
  return out;
}

// A date alone is its midnight UTC: from=2026-11-20&to=2026-11-27 is the week from the 20th to the 26th.
bool parse_when(const std::string& v, int64_t& ms) {
  if (v.size() == 10 && parse_iso_utc_ms(v + "T00:00:00Z", ms)) return true;
  return v.size() <= 40 && parse_iso_utc_ms(v, ms);
}

} // namespace

std::string CompareQuery::canonical() const {
  std::string out;
  auto add = [&](std::string_view name, const std::string& value) {
    out += (out.empty() ? "" : "&") + std::string(name) + "=" + value;
  };
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& e : v)
      s += (s.empty() ? "" : ",") + encode(e);
    return s;
  };
  if (!runs.empty()) add("runs", list(runs));
  if (!tasks.empty()) add("tasks", list(tasks));
  if (from_ms) add("from", encode(iso_utc_ms(*from_ms)));
  if (to_ms) add("to", encode(iso_utc_ms(*to_ms)));
  if (!host.empty()) add("host", encode(host));
  return out;
}

std::variant<CompareQuery, Error> parse_compare(std::string_view raw) {
  auto parsed = parse(raw);
  if (auto* e = std::get_if<Error>(&parsed)) return *e;
  CompareQuery q;
  bool seen_runs = false, seen_tasks = false, seen_from = false, seen_to = false, seen_host = false;
  for (const Param& p : std::get<std::vector<Param>>(parsed)) {
    bool* seen = p.name == "runs"    ? &seen_runs
                 : p.name == "tasks" ? &seen_tasks
                 : p.name == "from"  ? &seen_from
                 : p.name == "to"    ? &seen_to
                 : p.name == "host"  ? &seen_host
                                     : nullptr;
    if (!seen)
      return Error{fmt::format("unknown query parameter '{}' (compare takes runs or tasks, and from, to, host)",
                               printable(p.name))};
    if (*seen) return Error{fmt::format("query parameter '{}' is given twice", p.name)};
    *seen = true;
    if (p.name == "runs" || p.name == "tasks") {
      const bool runs = p.name == "runs";
      const size_t cap = runs ? kMaxCompareRuns : kMaxCompareTasks;
      std::vector<std::string>& out = runs ? q.runs : q.tasks;
      size_t start = 0;
      while (true) {
        const size_t comma = p.value.find(',', start);
        const std::string item = p.value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (item.empty())
          return Error{fmt::format("query parameter '{}': an empty name in '{}' (names are separated by single commas)",
                                   p.name, printable(p.value))};
        if (runs) {
          if (item.size() > 64 || item.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                         "0123456789-_.") != std::string::npos)
            return Error{fmt::format("query parameter 'runs': '{}' is not a run id (letters, digits, '-', '_' and "
                                     "'.', at most 64 characters)",
                                     printable(item))};
        } else if (item.size() > 200) {
          return Error{fmt::format("query parameter 'tasks': '{}' is longer than 200 bytes", printable(item))};
        }
        if (out.size() == cap)
          return Error{fmt::format("query parameter '{}': more than {} {}; compare at most {} at once", p.name, cap,
                                   p.name, cap)};
        if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (p.name == "host") {
      if (p.value.empty() || p.value.size() > 255)
        return Error{
            fmt::format("query parameter 'host': '{}' is not a host name (1 to 255 bytes)", printable(p.value))};
      q.host = p.value;
    } else {
      int64_t ms = 0;
      if (!parse_when(p.value, ms))
        return Error{fmt::format("query parameter '{}': '{}' is not a UTC date or time; use e.g. 2026-11-26 or "
                                 "2026-11-26T14:05:00Z",
                                 p.name, printable(p.value))};
      (p.name == "from" ? q.from_ms : q.to_ms) = ms;
    }
  }
  if (q.runs.empty() == q.tasks.empty())
    return Error{q.runs.empty() ? "compare needs runs=ID,ID,... or tasks=NAME,NAME,..."
                                : "give runs or tasks, not both"};
  if (q.from_ms && q.to_ms && *q.to_ms <= *q.from_ms) return Error{"query parameter 'to' is not after 'from'"};
  return q;
}

} // namespace wattscope::query
