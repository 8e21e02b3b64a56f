// wattscope export --from STORE --to STORE: copy runs between SQLite, CSV and MySQL; also replays spill files.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"

namespace wattscope {

namespace {

class ExportCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    sub.add_option("--from", from_, "Store to read: FILE.db, csv:DIR or mysql://USER@HOST[:PORT]/DB")->required();
    sub.add_option("--to", to_, "Store to write, in the same forms")->required();
    sub.add_option("--run", runs_, "Only these runs (id or unique prefix; repeatable)");
    sub.footer("Examples:\n  wattscope export --from wattscope.db --to mysql://lab@db.example.org/energy\n"
               "  wattscope export --from mysql://lab@db/energy --to csv:results --run 20261121-1203\n"
               "  wattscope export --from ~/.local/state/wattscope/spill/RUN.db --to mysql://lab@db/energy\n"
               "MySQL passwords come from WATTSCOPE_MYSQL_PASSWORD or ~/.my.cnf, never from the command line.");
  }
  // Copies runs table by table in key order, in batches of 10000 rows (one transaction each).
  int run(CLI::App&, const CliContext& ctx) override {
    const StoreSpec from = store_flag("--from", from_), to = store_flag("--to", to_);
    auto reader = open_reader(from);
    std::vector<RunInfo> runs;
    if (runs_.empty())
      runs = reader->runs();
    else
      for (const auto& id : runs_)
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
      if (!ctx.quiet)
        std::fprintf(stderr, "wattscope: exported run %s (%s): %lld rows\n", run.run_id.c_str(), run.task.c_str(),
                     static_cast<long long>(rows));
    }
    if (!ctx.quiet)
      std::fprintf(stderr, "wattscope: %zu run(s), %lld rows copied from %s to %s\n", runs.size(),
                   static_cast<long long>(total), reader->describe().c_str(), dest.c_str());
    return 0;
  }

private:
  std::string from_, to_;
  std::vector<std::string> runs_;
};

} // namespace

std::unique_ptr<Command> make_export_command() {
  return std::make_unique<ExportCommand>();
}

} // namespace wattscope
