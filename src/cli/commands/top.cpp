// wattscope top: a live terminal view of this machine, or of several `serve` endpoints (issue 16).
#include <CLI/CLI.hpp>

#include "alerts/rules.hpp"
#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "server/token.hpp"
#include "top/remote.hpp"
#include "top/top.hpp"

namespace wattscope {

namespace {

class TopCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    sub.add_option("--interval,-i", flags_.interval, "Refresh (and, locally, sampling) interval")
        ->capture_default_str();
    sub.add_option("--connect,-c", connect_,
                   "Watch a `wattscope serve` at this URL instead of this machine (repeat for a fleet view)");
    sub.add_option("--token-file", token_file_, "File holding the bearer token of the serve endpoints (as serve's)");
    sub.add_flag("--once", once_, "Print one frame as plain text and exit (for scripts)");
    sub.add_option("--sort", sort_, "Process order: power, cpu, mem, gpumem, sm or pid (the s key cycles)")
        ->capture_default_str();
    add_simulate_option(sub, flags_); // issue 19: the simulated GPUs, labelled so on screen
    add_alerts_option(sub, flags_);   // issue 14: the rules the status line shows (notifiers are not used by top)
    sub.add_option("--gpus", flags_.gpus, "GPUs to show: all, 0,2 or GPU-UUIDs");
    sub.add_option("--top-processes", flags_.top_processes,
                   "Processes sampled per scan, the top N by CPU or GPU use (0: no process list)")
        ->capture_default_str();
    sub.add_option("--cpu-tdp", flags_.cpu_tdp, "Estimate CPU power from utilisation where RAPL measures none (W)");
    sub.add_option("--procfs-root", flags_.procfs_root, "Where procfs is mounted")->capture_default_str();
    sub.add_option("--sysfs-root", flags_.sysfs_root, "Where sysfs is mounted")->capture_default_str();
    sub.footer(
        "Keys: q quit, s sort, up/down select, left/right GPUs or processes, h help.\n"
        "Examples:\n  wattscope top\n  wattscope top --once --sort cpu\n"
        "  wattscope top --connect http://node1:9400 --connect http://node2:9400 --token-file ~/.wattscope-token\n"
        "Honours NO_COLOR; TERM=dumb or a pipe prints plain frames.");
  }

  int run(CLI::App&, const CliContext&) override {
    top::TopOptions o;
    RecordFlags f = flags_;
    f.no_db = true;
    f.task = "top";
    f.process_interval = "1s";
    f.interval_given = true; // --simulate keeps top's refresh (a recording samples at 250 ms by default)
    SessionOptions session = session_options(f, {}, /*require_store=*/false);
    // top shows firing alerts on its status line: the rules file's, else the built-in rules. It never notifies (a
    // terminal view must not page anyone), so the notifiers are left out.
    auto rules =
        std::make_shared<AlertConfig>(session.alerts ? *session.alerts : AlertConfig{builtin_alert_rules(), {}, ""});
    rules->notifiers.clear();
    session.alerts = std::move(rules);
    if (session.interval < std::chrono::milliseconds(100))
      throw UsageError(fmt::format("--interval {}: top redraws at most every 100ms", flags_.interval));
    o.interval = session.interval;
    o.once = once_;
    o.sort = flag_value("--sort", [&] { return top::parse_sort(sort_); });
    for (const auto& u : connect_)
      o.connect.push_back(flag_value("--connect", [&] { return top::normalize_url(u); }));
    if (!token_file_.empty()) {
      if (connect_.empty()) throw UsageError("--token-file is for --connect URL (serve endpoints)");
      o.token = flag_value("--token-file", [&] { return read_token_file(token_file_); });
    }
    return top::run_top(o, session);
  }

private:
  RecordFlags flags_;
  std::vector<std::string> connect_;
  std::string token_file_;
  std::string sort_ = "power";
  bool once_ = false;
};

} // namespace

std::unique_ptr<Command> make_top_command() {
  return std::make_unique<TopCommand>();
}

} // namespace wattscope
