#include "core/stored_json.hpp"

#include <cmath>
#include <cstdint>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/schema.hpp"
#include "core/text.hpp"

namespace wattscope {

size_t json_nesting_depth(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
    case '"':
      in_string = true;
      break;
    case '[':
    case '{':
      if (++depth > deepest && (deepest = depth) > limit) return limit + 1;
      break;
    case ']':
    case '}':
      // A closing bracket with none open is not JSON: the parser refuses it, the count need not go below 0.
      if (depth > 0) --depth;
      break;
    default:
      break;
    }
  }
  return deepest;
}

BoundedJson parse_bounded_json(std::string_view text, size_t max_bytes, size_t max_depth) {
  BoundedJson out;
  if (text.size() > max_bytes) {
    out.refusal = JsonRefusal::TooLarge;
    out.why = fmt::format("{}, over the {} cap", format_bytes(static_cast<double>(text.size())),
                          format_bytes(static_cast<double>(max_bytes)));
    return out;
  }
  // The parser keeps its own stack, but what is built from it (copies, dump, our walkers) recurses once a level.
  if (json_nesting_depth(text, max_depth) > max_depth) {
    out.refusal = JsonRefusal::TooDeep;
    out.why = fmt::format("nested deeper than {} levels", max_depth);
    return out;
  }
  out.value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.value.is_discarded()) {
    out.refusal = JsonRefusal::NotJson;
    out.why = "not JSON";
  }
  return out;
}

std::vector<std::string> StoredJsonWarnings::note(const std::string& key, const std::string& message,
                                                  Clock::time_point now) {
  std::vector<std::string> lines;
  const auto window_s = std::chrono::duration_cast<std::chrono::seconds>(window_).count();
  if (!window_start_ || now - *window_start_ >= window_) {
    if (unnamed_ > 0)
      lines.push_back(
          fmt::format("{} more reads of refused stored JSON went unnamed in the {} s before", unnamed_, window_s));
    window_start_ = now;
    named_.clear();
    unnamed_ = 0;
  }
  if (named_.count(key)) return lines;
  if (named_.size() < per_window_) {
    named_.insert(key);
    lines.push_back(message);
  } else if (unnamed_++ == 0) {
    lines.push_back(fmt::format("more stored JSON refused: the next {} s name no more of it", window_s));
  }
  return lines;
}

namespace {

void report(std::string_view run_id, std::string_view column, const std::string& why) {
  static std::mutex mu;
  static StoredJsonWarnings warnings;
  // Ids come from the store too: quoted short, control bytes escaped.
  const std::string id = excerpt(run_id, 64);
  std::vector<std::string> lines;
  {
    std::lock_guard lock(mu);
    lines = warnings.note(id + '\0' + std::string(column),
                          fmt::format("run '{}': stored {} refused ({}); read as missing", id, column, why),
                          StoredJsonWarnings::Clock::now());
  }
  for (const auto& l : lines)
    spdlog::warn("{}", l);
}

} // namespace

std::optional<nlohmann::json> read_stored_json(std::string_view text, std::string_view run_id,
                                               std::string_view column) {
  if (text.empty()) return std::nullopt;
  BoundedJson j = parse_bounded_json(text);
  if (!j.ok()) {
    report(run_id, column, j.why);
    return std::nullopt;
  }
  return std::move(j.value);
}

nlohmann::json read_stored_object(std::string_view text, std::string_view run_id, std::string_view column) {
  auto j = read_stored_json(text, run_id, column);
  if (!j) return nlohmann::json::object();
  if (!j->is_object()) {
    report(run_id, column, fmt::format("a JSON {}, not an object", j->type_name()));
    return nlohmann::json::object();
  }
  return std::move(*j);
}

const nlohmann::json& json_member(const nlohmann::json& j, std::string_view key) {
  static const nlohmann::json null;
  if (!j.is_object()) return null;
  auto it = j.find(key);
  return it == j.end() ? null : *it;
}

bool json_has_number(const nlohmann::json& j, std::string_view key) {
  return json_member(j, key).is_number();
}

double json_number(const nlohmann::json& j, std::string_view key, double fallback) {
  const auto& v = json_member(j, key);
  return v.is_number() ? v.get<double>() : fallback;
}

std::optional<int64_t> json_int(const nlohmann::json& v) {
  if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}))
    return v.get<int64_t>();
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  // -2^63 is a double exactly, 2^63 too (one past the largest int64_t).
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || d != std::trunc(d)) return std::nullopt;
  return static_cast<int64_t>(d);
}

int64_t json_int(const nlohmann::json& j, std::string_view key, int64_t fallback) {
  return json_int(json_member(j, key)).value_or(fallback);
}

std::string json_string(const nlohmann::json& j, std::string_view key, std::string fallback) {
  const auto& v = json_member(j, key);
  return v.is_string() ? v.get<std::string>() : std::move(fallback);
}

bool json_bool(const nlohmann::json& j, std::string_view key, bool fallback) {
  const auto& v = json_member(j, key);
  return v.is_boolean() ? v.get<bool>() : fallback;
}

nlohmann::json run_summary_json(const RunInfo& run) {
  return read_stored_object(run.summary, run.run_id, "runs.summary");
}

} // namespace wattscope
