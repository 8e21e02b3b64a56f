// What every fuzz target shares: the input as text, and FUZZ_CHECK for invariants. A failed check aborts, which
// libFuzzer reports as a crash and saves the input under the artifact prefix (scripts/fuzz.sh prints the command
// that replays it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#define FUZZ_CHECK(cond)                                                                                               \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);                                \
      std::abort();                                                                                                    \
    }                                                                                                                  \
  } while (0)

inline std::string_view fuzz_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}
