// The self-contained HTML report: one file per run (or several runs compared), plotly.js and the data embedded,
// no network request when opened.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accounting/footprint.hpp"

#include "core/schema.hpp"
#include "sinks/sink.hpp"
#include "web/report_page.hpp" // script_safe_json

namespace wattscope {

struct ReportOptions {
  // Carbon and cost at these rates instead of those each run was recorded with (--carbon-intensity, --energy-price,
  // --pue, ...): the run model's figures either way, with their source.
  FootprintOverride footprint;
  size_t buckets = 1000; // per series: at most 2 points per bucket
  // The charts' window (epoch ms): the buckets cut it alone, so a minute of a day-long run is drawn at the
  // resolution of a minute-long one. The figures and tables stay the whole run's.
  std::optional<int64_t> from_ms, to_ms;
  bool follow_symlinks = false; // write_report through a symbolic link at the path (else refused, naming it)
};

// Reads the runs' samples and builds the report's data (summaries, downsampled series, events).
nlohmann::json build_report_data(StoreReader& store, const std::vector<RunInfo>& runs, const ReportOptions& opts);
// The charted series of one run alone ("gpus", "cpu", "total_gpu_power_w", "window"), for the window in `opts`: what
// serve answers when a run page is zoomed (one pass over the run's GPU and CPU samples, memory per bucket).
nlohmann::json chart_series_json(StoreReader& store, const RunInfo& run, const ReportOptions& opts);
// The HTML page with plotly.js and the data embedded.
std::string render_report(const nlohmann::json& data);
// issue 35: the same page for `serve`, with plotly.js linked from `plotly_url` (cached by the browser) instead of
// embedded.
std::string render_report_linked(const nlohmann::json& data, std::string_view plotly_url);
// Both, written to `path` by the output policy (core/output_file.hpp): a regular file atomically (a temporary
// renamed over it), "-" to standard output, a character device or FIFO in place; a symbolic link is refused unless
// opts.follow_symlinks. Throws std::runtime_error with the reason.
void write_report(StoreReader& store, const std::vector<RunInfo>& runs, const ReportOptions& opts,
                  const std::string& path);

} // namespace wattscope
