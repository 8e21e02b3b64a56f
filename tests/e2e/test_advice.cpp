// Advice (issue 14) end to end: runs recorded from fake NVML scenarios built to show one waste each, then
// `wattscope advise --json` and `show --json`. Each expected figure is computed here from the scenario's values and
// the sampled time (first to last stored sample), with the constants docs/advice.md documents — never copied from the
// output. A healthy run (steady busy GPU, high memory use, no throttling) must get no advice at all.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include <nlohmann/json.hpp>

#include <csignal>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "../support/support.hpp"
#include "advice/advice.hpp"
#include "http_client.hpp"

namespace e2e_advice { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;
namespace adv = wattscope::advice;

namespace {

constexpr double kLimitW = 400;
constexpr long long kMemTotal = 85899345920LL; // 80 GiB
constexpr int kMaxClock = 1980;

// A steady, healthy device: busy, memory well used, well below its power limit, no clock-event reasons, PCIe moderate.
json healthy_metrics(double power_w = 250) {
  json m;
  m["power_mw"] = power_w * 1000;
  m["power_instant_mw"] = power_w * 1000;
  // An energy counter that matches the power exactly (the integral of a constant over the time since nvmlInit).
  m["energy_mj"] = {{"sine_integral", {{"base", power_w * 1000}, {"amp", 0}, {"period_s", 1}}}};
  m["util_gpu"] = 95;
  m["util_mem"] = 40;
  m["mem_used_bytes"] = 70LL << 30;
  m["mem_total_bytes"] = kMemTotal;
  m["temp_gpu"] = 65;
  m["clock_sm"] = kMaxClock;
  m["pcie_tx_kbs"] = 100000; // ~100 MB/s each way: neither quiet nor busy
  m["pcie_rx_kbs"] = 400000;
  m["power_limit_mw"] = kLimitW * 1000;
  m["clock_events"] = 0;
  return m;
}

json device(int i, const json& metrics) {
  return {{"name", "NVIDIA H100 80GB HBM3"},
          {"uuid", "GPU-" + std::to_string(2000 + i) + "-advice"},
          {"pci_bus_id", "00000000:" + std::to_string(20 + i) + ":00.0"},
          {"max_clock_sm_mhz", kMaxClock},
          {"max_clock_mem_mhz", 2619},
          {"metrics", metrics}};
}

json scenario(std::vector<json> metrics) {
  json s = {{"driver_version", "550.54.15"}, {"nvml_version", "12.550.54.15"}, {"devices", json::array()}};
  for (size_t i = 0; i < metrics.size(); ++i)
    s["devices"].push_back(device(static_cast<int>(i), metrics[i]));
  return s;
}

struct Recorded {
  TempDir dir;
  Result record;
  std::string db() const { return dir / "wattscope.db"; }
  std::map<std::string, std::string> env;
  // The stored sample times of a GPU, in order.
  std::vector<long long> times_ms(int gpu) const {
    std::vector<long long> ts;
    for (const auto& row :
         query(db(), "SELECT ts_ms FROM gpu_samples WHERE gpu_index = " + std::to_string(gpu) + " ORDER BY tick"))
      ts.push_back(std::stoll(*row.at(0)));
    return ts;
  }
  // Sampled seconds of a GPU: the steps between its stored samples, without the gaps longer than kMaxGapIntervals
  // median steps (docs/advice.md: a tick the machine delayed that long is a gap, not a measured interval). On an idle
  // machine this is first to last sample; on a loaded one (CI) a late tick must not move the expected figure.
  double sampled_s(int gpu) const {
    const auto ts = times_ms(gpu);
    std::vector<double> dts;
    for (size_t i = 1; i < ts.size(); ++i)
      if (ts[i] > ts[i - 1]) dts.push_back(static_cast<double>(ts[i] - ts[i - 1]));
    if (dts.empty()) return 0;
    std::vector<double> sorted = dts;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double med = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    double sum = 0;
    for (double dt : dts)
      if (dt <= adv::kMaxGapIntervals * med) sum += dt;
    return sum / 1000;
  }
  // For failure messages: the steps between samples, so a delayed tick shows.
  std::string steps(int gpu) const {
    const auto ts = times_ms(gpu);
    std::string out = "steps (ms):";
    for (size_t i = 1; i < ts.size(); ++i)
      out += " " + std::to_string(ts[i] - ts[i - 1]);
    return out;
  }
  json advise() const {
    auto r = run({wstest::wattscope(), "advise", "--json"}, env, dir.path());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out)["advice"];
  }
};

// Records 2 s at 100 ms with the scenario; no RAPL and a still /proc, so the run's energy is the GPUs' alone.
std::unique_ptr<Recorded> record(const json& scen, const std::string& duration = "2s") {
  auto r = std::make_unique<Recorded>();
  write_file(r->dir / "scenario.json", scen.dump());
  write_file(r->dir / "sys/.keep", "");
  write_file(r->dir / "proc/stat", "cpu  100 0 100 1000 0 0 0 0 0 0\ncpu0 100 0 100 1000 0 0 0 0 0 0\n");
  write_file(r->dir / "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\n");
  r->env = {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
            {"WATTSCOPE_FAKE_NVML_SCENARIO", r->dir / "scenario.json"},
            {"CUDA_VISIBLE_DEVICES", "\x01"}};
  r->record = run({wstest::wattscope(), "record", "--interval", "100ms", "--duration", duration, "--sysfs-root",
                   r->dir / "sys", "--procfs-root", r->dir / "proc"},
                  r->env, r->dir.path());
  EXPECT_EQ(r->record.exit_code, 0) << r->record.err;
  return r;
}

std::vector<std::string> kinds(const json& advice) {
  std::vector<std::string> out;
  for (const auto& a : advice)
    out.push_back(a["kind"]);
  return out;
}

const json& only(const json& advice, const std::string& kind) {
  EXPECT_EQ(kinds(advice), std::vector<std::string>{kind}) << advice.dump(2);
  return advice.at(0);
}

// The fallback idle power of a GPU that was never idle and whose utilisation did not spread (docs/advice.md).
constexpr double kIdleW = adv::kFallbackIdlePowerShare * kLimitW;

} // namespace

TEST(Advice, HealthyRunGetsNone) {
  auto r = record(scenario({healthy_metrics()}));
  const json a = r->advise();
  EXPECT_TRUE(a.is_array());
  EXPECT_TRUE(a.empty()) << a.dump(2);
  auto text = run({wstest::wattscope(), "advise"}, r->env, r->dir.path());
  EXPECT_NE(text.out.find("no advice"), std::string::npos) << text.out;
  EXPECT_EQ(r->record.err.find("advice"), std::string::npos) << "the summary shows advice for a healthy run";
  // A run that is not in the store: an error that names it, not a crash.
  auto bad = run({wstest::wattscope(), "advise", "no-such-run"}, r->env, r->dir.path());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("no-such-run"), std::string::npos) << bad.err;
}

TEST(Advice, IdleGpuDrewMeasuredEnergy) {
  json idle = healthy_metrics(60);
  idle["util_gpu"] = 0;
  idle["mem_used_bytes"] = 512LL << 20;
  auto r = record(scenario({healthy_metrics(), idle}));
  const json a = r->advise();
  const json& item = only(a, "idle_gpu");
  EXPECT_EQ(item["evidence"]["device"], "gpu1");
  EXPECT_EQ(item["evidence"]["estimate"], "measured");
  // Measured: what GPU 1 drew over its sampled time, at the scenario's 60 W.
  const double expected_j = 60 * r->sampled_s(1);
  EXPECT_NEAR(item["saving_j"].get<double>(), expected_j, 0.05 * expected_j) << r->steps(1);
  // Of the run's energy: the two GPUs at 60 W and 250 W.
  EXPECT_NEAR(item["saving_pct"].get<double>(), 100.0 * 60 / (60 + 250), 1.5);
  EXPECT_EQ(item["severity"], "high");
  EXPECT_NE(item["text"].get<std::string>().find("allocated but unused"), std::string::npos);
  // The run summary printed at the end shows it.
  EXPECT_NE(r->record.err.find("idle_gpu"), std::string::npos) << r->record.err;
}

TEST(Advice, StarvedGpuWithQuietPcie) {
  json m = healthy_metrics(150);
  m["util_gpu"] = 30;
  m["pcie_tx_kbs"] = 1000; // ~1 MB/s: quiet
  m["pcie_rx_kbs"] = 1000;
  auto r = record(scenario({m}));
  const json item = only(r->advise(), "gpu_starved");
  EXPECT_EQ(item["evidence"]["estimate"], "modelled");
  EXPECT_NEAR(item["evidence"]["avg_util_pct"].get<double>(), 30, 1e-9);
  // Stall time = T·(1 − 30/fed); saving = idle power × stall time.
  const double expected_j = kIdleW * r->sampled_s(0) * (1 - 30 / adv::kFedUtilPct);
  EXPECT_NEAR(item["saving_j"].get<double>(), expected_j, 0.02 * expected_j) << r->steps(0);
  EXPECT_NEAR(item["saving_pct"].get<double>(), 100 * kIdleW * (1 - 30 / adv::kFedUtilPct) / 150, 1.0);
  EXPECT_NE(item["text"].get<std::string>().find("Assumes"), std::string::npos);
}

// Starvation seen from the host: the CPU (a /proc/stat fixture the test advances, 95 % busy) saturated while the GPU
// waits; PCIe not supported, so only the CPU can tell.
TEST(Advice, StarvedGpuWithBusyCpuFromProcfs) {
  json m = healthy_metrics(150);
  m["util_gpu"] = 40;
  m.erase("pcie_tx_kbs");
  m.erase("pcie_rx_kbs");
  auto r = std::make_unique<Recorded>();
  write_file(r->dir / "scenario.json", scenario({m}).dump());
  write_file(r->dir / "sys/.keep", "");
  write_file(r->dir / "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\n");
  // The source keeps /proc/stat open and preads it: rewritten in place (same inode, same length, one pwrite, never
  // truncated, so a read never meets an empty file), 95 busy jiffies in 100.
  auto stat = [&](long long step) {
    const std::string busy = fmt::format("{:012d}", 1000 + 95 * step), idle = fmt::format("{:012d}", 1000 + 5 * step);
    return "cpu  " + busy + " 0 0 " + idle + " 0 0 0 0 0 0\ncpu0 " + busy + " 0 0 " + idle + " 0 0 0 0 0 0\n";
  };
  const std::string stat_path = r->dir / "proc/stat";
  write_file(stat_path, stat(0));
  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    const int fd = ::open(stat_path.c_str(), O_WRONLY | O_CLOEXEC);
    for (long long step = 1; fd >= 0 && !stop; ++step) {
      const std::string text = stat(step);
      if (::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (fd >= 0) ::close(fd);
  });
  r->env = {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
            {"WATTSCOPE_FAKE_NVML_SCENARIO", r->dir / "scenario.json"},
            {"CUDA_VISIBLE_DEVICES", "\x01"}};
  r->record = run({wstest::wattscope(), "record", "--interval", "100ms", "--duration", "2s", "--sysfs-root",
                   r->dir / "sys", "--procfs-root", r->dir / "proc"},
                  r->env, r->dir.path());
  stop = true;
  ticker.join();
  ASSERT_EQ(r->record.exit_code, 0) << r->record.err;
  const json item = only(r->advise(), "gpu_starved");
  EXPECT_NEAR(item["evidence"]["avg_cpu_util_pct"].get<double>(), 95, 1.0);
  EXPECT_TRUE(item["evidence"]["avg_pcie_bytes_per_s"].is_null());
  const double expected_j = kIdleW * r->sampled_s(0) * (1 - 40 / adv::kFedUtilPct);
  EXPECT_NEAR(item["saving_j"].get<double>(), expected_j, 0.02 * expected_j) << r->steps(0);
}

TEST(Advice, TransferBound) {
  json m = healthy_metrics(150);
  m["util_gpu"] = 30;
  m["pcie_rx_kbs"] = 3000000; // ~3 GB/s host to device
  auto r = record(scenario({m}));
  const json item = only(r->advise(), "transfer_bound");
  EXPECT_NEAR(item["evidence"]["avg_pcie_bytes_per_s"].get<double>(), (3000000.0 + 100000.0) * 1024, 1);
  const double expected_j = kIdleW * r->sampled_s(0) * (1 - 30 / adv::kFedUtilPct);
  EXPECT_NEAR(item["saving_j"].get<double>(), expected_j, 0.02 * expected_j) << r->steps(0);
}

TEST(Advice, MemoryHeadroom) {
  json m = healthy_metrics(200);
  m["util_gpu"] = 75;
  m["mem_used_bytes"] = 10LL << 30;
  auto r = record(scenario({m}));
  const json item = only(r->advise(), "memory_headroom");
  EXPECT_EQ(item["evidence"]["peak_mem_used_bytes"].get<long long>(), 10LL << 30);
  EXPECT_NEAR(item["evidence"]["peak_mem_pct"].get<double>(), 100.0 * (10LL << 30) / kMemTotal, 1e-9);
  const double expected_j = kIdleW * r->sampled_s(0) * (1 - 75 / adv::kFedUtilPct);
  EXPECT_NEAR(item["saving_j"].get<double>(), expected_j, 0.02 * expected_j) << r->steps(0);
}

TEST(Advice, ThermalThrottling) {
  json m = healthy_metrics();
  m["clock_events"] = 0x40; // HW thermal slowdown
  m["clock_sm"] = 1400;
  m["temp_gpu"] = 88;
  auto r = record(scenario({m}));
  const json item = only(r->advise(), "throttling");
  EXPECT_EQ(item["evidence"]["reasons"], "HW thermal slowdown");
  EXPECT_NEAR(item["evidence"]["max_temp_c"].get<double>(), 88, 1e-9);
  // Lost time = T·(1 − 1400/1980), at idle power.
  const double expected_j = kIdleW * r->sampled_s(0) * (1 - 1400.0 / kMaxClock);
  EXPECT_NEAR(item["saving_j"].get<double>(), expected_j, 0.02 * expected_j) << r->steps(0);
}

TEST(Advice, PowerLimitFromTheRunsProfile) {
  constexpr double kPowerW = 395;
  json m = healthy_metrics(kPowerW);
  m["util_gpu"] = 98;
  m["clock_events"] = 0x4; // SW power cap: working at its limit, which is not throttling
  auto r = record(scenario({m}));
  const json item = only(r->advise(), "power_limit");
  // The cap model worked out here for a constant draw: at cap C the clock ratio is ((C − idle)/(P − idle))^(1/3),
  // time grows by 1/r and energy becomes C/r per unit of time; the best cap in 1 % steps within 5 % slowdown.
  double best_cap = 0, best_ratio = 1;
  for (int k = 1; k <= 50; ++k) {
    const double cap = kLimitW * (1 - 0.01 * k);
    const double ratio = std::cbrt((cap - kIdleW) / (kPowerW - kIdleW));
    if (cap >= kPowerW || 100 * (1 / ratio - 1) > adv::kMaxSlowdownPct) continue;
    const double energy_ratio = cap / ratio / kPowerW;
    if (energy_ratio < best_ratio) best_ratio = energy_ratio, best_cap = cap;
  }
  ASSERT_GT(best_cap, 0);
  EXPECT_NEAR(item["evidence"]["suggested_cap_w"].get<double>(), best_cap, 0.011 * kLimitW);
  const double expected_j = kPowerW * r->sampled_s(0) * (1 - best_ratio);
  EXPECT_NEAR(item["saving_j"].get<double>(), expected_j, 0.1 * expected_j) << r->steps(0);
  EXPECT_NE(item["text"].get<std::string>().find("assumes"), std::string::npos);
  EXPECT_EQ(item["evidence"]["estimate"], "modelled");
}

// show --json carries the same list under advice[], each item with exactly the six keys.
TEST(Advice, ShowJsonHasAdviceWithExactlyItsKeys) {
  json idle = healthy_metrics(60);
  idle["util_gpu"] = 0;
  auto r = record(scenario({idle}), "1s");
  auto show = run({wstest::wattscope(), "show", "--json"}, r->env, r->dir.path());
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const json j = json::parse(show.out);
  ASSERT_TRUE(j["advice"].is_array());
  ASSERT_EQ(j["advice"].size(), 1u) << j["advice"].dump(2);
  std::vector<std::string> keys;
  for (const auto& [k, v] : j["advice"][0].items())
    keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"evidence", "kind", "saving_j", "saving_pct", "severity", "text"}));
}

// serve: /api/v1/advice from its own window of frames, the same estimators as `advise`; cached between recomputations,
// so two requests a moment apart get the same answer although frames arrived in between.
TEST(Advice, ServeAnswersFromItsWindowAndCaches) {
  TempDir dir;
  json idle = healthy_metrics(60);
  idle["util_gpu"] = 0;
  write_file(dir / "scenario.json", scenario({healthy_metrics(), idle}).dump());
  write_file(dir / "sys/.keep", "");
  const int pid = start(
      {wstest::wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "100ms", "--sysfs-root", dir / "sys"},
      {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
       {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
       {"CUDA_VISIBLE_DEVICES", "\x01"}},
      dir.path(), dir / "out", dir / "err");
  const int port = wait_for_serve_port(dir / "err", 100);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto first = wstest::http::get(port, "/api/v1/advice", {}, std::chrono::seconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto second = wstest::http::get(port, "/api/v1/advice", {}, std::chrono::seconds(5));
  kill(pid, SIGTERM);
  wait_exit(pid);
  ASSERT_EQ(first.status, 200) << first.body;
  const json j = json::parse(first.body);
  EXPECT_GE(j["window"]["frames"].get<int>(), 10);
  const json& item = only(j["advice"], "idle_gpu");
  EXPECT_EQ(item["evidence"]["device"], "gpu1");
  EXPECT_NEAR(item["saving_pct"].get<double>(), 100.0 * 60 / (60 + 250), 1.5);
  EXPECT_EQ(second.body, first.body) << "recomputed within kRecomputeEvery";
}
} // namespace e2e_advice
