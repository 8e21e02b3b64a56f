#include "cli/app.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/child.hpp"
#include "cli/doctor.hpp"
#include "cli/session.hpp"
#include "cli/summary.hpp"
#include "core/duration.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "report/report.hpp"
#include "server/live.hpp"
#include "server/server.hpp"
#include "server/token.hpp"
#include "sinks/store.hpp"
#include "sources/nvml/gpu_selection.hpp"
#include "wattscope/version.hpp"

namespace wattscope {

namespace {

// `run` passes the child's status through, so its own failures use 125 as env(1) and timeout(1) do.
constexpr int kRunOwnError = 125;
constexpr int kUsageError = 2;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// --gpus is checked before anything starts, so a typo is a usage error rather than a run without GPUs.
void check_gpus_flag(const std::string& gpus) {
  try {
    (void)parse_gpu_selection(gpus, std::nullopt);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

StoreSpec store_flag(const std::string& name, const std::string& value) {
  try {
    return parse_store(value);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("{}: {}", name, e.what()));
  }
}

struct RecordFlags {
  std::string task;
  std::string interval = "1s";
  std::string db = kDefaultDb;
  bool no_db = false;
  std::string csv;
  std::string commit_every = "1s";
  std::string procfs_root = "/proc";
  std::string sysfs_root = "/sys";
  std::string gpus;
  std::vector<std::string> tags;
  std::string duration;
  double cpu_tdp = 0;
  std::string report; // run --report [FILE]
  bool want_report = false;
  std::vector<std::string> command;
};

struct ReportFlags {
  std::vector<std::string> runs;
  std::string db = kDefaultDb;
  std::vector<std::string> csv;
  std::string out;
  ReportOptions opts;
};

void add_report_assumptions(CLI::App* sub, ReportOptions& o) {
  sub->add_option("--co2-intensity", o.co2_g_per_kwh, "Grid carbon intensity in gCO2/kWh for the CO2 estimate")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 5000.0));
  sub->add_option("--price", o.price_per_kwh, "Electricity price per kWh for the cost estimate")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  sub->add_option("--currency", o.currency, "Currency of --price")->capture_default_str();
  sub->add_option("--pue", o.pue, "Power usage effectiveness of the data centre (1.0: the devices alone)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 5.0));
}

struct ReadFlags {
  std::string db = kDefaultDb;
  std::string csv;
  bool json = false;
  std::string run;
};

void add_record_options(CLI::App* sub, RecordFlags& f) {
  sub->add_option("--task,-t", f.task, "Task name stored with the run (default: the command's base name)");
  sub->add_option("--interval,-i", f.interval, "Sampling interval: 1s, 250ms, 10ms, 500us")->capture_default_str();
  sub->add_option("--db", f.db, "SQLite database file to store into")->capture_default_str();
  sub->add_flag("--no-db", f.no_db, "Do not write the SQLite database (use with --csv)");
  sub->add_option("--csv", f.csv, "Also write CSV files ({task}_{start}_{table}.csv) into this directory");
  sub->add_option("--commit-every", f.commit_every,
                  "Commit to the stores every N rows (e.g. 1000) or every duration (e.g. 5s)")
      ->capture_default_str();
  sub->add_option("--gpus", f.gpus,
                  "GPUs to record: all, 0,2 or GPU-UUIDs (default: those in CUDA_VISIBLE_DEVICES, else all)");
  sub->add_option("--tag", f.tags, "Extra KEY=VALUE stored with the run (repeatable)");
  sub->add_option("--report", f.report,
                  "When the run ends, write its HTML report (default name: "
                  "wattscope-report-{task}-{id}.html)")
      ->expected(0, 1);
  sub->add_option("--cpu-tdp", f.cpu_tdp,
                  "Where RAPL measures nothing, estimate CPU package power as WATTS x utilisation (labelled "
                  "'estimated')");
  sub->add_option("--procfs-root", f.procfs_root, "Where procfs is mounted (for containers and tests)")
      ->capture_default_str();
  sub->add_option("--sysfs-root", f.sysfs_root, "Where sysfs is mounted (for containers and tests)")
      ->capture_default_str();
}

void add_read_options(CLI::App* sub, ReadFlags& f) {
  sub->add_option("--db", f.db, "SQLite database file to read")->capture_default_str();
  sub->add_option("--csv", f.csv, "Read a directory of wattscope CSV files instead");
  sub->add_flag("--json", f.json, "Print JSON instead of text");
}

// require_store: run and record must store somewhere; serve may keep only its live state.
SessionOptions session_options(const RecordFlags& f, const std::vector<std::string>& command,
                               bool require_store = true) {
  SessionOptions o;
  o.command = command;
  if (!f.task.empty()) {
    o.task = f.task;
  } else if (!command.empty()) {
    const std::string& c = command.front();
    o.task = c.substr(c.find_last_of('/') == std::string::npos ? 0 : c.find_last_of('/') + 1);
  } else {
    o.task = "record";
  }
  try {
    validate_task_name(o.task);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--task: {}", e.what()));
  }
  try {
    o.interval = parse_duration(f.interval);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--interval: {}", e.what()));
  }
  if (o.interval < std::chrono::microseconds(100))
    throw UsageError(fmt::format("--interval {} is below the 100us minimum", f.interval));
  try {
    o.commit = parse_commit_every(f.commit_every);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  try {
    if (!f.no_db) o.stores.push_back(parse_store(f.db));
    if (!f.csv.empty()) o.stores.push_back({StoreSpec::Kind::Csv, f.csv});
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--db: {}", e.what()));
  }
  if (o.stores.empty() && require_store) throw UsageError("--no-db without --csv would store nothing; add --csv DIR");
  for (const auto& t : f.tags) {
    auto eq = t.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError(fmt::format("--tag '{}': expected KEY=VALUE", t));
    o.tags[t.substr(0, eq)] = t.substr(eq + 1);
  }
  o.procfs_root = f.procfs_root;
  o.sysfs_root = f.sysfs_root;
  o.gpus = f.gpus;
  check_gpus_flag(f.gpus);
  if (f.cpu_tdp < 0 || f.cpu_tdp > 10000)
    throw UsageError(fmt::format("--cpu-tdp {}: expected the CPU's TDP in watts, e.g. 280", f.cpu_tdp));
  if (f.cpu_tdp > 0) o.cpu_tdp_w = f.cpu_tdp;
  return o;
}

bool g_quiet = false; // set once from -q before any command runs

void print_summary(const Session& s, const RunInfo& run) {
  if (!g_quiet) std::fputs(("wattscope: " + run_text(run, s.store_names())).c_str(), stderr);
  if (!s.all_stored()) spdlog::error("some samples could not be stored; see the errors above");
}

// run --report: the report of the run just finished, read back from the first store it was written to.
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

int cmd_run(const RecordFlags& f, const std::vector<std::string>& command) {
  if (command.empty()) throw UsageError("no command to run; usage: wattscope run [OPTIONS] -- CMD [ARGS...]");
  SessionOptions opts = session_options(f, command);
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
  try {
    child = wait_child(spawn_child(path, command));
  } catch (const CommandError& e) {
    spdlog::error("{}", e.what());
    child.exit_code = e.exit_code;
  }
  RunInfo run = session.finish(child.exit_code);
  std::string report_path;
  if (f.want_report) report_path = write_run_report(opts, run, f.report);
  print_summary(session, run);
  if (!report_path.empty() && !g_quiet) std::fprintf(stderr, "  report    %s\n", report_path.c_str());
  if (!session.all_stored()) return child.exit_code ? child.exit_code : kRunOwnError;
  return child.exit_code;
}

int cmd_record(const RecordFlags& f) {
  SessionOptions opts = session_options(f, {});
  std::optional<std::chrono::nanoseconds> duration;
  if (!f.duration.empty()) {
    try {
      duration = parse_duration(f.duration);
    } catch (const std::invalid_argument& e) {
      throw UsageError(fmt::format("--duration: {}", e.what()));
    }
  }
  block_control_signals();
  Session session(opts);
  session.open();
  if (!duration) spdlog::info("recording run {} until Ctrl-C or SIGTERM", session.run().run_id);
  session.start();
  std::optional<int> sig = wait_for_stop(duration);
  RunInfo run = session.finish(sig ? 128 + *sig : 0);
  print_summary(session, run);
  return session.all_stored() ? 0 : 1;
}

std::unique_ptr<StoreReader> reader_for(const ReadFlags& f) {
  try {
    return open_reader(f.csv.empty() ? parse_store(f.db) : StoreSpec{StoreSpec::Kind::Csv, f.csv});
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

int cmd_list(const ReadFlags& f) {
  auto store = reader_for(f);
  auto runs = store->runs();
  if (f.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : runs)
      arr.push_back(run_json(r));
    std::cout << arr.dump(2) << "\n";
  } else if (runs.empty()) {
    std::cout << store->describe() << " holds no runs yet\n";
  } else {
    std::cout << runs_table(runs);
  }
  return 0;
}

int cmd_show(const ReadFlags& f) {
  auto store = reader_for(f);
  RunInfo run = resolve_run(*store, f.run);
  if (f.json)
    std::cout << run_json(run).dump(2) << "\n";
  else
    std::cout << run_text(run);
  return 0;
}

// CSV inputs: directories of wattscope CSV files, or single files whose directory and run are taken from the name.
std::unique_ptr<StoreReader> csv_reader_for(const std::vector<std::string>& paths, std::vector<std::string>& run_ids) {
  namespace fs = std::filesystem;
  std::string dir;
  for (const auto& p : paths) {
    std::error_code ec;
    std::string d = p;
    if (!fs::is_directory(p, ec)) {
      if (!fs::exists(p, ec)) throw std::runtime_error(fmt::format("--csv '{}': no such file or directory", p));
      d = fs::path(p).parent_path().string();
      if (d.empty()) d = ".";
      // {task}_{start}_{id}_{table}.csv: the id suffix picks the run.
      const std::string name = fs::path(p).filename().string();
      std::string id;
      for (const auto& t : all_tables()) {
        const std::string suffix = "_" + std::string(t.name) + ".csv";
        if (name.size() > suffix.size() + 9 && name.ends_with(suffix)) {
          const std::string stem = name.substr(0, name.size() - suffix.size());
          id = stem.substr(stem.size() - 8);
        }
      }
      if (id.empty())
        throw std::runtime_error(fmt::format("--csv '{}': not a wattscope CSV file name ({{task}}_{{start}}_{{id}}_"
                                             "{{table}}.csv)",
                                             p));
      if (std::find(run_ids.begin(), run_ids.end(), id) == run_ids.end()) run_ids.push_back(id);
    }
    if (!dir.empty() && fs::path(d) != fs::path(dir))
      throw std::runtime_error("--csv: give files or directories from one directory per report");
    dir = d;
  }
  return open_reader({StoreSpec::Kind::Csv, dir});
}

int cmd_report(ReportFlags f) {
  if (f.out.empty()) throw UsageError("-o FILE.html is required: where to write the report");
  std::unique_ptr<StoreReader> reader;
  if (!f.csv.empty())
    reader = csv_reader_for(f.csv, f.runs);
  else
    reader = open_reader(store_flag("--db", f.db));
  std::vector<RunInfo> runs;
  if (f.runs.empty()) runs.push_back(resolve_run(*reader, ""));
  for (const auto& id : f.runs)
    runs.push_back(resolve_run(*reader, id));
  const auto t0 = SteadyClock::now();
  write_report(*reader, runs, f.opts, f.out);
  if (!g_quiet)
    std::fprintf(stderr, "wattscope: report of %zu run(s) written to %s (%.1f s)\n", runs.size(), f.out.c_str(),
                 std::chrono::duration<double>(SteadyClock::now() - t0).count());
  return 0;
}

struct ServeFlags {
  std::string listen = "127.0.0.1:9400";
  std::string retain = "24h";
  std::string token_file;
  std::string db;
};

int cmd_serve(const RecordFlags& rf, const ServeFlags& f) {
  ListenAddress addr;
  try {
    addr = parse_listen(f.listen);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  std::string token;
  try {
    if (!f.token_file.empty()) token = read_token_file(f.token_file);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (!addr.loopback() && token.empty())
    throw UsageError(fmt::format("--listen {} is reachable from other machines: pass --token-file FILE holding a "
                                 "secret; every request must then send 'Authorization: Bearer <secret>'",
                                 f.listen));
  std::chrono::nanoseconds retain;
  try {
    retain = parse_duration(f.retain);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--retain: {}", e.what()));
  }
  RecordFlags session_flags = rf;
  session_flags.no_db = f.db.empty();
  if (!f.db.empty()) session_flags.db = f.db;
  if (session_flags.task.empty()) session_flags.task = "serve";
  SessionOptions opts = session_options(session_flags, {}, /*require_store=*/false);
  std::optional<StoreSpec> store;
  if (!opts.stores.empty()) store = opts.stores.front();
  block_control_signals();
  LiveState live(retain, opts.interval);
  opts.on_frame = [&live](const std::shared_ptr<const Frame>& fr) { live.push(fr); };
  Session session(opts);
  session.open();
  live.set_run(session.run(), session.devices());
  HttpServer http(live, ServerOptions{addr, token, store});
  http.bind();
  session.start();
  live.set_sampler(session.sampler_stats());
  std::thread server([&http] { http.run(); });
  spdlog::info("serving on http://{}:{}/ (dashboard), /metrics, /api/v1/...; recording run {}{}", addr.host,
               http.port(), session.run().run_id, token.empty() ? "" : "; requests need the bearer token");
  std::optional<int> sig = wait_for_stop(std::nullopt);
  http.stop();
  server.join();
  RunInfo run = session.finish(sig ? 128 + *sig : 0);
  if (!g_quiet && store) std::fputs(("wattscope: " + run_text(run, session.store_names())).c_str(), stderr);
  return 0;
}

struct ExportFlags {
  std::string from;
  std::string to;
  std::vector<std::string> runs;
};

// Copies runs between stores, table by table in key order, in batches of 10000 rows (one transaction each).
int cmd_export(const ExportFlags& f) {
  const StoreSpec from = store_flag("--from", f.from), to = store_flag("--to", f.to);
  auto reader = open_reader(from);
  std::vector<RunInfo> runs;
  if (f.runs.empty())
    runs = reader->runs();
  else
    for (const auto& id : f.runs)
      runs.push_back(resolve_run(*reader, id));
  if (runs.empty()) throw std::runtime_error(fmt::format("{} holds no runs to export", reader->describe()));
  int64_t total = 0;
  std::string dest;
  for (const auto& run : runs) {
    auto sink = open_sink(to, /*spill_on_outage=*/false);
    dest = sink->describe();
    sink->begin_run(run);
    const int64_t rows = copy_run(*reader, run, [&sink](const RowBatch& b) { sink->write(b); });
    sink->end_run(run);
    total += rows;
    if (!g_quiet)
      std::fprintf(stderr, "wattscope: exported run %s (%s): %lld rows\n", run.run_id.c_str(), run.task.c_str(),
                   static_cast<long long>(rows));
  }
  if (!g_quiet)
    std::fprintf(stderr, "wattscope: %zu run(s), %lld rows copied from %s to %s\n", runs.size(),
                 static_cast<long long>(total), reader->describe().c_str(), dest.c_str());
  return 0;
}

int cmd_doctor(const RecordFlags& f, bool json) {
  SessionOptions o;
  o.procfs_root = f.procfs_root;
  o.sysfs_root = f.sysfs_root;
  o.gpus = f.gpus;
  check_gpus_flag(f.gpus);
  const nlohmann::json report = doctor_report(o);
  if (json)
    std::cout << report.dump(2) << "\n";
  else
    std::cout << doctor_text(report);
  return report["power_measurable"].get<bool>() ? 0 : 1;
}

} // namespace

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
             "Run 'wattscope COMMAND --help' for a command's options.");

  RecordFlags run_flags;
  std::vector<std::string> command;
  auto* run = app.add_subcommand("run", "Run a command and record the machine while it runs");
  add_record_options(run, run_flags);
  // prefix_command: everything from the first word that is not one of run's options (or after --) is the command,
  // so the command's own flags (python train.py --lr 3e-4) are never taken for wattscope's.
  run->prefix_command();
  run->footer("Examples:\n"
              "  wattscope run --task bert-lr3e-4 -- python train.py --lr 3e-4\n"
              "  wattscope run --interval 100ms --csv results/ -- ./benchmark.sh\n"
              "The exit status is the command's (128+N if a signal N ended it, 127 if it was not found);\n"
              "125 means wattscope itself failed. SIGINT, SIGTERM and SIGHUP are passed on to the command.");

  RecordFlags rec_flags;
  auto* record = app.add_subcommand("record", "Record the machine until stopped (Ctrl-C / SIGTERM) or for --duration");
  add_record_options(record, rec_flags);
  record->add_option("--duration,-d", rec_flags.duration, "Stop after this long, e.g. 30s, 10m");
  record->footer("Example:\n  wattscope record --task idle-baseline --duration 5m --interval 250ms");

  RecordFlags doctor_flags;
  bool doctor_json = false;
  auto* doctor = app.add_subcommand("doctor", "Check what this machine can measure, and how to fix what it cannot");
  doctor->add_flag("--json", doctor_json, "Print JSON instead of text");
  doctor->add_option("--gpus", doctor_flags.gpus, "GPUs to check (as for run)");
  doctor->add_option("--procfs-root", doctor_flags.procfs_root, "Where procfs is mounted")->capture_default_str();
  doctor->add_option("--sysfs-root", doctor_flags.sysfs_root, "Where sysfs is mounted")->capture_default_str();
  doctor->footer("Examples:\n  wattscope doctor\n  wattscope doctor --json\n"
                 "Exit status 0 when at least one source measures power here, 1 when none does.");

  ReportFlags report_flags;
  auto* report =
      app.add_subcommand("report", "Write a self-contained interactive HTML report of runs (several: compared)");
  report->add_option("runs", report_flags.runs, "Run ids or unique prefixes (default: the latest run)");
  report->add_option("--db", report_flags.db, "Store to read: FILE.db, csv:DIR or mysql://USER@HOST[:PORT]/DB")
      ->capture_default_str();
  report->add_option("--csv", report_flags.csv, "Read wattscope CSV files or directories instead")->expected(1, -1);
  report->add_option("-o,--output", report_flags.out, "The HTML file to write")->required();
  add_report_assumptions(report, report_flags.opts);
  report->footer("Examples:\n  wattscope report -o run.html                          # the latest run in wattscope.db\n"
                 "  wattscope report 20261121-1203 20261121-1410 -o cmp.html   # two runs compared\n"
                 "  wattscope report --csv results/ -o run.html --co2-intensity 56 --price 0.21 --currency EUR\n"
                 "The file opens offline in any browser: plotly.js and the data are inside it.");

  RecordFlags serve_rec;
  ServeFlags serve_flags;
  auto* serve =
      app.add_subcommand("serve", "Sample continuously; serve Prometheus /metrics, a live dashboard and a JSON API");
  serve->add_option("--listen", serve_flags.listen, "Address to listen on (loopback unless a --token-file is given)")
      ->capture_default_str();
  serve->add_option("--interval,-i", serve_rec.interval, "Sampling interval")->capture_default_str();
  serve->add_option("--db", serve_flags.db, "Also store every sample here (FILE.db, csv:DIR or mysql://...)");
  serve->add_option("--retain", serve_flags.retain, "How much history to keep in memory for the dashboard and API")
      ->capture_default_str();
  serve->add_option("--token-file", serve_flags.token_file,
                    "File holding a secret; required to listen beyond loopback, then sent as 'Bearer' by clients");
  serve->add_option("--task,-t", serve_rec.task, "Task name of the run recorded while serving")->capture_default_str();
  serve->add_option("--gpus", serve_rec.gpus, "GPUs to record: all, 0,2 or GPU-UUIDs");
  serve->add_option("--procfs-root", serve_rec.procfs_root, "Where procfs is mounted")->capture_default_str();
  serve->add_option("--sysfs-root", serve_rec.sysfs_root, "Where sysfs is mounted")->capture_default_str();
  serve->footer("Examples:\n  wattscope serve                                   # http://127.0.0.1:9400/\n"
                "  wattscope serve --listen 0.0.0.0:9400 --token-file /etc/wattscope/token --db lab.db\n"
                "Endpoints: / (dashboard), /metrics (Prometheus), /api/v1/current, /api/v1/history?range=6h&step=1m,\n"
                "/api/v1/runs, /api/v1/runs/ID, /api/v1/events (server-sent events). deploy/ has a Grafana dashboard,\n"
                "a Prometheus scrape config and a systemd unit. SIGTERM stops it cleanly.");

  ExportFlags export_flags;
  auto* exp = app.add_subcommand("export", "Copy runs between stores (SQLite, CSV, MySQL); also replays spill files");
  exp->add_option("--from", export_flags.from, "Store to read: FILE.db, csv:DIR or mysql://USER@HOST[:PORT]/DB")
      ->required();
  exp->add_option("--to", export_flags.to, "Store to write, in the same forms")->required();
  exp->add_option("--run", export_flags.runs, "Only these runs (id or unique prefix; repeatable)");
  exp->footer("Examples:\n  wattscope export --from wattscope.db --to mysql://lab@db.example.org/energy\n"
              "  wattscope export --from mysql://lab@db/energy --to csv:results --run 20261121-1203\n"
              "  wattscope export --from ~/.local/state/wattscope/spill/RUN.db --to mysql://lab@db/energy\n"
              "MySQL passwords come from WATTSCOPE_MYSQL_PASSWORD or ~/.my.cnf, never from the command line.");

  ReadFlags list_flags;
  auto* list = app.add_subcommand("list", "List the runs in a store");
  add_read_options(list, list_flags);
  list->footer("Examples:\n  wattscope list\n  wattscope list --db lab.db --json");

  ReadFlags show_flags;
  auto* show = app.add_subcommand("show", "Show one run's summary (the latest when RUN is omitted)");
  add_read_options(show, show_flags);
  show->add_option("run", show_flags.run, "Run id, or a unique prefix or suffix of it");
  show->footer("Examples:\n  wattscope show\n  wattscope show 20261121-1203 --json");

  // `run ... -- CMD ARGS`: everything after the first "--" is the command, whatever it looks like. CLI11 2.1's
  // prefix_command mishandles "--", so the split is made here and only the part before it is parsed.
  std::vector<char*> own_args(argv, argv + argc);
  bool had_separator = false;
  for (size_t i = 1; i < own_args.size(); ++i) {
    if (std::string_view(own_args[i]) == "--") {
      for (size_t k = i + 1; k < own_args.size(); ++k)
        command.emplace_back(own_args[k]);
      own_args.resize(i);
      had_separator = true;
      break;
    }
  }
  auto* active = static_cast<CLI::App*>(nullptr);
  try {
    app.parse(static_cast<int>(own_args.size()), own_args.data());
    for (auto* s : {run, record, list, show, doctor, exp, report, serve})
      if (s->parsed()) active = s;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e); // --help, --version
    // The first word that is not a global flag names the command; CLI11 only says "a subcommand is required".
    for (size_t i = 1; i < own_args.size(); ++i) {
      std::string_view word = own_args[i];
      if (word.starts_with("-")) continue;
      bool known = false;
      for (auto* s : {run, record, list, show, doctor, exp, report, serve})
        known = known || s->get_name() == word;
      if (!known) {
        std::fprintf(stderr,
                     "wattscope: error: unknown command '%s'; the commands are run, record, list, show, report, serve, "
                     "export, doctor\n"
                     "Run 'wattscope --help' for usage.\n",
                     own_args[i]);
        return kUsageError;
      }
      break;
    }
    std::string where;
    for (auto* s : {run, record, list, show, doctor, exp, report, serve})
      if (s->parsed()) where = std::string(s->get_name()) + " ";
    std::fprintf(stderr, "wattscope: error: %s\nRun 'wattscope %s--help' for usage.\n", e.what(), where.c_str());
    return run->parsed() ? kRunOwnError : kUsageError;
  }
  init_logging(quiet ? -1 : verbose);
  run_flags.want_report = run->count("--report") > 0;
  g_quiet = quiet;
  if (run->parsed()) {
    // prefix_command leaves everything after the first positional word (or after --) unparsed: that is the command.
    auto rest = run->remaining();
    if (!rest.empty()) {
      if (had_separator || rest.front().starts_with("-")) {
        std::string joined;
        for (const auto& r : rest)
          joined += (joined.empty() ? "" : " ") + r;
        std::fprintf(stderr,
                     "wattscope: error: unknown option or argument before '--': %s\n"
                     "Run 'wattscope run --help' for usage.\n",
                     joined.c_str());
        return kRunOwnError;
      }
      command = rest;
    }
  }
  try {
    if (active == run) return cmd_run(run_flags, command);
    if (active == record) return cmd_record(rec_flags);
    if (active == list) return cmd_list(list_flags);
    if (active == show) return cmd_show(show_flags);
    if (active == doctor) return cmd_doctor(doctor_flags, doctor_json);
    if (active == exp) return cmd_export(export_flags);
    if (active == report) return cmd_report(report_flags);
    if (active == serve) return cmd_serve(serve_rec, serve_flags);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "wattscope: error: %s\nRun 'wattscope %s --help' for usage.\n", e.what(),
                 active ? active->get_name().c_str() : "");
    return active == run ? kRunOwnError : kUsageError;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return active == run ? kRunOwnError : 1;
  }
  return kUsageError;
}

} // namespace wattscope
