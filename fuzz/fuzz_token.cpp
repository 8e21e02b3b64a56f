// The contents of a --token-file, and the comparison of a request's bearer token with it.
#include <stdexcept>
#include <string>

#include "check.hpp"
#include "server/token.hpp"

using namespace wattscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz_text(data, size);
  try {
    const std::string token = parse_token(text);
    FUZZ_CHECK(token.size() >= kMinTokenChars);
    for (char c : token)
      FUZZ_CHECK(c >= 0x21 && c <= 0x7e);
    // Only the line end is dropped.
    FUZZ_CHECK(text == token || text == token + "\n" || text == token + "\r\n");
  } catch (const std::invalid_argument&) {
  }
  // constant_time_equal agrees with ==, for any split of the input into two strings.
  if (size > 0) {
    const size_t cut = data[0] % size;
    const std::string_view a = text.substr(1, cut), b = text.substr(1 + cut);
    FUZZ_CHECK(constant_time_equal(a, b) == (a == b));
    FUZZ_CHECK(constant_time_equal(a, a));
  }
  return 0;
}
