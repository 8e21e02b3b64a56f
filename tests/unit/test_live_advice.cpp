// Issue 12: serve keeps its last hour once. /api/v1/advice reads its window out of LiveState's fine ring instead of a
// copy of its own; the advice must be the one the same frames gave the old way (each frame turned into points with
// advice::gpu_point / cpu_point, grouped by GPU, with the devices' facts), missing values must stay missing, and the
// window must be the ring's last kFinePoints frames after it wrapped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "advice/advice.hpp"
#include "advice/advice_input.hpp"
#include "core/time_util.hpp"
#include "server/live.hpp"

namespace unit_live_advice { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kT0 = 1'700'000'000'000;

std::vector<GpuDevice> devices(int n) {
  std::vector<GpuDevice> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto& d = out[static_cast<size_t>(i)];
    d.gpu_index = i;
    d.name = "Test GPU " + std::to_string(i);
    d.mem_total_bytes = 80LL << 30;
    d.power_limit_w = 400;
    d.clock_sm_max_mhz = 2000;
  }
  return out;
}

// The Input the old LiveAdvice built from the same frames: every frame's CPU point, each GPU's points where it
// answered, devices' facts first, GPUs in index order.
advice::Input old_way(const std::vector<GpuDevice>& devs, const std::vector<std::shared_ptr<Frame>>& frames,
                      size_t window) {
  std::map<int, advice::GpuSeries> by_index;
  for (const auto& d : devs) {
    auto& g = by_index[d.gpu_index];
    g.gpu_index = d.gpu_index;
    g.name = d.name;
    g.mem_total_bytes = d.mem_total_bytes;
    g.power_limit_w = d.power_limit_w;
    g.clock_sm_max_mhz = d.clock_sm_max_mhz;
  }
  advice::Input in;
  const size_t first = frames.size() > window ? frames.size() - window : 0;
  for (size_t i = first; i < frames.size(); ++i) {
    const Frame& f = *frames[i];
    in.cpu.push_back(advice::cpu_point(f.ts_ms, f.cpu));
    for (const auto& s : f.gpus) {
      auto& g = by_index[s.gpu_index];
      g.gpu_index = s.gpu_index;
      g.points.push_back(advice::gpu_point(f.ts_ms, s));
    }
  }
  for (auto& [index, g] : by_index)
    in.gpus.push_back(std::move(g));
  return in;
}

// A mixed hour of 4 GPUs whose energy counters are days into a run (5·10⁷ J: a float steps by 4 J there):
// GPU 0 busy, then idle for the last third; GPU 1 starved (40 %, PCIe quiet, the host CPU busy), lost for 10 s;
// GPU 2 at its power limit (SW power cap); GPU 3 thermally throttled with little memory in use and no power limit
// reading of its own. Values a float holds exactly, so the comparison can be exact.
std::shared_ptr<Frame> mixed_frame(int64_t i, int64_t n, std::vector<double>& energy, double& cpu_j) {
  auto f = std::make_shared<Frame>();
  f->tick = i;
  f->ts_ms = kT0 + 1000 * i;
  f->cpu.util_pct = 95;
  cpu_j += 55.5;
  f->cpu.package_energy_j = 4e7 + cpu_j;
  if (i % 7 != 3) f->cpu.dram_energy_j = 1e6 + 3.25 * static_cast<double>(i); // missing now and then
  for (int g = 0; g < 4; ++g) {
    if (g == 1 && i >= n / 3 && i < n / 3 + 10) continue; // lost: no sample at all
    GpuSample s;
    s.gpu_index = g;
    double power = 300.5, util = 95;
    int64_t mem = 70LL << 30, pcie = 100'000'000, throttle = 0, clock = 1980;
    if (g == 0 && i >= 2 * n / 3) power = 60.25, util = 0;
    if (g == 1) power = 150.75, util = 40, pcie = 0;
    if (g == 2) power = 390, throttle = advice::kSwPowerCapBit, clock = 1800;
    if (g == 3) power = 250.5, throttle = 0x40, clock = 1500, mem = 20LL << 30;
    energy[static_cast<size_t>(g)] += power;
    s.power_w = power;
    s.energy_j = 5e7 + energy[static_cast<size_t>(g)];
    s.util_gpu_pct = util;
    s.mem_used_bytes = mem;
    s.pcie_tx_bytes_per_s = pcie;
    s.pcie_rx_bytes_per_s = pcie / 2;
    s.throttle_reasons = throttle;
    s.clock_sm_mhz = clock;
    s.temp_gpu_c = g == 3 ? 88.5 : 61;
    if (g != 3) s.power_limit_w = 400;
    f->gpus.push_back(s);
  }
  return f;
}

void expect_same_input(const advice::Input& want, const advice::Input& got) {
  ASSERT_EQ(got.cpu.size(), want.cpu.size());
  for (size_t i = 0; i < want.cpu.size(); ++i) {
    EXPECT_EQ(got.cpu[i].ts_ms, want.cpu[i].ts_ms) << "cpu point " << i;
    EXPECT_EQ(got.cpu[i].util_pct, want.cpu[i].util_pct) << "cpu point " << i;
    EXPECT_EQ(got.cpu[i].energy_j, want.cpu[i].energy_j) << "cpu point " << i;
    if (::testing::Test::HasFailure()) return;
  }
  ASSERT_EQ(got.gpus.size(), want.gpus.size());
  for (size_t g = 0; g < want.gpus.size(); ++g) {
    const auto &a = want.gpus[g], &b = got.gpus[g];
    EXPECT_EQ(b.gpu_index, a.gpu_index);
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.mem_total_bytes, a.mem_total_bytes);
    EXPECT_EQ(b.power_limit_w, a.power_limit_w);
    EXPECT_EQ(b.clock_sm_max_mhz, a.clock_sm_max_mhz);
    ASSERT_EQ(b.points.size(), a.points.size()) << "gpu " << a.gpu_index;
    for (size_t i = 0; i < a.points.size(); ++i) {
      const auto &p = a.points[i], &q = b.points[i];
      const std::string at = "gpu " + std::to_string(a.gpu_index) + " point " + std::to_string(i);
      EXPECT_EQ(q.ts_ms, p.ts_ms) << at;
      EXPECT_EQ(q.power_w, p.power_w) << at;
      EXPECT_EQ(q.energy_j, p.energy_j) << at;
      EXPECT_EQ(q.util_pct, p.util_pct) << at;
      EXPECT_EQ(q.mem_used_bytes, p.mem_used_bytes) << at;
      EXPECT_EQ(q.pcie_tx_bytes_per_s, p.pcie_tx_bytes_per_s) << at;
      EXPECT_EQ(q.pcie_rx_bytes_per_s, p.pcie_rx_bytes_per_s) << at;
      EXPECT_EQ(q.throttle_reasons, p.throttle_reasons) << at;
      EXPECT_EQ(q.clock_sm_mhz, p.clock_sm_mhz) << at;
      EXPECT_EQ(q.temp_c, p.temp_c) << at;
      EXPECT_EQ(q.power_limit_w, p.power_limit_w) << at;
      if (::testing::Test::HasFailure()) return; // one point's differences say enough
    }
  }
}

std::vector<std::string> kinds(const nlohmann::json& advice) {
  std::vector<std::string> out;
  for (const auto& a : advice)
    out.push_back(a["kind"].get<std::string>());
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

// The advice over the ring is the advice over the same frames taken the old way: same items, same evidence, same
// figures, down to the joule of counters five days into a run.
TEST(LiveAdvice, FromTheRingEqualsTheOldWayItemForItem) {
  const auto devs = devices(4);
  LiveState live(24h, 1s);
  live.set_run(RunInfo{}, devs);
  const int64_t n = 1200;
  std::vector<double> energy(4, 0.0);
  double cpu_j = 0;
  std::vector<std::shared_ptr<Frame>> frames;
  for (int64_t i = 0; i < n; ++i) {
    frames.push_back(mixed_frame(i, n, energy, cpu_j));
    live.push(frames.back());
  }
  const advice::Input want = old_way(devs, frames, LiveState::kFinePoints);
  expect_same_input(want, live.advice_input());

  advice::LiveAdvice advice([&live] { return live.advice_input(); });
  const nlohmann::json got = advice.json();
  const nlohmann::json expected = advice::to_json(advice::advise(want));
  // The scenario is one that advises: every GPU's waste shows.
  EXPECT_EQ(kinds(expected), (std::vector<std::string>{"gpu_starved", "idle_gpu", "memory_headroom", "power_limit",
                                                       "straggler", "straggler", "throttling"}))
      << expected.dump(2);
  EXPECT_EQ(got["advice"], expected) << "from the ring:\n"
                                     << got["advice"].dump(2) << "\nthe old way:\n"
                                     << expected.dump(2);
  EXPECT_EQ(got["window"]["frames"], n);
  EXPECT_EQ(got["window"]["from"], iso_utc_ms(kT0));
  EXPECT_EQ(got["window"]["to"], iso_utc_ms(kT0 + 1000 * (n - 1)));
}

// Missing is missing: a value a frame lacked is an empty optional in the advice's input (NaN in the ring, never 0),
// a GPU that did not answer has no point at all (a gap, as in a stored run), and the CPU's energy is the package's
// plus the DRAM's where the DRAM is measured, none where the package is not.
TEST(LiveAdvice, MissingValuesStayMissing) {
  const auto devs = devices(2);
  LiveState live(24h, 1s);
  live.set_run(RunInfo{}, devs);
  std::vector<std::shared_ptr<Frame>> frames;
  for (int64_t i = 0; i < 4; ++i) {
    auto f = std::make_shared<Frame>();
    f->tick = i;
    f->ts_ms = kT0 + 1000 * i;
    if (i != 1) f->cpu.util_pct = 50;
    if (i != 2) f->cpu.package_energy_j = 100.0 * static_cast<double>(i);
    if (i == 0) f->cpu.dram_energy_j = 7;
    GpuSample s;
    s.gpu_index = 0;
    s.power_w = 100;
    if (i == 3) s.power_w.reset();
    if (i != 2) s.energy_j = 10.0 * static_cast<double>(i);
    s.util_gpu_pct = 0; // a reading of 0 stays 0
    s.mem_used_bytes = 0;
    if (i == 1) s.pcie_tx_bytes_per_s = INT64_MAX; // a float of it is 2^63, one past: it comes back whole
    f->gpus.push_back(s);
    if (i != 1) { // GPU 1 answers with nothing measured but its index, except in frame 1 where it is lost
      GpuSample t;
      t.gpu_index = 1;
      f->gpus.push_back(t);
    }
    frames.push_back(f);
    live.push(f);
  }
  const advice::Input in = live.advice_input();
  expect_same_input(old_way(devs, frames, LiveState::kFinePoints), in);
  // And in so many words:
  ASSERT_EQ(in.cpu.size(), 4u);
  EXPECT_FALSE(in.cpu[1].util_pct);
  EXPECT_EQ(in.cpu[0].energy_j, 7.0);
  EXPECT_EQ(in.cpu[1].energy_j, 100.0);
  EXPECT_FALSE(in.cpu[2].energy_j);
  ASSERT_EQ(in.gpus.size(), 2u);
  const auto& g0 = in.gpus[0].points;
  ASSERT_EQ(g0.size(), 4u);
  EXPECT_FALSE(g0[3].power_w);
  EXPECT_FALSE(g0[2].energy_j);
  EXPECT_EQ(g0[0].util_pct, 0.0);
  EXPECT_EQ(g0[0].mem_used_bytes, 0);
  EXPECT_FALSE(g0[0].pcie_tx_bytes_per_s);
  EXPECT_EQ(g0[1].pcie_tx_bytes_per_s, INT64_MAX);
  EXPECT_FALSE(g0[0].throttle_reasons);
  EXPECT_FALSE(g0[0].clock_sm_mhz);
  EXPECT_FALSE(g0[0].temp_c);
  EXPECT_FALSE(g0[0].power_limit_w);
  const auto& g1 = in.gpus[1].points;
  ASSERT_EQ(g1.size(), 3u);
  EXPECT_EQ(g1[1].ts_ms, kT0 + 2000);
  EXPECT_FALSE(g1[0].power_w);
  EXPECT_FALSE(g1[0].energy_j);
  EXPECT_FALSE(g1[0].util_pct);
  EXPECT_FALSE(g1[0].mem_used_bytes);
}

// After the ring wrapped, the window is its last kFinePoints frames: from, to and frames say so, every GPU has a
// point per frame, and the advice is still the old way's over those frames.
TEST(LiveAdvice, WindowIsTheLastHourAfterTheRingWrapped) {
  const auto devs = devices(4);
  LiveState live(24h, 1s);
  live.set_run(RunInfo{}, devs);
  const int64_t n = static_cast<int64_t>(LiveState::kFinePoints) + 1234;
  std::vector<double> energy(4, 0.0);
  double cpu_j = 0;
  std::vector<std::shared_ptr<Frame>> frames;
  for (int64_t i = 0; i < n; ++i) {
    frames.push_back(mixed_frame(i, n, energy, cpu_j));
    live.push(frames.back());
  }
  advice::LiveAdvice advice([&live] { return live.advice_input(); });
  const nlohmann::json got = advice.json();
  EXPECT_EQ(got["window"]["frames"], LiveState::kFinePoints);
  EXPECT_EQ(got["window"]["from"], iso_utc_ms(kT0 + 1000 * 1234));
  EXPECT_EQ(got["window"]["to"], iso_utc_ms(kT0 + 1000 * (n - 1)));
  const advice::Input in = live.advice_input();
  ASSERT_EQ(in.gpus.size(), 4u);
  EXPECT_EQ(in.gpus[0].points.size(), LiveState::kFinePoints);
  EXPECT_EQ(in.gpus[0].points.front().ts_ms, kT0 + 1000 * 1234);
  const advice::Input want = old_way(devs, frames, LiveState::kFinePoints);
  expect_same_input(want, in);
  EXPECT_EQ(got["advice"], advice::to_json(advice::advise(want)));
}

// The run's end frames (the last process rows, phases closed) carry no samples: they are no point of the window.
TEST(LiveAdvice, EndFramesAreNoPoint) {
  LiveState live(24h, 1s);
  live.set_run(RunInfo{}, devices(1));
  auto f = std::make_shared<Frame>();
  f->ts_ms = kT0;
  f->cpu.util_pct = 10;
  live.push(f);
  auto rows = std::make_shared<Frame>();
  rows->rows_only = true;
  live.push(rows);
  auto markers = std::make_shared<Frame>();
  markers->markers_only = true;
  markers->ts_ms = kT0 + 5000;
  live.push(markers);
  const advice::Input in = live.advice_input();
  ASSERT_EQ(in.cpu.size(), 1u);
  EXPECT_EQ(in.cpu[0].ts_ms, kT0);
}
} // namespace unit_live_advice
