#include "web/assets.hpp"

#include <cstddef>

extern "C" {
extern const char wattscope_asset_plotly_begin[];
extern const char wattscope_asset_plotly_end[];
extern const char wattscope_asset_plotly_gz_begin[];
extern const char wattscope_asset_plotly_gz_end[];
extern const char wattscope_asset_report_begin[];
extern const char wattscope_asset_report_end[];
extern const char wattscope_asset_dashboard_begin[];
extern const char wattscope_asset_dashboard_end[];
extern const char wattscope_asset_runs_begin[]; // issue 35
extern const char wattscope_asset_runs_end[];
extern const char wattscope_asset_job_begin[];
extern const char wattscope_asset_job_end[];
}

namespace wattscope::assets {
namespace {
std::string_view span(const char* begin, const char* end) {
  return {begin, static_cast<size_t>(end - begin)};
}
} // namespace
std::string_view plotly_js() {
  return span(wattscope_asset_plotly_begin, wattscope_asset_plotly_end);
}
std::string_view plotly_js_gzip() {
  return span(wattscope_asset_plotly_gz_begin, wattscope_asset_plotly_gz_end);
}
std::string_view plotly_js_hash() {
  return WATTSCOPE_PLOTLY_HASH;
}
std::string_view report_template() {
  return span(wattscope_asset_report_begin, wattscope_asset_report_end);
}
std::string_view dashboard_html() {
  return span(wattscope_asset_dashboard_begin, wattscope_asset_dashboard_end);
}
std::string_view runs_html() {
  return span(wattscope_asset_runs_begin, wattscope_asset_runs_end);
}
std::string_view job_html() {
  return span(wattscope_asset_job_begin, wattscope_asset_job_end);
}
} // namespace wattscope::assets
