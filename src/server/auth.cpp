#include "server/auth.hpp"

#include <cstddef>

namespace wattscope {

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of the longer string is visited and folded into `diff` without an early exit; the branches depend
  // only on the lengths. volatile keeps the compiler from turning the loop back into a memcmp.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) {
    const auto x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const auto y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

bool bearer_matches(std::string_view authorization, std::string_view token) {
  constexpr std::string_view scheme = "bearer ";
  if (token.empty() || authorization.size() < scheme.size()) return false;
  for (size_t i = 0; i < scheme.size(); ++i) {
    char c = authorization[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != scheme[i]) return false;
  }
  std::string_view given = authorization.substr(scheme.size());
  while (!given.empty() && (given.back() == ' ' || given.back() == '\t'))
    given.remove_suffix(1);
  return constant_time_equal(given, token);
}

} // namespace wattscope
