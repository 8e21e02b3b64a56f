// serve's query strings: anything a client sends after '?', e.g. /api/v1/history?range=6h&step=1m.
#include <variant>

#include "check.hpp"
#include "server/query.hpp"

using namespace wattscope;

namespace {
bool no_controls(std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return false;
  }
  return true;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view raw = fuzz_text(data, size);
  const auto params = query::parse(raw);
  if (const auto* p = std::get_if<std::vector<query::Param>>(&params)) {
    FUZZ_CHECK(p->size() <= query::kMaxParams);
  } else {
    // An error message holds no control character and stays short, whatever the bytes (it goes back to the client).
    const auto& e = std::get<query::Error>(params);
    FUZZ_CHECK(e.message.size() <= 512);
    FUZZ_CHECK(no_controls(e.message));
  }
  const auto h = query::parse_history(raw);
  if (const auto* q = std::get_if<query::HistoryQuery>(&h)) {
    FUZZ_CHECK(q->range.count() > 0 && q->step.count() > 0);
    FUZZ_CHECK(q->step <= q->range);
    FUZZ_CHECK(q->range / q->step <= 10000);
  } else {
    FUZZ_CHECK(std::get<query::Error>(h).message.size() <= 512);
    FUZZ_CHECK(no_controls(std::get<query::Error>(h).message));
  }
  // issue 35: /api/v1/runs's filters. Whatever the bytes: bounded counts and sizes, keys that cannot leave a JSON
  // path, a range that is not empty.
  const auto runs = query::parse_runs_list(raw);
  if (const auto* q = std::get_if<query::RunsListQuery>(&runs)) {
    FUZZ_CHECK(q->limit >= 1 && q->limit <= query::kMaxRunsLimit);
    FUZZ_CHECK(q->filter.tags.size() <= query::kMaxRunTags);
    for (const auto& [k, v] : q->filter.tags) {
      FUZZ_CHECK(valid_tag_key(k));
      FUZZ_CHECK(v.size() <= query::kMaxRunsValue);
    }
    FUZZ_CHECK(q->filter.task.size() <= query::kMaxRunsValue && q->filter.q.size() <= query::kMaxRunsValue);
    if (q->filter.from_ms && q->filter.to_ms) FUZZ_CHECK(*q->filter.from_ms < *q->filter.to_ms);
  } else {
    FUZZ_CHECK(std::get<query::Error>(runs).message.size() <= 512);
    FUZZ_CHECK(no_controls(std::get<query::Error>(runs).message));
  }
  query::parse_time_ms(raw);
  const std::string shown = query::printable(raw);
  for (char c : shown)
    FUZZ_CHECK(c >= 0x20 && c < 0x7f);
  FUZZ_CHECK(shown.size() <= 64 * 4 + 3);
  return 0;
}
