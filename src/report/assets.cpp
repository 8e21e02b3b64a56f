#include "report/assets.hpp"

extern "C" {
extern const char wattscope_asset_plotly_begin[];
extern const char wattscope_asset_plotly_end[];
extern const char wattscope_asset_report_begin[];
extern const char wattscope_asset_report_end[];
extern const char wattscope_asset_dashboard_begin[];
extern const char wattscope_asset_dashboard_end[];
}

namespace wattscope::assets {
std::string_view plotly_js() {
  return {wattscope_asset_plotly_begin, static_cast<size_t>(wattscope_asset_plotly_end - wattscope_asset_plotly_begin)};
}
std::string_view report_template() {
  return {wattscope_asset_report_begin, static_cast<size_t>(wattscope_asset_report_end - wattscope_asset_report_begin)};
}
std::string_view dashboard_html() {
  return {wattscope_asset_dashboard_begin,
          static_cast<size_t>(wattscope_asset_dashboard_end - wattscope_asset_dashboard_begin)};
}
} // namespace wattscope::assets
