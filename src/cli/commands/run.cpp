// wattscope run [OPTIONS] -- CMD [ARGS...]: start a command, record the machine while it runs, exit with its status.
#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "advice/advice_input.hpp"
#include "cli/child.hpp"
#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "core/text.hpp"
#include "processes/cgroup.hpp"
#include "recording/session.hpp"
#include "report/report.hpp"
#include "runs/run_model.hpp"
#include "runs/run_view.hpp"
#ifdef WATTSCOPE_HAVE_NVML
#include "sources/nvml/gpu_grab.hpp"
#endif

namespace wattscope {

namespace {

// The report of the run just finished, read back from the first store it was written to.
std::string write_run_report(const SessionOptions& opts, const RunInfo& run, const std::string& requested) {
  const std::string path = !requested.empty()
                               ? requested
                               : fmt::format("wattscope-report-{}-{}.html", file_safe(run.task),
                                             run.run_id.substr(run.run_id.size() > 8 ? run.run_id.size() - 8 : 0));
  try {
    auto reader = open_reader(opts.stores.front());
    write_report(*reader, {resolve_run(*reader, run.run_id)}, ReportOptions{}, path);
  } catch (const std::exception& e) {
    spdlog::error("cannot write the report: {}", e.what());
    return {};
  }
  return path;
}

class RunCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    add_record_options(sub, flags_);
    sub.add_option("--report", report_,
                   "When the run ends, write its HTML report (default name: wattscope-report-{task}-{id}.html)")
        ->expected(0, 1);
    sub.add_option("--free-mem-max", free_mem_max_,
                   "With --gpus free:N: a GPU with no compute process counts as free below this share of its memory "
                   "in use")
        ->capture_default_str();
    // prefix_command: everything from the first word that is not one of run's options (or after --) is the
    // command, so the command's own flags (python train.py --lr 3e-4) are never taken for wattscope's.
    sub.prefix_command();
    sub.footer("Examples:\n"
               "  wattscope run --task bert-lr3e-4 -- python train.py --lr 3e-4\n"
               "  wattscope run --interval 100ms --csv results/ -- ./benchmark.sh\n"
               "  wattscope run --gpus 0,1 --report -- torchrun --nproc-per-node 2 train.py\n"
               "  wattscope run --gpus free:2 -- python train.py   # take 2 idle GPUs, locked for the run\n"
               "  wattscope run --simulate -- sleep 20              # simulated GPUs, labelled so everywhere\n"
               "The exit status is the command's (128+N if a signal N ended it, 127 if it was not found);\n"
               "125 means wattscope itself failed. SIGINT, SIGTERM and SIGHUP are passed on to the command.");
  }
  int usage_status() const override { return kRunOwnError; }
  int failure_status() const override { return kRunOwnError; }

  int run(CLI::App& sub, const CliContext& ctx) override {
    std::vector<std::string> command = ctx.after_separator;
    // prefix_command leaves everything after the first positional word (or after --) unparsed: that is the command.
    const auto rest = sub.remaining();
    if (!rest.empty()) {
      if (ctx.had_separator || rest.front().starts_with("-")) {
        std::string joined;
        for (const auto& r : rest)
          joined += (joined.empty() ? "" : " ") + r;
        throw UsageError(fmt::format("unknown option or argument before '--': {}", joined));
      }
      command = rest;
    }
    if (command.empty()) throw UsageError("no command to run; usage: wattscope run [OPTIONS] -- CMD [ARGS...]");
    const bool want_report = sub.count("--report") > 0;
    // --gpus free:N: the GPUs are chosen and locked before anything else, and the command gets them by UUID.
    std::vector<UniqueFd> gpu_locks; // held until the run has ended
    if (flags_.gpus.starts_with("free")) {
      if (!flags_.simulate.empty()) // issue 19: free GPUs are found and locked on the machine's own NVML
        throw UsageError("--gpus free:N picks this machine's idle GPUs; with --simulate, pick by index (--gpus 0,2)");
#ifdef WATTSCOPE_HAVE_NVML
      const int n = *flag_value("", [&] { return parse_free_gpus(flags_.gpus); });
      GrabRequest req;
      req.count = n;
      req.mem_max_pct = flag_value("", [&] { return parse_mem_pct(free_mem_max_); });
      req.lock_dir = default_lock_dir();
      if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) req.cuda_visible = cvd;
      GpuGrab grab;
      try {
        const char* lib = std::getenv("WATTSCOPE_NVML_LIBRARY");
        grab = grab_free_gpus(probe_gpus(lib ? lib : ""), req);
      } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        return kRunOwnError;
      }
      for (const auto& g : grab.gpus)
        spdlog::info("--gpus {}: GPU {} ({}, {}) is the command's, locked in {} until the run ends", flags_.gpus,
                     g.index, g.name, g.uuid, req.lock_dir);
      // By UUID, so CUDA's own numbering (CUDA_DEVICE_ORDER) cannot point the command at another GPU.
      ::setenv("CUDA_VISIBLE_DEVICES", grab.cuda_visible.c_str(), 1);
      flags_.gpus = grab.cuda_visible;
      gpu_locks = std::move(grab.locks);
#else
      throw UsageError("--gpus free:N needs NVML, and this wattscope was built without it");
#endif
    }
    SessionOptions opts = session_options(flags_, command);
    opts.private_marker_socket = true; // the child's markers (wattscope mark, the Python helper): WATTSCOPE_SOCKET
    std::string path;
    try {
      path = resolve_command(command.front());
    } catch (const CommandError& e) {
      spdlog::error("{}", e.what());
      return e.exit_code;
    }
    block_control_signals();
    Session session(opts);
    try {
      session.open();
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      return kRunOwnError;
    }
    session.start();
    ChildResult child;
    RunCgroup cgroup = session.make_cgroup();
    try {
      std::vector<std::string> env;
      if (!session.marker_socket().empty())
        env.push_back(std::string(kMarkerSocketEnv) + "=" + session.marker_socket());
      const pid_t pid = spawn_child(path, command, cgroup.procs_fd.get(), env);
      cgroup.procs_fd.reset();
      session.follow(pid, cgroup);
      child = wait_child(pid);
    } catch (const CommandError& e) {
      spdlog::error("{}", e.what());
      child.exit_code = e.exit_code;
    }
    RunInfo run = session.finish(child.exit_code);
    if (!remove_run_cgroup(cgroup))
      spdlog::info("processes the command started are still running in {}; it is left in place", cgroup.dir);
    std::string report_path;
    if (want_report) report_path = write_run_report(opts, run, report_);
    if (!ctx.quiet) {
      std::string text = "wattscope: " + run_text(run, session.store_names());
      // The phase table, read back from the first store (so it shows what was stored).
      try {
        auto reader = open_reader(opts.stores.front());
        const RunModel model = load_run_model(*reader, run, {.advice = true});
        text += phase_text(model.phases, model.run, model.units);
        text += advice::summary_text(*model.advice, run.run_id);
      } catch (const std::exception& e) {
        spdlog::debug("phases not shown: {}", e.what());
      }
      // issue 36: the last forecasts made before the run ended (what would have come next at that rate)
      if (const std::string f = session.forecasts().line(); !f.empty()) text += "  forecast  " + f + "\n";
      std::fputs(text.c_str(), stderr);
    }
    if (!session.all_stored()) spdlog::error("some samples could not be stored; see the errors above");
    if (!report_path.empty() && !ctx.quiet) std::fprintf(stderr, "  report    %s\n", report_path.c_str());
    if (!session.all_stored()) return child.exit_code ? child.exit_code : kRunOwnError;
    return child.exit_code;
  }

private:
  RecordFlags flags_;
  std::string report_;
  std::string free_mem_max_ = "5%";
};

} // namespace

std::unique_ptr<Command> make_run_command() {
  return std::make_unique<RunCommand>();
}

} // namespace wattscope
