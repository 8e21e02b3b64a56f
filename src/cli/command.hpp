// One file per command under cli/commands/, all behind this small interface. The command table (commands.cpp) is
// the one list of commands: `wattscope --help`, the "unknown command" message and dispatch all come from it.
#pragma once

#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace CLI {
class App;
}

namespace wattscope {

// `run` passes the child's status through, so its own failures use 125 as env(1) and timeout(1) do.
inline constexpr int kRunOwnError = 125;
inline constexpr int kUsageError = 2;

// A mistake on the command line: printed with a pointer to --help, exit status kUsageError (125 for run).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs `parse`, turning its std::invalid_argument into a UsageError that names the flag: the one place this
// translation is written.
template <class F> auto flag_value(std::string_view flag, F&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const std::invalid_argument& e) {
    throw UsageError(flag.empty() ? std::string(e.what()) : fmt::format("{}: {}", flag, e.what()));
  }
}

// What every command may know about the invocation, passed in (no globals).
struct CliContext {
  bool quiet = false;                       // -q: only errors on stderr
  std::vector<std::string> after_separator; // the words after the first "--" (run's command)
  bool had_separator = false;
};

class Command {
public:
  virtual ~Command() = default;
  // Declares the command's options and positionals on its subcommand, with a footer of examples.
  virtual void add_options(CLI::App& sub) = 0;
  // Runs the parsed command; returns the exit status. Throws UsageError or std::exception.
  virtual int run(CLI::App& sub, const CliContext& ctx) = 0;
  // Exit status for a usage mistake and for a failure of wattscope itself.
  virtual int usage_status() const { return kUsageError; }
  virtual int failure_status() const { return 1; }
};

struct CommandEntry {
  std::string_view name;
  std::string_view summary; // one line, shown by `wattscope --help`
  std::unique_ptr<Command> (*make)();
};
std::span<const CommandEntry> command_table();
// "run, record, list, ...": for messages.
std::string command_names();

} // namespace wattscope
