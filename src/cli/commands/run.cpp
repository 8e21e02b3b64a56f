// wattscope run [OPTIONS] -- CMD [ARGS...]: start a command, record the machine while it runs, exit with its status.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "advice/advice_input.hpp"
#include "cli/child.hpp"
#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "core/duration.hpp"
#include "core/stored_json.hpp"
#include "core/text.hpp"
#include "core/time_util.hpp"
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

// `CMD --vs -- CMD2`: the two commands a repeat alternates (CMD2 empty without --vs).
std::pair<std::vector<std::string>, std::vector<std::string>> split_vs(const std::vector<std::string>& command) {
  for (size_t i = 0; i + 1 < command.size(); ++i)
    if (command[i] == "--vs" && command[i + 1] == "--") {
      std::vector<std::string> a(command.begin(), command.begin() + static_cast<std::ptrdiff_t>(i));
      std::vector<std::string> b(command.begin() + static_cast<std::ptrdiff_t>(i) + 2, command.end());
      if (a.empty() || b.empty()) throw UsageError("--vs -- CMD2 needs a command on each side: -- CMD --vs -- CMD2");
      return {a, b};
    }
  return {command, {}};
}

// "45C", "45", "45 °C" -> 45; throws UsageError.
double parse_temperature(const std::string& text) {
  std::string t = text;
  while (!t.empty() &&
         (t.back() == 'C' || t.back() == 'c' || t.back() == ' ' || static_cast<unsigned char>(t.back()) >= 0x80))
    t.pop_back();
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !(v >= 0 && v <= 120))
    throw UsageError(fmt::format("--cooldown-until '{}': expected a GPU temperature in °C, e.g. 45C", excerpt(text)));
  return v;
}

// Waits up to `d`, taking SIGINT, SIGTERM and SIGHUP (blocked for the runs' children): the signal that came, else 0.
int wait_interruptible(std::chrono::nanoseconds d) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    sigaddset(&set, sig);
  const auto until = SteadyClock::now() + d;
  while (SteadyClock::now() < until) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - SteadyClock::now());
    timespec ts{static_cast<time_t>(left.count() / 1'000'000'000), static_cast<long>(left.count() % 1'000'000'000)};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return sig;
  }
  return 0;
}

// One line per run of a repeat: "run 2/5 A 20261129-… 1.23 kJ in 12.3 s · GPU 41 °C at start".
std::string brief_line(const RunInfo& run) {
  std::string s = fmt::format("{} task {} · {}", run.run_id, run.task,
                              run.total_energy_j ? format_si(*run.total_energy_j, "J") : "energy not measured");
  if (run.duration_s()) s += fmt::format(" in {:.2f} s", *run.duration_s());
  const nlohmann::json summary = run_summary_json(run);
  const auto& m = json_member(summary, "measurement"); // a reference into `summary`, kept alive above
  if (json_has_number(m, "gpu_temp_start_c"))
    s += fmt::format(" · GPU {:.0f} °C at start, {:.0f} °C at end", json_number(m, "gpu_temp_start_c", 0),
                     json_number(m, "gpu_temp_end_c", 0));
  if (run.exit_status && *run.exit_status != 0) s += fmt::format(" · exit {}", *run.exit_status);
  return s + "\n";
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
    sub.add_option("--repeat", repeat_,
                   "Run the command N times (ABAB with --vs), then say whether the runs differ beyond noise "
                   "(compare) or how they spread (stats)")
        ->type_name("N");
    sub.add_option("--cooldown", cooldown_,
                   "With --repeat: pause this long between runs (e.g. 30s), so each starts "
                   "as cool as the last");
    sub.add_option("--cooldown-until", cooldown_until_,
                   "With --repeat: wait between runs until every GPU is at or below this temperature (e.g. 45C)")
        ->type_name("TEMP");
    sub.add_option("--cooldown-max", cooldown_max_, "The longest --cooldown-until waits before it goes on anyway")
        ->capture_default_str();
    sub.add_option("--vs-task", vs_task_,
                   "With '-- CMD --vs -- CMD2': the task of CMD2's runs (default: the task of CMD with -vs)");
    // prefix_command: everything from the first word that is not one of run's options (or after --) is the
    // command, so the command's own flags (python train.py --lr 3e-4) are never taken for wattscope's.
    sub.prefix_command();
    sub.footer("Examples:\n"
               "  wattscope run --task bert-lr3e-4 -- python train.py --lr 3e-4\n"
               "  wattscope run --interval 100ms --csv results/ -- ./benchmark.sh\n"
               "  wattscope run --gpus 0,1 --report -- torchrun --nproc-per-node 2 train.py\n"
               "  wattscope run --gpus free:2 -- python train.py   # take 2 idle GPUs, locked for the run\n"
               "  wattscope run --simulate -- sleep 20              # simulated GPUs, labelled so everywhere\n"
               "  wattscope run --repeat 5 --cooldown-until 45C --task infer-fp16 -- python infer.py --fp16 \\\n"
               "      --vs -- python infer.py --fp32           # ABAB with cool-downs, then compare's verdict\n"
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
    if (repeat_ < 1 || repeat_ > 1000) throw UsageError(fmt::format("--repeat {}: expected 1 to 1000 runs", repeat_));
    const auto [a_command, b_command] = split_vs(command);
    if (repeat_ > 1 || !b_command.empty()) return repeat(a_command, b_command, sub, ctx, want_report);
    if (sub.count("--cooldown") || sub.count("--cooldown-until"))
      throw UsageError("--cooldown and --cooldown-until go with --repeat N (the pause between runs)");
    return record_once(command, flags_, ctx, want_report, false).exit_code;
  }

private:
  struct Outcome {
    int exit_code = 0;
    std::optional<RunInfo> run;
  };
  // One recorded run of `command`: its summary on stderr (one line when `brief`), its exit status.
  Outcome record_once(const std::vector<std::string>& command, const RecordFlags& flags, const CliContext& ctx,
                      bool want_report, bool brief);
  int repeat(const std::vector<std::string>& a, const std::vector<std::string>& b, CLI::App& sub, const CliContext& ctx,
             bool want_report);
  int cool_down(const CliContext& ctx);

  RecordFlags flags_;
  std::string report_;
  std::string free_mem_max_ = "5%";
  int repeat_ = 1;             // --repeat N
  std::string cooldown_;       // --cooldown 30s: a pause between runs
  std::string cooldown_until_; // --cooldown-until 45C: until every GPU is at or below
  std::string cooldown_max_ = "10m";
  std::string vs_task_; // --vs-task: the task of the --vs command's runs (default TASK-vs)
};

RunCommand::Outcome RunCommand::record_once(const std::vector<std::string>& command, const RecordFlags& flags,
                                            const CliContext& ctx, bool want_report, bool brief) {
  SessionOptions opts = session_options(flags, command);
  opts.private_marker_socket = true; // the child's markers (wattscope mark, the Python helper): WATTSCOPE_SOCKET
  std::string path;
  try {
    path = resolve_command(command.front());
  } catch (const CommandError& e) {
    spdlog::error("{}", e.what());
    return {e.exit_code, std::nullopt};
  }
  block_control_signals();
  RemoteWriteHook remote_write(flags.remote_write, opts, nullptr);
  Session session(opts);
  try {
    session.open();
    remote_write.opened(session);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return {kRunOwnError, std::nullopt};
  }
  session.start();
  remote_write.started(session);
  ChildResult child;
  RunCgroup cgroup = session.make_cgroup();
  try {
    std::vector<std::string> env;
    if (!session.marker_socket().empty()) env.push_back(std::string(kMarkerSocketEnv) + "=" + session.marker_socket());
    const pid_t pid = spawn_child(path, command, cgroup.procs_fd.get(), env);
    cgroup.procs_fd.reset();
    session.follow(pid, cgroup);
    child = wait_child(pid);
  } catch (const CommandError& e) {
    spdlog::error("{}", e.what());
    child.exit_code = e.exit_code;
  }
  RunInfo run = session.finish(child.exit_code);
  remote_write.finish(run);
  if (!remove_run_cgroup(cgroup))
    spdlog::info("processes the command started are still running in {}; it is left in place", cgroup.dir);
  std::string report_path;
  if (want_report) report_path = write_run_report(opts, run, report_);
  if (brief && !ctx.quiet) {
    // Read back from the store, as the full summary is: what was stored is what the line says.
    std::string line = brief_line(run);
    try {
      auto reader = open_reader(opts.stores.front());
      line = brief_line(resolve_run(*reader, run.run_id));
    } catch (const std::exception& e) {
      spdlog::debug("run not read back: {}", e.what());
    }
    std::fputs(("wattscope: " + line).c_str(), stderr);
  } else if (!ctx.quiet) {
    std::string text = "wattscope: " + run_text(run, session.store_names()) + remote_write.summary();
    // The phase table, read back from the first store (so it shows what was stored).
    try {
      auto reader = open_reader(opts.stores.front());
      const RunModel model = load_run_model(*reader, run, {.advice = true});
      text += model.footprint.text() + model.quality_text();
      text += phase_text(model.phases, model.run, model.units, &model.footprint);
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
  if (!session.all_stored()) return {child.exit_code ? child.exit_code : kRunOwnError, run};
  return {child.exit_code, run};
}

// Between runs of a repeat: a fixed pause, or until the hottest GPU is at or below --cooldown-until (read through
// NVML every second, at most --cooldown-max). A signal stops the repeat: its status, else 0.
int RunCommand::cool_down(const CliContext& ctx) {
  if (!cooldown_.empty()) {
    const auto d = flag_value("--cooldown", [&] { return parse_duration(cooldown_); });
    if (!ctx.quiet) std::fprintf(stderr, "wattscope: cooling down for %s\n", format_duration(d).c_str());
    if (const int sig = wait_interruptible(d)) return 128 + sig;
  }
  if (cooldown_until_.empty()) return 0;
  const double target = parse_temperature(cooldown_until_);
  const auto max = flag_value("--cooldown-max", [&] { return parse_duration(cooldown_max_); });
#ifdef WATTSCOPE_HAVE_NVML
  const char* lib = std::getenv("WATTSCOPE_NVML_LIBRARY");
  const auto t0 = SteadyClock::now();
  for (;;) {
    std::optional<double> hottest;
    try {
      for (const auto& g : probe_gpus(lib ? lib : ""))
        if (g.temp_c && (!hottest || *g.temp_c > *hottest)) hottest = g.temp_c;
    } catch (const std::exception& e) {
      spdlog::warn("--cooldown-until: cannot read the GPUs' temperatures ({}); going on without waiting", e.what());
      return 0;
    }
    if (!hottest) {
      spdlog::warn("--cooldown-until: no GPU reports its temperature; going on without waiting");
      return 0;
    }
    const double waited = std::chrono::duration<double>(SteadyClock::now() - t0).count();
    if (*hottest <= target) {
      if (!ctx.quiet)
        std::fprintf(stderr, "wattscope: GPUs at %.0f °C (<= %.0f °C) after %.1f s of cool-down\n", *hottest, target,
                     waited);
      return 0;
    }
    if (SteadyClock::now() - t0 >= max) {
      spdlog::warn("--cooldown-until {:.0f}C: the hottest GPU is still at {:.0f} °C after {}; going on (the next run "
                   "starts warmer, and compare will say so)",
                   target, *hottest, format_duration(max));
      return 0;
    }
    if (const int sig = wait_interruptible(std::chrono::seconds(1))) return 128 + sig;
  }
#else
  (void)max;
  spdlog::warn("--cooldown-until needs NVML, and this wattscope was built without it; going on without waiting");
  return 0;
#endif
}

// --repeat N [--vs -- CMD2]: N runs of each command (ABAB), with cool-downs between, all tagged with one
// repeat_batch, then compare's verdict on A against B (stats over the runs without --vs).
int RunCommand::repeat(const std::vector<std::string>& a, const std::vector<std::string>& b, CLI::App& sub,
                       const CliContext& ctx, bool want_report) {
  (void)sub;
  const std::string batch = compact_utc(wall_now_ms()) + fmt::format("-{:04x}", ::getpid() & 0xffff);
  RecordFlags fa = flags_;
  if (fa.task.empty()) fa.task = session_options(flags_, a).task;
  RecordFlags fb = flags_;
  fb.task = !vs_task_.empty() ? vs_task_ : fa.task + "-vs";
  if (!b.empty() && fb.task == fa.task) throw UsageError("--vs-task must differ from --task: compare needs two tasks");
  bool first = true;
  for (int i = 1; i <= repeat_; ++i)
    for (const bool is_b : {false, true}) {
      if (is_b && b.empty()) continue;
      if (!first)
        if (const int stopped = cool_down(ctx)) return stopped;
      first = false;
      RecordFlags f = is_b ? fb : fa;
      f.tags.push_back("repeat_batch=" + batch);
      f.tags.push_back(fmt::format("repeat={}", i));
      if (!b.empty()) f.tags.push_back(std::string("variant=") + (is_b ? "B" : "A"));
      if (!ctx.quiet) std::fprintf(stderr, "wattscope: run %d/%d%s\n", i, repeat_, b.empty() ? "" : is_b ? " B" : " A");
      const Outcome o = record_once(is_b ? b : a, f, ctx, want_report, true);
      if (o.exit_code != 0) {
        spdlog::error("run {}/{}{} ended with status {}: the repeat stops here (a failed run is no measurement of "
                      "the work)",
                      i, repeat_,
                      b.empty() ? ""
                      : is_b    ? " B"
                                : " A",
                      o.exit_code);
        return o.exit_code;
      }
    }
  // The verdict, read back from the store the runs went to, as `compare` / `stats` print it.
  std::vector<std::string> args;
  if (!b.empty())
    args = {fa.task, fb.task};
  else
    args = {"--task", fa.task};
  args.push_back("--tag");
  args.push_back("repeat_batch=" + batch);
  if (!flags_.no_db && (flags_.csv.empty() || flags_.db_given)) {
    args.push_back("--db");
    args.push_back(flags_.db);
  } else {
    args.push_back("--csv");
    args.push_back(flags_.csv);
  }
  CLI::App app;
  auto cmd = b.empty() ? make_stats_command() : make_compare_command();
  cmd->add_options(app);
  std::reverse(args.begin(), args.end()); // CLI11 parses a vector from its back
  app.parse(args);
  std::fflush(stderr);
  std::printf("wattscope: %s of the %d run%s (repeat_batch=%s):\n", b.empty() ? "stats" : "compare A against B",
              repeat_ * (b.empty() ? 1 : 2), repeat_ * (b.empty() ? 1 : 2) == 1 ? "" : "s", batch.c_str());
  std::fflush(stdout);
  return cmd->run(app, ctx) == 0 ? 0 : kRunOwnError;
}

} // namespace

std::unique_ptr<Command> make_run_command() {
  return std::make_unique<RunCommand>();
}

} // namespace wattscope
