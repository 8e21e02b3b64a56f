// Issue 31: a vendor library's init never delays or kills the user's command. The probe child (sources/init_probe),
// a source joining a running sampler, and GPUs whose gpu_devices row goes out with their first sample.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "accounting/accounting.hpp"
#include "sampler/sampler.hpp"
#include "sources/init_probe.hpp"

namespace unit_vendor_init { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace std::chrono_literals;

// The probe itself runs a child: tests/e2e/test_vendor_init.cpp, against the fake NVML.
TEST(InitProbe, TimeoutFromTheEnvironment) {
  ::setenv("WATTSCOPE_TEST_PROBE", "off", 1);
  EXPECT_EQ(probe_timeout_from_env("WATTSCOPE_TEST_PROBE", 60s).count(), 0);
  ::setenv("WATTSCOPE_TEST_PROBE", "2.5", 1);
  EXPECT_EQ(probe_timeout_from_env("WATTSCOPE_TEST_PROBE", 60s), 2500ms);
  ::setenv("WATTSCOPE_TEST_PROBE", "soon", 1);
  EXPECT_EQ(probe_timeout_from_env("WATTSCOPE_TEST_PROBE", 60s), 60s);
  ::unsetenv("WATTSCOPE_TEST_PROBE");
  EXPECT_EQ(probe_timeout_from_env("WATTSCOPE_TEST_PROBE", 60s), 60s);
}

namespace {
class LateGpuSource final : public Source {
public:
  std::string_view name() const override { return "late"; }
  bool open() override { return true; }
  SourceStatus status() const override { return SourceStatus::ok("test source", true); }
  bool may_block() const override { return true; }
  void sample(Frame& f) noexcept override {
    GpuSample s;
    s.gpu_index = 3;
    s.power_w = 200;
    s.energy_counter_uj = 1'000'000 + f.tick * 20'000;
    f.gpus.push_back(s);
  }
};
class CpuOnlySource final : public Source {
public:
  std::string_view name() const override { return "cpu"; }
  bool open() override { return true; }
  SourceStatus status() const override { return SourceStatus::ok("test source", false); }
  void sample(Frame&) noexcept override {}
};
} // namespace

TEST(Sampler, AdoptsASourceThatOpenedLateFromTheNextTick) {
  std::mutex mu;
  std::vector<std::pair<int64_t, size_t>> seen; // tick, GPU samples
  Sampler s({std::make_shared<CpuOnlySource>()}, 20ms, [&](Frame& f) {
    std::lock_guard lock(mu);
    seen.emplace_back(f.tick, f.gpus.size());
  });
  s.start();
  std::this_thread::sleep_for(200ms);
  s.adopt(std::make_shared<LateGpuSource>());
  std::this_thread::sleep_for(300ms);
  s.stop();
  std::lock_guard lock(mu);
  ASSERT_GE(seen.size(), 10u);
  EXPECT_EQ(seen.front().second, 0u);
  EXPECT_EQ(seen.back().second, 1u) << "the adopted source is sampled";
  // Once it answers, every later frame has its GPU (no flapping), and frames before it had none.
  size_t first = seen.size();
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i].second == 1) {
      first = i;
      break;
    }
  ASSERT_GT(first, 3u) << "frames before the adoption carry no GPU";
  for (size_t i = first; i < seen.size(); ++i)
    EXPECT_EQ(seen[i].second, 1u) << "tick " << seen[i].first;
}

TEST(Accounting, ADeviceAddedLateGetsItsRowWithItsFirstSample) {
  Accounting acc({});
  const auto t0 = SteadyClock::now();
  auto frame = [&](int64_t tick) {
    Frame f;
    f.tick = tick;
    f.mono = t0 + tick * 100ms;
    f.ts_ms = 1000 * tick;
    return f;
  };
  Frame f0 = frame(0);
  acc.process(f0);
  EXPECT_TRUE(f0.device_rows.empty());
  GpuDevice d;
  d.gpu_index = 0;
  d.uuid = "GPU-late";
  acc.add_devices({d});
  Frame f1 = frame(1); // added, but not answered yet: no row
  acc.process(f1);
  EXPECT_TRUE(f1.device_rows.empty());
  for (int64_t k = 2; k <= 4; ++k) {
    Frame f = frame(k);
    GpuSample s;
    s.gpu_index = 0;
    s.energy_counter_uj = 7'000'000 + (k - 2) * 50'000; // 50 J per 100 ms
    f.gpus.push_back(s);
    acc.process(f);
    if (k == 2) {
      ASSERT_EQ(f.device_rows.size(), 1u) << "the row goes out with the first sample";
      EXPECT_EQ(f.device_rows[0].uuid, "GPU-late");
      EXPECT_EQ(f.device_rows[0].energy_method, "counter");
    } else {
      EXPECT_TRUE(f.device_rows.empty()) << "once";
    }
  }
  const auto sum = acc.summary();
  ASSERT_EQ(sum.gpus.size(), 1u);
  EXPECT_DOUBLE_EQ(sum.gpus[0].energy_j, 0.1) << "energy from its first sample on";
  EXPECT_EQ(sum.gpus[0].samples, 3);
}

} // namespace unit_vendor_init
