// wattscope show [RUN]: one run's summary (the latest when RUN is omitted).
#include <iostream>

#include <CLI/CLI.hpp>

#include "advice/advice_input.hpp" // ---- advice (issue 14) ----
#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "pipeline/phase_view.hpp"
#include "pipeline/repair.hpp"
#include "pipeline/run_view.hpp"

namespace wattscope {

namespace {

class ShowCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    add_read_options(sub, flags_);
    sub.add_option("run", run_, "Run id, or a unique prefix or suffix of it");
    sub.footer("Examples:\n  wattscope show\n  wattscope show 20261121-1203 --json");
  }
  int run(CLI::App&, const CliContext&) override {
    auto store = reader_for(flags_);
    // An unfinished run is shown with figures rebuilt from its stored samples, and says so.
    const RunInfo run = as_shown(*store, resolve_run(*store, run_));
    const PhaseData phases = load_phase_data(*store, run); // issue 15
    if (flags_.json) {
      nlohmann::json j = run_json(run);
      j.update(phase_json(phases, run));
      j["advice"] = advice::to_json(advice::advise_run(*store, run)); // ---- advice (issue 14) ----
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << run_text(run) << phase_text(phases, run);
    }
    return 0;
  }

private:
  ReadFlags flags_;
  std::string run_;
};

} // namespace

std::unique_ptr<Command> make_show_command() {
  return std::make_unique<ShowCommand>();
}

} // namespace wattscope
