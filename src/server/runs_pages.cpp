#include "server/runs_pages.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "report/report.hpp"
#include "runs/run_model.hpp"
#include "runs/run_tags.hpp"
#include "runs/run_view.hpp"
#include "server/query.hpp"
#include "web/assets.hpp"

namespace wattscope {

namespace {

constexpr std::string_view kApiRuns = "/api/v1/runs", kApiJobs = "/api/v1/jobs/", kRuns = "/runs", kJobs = "/jobs/";

PageReply error(int status, std::string message) {
  PageReply r;
  r.status = status;
  r.body = nlohmann::json{{"error", std::move(message)}, {"status", status}}.dump();
  return r;
}

PageReply html(std::string body) {
  PageReply r;
  r.content_type = "text/html; charset=utf-8";
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.body = std::move(body);
  return r;
}

// Run ids and Slurm job ids as paths carry them: letters, digits, '-', '_' and '.', at most 64.
bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
          c == '.'))
      return false;
  return true;
}

std::optional<std::string_view> after(std::string_view path, std::string_view prefix) {
  if (!path.starts_with(prefix)) return std::nullopt;
  return path.substr(prefix.size());
}

// The run as /api/v1/runs lists it: run_json plus its work, J per unit (where it has one unit of work) and user.
nlohmann::json row_json(const RunInfo& run, const std::vector<RunWork>& work) {
  nlohmann::json j = run_json(run);
  nlohmann::json w = nlohmann::json::object();
  for (const auto& u : work)
    w[u.unit] = u.amount;
  j["work"] = std::move(w);
  const auto jpu = j_per_unit(run, work);
  j["j_per_unit"] = jpu ? nlohmann::json(*jpu) : nlohmann::json();
  j["work_unit"] = jpu ? nlohmann::json(work[0].unit) : nlohmann::json();
  const nlohmann::json& tags = j["tags"];
  nlohmann::json user;
  for (const char* key : {"user", "slurm_user"})
    if (tags.is_object() && tags.contains(key) && tags[key].is_string()) {
      user = tags[key];
      break;
    }
  j["user"] = user;
  return j;
}

// The query without limit and offset, for the next page's link: the filters stay as the client wrote them.
std::string without_page(std::string_view raw) {
  std::string out;
  size_t pos = 0;
  while (pos <= raw.size() && !raw.empty()) {
    size_t amp = raw.find('&', pos);
    if (amp == std::string_view::npos) amp = raw.size();
    const std::string_view pair = raw.substr(pos, amp - pos);
    if (!pair.empty() && !pair.starts_with("limit=") && !pair.starts_with("offset=") && pair != "limit" &&
        pair != "offset")
      out += std::string(pair) + "&";
    pos = amp + 1;
    if (amp == raw.size()) break;
  }
  return out;
}

} // namespace

RunsPages::RunsPages(std::optional<StoreSpec> store, std::string plotly_url)
    : store_(std::move(store)), plotly_url_(std::move(plotly_url)) {}

bool RunsPages::handles(std::string_view path) {
  if (path == kApiRuns || path == kRuns || path == "/runs/") return true;
  if (path.starts_with("/runs/compare")) return false; // the comparison view (issue 35, item 1) has its own route
  return path.starts_with("/api/v1/runs/") || path.starts_with(kApiJobs) || path.starts_with("/runs/") ||
         path.starts_with(kJobs);
}

std::optional<PageReply> RunsPages::check(std::string_view path, std::string_view query) const {
  if (!store_) return error(404, "serve was started without --db: no runs are stored");
  if (path == kApiRuns) {
    auto parsed = query::parse_runs_list(query);
    if (auto* e = std::get_if<query::Error>(&parsed)) return error(400, e->message);
    return std::nullopt;
  }
  if (path == kRuns || path == "/runs/") return std::nullopt;
  std::string_view id;
  if (auto rest = after(path, "/api/v1/runs/"))
    id = *rest;
  else if (auto rest = after(path, kApiJobs))
    id = *rest;
  else if (auto rest = after(path, "/runs/"))
    id = *rest;
  else if (auto rest = after(path, kJobs))
    id = *rest;
  if (!valid_id(id)) return error(400, "a run or job id is letters, digits, '-', '_' and '.', at most 64 characters");
  return std::nullopt;
}

PageReply RunsPages::answer(const std::string& path, const std::string& query) {
  try {
    if (path == kApiRuns) return runs_json(query);
    if (path == kRuns || path == "/runs/") return html(std::string(assets::runs_html()));
    if (auto id = after(path, "/api/v1/runs/")) return run_json_reply(std::string(*id));
    if (auto id = after(path, kApiJobs)) return job_json(std::string(*id));
    if (auto id = after(path, "/runs/")) return run_page(std::string(*id));
    if (after(path, kJobs)) return html(std::string(assets::job_html()));
  } catch (const std::exception& e) {
    return error(503, e.what());
  }
  return error(404, "no such path");
}

PageReply RunsPages::runs_json(const std::string& raw) {
  const auto q = std::get<query::RunsListQuery>(query::parse_runs_list(raw));
  auto reader = open_reader(*store_);
  const StoreReader::RunsPage page = reader->runs_query(q.filter, q.offset, q.limit);
  std::string body = "[";
  for (size_t i = 0; i < page.runs.size(); ++i) {
    if (i) body += ',';
    body += row_json(page.runs[i], i < page.work.size() ? page.work[i] : std::vector<RunWork>{}).dump();
  }
  body += ']';
  PageReply r;
  r.body = std::move(body);
  r.headers.emplace_back("X-Total-Count", std::to_string(page.total));
  if (q.offset + page.runs.size() < page.total)
    r.headers.emplace_back("Link", fmt::format("</api/v1/runs?{}limit={}&offset={}>; rel=\"next\"", without_page(raw),
                                               q.limit, q.offset + page.runs.size()));
  return r;
}

PageReply RunsPages::run_json_reply(const std::string& id) {
  auto reader = open_reader(*store_);
  RunInfo run;
  try {
    run = resolve_run(*reader, id);
  } catch (const std::exception& e) {
    return error(404, e.what());
  }
  // The run's own figures from its model, as `show --json` has them (an unfinished run's rebuilt from its samples),
  // beside the columns of its row in the list.
  const RunModel model = load_run_model(*reader, run);
  nlohmann::json j = row_json(model.run, read_run_work(*reader, run));
  j["quality"] = model.quality.json();
  j["units"] = phase_json(model.phases, model.run, model.units)["work"];
  PageReply r;
  r.body = j.dump();
  return r;
}

PageReply RunsPages::job_json(const std::string& id) {
  auto reader = open_reader(*store_);
  RunsFilter f;
  f.tags.emplace_back("slurm_job_id", id);
  // A job is its runs on its nodes: a few to a few hundred. More than a page's cap is said, not cut silently.
  const StoreReader::RunsPage page = reader->runs_query(f, 0, query::kMaxRunsLimit);
  if (page.runs.empty())
    return error(404, fmt::format("no stored run carries the tag slurm_job_id={}", query::printable(id)));
  nlohmann::json j = runs_total_json(page.runs, {TagFilter{"slurm_job_id", id}});
  j["job_id"] = id;
  j["runs_total"] = page.total;
  j["truncated"] = page.total > page.runs.size();
  // The job's Slurm facts, from its first run's tags (the same on every node).
  const nlohmann::json tags = run_json(page.runs.front())["tags"];
  nlohmann::json slurm = nlohmann::json::object();
  if (tags.is_object())
    for (const auto& [k, v] : tags.items())
      if (k.starts_with("slurm_") && k != "slurm_node" && k != "slurm_steps") slurm[k] = v;
  j["slurm"] = std::move(slurm);
  PageReply r;
  r.body = j.dump();
  return r;
}

PageReply RunsPages::run_page(const std::string& id) {
  auto reader = open_reader(*store_);
  RunInfo run;
  try {
    run = resolve_run(*reader, id);
  } catch (const std::exception& e) {
    PageReply r = error(404, e.what());
    return r;
  }
  {
    std::lock_guard lock(mu_);
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->first == run.run_id) {
        auto page = it->second;
        std::rotate(it, it + 1, cache_.end()); // most recently used last
        PageReply r = html(*page);
        r.headers.emplace_back("X-Wattscope-Cache", "hit");
        return r;
      }
  }
  auto page = std::make_shared<const std::string>(
      render_report_linked(build_report_data(*reader, {run}, ReportOptions{}), plotly_url_));
  // An unfinished run still grows: rendered afresh each time.
  if (run.end_ms) {
    std::lock_guard lock(mu_);
    cache_.emplace_back(run.run_id, page);
    size_t bytes = 0;
    for (const auto& e : cache_)
      bytes += e.second->size();
    while (!cache_.empty() && (cache_.size() > kCacheEntries || bytes > kCacheBytes)) {
      bytes -= cache_.front().second->size();
      cache_.erase(cache_.begin());
    }
  }
  PageReply r = html(*page);
  r.headers.emplace_back("X-Wattscope-Cache", "miss");
  return r;
}

} // namespace wattscope
