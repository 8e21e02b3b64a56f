// `wattscope doctor`: every source, whether it works here, and for each problem the fix.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace wattscope {

struct SessionOptions;

struct DoctorReport {
  // {"sources": [{"name", "status", "detail", "fix", "details"}], "power_measurable", "power_sources"}
  nlohmann::json json;
  std::string text; // the same for a person: each source renders its own section
  bool power_measurable() const { return json.value("power_measurable", false); }
};

// Opens every source, takes one sample (so per-metric support is probed), and describes what it found.
// "power_measurable" is true when at least one source measures power (an estimate does not count).
DoctorReport doctor_report(const SessionOptions& opts);

} // namespace wattscope
