// An optional figure as JSON: its value, or null where it is missing (never 0; STYLE: missing is missing).
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

namespace wattscope {

template <class T> nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

} // namespace wattscope
