#include "phases/marker.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/text.hpp"

namespace wattscope {

namespace {
using json = nlohmann::json;

// JSON numbers that are integers, in int64 range (1e300 is a number, not an epoch index).
std::optional<int64_t> integer(const json& j, std::string_view field) {
  // Unsigned first: nlohmann counts an unsigned as an integer too, and get<int64_t> would wrap 2^64-1 to -1.
  if (j.is_number_unsigned()) {
    const auto u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw std::invalid_argument(fmt::format("'{}' is too large", field));
    return static_cast<int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) {
    const double d = j.get<double>();
    // 2^53: past it a double no longer holds every integer, and an index or count that large is a mistake anyway.
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= 9007199254740992.0) return static_cast<int64_t>(d);
  }
  throw std::invalid_argument(fmt::format("'{}' must be a whole number", field));
}

double nonnegative(const json& j, std::string_view field) {
  if (!j.is_number()) throw std::invalid_argument(fmt::format("'{}' must be a number", field));
  const double d = j.get<double>();
  if (!std::isfinite(d) || d < 0 || d > kMaxMarkerAmount)
    throw std::invalid_argument(fmt::format("'{}' must be a number from 0 to {:g}", field, kMaxMarkerAmount));
  return d;
}

std::string text_field(const json& obj, const char* field, size_t max_bytes, bool required) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) {
    if (required) throw std::invalid_argument(fmt::format("'{}' is missing", field));
    return {};
  }
  if (!it->is_string()) throw std::invalid_argument(fmt::format("'{}' must be a string", field));
  std::string s = it->get<std::string>();
  if (s.empty()) {
    if (required) throw std::invalid_argument(fmt::format("'{}' is empty", field));
    return s;
  }
  validate_printable_text(fmt::format("'{}'", field), s, max_bytes);
  return s;
}
} // namespace

std::string_view kind_name(Marker::Kind k) {
  switch (k) {
  case Marker::Kind::Begin:
    return "begin";
  case Marker::Kind::End:
    return "end";
  case Marker::Kind::Point:
    return "mark";
  case Marker::Kind::Work:
    return "work";
  case Marker::Kind::Model:
    return "model";
  }
  return "?";
}

Marker parse_marker(std::string_view line) {
  if (line.size() > kMaxMarkerLineBytes)
    throw std::invalid_argument(
        fmt::format("a marker line of {} bytes; the limit is {}", line.size(), kMaxMarkerLineBytes));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // Only an object is a marker: checking the first character keeps deeply nested arrays out of the parser.
  const size_t first = line.find_first_not_of(" \t");
  if (first == std::string_view::npos || line[first] != '{')
    throw std::invalid_argument("a marker is one JSON object per line");
  const json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw std::invalid_argument("not a JSON object");
  auto kind_it = j.find("kind");
  if (kind_it == j.end() || !kind_it->is_string()) throw std::invalid_argument("'kind' is missing");
  const std::string kind = kind_it->get<std::string>();
  Marker m;
  if (kind == "begin") {
    m.kind = Marker::Kind::Begin;
    m.name = text_field(j, "name", kMaxPhaseNameBytes, true);
    if (auto it = j.find("index"); it != j.end() && !it->is_null()) {
      m.index = integer(*it, "index");
      if (*m.index < 0) throw std::invalid_argument("'index' must not be negative");
    }
  } else if (kind == "end") {
    m.kind = Marker::Kind::End;
    m.name = text_field(j, "name", kMaxPhaseNameBytes, false);
  } else if (kind == "mark" || kind == "point") {
    m.kind = Marker::Kind::Point;
    m.name = text_field(j, "name", kMaxPhaseNameBytes, true);
  } else if (kind == "work") {
    m.kind = Marker::Kind::Work;
    auto it = j.find("amount");
    if (it == j.end()) throw std::invalid_argument("'amount' is missing");
    m.amount = nonnegative(*it, "amount");
    m.unit = text_field(j, "unit", kMaxWorkUnitBytes, true);
    // Optional: older senders leave it out, and older listeners ignore it as an unknown field.
    if (auto t = j.find("total"); t != j.end() && !t->is_null()) m.total = nonnegative(*t, "total");
  } else if (kind == "model") {
    m.kind = Marker::Kind::Model;
    m.name = text_field(j, "name", kMaxPhaseNameBytes, false);
    if (auto it = j.find("parameters"); it != j.end() && !it->is_null()) {
      m.parameters = integer(*it, "parameters");
      if (*m.parameters < 0) throw std::invalid_argument("'parameters' must not be negative");
    }
    if (auto it = j.find("flops"); it != j.end() && !it->is_null()) m.flops = nonnegative(*it, "flops");
    if (!m.parameters && !m.flops) throw std::invalid_argument("a model marker needs 'parameters' or 'flops'");
  } else {
    throw std::invalid_argument(fmt::format("unknown kind '{}' (begin, end, mark, work, model)", excerpt(kind)));
  }
  if (auto it = j.find("mono_ns"); it != j.end() && !it->is_null()) {
    m.mono_ns = integer(*it, "mono_ns");
    if (*m.mono_ns < 0) throw std::invalid_argument("'mono_ns' must not be negative");
  }
  if (m.kind == Marker::Kind::Begin || m.kind == Marker::Kind::End) {
    m.window = text_field(j, "window", kMaxWindowIdBytes, false);
    if (auto it = j.find("reply"); it != j.end() && !it->is_null()) {
      if (!it->is_boolean()) throw std::invalid_argument("'reply' must be true or false");
      m.reply = m.kind == Marker::Kind::End && it->get<bool>();
    }
  }
  return m;
}

std::string encode_marker(const Marker& m) {
  json j;
  j["kind"] = kind_name(m.kind);
  if (!m.name.empty()) j["name"] = m.name;
  if (m.index) j["index"] = *m.index;
  if (m.kind == Marker::Kind::Work) {
    j["amount"] = m.amount;
    j["unit"] = m.unit;
    if (m.total) j["total"] = *m.total;
  }
  if (m.parameters) j["parameters"] = *m.parameters;
  if (m.flops) j["flops"] = *m.flops;
  if (m.mono_ns) j["mono_ns"] = *m.mono_ns;
  if (!m.window.empty()) j["window"] = m.window;
  if (m.reply) j["reply"] = true;
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

} // namespace wattscope
