// Static web assets compiled into the binary (.incbin, see assets.S.in): the report opens offline, and no file needs to
// be found next to the executable at run time. plotly.js is also embedded gzip-compressed, made once at build time, so
// that `serve` never compresses a large body per request.
#pragma once

#include <string_view>

namespace wattscope::assets {
std::string_view plotly_js();       // plotly.js-dist-min, pinned in package-lock.json
std::string_view plotly_js_gzip();  // the same, `gzip -9n` at build time
std::string_view plotly_js_hash();  // 16 hex digits of its SHA-256, taken at build time
std::string_view report_template(); // web/report.html
std::string_view dashboard_html();  // web/dashboard.html
std::string_view runs_html();       // web/runs.html (issue 35)
std::string_view job_html();        // web/runs_job.html (issue 35)
} // namespace wattscope::assets
