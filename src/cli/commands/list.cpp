// wattscope list: the runs in a store.
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "core/text.hpp"
#include "runs/repair.hpp"
#include "runs/run_tags.hpp"
#include "runs/run_view.hpp"

namespace wattscope {

namespace {

class ListCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    add_read_options(sub, flags_);
    sub.add_option("--tag", tags_,
                   "Only the runs with this tag, KEY=VALUE, exact match (repeatable: every one must match), e.g. "
                   "slurm_job_id=42");
    sub.add_option("--task,-t", task_, "Only the runs of this task");
    sub.footer("Examples:\n  wattscope list\n  wattscope list --db lab.db --json\n"
               "  wattscope list --db mysql://lab@db.example.org/energy --tag slurm_job_id=4242\n"
               "  wattscope list --task bert --tag lr=3e-4");
  }
  int run(CLI::App&, const CliContext&) override {
    const auto filters = flag_value("", [&] { return parse_tag_filters(tags_); });
    const RunSelection selection{task_, filters};
    auto store = reader_for(flags_);
    auto runs = select_runs(store->runs(), selection);
    for (auto& r : runs)
      r = as_shown(*store, r); // unfinished: figures from the stored samples
    if (flags_.json) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& r : runs)
        arr.push_back(run_json(r));
      std::cout << arr.dump(2) << "\n";
    } else if (runs.empty() && !selection.empty()) {
      std::cout << store->describe() << " holds no run " << excerpt(selection.text(), 200) << "\n";
    } else if (runs.empty()) {
      std::cout << store->describe() << " holds no runs yet\n";
    } else {
      std::cout << runs_table(runs);
    }
    return 0;
  }

private:
  ReadFlags flags_;
  std::vector<std::string> tags_; // issue 18
  std::string task_;              // issue 29
};

} // namespace

std::unique_ptr<Command> make_list_command() {
  return std::make_unique<ListCommand>();
}

} // namespace wattscope
