// Missing is missing (issue 29): energy no process took is `unattributed`, and `idle` only where the device's
// utilisation says so; a process's CPU energy in a run that measured no CPU energy is unknown (null), not 0.
#include <gtest/gtest.h>

#include "../support/support.hpp"
#include "accounting/accounting.hpp"
#include "runs/run_view.hpp"

namespace unit_attribution_unknown { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;

namespace {

Frame gpu_frame(int64_t tick, double energy_j, double util_pct) {
  Frame f;
  f.tick = tick;
  f.ts_ms = 1795262609000 + tick * 1000;
  GpuSample g;
  g.gpu_index = 0;
  g.power_w = 300;
  g.util_gpu_pct = util_pct;
  g.energy_counter_uj = static_cast<int64_t>(energy_j * 1e6);
  f.gpus.push_back(g);
  return f;
}

// A scan of the machine (record, serve) that lists the GPU but finds no process on it: a container's processes that
// NVML does not show, say.
std::shared_ptr<ProcessSnapshot> scan_without_gpu_processes() {
  auto snap = std::make_shared<ProcessSnapshot>();
  snap->gpus_listed = {0};
  ProcessSample p;
  p.id = {77, 1};
  p.comm = "python";
  p.sampled = true;
  p.cpu_time_s = 0.5;
  snap->procs.push_back(p);
  return snap;
}

RunInfo machine_run(const RunSummary& s) {
  RunInfo r;
  r.run_id = "20261126-000000-00000000";
  r.task = "record";
  r.start_ms = 1795262609000;
  r.end_ms = r.start_ms + 20000;
  r.interval_ms = 1000;
  r.samples = s.samples;
  r.total_energy_j = s.total_energy_j();
  r.summary = s.to_json().dump();
  return r;
}

} // namespace

TEST(AttributionUnknown, ABusyGpuWithNoProcessIsUnattributedNotIdle) {
  GpuDevice dev;
  dev.gpu_index = 0;
  Accounting acc({dev});
  for (int t = 0; t <= 10; ++t) { // 78 % busy at 300 W, nobody listed on it
    Frame f = gpu_frame(t, 300.0 * t, 78);
    if (t == 1) f.processes = scan_without_gpu_processes();
    acc.process(f);
  }
  const RunSummary s = acc.summary();
  const auto& g = s.attribution.devices.at("gpu0");
  EXPECT_NEAR(g.unattributed_j, 3000, 1e-6);
  EXPECT_EQ(g.idle_j, 0) << "78 % utilisation is not idle";
  const std::string text = run_text(machine_run(s));
  EXPECT_NE(text.find("unattributed 100.0 %"), std::string::npos) << text;
  EXPECT_EQ(text.find("idle"), std::string::npos) << text;
}

TEST(AttributionUnknown, OnlyTheTicksAtIdleUtilisationAreIdle) {
  GpuDevice dev;
  dev.gpu_index = 0;
  Accounting acc({dev});
  // 10 s busy (78 %) and 10 s idle (0 %) at the same 300 W, with no process to give any of it to.
  for (int t = 0; t <= 20; ++t) {
    Frame f = gpu_frame(t, 300.0 * t, t <= 10 ? 78 : 0);
    if (t == 1) f.processes = scan_without_gpu_processes();
    acc.process(f);
  }
  const RunSummary s = acc.summary();
  const auto& g = s.attribution.devices.at("gpu0");
  EXPECT_NEAR(g.measured_j(), 6000, 1e-6);
  EXPECT_NEAR(g.unattributed_j, 6000, 1e-6);
  EXPECT_NEAR(g.idle_j, 3000, 1e-6);
  const nlohmann::json j = s.to_json()["attribution"]["devices"]["gpu0"];
  EXPECT_NEAR(j["idle_j"].get<double>(), 3000, 1e-6);
  const std::string text = run_text(machine_run(s));
  EXPECT_NE(text.find("unattributed 50.0 %; idle 50.0 %"), std::string::npos) << text;
}

TEST(AttributionUnknown, CpuEnergyOfProcessesIsNullWithoutCpuPower) {
  GpuDevice dev;
  dev.gpu_index = 0;
  Accounting acc({dev});
  std::shared_ptr<ProcessSnapshot> last;
  for (int t = 0; t <= 5; ++t) {
    Frame f = gpu_frame(t, 100.0 * t, 50); // a GPU, and no CPU power at all (no RAPL, no --cpu-tdp)
    if (t % 2 == 1) {
      auto snap = scan_without_gpu_processes();
      snap->cpu_busy_s = 1;
      snap->cpu_total_s = 4;
      f.processes = last = snap;
    }
    acc.process(f);
  }
  ASSERT_TRUE(last);
  EXPECT_FALSE(last->procs[0].cpu_energy_j) << "stored as NULL in process_samples, not 0";
  EXPECT_FALSE(last->procs[0].cpu_power_w);
  const nlohmann::json procs = acc.summary().to_json()["attribution"]["processes"];
  ASSERT_FALSE(procs.empty());
  for (const auto& p : procs)
    EXPECT_TRUE(p["cpu_energy_j"].is_null()) << p.dump();
}

TEST(AttributionUnknown, CpuPowerOfAScanThatCannotSplitTheCpuIsNull) {
  Accounting acc({});
  auto cpu_frame = [](int64_t tick, double pkg_j) {
    Frame f;
    f.tick = tick;
    f.cpu.package_energy_j = pkg_j;
    f.cpu.package_power_w = 40;
    f.cpu.power_method = "counter";
    return f;
  };
  Frame f0 = cpu_frame(0, 0);
  acc.process(f0);
  // The first scan has no window to split the CPU's time by: its processes' shares are unknown.
  auto first = scan_without_gpu_processes();
  first->procs[0].in_run = true;
  Frame f1 = cpu_frame(1, 40);
  f1.processes = first;
  acc.process(f1);
  EXPECT_FALSE(first->procs[0].cpu_power_w);
  EXPECT_EQ(first->procs[0].cpu_energy_j, 0.0) << "CPU energy is measured: none of it went to this process yet";
  auto second = scan_without_gpu_processes();
  second->procs[0].in_run = true;
  second->cpu_busy_s = 1;
  second->cpu_total_s = 4;
  second->procs[0].cpu_time_s = 1;
  Frame f2 = cpu_frame(2, 80);
  f2.processes = second;
  acc.process(f2);
  ASSERT_TRUE(second->procs[0].cpu_power_w);
  EXPECT_NEAR(*second->procs[0].cpu_power_w, 10, 1e-9); // a quarter of 40 W
  EXPECT_NEAR(*second->procs[0].cpu_energy_j, 10, 1e-9);
}

} // namespace unit_attribution_unknown
