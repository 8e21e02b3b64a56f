// The report's page (web/report.html) filled with its data: one template for the static report and serve's compare
// view (issue 35), so both draw the comparison with the same code.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace wattscope {

// The data as JSON that is safe inside <script>: no "<", ">" or "&" (written \u003c, \u003e, \u0026), nor
// U+2028/2029, so no string in it (a task name, a tag, a command) can end the element or hide the page after it.
std::string script_safe_json(const nlohmann::json& data);
// The page with the data embedded, and plotly.js too when `with_plotly` (a page that draws no chart goes without
// its 4.6 MB). Throws std::logic_error when the template lacks a placeholder.
std::string fill_report_template(const nlohmann::json& data, bool with_plotly);

} // namespace wattscope
