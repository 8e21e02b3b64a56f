#include "advice/advice_input.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <fmt/format.h>

#include "core/stored_json.hpp"
#include "core/time_util.hpp"

namespace wattscope::advice {

GpuPoint gpu_point(int64_t ts_ms, const GpuSample& s) {
  GpuPoint p;
  p.ts_ms = ts_ms;
  p.power_w = s.power_w;
  p.energy_j = s.energy_j;
  p.util_pct = s.util_gpu_pct;
  p.mem_used_bytes = s.mem_used_bytes;
  p.pcie_tx_bytes_per_s = s.pcie_tx_bytes_per_s;
  p.pcie_rx_bytes_per_s = s.pcie_rx_bytes_per_s;
  p.throttle_reasons = s.throttle_reasons;
  p.clock_sm_mhz = s.clock_sm_mhz;
  p.temp_c = s.temp_gpu_c;
  p.power_limit_w = s.power_limit_w;
  return p;
}

CpuPoint cpu_point(int64_t ts_ms, const CpuSample& s) {
  CpuPoint c;
  c.ts_ms = ts_ms;
  c.util_pct = s.util_pct;
  if (s.package_energy_j) c.energy_j = *s.package_energy_j + s.dram_energy_j.value_or(0);
  return c;
}

namespace {
GpuSeries& series_for(std::map<int, GpuSeries>& by_index, int index) {
  auto [it, fresh] = by_index.try_emplace(index);
  if (fresh) it->second.gpu_index = index;
  return it->second;
}
void set_device(GpuSeries& g, const GpuDevice& d) {
  g.name = d.name;
  g.mem_total_bytes = d.mem_total_bytes;
  g.power_limit_w = d.power_limit_w;
  g.clock_sm_max_mhz = d.clock_sm_max_mhz;
}

// Two points of one step merged. Means are weighted by the samples each stands for; a figure one side lacks is the
// other's. A counter, and the settings, are the later point's.
OptF mean_of(const OptF& a, double na, const OptF& b, double nb) {
  if (!a || !b) return a ? a : b;
  return (*a * na + *b * nb) / (na + nb);
}
OptI mean_of(const OptI& a, double na, const OptI& b, double nb) {
  if (!a || !b) return a ? a : b;
  return std::llround((static_cast<double>(*a) * na + static_cast<double>(*b) * nb) / (na + nb));
}
template <class T> std::optional<T> max_of(const std::optional<T>& a, const std::optional<T>& b) {
  if (!a || !b) return a ? a : b;
  return std::max(*a, *b);
}
template <class T> std::optional<T> later_of(const std::optional<T>& earlier, const std::optional<T>& later) {
  return later ? later : earlier;
}
uint32_t samples_of(uint32_t a, uint32_t b) {
  return static_cast<uint32_t>(std::min<uint64_t>(uint64_t{a} + b, UINT32_MAX));
}

void merge(GpuPoint& into, const GpuPoint& other) {
  const bool later = other.ts_ms >= into.ts_ms;
  const GpuPoint& a = later ? into : other; // the earlier of the two
  const GpuPoint& b = later ? other : into;
  const double na = a.samples, nb = b.samples;
  GpuPoint m;
  m.ts_ms = b.ts_ms; // a step's point ends at its last sample
  m.power_w = mean_of(a.power_w, na, b.power_w, nb);
  m.energy_j = later_of(a.energy_j, b.energy_j);
  m.util_pct = mean_of(a.util_pct, na, b.util_pct, nb);
  m.mem_used_bytes = max_of(a.mem_used_bytes, b.mem_used_bytes); // what the memory advice must not miss
  m.pcie_tx_bytes_per_s = mean_of(a.pcie_tx_bytes_per_s, na, b.pcie_tx_bytes_per_s, nb);
  m.pcie_rx_bytes_per_s = mean_of(a.pcie_rx_bytes_per_s, na, b.pcie_rx_bytes_per_s, nb);
  m.throttle_reasons = a.throttle_reasons || b.throttle_reasons
                           ? OptI(a.throttle_reasons.value_or(0) | b.throttle_reasons.value_or(0))
                           : std::nullopt;
  m.clock_sm_mhz = mean_of(a.clock_sm_mhz, na, b.clock_sm_mhz, nb);
  m.temp_c = max_of(a.temp_c, b.temp_c);
  m.power_limit_w = later_of(a.power_limit_w, b.power_limit_w);
  m.samples = samples_of(a.samples, b.samples);
  into = m;
}

void merge(CpuPoint& into, const CpuPoint& other) {
  const bool later = other.ts_ms >= into.ts_ms;
  const CpuPoint& a = later ? into : other;
  const CpuPoint& b = later ? other : into;
  CpuPoint m;
  m.ts_ms = b.ts_ms;
  m.util_pct = mean_of(a.util_pct, a.samples, b.util_pct, b.samples);
  m.energy_j = later_of(a.energy_j, b.energy_j);
  m.samples = samples_of(a.samples, b.samples);
  into = m;
}

// a - b, held at int64's ends: a stored time can be any int64, and times further than that from the run's start are
// all as far as can be.
int64_t saturated_difference(int64_t a, int64_t b) {
  int64_t d = 0;
  if (__builtin_sub_overflow(a, b, &d)) return a < b ? INT64_MIN : INT64_MAX;
  return d;
}

// The step a time falls in, on the grid from `origin_ms` (floor division: a time before the origin is in a step of
// its own, not in step 0).
int64_t step_index(int64_t ts_ms, int64_t origin_ms, int64_t step_ms) {
  const int64_t d = saturated_difference(ts_ms, origin_ms);
  int64_t q = d / step_ms;
  if (d % step_ms != 0 && d < 0) --q;
  return q;
}
} // namespace

// A sample stored more than a century from its run's start is a damaged row, not a reading: the estimators take
// differences of times, which such a row would overflow.
bool InputBuilder::plausible(int64_t ts_ms) const {
  constexpr int64_t kCenturyMs = int64_t{100} * 366 * 86400 * 1000;
  const int64_t d = saturated_difference(ts_ms, run_.start_ms);
  return d > -kCenturyMs && d < kCenturyMs;
}

bool InputBuilder::same_step(int64_t a_ms, int64_t b_ms) const {
  return step_index(a_ms, run_.start_ms, step_ms_) == step_index(b_ms, run_.start_ms, step_ms_);
}

template <class Point> void InputBuilder::add(std::vector<Point>& points, const Point& p) {
  if (step_ms_ > 0 && !points.empty() && same_step(points.back().ts_ms, p.ts_ms)) {
    merge(points.back(), p);
    return;
  }
  points.push_back(p);
  while (points.size() > kMaxPoints && step_ms_ < INT64_MAX)
    coarsen();
}

// Merges each step's points into one; `points` sorted by time.
template <class Point> void InputBuilder::compact(std::vector<Point>& points) const {
  size_t out = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (out > 0 && same_step(points[out - 1].ts_ms, points[i].ts_ms))
      merge(points[out - 1], points[i]);
    else
      points[out++] = points[i];
  }
  points.resize(out);
}

// Steps long enough that every series fits in half of kMaxPoints (so the next coarsening is as far away as this one):
// all series span at most [lo, hi], which such steps cut into kMaxPoints / 2 + 2 at most. Steps at least double each
// time, so even times spread over all of int64 are a handful of steps after a few dozen.
void InputBuilder::coarsen() {
  const auto by_time = [](const auto& a, const auto& b) { return a.ts_ms < b.ts_ms; };
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  const auto span = [&](auto& points) {
    if (points.empty()) return;
    std::stable_sort(points.begin(), points.end(), by_time);
    lo = std::min(lo, points.front().ts_ms);
    hi = std::max(hi, points.back().ts_ms);
  };
  for (auto& [index, g] : by_index_)
    span(g.points);
  span(in_.cpu);
  const int64_t needed = saturated_difference(hi, lo) / static_cast<int64_t>(kMaxPoints / 2) + 1;
  step_ms_ = std::max(needed, step_ms_ > INT64_MAX / 2 ? INT64_MAX : step_ms_ * 2);
  for (auto& [index, g] : by_index_)
    compact(g.points);
  compact(in_.cpu);
}

InputBuilder::InputBuilder(const RunInfo& run) : run_(run) {}

void InputBuilder::device(std::span<const Value> row) {
  const GpuDevice d = device_from_row(row);
  set_device(series_for(by_index_, d.gpu_index), d);
}

void InputBuilder::gpu(std::span<const Value> row) {
  // Columns by name (STYLE: reading code names columns, never counts them).
  constexpr TableId gt = TableId::GpuSamples;
  static const size_t g_ts = column_index(gt, "ts_ms"), g_idx = column_index(gt, "gpu_index"),
                      g_power = column_index(gt, "power_w"), g_energy = column_index(gt, "energy_j"),
                      g_util = column_index(gt, "util_gpu_pct"), g_mem = column_index(gt, "mem_used_bytes"),
                      g_mem_total = column_index(gt, "mem_total_bytes"), g_tx = column_index(gt, "pcie_tx_bytes_per_s"),
                      g_rx = column_index(gt, "pcie_rx_bytes_per_s"), g_thr = column_index(gt, "throttle_reasons"),
                      g_clock = column_index(gt, "clock_sm_mhz"), g_temp = column_index(gt, "temp_gpu_c"),
                      g_limit = column_index(gt, "power_limit_w");
  const auto idx = value_int(row[g_idx]);
  const auto ts = value_int(row[g_ts]);
  if (!idx || !ts || !plausible(*ts)) return;
  GpuSeries& g = series_for(by_index_, static_cast<int>(*idx));
  if (!g.mem_total_bytes) g.mem_total_bytes = value_int(row[g_mem_total]);
  GpuPoint p;
  p.ts_ms = *ts;
  p.power_w = value_real(row[g_power]);
  p.energy_j = value_real(row[g_energy]);
  p.util_pct = value_real(row[g_util]);
  p.mem_used_bytes = value_int(row[g_mem]);
  p.pcie_tx_bytes_per_s = value_int(row[g_tx]);
  p.pcie_rx_bytes_per_s = value_int(row[g_rx]);
  p.throttle_reasons = value_int(row[g_thr]);
  p.clock_sm_mhz = value_int(row[g_clock]);
  p.temp_c = value_real(row[g_temp]);
  p.power_limit_w = value_real(row[g_limit]);
  add(g.points, p);
}

void InputBuilder::cpu(std::span<const Value> row) {
  constexpr TableId ct = TableId::CpuSamples;
  static const size_t c_ts = column_index(ct, "ts_ms"), c_util = column_index(ct, "util_pct"),
                      c_pkg = column_index(ct, "package_energy_j"), c_dram = column_index(ct, "dram_energy_j");
  const auto ts = value_int(row[c_ts]);
  if (!ts || !plausible(*ts)) return;
  CpuPoint c;
  c.ts_ms = *ts;
  c.util_pct = value_real(row[c_util]);
  if (auto pkg = value_real(row[c_pkg])) c.energy_j = *pkg + value_real(row[c_dram]).value_or(0);
  add(in_.cpu, c);
}

Input InputBuilder::finish() && {
  for (auto& [index, g] : by_index_) {
    std::stable_sort(g.points.begin(), g.points.end(),
                     [](const GpuPoint& a, const GpuPoint& b) { return a.ts_ms < b.ts_ms; });
    in_.gpus.push_back(std::move(g));
  }
  std::stable_sort(in_.cpu.begin(), in_.cpu.end(),
                   [](const CpuPoint& a, const CpuPoint& b) { return a.ts_ms < b.ts_ms; });
  // A run sampled at --idle-interval while idle has steps that long by design
  const double idle_s = json_number(json_member(run_summary_json(run_), "sampling"), "idle_interval_s");
  if (idle_s > 0) in_.idle_interval_ms = idle_s * 1000;
  in_.step_ms = step_ms_;
  return std::move(in_);
}

Input load_input(StoreReader& store, const RunInfo& run) {
  InputBuilder b(run);
  store.scan(TableId::GpuDevices, run, [&](std::span<const Value> row) { b.device(row); });
  store.scan(TableId::GpuSamples, run, [&](std::span<const Value> row) { b.gpu(row); });
  store.scan(TableId::CpuSamples, run, [&](std::span<const Value> row) { b.cpu(row); });
  return std::move(b).finish();
}

std::vector<Item> advise_run(StoreReader& store, const RunInfo& run) {
  return advise(load_input(store, run));
}

std::string summary_text(StoreReader& store, const RunInfo& run) {
  return summary_text(advise_run(store, run), run.run_id);
}

std::string summary_text(const std::vector<Item>& items, const std::string& run_id) {
  if (items.empty()) return "";
  return fmt::format("  advice    {} suggestion{} (the top three; 'wattscope advise {}' shows the evidence):\n",
                     items.size(), items.size() == 1 ? "" : "s", run_id) +
         to_text(items, 3, false);
}

nlohmann::json LiveAdvice::json() {
  std::lock_guard cache_lock(cache_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!cache_.is_null() && now - computed_ < kRecomputeEvery) return cache_;
  nlohmann::json j;
  {
    // The window's copy lives only for this computation: between recomputations the advice holds its answer alone.
    const Input in = source_ ? source_() : Input{};
    j["window"] = {{"from", in.cpu.empty() ? nlohmann::json() : nlohmann::json(iso_utc_ms(in.cpu.front().ts_ms))},
                   {"to", in.cpu.empty() ? nlohmann::json() : nlohmann::json(iso_utc_ms(in.cpu.back().ts_ms))},
                   {"frames", in.cpu.size()},
                   {"recomputed_every_s", kRecomputeEvery.count()}};
    j["advice"] = to_json(advise(in));
  }
#ifdef __GLIBC__
  // The copy (8 GPUs: ~5 MB of points) was freed, but glibc keeps freed memory of a thread's arena, and raises its
  // mmap threshold after such frees: without a trim serve's RSS keeps the transient copy for good (bench/memory.py
  // with an advice request: +6 MiB), as if the window were kept twice again. At most once per kRecomputeEvery.
  malloc_trim(0);
#endif
  cache_ = j;
  computed_ = now;
  return cache_;
}

} // namespace wattscope::advice
