// wattscope serve: sample continuously; Prometheus /metrics, a live dashboard and a JSON API from memory.
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "advice/advice_input.hpp" // advice (issue 14)
#include "cli/child.hpp"
#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "core/duration.hpp"
#include "core/thread_name.hpp"
#include "phases/marker_socket.hpp"
#include "recording/session.hpp"
#include "runs/run_view.hpp"
#include "server/live.hpp"
#include "server/server.hpp"
#include "server/token.hpp"

namespace wattscope {

namespace {

// A store serve only browses may not exist yet (the first run is still to come): said once at the start, and /runs
// says it again until it can be read.
void warn_if_unreadable(const StoreSpec& store) {
  try {
    open_reader(store);
  } catch (const std::exception& e) {
    spdlog::warn("--db: {} (/runs will say so until it can be read)", e.what());
  }
}

class ServeCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    sub.add_option("--listen", listen_, "Address to listen on (loopback unless a --token-file is given)")
        ->capture_default_str();
    sub.add_option("--interval,-i", rec_.interval, "Sampling interval")
        ->capture_default_str()
        ->each([this](const std::string&) { rec_.interval_given = true; });
    add_simulate_option(sub, rec_); // issue 19
    sub.add_option("--db", db_,
                   "The stored runs to browse at /runs and /api/v1/runs (FILE.db, csv:DIR or mysql://...), read "
                   "only: serve stores nothing there unless --record is given");
    sub.add_flag("--record", record_,
                 "Also store what serve samples into --db, as a run of its own (task --task): a node's exporter that "
                 "keeps its history, or a fleet's shared MariaDB");
    sub.add_option("--retain", retain_, "How much history to keep in memory for the dashboard and API")
        ->capture_default_str();
    sub.add_option("--token-file", token_file_,
                   "File holding a secret; required to listen beyond loopback, then sent as 'Bearer' by clients");
    sub.add_option("--task,-t", rec_.task, "Task name of the run recorded while serving")->capture_default_str();
    sub.add_option("--gpus", rec_.gpus, "GPUs to record: all, 0,2 or GPU-UUIDs");
    sub.add_option("--top-processes", rec_.top_processes,
                   "Processes (and units) tracked and exported one by one, the top N by power; the rest are summed "
                   "as 'other' (0: no process tracking)")
        ->capture_default_str();
    // issue 32: a series per process (pid, start time, command) is a new series for every process started, so a busy
    // node's Prometheus grows without bound; units (Slurm job, pod, container, service) are exported regardless.
    sub.add_flag("--process-metrics", process_metrics_,
                 "Also export the top GPU processes one by one in /metrics (wattscope_process_*; a new series per "
                 "process: see docs/prometheus.md). The dashboard and /api/v1/current list every process either way");
    sub.add_option("--process-metrics-unit", process_metrics_units_,
                   "With --process-metrics (implied): also the CPU-only processes of this unit, by name (\"slurm job "
                   "42\", \"nginx.service\") or kind (slurm-job, k8s-pod, container, service); repeatable");
    sub.add_option("--process-interval", rec_.process_interval,
                   "How often the machine's processes are scanned, at least 1s (default 5s)");
    // issue 18: RAPL is absent or root-only on many nodes; the same labelled estimate as record, so the CPU power
    // panels of a fleet are not empty there.
    sub.add_option("--cpu-tdp", rec_.cpu_tdp,
                   "Where RAPL measures nothing, estimate CPU package power as WATTS x utilisation (labelled "
                   "'estimated')");
    sub.add_option("--procfs-root", rec_.procfs_root, "Where procfs is mounted")->capture_default_str();
    sub.add_option("--sysfs-root", rec_.sysfs_root, "Where sysfs is mounted")->capture_default_str();
    sub.add_option("--socket", socket_,
                   "Listen for markers (wattscope mark, the Python helper, its energy windows and Jupyter magics) on "
                   "this Unix socket; without PATH, on this user's default socket, which the helper and `wattscope "
                   "mark` find by themselves (else set WATTSCOPE_SOCKET=PATH in the workloads that send them)")
        ->expected(0, 1);
    add_alerts_option(sub, rec_);    // alerts (issue 14)
    add_adaptive_options(sub, rec_); // issue 18
    add_per_core_options(sub, rec_); // issue 33
    add_read_cost_option(sub, rec_); // issue 33
    add_scrape_options(sub, rec_);   // a workload's Prometheus endpoint as work
    add_footprint_record_options(sub, rec_.footprint);
    add_remote_write_options(sub, rec_.remote_write);
    sub.footer("Examples:\n  wattscope serve                                   # http://127.0.0.1:9400/\n"
               "  wattscope serve --simulate                        # simulated GPUs: see every view without one\n"
               "  wattscope serve --db lab.db                       # browse lab.db's runs at /runs (read only)\n"
               "  wattscope serve --listen 0.0.0.0:9400 --token-file /etc/wattscope/token --db lab.db --record\n"
               "Endpoints: / (dashboard), /metrics (Prometheus), /api/v1/current, /api/v1/history?range=6h&step=1m,\n"
               "/api/v1/runs, /api/v1/runs/ID, /api/v1/events (server-sent events), /api/v1/alerts. deploy/ has a "
               "Grafana dashboard,\na Prometheus scrape config and a systemd unit. SIGTERM stops it cleanly.");
  }

  int run(CLI::App& sub, const CliContext& ctx) override {
    const ListenAddress addr = flag_value("--listen", [&] { return parse_listen(listen_); });
    std::string token;
    // Bounded read, regular files only, visible characters, no group/world-writable file or directory (as ssh).
    if (!token_file_.empty()) token = flag_value("", [&] { return read_token_file(token_file_); });
    if (!addr.loopback() && token.empty())
      throw UsageError(fmt::format("--listen {} is reachable from other machines: pass --token-file FILE holding a "
                                   "secret; every request must then send 'Authorization: Bearer <secret>'",
                                   listen_));
    const auto retain = flag_value("--retain", [&] { return parse_duration(retain_); });
    if (record_ && db_.empty())
      throw UsageError("--record stores serve's samples into --db: add --db STORE (FILE.db, csv:DIR or mysql://...)");
    RecordFlags session_flags = rec_;
    // Browsing a store is reading it: a team's /runs shows the team's runs, not a run of the server showing them.
    session_flags.no_db = !record_;
    if (record_) session_flags.db = db_;
    if (session_flags.task.empty()) session_flags.task = "serve";
    SessionOptions opts = session_options(session_flags, {}, /*require_store=*/false);
    opts.marker_socket_path = sub.count("--socket") > 0 && socket_.empty() ? default_marker_socket_path() : socket_;
    std::optional<StoreSpec> store;
    if (!db_.empty()) store = store_flag("--db", db_);
    if (store && !record_) warn_if_unreadable(*store);
    block_control_signals();
    LiveState live(retain, opts.interval);
    live.set_process_cap(opts.top_processes);
    live.set_process_metrics(process_metrics_ || !process_metrics_units_.empty(), process_metrics_units_);
    // ---- advice (issue 14): /api/v1/advice, over the last hour of live's fine ring, copied out when a recomputation
    // is due (issue 12: the frames are kept once, and a frame costs the advice nothing) ----
    advice::LiveAdvice advice([&live] { return live.advice_input(); });
    opts.on_frame = [&live](const std::shared_ptr<const Frame>& fr) { live.push(fr); };
    RemoteWriteHook remote_write(rec_.remote_write, opts, &live);
    Session session(opts);
    session.open();
    live.set_run(session.run(), session.devices());
    remote_write.opened(session);
    ServerOptions server_opts{addr, token, store};
    server_opts.advice = &advice;
    HttpServer http(live, server_opts);
    http.bind();
    session.start();
    live.set_sampler(session.sampler_stats());
    remote_write.started(session);
    live.set_alerts(session.alerts()); // alerts (issue 14)
    // issue 36
    live.set_anomalies(session.anomalies());
    // issue 36: /api/v1/forecast
    live.set_forecasts(&session.forecasts());
    std::thread server([&http] {
      name_this_thread("ws-http");
      http.run();
    });
    spdlog::info("serving on http://{}:{}/ (dashboard), /metrics, /api/v1/...; {}{}", addr.host, http.port(),
                 record_ ? fmt::format("recording run {} into {}", session.run().run_id, db_)
                 : store ? fmt::format("the runs of {} at /runs (read only: --record also stores serve's own)", db_)
                         : std::string("samples kept in memory (--retain)"),
                 token.empty() ? "" : "; requests need the bearer token");
    wait_for_stop(std::nullopt);
    http.stop();
    server.join();
    // A signal is how serve is stopped: its run ends normally (exit 0), not as killed.
    RunInfo run = session.finish(0);
    remote_write.finish(run);
    if (!ctx.quiet && record_) std::fputs(("wattscope: " + run_text(run, session.store_names())).c_str(), stderr);
    if (!ctx.quiet && remote_write.enabled()) std::fputs(remote_write.summary().c_str(), stderr);
    return 0;
  }

private:
  RecordFlags rec_;
  std::string listen_ = "127.0.0.1:9400";
  std::string socket_; // --socket: markers (issue 15)
  std::string retain_ = "24h";
  std::string token_file_;
  std::string db_;
  bool record_ = false;
  bool process_metrics_ = false; // issue 32
  std::vector<std::string> process_metrics_units_;
};

} // namespace

std::unique_ptr<Command> make_serve_command() {
  return std::make_unique<ServeCommand>();
}

} // namespace wattscope
