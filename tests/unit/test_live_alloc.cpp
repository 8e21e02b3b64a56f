// Issue 12: a frame pushed into serve's live state allocates nothing: the history rings and what the live advice reads
// are written in place. A binary of its own, because it counts every operator new of the process.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "advice/advice_input.hpp"
#include "server/live.hpp"

namespace {
std::atomic<long> g_allocations{0};
} // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's buffer): otherwise the library's, whose memory our delete would free().
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
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
using namespace std::chrono_literals;

// 8 GPUs with every field the history and the advice keep, an hour and a half of frames (the fine ring wraps, the
// coarse buckets close): not one allocation in push(). The advice asked afterwards sees the frames.
TEST(LiveAlloc, PushingAFrameAllocatesNothing) {
  LiveState live(24h, 1s);
  std::vector<GpuDevice> devs(8);
  for (int i = 0; i < 8; ++i)
    devs[static_cast<size_t>(i)].gpu_index = i;
  live.set_run(RunInfo{}, devs);
  advice::LiveAdvice advice([&live] { return live.advice_input(); });
  const int64_t n = 5400;
  std::vector<std::shared_ptr<const Frame>> frames;
  for (int64_t t = 0; t < n; ++t) {
    auto f = std::make_shared<Frame>();
    f->tick = t;
    f->ts_ms = 1'700'000'000'000 + 1000 * t;
    f->cpu.util_pct = 50;
    f->cpu.package_energy_j = 30.0 * static_cast<double>(t);
    f->cpu.dram_energy_j = 3.0 * static_cast<double>(t);
    for (int g = 0; g < 8; ++g) {
      GpuSample s;
      s.gpu_index = g;
      s.power_w = 300;
      s.energy_j = 300.0 * static_cast<double>(t);
      s.util_gpu_pct = 90;
      s.mem_used_bytes = 1LL << 30;
      s.pcie_tx_bytes_per_s = 1'000'000;
      s.pcie_rx_bytes_per_s = 1'000'000;
      s.throttle_reasons = 0;
      s.clock_sm_mhz = 1980;
      s.temp_gpu_c = 60;
      s.power_limit_w = 400;
      f->gpus.push_back(s);
    }
    frames.push_back(std::move(f));
  }
  const long before = g_allocations.load();
  for (const auto& f : frames)
    live.push(f);
  const long during = g_allocations.load() - before;
  EXPECT_EQ(during, 0) << during << " allocations in " << n << " pushes";
  const nlohmann::json j = advice.json();
  EXPECT_EQ(j["window"]["frames"], LiveState::kFinePoints);
}
