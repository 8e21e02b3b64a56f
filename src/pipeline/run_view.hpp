// How a run is shown: the printed summary and the JSON of `show --json` / `list --json`.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schema.hpp"

namespace wattscope {

nlohmann::json run_json(const RunInfo& run);
std::string run_text(const RunInfo& run, const std::vector<std::string>& stores = {});
std::string runs_table(const std::vector<RunInfo>& runs);
// A run recorded with --simulate (its tag simulated=true).
bool simulated_run(const RunInfo& run);

} // namespace wattscope
