#include "report/report.hpp"

#include <cmath>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "core/metrics.hpp"
#include "core/output_file.hpp"
#include "core/time_util.hpp"
#include "pipeline/phase_view.hpp"
#include "pipeline/run_view.hpp"
#include "report/downsample.hpp"
#include "wattscope/version.hpp"
#include "web/assets.hpp"

namespace wattscope {

namespace {

struct SeriesSpec {
  std::string_view column;
  double scale; // stored value x scale = the unit shown (display_unit in the registry)
};
// The series plotted: the registry's metrics flagged kChart, in the units a paper would use.
template <class S> std::vector<SeriesSpec> charted(std::span<const MetricDef<S>> metrics) {
  std::vector<SeriesSpec> out;
  for (const auto& m : metrics)
    if (m.info.flags & kChart) out.push_back({m.info.column, m.info.display_scale});
  return out;
}
const std::vector<SeriesSpec> kGpuSeries = charted(kGpuMetrics);
const std::vector<SeriesSpec> kCpuSeries = charted(kCpuMetrics);

// What the page needs to draw a series it has no curated chart for: its name and unit, from the registry.
template <class S> nlohmann::json series_meta(std::span<const MetricDef<S>> metrics) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& m : metrics)
    if (m.info.flags & kChart)
      out[std::string(m.info.column)] = {{"display", m.info.display}, {"unit", m.info.display_unit}};
  return out;
}

// Compact numbers: time to the millisecond, values to 4 significant digits (plenty for a chart; the exact figures
// are in the cards and the table, which come from the summary).
double round_t(double t) {
  return std::round(t * 1000.0) / 1000.0;
}
double round_y(double y) {
  if (y == 0 || !std::isfinite(y)) return y;
  const double mag = std::pow(10.0, 3 - static_cast<int>(std::floor(std::log10(std::fabs(y)))));
  return std::round(y * mag) / mag;
}

nlohmann::json series_json(MinMaxDownsampler& d) {
  d.finish();
  nlohmann::json t = nlohmann::json::array(), y = nlohmann::json::array();
  for (size_t i = 0; i < d.t().size(); ++i) {
    t.push_back(round_t(d.t()[i]));
    y.push_back(round_y(d.y()[i]));
  }
  return {{"t", std::move(t)}, {"y", std::move(y)}};
}

nlohmann::json run_data(StoreReader& store, const RunInfo& run, const ReportOptions& opts) {
  const double t_end = run.end_ms ? static_cast<double>(*run.end_ms - run.start_ms) / 1000.0
                                  : static_cast<double>(run.samples) * run.interval_ms / 1000.0;
  auto t_of = [&](const Value& ts) {
    return static_cast<double>(value_int(ts).value_or(run.start_ms) - run.start_ms) / 1000.0;
  };
  int64_t rows_read = 0;

  // GPUs: one downsampler per device and series, fed while the rows stream by; total power per tick on the side.
  constexpr TableId gt = TableId::GpuSamples;
  const size_t g_ts = column_index(gt, "ts_ms"), g_tick = column_index(gt, "tick"),
               g_idx = column_index(gt, "gpu_index"), g_power = column_index(gt, "power_w");
  std::vector<size_t> g_cols;
  for (const auto& s : kGpuSeries)
    g_cols.push_back(column_index(gt, s.column));
  std::map<int64_t, std::vector<MinMaxDownsampler>> gpu;
  MinMaxDownsampler total_power(t_end, opts.buckets);
  int64_t cur_tick = -1;
  double cur_t = 0, cur_sum = 0;
  bool cur_any = false;
  auto flush_total = [&] {
    if (cur_any) total_power.add(cur_t, cur_sum);
    cur_sum = 0;
    cur_any = false;
  };
  store.scan(TableId::GpuSamples, run, [&](std::span<const Value> row) {
    ++rows_read;
    const int64_t idx = value_int(row[g_idx]).value_or(0);
    auto [it, fresh] = gpu.try_emplace(idx);
    if (fresh)
      for (size_t i = 0; i < std::size(kGpuSeries); ++i)
        it->second.emplace_back(t_end, opts.buckets);
    const double t = t_of(row[g_ts]);
    for (size_t i = 0; i < std::size(kGpuSeries); ++i)
      if (auto v = value_real(row[g_cols[i]])) it->second[i].add(t, *v * kGpuSeries[i].scale);
    const int64_t tick = value_int(row[g_tick]).value_or(0);
    if (tick != cur_tick) {
      flush_total();
      cur_tick = tick;
      cur_t = t;
    }
    if (auto p = value_real(row[g_power])) { // total GPU power per tick, whatever the charted series are
      cur_sum += *p;
      cur_any = true;
    }
  });
  flush_total();

  nlohmann::json summary = run_json(run);
  nlohmann::json gpus = nlohmann::json::array();
  for (auto& [idx, downs] : gpu) {
    nlohmann::json series = nlohmann::json::object();
    for (size_t i = 0; i < std::size(kGpuSeries); ++i)
      if (downs[i].seen() > 0) series[std::string(kGpuSeries[i].column)] = series_json(downs[i]);
    std::string name;
    for (const auto& g : summary["gpus"])
      if (g.value("index", -1) == idx) name = g.value("name", std::string());
    gpus.push_back({{"index", idx}, {"name", name}, {"series", series}});
  }

  constexpr TableId ct = TableId::CpuSamples;
  const size_t c_ts = column_index(ct, "ts_ms");
  std::vector<size_t> c_cols;
  for (const auto& s : kCpuSeries)
    c_cols.push_back(column_index(ct, s.column));
  std::vector<MinMaxDownsampler> cpu;
  for (size_t i = 0; i < std::size(kCpuSeries); ++i)
    cpu.emplace_back(t_end, opts.buckets);
  int64_t cpu_rows = 0;
  store.scan(TableId::CpuSamples, run, [&](std::span<const Value> row) {
    ++rows_read;
    ++cpu_rows;
    const double t = t_of(row[c_ts]);
    for (size_t i = 0; i < std::size(kCpuSeries); ++i)
      if (auto v = value_real(row[c_cols[i]])) cpu[i].add(t, *v * kCpuSeries[i].scale);
  });
  nlohmann::json cpu_series = nlohmann::json::object();
  for (size_t i = 0; i < std::size(kCpuSeries); ++i)
    if (cpu[i].seen() > 0) cpu_series[std::string(kCpuSeries[i].column)] = series_json(cpu[i]);

  constexpr TableId et = TableId::Events;
  const size_t e_ts = column_index(et, "ts_ms"), e_kind = column_index(et, "kind"),
               e_source = column_index(et, "source"), e_detail = column_index(et, "detail");
  nlohmann::json events = nlohmann::json::array();
  store.scan(TableId::Events, run, [&](std::span<const Value> row) {
    events.push_back({{"t", round_t(t_of(row[e_ts]))},
                      {"kind", std::string(value_text(row[e_kind]))},
                      {"source", std::string(value_text(row[e_source]))},
                      {"detail", std::string(value_text(row[e_detail]))}});
  });

  nlohmann::json total = nlohmann::json::object();
  if (total_power.seen() > 0) total = series_json(total_power);
  nlohmann::json out = {{"summary", summary},         {"gpus", gpus},           {"cpu", cpu_series},
                        {"total_gpu_power_w", total}, {"events", events},       {"samples", cpu_rows},
                        {"rows_read", rows_read},     {"buckets", opts.buckets}};
  // Issue 15: phases (with their times since run start, for the bands on the charts), work, points and the model.
  nlohmann::json ph = phase_json(load_phase_data(store, run), run);
  for (auto& p : ph["phases"]) {
    p["t0"] = round_t(static_cast<double>(p["start_ms"].get<int64_t>() - run.start_ms) / 1000.0);
    p["t1"] = round_t(static_cast<double>(p["end_ms"].get<int64_t>() - run.start_ms) / 1000.0);
  }
  out["phases"] = std::move(ph["phases"]);
  out["work"] = std::move(ph["work"]);
  out["model"] = std::move(ph["model"]);
  return out;
}

} // namespace

nlohmann::json build_report_data(StoreReader& store, const std::vector<RunInfo>& runs, const ReportOptions& opts) {
  nlohmann::json rs = nlohmann::json::array();
  for (const auto& r : runs)
    rs.push_back(run_data(store, r, opts));
  return {{"generated", iso_utc_ms(wall_now_ms())},
          {"wattscope_version", kVersion},
          {"metrics", {{"gpu", series_meta(kGpuMetrics)}, {"cpu", series_meta(kCpuMetrics)}}},
          {"source", store.describe()},
          {"assumptions",
           {{"co2_g_per_kwh", opts.co2_g_per_kwh},
            {"price_per_kwh", opts.price_per_kwh},
            {"currency", opts.currency},
            {"pue", opts.pue}}},
          {"runs", rs}};
}

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

std::string render_report(const nlohmann::json& data) {
  const std::string safe = script_safe_json(data);
  std::string html(assets::report_template());
  const std::string plotly_mark = "/*__WATTSCOPE_PLOTLY__*/", data_mark = "/*__WATTSCOPE_DATA__*/";
  const auto p = html.find(plotly_mark);
  if (p == std::string::npos) throw std::logic_error("report template lacks the plotly placeholder");
  html.replace(p, plotly_mark.size(), assets::plotly_js());
  const auto d = html.find(data_mark);
  if (d == std::string::npos) throw std::logic_error("report template lacks the data placeholder");
  html.replace(d, data_mark.size(), safe);
  return html;
}

void write_report(StoreReader& store, const std::vector<RunInfo>& runs, const ReportOptions& opts,
                  const std::string& path) {
  // Opened first: a target that will be refused (a link, a directory) is said before minutes of reading.
  OutputOptions out_opts;
  out_opts.follow_symlinks = opts.follow_symlinks;
  OutputFile out(path, out_opts);
  out.write(render_report(build_report_data(store, runs, opts)));
  out.commit();
}

} // namespace wattscope
