// wattscope record: the whole machine until Ctrl-C / SIGTERM or --duration.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "advice/advice_input.hpp" // ---- advice (issue 14) ----
#include "cli/child.hpp"
#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "core/duration.hpp"
#include "core/text.hpp"
#include "phases/marker_socket.hpp"
#include "recording/session.hpp"
#include "runs/run_view.hpp"

namespace wattscope {

namespace {

class RecordCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    add_record_options(sub, flags_);
    sub.add_option("--duration,-d", duration_, "Stop after this long, e.g. 30s, 10m (default: until stopped)");
    sub.add_option("--socket", socket_,
                   "Listen for markers (wattscope mark, the Python helper, its energy windows and Jupyter magics) on "
                   "this Unix socket; without PATH, on this user's default socket, which the helper and `wattscope "
                   "mark` find by themselves (else set WATTSCOPE_SOCKET=PATH in the workloads that send them)")
        ->expected(0, 1);
    // issue 18: one job's run on a shared node (wattscope slurm prolog passes both)
    sub.add_option("--only-unit", only_units_,
                   "Only the processes of this unit are the run's, e.g. \"slurm job 42\" (the unit names of "
                   "docs/attribution.md: slurm job N, pod UID, docker ID, NAME.service; repeatable)");
    sub.add_option("--only-env", only_env_,
                   "Only the processes started with this KEY=VALUE in their environment are the run's, e.g. "
                   "SLURM_JOB_ID=42 (read from /proc/PID/environ: root or the processes' owner; repeatable; with "
                   "--only-unit, a process that matches either is the run's)");
    sub.footer("Examples:\n"
               "  wattscope record --task idle-baseline --duration 5m --interval 250ms\n"
               "  wattscope record --db mysql://lab@db.example.org/energy     # until Ctrl-C or SIGTERM\n"
               "  wattscope record --only-unit 'slurm job 42' --only-env SLURM_JOB_ID=42 --gpus 0,1");
  }

  int run(CLI::App& sub, const CliContext& ctx) override {
    // A node that only pushes (--remote-write with --no-db) keeps nothing locally.
    SessionOptions opts = session_options(flags_, {}, /*require_store=*/flags_.remote_write.urls.empty());
    opts.marker_socket_path = sub.count("--socket") > 0 && socket_.empty() ? default_marker_socket_path() : socket_;
    for (const auto& u : only_units_)
      flag_value("--only-unit", [&] { validate_printable_text("the unit", u, kMaxTagValueBytes); });
    for (const auto& e : only_env_)
      flag_value(fmt::format("--only-env '{}'", excerpt(e)), [&] { parse_tag(e); });
    if ((!only_units_.empty() || !only_env_.empty()) && !opts.track_processes)
      throw UsageError("--only-unit/--only-env choose the run's processes: they need process tracking (drop "
                       "--top-processes 0)");
    opts.only_units = only_units_;
    opts.only_env = only_env_;
    std::optional<std::chrono::nanoseconds> duration;
    // Given at all, --duration must say how long: an empty value is a mistake, not "forever".
    if (sub.count("--duration") > 0) {
      duration = flag_value("--duration", [&] { return parse_duration(duration_); });
      if (duration->count() <= 0) throw UsageError(fmt::format("--duration '{}': must be longer than 0", duration_));
    }
    block_control_signals();
    RemoteWriteHook remote_write(flags_.remote_write, opts, nullptr);
    Session session(opts);
    session.open();
    remote_write.opened(session);
    if (!duration) spdlog::info("recording run {} until Ctrl-C or SIGTERM", session.run().run_id);
    session.start();
    remote_write.started(session);
    const std::optional<int> sig = wait_for_stop(duration);
    RunInfo run = session.finish(sig ? 128 + *sig : 0);
    remote_write.finish(run);
    if (!ctx.quiet) {
      std::string text = "wattscope: " + run_text(run, session.store_names()) + remote_write.summary();
      // ---- advice (issue 14): the top three, read back from the first store ----
      try {
        if (!opts.stores.empty()) {
          auto reader = open_reader(opts.stores.front());
          text += advice::summary_text(*reader, run);
        }
      } catch (const std::exception& e) {
        spdlog::debug("advice not shown: {}", e.what());
      }
      // ---- end advice ----
      std::fputs(text.c_str(), stderr);
    }
    if (!session.all_stored()) spdlog::error("some samples could not be stored; see the errors above");
    return session.all_stored() ? 0 : 1;
  }

private:
  RecordFlags flags_;
  std::string duration_;
  std::string socket_;
  std::vector<std::string> only_units_, only_env_; // issue 18
};

} // namespace

std::unique_ptr<Command> make_record_command() {
  return std::make_unique<RecordCommand>();
}

} // namespace wattscope
