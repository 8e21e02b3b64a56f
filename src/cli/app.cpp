#include "cli/app.hpp"

#include <cstdio>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli/command.hpp"
#include "core/log.hpp"
#include "wattscope/version.hpp"

namespace wattscope {

int run_app(int argc, char** argv) {
  CLI::App app{"wattscope: energy and performance monitor for AI workloads.\n"
               "Records GPU and CPU power, energy, utilisation, memory, temperature and clocks, tied to a task."};
  app.name("wattscope");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("wattscope ") + kVersion);
  int verbose = 0;
  bool quiet = false;
  app.add_flag("-v,--verbose", verbose, "More detail on stderr");
  app.add_flag("-q,--quiet", quiet, "Only errors on stderr");
  app.footer("Examples:\n"
             "  wattscope run --task bert-lr3e-4 -- python train.py   # record a training run into wattscope.db\n"
             "  wattscope list                                        # runs in wattscope.db\n"
             "  wattscope show --json                                 # the latest run as JSON\n"
             "  wattscope doctor                                      # what this machine can measure\n"
             "Run 'wattscope COMMAND --help' for a command's options.");

  struct Bound {
    const CommandEntry* entry;
    std::unique_ptr<Command> cmd;
    CLI::App* sub;
  };
  std::vector<Bound> commands;
  for (const auto& e : command_table()) {
    Bound b{&e, e.make(), app.add_subcommand(std::string(e.name), std::string(e.summary))};
    b.cmd->add_options(*b.sub);
    // -q and -v after the command's name too (`wattscope run -q -- CMD`). Not CLI11's fallthrough: with it, run's
    // command line ("run sh -c 'exit 4' --help") would lose its words to wattscope's own options.
    b.sub->add_flag("-v,--verbose", verbose, "More detail on stderr (also before the command's name)");
    b.sub->add_flag("-q,--quiet", quiet, "Only errors on stderr (also before the command's name)");
    commands.push_back(std::move(b));
  }

  // `run ... -- CMD ARGS`: everything after the first "--" is the command, whatever it looks like. CLI11 2.1's
  // prefix_command mishandles "--", so the split is made here and only the part before it is parsed.
  CliContext ctx;
  std::vector<char*> own_args(argv, argv + argc);
  for (size_t i = 1; i < own_args.size(); ++i) {
    if (std::string_view(own_args[i]) == "--") {
      for (size_t k = i + 1; k < own_args.size(); ++k)
        ctx.after_separator.emplace_back(own_args[k]);
      own_args.resize(i);
      ctx.had_separator = true;
      break;
    }
  }
  Bound* active = nullptr;
  try {
    app.parse(static_cast<int>(own_args.size()), own_args.data());
    for (auto& b : commands)
      if (b.sub->parsed()) active = &b;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e); // --help, --version
    // The first word that is not a global flag names the command; CLI11 only says "a subcommand is required".
    for (size_t i = 1; i < own_args.size(); ++i) {
      const std::string_view word = own_args[i];
      if (word.starts_with("-")) continue;
      bool known = false;
      for (const auto& b : commands)
        known = known || b.entry->name == word;
      if (!known) {
        std::fprintf(stderr,
                     "wattscope: error: unknown command '%s'; the commands are %s\n"
                     "Run 'wattscope --help' for usage.\n",
                     own_args[i], command_names().c_str());
        return kUsageError;
      }
      break;
    }
    const Bound* where = nullptr;
    for (const auto& b : commands)
      if (b.sub->parsed()) where = &b;
    std::fprintf(stderr, "wattscope: error: %s\nRun 'wattscope %s--help' for usage.\n", e.what(),
                 where ? (std::string(where->entry->name) + " ").c_str() : "");
    return where ? where->cmd->usage_status() : kUsageError;
  }
  init_logging(quiet ? -1 : verbose);
  ctx.quiet = quiet;
  if (!active) return kUsageError;
  try {
    return active->cmd->run(*active->sub, ctx);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "wattscope: error: %s\nRun 'wattscope %s --help' for usage.\n", e.what(),
                 std::string(active->entry->name).c_str());
    return active->cmd->usage_status();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return active->cmd->failure_status();
  }
}

} // namespace wattscope
