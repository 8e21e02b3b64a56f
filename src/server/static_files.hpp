// The files `serve` sends as they are: the dashboard and plotly.js. Each body is compressed once (plotly.js at build
// time, the dashboard when the table is built, a few kB), never per request, and carries a strong validator so a
// browser revalidates with a 304 or, for the versioned plotly URL, never asks again.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace wattscope {

struct StaticFile {
  std::string path; // as requested: "/", "/assets/plotly-<hash>.min.js"
  std::string content_type;
  std::string cache_control; // "no-cache" (revalidate each time) or "public, max-age=31536000, immutable"
  std::string_view identity; // the body as is
  std::string_view gzip;     // the body gzip-compressed
  std::string etag;          // of the identity body, quoted; the gzip body's is etag_gzip
  std::string etag_gzip;
  std::string csp{}; // an HTML page's Content-Security-Policy (web/csp.hpp), made once; empty for the scripts
};

class StaticFiles {
public:
  // Builds the table. runs_pages: serve keeps a store (--db), so the dashboard shows its link to /runs (a serve
  // without one has no runs pages: the link is hidden, and no request finds that out). Throws std::runtime_error when
  // the dashboard lacks a placeholder.
  explicit StaticFiles(bool runs_pages = false);
  StaticFiles(const StaticFiles&) = delete;
  StaticFiles& operator=(const StaticFiles&) = delete;
  const StaticFile* find(std::string_view path) const;
  const std::string& plotly_url() const { return plotly_url_; }

private:
  std::string dashboard_, dashboard_gzip_, plotly_url_;
  std::vector<StaticFile> files_;
};

// Accept-Encoding allows gzip: "gzip" or "x-gzip" or "*" with a q-value above 0 ("gzip;q=0" refuses it).
bool accepts_gzip(std::string_view accept_encoding);
// Accept asks for OpenMetrics text: an application/openmetrics-text element with a q-value above 0, of version 1.0.0 or
// none named (Prometheus offers it first, then 0.0.1, then text/plain 0.0.4).
bool accepts_openmetrics(std::string_view accept);
// If-None-Match lists `etag` ("*" matches anything; weak comparison, so W/"x" matches "x", RFC 9110 13.1.2).
bool etag_listed(std::string_view if_none_match, std::string_view etag);
// gzip (RFC 1952) of `data` at a zlib level (9: best, 1: fastest), without a timestamp.
std::string gzip_compress(std::string_view data, int level = 9);

} // namespace wattscope
