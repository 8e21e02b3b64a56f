#include "advice/advice_input.hpp"

#include <algorithm>
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
} // namespace

InputBuilder::InputBuilder(const RunInfo& run) : run_(run) {}

void InputBuilder::device(std::span<const Value> row) {
  const GpuDevice d = device_from_row(row);
  set_device(series_for(by_index_, d.gpu_index), d);
}

void InputBuilder::gpu(std::span<const Value> row) {
  // Columns by name (STYLE: reading code names columns, never counts them).
  constexpr TableId gt = TableId::GpuSamples;
  static const size_t g_ts = column_index(gt, "ts_ms"), g_idx = column_index(gt, "gpu_index"),
                      g_name = column_index(gt, "name"), g_power = column_index(gt, "power_w"),
                      g_energy = column_index(gt, "energy_j"), g_util = column_index(gt, "util_gpu_pct"),
                      g_mem = column_index(gt, "mem_used_bytes"), g_mem_total = column_index(gt, "mem_total_bytes"),
                      g_tx = column_index(gt, "pcie_tx_bytes_per_s"), g_rx = column_index(gt, "pcie_rx_bytes_per_s"),
                      g_thr = column_index(gt, "throttle_reasons"), g_clock = column_index(gt, "clock_sm_mhz"),
                      g_temp = column_index(gt, "temp_gpu_c"), g_limit = column_index(gt, "power_limit_w");
  const auto idx = value_int(row[g_idx]);
  const auto ts = value_int(row[g_ts]);
  if (!idx || !ts) return;
  GpuSeries& g = series_for(by_index_, static_cast<int>(*idx));
  if (g.name.empty()) g.name = std::string(value_text(row[g_name]));
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
  g.points.push_back(p);
}

void InputBuilder::cpu(std::span<const Value> row) {
  constexpr TableId ct = TableId::CpuSamples;
  static const size_t c_ts = column_index(ct, "ts_ms"), c_util = column_index(ct, "util_pct"),
                      c_pkg = column_index(ct, "package_energy_j"), c_dram = column_index(ct, "dram_energy_j");
  const auto ts = value_int(row[c_ts]);
  if (!ts) return;
  CpuPoint c;
  c.ts_ms = *ts;
  c.util_pct = value_real(row[c_util]);
  if (auto pkg = value_real(row[c_pkg])) c.energy_j = *pkg + value_real(row[c_dram]).value_or(0);
  in_.cpu.push_back(c);
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
