// Static web assets compiled into the binary (.incbin, see assets.S): the report opens offline, and no file needs to
// be found next to the executable at run time.
#pragma once

#include <string_view>

namespace wattscope::assets {
std::string_view plotly_js();       // plotly.js-dist-min, pinned in package-lock.json
std::string_view report_template(); // web/report.html
std::string_view dashboard_html();  // web/dashboard.html
} // namespace wattscope::assets
