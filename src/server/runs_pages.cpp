#include "server/runs_pages.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/stored_json.hpp"
#include "core/tag_filter.hpp"
#include "core/time_util.hpp"
#include "report/report.hpp"
#include "runs/repair.hpp"
#include "runs/run_model.hpp"
#include "runs/run_tags.hpp"
#include "runs/run_view.hpp"
#include "server/query.hpp"
#include "web/assets.hpp"

namespace wattscope {

namespace {

constexpr std::string_view kApiTotals = "/api/v1/totals";
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

std::optional<double> run_co2_g(const RunInfo& run) {
  const nlohmann::json summary = run_summary_json(run);
  const nlohmann::json& carbon = json_member(summary, "carbon");
  if (!json_has_number(carbon, "grams")) return std::nullopt;
  return json_number(carbon, "grams");
}

// The run's user as the list's `user` filter reads it: the tag user, else slurm_user.
std::string run_user(const RunInfo& run) {
  const nlohmann::json tags = run_tags_json(run);
  for (const char* key : {"user", "slurm_user"})
    if (const auto& v = json_member(tags, key); v.is_string()) return v.get<std::string>();
  return {};
}

// The run as /api/v1/runs lists it: run_json plus its work, J per unit (where it has one unit of work) and user.
nlohmann::json row_json(const RunInfo& run, const std::vector<RunWork>& work) {
  nlohmann::json j = run_json(run);
  // Said in so many words: a run with no end is still recording, or its recorder died, and its figures are rebuilt
  // from the samples it stored.
  j["unfinished"] = unfinished(run);
  // The carbon the run was charged when it ended (its summary's), for totals and exports; none for an unfinished run.
  const auto co2 = run_co2_g(run);
  j["co2_g"] = co2 ? nlohmann::json(*co2) : nlohmann::json();
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

std::string html_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      out.push_back(c);
    }
  }
  return out;
}

// A store's message as a client may read it: the store's own name (a file's path, a server's address) left out.
std::string without_store(std::string message, const StoreReader& reader) {
  const std::string name = reader.describe();
  for (size_t at = message.find(name); at != std::string::npos; at = message.find(name, at))
    message.replace(at, name.size(), "this store");
  return message;
}

// One CSV cell (RFC 4180): numbers as JSON spells them, text quoted when it must be. Text that a spreadsheet would
// read as a formula (= + - @ first) is kept as text with a leading apostrophe: a task name must not run in a sheet.
std::string csv_cell(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number()) return v.dump();
  std::string text = v.is_string() ? v.get<std::string>() : v.dump();
  if (!text.empty() && (text[0] == '=' || text[0] == '+' || text[0] == '-' || text[0] == '@')) text.insert(0, "'");
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// The run `id` names (whole, or a unique part), or the 404 that says why without naming the store.
std::variant<RunInfo, PageReply> run_or_404(StoreReader& reader, const std::string& id) {
  try {
    return resolve_run(reader, id);
  } catch (const std::exception& e) {
    return error(404, without_store(e.what(), reader));
  }
}

// The shared frame of the runs pages' own messages: the site's navigation, then what went wrong, as a page a person
// reads (not the JSON an API client gets, and never the store's path).
PageReply not_found_page(const std::string& message) {
  PageReply r = html(fmt::format(
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" "
      "content=\"width=device-width, initial-scale=1\"><title>wattscope · not found</title><style>body{{margin:0;"
      "font:14px/1.45 system-ui,sans-serif;color:#1d2430}}nav{{display:flex;gap:18px;padding:8px "
      "16px;border-bottom:1px "
      "solid #e3e7ee;background:#f6f8fb}}main{{padding:16px}}a{{color:#0b5cbf}}</style></head><body>"
      "<nav aria-label=\"wattscope\"><a href=\"/\">Live dashboard</a><a href=\"/runs\">Runs</a></nav><main>"
      "<h1>Not found</h1><p>{}</p><p><a href=\"/runs\">All stored runs</a></p></main></body></html>\n",
      html_escape(message)));
  r.status = 404;
  return r;
}

// Where the run sits in /runs as it opens (newest first, 50 a page), and its Slurm job's page.
nlohmann::json run_links(StoreReader& reader, const RunInfo& run) {
  constexpr size_t kPage = 50;
  RunsFilter newer;
  newer.from_ms = run.start_ms + 1;
  const size_t before = reader.runs_query(newer, 0, 0).total;
  const size_t offset = before / kPage * kPage;
  nlohmann::json links;
  links["list"] = (offset ? fmt::format("/runs?offset={}", offset) : std::string("/runs")) + "#run-" + run.run_id;
  const nlohmann::json tags = run_json(run)["tags"];
  if (tags.is_object() && tags.contains("slurm_job_id")) {
    const nlohmann::json& job = tags["slurm_job_id"];
    const std::string job_id = job.is_string() ? job.get<std::string>() : job.dump();
    if (valid_id(job_id)) {
      links["job"] = "/jobs/" + job_id;
      links["job_id"] = job_id;
    }
  }
  return links;
}

// /api/v1/runs/ID/series?from=T&to=T[&buckets=N]: a run's charts for a window (a zoomed run page asks for it).
constexpr std::string_view kSeries = "/series";
struct Window {
  std::optional<int64_t> from_ms, to_ms;
  size_t buckets = 1000;
};
std::variant<Window, std::string> parse_window(std::string_view raw) {
  auto parsed = query::parse(raw);
  if (auto* e = std::get_if<query::Error>(&parsed)) return e->message;
  Window w;
  for (const auto& p : std::get<std::vector<query::Param>>(parsed)) {
    if (p.name == "from" || p.name == "to") {
      const auto ms = query::parse_time_ms(p.value);
      if (!ms)
        return fmt::format("query parameter '{}': '{}' is not a UTC time (2026-11-20T08:00:00Z) or epoch "
                           "milliseconds",
                           p.name, query::printable(p.value));
      (p.name == "from" ? w.from_ms : w.to_ms) = *ms;
    } else if (p.name == "buckets") {
      if (p.value.empty() || p.value.size() > 5 || p.value.find_first_not_of("0123456789") != std::string::npos ||
          std::stoul(p.value) < 10 || std::stoul(p.value) > 5000)
        return fmt::format("query parameter 'buckets': '{}' is not a number from 10 to 5000",
                           query::printable(p.value));
      w.buckets = std::stoul(p.value);
    } else {
      return fmt::format("unknown query parameter '{}' (series takes from, to and buckets)", query::printable(p.name));
    }
  }
  if (w.from_ms && w.to_ms && *w.from_ms >= *w.to_ms)
    return std::string("query parameters 'from' and 'to': from must be before to");
  return w;
}

// What /api/v1/totals groups by, and the query without its `by` (the rest are the runs list's filters).
constexpr std::string_view kTotalsBy[] = {"task", "host", "user", "day", "month", "exit"};
std::pair<std::string, std::string> split_by(std::string_view raw) {
  std::string by, rest;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t amp = raw.find('&', pos);
    if (amp == std::string_view::npos) amp = raw.size();
    const std::string_view pair = raw.substr(pos, amp - pos);
    if (pair.starts_with("by="))
      by = pair.substr(3);
    else if (!pair.empty())
      rest += std::string(rest.empty() ? "" : "&") + std::string(pair);
    pos = amp + 1;
  }
  return {by, rest};
}

} // namespace

RunsPages::RunsPages(std::optional<StoreSpec> store, std::string plotly_url)
    : store_(std::move(store)), plotly_url_(std::move(plotly_url)) {}

bool RunsPages::handles(std::string_view path) {
  if (path == kApiRuns || path == kApiTotals || path == kRuns || path == "/runs/") return true;
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
  if (path == kApiTotals) {
    auto [by, rest] = split_by(query);
    if (!by.empty() && std::find(std::begin(kTotalsBy), std::end(kTotalsBy), by) == std::end(kTotalsBy))
      return error(400, fmt::format("query parameter 'by': '{}' is not one of task, host, user, day, month, exit",
                                    query::printable(by)));
    auto parsed = query::parse_runs_list(rest);
    if (auto* e = std::get_if<query::Error>(&parsed)) return error(400, e->message);
    return std::nullopt;
  }
  if (path == kRuns || path == "/runs/") return std::nullopt;
  std::string_view id;
  if (auto rest = after(path, "/api/v1/runs/"); rest && rest->ends_with(kSeries)) {
    if (auto bad = parse_window(query); std::holds_alternative<std::string>(bad))
      return error(400, std::get<std::string>(bad));
    id = rest->substr(0, rest->size() - kSeries.size());
  } else if (auto rest = after(path, "/api/v1/runs/"))
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
    if (path == kApiTotals) return totals_json(query);
    if (path == kRuns || path == "/runs/") return html(std::string(assets::runs_html()));
    if (auto id = after(path, "/api/v1/runs/"); id && id->ends_with(kSeries))
      return series_json(std::string(id->substr(0, id->size() - kSeries.size())), query);
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
  if (q.csv) return runs_csv(*reader, q);
  StoreReader::RunsPage page = reader->runs_query(q.filter, q.offset, q.limit);
  std::string body = "[";
  for (size_t i = 0; i < page.runs.size(); ++i) {
    if (i) body += ',';
    // A runs row as its recorder wrote it at the start (no sample counted yet) holds no figure: rebuilt. One that
    // carries figures of its own (an import) is listed as stored.
    if (unfinished(page.runs[i]) && page.runs[i].samples == 0) page.runs[i] = shown_unfinished(*reader, page.runs[i]);
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

PageReply RunsPages::series_json(const std::string& id, const std::string& raw) {
  const Window w = std::get<Window>(parse_window(raw));
  auto reader = open_reader(*store_);
  auto found = run_or_404(*reader, id);
  if (auto* reply = std::get_if<PageReply>(&found)) return std::move(*reply);
  const RunInfo& run = std::get<RunInfo>(found);
  ReportOptions opts;
  opts.buckets = w.buckets;
  opts.from_ms = w.from_ms;
  opts.to_ms = w.to_ms;
  PageReply r;
  r.body = chart_series_json(*reader, as_shown(*reader, run), opts).dump();
  return r;
}

PageReply RunsPages::totals_json(const std::string& raw) {
  const auto [by, rest] = split_by(raw);
  const auto q = std::get<query::RunsListQuery>(query::parse_runs_list(rest));
  auto reader = open_reader(*store_);
  struct Sum {
    size_t runs = 0, with_energy = 0, with_co2 = 0;
    double energy_j = 0, co2_g = 0;
    nlohmann::json json() const {
      return {{"runs", runs},
              {"energy_j", energy_j},
              {"energy_kwh", energy_j / 3.6e6},
              {"co2_g", co2_g},
              {"runs_with_energy", with_energy},
              {"runs_with_co2", with_co2}};
    }
    void add(const RunInfo& run, const std::optional<double>& co2) {
      ++runs;
      if (run.total_energy_j) energy_j += *run.total_energy_j, ++with_energy;
      if (co2) co2_g += *co2, ++with_co2;
    }
  };
  Sum all;
  std::map<std::string, Sum> groups;
  size_t total = 0, read = 0;
  // Large pages (the fewer, the less each store skips to reach the next) of the runs' own columns: one parse of a
  // run's summary (its carbon), and of its tags only to group by user. At most kMaxCsvRuns runs are summed, and the
  // answer says when more passed.
  for (size_t offset = 0; read < kMaxCsvRuns;) {
    StoreReader::RunsPage page = reader->runs_query(q.filter, offset, kTotalsPage);
    total = page.total;
    for (RunInfo& run : page.runs) {
      if (unfinished(run) && run.samples == 0) run = shown_unfinished(*reader, run);
      const std::optional<double> co2 = run_co2_g(run);
      all.add(run, co2);
      if (!by.empty()) {
        std::string key;
        if (by == "day" || by == "month")
          key = iso_utc_ms(run.start_ms).substr(0, by == "day" ? 10 : 7);
        else if (by == "exit")
          key = !run.end_ms ? "unfinished" : !run.exit_status ? "unknown" : *run.exit_status == 0 ? "ok" : "failed";
        else if (by == "task")
          key = run.task;
        else if (by == "host")
          key = run.host;
        else
          key = run_user(run);
        groups[key].add(run, co2);
      }
      ++read;
    }
    offset += page.runs.size();
    if (page.runs.empty() || offset >= total) break;
  }
  nlohmann::json j = all.json();
  j["by"] = by.empty() ? nlohmann::json() : nlohmann::json(by);
  j["runs_passing"] = total;
  j["truncated"] = read < total;
  nlohmann::json g = nlohmann::json::array();
  for (const auto& [key, sum] : groups) {
    nlohmann::json e = sum.json();
    e["key"] = key;
    g.push_back(std::move(e));
  }
  // Time in its order; the rest largest first.
  if (by != "day" && by != "month")
    std::stable_sort(g.begin(), g.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
      return a["energy_j"].get<double>() > b["energy_j"].get<double>();
    });
  // A thousand groups fill any table a person reads; the count says how many there were.
  j["groups_total"] = g.size();
  if (g.size() > kMaxTotalsGroups) g.erase(g.begin() + kMaxTotalsGroups, g.end());
  j["groups"] = std::move(g);
  PageReply r;
  r.body = j.dump();
  return r;
}

PageReply RunsPages::runs_csv(StoreReader& reader, const query::RunsListQuery& q) {
  // Read a page at a time (a page's runs and their JSON are what is held), written as the rows come; at most
  // kMaxCsvRuns rows, and the reply says when the filter passes more.
  const size_t want = q.limit_given ? q.limit : kMaxCsvRuns;
  std::string body = "run_id,task,host,user,start,end,duration_s,exit_status,unfinished,samples,energy_j,energy_kwh,"
                     "energy_method,co2_g,j_per_unit,work_unit,command,tags\r\n";
  size_t total = 0, written = 0;
  for (size_t offset = q.offset; written < want;) {
    const size_t chunk = std::min<size_t>(query::kMaxRunsLimit, want - written);
    StoreReader::RunsPage page = reader.runs_query(q.filter, offset, chunk);
    total = page.total;
    for (size_t i = 0; i < page.runs.size(); ++i) {
      if (unfinished(page.runs[i]) && page.runs[i].samples == 0) page.runs[i] = shown_unfinished(reader, page.runs[i]);
      const nlohmann::json j = row_json(page.runs[i], i < page.work.size() ? page.work[i] : std::vector<RunWork>{});
      const nlohmann::json& energy = j["total_energy_j"];
      std::string line;
      for (const char* key :
           {"run_id", "task", "host", "user", "start", "end", "duration_s", "exit_status", "unfinished", "samples"})
        line += csv_cell(j.value(key, nlohmann::json())) + ",";
      line += csv_cell(energy) + ",";
      line += (energy.is_number() ? csv_cell(energy.get<double>() / 3.6e6) : std::string()) + ",";
      line += csv_cell(j.value("energy_method", nlohmann::json())) + "," + csv_cell(j["co2_g"]) + ",";
      for (const char* key : {"j_per_unit", "work_unit", "command"})
        line += csv_cell(j.value(key, nlohmann::json())) + ",";
      line +=
          csv_cell(j["tags"].is_object() && !j["tags"].empty() ? nlohmann::json(j["tags"].dump()) : nlohmann::json());
      body += line + "\r\n";
      ++written;
    }
    offset += page.runs.size();
    if (page.runs.size() < chunk || offset >= total) break;
  }
  PageReply r;
  r.content_type = "text/csv; charset=utf-8";
  r.headers.emplace_back("Content-Disposition", "attachment; filename=\"wattscope-runs.csv\"");
  r.headers.emplace_back("X-Total-Count", std::to_string(total));
  if (q.offset + written < total && !q.limit_given)
    r.headers.emplace_back("X-Wattscope-Truncated", fmt::format("the first {} of {} runs", written, total));
  r.body = std::move(body);
  return r;
}

RunInfo RunsPages::shown_unfinished(StoreReader& reader, const RunInfo& stored) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    for (const auto& e : rebuilt_)
      if (e.run.run_id == stored.run_id && now - e.at < kRebuiltFor) return e.run;
  }
  RunInfo shown = as_shown(reader, stored);
  std::lock_guard lock(mu_);
  std::erase_if(rebuilt_, [&](const Rebuilt& e) { return e.run.run_id == stored.run_id || now - e.at >= kRebuiltFor; });
  if (rebuilt_.size() < kCacheEntries) rebuilt_.push_back({shown, now});
  return shown;
}

PageReply RunsPages::run_json_reply(const std::string& id) {
  auto reader = open_reader(*store_);
  auto found = run_or_404(*reader, id);
  if (auto* reply = std::get_if<PageReply>(&found)) return std::move(*reply);
  const RunInfo& run = std::get<RunInfo>(found);
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
    return not_found_page(without_store(e.what(), *reader));
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
  nlohmann::json data = build_report_data(*reader, {run}, ReportOptions{});
  data["links"] = run_links(*reader, run);
  auto page = std::make_shared<const std::string>(render_report_linked(data, plotly_url_));
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
