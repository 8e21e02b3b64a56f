#include "core/text.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace wattscope {

namespace {
// Well-formed UTF-8 as Unicode defines it (Table 3-7): no overlong forms, no surrogates, nothing above U+10FFFF.
// Anything looser lets two byte strings show as one name, or fails later in a JSON encoder.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf; // the range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0; // overlong below U+0800
      if (c == 0xed) hi = 0x9f; // surrogates U+D800-U+DFFF
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90; // overlong below U+10000
      if (c == 0xf4) hi = 0x8f; // above U+10FFFF
    } else {
      return false; // a continuation byte, an overlong lead (c0, c1) or f5-ff
    }
    if (i + len > s.size()) return false;
    const auto second = static_cast<unsigned char>(s[i + 1]);
    if (second < lo || second > hi) return false;
    for (size_t k = 2; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    i += len;
  }
  return true;
}

// Printable UTF-8 of at most max_bytes; `what` names the text in messages.
void validate_text(std::string_view what, std::string_view text, size_t max_bytes) {
  if (text.size() > max_bytes)
    throw std::invalid_argument(
        fmt::format("{} is {} bytes long; the limit is {} bytes", what, text.size(), max_bytes));
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f)
      throw std::invalid_argument(
          fmt::format("{} has a control character (byte 0x{:02x} at position {}); use printable text", what, c, i));
  }
  if (!valid_utf8(text)) throw std::invalid_argument(fmt::format("{} is not valid UTF-8", what));
}
} // namespace

void validate_printable_text(std::string_view what, std::string_view text, size_t max_bytes) {
  validate_text(what, text, max_bytes);
}

void validate_task_name(std::string_view task) {
  if (task.empty()) throw std::invalid_argument("task name is empty; pass --task NAME");
  validate_text("task name", task, kMaxTaskNameBytes);
}

std::pair<std::string, std::string> parse_tag(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) throw std::invalid_argument("expected KEY=VALUE");
  const std::string_view key = text.substr(0, eq), value = text.substr(eq + 1);
  if (key.size() > kMaxTagKeyBytes)
    throw std::invalid_argument(fmt::format("the key is {} bytes long; the limit is {}", key.size(), kMaxTagKeyBytes));
  for (char c : key)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      throw std::invalid_argument("a key is letters, digits, '_', '-' and '.'");
  validate_text("the value", value, kMaxTagValueBytes);
  return {std::string(key), std::string(value)};
}

std::string excerpt(std::string_view text, size_t max_bytes) {
  bool cut = false;
  if (text.size() > max_bytes) {
    size_t n = max_bytes;
    while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xc0) == 0x80) // not inside a UTF-8 sequence
      --n;
    text = text.substr(0, n);
    cut = true;
  }
  std::string out;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out.push_back(ch);
  }
  if (cut) out += "...";
  return out;
}

std::string terminal_safe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      out += '?';
    } else if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      out += '?'; // U+0080..U+009F, the C1 controls (CSI is U+009B)
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
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

std::string format_si(double value, std::string_view unit, int digits) {
  if (std::isnan(value)) return "-";
  const std::string_view sep = unit.empty() ? "" : " ";
  if (std::isinf(value)) return fmt::format("{}inf{}{}", value < 0 ? "-" : "", sep, unit);
  if (value == 0) return fmt::format("0{}{}", sep, unit);
  digits = std::clamp(digits, 1, 17);
  // Prefixes from nano to peta; outside them the mantissa grows or shrinks rather than switching to exponents, so
  // the unit stays readable ("0.0001 nJ" never happens for figures this tool makes; 3,000 PJ would read "3000 PJ").
  static constexpr std::array<std::string_view, 9> kPrefix = {"n", "µ", "m", "", "k", "M", "G", "T", "P"};
  const double mag = std::fabs(value);
  int step = static_cast<int>(std::floor(std::log10(mag) / 3));
  step = std::clamp(step, -3, 5);
  double scaled = value / std::pow(1000.0, step);
  // The digits after the point that keep `digits` significant ones; rounding can carry into the next prefix
  // (999.96 -> "1000"), which then reads as 1.00 of that prefix.
  auto decimals = [&](double v) {
    return std::max(0, digits - 1 - static_cast<int>(std::floor(std::log10(std::fabs(v)))));
  };
  int d = decimals(scaled);
  if (std::fabs(std::stod(fmt::format("{:.{}f}", scaled, d))) >= 1000 && step < 5) {
    ++step;
    scaled = value / std::pow(1000.0, step);
    d = std::max(0, digits - 1); // it rounds to 1.00 of the new prefix
  }
  const std::string_view prefix = kPrefix[static_cast<size_t>(step + 3)];
  return fmt::format("{:.{}f}{}{}{}", scaled, d, prefix.empty() ? sep : " ", prefix, unit);
}

std::string format_count(double value, std::string_view noun) {
  const std::string n =
      std::fabs(value) < 1000 && value == std::floor(value) ? fmt::format("{:.0f}", value) : format_si(value, "");
  return noun.empty() ? n : n + " " + std::string(noun);
}

std::string format_energy(double joules) {
  const double wh = joules / 3600.0;
  return fmt::format("{} ({})", format_si(joules, "J"),
                     std::fabs(wh) >= 1000 ? format_si(wh / 1000, "kWh") : format_si(wh, "Wh"));
}

namespace {
bool prom_name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}
} // namespace

bool parse_label_set(std::string_view& rest, std::vector<std::pair<std::string, std::string>>& out, size_t max_labels,
                     std::string& why) {
  rest.remove_prefix(1); // '{'
  for (;;) {
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == ','))
      rest.remove_prefix(1);
    if (rest.empty()) return why = "an unclosed label set", false;
    if (rest.front() == '}') {
      rest.remove_prefix(1);
      return true;
    }
    size_t n = 0;
    while (n < rest.size() && prom_name_char(rest[n], n == 0))
      ++n;
    if (n == 0 || n >= rest.size() || rest[n] != '=' || n + 1 >= rest.size() || rest[n + 1] != '"')
      return why = "a label that is not name=\"value\"", false;
    std::string name(rest.substr(0, n));
    rest.remove_prefix(n + 2);
    std::string value;
    bool closed = false;
    while (!rest.empty()) {
      const char c = rest.front();
      rest.remove_prefix(1);
      if (c == '"') {
        closed = true;
        break;
      }
      if (c == '\\' && !rest.empty()) {
        const char e = rest.front();
        rest.remove_prefix(1);
        value.push_back(e == 'n' ? '\n' : e);
        continue;
      }
      value.push_back(c);
    }
    if (!closed) return why = "an unterminated label value", false;
    if (out.size() >= max_labels) return why = "too many labels", false;
    out.emplace_back(std::move(name), std::move(value));
  }
}

} // namespace wattscope
