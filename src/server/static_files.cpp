#include "server/static_files.hpp"

#include <cstdint>
#include <stdexcept>

#include <fmt/format.h>
#include <zlib.h>

#include "web/assets.hpp"
#include "web/csp.hpp"

namespace wattscope {

namespace {

// The dashboard names plotly.js by this placeholder; the table puts in the versioned URL.
constexpr std::string_view kPlotlyPlaceholder = "{{plotly.js}}";
// The runs link's attribute: "hidden" where serve has no store.
constexpr std::string_view kRunsLinkPlaceholder = "{{runs-link}}";
constexpr std::string_view kImmutable = "public, max-age=31536000, immutable";

std::string fnv1a64_hex(std::string_view data) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", h);
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// Calls f(element) for each comma-separated element of a header value, trimmed, empty ones skipped.
template <class F> void each_element(std::string_view list, F f) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view e = trim_ows(list.substr(0, comma));
    if (!e.empty()) f(e);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

} // namespace

bool accepts_gzip(std::string_view accept_encoding) {
  int gzip = -1, star = -1; // -1 unnamed, 0 refused, 1 accepted
  each_element(accept_encoding, [&](std::string_view e) {
    const size_t semi = e.find(';');
    const std::string_view coding = trim_ows(e.substr(0, semi));
    bool refused = false;
    if (semi != std::string_view::npos) {
      std::string_view params = e.substr(semi + 1);
      // Only "q=0", "q=0.", "q=0.0", "q=0.00", "q=0.000" refuse (RFC 9110 12.4.2); anything else is a positive weight.
      while (!params.empty()) {
        const size_t next = params.find(';');
        const std::string_view p = trim_ows(params.substr(0, next));
        if (p.size() >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
          const std::string_view v = trim_ows(p.substr(2));
          refused = !v.empty() && v[0] == '0' && v.find_first_not_of("0.", 0) == std::string_view::npos;
        }
        if (next == std::string_view::npos) break;
        params.remove_prefix(next + 1);
      }
    }
    if (iequals(coding, "gzip") || iequals(coding, "x-gzip"))
      gzip = refused ? 0 : 1;
    else if (coding == "*")
      star = refused ? 0 : 1;
  });
  return gzip == 1 || (gzip == -1 && star == 1);
}

bool accepts_openmetrics(std::string_view accept) {
  bool yes = false;
  each_element(accept, [&](std::string_view e) {
    const size_t semi = e.find(';');
    if (!iequals(trim_ows(e.substr(0, semi)), "application/openmetrics-text")) return;
    bool refused = false, other_version = false;
    std::string_view params = semi == std::string_view::npos ? std::string_view() : e.substr(semi + 1);
    while (!params.empty()) {
      const size_t next = params.find(';');
      const std::string_view p = trim_ows(params.substr(0, next));
      if (p.size() >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
        const std::string_view v = trim_ows(p.substr(2));
        refused = !v.empty() && v[0] == '0' && v.find_first_not_of("0.", 0) == std::string_view::npos;
      } else if (p.starts_with("version=")) {
        other_version = p.substr(8) != "1.0.0";
      }
      if (next == std::string_view::npos) break;
      params.remove_prefix(next + 1);
    }
    yes = yes || (!refused && !other_version);
  });
  return yes;
}

bool etag_listed(std::string_view if_none_match, std::string_view etag) {
  bool found = false;
  each_element(if_none_match, [&](std::string_view e) {
    if (e == "*") found = true;
    if (e.size() > 2 && (e[0] == 'W' || e[0] == 'w') && e[1] == '/') e.remove_prefix(2);
    if (e == etag) found = true;
  });
  return found;
}

std::string gzip_compress(std::string_view data, int level) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip header and trailer; zlib writes no timestamp (mtime 0) unless asked to.
  if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("zlib: deflateInit2 failed");
  std::string out(deflateBound(&zs, static_cast<uLong>(data.size())), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("zlib: deflate did not finish");
  return out;
}

StaticFiles::StaticFiles(bool runs_pages) {
  const std::string_view plotly = assets::plotly_js();
  const std::string plotly_hash(assets::plotly_js_hash()); // hashed at build time: start-up reads none of its pages
  plotly_url_ = "/assets/plotly-" + plotly_hash + ".min.js";
  dashboard_ = std::string(assets::dashboard_html());
  const size_t at = dashboard_.find(kPlotlyPlaceholder);
  if (at == std::string::npos)
    throw std::runtime_error(fmt::format("web/dashboard.html has no {} placeholder for plotly.js", kPlotlyPlaceholder));
  dashboard_.replace(at, kPlotlyPlaceholder.size(), plotly_url_);
  // Every runs link (the navigation's and the header's).
  size_t links = 0;
  for (size_t link = dashboard_.find(kRunsLinkPlaceholder); link != std::string::npos;
       link = dashboard_.find(kRunsLinkPlaceholder, link), ++links)
    dashboard_.replace(link, kRunsLinkPlaceholder.size(), runs_pages ? "" : "hidden");
  if (links == 0)
    throw std::runtime_error(fmt::format("web/dashboard.html has no {} placeholder", kRunsLinkPlaceholder));
  dashboard_gzip_ = gzip_compress(dashboard_);
  const std::string dash_hash = fnv1a64_hex(dashboard_);
  files_.push_back({"/", "text/html; charset=utf-8", "no-cache", dashboard_, dashboard_gzip_, '"' + dash_hash + '"',
                    '"' + dash_hash + ".gz\"", content_security_policy(dashboard_)});
  const StaticFile js{plotly_url_,
                      "application/javascript; charset=utf-8",
                      std::string(kImmutable),
                      plotly,
                      assets::plotly_js_gzip(),
                      '"' + plotly_hash + '"',
                      '"' + plotly_hash + ".gz\""};
  files_.push_back(js);
  // The unversioned name, for anything that still asks for it: same body, revalidated each time.
  StaticFile plain = js;
  plain.path = "/assets/plotly.min.js";
  plain.cache_control = "no-cache";
  files_.push_back(plain);
}

const StaticFile* StaticFiles::find(std::string_view path) const {
  for (const auto& f : files_)
    if (f.path == path) return &f;
  return nullptr;
}

} // namespace wattscope
