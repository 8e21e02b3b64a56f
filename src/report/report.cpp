#include "report/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "core/metrics.hpp"
#include "core/output_file.hpp"
#include "core/time_util.hpp"
#include "report/downsample.hpp"
#include "runs/comparison.hpp"
#include "runs/phase_view.hpp"
#include "runs/run_model.hpp"
#include "runs/run_view.hpp"
#include "wattscope/version.hpp"
#include "web/assets.hpp"
#include "web/report_page.hpp"

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

nlohmann::json process_data(StoreReader& store, const RunInfo& run, const ReportOptions& opts, bool cpu_energy_known);

double seconds_between(int64_t from_ms, int64_t to_ms) {
  return static_cast<double>(to_ms - from_ms) / 1000.0;
}

// The charted series of one run, downsampled while the run model's one pass over its samples streams by: per GPU
// and series, the CPU's series, and the total GPU power per tick.
class ChartSeries {
public:
  ChartSeries(const RunInfo& run, const ReportOptions& opts)
      : run_(run), buckets_(opts.buckets),
        t_end_(run.end_ms ? seconds_between(run.start_ms, *run.end_ms)
                          : static_cast<double>(run.samples) * run.interval_ms / 1000.0),
        w_begin_(opts.from_ms ? std::max(0.0, seconds_between(run.start_ms, *opts.from_ms)) : 0.0),
        w_end_(opts.to_ms ? seconds_between(run.start_ms, *opts.to_ms) : t_end_), windowed_(opts.from_ms || opts.to_ms),
        total_power_(series()) {
    for (size_t i = 0; i < std::size(kCpuSeries); ++i)
      cpu_.push_back(series());
  }
  double t_end() const { return t_end_; }
  // The window since the run's start, when the charts have one.
  nlohmann::json window_json() const {
    if (!windowed_) return nullptr;
    return {{"from_s", round_t(w_begin_)},
            {"to_s", round_t(w_end_)},
            {"from", iso_utc_ms(run_.start_ms + static_cast<int64_t>(std::llround(w_begin_ * 1000)))},
            {"to", iso_utc_ms(run_.start_ms + static_cast<int64_t>(std::llround(w_end_ * 1000)))},
            {"buckets", buckets_}};
  }

  void gpu(std::span<const Value> row) {
    constexpr TableId gt = TableId::GpuSamples;
    static const size_t g_ts = column_index(gt, "ts_ms"), g_tick = column_index(gt, "tick"),
                        g_idx = column_index(gt, "gpu_index"), g_power = column_index(gt, "power_w"),
                        g_energy = column_index(gt, "energy_j");
    static const std::vector<size_t> g_cols = columns_of(gt, kGpuSeries);
    ++rows_read_;
    const int64_t idx = value_int(row[g_idx]).value_or(0);
    if (auto e = value_real(row[g_energy])) energy_edges_[idx].add(t_of(row[g_ts]), *e);
    auto [it, fresh] = gpu_.try_emplace(idx);
    if (fresh)
      for (size_t i = 0; i < std::size(kGpuSeries); ++i)
        it->second.push_back(series());
    const double t = t_of(row[g_ts]);
    for (size_t i = 0; i < std::size(kGpuSeries); ++i)
      if (auto v = value_real(row[g_cols[i]])) it->second[i].add(t, *v * kGpuSeries[i].scale);
    const int64_t tick = value_int(row[g_tick]).value_or(0);
    if (tick != cur_tick_) {
      flush_total();
      cur_tick_ = tick;
      cur_t_ = t;
    }
    if (auto p = value_real(row[g_power])) { // total GPU power per tick, whatever the charted series are
      cur_sum_ += *p;
      cur_any_ = true;
    }
  }

  void cpu(std::span<const Value> row) {
    constexpr TableId ct = TableId::CpuSamples;
    static const size_t c_ts = column_index(ct, "ts_ms");
    static const std::vector<size_t> c_cols = columns_of(ct, kCpuSeries);
    ++rows_read_;
    ++cpu_rows_;
    const double t = t_of(row[c_ts]);
    for (size_t i = 0; i < std::size(kCpuSeries); ++i)
      if (auto v = value_real(row[c_cols[i]])) cpu_[i].add(t, *v * kCpuSeries[i].scale);
  }

  // "gpus", "cpu", "total_gpu_power_w", "samples", "rows_read" into the run's data; GPU names from its summary.
  void finish_into(nlohmann::json& out, const nlohmann::json& summary) {
    flush_total();
    nlohmann::json gpus = nlohmann::json::array();
    for (auto& [idx, downs] : gpu_) {
      nlohmann::json series = nlohmann::json::object();
      for (size_t i = 0; i < std::size(kGpuSeries); ++i)
        if (downs[i].seen() > 0) series[std::string(kGpuSeries[i].column)] = series_json(downs[i]);
      std::string name;
      for (const auto& g : summary["gpus"])
        if (g.value("index", -1) == idx) name = g.value("name", std::string());
      gpus.push_back({{"index", idx}, {"name", name}, {"series", series}});
    }
    nlohmann::json cpu_series = nlohmann::json::object();
    for (size_t i = 0; i < std::size(kCpuSeries); ++i)
      if (cpu_[i].seen() > 0) cpu_series[std::string(kCpuSeries[i].column)] = series_json(cpu_[i]);
    out["gpus"] = std::move(gpus);
    out["cpu"] = std::move(cpu_series);
    out["total_gpu_power_w"] = total_power_.seen() > 0 ? series_json(total_power_) : nlohmann::json::object();
    out["samples"] = cpu_rows_;
    out["rows_read"] = rows_read_;
  }

  // GPU energy per unit of work over time (an LLM server's J per output token, docs/inference.md): the GPUs' energy
  // in each of up to 120 equal slices of the run over the work reported in it. A slice is at least two sampling
  // intervals wide, so a scrape's tokens (reported at its end) rarely fall in the slice after theirs. Null where a
  // slice has no work, and for the first and last slices with work.
  nlohmann::json energy_per_unit(const std::vector<WorkRecord>& work, const std::string& unit) const {
    std::vector<double> amount(kWorkSlices, 0.0);
    bool any = false;
    for (const auto& w : work)
      if (w.unit == unit && w.amount > 0) {
        const double t = seconds_between(run_.start_ms, w.ts_ms);
        amount[std::min<size_t>(kWorkSlices - 1, static_cast<size_t>(std::max(0.0, t) / slice_s()))] += w.amount;
        any = true;
      }
    if (!any || energy_edges_.empty()) return nlohmann::json();
    // The first and the last slice with work are partly outside the time it was counted over (before the engine's
    // first answer, after its last): their energy would be over only part of their tokens. Left out.
    const auto first = std::find_if(amount.begin(), amount.end(), [](double a) { return a > 0; });
    const auto last = std::find_if(amount.rbegin(), amount.rend(), [](double a) { return a > 0; });
    *first = 0;
    *last = 0;
    nlohmann::json t = nlohmann::json::array(), y = nlohmann::json::array();
    for (size_t k = 0; k < kWorkSlices && (k + 1) * slice_s() <= t_end_ + slice_s(); ++k) {
      std::optional<double> joules = 0.0;
      for (const auto& [idx, edges] : energy_edges_) {
        const auto a = edges.at(k), b = edges.at(k + 1);
        if (!a || !b) joules.reset();
        if (joules) *joules += *b - *a;
      }
      t.push_back(round_t((static_cast<double>(k) + 0.5) * slice_s()));
      y.push_back(joules && amount[k] > 0 ? nlohmann::json(round_y(*joules / amount[k])) : nlohmann::json());
    }
    return {{"unit", unit}, {"what", "GPU energy"}, {"t", std::move(t)}, {"y", std::move(y)}};
  }

private:
  static constexpr size_t kWorkSlices = 120;
  double slice_s() const {
    return std::max({t_end_ / static_cast<double>(kWorkSlices), 2 * run_.interval_ms / 1000.0, 1e-3});
  }
  // One GPU's cumulative energy at the slice edges, interpolated between its rows as they stream by (O(slices)).
  struct EnergyEdges {
    const ChartSeries* owner = nullptr;
    std::vector<double> at_edge;
    double last_t = -1, last_e = 0;
    void add(double t, double e) {
      const double w = owner->slice_s();
      while (at_edge.size() <= kWorkSlices && static_cast<double>(at_edge.size()) * w <= t) {
        const double edge = static_cast<double>(at_edge.size()) * w;
        at_edge.push_back(last_t < 0 || t <= last_t ? e : last_e + (e - last_e) * (edge - last_t) / (t - last_t));
      }
      last_t = t;
      last_e = e;
    }
    std::optional<double> at(size_t k) const {
      return k < at_edge.size() ? std::optional<double>(at_edge[k]) : std::nullopt;
    }
  };
  struct EnergyEdgeMap : std::map<int64_t, EnergyEdges> {
    const ChartSeries* owner = nullptr;
    EnergyEdges& operator[](int64_t idx) {
      auto [it, fresh] = try_emplace(idx);
      if (fresh) it->second.owner = owner;
      return it->second;
    }
  };
  EnergyEdgeMap energy_edges_{{}, this};
  MinMaxDownsampler series() const {
    return windowed_ ? MinMaxDownsampler(w_begin_, w_end_, buckets_) : MinMaxDownsampler(t_end_, buckets_);
  }
  static std::vector<size_t> columns_of(TableId t, const std::vector<SeriesSpec>& specs) {
    std::vector<size_t> cols;
    for (const auto& s : specs)
      cols.push_back(column_index(t, s.column));
    return cols;
  }
  double t_of(const Value& ts) const { return seconds_between(run_.start_ms, value_int(ts).value_or(run_.start_ms)); }
  void flush_total() {
    if (cur_any_) total_power_.add(cur_t_, cur_sum_);
    cur_sum_ = 0;
    cur_any_ = false;
  }

  const RunInfo& run_;
  const size_t buckets_;
  const double t_end_;
  const double w_begin_, w_end_;
  const bool windowed_;
  std::map<int64_t, std::vector<MinMaxDownsampler>> gpu_;
  std::vector<MinMaxDownsampler> cpu_;
  MinMaxDownsampler total_power_;
  int64_t cur_tick_ = -1;
  double cur_t_ = 0, cur_sum_ = 0;
  bool cur_any_ = false;
  int64_t rows_read_ = 0, cpu_rows_ = 0;
};

// Phases with their times since run start, for the bands on the charts; an open one (no end stored yet) reaches to
// the end of the data.
nlohmann::json phases_on_charts(nlohmann::json phases, const RunInfo& run, double t_end) {
  for (auto& p : phases) {
    p["t0"] = round_t(seconds_between(run.start_ms, p["start_ms"].get<int64_t>()));
    p["t1"] =
        p["end_ms"].is_number() ? round_t(seconds_between(run.start_ms, p["end_ms"].get<int64_t>())) : round_t(t_end);
  }
  return phases;
}

// The advice as the run model has it (show --json's), with each item's time range since run start.
nlohmann::json advice_on_charts(const std::vector<advice::Item>& items, const RunInfo& run) {
  nlohmann::json out = advice::to_json(items);
  for (auto& a : out) {
    int64_t from = 0, to = 0;
    if (a["evidence"].contains("from") && parse_iso_utc_ms(a["evidence"]["from"].get<std::string>(), from) &&
        parse_iso_utc_ms(a["evidence"]["to"].get<std::string>(), to)) {
      a["t0"] = round_t(seconds_between(run.start_ms, from));
      a["t1"] = round_t(seconds_between(run.start_ms, to));
    }
  }
  return out;
}

// One run's part of the report: its model (figures, phases, work, advice, events), read in one pass that also
// feeds the charts, and its processes.
RunModel run_data(StoreReader& store, const RunInfo& run, const ReportOptions& opts, nlohmann::json& out) {
  ChartSeries charts(run, opts);
  RunModel m = load_run_model(store, run,
                              {.advice = true,
                               .events = true,
                               .gpu_sample = [&](std::span<const Value> row) { charts.gpu(row); },
                               .cpu_sample = [&](std::span<const Value> row) { charts.cpu(row); },
                               .footprint = opts.footprint});
  const nlohmann::json summary = m.summary_json();
  out = nlohmann::json::object();
  charts.finish_into(out, summary);
  nlohmann::json events = nlohmann::json::array();
  for (const Event& e : m.events)
    events.push_back({{"t", round_t(seconds_between(run.start_ms, e.ts_ms))},
                      {"kind", e.kind},
                      {"source", e.source},
                      {"detail", e.detail}});
  out["events"] = std::move(events);
  out["buckets"] = opts.buckets;
  out["window"] = charts.window_json();
  nlohmann::json ph = phase_json(m.phases, m.run, m.units, &m.footprint);
  out["phases"] = phases_on_charts(std::move(ph["phases"]), run, charts.t_end());
  out["work"] = std::move(ph["work"]);
  if (auto per = charts.energy_per_unit(m.phases.work, "output_tokens"); !per.is_null())
    out["energy_per_token"] = std::move(per);
  out["model"] = std::move(ph["model"]);
  // A run that measured no CPU energy has no CPU share of it.
  const nlohmann::json& cpu_sum = summary["cpu"];
  const bool cpu_energy_known =
      !cpu_sum.is_object() || !cpu_sum.contains("energy_j") || cpu_sum["energy_j"].is_number();
  out["processes"] = process_data(store, run, opts, cpu_energy_known);
  out["advice"] = advice_on_charts(*m.advice, run);
  out["advice_step_s"] = m.advice_step_json();
  out["summary"] = summary;
  return m;
}

// ---- attribution (issue 13): the run's processes, a table and power by process over time ----
// Power by process is drawn in watts from the stored attributed energy (cpu_energy_j, and energy_j per GPU, both since
// the run started, one row per process scan). Between two rows of a process, its power is the energy between them over
// the time between them: a step function over the scan intervals. A process's first row carries what was attributed to
// it since the scan before (or the run's start), so its step starts there. For display the step functions are averaged
// over cells, weighted by time: the scan intervals themselves while there are at most 500 of them, else 500 equal cells
// over the scanned span. Every cell lies inside that span, so a value is always energy over the time it was used in
// (never over a width it does not fill, issue 29), the stacked areas sum to the power attributed to the processes at
// every point, and they integrate to the table's energy. The 8 largest processes by energy are drawn on their own, the
// rest as "other".
// The time axis of power by process: the scan times (they say where the step of a process's first row begins) and
// the cells they are cut into (the scan intervals, or equal cells past max_cells).
struct ProcessCells {
  std::vector<double> scans;
  std::vector<double> edges;
  size_t max_cells = 0;
  size_t count() const { return edges.size() > 1 ? edges.size() - 1 : 0; }
  // The cell that begins at the edge before `it`.
  size_t cell(std::vector<double>::const_iterator it) const {
    return std::min(count() - 1, static_cast<size_t>(std::max<std::ptrdiff_t>(1, it - edges.cbegin()) - 1));
  }
  // Where a process's first step begins: the scan before its first row (or the run's start).
  double scan_before(double t) const {
    const auto it = std::lower_bound(scans.begin(), scans.end(), t);
    return it == scans.begin() ? 0.0 : *std::prev(it);
  }
};

double secs_since(const RunInfo& run, const Value& ts) {
  return std::max(0.0, seconds_between(run.start_ms, value_int(ts).value_or(run.start_ms)));
}

ProcessCells process_cells(StoreReader& store, const RunInfo& run, const ReportOptions& opts) {
  constexpr TableId st = TableId::ProcessSamples, gt = TableId::ProcessGpuSamples;
  const size_t s_ts = column_index(st, "ts_ms"), s_cpu = column_index(st, "cpu_energy_j");
  const size_t q_ts = column_index(gt, "ts_ms"), q_j = column_index(gt, "energy_j");
  ProcessCells c;
  // Rows come in tick order, so consecutive duplicates are most of them.
  auto note_scan = [&](double t) {
    if (c.scans.empty() || c.scans.back() != t) c.scans.push_back(t);
  };
  store.scan(st, run, [&](std::span<const Value> row) {
    if (!is_null(row[s_cpu])) note_scan(secs_since(run, row[s_ts]));
  });
  store.scan(gt, run, [&](std::span<const Value> row) {
    if (!is_null(row[q_j])) note_scan(secs_since(run, row[q_ts]));
  });
  std::sort(c.scans.begin(), c.scans.end());
  c.scans.erase(std::unique(c.scans.begin(), c.scans.end()), c.scans.end());
  c.max_cells = std::max<size_t>(1, std::min<size_t>(opts.buckets, 500));
  if (c.scans.empty()) return c;
  if (c.scans.size() <= c.max_cells) {
    if (c.scans.front() > 0) c.edges.push_back(0);
    c.edges.insert(c.edges.end(), c.scans.begin(), c.scans.end());
  } else {
    for (size_t i = 0; i <= c.max_cells; ++i)
      c.edges.push_back(c.scans.back() * static_cast<double>(i) / static_cast<double>(c.max_cells));
  }
  return c;
}

struct Proc {
  std::string comm, unit;
  bool named = false;
  OptF cpu_j;                      // the latest cpu_energy_j; missing when no row had one
  std::map<int64_t, double> gpu_j; // per GPU, the latest energy_j
  OptI peak_rss;
  // Memory held on every GPU together: the most at any one scan, and the scan being summed. Rows come in time order
  // (every store scans samples so), so a process's rows of one scan all come before those of its next: one running
  // sum is enough, and a week of scans costs nothing.
  OptI peak_gpu_mem;
  std::optional<int64_t> mem_ts;
  int64_t mem_sum = 0;
  void add_gpu_mem(int64_t ts, int64_t bytes) {
    if (mem_ts != ts) mem_ts = ts, mem_sum = 0;
    if (__builtin_add_overflow(mem_sum, bytes, &mem_sum)) mem_sum = bytes > 0 ? INT64_MAX : INT64_MIN; // a damaged row
    if (!peak_gpu_mem || mem_sum > *peak_gpu_mem) peak_gpu_mem = mem_sum;
  }
  double cpu_t = -1; // time of the latest cpu_energy_j (-1: none yet)
  std::map<int64_t, double> gpu_t;
  std::vector<double> cell_j; // energy per cell
  double energy() const {
    double e = cpu_j.value_or(0);
    for (const auto& [i, j] : gpu_j)
      e += j;
    return e;
  }
};

// Each process's energy, read from the three process tables and spread over the cells.
class ProcessEnergy {
public:
  ProcessEnergy(const RunInfo& run, const ProcessCells& cells) : run_(run), cells_(cells) {}

  void read(StoreReader& store) {
    constexpr TableId pt = TableId::Processes, st = TableId::ProcessSamples, gt = TableId::ProcessGpuSamples;
    const size_t p_pid = column_index(pt, "pid"), p_start = column_index(pt, "start_time"),
                 p_comm = column_index(pt, "comm"), p_unit = column_index(pt, "unit");
    store.scan(pt, run_, [&](std::span<const Value> row) {
      Proc& p = get({value_int(row[p_pid]).value_or(0), value_int(row[p_start]).value_or(0)});
      p.comm = std::string(value_text(row[p_comm]));
      p.unit = std::string(value_text(row[p_unit]));
      p.named = true;
    });
    const size_t s_pid = column_index(st, "pid"), s_start = column_index(st, "start_time"),
                 s_ts = column_index(st, "ts_ms"), s_rss = column_index(st, "rss_bytes"),
                 s_cpu = column_index(st, "cpu_energy_j");
    store.scan(st, run_, [&](std::span<const Value> row) {
      Proc& p = get({value_int(row[s_pid]).value_or(0), value_int(row[s_start]).value_or(0)});
      if (auto r = value_int(row[s_rss]); r && (!p.peak_rss || *r > *p.peak_rss)) p.peak_rss = r;
      if (auto j = value_real(row[s_cpu])) {
        const double t = secs_since(run_, row[s_ts]);
        spread(p, p.cpu_t >= 0 ? p.cpu_t : cells_.scan_before(t), t, *j - p.cpu_j.value_or(0));
        p.cpu_j = std::max(p.cpu_j.value_or(0), *j);
        p.cpu_t = t;
      }
    });
    const size_t q_pid = column_index(gt, "pid"), q_start = column_index(gt, "start_time"),
                 q_ts = column_index(gt, "ts_ms"), q_gpu = column_index(gt, "gpu_index"),
                 q_mem = column_index(gt, "mem_used_bytes"), q_j = column_index(gt, "energy_j");
    store.scan(gt, run_, [&](std::span<const Value> row) {
      Proc& p = get({value_int(row[q_pid]).value_or(0), value_int(row[q_start]).value_or(0)});
      const int64_t ts = value_int(row[q_ts]).value_or(run_.start_ms);
      const int64_t gpu = value_int(row[q_gpu]).value_or(0);
      if (auto m = value_int(row[q_mem])) p.add_gpu_mem(ts, *m);
      if (auto j = value_real(row[q_j])) {
        const double t = secs_since(run_, row[q_ts]);
        auto [last_t, fresh] = p.gpu_t.try_emplace(gpu, 0.0);
        double& last = p.gpu_j[gpu];
        spread(p, fresh ? cells_.scan_before(t) : last_t->second, t, *j - last);
        last = std::max(last, *j);
        last_t->second = t;
      }
    });
  }

  // Largest energy first.
  std::vector<std::pair<double, const std::pair<const ProcessId, Proc>*>> ranked() const {
    std::vector<std::pair<double, const std::pair<const ProcessId, Proc>*>> rank;
    for (const auto& e : procs_)
      rank.emplace_back(e.second.energy(), &e);
    std::sort(rank.begin(), rank.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    return rank;
  }
  size_t size() const { return procs_.size(); }

private:
  Proc& get(const ProcessId& id) {
    Proc& p = procs_[id];
    if (p.cell_j.size() != cells_.count()) p.cell_j.assign(cells_.count(), 0.0);
    return p;
  }
  // The energy of one step, from t0 to t1, spread over the cells it overlaps in proportion to the time in each.
  void spread(Proc& p, double t0, double t1, double joules) const {
    const size_t cells = cells_.count();
    const auto& edges = cells_.edges;
    if (cells == 0 || !(joules > 0)) return;
    t1 = std::clamp(t1, edges.front(), edges.back());
    t0 = std::clamp(t0, edges.front(), t1);
    if (t1 <= t0) { // a step of no length (a scan at the run's very start): its energy goes in the cell it ends
      p.cell_j[cells_.cell(std::lower_bound(edges.cbegin(), edges.cend(), t1))] += joules;
      return;
    }
    for (size_t c = cells_.cell(std::upper_bound(edges.cbegin(), edges.cend(), t0)); c < cells && edges[c] < t1; ++c) {
      const double overlap = std::min(t1, edges[c + 1]) - std::max(t0, edges[c]);
      if (overlap > 0) p.cell_j[c] += joules * overlap / (t1 - t0);
    }
  }

  const RunInfo& run_;
  const ProcessCells& cells_;
  std::map<ProcessId, Proc> procs_;
};

using Ranked = std::vector<std::pair<double, const std::pair<const ProcessId, Proc>*>>;

// The table: the largest processes by energy, with their peak memory.
nlohmann::json process_table(const Ranked& rank, bool cpu_energy_known) {
  constexpr size_t kTableRows = 50;
  nlohmann::json table = nlohmann::json::array();
  for (size_t i = 0; i < rank.size() && i < kTableRows; ++i) {
    const auto& [id, p] = *rank[i].second;
    const OptI& peak_gpu_mem = p.peak_gpu_mem;
    double gpu = 0;
    for (const auto& [g, j] : p.gpu_j)
      gpu += j;
    // No CPU energy was measured (nor estimated) in the run: a process's share of it is unknown, not 0
    const bool cpu_known = cpu_energy_known && p.cpu_j.has_value();
    table.push_back({{"pid", id.pid},
                     {"start_time", id.start_time},
                     {"comm", p.named ? nlohmann::json(p.comm) : nlohmann::json()},
                     {"unit", p.unit.empty() ? nlohmann::json() : nlohmann::json(p.unit)},
                     {"cpu_energy_j", cpu_known ? nlohmann::json(*p.cpu_j) : nlohmann::json()},
                     {"gpu_energy_j", p.gpu_j.empty() ? nlohmann::json() : nlohmann::json(gpu)},
                     {"peak_rss_bytes", p.peak_rss ? nlohmann::json(*p.peak_rss) : nlohmann::json()},
                     {"peak_gpu_mem_bytes", peak_gpu_mem ? nlohmann::json(*peak_gpu_mem) : nlohmann::json()}});
  }
  return table;
}

// The chart: one point per cell, at its middle, in watts (the cell's energy over the cell's width); the 8 largest
// processes on their own, the rest as "other".
nlohmann::json process_power(const Ranked& rank, const ProcessCells& cells) {
  constexpr size_t kChartProcesses = 8;
  const size_t n = cells.count();
  nlohmann::json t = nlohmann::json::array(), edges_json = nlohmann::json::array();
  std::vector<double> widths;
  for (size_t c = 0; c < n; ++c) {
    t.push_back(round_t((cells.edges[c] + cells.edges[c + 1]) / 2));
    widths.push_back(cells.edges[c + 1] - cells.edges[c]);
  }
  for (double e : cells.edges)
    edges_json.push_back(round_t(e));
  auto watts = [&](const std::vector<double>& cell_j) {
    nlohmann::json y = nlohmann::json::array();
    for (size_t c = 0; c < n; ++c)
      y.push_back(widths[c] > 0 ? round_y(cell_j[c] / widths[c]) : 0.0);
    return y;
  };
  nlohmann::json series = nlohmann::json::array();
  std::vector<double> other(n, 0.0);
  bool any_other = false;
  for (size_t i = 0; i < rank.size(); ++i) {
    const auto& [id, p] = *rank[i].second;
    if (i >= kChartProcesses) {
      for (size_t c = 0; c < n; ++c)
        other[c] += p.cell_j[c];
      any_other = any_other || rank[i].first > 0;
      continue;
    }
    series.push_back({{"name", fmt::format("{} ({})", p.named ? p.comm : "pid", id.pid)}, {"y", watts(p.cell_j)}});
  }
  if (any_other)
    series.push_back(
        {{"name", fmt::format("other ({} processes)", rank.size() - kChartProcesses)}, {"y", watts(other)}});
  std::vector<double> sorted_widths = widths;
  std::sort(sorted_widths.begin(), sorted_widths.end());
  const double step_s = sorted_widths.empty() ? 0.0 : sorted_widths[sorted_widths.size() / 2];
  return {{"t", t},
          {"edges", edges_json},
          {"step_s", round_y(step_s)},
          {"cells", cells.scans.size() <= cells.max_cells ? "scan intervals" : "equal cells"},
          {"series", series}};
}

nlohmann::json process_data(StoreReader& store, const RunInfo& run, const ReportOptions& opts, bool cpu_energy_known) {
  const ProcessCells cells = process_cells(store, run, opts);
  ProcessEnergy energy(run, cells);
  energy.read(store);
  if (energy.size() == 0) return nullptr;
  const Ranked rank = energy.ranked();
  return {{"table", process_table(rank, cpu_energy_known)},
          {"total", energy.size()},
          {"method", "attributed"},
          {"power", process_power(rank, cells)}};
}
// ---- end attribution ----

} // namespace

nlohmann::json chart_series_json(StoreReader& store, const RunInfo& run, const ReportOptions& opts) {
  ChartSeries charts(run, opts);
  store.scan(TableId::GpuSamples, run, [&](std::span<const Value> row) { charts.gpu(row); });
  store.scan(TableId::CpuSamples, run, [&](std::span<const Value> row) { charts.cpu(row); });
  nlohmann::json out = nlohmann::json::object();
  nlohmann::json summary = {{"gpus", nlohmann::json::array()}};
  const nlohmann::json stored = run_json(run);
  if (stored["gpus"].is_array()) summary["gpus"] = stored["gpus"];
  charts.finish_into(out, summary);
  out["window"] = charts.window_json();
  out["buckets"] = opts.buckets;
  return out;
}

nlohmann::json build_report_data(StoreReader& store, const std::vector<RunInfo>& runs, const ReportOptions& opts) {
  nlohmann::json rs = nlohmann::json::array();
  std::vector<RunModel> models;
  models.reserve(runs.size());
  for (const auto& r : runs) {
    nlohmann::json one;
    models.push_back(run_data(store, r, opts, one));
    rs.push_back(std::move(one));
  }
  nlohmann::json out = {{"generated", iso_utc_ms(wall_now_ms())},
                        {"wattscope_version", kVersion},
                        {"metrics", {{"gpu", series_meta(kGpuMetrics)}, {"cpu", series_meta(kCpuMetrics)}}},
                        {"source", store.describe()},
                        {"runs", rs}};
  // issue 35: several runs are compared by task, with the figures `wattscope compare` tests
  if (runs.size() > 1) out["comparison"] = comparison_json(models);
  return out;
}

std::string render_report(const nlohmann::json& data) {
  return fill_report_template(data, true);
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

std::string render_report_linked(const nlohmann::json& data, std::string_view plotly_url) {
  std::string html(assets::report_template());
  const std::string plotly_script = "<script>/*__WATTSCOPE_PLOTLY__*/</script>", data_mark = "/*__WATTSCOPE_DATA__*/";
  const auto p = html.find(plotly_script);
  if (p == std::string::npos) throw std::logic_error("report template lacks the plotly placeholder");
  // Named, not loaded here: the page loads it once the figures and tables are drawn (a <script src> in <head> held the
  // first paint back ~1.4 s while 4.6 MB of plotly.js was fetched and parsed).
  html.replace(p, plotly_script.size(), fmt::format("<meta name=\"ws-plotly\" content=\"{}\">", plotly_url));
  const auto d = html.find(data_mark);
  if (d == std::string::npos) throw std::logic_error("report template lacks the data placeholder");
  html.replace(d, data_mark.size(), script_safe_json(data));
  return html;
}

} // namespace wattscope
