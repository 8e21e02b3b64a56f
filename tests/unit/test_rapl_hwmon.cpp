#include <gtest/gtest.h>

#include <thread>

#include "../support/sysfs_fixtures.hpp"
#include "sources/hwmon/hwmon_gpu_source.hpp"
#include "sources/rapl/rapl_source.hpp"
#include "sources/sysfs_util.hpp"

namespace unit_rapl_hwmon { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using namespace std::chrono_literals;

namespace {
Frame tick(SteadyClock::time_point t) {
  Frame f;
  f.mono = t;
  return f;
}
const PowerZoneSample* zone(const Frame& f, const std::string& domain) {
  for (const auto& z : f.cpu.zones)
    if (z.domain == domain) return &z;
  return nullptr;
}
} // namespace

TEST(Rapl, TwoSocketsKeptApartWithExactEnergy) {
  TempDir root;
  two_socket_rapl(root.path());
  RaplSource src(root.path(), 1s);
  ASSERT_TRUE(src.open()) << src.status().line();
  ASSERT_EQ(src.zones().size(), 6u);
  const auto t0 = SteadyClock::now();
  Frame f0 = tick(t0);
  src.sample(f0);
  ASSERT_EQ(f0.cpu.zones.size(), 6u);
  EXPECT_EQ(*zone(f0, "intel-rapl:0")->energy_j, 0.0);
  EXPECT_FALSE(zone(f0, "intel-rapl:0")->power_w); // no interval yet: missing, not 0

  set_energy(root.path(), "intel-rapl:0", 1'000'000 + 150'000'123); // +150.000123 J
  set_energy(root.path(), "intel-rapl:1", 3'000'000 + 90'000'000);  // +90 J
  set_energy(root.path(), "intel-rapl:0:1", 200'000 + 10'000'000);  // +10 J
  set_energy(root.path(), "intel-rapl:1:0", 400'000 + 12'500'000);  // +12.5 J
  set_energy(root.path(), "intel-rapl:2", 9'000'000 + 300'000'000); // +300 J psys
  Frame f1 = tick(t0 + 1s);
  src.sample(f1);
  EXPECT_DOUBLE_EQ(*zone(f1, "intel-rapl:0")->energy_j, 150.000123);
  EXPECT_DOUBLE_EQ(*zone(f1, "intel-rapl:0")->power_w, 150.000123);
  EXPECT_DOUBLE_EQ(*zone(f1, "intel-rapl:1")->energy_j, 90.0);
  EXPECT_EQ(*zone(f1, "intel-rapl:0")->socket, 0);
  EXPECT_EQ(*zone(f1, "intel-rapl:1")->socket, 1);
  EXPECT_EQ(*zone(f1, "intel-rapl:1:0")->socket, 1); // sub-zones inherit their package's socket
  EXPECT_EQ(zone(f1, "intel-rapl:1:0")->zone, "dram");
  EXPECT_FALSE(zone(f1, "intel-rapl:2")->socket); // psys covers the platform
  EXPECT_EQ(zone(f1, "intel-rapl:2")->zone, "psys");
  EXPECT_DOUBLE_EQ(*f1.cpu.package_energy_j, 240.000123);
  EXPECT_DOUBLE_EQ(*f1.cpu.dram_energy_j, 22.5);
  EXPECT_DOUBLE_EQ(*f1.cpu.package_power_w, 240.000123);
  EXPECT_STREQ(f1.cpu.power_method, "counter");
}

TEST(Rapl, WrapAroundBetweenTwoTicksIsCorrected) {
  TempDir root;
  write_rapl_zone(root.path(), {"intel-rapl:0", "package-0", 262143328850 - 1'000'000, 262143328850, 0});
  RaplSource src(root.path(), 1s);
  ASSERT_TRUE(src.open());
  const auto t0 = SteadyClock::now();
  Frame f0 = tick(t0);
  src.sample(f0);
  set_energy(root.path(), "intel-rapl:0", 4'000'000); // wrapped: 1 J to the top, then 4 J
  Frame f1 = tick(t0 + 2s);
  src.sample(f1);
  EXPECT_DOUBLE_EQ(*zone(f1, "intel-rapl:0")->energy_j, 5.0);
  EXPECT_DOUBLE_EQ(*zone(f1, "intel-rapl:0")->power_w, 2.5);
  set_energy(root.path(), "intel-rapl:0", 6'000'000);
  Frame f2 = tick(t0 + 3s);
  src.sample(f2);
  EXPECT_DOUBLE_EQ(*zone(f2, "intel-rapl:0")->energy_j, 7.0);
}

TEST(Rapl, KeeperReadsOftenEnoughThatNoWrapIsMissed) {
  TempDir root;
  // A tiny range at a known maximum power wraps every 10 ms: far faster than the 10 s interval.
  write_rapl_zone(root.path(), {"intel-rapl:0", "package-0", 0, 1000, 100'000'000});
  RaplSource src(root.path(), 10s);
  ASSERT_TRUE(src.open()) << src.status().line();
  ASSERT_GT(src.keeper_period().count(), 0);
  EXPECT_LE(src.keeper_period(), 10ms);
  const auto t0 = SteadyClock::now();
  Frame f0 = tick(t0);
  src.sample(f0);
  // Between two ticks the counter wraps twice; only the keeper's reads can see both.
  set_energy(root.path(), "intel-rapl:0", 900); // +900
  std::this_thread::sleep_for(150ms);
  set_energy(root.path(), "intel-rapl:0", 100); // wrapped: +200
  std::this_thread::sleep_for(150ms);
  set_energy(root.path(), "intel-rapl:0", 800); // +700
  std::this_thread::sleep_for(150ms);
  Frame f1 = tick(t0 + 10s);
  src.sample(f1);
  EXPECT_DOUBLE_EQ(*zone(f1, "intel-rapl:0")->energy_j, 1800e-6);
  // A short interval needs no keeper.
  RaplSource fast(root.path(), 1ms);
  ASSERT_TRUE(fast.open());
  EXPECT_EQ(fast.keeper_period().count(), 0);
}

TEST(Rapl, NestedOnlySubZonesAreFound) {
  TempDir root;
  write_rapl_zone(root.path(), {"intel-rapl:0", "package-0", 0});
  write_rapl_zone(root.path(), {"intel-rapl:0/intel-rapl:0:2", "dram", 0});
  RaplSource src(root.path(), 1s);
  ASSERT_TRUE(src.open());
  ASSERT_EQ(src.zones().size(), 2u);
  EXPECT_EQ(src.zones()[1].zone, "dram");
  EXPECT_EQ(*src.zones()[1].socket, 0);
}

TEST(Rapl, NoZonesSaysWhatToDo) {
  TempDir root;
  RaplSource src(root.path(), 1s);
  EXPECT_FALSE(src.open());
  EXPECT_NE(src.status().line().find("--cpu-tdp"), std::string::npos);
  EXPECT_NE(src.status().line().find("not recorded unless --cpu-tdp"), std::string::npos);
  // With --cpu-tdp given, it says the estimate stands in, not that one could be asked for.
  RaplSource asked(root.path(), 1s, true);
  EXPECT_FALSE(asked.open());
  EXPECT_EQ(asked.status().line().find("unless"), std::string::npos) << asked.status().line();
  EXPECT_NE(asked.status().line().find("estimated from --cpu-tdp instead"), std::string::npos) << asked.status().line();
}

TEST(CpuEstimate, OnlyWhereRaplMeasuredNothingAndLabelled) {
  CpuEstimateSource est(200);
  const auto t0 = SteadyClock::now();
  Frame a = tick(t0);
  a.cpu.util_pct = 50;
  est.sample(a);
  EXPECT_DOUBLE_EQ(*a.cpu.package_power_w, 100);
  EXPECT_STREQ(a.cpu.power_method, "estimated");
  Frame b = tick(t0 + 1s);
  b.cpu.util_pct = 100;
  est.sample(b);
  // issue 29: b's utilisation is the mean over the second since a, so is its 200 W (not a trapezoid from a's 100 W)
  EXPECT_NEAR(*b.cpu.package_energy_j - *a.cpu.package_energy_j, 200, 1e-6);
  Frame measured = tick(t0 + 2s);
  measured.cpu.util_pct = 100;
  measured.cpu.package_power_w = 42;
  measured.cpu.power_method = "counter";
  est.sample(measured);
  EXPECT_DOUBLE_EQ(*measured.cpu.package_power_w, 42);
  Frame no_util = tick(t0 + 3s);
  est.sample(no_util);
  EXPECT_FALSE(no_util.cpu.package_power_w); // no utilisation, no guess
}

// issue 29: the first estimated tick carries the energy of the interval its utilisation covers (since the source
// opened, as a RAPL counter's first reading does), not 0 J.
TEST(CpuEstimate, TheFirstTickIsNotZeroJoules) {
  CpuEstimateSource est(200);
  ASSERT_TRUE(est.open());
  const auto opened = SteadyClock::now();
  Frame a = tick(opened + 2s);
  a.cpu.util_pct = 50;
  est.sample(a);
  ASSERT_TRUE(a.cpu.package_energy_j);
  EXPECT_GE(*a.cpu.package_energy_j, 200.0); // 100 W over at least the 2 s since it opened
  EXPECT_LT(*a.cpu.package_energy_j, 201.0);
  Frame b = tick(opened + 3s);
  b.cpu.util_pct = 25;
  est.sample(b);
  EXPECT_NEAR(*b.cpu.package_energy_j - *a.cpu.package_energy_j, 50.0, 1e-6);
}

// A card a richer backend already records (claimed by PCI bus id, in NVML's spelling) is dropped, files closed.
TEST(HwmonGpu, ACardClaimedByAnotherBackendIsDropped) {
  EXPECT_EQ(normalize_pci_bus_id("00000000:03:00.0"), "0000:03:00.0");
  EXPECT_EQ(normalize_pci_bus_id("0000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(normalize_pci_bus_id("3b:00.0"), "3b:00.0");
  TempDir root;
  amd_and_intel_gpus(root.path());
  HwmonGpuSource src(root.path());
  ASSERT_TRUE(src.open()) << src.status().line();
  EXPECT_EQ(src.release_claimed({normalize_pci_bus_id("00000000:18:00.0")}), 0u); // not one of its cards
  EXPECT_EQ(src.release_claimed({normalize_pci_bus_id("00000000:03:00.0")}), 1u);
  auto devs = src.devices();
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].vendor, "intel");
  Frame f;
  src.sample(f);
  ASSERT_EQ(f.gpus.size(), 1u);
}

TEST(HwmonGpu, AmdAndIntelLayouts) {
  TempDir root;
  amd_and_intel_gpus(root.path());
  HwmonGpuSource src(root.path());
  ASSERT_TRUE(src.open()) << src.status().line();
  auto devs = src.devices();
  ASSERT_EQ(devs.size(), 2u); // the NVIDIA card is NVML's, the connector is not a card
  EXPECT_EQ(devs[0].vendor, "amd");
  EXPECT_EQ(devs[0].name, "AMD Radeon RX 7900 XTX");
  EXPECT_EQ(devs[0].uuid, "amd-6a2c3e1f0b9d8e7c");
  EXPECT_EQ(devs[0].pci_bus_id, "0000:03:00.0");
  EXPECT_EQ(*devs[0].mem_total_bytes, 25753026560);
  EXPECT_EQ(devs[0].slowdown_temp_c, 100.0); // temp1_crit, the edge sensor's
  EXPECT_EQ(devs[0].shutdown_temp_c, 105.0); // temp1_emergency
  EXPECT_EQ(devs[1].vendor, "intel");
  EXPECT_FALSE(devs[1].slowdown_temp_c.has_value()); // no temp1_crit: none, not a guess
  EXPECT_EQ(devs[1].uuid, "PCI-0000:00:02.0");
  src.set_first_index(2);
  Frame f;
  src.sample(f);
  ASSERT_EQ(f.gpus.size(), 2u);
  const auto& a = f.gpus[0];
  EXPECT_EQ(a.gpu_index, 2);
  EXPECT_DOUBLE_EQ(*a.power_w, 123.45); // power1_average, µW
  EXPECT_DOUBLE_EQ(*a.power_avg_w, 123.45);
  EXPECT_FALSE(a.energy_counter_uj);     // amdgpu has no energy counter: integrated
  EXPECT_DOUBLE_EQ(*a.temp_gpu_c, 55.0); // edge
  EXPECT_DOUBLE_EQ(*a.temp_mem_c, 70.0);
  EXPECT_EQ(*a.clock_sm_mhz, 2100);
  EXPECT_EQ(*a.clock_mem_mhz, 1250);
  EXPECT_DOUBLE_EQ(*a.util_gpu_pct, 45);
  EXPECT_DOUBLE_EQ(*a.util_mem_pct, 12);
  EXPECT_EQ(*a.mem_used_bytes, 4294967296);
  EXPECT_DOUBLE_EQ(*a.power_limit_w, 327);
  const auto& i = f.gpus[1];
  EXPECT_EQ(i.gpu_index, 3);
  EXPECT_EQ(*i.energy_counter_uj, 5000000);
  EXPECT_DOUBLE_EQ(*i.power_w, 31.0);
  EXPECT_EQ(*i.clock_gfx_mhz, 1300);
  EXPECT_FALSE(i.util_gpu_pct); // i915 exports no busy %: missing, not 0
  EXPECT_FALSE(i.mem_used_bytes);
}

TEST(HwmonGpu, NoCards) {
  TempDir root;
  write_file(root / "class/drm/card0/device/uevent", "DRIVER=nvidia\n");
  HwmonGpuSource src(root.path());
  EXPECT_FALSE(src.open());
}

// The directory-name parsers that replaced std::regex: what sysfs holds, and names that only look like it.
TEST(SysfsNames, CardsAndRaplZones) {
  EXPECT_EQ(sysfs::numbered("card0", "card"), 0);
  EXPECT_EQ(sysfs::numbered("card12", "card"), 12);
  EXPECT_FALSE(sysfs::numbered("card0-DP-1", "card"));
  EXPECT_FALSE(sysfs::numbered("card", "card"));
  EXPECT_FALSE(sysfs::numbered("renderD128", "card"));
  EXPECT_FALSE(sysfs::numbered("card99999999999", "card")); // std::stoi threw out_of_range here
  EXPECT_EQ(sysfs::rapl_zone_dir("intel-rapl:1"), (std::pair{1, -1}));
  EXPECT_EQ(sysfs::rapl_zone_dir("intel-rapl:0:2"), (std::pair{0, 2}));
  EXPECT_FALSE(sysfs::rapl_zone_dir("intel-rapl:0:"));
  EXPECT_FALSE(sysfs::rapl_zone_dir("intel-rapl:0:1:2"));
  EXPECT_FALSE(sysfs::rapl_zone_dir("intel-rapl:x"));
  EXPECT_FALSE(sysfs::rapl_zone_dir("intel-rapl-mmio:0"));
}
} // namespace unit_rapl_hwmon
