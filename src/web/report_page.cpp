#include "web/report_page.hpp"

#include <stdexcept>

#include "web/assets.hpp"

namespace wattscope {

std::string script_safe_json(const nlohmann::json& data) {
  const std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // The JSON sits inside <script>: "</script" would end the element and "<!--" (with a "<script" after it) would
  // make the parser run past the real end tag, so no "<" may appear at all; ">" and "&" go too (HTML-safe JSON, as
  // Go's html/template writes it). U+2028/2029 are line ends to older JavaScript parsers. These bytes only occur
  // inside JSON strings, where the \u escape is the same string.
  std::string safe;
  safe.reserve(json.size() + json.size() / 64);
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '<') {
      safe += "\\u003c";
    } else if (c == '>') {
      safe += "\\u003e";
    } else if (c == '&') {
      safe += "\\u0026";
    } else if (c == '\xe2' && i + 2 < json.size() && json[i + 1] == '\x80' &&
               (json[i + 2] == '\xa8' || json[i + 2] == '\xa9')) {
      safe += json[i + 2] == '\xa8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      safe.push_back(c);
    }
  }
  return safe;
}

std::string fill_report_template(const nlohmann::json& data, bool with_plotly) {
  const std::string safe = script_safe_json(data);
  std::string html(assets::report_template());
  const std::string plotly_mark = "/*__WATTSCOPE_PLOTLY__*/", data_mark = "/*__WATTSCOPE_DATA__*/";
  const auto p = html.find(plotly_mark);
  if (p == std::string::npos) throw std::logic_error("report template lacks the plotly placeholder");
  html.replace(p, plotly_mark.size(), with_plotly ? assets::plotly_js() : std::string_view());
  const auto d = html.find(data_mark);
  if (d == std::string::npos) throw std::logic_error("report template lacks the data placeholder");
  html.replace(d, data_mark.size(), safe);
  return html;
}

} // namespace wattscope
