// Runs chosen by their tags (`list --tag KEY=VALUE`, `show --tag KEY=VALUE`), and the view of several runs that share
// one, such as a Slurm job's runs on its nodes (issue 18). The match is made on the runs read back, in C++, so it is
// the same in every store (SQLite, CSV, MySQL) and no user string ever becomes SQL.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schema.hpp"
#include "core/tag_filter.hpp"

namespace wattscope {

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
