// Small readers for sysfs attribute files (one value per file, a trailing newline), shared by the sysfs sources.
#pragma once

#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

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

// A directory entry's number after a fixed prefix: "card3" with prefix "card" is 3. Digits only, at most nine (no
// overflow), nothing after them: "card0-DP-1" is not a card. Replaces std::regex, whose compilation alone cost a
// run ~3 ms of CPU at start-up (issue 12).
inline std::optional<int> numbered(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  name.remove_prefix(prefix.size());
  if (name.empty() || name.size() > 9) return std::nullopt;
  int v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// "intel-rapl:N" (a package zone) or "intel-rapl:N:M" (its sub-zone M): {N, M or -1}.
inline std::optional<std::pair<int, int>> rapl_zone_dir(std::string_view name) {
  constexpr std::string_view kPrefix = "intel-rapl:";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string_view rest = name.substr(kPrefix.size());
  const size_t colon = rest.find(':');
  const auto pkg = numbered(rest.substr(0, colon), "");
  if (!pkg) return std::nullopt;
  if (colon == std::string_view::npos) return std::pair{*pkg, -1};
  const auto sub = numbered(rest.substr(colon + 1), "");
  if (!sub) return std::nullopt;
  return std::pair{*pkg, *sub};
}

} // namespace wattscope::sysfs
