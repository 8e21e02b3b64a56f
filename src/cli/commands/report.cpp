// wattscope report [RUN...] -o FILE.html: one self-contained interactive HTML file; several runs are compared.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "core/duration.hpp"
#include "core/text.hpp"
#include "core/time_util.hpp"
#include "report/report.hpp"
#include "runs/repair.hpp"
#include "runs/run_tags.hpp"
#include "server/query.hpp"

namespace wattscope {

namespace {

// CSV inputs: directories of wattscope CSV files, or single files whose directory and run are taken from the name.
std::unique_ptr<StoreReader> csv_reader_for(const std::vector<std::string>& paths, std::vector<std::string>& run_ids) {
  namespace fs = std::filesystem;
  std::string dir;
  for (const auto& p : paths) {
    std::error_code ec;
    std::string d = p;
    if (!fs::is_directory(p, ec)) {
      if (!fs::exists(p, ec)) throw UsageError(fmt::format("--csv '{}': no such file or directory", p));
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
        throw UsageError(
            fmt::format("--csv '{}': not a wattscope CSV file name ({{task}}_{{start}}_{{id}}_{{table}}.csv)", p));
      if (std::find(run_ids.begin(), run_ids.end(), id) == run_ids.end()) run_ids.push_back(id);
    }
    if (!dir.empty() && fs::path(d) != fs::path(dir))
      throw UsageError("--csv: give files or directories from one directory per report");
    dir = d;
  }
  return open_reader({StoreSpec::Kind::Csv, dir});
}

class ReportCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    sub.add_option("runs", runs_, "Run ids or unique prefixes (default: the latest run)");
    sub.add_option("--task,-t", tasks_,
                   "The runs of this task, compared (with --tag: those with the tags too); repeat it to compare "
                   "tasks: --task A --task B")
        ->allow_extra_args(false); // one task per --task: `--task a RUN` is a task and a run id, not two tasks
    sub.add_option("--tag", tags_, "Only the runs with this tag, KEY=VALUE (repeatable: every one must match)");
    sub.add_option("--last,-n", last_, "Only the latest N of the runs chosen by --task / --tag (per task)");
    sub.add_option("--db", db_, "Store to read: FILE.db, csv:DIR or mysql://USER@HOST[:PORT]/DB")
        ->capture_default_str();
    sub.add_option("--csv", csv_, "Read wattscope CSV files or directories instead")->expected(1, -1);
    sub.add_option("-o,--output", out_, "The HTML file to write")->required();
    sub.add_option("--from", from_,
                   "Charts from this time: 2026-11-29T10:05:00Z, epoch ms, or a duration since the run's start (90m); "
                   "the figures and tables stay the whole run's");
    sub.add_option("--to", to_, "Charts up to this time (as --from)");
    sub.add_option("--resolution", resolution_,
                   "The charts' time resolution (min and max kept per step), e.g. 1s; default: the window in 1000 "
                   "steps");
    add_footprint_read_options(sub, footprint_);
    // The names of earlier versions, kept for scripts that use them.
    sub.add_option_function<double>(
        "--co2-intensity", [this](double g) { footprint_.carbon_intensity = g; }, "Old name of --carbon-intensity");
    sub.add_option_function<double>(
        "--price", [this](double p) { footprint_.energy_price = p; }, "Old name of --energy-price");
    sub.footer(
        "Examples:\n  wattscope report -o run.html                          # the latest run in wattscope.db\n"
        "  wattscope report 20261121-1203 20261121-1410 -o cmp.html   # two runs compared\n"
        "  wattscope report --csv results/ -o run.html --carbon-region FRA --energy-price 0.21 --currency EUR\n"
        "  wattscope report --task bert --tag lr=3e-4 --last 3 -o bert.html   # a task's runs compared\n"
        "  wattscope report --task bert --task gpt --last 2 -o tasks.html    # two tasks' runs side by side\n"
        "  wattscope report RUN --from 60m --to 61m --resolution 1s -o minute.html   # one minute, every second\n"
        "The file opens offline in any browser: plotly.js and the data are inside it.");
  }
  int run(CLI::App& sub, const CliContext& ctx) override {
    if (out_.empty()) throw UsageError("-o FILE.html is required: where to write the report");
    // issue 29: --task / --tag choose the runs where ids would
    const auto filters = flag_value("", [&] { return parse_tag_filters(tags_); });
    std::vector<RunSelection> selections; // one per --task, or the tags alone
    for (const auto& t : tasks_)
      selections.push_back({t, filters});
    if (selections.empty()) selections.push_back({"", filters});
    const RunSelection& selection = selections.front();
    if (!selection.empty() && !runs_.empty()) throw UsageError("give run ids or --task/--tag, not both");
    if (sub.count("--last") && last_ == 0) throw UsageError("--last must be at least 1");
    if (sub.count("--last") && selection.empty()) throw UsageError("--last goes with --task or --tag");
    if (!selection.empty() && !csv_.empty() &&
        std::any_of(csv_.begin(), csv_.end(), [](const std::string& p) { return !std::filesystem::is_directory(p); }))
      throw UsageError("--task/--tag choose among the runs of a --csv directory, not of single files");
    std::unique_ptr<StoreReader> reader =
        !csv_.empty() ? csv_reader_for(csv_, runs_) : open_reader(store_flag("--db", db_));
    std::vector<RunInfo> runs;
    if (!selection.empty()) {
      const auto all = reader->runs();
      for (const auto& sel : selections) {
        auto chosen = select_runs(all, sel);
        if (chosen.empty())
          throw std::runtime_error(fmt::format("{} holds no run {}; 'wattscope list' shows the runs",
                                               reader->describe(), excerpt(sel.text(), 200)));
        if (sub.count("--last") && chosen.size() > last_)
          chosen.erase(chosen.begin(), chosen.end() - static_cast<std::ptrdiff_t>(last_));
        for (const auto& r : chosen)
          if (std::none_of(runs.begin(), runs.end(), [&](const RunInfo& x) { return x.run_id == r.run_id; }))
            runs.push_back(as_shown(*reader, r));
      }
    } else if (runs_.empty()) {
      runs.push_back(as_shown(*reader, resolve_run(*reader, "")));
    }
    for (const auto& id : runs_)
      runs.push_back(as_shown(*reader, resolve_run(*reader, id)));
    window(runs.front());
    const auto t0 = SteadyClock::now();
    opts_.footprint = footprint_for_reading(footprint_);
    write_report(*reader, runs, opts_, out_);
    if (!ctx.quiet)
      std::fprintf(stderr, "wattscope: report of %zu run(s) written to %s (%.1f s)\n", runs.size(), out_.c_str(),
                   std::chrono::duration<double>(SteadyClock::now() - t0).count());
    return 0;
  }

private:
  // --from / --to / --resolution into the report's window: a time, or a duration since the (first) run's start.
  void window(const RunInfo& first) {
    auto when = [&](const std::string& flag, const std::string& text) -> int64_t {
      try {
        return first.start_ms + std::chrono::duration_cast<std::chrono::milliseconds>(parse_duration(text)).count();
      } catch (const std::invalid_argument&) {
      }
      if (const auto ms = query::parse_time_ms(text)) return *ms;
      throw UsageError(fmt::format("{} '{}': not a time (2026-11-29T10:05:00Z, epoch ms) or a duration since the "
                                   "run's start (90m, 2h)",
                                   flag, excerpt(text, 80)));
    };
    if (!from_.empty()) opts_.from_ms = when("--from", from_);
    if (!to_.empty()) opts_.to_ms = when("--to", to_);
    const int64_t end = first.end_ms.value_or(first.start_ms + first.samples * first.interval_ms);
    const int64_t from = opts_.from_ms.value_or(first.start_ms), to = opts_.to_ms.value_or(end);
    if ((opts_.from_ms || opts_.to_ms) && from >= to)
      throw UsageError(
          fmt::format("--from must be before --to (the window is {} to {})", iso_utc_ms(from), iso_utc_ms(to)));
    if (!resolution_.empty()) {
      const auto step = flag_value("--resolution", [&] { return parse_duration(resolution_); });
      const int64_t step_ms = std::chrono::duration_cast<std::chrono::milliseconds>(step).count();
      if (step_ms <= 0) throw UsageError("--resolution must be at least 1ms");
      const int64_t buckets = (to - from + step_ms - 1) / step_ms;
      if (buckets > static_cast<int64_t>(kMaxBuckets))
        throw UsageError(fmt::format("--resolution {} gives {} steps over the charts' window; at most {} are drawn: "
                                     "give a coarser --resolution or a shorter --from/--to window",
                                     resolution_, buckets, kMaxBuckets));
      opts_.buckets = static_cast<size_t>(std::max<int64_t>(1, buckets));
    }
  }
  static constexpr size_t kMaxBuckets = 20'000;
  std::string from_, to_, resolution_;
  std::vector<std::string> runs_;
  std::vector<std::string> tasks_;
  std::vector<std::string> tags_; // issue 29
  size_t last_ = 0;
  std::string db_ = kDefaultDb;
  std::vector<std::string> csv_;
  std::string out_;
  ReportOptions opts_;
  FootprintOptions footprint_;
};

} // namespace

std::unique_ptr<Command> make_report_command() {
  return std::make_unique<ReportCommand>();
}

} // namespace wattscope
