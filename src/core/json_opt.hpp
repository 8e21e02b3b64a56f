// An optional figure as JSON: its value, or null where it is missing (never 0; STYLE: missing is missing).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace wattscope {

template <class T> nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

// JSON as one line of text; invalid UTF-8 in strings is replaced, never an exception.
inline std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace wattscope
