// wattscope show [RUN]: one run's summary (the latest when RUN is omitted).
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "core/text.hpp"
#include "runs/repair.hpp"
#include "runs/run_model.hpp"
#include "runs/run_tags.hpp"
#include "runs/run_view.hpp"

namespace wattscope {

namespace {

class ShowCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    add_read_options(sub, flags_);
    add_footprint_read_options(sub, footprint_);
    sub.add_option("run", run_, "Run id, or a unique prefix or suffix of it");
    sub.add_option("--tag", tags_,
                   "Every run with this tag, KEY=VALUE (repeatable), as one: per run its node, duration, exit and "
                   "energy, and the total, e.g. a Slurm job across its nodes: --tag slurm_job_id=42");
    sub.add_option("--task,-t", task_, "Every run of this task, as one (with --tag: those with the tags too)");
    sub.footer("Examples:\n  wattscope show\n  wattscope show 20261121-1203 --json\n"
               "  wattscope show --db mysql://lab@db.example.org/energy --tag slurm_job_id=4242\n"
               "  wattscope show --task bert --tag lr=3e-4");
  }
  int run(CLI::App&, const CliContext&) override {
    if (!tags_.empty() || !task_.empty()) return show_tagged();
    auto store = reader_for(flags_);
    // One model of the run: an unfinished run is shown with figures rebuilt from its stored samples, and says so.
    const RunModel model = load_run_model(*store, resolve_run(*store, run_),
                                          {.advice = flags_.json, .footprint = footprint_for_reading(footprint_)});
    if (flags_.json)
      std::cout << model.json().dump(2) << "\n";
    else
      std::cout << terminal_safe(model.text()); // names from a store are not ours
    return 0;
  }

private:
  // issue 18: the runs that share the tags (a job's runs on its nodes), summed.
  int show_tagged() {
    if (!run_.empty()) throw UsageError("give a RUN or --task/--tag, not both");
    const auto filters = flag_value("", [&] { return parse_tag_filters(tags_); });
    const RunSelection selection{task_, filters};
    auto store = reader_for(flags_);
    auto runs = select_runs(store->runs(), selection);
    if (runs.empty()) {
      if (flags_.json) {
        std::cout << runs_total_json(runs, filters, task_).dump(2) << "\n";
        return 1;
      }
      throw std::runtime_error(fmt::format("{} holds no run {}", store->describe(), excerpt(selection.text(), 200)));
    }
    for (auto& r : runs)
      r = as_shown(*store, r); // unfinished: figures from the stored samples
    std::cout << (flags_.json ? runs_total_json(runs, filters, task_).dump(2) + "\n"
                              : terminal_safe(runs_total_text(runs, filters, task_)));
    return 0;
  }

  ReadFlags flags_;
  std::string run_;
  std::vector<std::string> tags_;
  std::string task_; // issue 29
  FootprintOptions footprint_;
};

} // namespace

std::unique_ptr<Command> make_show_command() {
  return std::make_unique<ShowCommand>();
}

} // namespace wattscope
