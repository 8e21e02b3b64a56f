// Several runs compared, grouped by task (issue 35): per task the mean and 95 % interval of the run's energy, its
// duration, J per unit of each kind of work and each phase's share, the same figures as `wattscope stats` and
// `compare` give; per run its row; and, for every task after the first, the `compare` test against the first in
// words. One builder for the static multi-run report and serve's compare view, so the two can never disagree.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schema.hpp"
#include "runs/run_model.hpp"
#include "sinks/sink.hpp"

namespace wattscope {

// The `comparison` object of the report's data (docs/compare.md). Runs keep their given order inside
// their task; tasks come in the order of their first run. A task's figure counts only its runs that have it.
nlohmann::json comparison_json(StoreReader& store, const std::vector<RunInfo>& runs);
// The same from runs already loaded (the report has each run's model at hand).
nlohmann::json comparison_json(const std::vector<RunModel>& models);

// The verdict of `wattscope compare A B` on energy per run, in one sentence: "task gpt uses 12.3 % ± 2.1 % more
// energy per run than task bert; significant at 95 % (Welch's t = 9.1, df = 7.8, p = 2e-05)". ± is the half width of
// the 95 % Welch interval of the difference of the means, over A's mean. Refused (said, not computed) when the two
// sides' energies were measured differently, as compare refuses without --force.
struct EnergyVerdict {
  std::string a, b; // the sides' names
  size_t n_a = 0, n_b = 0;
  double mean_a = 0, mean_b = 0;
  std::optional<double> difference_pct, interval_pct, t, df, p;
  std::optional<bool> significant; // missing: fewer than 2 runs a side, or refused
  bool refused = false;            // measured differently
  std::string words;
  nlohmann::json to_json() const;
};
EnergyVerdict energy_verdict(const std::string& a, const std::vector<double>& ea, const std::vector<std::string>& ma,
                             const std::string& b, const std::vector<double>& eb, const std::vector<std::string>& mb);

} // namespace wattscope
