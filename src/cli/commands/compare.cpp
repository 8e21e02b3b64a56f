// wattscope compare A B: is the difference in energy between two runs, or two tasks' repeated runs, larger than
// run-to-run noise? Welch's t-test (unequal variances) on energy per run, said in words and in --json.
#include <cmath>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "pipeline/run_stats.hpp"

namespace wattscope {

namespace {

constexpr double kAlpha = 0.05;

struct Side {
  std::string label; // "task bert (5 runs)" / "run 2026..."
  std::string name;
  bool is_task = false;
  std::vector<RunInfo> runs;
  std::vector<double> energy_j;
  std::vector<double> duration_s;
};

class CompareCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    add_read_options(sub, flags_);
    sub.add_option("a", a_, "A task name (its finished runs) or a run id")->required();
    sub.add_option("b", b_, "A task name (its finished runs) or a run id")->required();
    sub.add_option("--last,-n", last_, "Only the latest N runs of each task");
    sub.footer("Examples:\n  wattscope compare bert-lr3e-4 bert-lr1e-3 --last 5\n  wattscope compare 20261121-1203 "
               "20261121-1210\nA name that is a task compares its runs; otherwise it is a run id (or prefix). Each "
               "side needs\nat least 2 runs for the test; with fewer, the difference is shown without a verdict.");
  }

  int run(CLI::App& sub, const CliContext&) override {
    if (sub.count("--last") && last_ == 0) throw UsageError("--last must be at least 1");
    auto store = reader_for(flags_);
    const auto last = sub.count("--last") ? std::optional<size_t>(last_) : std::nullopt;
    Side a = side(*store, a_, last), b = side(*store, b_, last);
    if (a.energy_j.empty() || b.energy_j.empty())
      throw std::runtime_error(fmt::format("{} has no energy figure to compare (nothing measured energy)",
                                           a.energy_j.empty() ? a.label : b.label));
    const SampleSummary sa = summarize(a.energy_j), sb = summarize(b.energy_j);
    const auto welch = welch_t_test(a.energy_j, b.energy_j);
    const double diff = sb.mean - sa.mean;
    const double pct = sa.mean != 0 ? 100.0 * diff / sa.mean : 0;
    std::string verdict;
    std::optional<bool> significant;
    if (welch) {
      significant = welch->p < kAlpha;
      verdict = *significant
                    ? fmt::format("the difference is larger than run-to-run noise (Welch's t = {:.3g}, df = {:.3g}, "
                                  "p = {:.3g} < {})",
                                  welch->t, welch->df, welch->p, kAlpha)
                    : fmt::format("the difference is within run-to-run noise (Welch's t = {:.3g}, df = {:.3g}, "
                                  "p = {:.3g} >= {}): more runs may tell them apart",
                                  welch->t, welch->df, welch->p, kAlpha);
    } else {
      verdict = fmt::format("cannot tell whether it is larger than run-to-run noise: each side needs at least 2 runs "
                            "({} has {}, {} has {})",
                            a.name, a.energy_j.size(), b.name, b.energy_j.size());
    }
    const std::string direction =
        diff == 0 ? "the same energy as"
                  : fmt::format("{:.3g} % {} energy than", std::fabs(pct), diff > 0 ? "more" : "less");
    const std::string sentence = fmt::format("{} uses {} {} ({:.6g} J vs {:.6g} J per run); {}.", b.label, direction,
                                             a.label, sb.mean, sa.mean, verdict);
    if (flags_.json) {
      auto side_json = [](const Side& s, const SampleSummary& sum) {
        nlohmann::json runs = nlohmann::json::array();
        for (const auto& r : s.runs)
          runs.push_back(r.run_id);
        return nlohmann::json{{"name", s.name},
                              {"kind", s.is_task ? "task" : "run"},
                              {"runs", runs},
                              {"energy_j", summary_json(sum)},
                              {"energy_j_values", s.energy_j},
                              {"duration_s", summary_json(summarize(s.duration_s))}};
      };
      nlohmann::json j = {{"a", side_json(a, sa)},
                          {"b", side_json(b, sb)},
                          {"metric", "energy_j"},
                          {"difference_j", diff},
                          {"difference_pct", sa.mean != 0 ? nlohmann::json(pct) : nlohmann::json()},
                          {"alpha", kAlpha},
                          {"significant", significant ? nlohmann::json(*significant) : nlohmann::json()},
                          {"verdict", sentence}};
      j["welch"] = welch ? nlohmann::json{{"t", std::isfinite(welch->t) ? nlohmann::json(welch->t) : nlohmann::json()},
                                          {"df", welch->df},
                                          {"p", welch->p}}
                         : nlohmann::json();
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << sentence << "\n";
    }
    return 0;
  }

private:
  Side side(StoreReader& store, const std::string& name, std::optional<size_t> last) {
    Side s;
    s.name = name;
    bool task = false;
    for (const auto& r : store.runs())
      if (r.task == name) task = true;
    if (task) {
      s.is_task = true;
      s.runs = task_runs(store, name, last);
      s.label = fmt::format("task {} ({} run{})", name, s.runs.size(), s.runs.size() == 1 ? "" : "s");
    } else {
      s.runs = {resolve_run(store, name)};
      s.label = "run " + s.runs[0].run_id;
    }
    for (const auto& r : s.runs) {
      for (const auto& [k, v] : run_figures(store, r)) {
        if (k == "energy_j") s.energy_j.push_back(v);
        if (k == "duration_s") s.duration_s.push_back(v);
      }
    }
    return s;
  }

  ReadFlags flags_;
  std::string a_, b_;
  size_t last_ = 0;
};

} // namespace

std::unique_ptr<Command> make_compare_command() {
  return std::make_unique<CompareCommand>();
}

} // namespace wattscope
