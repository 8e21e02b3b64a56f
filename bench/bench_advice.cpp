// Advice (issue 14): what computing it costs. serve recomputes it over its window (3600 frames) at most every 10 s;
// advise / show --json / the report compute it over a whole stored run (here a day at 1 s).
// Issue 12: serve's window is its LiveState's fine ring, copied out when a recomputation is due; a frame pushed into
// it allocates nothing (the allocs_per_push counter, from a counting operator new).
// Run: build/bench/wattscope_bench_advice
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <new>

#include "advice/advice.hpp"
#include "advice/advice_input.hpp"
#include "server/live.hpp"

namespace {
// Per thread (the benchmark's own): no atomic in every allocation of the other benchmarks.
thread_local long t_allocations = 0;
} // namespace

void* operator new(std::size_t n) {
  ++t_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's buffer): otherwise the library's, whose memory our delete would free().
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  ++t_allocations;
  return std::malloc(n ? n : 1);
}
// GCC sees free() reach a pointer from operator new where it inlines the pair; here both are malloc's.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept {
  std::free(p);
}
#pragma GCC diagnostic pop
void operator delete(void* p, std::size_t) noexcept {
  ::operator delete(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  ::operator delete(p);
}

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

// The same swing as synthetic(), as frames into serve's live state (the registry's fields the advice reads).
std::shared_ptr<const Frame> frame(int64_t i, int gpus) {
  auto f = std::make_shared<Frame>();
  f->tick = i;
  f->ts_ms = 1'700'000'000'000LL + 1000LL * i;
  f->cpu.util_pct = 85.0;
  f->cpu.package_energy_j = 50.0 * static_cast<double>(i);
  for (int g = 0; g < gpus; ++g) {
    const double u = 50 + 45 * std::sin(static_cast<double>(i) * 0.1 + g);
    GpuSample s;
    s.gpu_index = g;
    s.power_w = 60 + 3.4 * u;
    s.energy_j = 200.0 * static_cast<double>(i);
    s.util_gpu_pct = u;
    s.mem_used_bytes = 20LL << 30;
    s.pcie_tx_bytes_per_s = 10'000'000;
    s.pcie_rx_bytes_per_s = 20'000'000;
    s.throttle_reasons = u > 90 ? 0x4 : 0;
    s.clock_sm_mhz = 1980;
    s.temp_gpu_c = 70;
    s.power_limit_w = 400;
    f->gpus.push_back(s);
  }
  return f;
}

std::unique_ptr<LiveState> serve_window(int gpus, int n) {
  auto live = std::make_unique<LiveState>(std::chrono::hours(24), std::chrono::seconds(1));
  std::vector<GpuDevice> devs(static_cast<size_t>(gpus));
  for (int g = 0; g < gpus; ++g) {
    auto& d = devs[static_cast<size_t>(g)];
    d.gpu_index = g;
    d.name = "bench";
    d.mem_total_bytes = 80LL << 30;
    d.power_limit_w = 400;
    d.clock_sm_max_mhz = 1980;
  }
  live->set_run(RunInfo{}, devs);
  for (int i = 0; i < n; ++i)
    live->push(frame(i, gpus));
  return live;
}

// What /api/v1/advice costs when its cache is stale: the window copied out of the ring and the advice over it.
void BM_LiveAdviceRecompute(benchmark::State& state) {
  const auto live = serve_window(8, 3600);
  for (auto _ : state) {
    advice::LiveAdvice a([&] { return live->advice_input(); }); // a fresh cache: every json() recomputes
    benchmark::DoNotOptimize(a.json());
  }
}
BENCHMARK(BM_LiveAdviceRecompute)->Unit(benchmark::kMillisecond);

// The copy alone (under the ring's lock: what a frame pushed meanwhile may wait for).
void BM_LiveAdviceInput(benchmark::State& state) {
  const auto live = serve_window(8, 3600);
  for (auto _ : state)
    benchmark::DoNotOptimize(live->advice_input());
}
BENCHMARK(BM_LiveAdviceInput)->Unit(benchmark::kMillisecond);

// A frame into serve's live state (history rings and the advice's columns), 8 GPUs, the ring full.
void BM_LiveStatePush(benchmark::State& state) {
  const auto live = serve_window(8, 3600);
  std::vector<std::shared_ptr<const Frame>> frames;
  for (int i = 0; i < 3600; ++i)
    frames.push_back(frame(3600 + i, 8));
  size_t i = 0;
  const long before = t_allocations;
  for (auto _ : state)
    live->push(frames[i++ % frames.size()]);
  state.counters["allocs_per_push"] =
      static_cast<double>(t_allocations - before) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_LiveStatePush)->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
