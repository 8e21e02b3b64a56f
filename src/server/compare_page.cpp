#include "server/compare_page.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/time_util.hpp"
#include "runs/comparison.hpp"
#include "server/compare_query.hpp"
#include "wattscope/version.hpp"
#include "web/report_page.hpp"

namespace wattscope {

namespace {

struct NotFound : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool passes(const RunInfo& r, const query::CompareQuery& q) {
  if (q.from_ms && r.start_ms < *q.from_ms) return false;
  if (q.to_ms && r.start_ms >= *q.to_ms) return false;
  return q.host.empty() || r.host == q.host;
}

std::string filters_text(const query::CompareQuery& q) {
  std::string out;
  if (!q.host.empty()) out += " on host " + q.host;
  if (q.from_ms) out += " from " + iso_utc_ms(*q.from_ms);
  if (q.to_ms) out += " before " + iso_utc_ms(*q.to_ms);
  return out;
}

// The runs the query names, and what was left out by the per-task cap ({task: runs that matched}).
nlohmann::json select(StoreReader& store, const query::CompareQuery& q, std::vector<RunInfo>& runs) {
  nlohmann::json capped = nlohmann::json::object();
  if (!q.runs.empty()) {
    // One read of the runs for all the ids (resolve_run reads them per id: 100 ids were 100 reads of the store), with
    // its rules: the exact id, else the one run whose id begins or ends with it; "latest" is the newest.
    const std::vector<RunInfo> all = store.runs();
    if (all.empty()) throw NotFound(fmt::format("{} holds no runs yet", store.describe()));
    for (const auto& id : q.runs) {
      std::vector<const RunInfo*> matches;
      for (const auto& x : all) {
        if (x.run_id == id) {
          matches = {&x};
          break;
        }
        if (x.run_id.starts_with(id) || x.run_id.ends_with(id)) matches.push_back(&x);
      }
      if (id == "latest" && matches.empty()) matches = {&all.back()};
      if (matches.empty()) throw NotFound(fmt::format("no run '{}' in {}", id, store.describe()));
      if (matches.size() > 1)
        throw NotFound(
            fmt::format("'{}' matches {} runs ({}, ...); give more of the id", id, matches.size(), matches[0]->run_id));
      RunInfo r = *matches[0];
      if (!passes(r, q)) throw NotFound(fmt::format("run {} is not{}", r.run_id, filters_text(q)));
      if (std::none_of(runs.begin(), runs.end(), [&](const RunInfo& x) { return x.run_id == r.run_id; }))
        runs.push_back(std::move(r));
    }
    return capped;
  }
  std::map<std::string, std::vector<RunInfo>> by_task;
  for (auto& r : store.runs()) // oldest first
    if (r.end_ms && passes(r, q) && std::find(q.tasks.begin(), q.tasks.end(), r.task) != q.tasks.end())
      by_task[r.task].push_back(std::move(r));
  for (const auto& task : q.tasks) {
    auto& list = by_task[task];
    if (list.empty()) throw NotFound(fmt::format("no finished runs of task {}{}", task, filters_text(q)));
    if (list.size() > query::kMaxCompareRunsPerTask) {
      capped[task] = list.size();
      list.erase(list.begin(), list.end() - static_cast<std::ptrdiff_t>(query::kMaxCompareRunsPerTask));
    }
    runs.insert(runs.end(), list.begin(), list.end());
  }
  return capped;
}

CompareAnswer compare_error(int status, const std::string& message) {
  return {status, "application/json", nlohmann::json{{"error", message}, {"status", status}}.dump()};
}

} // namespace

CompareAnswer CompareView::answer(bool html, std::string_view raw_query) {
  auto parsed = query::parse_compare(raw_query);
  if (auto* e = std::get_if<query::Error>(&parsed)) return compare_error(400, e->message);
  const auto& q = std::get<query::CompareQuery>(parsed);
  const std::string key = q.canonical();
  const int64_t now = wall_now_ms();
  {
    std::lock_guard lock(mutex_);
    if (auto it = cache_.find(key); it != cache_.end() && now - it->second.at_ms < kCacheMs)
      return html ? CompareAnswer{200, "text/html; charset=utf-8", it->second.html}
                  : CompareAnswer{200, "application/json", it->second.json};
  }
  Entry entry;
  entry.at_ms = now;
  try {
    auto store = open_reader(store_);
    std::vector<RunInfo> runs;
    const nlohmann::json capped = select(*store, q, runs);
    std::string selection =
        q.runs.empty() ? fmt::format("tasks {}", fmt::join(q.tasks, ", ")) : fmt::format("{} runs", runs.size());
    selection += filters_text(q);
    for (const auto& [task, n] : capped.items())
      selection +=
          fmt::format("; the latest {} of task {}'s {} runs", query::kMaxCompareRunsPerTask, task, n.get<size_t>());
    nlohmann::json data = {{"generated", iso_utc_ms(now)},
                           {"wattscope_version", kVersion},
                           {"source", store->describe()},
                           {"query", key},
                           {"view", "/runs/compare?" + key},
                           {"links", nlohmann::json::object()}, // served: the site's navigation, runs linked
                           {"selection", selection},
                           {"capped", capped},
                           {"comparison", comparison_json(*store, runs)}};
    entry.json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    data["runs"] = nlohmann::json::array(); // the page draws the comparison alone: no series, no plotly.js
    entry.html = fill_report_template(data, false);
  } catch (const NotFound& e) {
    return compare_error(404, e.what());
  } catch (const std::exception& e) {
    return compare_error(503, e.what());
  }
  std::lock_guard lock(mutex_);
  if (cache_.size() >= kCacheEntries) { // the oldest goes
    auto oldest = std::min_element(cache_.begin(), cache_.end(),
                                   [](const auto& a, const auto& b) { return a.second.at_ms < b.second.at_ms; });
    cache_.erase(oldest);
  }
  auto& slot = cache_[key] = std::move(entry);
  return html ? CompareAnswer{200, "text/html; charset=utf-8", slot.html}
              : CompareAnswer{200, "application/json", slot.json};
}

} // namespace wattscope
