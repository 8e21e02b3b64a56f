// wattscope advise [RUN]: what a stored run wasted and what to change, with the evidence and an estimated saving
// (issue 14; the arithmetic is in docs/advice.md).
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "advice/advice_input.hpp"
#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "core/text.hpp"
#include "runs/run_model.hpp"

namespace wattscope {

namespace {

class AdviseCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    add_read_options(sub, flags_);
    sub.add_option("run", run_, "Run id, or a unique prefix or suffix of it (default: the latest run)");
    sub.footer(
        "Examples:\n  wattscope advise\n  wattscope advise 20261121-1203 --json\n"
        "Each suggestion names its device, time range and figures, and an estimated saving: 'measured' (the\n"
        "energy an idle GPU drew) or 'modelled' (stated with its assumption). docs/advice.md has the arithmetic.");
  }
  int run(CLI::App&, const CliContext&) override {
    auto store = reader_for(flags_);
    const RunModel model = load_run_model(*store, resolve_run(*store, run_), {.advice = true});
    const RunInfo& run = model.run;
    const auto& items = *model.advice;
    if (flags_.json) {
      nlohmann::json j;
      j["run_id"] = run.run_id;
      j["task"] = run.task;
      j["advice"] = advice::to_json(items);
      j["advice_step_s"] = model.advice_step_json();
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::cout << fmt::format("run {}  task {}\n", run.run_id, run.task) << model.advice_step_text();
    if (items.empty())
      std::cout << "  no advice: no idle or starved GPU, no memory headroom, throttling or power-limit saving found\n";
    else
      std::cout << advice::to_text(items, items.size(), true);
    return 0;
  }

private:
  ReadFlags flags_;
  std::string run_;
};

} // namespace

std::unique_ptr<Command> make_advise_command() {
  return std::make_unique<AdviseCommand>();
}

} // namespace wattscope
