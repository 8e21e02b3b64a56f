// JSON cells read back from a store (core/stored_json): any text a node of a shared store could write. The caps are
// checked before nlohmann parses, so nothing recursive ever sees text past them.
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "check.hpp"
#include "core/stored_json.hpp"

using namespace wattscope;
using json = nlohmann::json;

namespace {
// The value's nesting, walked with a stack of our own (a recursive walk is what the caps exist to bound).
size_t depth_of(const json& root) {
  size_t deepest = 0;
  std::vector<std::pair<const json*, size_t>> todo{{&root, 0}};
  while (!todo.empty()) {
    const auto [j, d] = todo.back();
    todo.pop_back();
    if (!j->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    for (const auto& child : *j)
      todo.emplace_back(&child, d + 1);
  }
  return deepest;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off); // the warnings are the reader's to write, not the fuzzer's to print
    return true;
  }();
  (void)quiet;
  const std::string_view text = fuzz_text(data, size);
  // Small caps too, so that the fuzzer meets both sides of each within its input sizes.
  for (const size_t max_depth : {kStoredJsonMaxDepth, size_t{3}}) {
    const size_t scanned = json_nesting_depth(text, max_depth);
    FUZZ_CHECK(scanned <= max_depth + 1);
    const BoundedJson b = parse_bounded_json(text, kStoredJsonMaxBytes, max_depth);
    if (b.ok()) {
      FUZZ_CHECK(!b.value.is_discarded() && b.why.empty());
      // What the scan counted is the value's true nesting, never less.
      FUZZ_CHECK(depth_of(b.value) <= scanned && scanned <= max_depth);
      // A value within the caps survives what the views do with it: a copy, a dump and its parse back.
      const json copy = b.value;
      const std::string dumped = copy.dump(-1, ' ', false, json::error_handler_t::replace);
      FUZZ_CHECK(json::parse(dumped, nullptr, false) == b.value);
    } else {
      FUZZ_CHECK(b.value.is_discarded() && !b.why.empty());
      if (b.refusal == JsonRefusal::TooDeep) FUZZ_CHECK(scanned > max_depth);
      // What nlohmann itself accepts and is too deep is refused here before it is parsed.
      if (b.refusal == JsonRefusal::NotJson) FUZZ_CHECK(scanned <= max_depth);
    }
  }
  const json o = read_stored_object(text, "fuzz", "runs.tags");
  FUZZ_CHECK(o.is_object());
  // The typed reads hold on any member.
  for (const auto& [k, v] : o.items()) {
    (void)json_number(o, k);
    (void)json_int(o, k, 0);
    (void)json_string(o, k);
    (void)json_bool(o, k, false);
    (void)json_member(v, "index");
  }
  return 0;
}
