// `wattscope doctor`: every source, whether it works here, and for each problem the fix.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace wattscope {

struct SessionOptions;

// Opens every source, takes one sample (so per-metric support is probed), and describes what it found.
// "power_measurable" is true when at least one source measures power (an estimate does not count).
nlohmann::json doctor_report(const SessionOptions& opts);
std::string doctor_text(const nlohmann::json& report);

} // namespace wattscope
