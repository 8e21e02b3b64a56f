// issue 35: the team's stored runs in `serve` (read-only on --db): the JSON of /api/v1/runs (filters, order, pages),
// /api/v1/runs/ID and /api/v1/jobs/ID, and the pages /runs, /runs/ID (the report, rendered from the store and cached)
// and /jobs/ID. The server hands every such path here: check() on the network thread (cheap, no store), answer() on
// its pool.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/query.hpp"
#include "sinks/store.hpp"

namespace wattscope {

struct PageReply {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string_view, std::string>> headers;
  std::string body;
};

class RunsPages {
public:
  // `plotly_url`: where serve has plotly.js (a run page links it rather than embedding 4.6 MB in every answer).
  RunsPages(std::optional<StoreSpec> store, std::string plotly_url);
  // Whether `path` is one of these (not /runs/compare, which is the comparison's).
  static bool handles(std::string_view path);
  // A bad id or query, answered at once; nullopt when answer() should run.
  std::optional<PageReply> check(std::string_view path, std::string_view query) const;
  PageReply answer(const std::string& path, const std::string& query);

  // Rendered run pages kept: at most this many, and this many bytes in all (a finished run never changes).
  static constexpr size_t kCacheEntries = 32;
  static constexpr size_t kCacheBytes = 64u << 20;
  // The most runs one CSV export holds (~30 MB): a larger store is exported a filter (or a limit and offset) at a time.
  static constexpr size_t kMaxCsvRuns = 100'000;
  static constexpr size_t kMaxTotalsGroups = 1000;
  static constexpr size_t kTotalsPage = 5000;

private:
  PageReply runs_json(const std::string& query);
  PageReply runs_csv(StoreReader& reader, const query::RunsListQuery& q);
  // /api/v1/totals: the runs that pass the list's filters summed (runs, energy, kWh, CO2), and per `by` group.
  PageReply totals_json(const std::string& query);
  PageReply series_json(const std::string& id, const std::string& query);
  PageReply run_json_reply(const std::string& id);
  PageReply job_json(const std::string& id);
  PageReply run_page(const std::string& id);
  // An unfinished run's row with the figures rebuilt from its samples (each list view of a long running run would
  // otherwise read all of them): kept kRebuiltFor, so a running run's counts stay live.
  RunInfo shown_unfinished(StoreReader& reader, const RunInfo& stored);
  static constexpr std::chrono::seconds kRebuiltFor{5};
  struct Rebuilt {
    RunInfo run;
    std::chrono::steady_clock::time_point at;
  };

  std::optional<StoreSpec> store_;
  std::string plotly_url_;
  std::mutex mu_;
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>> cache_; // most recent last
  std::vector<Rebuilt> rebuilt_;
};

} // namespace wattscope
