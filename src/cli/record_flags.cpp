#include "cli/record_flags.hpp"

#include <cstdlib>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/command.hpp"
#include "core/duration.hpp"
#include "core/text.hpp"
#include "phases/scrape.hpp"
#include "sources/nvml/gpu_selection.hpp"

namespace wattscope {

void add_record_options(CLI::App& sub, RecordFlags& f) {
  sub.add_option("--task,-t", f.task, "Task name stored with the run (default: the command's base name)");
  sub.add_option("--interval,-i", f.interval, "Sampling interval: 1s, 250ms, 10ms, 500us")
      ->capture_default_str()
      ->each([&f](const std::string&) { f.interval_given = true; });
  sub.add_option("--db", f.db, "Store to write: FILE.db (SQLite), csv:DIR or mysql://USER@HOST[:PORT]/DB")
      ->capture_default_str()
      ->each([&f](const std::string&) { f.db_given = true; });
  sub.add_flag("--no-db", f.no_db, "Do not write the SQLite database (with --csv alone it is not written anyway)");
  sub.add_option("--csv", f.csv,
                 "Write CSV files ({task}_{start}_{id}_{table}.csv) into this directory, instead of the default "
                 "wattscope.db; with --db too, both");
  sub.add_option("--commit-every", f.commit_every,
                 "Commit to the stores every N rows (e.g. 1000) or every duration (e.g. 5s)")
      ->capture_default_str();
  sub.add_option("--gpus", f.gpus,
                 "GPUs to record: all, 0,2 or GPU-UUIDs (default: those in CUDA_VISIBLE_DEVICES, else all)");
  sub.add_option("--tag", f.tags, "Extra KEY=VALUE stored with the run (repeatable)");
  sub.add_option("--cpu-tdp", f.cpu_tdp,
                 "Where RAPL measures nothing, estimate CPU package power as WATTS x utilisation (labelled "
                 "'estimated')");
  // attribution (issue 13)
  sub.add_option("--top-processes", f.top_processes,
                 "record/serve: processes sampled per scan, the top N by CPU or GPU use (0: no process tracking)")
      ->capture_default_str();
  sub.add_option("--process-interval", f.process_interval,
                 "How often processes are scanned, at least 1s (default: 1s for run, 5s for record and serve)");
  add_simulate_option(sub, f); // issue 19
  sub.add_option("--procfs-root", f.procfs_root, "Where procfs is mounted (for containers and tests)")
      ->capture_default_str();
  sub.add_option("--sysfs-root", f.sysfs_root, "Where sysfs is mounted (for containers and tests)")
      ->capture_default_str();
  add_alerts_option(sub, f);    // alerts (issue 14)
  add_adaptive_options(sub, f); // issue 18
  add_per_core_options(sub, f); // issue 33
  add_read_cost_option(sub, f); // issue 33
  add_scrape_options(sub, f);   // run and record: a workload's Prometheus endpoint as work
  add_footprint_record_options(sub, f.footprint);
  add_remote_write_options(sub, f.remote_write);
}

// issue 33: run, record and serve
void add_read_cost_option(CLI::App& sub, RecordFlags& f) {
  sub.add_option("--max-read-cost", f.max_read_cost,
                 "A GPU read costing more CPU than this (timed on its first reads) is read at most once a second, or "
                 "as often as its value changes; the ticks between carry its last value with its age (default 50us; "
                 "0 reads everything every tick)");
}

void add_scrape_options(CLI::App& sub, RecordFlags& f) {
  sub.add_option("--scrape", f.scrape,
                 "Read this Prometheus endpoint of the workload at each interval (at most 5 times a second): the token "
                 "and request counters of vLLM, Text Generation Inference, SGLang and llama.cpp's server become work "
                 "(output_tokens, prompt_tokens, requests), so show and the report give J per output token; steady "
                 "batches become 'steady-state' phases (docs/inference.md). Repeatable, e.g. "
                 "http://127.0.0.1:8000/metrics");
  sub.add_option("--scrape-unit", f.scrape_units,
                 "Count another counter of the scraped endpoints as work: METRIC=UNIT, e.g. "
                 "myapp_images_total=images (repeatable)");
  sub.add_option("--scrape-max-batch", f.scrape_max_batch,
                 "The engine's configured maximum batch (e.g. vLLM's --max-num-seqs): steady-state windows need at "
                 "least 0.85 of it running (default: the largest running count seen so far)")
      ->check(CLI::PositiveNumber);
}

// ---- issue 33: per-core rows ----
void add_per_core_options(CLI::App& sub, RecordFlags& f) {
  sub.add_flag("--per-core-every-tick", f.per_core_every_tick,
               "Store each logical CPU's utilisation (cpu_core_samples) every tick; by default it is stored every 5 s "
               "(or per --process-interval where longer), as the mean over that period (docs/storage.md)");
  sub.add_flag("--no-per-core", f.no_per_core, "Store no per-core utilisation (cpu_core_samples stays empty)");
}
// ---- end issue 33

// ---- adaptive sampling (issue 18) ----
void add_adaptive_options(CLI::App& sub, RecordFlags& f) {
  sub.add_option("--idle-interval", f.idle_interval,
                 "Adaptive sampling: once the machine is idle (every GPU below 5 % utilisation, the CPU quiet) for "
                 "--idle-after, take full samples only this often (e.g. 10s); a cheap probe keeps --interval and the "
                 "first busy tick returns to it (docs/sampling.md). Default: off");
  sub.add_option("--idle-after", f.idle_after,
                 "With --idle-interval: how long the machine must be idle before sampling slows (default 1m)");
}

AdaptiveOptions adaptive_flags(const RecordFlags& f, std::chrono::nanoseconds interval) {
  AdaptiveOptions a;
  if (f.idle_interval.empty()) {
    if (!f.idle_after.empty())
      throw UsageError(fmt::format("--idle-after {} has no effect without --idle-interval (e.g. --idle-interval 10s)",
                                   excerpt(f.idle_after)));
    return a;
  }
  a.idle_interval = flag_value("--idle-interval", [&] { return parse_duration(f.idle_interval); });
  if (a.idle_interval <= interval)
    throw UsageError(fmt::format("--idle-interval {} must be longer than the sampling interval ({}): it is the slower "
                                 "rate used while idle, e.g. 10s",
                                 excerpt(f.idle_interval), format_duration(interval)));
  if (a.idle_interval > std::chrono::hours(1))
    throw UsageError(
        fmt::format("--idle-interval {}: at most 1h (a stored sample at least every hour)", excerpt(f.idle_interval)));
  if (!f.idle_after.empty()) {
    a.idle_after = flag_value("--idle-after", [&] { return parse_duration(f.idle_after); });
    if (a.idle_after > std::chrono::hours(24 * 7))
      throw UsageError(fmt::format("--idle-after {}: at most a week (168h)", excerpt(f.idle_after)));
  }
  return a;
}
// ---- end adaptive sampling

// ---- simulate (issue 19) ----
void add_simulate_option(CLI::App& sub, RecordFlags& f) {
  sub.add_flag("--simulate", f.simulate,
               "Record SIMULATED GPUs instead of this machine's: the built-in 'training' scenario (4 GPUs), or "
               "--simulate=FILE.json (docs/simulate.md). Everything they show is labelled simulated; the CPU is still "
               "measured. Samples every 250ms unless --interval is given");
}
// ---- end simulate
// ---- alerts (issue 14) ----
void add_alerts_option(CLI::App& sub, RecordFlags& f) {
  sub.add_option("--alerts", f.alerts,
                 "Alert rules and notifiers (TOML; docs/alerts.md). Default: ~/.config/wattscope/alerts.toml or "
                 "/etc/wattscope/alerts.toml when present");
}

std::shared_ptr<const AlertConfig> alerts_flag(const std::string& file) {
  const std::string path = file.empty() ? default_alert_config_path() : file;
  if (path.empty()) return nullptr;
  try {
    return std::make_shared<const AlertConfig>(load_alert_config(path));
  } catch (const AlertConfigError& e) {
    throw UsageError(fmt::format("{}{}", file.empty() ? "" : "--alerts: ", e.what()));
  }
}
// ---- end alerts

void check_gpus_flag(const std::string& gpus) {
  flag_value("", [&] { return parse_gpu_selection(gpus, std::nullopt); });
}

StoreSpec store_flag(const std::string& name, const std::string& value) {
  return flag_value(name, [&] { return parse_store(value); });
}

SessionOptions session_options(const RecordFlags& f, const std::vector<std::string>& command, bool require_store) {
  SessionOptions o;
  o.command = command;
  if (!f.task.empty()) {
    o.task = f.task;
  } else if (!command.empty()) {
    const std::string& c = command.front();
    const auto slash = c.find_last_of('/');
    o.task = c.substr(slash == std::string::npos ? 0 : slash + 1);
  } else {
    o.task = "record";
  }
  flag_value("--task", [&] { validate_task_name(o.task); });
  o.interval = flag_value("--interval", [&] { return parse_duration(f.interval); });
  if (o.interval < std::chrono::microseconds(100))
    throw UsageError(fmt::format("--interval {} is below the 100us minimum", f.interval));
  o.commit = flag_value("", [&] { return parse_commit_every(f.commit_every); });
  // --csv DIR alone writes CSV alone: the default SQLite file is written only where no other store was asked for.
  if (!f.no_db && (f.csv.empty() || f.db_given)) o.stores.push_back(store_flag("--db", f.db));
  if (!f.csv.empty()) o.stores.push_back({StoreSpec::Kind::Csv, f.csv});
  if (o.stores.empty() && require_store) throw UsageError("--no-db without --csv would store nothing; add --csv DIR");
  for (const auto& t : f.tags) {
    // Keys become JSON keys and may become labels; values are printable UTF-8 (no control characters).
    auto [key, value] = flag_value(fmt::format("--tag '{}'", excerpt(t)), [&] { return parse_tag(t); });
    o.tags[std::move(key)] = std::move(value);
  }
  o.procfs_root = f.procfs_root;
  o.sysfs_root = f.sysfs_root;
  o.gpus = f.gpus;
  check_gpus_flag(f.gpus);
  if (!(f.cpu_tdp >= 0 && f.cpu_tdp <= 10000))
    throw UsageError(fmt::format("--cpu-tdp {}: expected the CPU's TDP in watts, e.g. 280", f.cpu_tdp));
  if (f.cpu_tdp > 0) o.cpu_tdp_w = f.cpu_tdp;
  // attribution (issue 13)
  if (f.top_processes < 0 || f.top_processes > 100000)
    throw UsageError(
        fmt::format("--top-processes {}: expected a number of processes from 0 to 100000", f.top_processes));
  o.top_processes = static_cast<size_t>(f.top_processes);
  if (command.empty() && f.top_processes == 0) o.track_processes = false;
  // issue 12: a machine-wide scan reads every process's stat (about 1 ms per 100 processes), which at 1 s would cost
  // several times the device sampling itself; a run's own tree is what `run` is about, so it keeps 1 s.
  o.process_interval = command.empty() ? std::chrono::seconds(5) : std::chrono::seconds(1);
  if (!f.process_interval.empty()) {
    const auto d = flag_value("--process-interval", [&] { return parse_duration(f.process_interval); });
    if (d < std::chrono::seconds(1))
      throw UsageError(fmt::format("--process-interval {}: processes are scanned at most once a second; give 1s or "
                                   "more (e.g. 5s)",
                                   f.process_interval));
    o.process_interval = d;
  }
  // ---- simulate (issue 19): a bad scenario file is a usage error that names the problem
  if (!f.simulate.empty()) {
    o.simulate = flag_value("", [&] { return Simulation::load(f.simulate == "true" ? "" : f.simulate); });
    if (!f.interval_given) o.interval = std::chrono::milliseconds(250);
  }
  // ---- end simulate
  // issue 33: per-core rows are most of what a many-core node stores; by default one set per process scan.
  if (f.per_core_every_tick && f.no_per_core)
    throw UsageError("--per-core-every-tick and --no-per-core contradict each other: give one of them");
  o.per_core.mode = f.no_per_core           ? PerCoreStorage::Mode::Off
                    : f.per_core_every_tick ? PerCoreStorage::Mode::EveryTick
                                            : PerCoreStorage::Mode::Period;
  o.alerts = alerts_flag(f.alerts);           // alerts (issue 14)
  o.adaptive = adaptive_flags(f, o.interval); // issue 18 (after --simulate, which may set the interval)
  if (!f.max_read_cost.empty()) {             // issue 33
    if (f.max_read_cost == "0")
      o.max_read_cost = std::chrono::nanoseconds{0};
    else
      o.max_read_cost = flag_value("--max-read-cost", [&] { return parse_duration(f.max_read_cost); });
    if (*o.max_read_cost > std::chrono::seconds(1))
      throw UsageError(fmt::format("--max-read-cost {}: at most 1s (a read's CPU cost, e.g. 50us; 0 reads everything "
                                   "every tick)",
                                   excerpt(f.max_read_cost)));
  }
  for (const auto& url : f.scrape)
    if (!(url.starts_with("http://") || url.starts_with("https://")) || url.size() > 2048)
      throw UsageError(fmt::format("--scrape '{}': an http:// or https:// URL of a Prometheus endpoint, e.g. "
                                   "http://127.0.0.1:8000/metrics",
                                   excerpt(url)));
  o.scrape.urls = f.scrape;
  o.footprint = footprint_for_recording(f.footprint);
  o.scrape.unit_mappings = f.scrape_units;
  flag_value("--scrape-unit", [&] { return scrape_metrics(f.scrape_units); });
  if (f.scrape_max_batch > 0) o.scrape.max_batch = f.scrape_max_batch;
  if (const char* hold = std::getenv("WATTSCOPE_STEADY_HOLD_S"); hold && *hold) { // tests: a shorter hold
    char* end = nullptr;
    const double s = std::strtod(hold, &end);
    if (end && *end == '\0' && s >= 0 && s <= 3600) o.scrape.hold_s = s;
  }
  return o;
}

void add_read_options(CLI::App& sub, ReadFlags& f) {
  sub.add_option("--db", f.db, "Store to read: FILE.db, csv:DIR or mysql://USER@HOST[:PORT]/DB")->capture_default_str();
  sub.add_option("--csv", f.csv, "Read a directory of wattscope CSV files instead");
  sub.add_flag("--json", f.json, "Print JSON instead of text");
}

std::unique_ptr<StoreReader> reader_for(const ReadFlags& f) {
  if (!f.csv.empty()) return open_reader({StoreSpec::Kind::Csv, f.csv});
  return open_reader(store_flag("--db", f.db));
}

} // namespace wattscope
