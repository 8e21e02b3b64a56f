// Runs chosen by their tags (`list --tag KEY=VALUE`, `show --tag KEY=VALUE`), and the view of several runs that share
// one, such as a Slurm job's runs on its nodes (issue 18). The match is made on the runs read back, in C++, so it is
// the same in every store (SQLite, CSV, MySQL) and no user string ever becomes SQL.
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

// Runs chosen by --task NAME and --tag KEY=VALUE (issue 29: report, show, list, stats and compare take both where
// they take run ids). An empty task matches every task.
struct RunSelection {
  std::string task;
  std::vector<TagFilter> tags;
  bool empty() const { return task.empty() && tags.empty(); }
  // "of task bert tagged lr=3e-4 seed=1", "tagged slurm_job_id=42", "" when empty.
  std::string text() const;
};
bool run_selected(const RunInfo& run, const RunSelection& selection);
std::vector<RunInfo> select_runs(std::vector<RunInfo> runs, const RunSelection& selection);

// Several runs as one: per run its node (the tag slurm_node, else the host), duration, exit and energy, and the total
// energy of those that measured it. A run without energy is listed and counted apart, never as 0.
// Each run's energy carries its method (energy_method), and so does the total (all runs' methods combined).
nlohmann::json runs_total_json(const std::vector<RunInfo>& runs, const std::vector<TagFilter>& filters,
                               const std::string& task = "");
std::string runs_total_text(const std::vector<RunInfo>& runs, const std::vector<TagFilter>& filters,
                            const std::string& task = "");

} // namespace wattscope
