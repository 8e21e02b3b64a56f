// Issue 30: the NVIDIA backend against the fake libnvidia-ml behaving as particular drivers do: 535.43.02-535.98's
// 32-byte running-process entries from the _v3 calls, and a library without nvmlDeviceGetViolationStatus (deprecated in
// CUDA 13, removed in 14) whose violation times come from field values. In-process, through the production dlopen
// path (NvmlSource), as the tests of issue 17 do.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "sources/nvml/nvml_source.hpp"

namespace e2e_vendor_nvml_abi { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// Live processes the fake can list (it lists a pid only while /proc says it runs): children that wait to be killed.
class Sleepers {
public:
  explicit Sleepers(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        for (;;)
          ::pause();
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~Sleepers() {
    for (pid_t p : pids_)
      ::kill(p, SIGKILL);
    for (pid_t p : pids_)
      ::waitpid(p, nullptr, 0);
  }
  const std::vector<pid_t>& pids() const { return pids_; }

private:
  std::vector<pid_t> pids_;
};

// Each process holds its own amount of memory: (i + 1) MiB + i bytes, so a value read from the wrong entry shows.
long long mem_of(size_t i) {
  return static_cast<long long>((i + 1) << 20) + static_cast<long long>(i);
}

json gpu_with(const std::vector<pid_t>& pids) {
  json procs = json::array();
  for (size_t i = 0; i < pids.size(); ++i)
    procs.push_back({{"pid", pids[i]}, {"type", i % 3 == 2 ? "graphics" : "compute"}, {"mem_bytes", mem_of(i)}});
  return {{"name", "NVIDIA A100-SXM4-80GB"},
          {"uuid", "GPU-abi-0"},
          {"pci_bus_id", "00000000:07:00.0"},
          {"metrics", {{"power_mw", 200000}, {"util_gpu", 50}, {"util_mem", 5}}},
          {"processes", procs}};
}

// The processes NvmlSource lists on GPU 0, pid -> memory held.
std::map<long long, long long> listed(const json& scen, const std::string& variant) {
  TempDir dir;
  write_file(dir / "scenario.json", scen.dump());
  EXPECT_EQ(setenv("WATTSCOPE_FAKE_NVML_SCENARIO", (dir / "scenario.json").c_str(), 1), 0);
  wattscope::NvmlSource::Options opts;
  opts.library_path = fake_nvml(variant);
  wattscope::NvmlSource src(opts);
  std::map<long long, long long> out;
  EXPECT_TRUE(src.open()) << src.status().line();
  std::vector<wattscope::GpuProcessSample> samples;
  std::vector<int> gpus;
  // Twice: the second scan asks with the room the first one learnt.
  for (int scan = 0; scan < 2; ++scan) {
    samples.clear();
    gpus.clear();
    src.gpu_processes(samples, gpus);
  }
  EXPECT_EQ(gpus, std::vector<int>{0});
  for (const auto& s : samples) {
    EXPECT_EQ(s.gpu_index, 0);
    out[s.id.pid] = s.mem_used_bytes.value_or(-1);
  }
  unsetenv("WATTSCOPE_FAKE_NVML_SCENARIO");
  return out;
}

std::map<long long, long long> expected(const std::vector<pid_t>& pids) {
  std::map<long long, long long> m;
  for (size_t i = 0; i < pids.size(); ++i)
    m[pids[i]] = mem_of(i);
  return m;
}

} // namespace

// Driver 535.54.03: _v3 writes 32-byte entries. With 14 compute and graphics processes (more than the first ask's 16
// entries hold at 24 bytes once they are 32 bytes each) every pid and its memory are read from its own entry.
TEST(VendorNvmlAbi, Driver535RunningProcessesAreReadAtTheDriversStride) {
  Sleepers s(14);
  ASSERT_EQ(s.pids().size(), 14u);
  json scen = {{"driver_version", "535.54.03"}, {"process_info_v3_bytes", 32}, {"devices", {gpu_with(s.pids())}}};
  EXPECT_EQ(listed(scen, "r535"), expected(s.pids()));
}

// A driver outside the window (24-byte _v3) with more processes than the first ask has room for: the list is asked
// again with room for the count the driver answered, and nothing is lost or misread.
TEST(VendorNvmlAbi, ALongListIsAskedAgainWithTheCountTheDriverAnswered) {
  Sleepers s(40);
  ASSERT_EQ(s.pids().size(), 40u);
  json scen = {{"driver_version", "550.54.15"}, {"devices", {gpu_with(s.pids())}}};
  EXPECT_EQ(listed(scen, ""), expected(s.pids()));
}

// The window by version, and by the symbols where the version is unknown (nvitop's rule).
TEST(VendorNvmlAbi, TheStrideOfEachDriver) {
  using wattscope::NvmlSource;
  EXPECT_EQ(NvmlSource::process_info_stride("535.43.02", true, false), 32u);
  EXPECT_EQ(NvmlSource::process_info_stride("535.54.03", true, false), 32u);
  EXPECT_EQ(NvmlSource::process_info_stride("535.86.10", true, false), 32u);
  EXPECT_EQ(NvmlSource::process_info_stride("535.98", true, false), 32u);
  EXPECT_EQ(NvmlSource::process_info_stride("535.104.05", true, true), 24u);
  EXPECT_EQ(NvmlSource::process_info_stride("535.43.01", false, false), 24u);
  EXPECT_EQ(NvmlSource::process_info_stride("530.30.02", false, false), 24u);
  EXPECT_EQ(NvmlSource::process_info_stride("550.54.15", true, true), 24u);
  EXPECT_EQ(NvmlSource::process_info_stride("", true, false), 32u);
  EXPECT_EQ(NvmlSource::process_info_stride("garbage", true, true), 24u);
  EXPECT_EQ(NvmlSource::process_info_stride("", false, false), 24u);
}

} // namespace e2e_vendor_nvml_abi

namespace e2e_vendor_nvml_abi {
namespace {

// throttle_power_s and throttle_thermal_s of GPU 0 over `ticks` ticks, the health counters read on every one.
std::vector<std::pair<wattscope::OptF, wattscope::OptF>> throttle(const json& scen, const std::string& variant,
                                                                  int ticks) {
  TempDir dir;
  write_file(dir / "scenario.json", scen.dump());
  EXPECT_EQ(setenv("WATTSCOPE_FAKE_NVML_SCENARIO", (dir / "scenario.json").c_str(), 1), 0);
  wattscope::NvmlSource::Options opts;
  opts.library_path = fake_nvml(variant);
  opts.health_period = std::chrono::nanoseconds(0);
  std::vector<std::pair<wattscope::OptF, wattscope::OptF>> out;
  {
    wattscope::NvmlSource src(opts);
    EXPECT_TRUE(src.open()) << src.status().line();
    for (int k = 0; k < ticks; ++k) {
      wattscope::Frame f;
      f.mono = wattscope::SteadyClock::now();
      src.sample(f);
      if (f.gpus.empty()) continue;
      out.emplace_back(f.gpus[0].throttle_power_s, f.gpus[0].throttle_thermal_s);
    }
  }
  unsetenv("WATTSCOPE_FAKE_NVML_SCENARIO");
  return out;
}

json violation_gpu() {
  json g = gpu_with({});
  g["metrics"]["violation_power_ns"] = {7'000'000'000LL, 7'250'000'000LL, 8'000'000'001LL, 9'500'000'000LL};
  g["metrics"]["violation_thermal_ns"] = {2'000'000'000LL, 2'000'000'000LL, 2'100'000'000LL, 2'600'000'000LL};
  return g;
}

// Seconds since the first reading, exactly as the counter moved.
void expect_truth(const std::vector<std::pair<wattscope::OptF, wattscope::OptF>>& got) {
  const double power[] = {0, 0.25, 1.000000001, 2.5}, thermal[] = {0, 0, 0.1, 0.6};
  ASSERT_EQ(got.size(), 4u);
  for (size_t k = 0; k < got.size(); ++k) {
    SCOPED_TRACE(k);
    ASSERT_TRUE(got[k].first.has_value());
    ASSERT_TRUE(got[k].second.has_value());
    EXPECT_NEAR(*got[k].first, power[k], 1e-12);
    EXPECT_NEAR(*got[k].second, thermal[k], 1e-12);
  }
}

} // namespace

// A library without nvmlDeviceGetViolationStatus (CUDA 14 removes it): the times come from the perf-policy fields.
TEST(VendorNvmlAbi, ViolationTimesWithoutTheDeprecatedCall) {
  expect_truth(throttle({{"devices", {violation_gpu()}}}, "noviolation", 4));
}

// Field values absent (an old library), or the fields unknown to the driver: the old call, with the same figures.
TEST(VendorNvmlAbi, ViolationTimesFallBackToTheOldCall) {
  expect_truth(throttle({{"devices", {violation_gpu()}}}, "legacy", 4));
  expect_truth(throttle({{"devices", {violation_gpu()}}, {"unsupported_fields", {74, 75}}}, "", 4));
}

// Neither: missing, never 0.
TEST(VendorNvmlAbi, ViolationTimesMissingWhereNeitherAnswers) {
  const auto got = throttle({{"devices", {violation_gpu()}}, {"unsupported_fields", {74, 75}}}, "noviolation", 3);
  ASSERT_EQ(got.size(), 3u);
  for (const auto& [p, t] : got) {
    EXPECT_FALSE(p.has_value());
    EXPECT_FALSE(t.has_value());
  }
}

} // namespace e2e_vendor_nvml_abi
