// Flags shared by the commands that record (run, record, serve, doctor) and those that read a store.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/footprint_flags.hpp"
#include "cli/remote_write_flags.hpp"
#include "recording/session.hpp"
#include "sinks/store.hpp"

namespace CLI {
class App;
}

namespace wattscope {

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
  double cpu_tdp = 0;
  int top_processes = 20;       // attribution (issue 13)
  std::string process_interval; // "": 1s for run, 5s for record and serve (issue 12)
  // ---- simulate (issue 19) ----
  std::string simulate;        // --simulate[=SCENARIO]: "" not given, "true" (bare flag) or the scenario
  bool db_given = false;       // --db was given (else --csv alone writes no SQLite file)
  bool interval_given = false; // --simulate samples every 250ms unless --interval says otherwise
  // ---- end simulate
  std::string alerts; // alerts (issue 14): --alerts FILE
  // ---- adaptive sampling (issue 18) ----
  std::string idle_interval; // --idle-interval: "" off
  std::string idle_after;    // --idle-after: "" the default (1m)
  // ---- end adaptive sampling
  // ---- issue 33: per-core rows at the process-scan period unless one of these says otherwise
  bool per_core_every_tick = false; // --per-core-every-tick
  bool no_per_core = false;         // --no-per-core
  // ---- end issue 33
  std::string max_read_cost;             // issue 33: --max-read-cost ("" the default, 50us)
  std::vector<std::string> scrape;       // --scrape URL (repeatable)
  std::vector<std::string> scrape_units; // --scrape-unit METRIC=UNIT (repeatable)
  double scrape_max_batch = 0;           // --scrape-max-batch N (0: the largest running count seen)
  FootprintFlags footprint;              // carbon and cost: --carbon-*, --pue, --energy-price*, --currency, --config
  RemoteWriteFlags remote_write;         // --remote-write URL and its options
};

// --scrape, --scrape-unit and --scrape-max-batch (run, record, serve; docs/inference.md)
void add_scrape_options(CLI::App& sub, RecordFlags& f);

// ---- issue 33: --per-core-every-tick and --no-per-core (run, record, serve; docs/storage.md)
void add_per_core_options(CLI::App& sub, RecordFlags& f);
// ---- end issue 33

// ---- adaptive sampling (issue 18): --idle-interval and --idle-after (run, record, serve; docs/sampling.md)
void add_adaptive_options(CLI::App& sub, RecordFlags& f);
// issue 33: --max-read-cost (run, record, serve)
void add_read_cost_option(CLI::App& sub, RecordFlags& f);
// Checked against the sampling interval: throws UsageError naming the flag and what is expected.
AdaptiveOptions adaptive_flags(const RecordFlags& f, std::chrono::nanoseconds interval);
// ---- end adaptive sampling

// ---- simulate (issue 19): --simulate[=SCENARIO] on a command that records (run, record, serve, top). A flag, so
// `run --simulate python train.py` never takes the command for a scenario; a scenario is given with '='.
void add_simulate_option(CLI::App& sub, RecordFlags& f);
// ---- end simulate

// ---- alerts (issue 14) ----: --alerts FILE (run, record, serve), and the rules it selects: that file, else the
// default file when one exists (alerts/rules.hpp), else none (null). Throws UsageError naming the file and line.
void add_alerts_option(CLI::App& sub, RecordFlags& f);
std::shared_ptr<const AlertConfig> alerts_flag(const std::string& file);

// run and record: every recording option.
void add_record_options(CLI::App& sub, RecordFlags& f);
// require_store: run and record must store somewhere; serve may keep only its live state. Throws UsageError.
SessionOptions session_options(const RecordFlags& f, const std::vector<std::string>& command,
                               bool require_store = true);
// --gpus is checked before anything starts, so a typo is a usage error rather than a run without GPUs.
void check_gpus_flag(const std::string& gpus);
StoreSpec store_flag(const std::string& name, const std::string& value);

struct ReadFlags {
  std::string db = kDefaultDb;
  std::string csv;
  bool json = false;
};
void add_read_options(CLI::App& sub, ReadFlags& f);
std::unique_ptr<StoreReader> reader_for(const ReadFlags& f);

} // namespace wattscope
