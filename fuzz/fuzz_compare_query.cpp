// serve's compare view query (issue 35): anything a client sends after /runs/compare? or /api/v1/compare?.
#include <variant>

#include "check.hpp"
#include "server/compare_query.hpp"

using namespace wattscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view raw = fuzz_text(data, size);
  const auto parsed = query::parse_compare(raw);
  if (const auto* q = std::get_if<query::CompareQuery>(&parsed)) {
    FUZZ_CHECK(q->runs.empty() != q->tasks.empty());
    FUZZ_CHECK(q->runs.size() <= query::kMaxCompareRuns && q->tasks.size() <= query::kMaxCompareTasks);
    for (const auto& t : q->tasks)
      FUZZ_CHECK(!t.empty() && t.size() <= 200);
    // The canonical form (the cache key and the page's link) parses back to itself.
    const std::string key = q->canonical();
    const auto again = query::parse_compare(key);
    FUZZ_CHECK(std::holds_alternative<query::CompareQuery>(again));
    FUZZ_CHECK(std::get<query::CompareQuery>(again).canonical() == key);
  } else {
    // Sent back to the client: short, and no control byte in it.
    const auto& m = std::get<query::Error>(parsed).message;
    FUZZ_CHECK(m.size() <= 512);
    for (char c : m)
      FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
  }
  return 0;
}
