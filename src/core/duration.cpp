#include "core/duration.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "core/text.hpp"

namespace wattscope {

namespace {
std::invalid_argument bad(std::string_view text, std::string_view why) {
  return std::invalid_argument(
      fmt::format("'{}' is not a valid duration ({}); use a number and a unit, e.g. 1s, 250ms, 10ms, 500us, 2m",
                  excerpt(text), excerpt(why)));
}
} // namespace

std::chrono::nanoseconds parse_duration(std::string_view text) {
  if (text.empty()) throw bad(text, "empty");
  size_t unit_pos = 0;
  while (unit_pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[unit_pos])) || text[unit_pos] == '.' ||
                                    text[unit_pos] == '-' || text[unit_pos] == '+'))
    ++unit_pos;
  std::string_view number = text.substr(0, unit_pos);
  std::string_view unit = text.substr(unit_pos);
  if (number.empty()) throw bad(text, "no number");
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || end != number.data() + number.size() || !std::isfinite(value)) throw bad(text, "bad number");
  double scale = 0;
  if (unit == "ns")
    scale = 1;
  else if (unit == "us")
    scale = 1e3;
  else if (unit == "ms")
    scale = 1e6;
  else if (unit == "s" || unit.empty())
    scale = 1e9;
  else if (unit == "m" || unit == "min")
    scale = 60e9;
  else if (unit == "h")
    scale = 3600e9;
  else
    throw bad(text, fmt::format("unknown unit '{}'", unit));
  if (unit.empty() && value != 0) throw bad(text, "missing unit");
  double ns = value * scale;
  if (ns <= 0) throw bad(text, "must be greater than zero");
  if (ns > 1e18) throw bad(text, "too large");
  // "0.4ns" is greater than zero but rounds to nothing.
  const int64_t rounded = std::llround(ns);
  if (rounded < 1) throw bad(text, "shorter than the 1ns resolution");
  return std::chrono::nanoseconds(rounded);
}

std::string format_duration(std::chrono::nanoseconds d) {
  const auto ns = d.count();
  if (ns % 3'600'000'000'000 == 0) return fmt::format("{}h", ns / 3'600'000'000'000);
  if (ns % 60'000'000'000 == 0) return fmt::format("{}m", ns / 60'000'000'000);
  if (ns % 1'000'000'000 == 0) return fmt::format("{}s", ns / 1'000'000'000);
  if (ns % 1'000'000 == 0) return fmt::format("{}ms", ns / 1'000'000);
  if (ns % 1'000 == 0) return fmt::format("{}us", ns / 1'000);
  return fmt::format("{}ns", ns);
}

CommitPolicy parse_commit_every(std::string_view text) {
  CommitPolicy p;
  bool all_digits = !text.empty();
  for (char c : text)
    all_digits = all_digits && std::isdigit(static_cast<unsigned char>(c));
  if (all_digits) {
    int64_t rows = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rows);
    if (ec != std::errc() || rows <= 0)
      throw std::invalid_argument(
          fmt::format("--commit-every '{}': a row count must be a positive integer", excerpt(text)));
    p.rows = rows;
    return p;
  }
  try {
    p.interval = parse_duration(text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(
        fmt::format("--commit-every '{}': expected a row count (e.g. 1000) or a duration (e.g. 5s)", excerpt(text)));
  }
  return p;
}

} // namespace wattscope
