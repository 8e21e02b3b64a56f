#include "server/token.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "core/protected_file.hpp"

namespace wattscope {

std::string parse_token(std::string_view s) {
  if (s.ends_with("\r\n"))
    s.remove_suffix(2);
  else if (s.ends_with('\n'))
    s.remove_suffix(1);
  if (s.empty())
    throw std::invalid_argument("it is empty; put one line of at least 16 visible characters in it, e.g. with "
                                "`openssl rand -hex 32 > FILE`");
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') throw std::invalid_argument("it holds more than one line; a token file holds the token alone");
    if (c < 0x21 || c > 0x7e)
      throw std::invalid_argument(fmt::format("byte 0x{:02x} at position {} is not a visible ASCII character; a token "
                                              "is letters, digits and punctuation, without spaces",
                                              c, i));
  }
  if (s.size() < kMinTokenChars)
    throw std::invalid_argument(
        fmt::format("the token is {} characters long; use at least {}", s.size(), kMinTokenChars));
  return std::string(s);
}

std::string read_token_file(const std::string& path) {
  const std::string contents = read_protected_file(path, "token file", kMaxTokenFileBytes);
  try {
    return parse_token(contents);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("token file '{}': {}", path, e.what()));
  }
}

} // namespace wattscope
