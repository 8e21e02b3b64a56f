#include "sources/source.hpp"

namespace wattscope {

std::string normalize_pci_bus_id(std::string_view id) {
  std::string out;
  for (char c : id)
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
  // A domain wider than four digits (NVML pads it to eight) keeps its last four.
  const auto colon = out.find(':');
  if (colon != std::string::npos && colon > 4 && out.find(':', colon + 1) != std::string::npos) out.erase(0, colon - 4);
  return out;
}

std::string_view SourceStatus::state_name() const {
  switch (state) {
  case State::Ok:
    return "ok";
  case State::Missing:
    return "missing";
  case State::NoPermission:
    return "no permission";
  case State::Error:
    return "error";
  }
  return "error";
}

std::string SourceStatus::line() const {
  std::string out = detail;
  if (!fix.empty()) {
    if (!out.empty() && out.back() != '.') out += '.';
    out += (out.empty() ? "" : " ") + fix;
  }
  return out;
}

} // namespace wattscope
