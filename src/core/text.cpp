#include "core/text.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace wattscope {

namespace {
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    i += len;
  }
  return true;
}
} // namespace

void validate_task_name(std::string_view task) {
  if (task.empty()) throw std::invalid_argument("task name is empty; pass --task NAME");
  if (task.size() > kMaxTaskNameBytes)
    throw std::invalid_argument(
        fmt::format("task name is {} bytes long; the limit is {} bytes", task.size(), kMaxTaskNameBytes));
  for (size_t i = 0; i < task.size(); ++i) {
    auto c = static_cast<unsigned char>(task[i]);
    if (c < 0x20 || c == 0x7f)
      throw std::invalid_argument(
          fmt::format("task name has a control character (byte 0x{:02x} at position {}); use printable text", c, i));
  }
  if (!valid_utf8(task)) throw std::invalid_argument("task name is not valid UTF-8");
}

std::string file_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    if (!out.empty()) out.push_back(' ');
    bool plain = !arg.empty();
    for (char c : arg)
      plain = plain && (std::isalnum(static_cast<unsigned char>(c)) ||
                        std::string_view("-_./=:,+@%").find(c) != std::string_view::npos);
    if (plain) {
      out += arg;
    } else {
      out.push_back('\'');
      for (char c : arg) {
        if (c == '\'')
          out += "'\\''";
        else
          out.push_back(c);
      }
      out.push_back('\'');
    }
  }
  return out;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", bytes, units[u]) : fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string format_energy(double joules) {
  return fmt::format("{:.1f} J ({:.4g} Wh)", joules, joules / 3600.0);
}

} // namespace wattscope
