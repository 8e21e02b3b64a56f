// Runs matched by their tags (KEY=VALUE): the one definition of "a run carries this tag", shared by the commands
// that select runs (runs/run_tags) and the stores' runs query (sinks/runs_query, issue 35), which sits below the
// pipeline. The match is made on the run's tags in C++, so it is the same in every store and no user string becomes
// SQL.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schema.hpp"

namespace wattscope {

struct TagFilter {
  std::string key;
  std::string value;
};

// "KEY=VALUE" each, as --tag takes them when recording. Throws std::invalid_argument naming the bad one.
std::vector<TagFilter> parse_tag_filters(const std::vector<std::string>& texts);
// Whether the run carries every one of the tags with exactly that value (a tag recorded as a number or a boolean
// matches its JSON spelling: 42, true).
bool run_matches(const RunInfo& run, const std::vector<TagFilter>& filters);
std::vector<RunInfo> filter_runs(std::vector<RunInfo> runs, const std::vector<TagFilter>& filters);

// The run's tags as a JSON object ({} when they are not one, or refused: core/stored_json.hpp).
nlohmann::json run_tags_json(const RunInfo& run);

} // namespace wattscope
