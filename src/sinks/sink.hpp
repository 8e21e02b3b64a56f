// Stores: a Sink writes one run (on its writer thread), a StoreReader reads runs back. Both speak in schema rows.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/schema.hpp"
#include "sinks/runs_query.hpp"

namespace wattscope {

class Sink {
public:
  virtual ~Sink() = default;
  virtual std::string describe() const = 0; // "sqlite wattscope.db", for messages and the summary
  // Where the run ended up, for the run's summary: describe(), unless the rows went elsewhere (MySQL's spill file).
  // Called after the run ended, possibly while an abandoned writer thread is still inside the store.
  virtual std::string stored_text() const { return describe(); }
  // Called once on the starting thread; throws std::runtime_error with a fix-it message when the store is unusable.
  virtual void begin_run(const RunInfo& run) = 0;
  // One batch, one transaction. Throws on failure; the caller keeps the batch and retries, so nothing is lost.
  virtual void write(const RowBatch& batch) = 0;
  // Writes the final runs row (end time, exit status, totals).
  virtual void end_run(const RunInfo& run) = 0;
  // Finalises a run already in the store (`wattscope repair`): stores `rows` (the phases repair closed, each replacing
  // its open row by key), then rewrites its runs row; touches no sample. The runs row goes last: a repair cut short
  // leaves the run unfinished, to be repaired again.
  virtual void finalise_run(const RunInfo& run, const RowBatch& rows) {
    RunInfo unfinished = run;
    unfinished.end_ms.reset();
    begin_run(unfinished);
    if (!rows.empty()) write(rows);
    end_run(run);
  }
  // Called from another thread when the end-of-run drain is out of time: make the call in progress, and every later
  // one, give up on the store at once, keeping the rows elsewhere if the store can (MySQL: its spill file).
  virtual void abandon() noexcept {}
};

using RowFn = std::function<void(std::span<const Value>)>;

class StoreReader {
public:
  virtual ~StoreReader() = default;
  virtual std::string describe() const = 0;
  virtual std::vector<RunInfo> runs() = 0; // oldest first
  // At most `limit` runs from position `offset` of runs()'s order, and how many runs there are in all: what one page
  // of /api/v1/runs costs. SQLite and MySQL ask the database for the page alone; this default reads every run.
  struct RunsPage {
    std::vector<RunInfo> runs;
    size_t total = 0;
    std::vector<std::vector<RunWork>> work; // per run of `runs`, its work per unit (runs_query only)
  };
  virtual RunsPage runs_page(size_t offset, size_t limit) {
    std::vector<RunInfo> all = runs();
    RunsPage page;
    page.total = all.size();
    for (size_t i = offset; i < all.size() && i - offset < limit; ++i)
      page.runs.push_back(std::move(all[i]));
    return page;
  }
  // issue 35: the page of the runs that pass `filter`, in its order, each with its work; total counts every run that
  // passes. SQLite and MySQL ask the database (runs_sql); this default scans runs() and each run's work table.
  virtual RunsPage runs_query(const RunsFilter& filter, size_t offset, size_t limit);
  // The run whose id is exactly `id`, or nothing. SQLite and MySQL look it up by the runs table's key (a run's page
  // at 100,000 runs reads one row, not every run); this default reads every run.
  virtual std::optional<RunInfo> run_by_id(const std::string& id) {
    for (auto& r : runs())
      if (r.run_id == id) return std::move(r);
    return std::nullopt;
  }
  // Every row of `table` for the run, in key order (time order for samples).
  virtual void scan(TableId table, const RunInfo& run, const RowFn& fn) = 0;
};

} // namespace wattscope
