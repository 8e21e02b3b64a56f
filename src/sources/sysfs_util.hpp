// Small readers for sysfs attribute files (one value per file, a trailing newline), shared by the sysfs sources.
#pragma once

#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "core/fd.hpp"

namespace wattscope::sysfs {

// The file's first line without trailing blanks; "" when it cannot be read.
inline std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r' || s.back() == '\n'))
    s.pop_back();
  return s;
}

inline std::optional<int64_t> parse_i64(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.remove_suffix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// An integer attribute read with pread from an fd kept open across ticks (sysfs regenerates it from offset 0).
inline std::optional<int64_t> pread_i64(int fd);
inline std::optional<int64_t> pread_i64(const UniqueFd& fd) {
  return pread_i64(fd.get());
}
inline std::optional<int64_t> pread_i64(int fd) {
  if (fd < 0) return std::nullopt;
  char buf[32];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return std::nullopt;
  return parse_i64(std::string_view(buf, static_cast<size_t>(n)));
}

} // namespace wattscope::sysfs
