// Advice (issue 14): what computing it costs. serve recomputes it over its window (3600 frames) at most every 10 s;
// advise / show --json / the report compute it over a whole stored run (here a day at 1 s).
// Run: build/bench/wattscope_bench_advice
#include <benchmark/benchmark.h>

#include <cmath>

#include "advice/advice.hpp"

using namespace wattscope;
using namespace wattscope::advice;

namespace {

// n points per GPU, 1 s apart: utilisation and power swinging (a training loop with input stalls), a counter to
// match, so every estimator runs (idle power by fit, starvation, headroom, the power-cap search).
Input synthetic(int gpus, int n) {
  Input in;
  for (int i = 0; i < n; ++i)
    in.cpu.push_back({1'700'000'000'000LL + 1000LL * i, 85.0, 50.0 * i});
  for (int g = 0; g < gpus; ++g) {
    GpuSeries s;
    s.gpu_index = g;
    s.name = "bench";
    s.mem_total_bytes = 80LL << 30;
    s.power_limit_w = 400;
    s.clock_sm_max_mhz = 1980;
    double e = 0;
    for (int i = 0; i < n; ++i) {
      const double u = 50 + 45 * std::sin(i * 0.1 + g);
      const double p = 60 + 3.4 * u;
      e += p;
      GpuPoint pt;
      pt.ts_ms = 1'700'000'000'000LL + 1000LL * i;
      pt.power_w = p;
      pt.energy_j = e;
      pt.util_pct = u;
      pt.mem_used_bytes = 20LL << 30;
      pt.pcie_tx_bytes_per_s = 10'000'000;
      pt.pcie_rx_bytes_per_s = 20'000'000;
      pt.throttle_reasons = u > 90 ? 0x4 : 0;
      pt.clock_sm_mhz = 1980;
      s.points.push_back(pt);
    }
    in.gpus.push_back(std::move(s));
  }
  return in;
}

void BM_AdviseServeWindow(benchmark::State& state) {
  const Input in = synthetic(8, 3600);
  for (auto _ : state)
    benchmark::DoNotOptimize(advise(in));
}
BENCHMARK(BM_AdviseServeWindow)->Unit(benchmark::kMillisecond);

void BM_AdviseDayAt1s(benchmark::State& state) {
  const Input in = synthetic(8, 86400);
  for (auto _ : state)
    benchmark::DoNotOptimize(advise(in));
}
BENCHMARK(BM_AdviseDayAt1s)->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
