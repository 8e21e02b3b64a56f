// wattscope stats --task T [--last N] | stats RUN...: mean, standard deviation and 95 % confidence interval of each
// figure over repeated runs (duration, energy in all and per device, per phase, per unit of work).
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "pipeline/run_stats.hpp"

namespace wattscope {

namespace {

std::string cell(const std::optional<double>& v) {
  return v ? fmt::format("{:.6g}", *v) : "-";
}

class StatsCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    add_read_options(sub, flags_);
    sub.add_option("runs", ids_, "Runs (ids or unique prefixes); or use --task");
    sub.add_option("--task,-t", task_, "Every finished run of this task");
    sub.add_option("--last,-n", last_, "Only the latest N runs of the task");
    sub.footer(
        "Examples:\n  wattscope stats --task bert-lr3e-4 --last 5\n  wattscope stats 20261121-1203 20261121-1210 "
        "--json\nThe 95 % confidence interval of the mean is mean ± t(0.975, n-1)·sd/√n (Student's t).");
  }
  int run(CLI::App& sub, const CliContext&) override {
    if (task_.empty() == ids_.empty()) throw UsageError("give either --task NAME or run ids, not both or neither");
    if (sub.count("--last") && last_ == 0) throw UsageError("--last must be at least 1");
    if (sub.count("--last") && task_.empty()) throw UsageError("--last goes with --task");
    auto store = reader_for(flags_);
    std::vector<RunInfo> runs;
    if (!task_.empty()) {
      runs = task_runs(*store, task_, sub.count("--last") ? std::optional<size_t>(last_) : std::nullopt);
    } else {
      for (const auto& id : ids_)
        runs.push_back(resolve_run(*store, id));
    }
    std::vector<Figures> figs;
    for (const auto& r : runs)
      figs.push_back(run_figures(*store, r));
    const auto stats = figure_stats(figs);
    if (flags_.json) {
      nlohmann::json j;
      j["task"] = task_.empty() ? nlohmann::json() : nlohmann::json(task_);
      j["runs"] = nlohmann::json::array();
      for (const auto& r : runs)
        j["runs"].push_back(r.run_id);
      j["n"] = runs.size();
      j["metrics"] = nlohmann::json::object();
      for (const auto& m : stats) {
        nlohmann::json s = summary_json(m.summary);
        s["values"] = m.values;
        j["metrics"][m.name] = s;
      }
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::cout << fmt::format("{} run{}{}: {}\n", runs.size(), runs.size() == 1 ? "" : "s",
                             task_.empty() ? "" : " of task " + task_,
                             runs.size() <= 4 ? [&] {
                               std::string s;
                               for (const auto& r : runs)
                                 s += (s.empty() ? "" : ", ") + r.run_id;
                               return s;
                             }()
                                              : runs.front().run_id + " … " + runs.back().run_id);
    std::cout << fmt::format("{:<40} {:>3} {:>14} {:>12} {:>29}\n", "FIGURE", "N", "MEAN", "SD", "95 % CI OF THE MEAN");
    for (const auto& m : stats) {
      std::string name = m.name.size() > 40 ? m.name.substr(0, 39) + "…" : m.name;
      const std::string ci = m.summary.ci_low ? fmt::format("[{}, {}]", cell(m.summary.ci_low), cell(m.summary.ci_high))
                                              : "(needs 2 runs)";
      std::cout << fmt::format("{:<40} {:>3} {:>14} {:>12} {:>29}\n", name, m.summary.n, cell(m.summary.mean),
                               cell(m.summary.sd), ci);
    }
    return 0;
  }

private:
  ReadFlags flags_;
  std::vector<std::string> ids_;
  std::string task_;
  size_t last_ = 0;
};

} // namespace

std::unique_ptr<Command> make_stats_command() {
  return std::make_unique<StatsCommand>();
}

} // namespace wattscope
