// wattscope stats --task T [--tag K=V] [--last N] | stats RUN...: mean, standard deviation and 95 % confidence
// interval of each figure over repeated runs (duration, energy in all and per device, per phase instance and per
// run, per unit of work), each energy figure with its method, and the runs left out of each figure and why.
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "runs/run_stats.hpp"
#include "runs/run_tags.hpp"
#include "runs/run_view.hpp"

namespace wattscope {

namespace {

std::string cell(const std::optional<double>& v) {
  return v ? fmt::format("{:.6g}", *v) : "-";
}

constexpr const char* kIntervalNote =
    "The 95 % interval is of the mean and never goes below 0: for values all above 0, the modified Cox interval of a "
    "log-normal mean,\nexp(ȳ + s²/2 ± t(0.975, n-1)·√(s²/n + s⁴/(2(n-1)))) with ȳ, s² the mean and variance of the "
    "logs; where a value is 0,\nStudent's t interval cut at 0. N counts the runs that have the figure.";

class StatsCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    add_read_options(sub, flags_);
    add_footprint_read_options(sub, footprint_);
    sub.add_option("runs", ids_, "Runs (ids or unique prefixes); or use --task / --tag");
    sub.add_option("--task,-t", task_, "Every finished run of this task");
    sub.add_option("--tag", tags_, "Only the runs with this tag, KEY=VALUE (repeatable: every one must match)");
    sub.add_option("--last,-n", last_, "Only the latest N of the runs chosen by --task / --tag");
    sub.footer(std::string("Examples:\n  wattscope stats --task bert-lr3e-4 --last 5\n  wattscope stats --task bert "
                           "--tag lr=3e-4 --tag seed=1\n  wattscope stats 20261121-1203 20261121-1210 --json\n"
                           "phase.NAME.energy_j and .duration_s are per instance of the phase (the mean over the run's "
                           "phases of that name);\nphase.NAME.run_total_energy_j and .run_total_duration_s are the "
                           "run's sum over them.\n") +
               kIntervalNote);
  }
  int run(CLI::App& sub, const CliContext&) override {
    const auto filters = flag_value("", [&] { return parse_tag_filters(tags_); });
    const RunSelection selection{task_, filters};
    if (selection.empty() == ids_.empty())
      throw UsageError("give either --task NAME / --tag KEY=VALUE or run ids, not both or neither");
    if (sub.count("--last") && last_ == 0) throw UsageError("--last must be at least 1");
    if (sub.count("--last") && selection.empty()) throw UsageError("--last goes with --task or --tag");
    const FootprintOverride rates = footprint_for_reading(footprint_);
    auto store = reader_for(flags_);
    std::vector<RunInfo> runs;
    if (!selection.empty()) {
      runs = selected_runs(*store, selection, sub.count("--last") ? std::optional<size_t>(last_) : std::nullopt);
    } else {
      for (const auto& id : ids_)
        runs.push_back(resolve_run(*store, id));
    }
    std::vector<Figures> figs;
    std::vector<FigureNotes> notes(runs.size());
    std::vector<MeasuredRun> measured;
    for (size_t i = 0; i < runs.size(); ++i) {
      RunQuality q;
      figs.push_back(run_figures(*store, runs[i], &notes[i], &q, rates));
      measured.push_back({runs[i].run_id, q, runs[i].duration_s()});
    }
    const nlohmann::json warnings = measurement_warnings(measured);
    const auto stats = figure_stats(figs, notes);
    std::vector<std::string> run_methods;
    for (const auto& n : notes)
      run_methods.push_back(n.run_method);
    const std::string method = combine_method_labels(run_methods);
    const bool differ = methods_differ(notes);
    if (flags_.json) {
      nlohmann::json j;
      j["task"] = task_.empty() ? nlohmann::json() : nlohmann::json(task_);
      j["tags"] = nlohmann::json::object();
      for (const auto& f : filters)
        j["tags"][f.key] = f.value;
      j["runs"] = nlohmann::json::array();
      for (const auto& r : runs)
        j["runs"].push_back(r.run_id);
      j["n"] = runs.size();
      j["energy_method"] = method.empty() ? nlohmann::json() : nlohmann::json(method);
      j["run_energy_methods"] = nlohmann::json::object(); // run id -> its method (null: it measured no energy)
      for (size_t i = 0; i < runs.size(); ++i)
        j["run_energy_methods"][runs[i].run_id] =
            notes[i].run_method.empty() ? nlohmann::json() : nlohmann::json(notes[i].run_method);
      j["methods_differ"] = differ;
      j["ci95_note"] = kIntervalNote;
      j["warnings"] = warnings;
      j["metrics"] = nlohmann::json::object();
      for (const auto& m : stats)
        j["metrics"][m.name] = metric_json(m);
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::cout << fmt::format("{} run{}{}: {}\n", runs.size(), runs.size() == 1 ? "" : "s",
                             selection.empty() ? "" : " " + selection.text(),
                             runs.size() <= 4 ? [&] {
                               std::string s;
                               for (const auto& r : runs)
                                 s += (s.empty() ? "" : ", ") + r.run_id;
                               return s;
                             }()
                                              : runs.front().run_id + " … " + runs.back().run_id);
    std::cout << "energy method: " << (method.empty() ? "no energy measured" : method) << "\n";
    if (differ)
      std::cout << "WARNING: these runs' energies were measured by different methods or devices; a mean over them "
                   "mixes what was measured with how\n";
    for (const auto& w : warnings)
      std::cout << "WARNING: " << w["text"].get<std::string>() << ".\n";
    std::cout << fmt::format("{:<40} {:>3} {:>14} {:>12} {:>29}  {}\n", "FIGURE", "N", "MEAN", "SD",
                             "95 % CI OF THE MEAN", "METHOD");
    std::string left_out;
    for (const auto& m : stats) {
      std::string name = m.name.size() > 40 ? m.name.substr(0, 39) + "…" : m.name;
      const std::string ci = m.summary.ci_low ? fmt::format("[{}, {}]", cell(m.summary.ci_low), cell(m.summary.ci_high))
                                              : "(needs 2 runs)";
      std::cout << fmt::format("{:<40} {:>3} {:>14} {:>12} {:>29}  {}\n", name, m.summary.n, cell(m.summary.mean),
                               cell(m.summary.sd), ci, m.method);
      if (!m.left_out.empty()) left_out += fmt::format("  {}: {}\n", m.name, left_out_text(m));
    }
    if (!left_out.empty()) std::cout << "Left out (runs without the figure):\n" << left_out;
    std::cout << kIntervalNote << "\n";
    return 0;
  }

private:
  ReadFlags flags_;
  std::vector<std::string> ids_;
  std::string task_;
  std::vector<std::string> tags_; // issue 29
  size_t last_ = 0;
  FootprintOptions footprint_;
};

} // namespace

std::unique_ptr<Command> make_stats_command() {
  return std::make_unique<StatsCommand>();
}

} // namespace wattscope
