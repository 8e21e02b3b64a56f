// --interval, --retain, --commit-every: durations and row counts typed by users or written in unit files.
#include <stdexcept>

#include "check.hpp"
#include "core/duration.hpp"

using namespace wattscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz_text(data, size);
  try {
    const auto d = parse_duration(text);
    FUZZ_CHECK(d.count() > 0); // zero and negative durations are refused, however they are spelled
    FUZZ_CHECK(d.count() <= 1'000'000'000'000'000'000);
    // What we print, we read back as the same duration.
    const std::string shown = format_duration(d);
    FUZZ_CHECK(parse_duration(shown) == d);
  } catch (const std::invalid_argument&) {
  }
  try {
    const CommitPolicy p = parse_commit_every(text);
    FUZZ_CHECK((p.rows > 0) != (p.interval.count() > 0)); // exactly one of the two
    FUZZ_CHECK(p.rows >= 0 && p.interval.count() >= 0);
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
