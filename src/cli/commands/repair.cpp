// wattscope repair [RUN]: finalise a run that never finished (wattscope killed, power lost, a store that filled) from
// the samples it stored.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "runs/repair.hpp"
#include "runs/run_view.hpp"

namespace wattscope {

namespace {

class RepairCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    sub.add_option("run", run_, "Run id, or a unique prefix or suffix of it (default: the latest run)");
    sub.add_option("--db", db_, "Store holding the run: FILE.db, csv:DIR or mysql://USER@HOST[:PORT]/DB")
        ->capture_default_str();
    sub.add_flag("--all", all_, "Finalise every unfinished run in the store");
    sub.footer(
        "Examples:\n"
        "  wattscope repair                       # the latest run, if it never finished\n"
        "  wattscope repair 20261121-1203 --db lab.db\n"
        "  wattscope repair --all\n"
        "The run's end becomes its last stored sample; energy, samples and the summary are computed from its\n"
        "samples; the exit status stays unknown; phases left open are closed at that sample (closed_by_repair).\n"
        "Do not repair a run that is still recording.");
  }
  int run(CLI::App&, const CliContext& ctx) override {
    const StoreSpec spec = store_flag("--db", db_);
    auto reader = open_reader(spec);
    std::vector<RunInfo> runs;
    if (all_) {
      for (const auto& r : reader->runs())
        if (unfinished(r)) runs.push_back(r);
      if (runs.empty()) {
        if (!ctx.quiet) std::fprintf(stderr, "wattscope: every run in %s is finished\n", reader->describe().c_str());
        return 0;
      }
    } else {
      runs.push_back(resolve_run(*reader, run_));
      if (!unfinished(runs.back())) {
        if (!ctx.quiet)
          std::fprintf(stderr, "wattscope: run %s finished normally; nothing to repair\n", runs.back().run_id.c_str());
        return 0;
      }
    }
    for (const auto& r : runs) {
      const RunInfo fixed = rebuild_from_samples(*reader, r);
      if (!fixed.end_ms) {
        std::fprintf(stderr, "wattscope: run %s stored no sample; left as it is\n", r.run_id.c_str());
        continue;
      }
      // Phases the recorder had open (or had ended without storing the end) are closed at the last sample.
      Frame closing;
      closing.markers_only = true;
      closing.phases = close_open_phases(*reader, r);
      RunInfo finished = fixed;
      if (!closing.phases.empty()) {
        nlohmann::json summary = nlohmann::json::parse(fixed.summary, nullptr, false);
        if (summary.is_object()) {
          summary["phases_closed_by_repair"] = closing.phases.size();
          finished.summary = summary.dump();
        }
      }
      RowBatch rows;
      append_frame_rows(finished.run_id, closing, rows);
      auto sink = open_sink(spec, /*spill_on_outage=*/false);
      sink->finalise_run(finished, rows);
      if (!ctx.quiet) {
        std::fputs(("wattscope: repaired " + run_text(finished)).c_str(), stderr);
        if (!closing.phases.empty())
          std::fprintf(stderr, "wattscope: closed %zu phase%s left open, at the last stored sample\n",
                       closing.phases.size(), closing.phases.size() == 1 ? "" : "s");
      }
    }
    return 0;
  }

private:
  std::string run_;
  std::string db_ = kDefaultDb;
  bool all_ = false;
};

} // namespace

std::unique_ptr<Command> make_repair_command() {
  return std::make_unique<RepairCommand>();
}

} // namespace wattscope
