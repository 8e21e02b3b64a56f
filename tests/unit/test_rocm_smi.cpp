// The ROCm SMI backend against the fake librocm_smi64 (tests/fakes/fake_rocm_smi.cpp), loaded through the production
// dlopen path: values per tick and device, the energy counter (exact, wraps included), missing functions,
// unsupported fields, a lost device, both layouts of rsmi_frequencies_t, and the processes on each GPU.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "accounting/accounting.hpp"
#include "sources/rocm/rocm_smi_source.hpp"

namespace unit_rocm_smi { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

std::string fake_rocm(const std::string& variant = "") {
  return std::string(WATTSCOPE_FAKES_DIR) + "/librocm_smi64-fake" + (variant.empty() ? "" : "-" + variant) + ".so";
}

constexpr int kTicks = 12;

// Distinct values per device, metric and tick, so a value in the wrong row, member or device shows.
json series(int dev, int metric, double scale = 1, double offset = 0) {
  json a = json::array();
  for (int k = 0; k < kTicks; ++k)
    a.push_back(offset + scale * ((dev * 37 + metric * 11 + k * 3) % 97));
  return a;
}

json device(int i) {
  json m;
  json energy = json::array();
  long long e = 1'000'000LL * (i + 1);
  for (int k = 0; k < kTicks; ++k)
    energy.push_back(e += 1000 + k * 17 + i);
  m["energy_count"] = energy;
  m["energy_resolution_uj"] = 15.2587890625; // 1e6 / 65536: exact in a float, as the real boards' resolution is
  m["socket_power_uw"] = series(i, 1, 1e6, 100e6);
  m["power_ave_uw"] = series(i, 2, 1e6, 90e6);
  m["power_cap_uw"] = series(i, 3, 1e6, 300e6);
  m["busy_pct"] = series(i, 4);
  m["mem_busy_pct"] = series(i, 5);
  m["vram_used_bytes"] = series(i, 6, 1 << 20);
  m["vram_total_bytes"] = 68702699520LL;
  m["temp_edge_mc"] = series(i, 7, 1000, 20000);
  m["temp_junction_mc"] = series(i, 8, 1000, 30000);
  m["temp_memory_mc"] = series(i, 9, 1000, 40000);
  m["sclk_levels_hz"] = {500000000, 1000000000 + i * 1000000, 1700000000};
  m["sclk_level"] = json::array({0, 1, 2, 1, 0, 2, 2, 1, 0, 1, 2, 0});
  m["mclk_levels_hz"] = {400000000, 1600000000};
  m["mclk_level"] = json::array({1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 0, 1});
  m["fan_speed"] = series(i, 10);
  m["fan_max"] = 255;
  m["pcie_lanes"] = {1, 4, 16};
  m["pcie_level"] = json::array({2, 1, 0, 2, 2, 1, 0, 2, 2, 1, 0, 2});
  m["pcie_sent_packets"] = 1000000 + i; // issue 30: counts of packets, as the kernel's pcie_bw has them
  m["pcie_received_packets"] = 2000000 + i;
  return {{"name", "AMD Instinct MI210"},
          {"unique_id", 0x6a2c3e1f0b9d8e00ULL + i},
          {"pci_bus_id", "0000:0" + std::to_string(3 + i) + ":00.0"},
          {"metrics", m}};
}

json scenario(int n, json version = json::array({6, 1, 2})) {
  json s = {{"version", version}, {"driver_version", "6.8.5"}, {"devices", json::array()}};
  for (int i = 0; i < n; ++i)
    s["devices"].push_back(device(i));
  return s;
}

// A source on the fake library with this scenario; the scenario file lives in the test's own directory.
struct Fake {
  TempDir dir;
  std::unique_ptr<RocmSmiSource> src;
  explicit Fake(const json& scen, const std::string& variant = "") {
    write_file(dir / "scenario.json", scen.dump());
    ::setenv("WATTSCOPE_FAKE_ROCM_SMI_SCENARIO", (dir / "scenario.json").c_str(), 1);
    RocmSmiSource::Options o;
    o.library_path = fake_rocm(variant);
    o.slow_period = std::chrono::milliseconds(20);
    src = std::make_unique<RocmSmiSource>(o);
  }
  ~Fake() {
    src.reset(); // rsmi_shut_down while the scenario is still there
    ::unsetenv("WATTSCOPE_FAKE_ROCM_SMI_SCENARIO");
  }
  Frame tick(int64_t k) {
    Frame f;
    f.tick = k;
    f.ts_ms = 1000 * k;
    f.mono = SteadyClock::now();
    src->sample(f);
    return f;
  }
};

const GpuSample* on(const Frame& f, int gpu) {
  for (const auto& s : f.gpus)
    if (s.gpu_index == gpu) return &s;
  return nullptr;
}

double at(const json& v, int k) {
  return v.is_array() ? v[static_cast<size_t>(std::min<int>(k, static_cast<int>(v.size()) - 1))].get<double>()
                      : v.get<double>();
}

} // namespace

TEST(RocmSmi, ReadsEveryMetricPerTickAndDevice) {
  const json scen = scenario(2);
  Fake f(scen);
  ASSERT_TRUE(f.src->open()) << f.src->status().line();
  auto devs = f.src->devices();
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[1].vendor, "amd");
  EXPECT_EQ(devs[1].name, "AMD Instinct MI210");
  EXPECT_EQ(devs[1].pci_bus_id, "0000:04:00.0");
  EXPECT_EQ(devs[1].uuid, "amd-6a2c3e1f0b9d8e01") << "the identity hwmon gives the same card";
  EXPECT_EQ(devs[0].clock_sm_max_mhz, 1700);
  EXPECT_EQ(devs[0].clock_mem_max_mhz, 1600);
  EXPECT_EQ(devs[0].mem_total_bytes, 68702699520LL);
  EXPECT_EQ(devs[0].power_source, "rsmi_dev_current_socket_power_get");
  EXPECT_TRUE(f.src->status().measures_power);
  for (int k = 0; k < 8; ++k) {
    const Frame fr = f.tick(k);
    ASSERT_EQ(fr.gpus.size(), 2u) << "tick " << k;
    for (int d = 0; d < 2; ++d) {
      SCOPED_TRACE("tick " + std::to_string(k) + " gpu " + std::to_string(d));
      const json& m = scen["devices"][d]["metrics"];
      const GpuSample* s = on(fr, d);
      ASSERT_NE(s, nullptr);
      EXPECT_DOUBLE_EQ(*s->power_w, at(m["socket_power_uw"], k) / 1e6);
      EXPECT_STREQ(s->power_source, "rsmi_dev_current_socket_power_get");
      EXPECT_DOUBLE_EQ(*s->power_avg_w, at(m["power_ave_uw"], k) / 1e6);
      // open() read the power cap and the clock tables once (the device's limit and maximum clocks): k counts calls.
      EXPECT_DOUBLE_EQ(*s->power_limit_w, at(m["power_cap_uw"], k + 1) / 1e6);
      EXPECT_DOUBLE_EQ(*s->util_gpu_pct, at(m["busy_pct"], k));
      EXPECT_DOUBLE_EQ(*s->util_mem_pct, at(m["mem_busy_pct"], k));
      EXPECT_EQ(*s->mem_used_bytes, static_cast<int64_t>(at(m["vram_used_bytes"], k)));
      EXPECT_EQ(*s->mem_total_bytes, 68702699520LL);
      EXPECT_DOUBLE_EQ(*s->temp_gpu_c, at(m["temp_edge_mc"], k) / 1000);
      EXPECT_DOUBLE_EQ(*s->temp_mem_c, at(m["temp_memory_mc"], k) / 1000);
      EXPECT_EQ(*s->clock_sm_mhz, m["sclk_levels_hz"][m["sclk_level"][k + 1].get<size_t>()].get<int64_t>() / 1000000);
      EXPECT_EQ(*s->clock_mem_mhz, m["mclk_levels_hz"][m["mclk_level"][k + 1].get<size_t>()].get<int64_t>() / 1000000);
      EXPECT_DOUBLE_EQ(*s->fan_pct, 100.0 * at(m["fan_speed"], k) / 255);
      EXPECT_EQ(*s->pcie_link_width, m["pcie_lanes"][m["pcie_level"][k].get<size_t>()].get<int64_t>());
      EXPECT_EQ(*s->pcie_link_width_max, 16);
      ASSERT_TRUE(s->energy_counter_uj.has_value());
      const double counts = at(m["energy_count"], k) - at(m["energy_count"], 0);
      EXPECT_EQ(*s->energy_counter_uj, std::llround(counts * 15.2587890625));
    }
  }
}

// PCIe throughput comes from its own thread (the real call samples for a second) and reaches the tick's row.
TEST(RocmSmi, PcieThroughputFromItsOwnThread) {
  Fake f(scenario(1));
  ASSERT_TRUE(f.src->open());
  OptI tx, rx;
  for (int k = 0; k < 200 && !tx; ++k) {
    const Frame fr = f.tick(k);
    if (const GpuSample* s = on(fr, 0)) tx = s->pcie_tx_bytes_per_s, rx = s->pcie_rx_bytes_per_s;
    if (!tx) ::usleep(10000);
  }
  ASSERT_TRUE(tx.has_value());
  // Issue 30: packets times the largest packet's size (256 bytes here), as rocm-smi reports them.
  EXPECT_EQ(*tx, 1000000LL * 256);
  EXPECT_EQ(*rx, 2000000LL * 256);
}

// Issue 30: the packet size the library answers is the one used; none (0) leaves the throughput missing.
TEST(RocmSmi, PcieThroughputIsPacketsTimesTheirSize) {
  for (const int size : {128, 0}) {
    SCOPED_TRACE(size);
    json scen = scenario(1);
    scen["devices"][0]["metrics"]["pcie_max_packet_bytes"] = size;
    Fake f(scen);
    ASSERT_TRUE(f.src->open());
    OptI tx, rx;
    bool row = false;
    for (int k = 0; k < 150 && !tx; ++k) {
      const Frame fr = f.tick(k);
      if (const GpuSample* s = on(fr, 0)) row = true, tx = s->pcie_tx_bytes_per_s, rx = s->pcie_rx_bytes_per_s;
      if (!tx) ::usleep(10000);
    }
    EXPECT_TRUE(row);
    if (size == 0) {
      EXPECT_FALSE(tx.has_value());
      EXPECT_FALSE(rx.has_value());
    } else {
      ASSERT_TRUE(tx.has_value());
      EXPECT_EQ(*tx, 1000000LL * size);
      EXPECT_EQ(*rx, 2000000LL * size);
    }
  }
}

// The frequency struct changed layout in ROCm 6: a 5.x library is read with the 5.x layout, not 8 bytes off.
TEST(RocmSmi, ClocksReadInTheLayoutOfTheLibrarysVersion) {
  for (const json& version : {json::array({5, 2, 3}), json::array({6, 0, 2})}) {
    SCOPED_TRACE(version.dump());
    Fake f(scenario(1, version));
    ASSERT_TRUE(f.src->open());
    EXPECT_EQ(f.src->devices()[0].clock_sm_max_mhz, 1700);
    const Frame fr = f.tick(0);
    ASSERT_EQ(fr.gpus.size(), 1u);
    EXPECT_EQ(fr.gpus[0].clock_sm_mhz, 1000); // sclk_level[1] (open() made call 0): 1000 MHz
    EXPECT_EQ(fr.gpus[0].clock_mem_mhz, 400); // mclk_level[1]: 400 MHz
    EXPECT_EQ(fr.gpus[0].pcie_link_width, 16);
  }
}

TEST(RocmSmi, CounterStepCorrectsA32BitWrapAndARestart) {
  EXPECT_EQ(RocmSmiSource::counter_step(100, 250), 150u);
  EXPECT_EQ(RocmSmiSource::counter_step(0xFFFFFF00ull, 0x10ull), 0x110u) << "32-bit accumulator wrapped";
  EXPECT_EQ(RocmSmiSource::counter_step(0x1'0000'0100ull, 0x50ull), 0x50u) << "a 64-bit counter restarted from 0";
}

// Energy from the counter, exact through accounting: counts x resolution, across a 32-bit wrap of the accumulator.
TEST(RocmSmi, EnergyFromTheCounterIsExactAcrossAWrap) {
  json scen = scenario(1);
  scen["devices"][0]["metrics"]["energy_count"] = {4294967000LL, 4294967290LL, 100, 700, 4000};
  Fake f(scen);
  ASSERT_TRUE(f.src->open());
  Accounting acc(f.src->devices());
  const double res = 15.2587890625;
  const long long counts[] = {0, 290, 290 + 6 + 100, 396 + 600, 996 + 3300};
  for (int k = 0; k < 5; ++k) {
    Frame fr = f.tick(k);
    acc.process(fr);
    ASSERT_EQ(fr.gpus.size(), 1u);
    ASSERT_TRUE(fr.gpus[0].energy_j.has_value());
    EXPECT_NEAR(*fr.gpus[0].energy_j, static_cast<double>(counts[k]) * res / 1e6, 1e-6) << "tick " << k;
  }
  EXPECT_EQ(acc.summary().gpus[0].device.energy_method, "counter");
}

// A ROCm 5.x library without the newer calls: no energy counter (power is integrated), power from the average, no
// clocks (the struct's layout is unknown without rsmi_version_get), processes through the per-pid call.
TEST(RocmSmi, MissingFunctionsLeaveTheirMetricsMissing) {
  Fake f(scenario(1), "old");
  ASSERT_TRUE(f.src->open()) << f.src->status().line();
  const json rep = f.src->report();
  const auto missing = rep["missing_functions"].get<std::vector<std::string>>();
  for (const char* fn : {"rsmi_dev_energy_count_get", "rsmi_dev_current_socket_power_get",
                         "rsmi_compute_process_info_by_device_get", "rsmi_version_get"})
    EXPECT_NE(std::find(missing.begin(), missing.end(), fn), missing.end()) << fn;
  EXPECT_FALSE(rep["devices"][0]["metrics"]["energy_count"].get<bool>());
  EXPECT_FALSE(rep["devices"][0]["metrics"]["clock_sys"].get<bool>());
  EXPECT_EQ(f.src->devices()[0].power_source, "rsmi_dev_power_ave_get");
  EXPECT_TRUE(f.src->status().measures_power);
  const Frame fr = f.tick(0);
  ASSERT_EQ(fr.gpus.size(), 1u);
  const GpuSample& s = fr.gpus[0];
  EXPECT_FALSE(s.energy_counter_uj.has_value());
  EXPECT_FALSE(s.clock_sm_mhz.has_value());
  EXPECT_FALSE(s.clock_mem_mhz.has_value());
  EXPECT_FALSE(s.pcie_link_width.has_value());
  EXPECT_DOUBLE_EQ(*s.power_w, at(scenario(1)["devices"][0]["metrics"]["power_ave_uw"], 0) / 1e6);
  EXPECT_STREQ(s.power_source, "rsmi_dev_power_ave_get");
  EXPECT_TRUE(s.util_gpu_pct.has_value()) << "what the library has is still read";
}

TEST(RocmSmi, ALibraryWithoutARequiredFunctionIsNotUsed) {
  Fake f(scenario(1), "broken");
  EXPECT_FALSE(f.src->open());
  EXPECT_NE(f.src->status().detail.find("rsmi_num_monitor_devices"), std::string::npos) << f.src->status().detail;
}

TEST(RocmSmi, NoLibraryIsMissingWithAFix) {
  RocmSmiSource src({"/nonexistent/librocm_smi64.so", std::chrono::seconds(1)});
  EXPECT_FALSE(src.open());
  EXPECT_EQ(src.status().state, SourceStatus::State::Missing);
  EXPECT_NE(src.status().detail.find("WATTSCOPE_ROCM_SMI_LIBRARY"), std::string::npos);
  EXPECT_FALSE(src.status().fix.empty());
}

// NOT_SUPPORTED and an unreadable file before any answer switch a call off (missing, never 0); a transient error
// leaves the value missing for that tick only.
TEST(RocmSmi, UnsupportedFieldsAreMissingAndTransientErrorsOneTick) {
  json scen = scenario(1);
  scen["devices"][0]["unsupported"] = {"power_ave_uw", "fan_speed"};
  scen["devices"][0]["errors"] = {{"temp_memory_mc", {{"code", 3}, {"from_tick", 0}}}, // FILE_ERROR from the start
                                  {"busy_pct", {{"code", 16}, {"ticks", {1}}}}};       // BUSY once
  Fake f(scen);
  ASSERT_TRUE(f.src->open());
  for (int k = 0; k < 4; ++k) {
    const Frame fr = f.tick(k);
    ASSERT_EQ(fr.gpus.size(), 1u);
    const GpuSample& s = fr.gpus[0];
    EXPECT_FALSE(s.power_avg_w.has_value());
    EXPECT_TRUE(s.power_w.has_value()) << "the socket power still answers";
    EXPECT_FALSE(s.fan_pct.has_value());
    EXPECT_FALSE(s.temp_mem_c.has_value());
    EXPECT_TRUE(s.temp_gpu_c.has_value());
    EXPECT_EQ(s.util_gpu_pct.has_value(), k != 1) << "tick " << k;
  }
  const json rep = f.src->report()["devices"][0]["metrics"];
  EXPECT_FALSE(rep["power_ave"].get<bool>());
  EXPECT_FALSE(rep["fan_speed"].get<bool>());
  EXPECT_FALSE(rep["temp_memory"].get<bool>());
  EXPECT_TRUE(rep["busy_percent"].get<bool>()) << "a transient error does not switch a call off";
}

// A GPU that vanishes (every call answers FILE_ERROR after answering before) has no rows from then on, is marked
// lost with an event after kLostLimit such ticks, and the other GPU keeps recording.
TEST(RocmSmi, ALostDeviceStopsAndTheOthersGoOn) {
  json scen = scenario(2);
  scen["devices"][1]["lost_at_tick"] = 3;
  Fake f(scen);
  ASSERT_TRUE(f.src->open());
  int lost_events = 0;
  for (int k = 0; k < 10; ++k) {
    const Frame fr = f.tick(k);
    EXPECT_NE(on(fr, 0), nullptr) << "tick " << k;
    EXPECT_EQ(on(fr, 1) != nullptr, k < 3) << "tick " << k;
    for (const auto& e : fr.events) {
      EXPECT_EQ(e.kind, "device-lost");
      EXPECT_EQ(e.source, "gpu1");
      EXPECT_EQ(k, 3 + RocmSmiSource::kLostLimit - 1) << "lost on the kLostLimit-th failing tick";
      EXPECT_NE(e.detail.find("RSMI_STATUS_FILE_ERROR"), std::string::npos) << e.detail;
      ++lost_events;
    }
  }
  EXPECT_EQ(lost_events, 1);
  EXPECT_TRUE(f.src->report()["devices"][1]["lost"].get<bool>());
}

// The processes on each GPU, with their VRAM and CU occupancy, for attribution; a process on a GPU not recorded
// (lost) is not listed for it.
TEST(RocmSmi, ListsTheProcessesOnEachGpu) {
  json scen = scenario(2);
  const auto me = static_cast<int>(::getpid());
  scen["processes"] = {{{"pid", me},
                        {"gpus",
                         {{"0", {{"vram_bytes", 3LL << 30}, {"cu_occupancy", {40, 55}}}},
                          {"1", {{"vram_bytes", 1LL << 30}, {"cu_occupancy", 10}}}}}}};
  Fake f(scen);
  ASSERT_TRUE(f.src->open());
  f.src->set_first_index(2); // after two NVIDIA GPUs: the samples carry wattscope's index, not ROCm SMI's
  ASSERT_TRUE(f.src->lists_gpu_processes());
  for (int scan = 0; scan < 2; ++scan) {
    std::vector<GpuProcessSample> out;
    std::vector<int> listed;
    f.src->gpu_processes(out, listed);
    EXPECT_EQ(listed, (std::vector<int>{2, 3}));
    ASSERT_EQ(out.size(), 2u);
    std::map<int, GpuProcessSample> by_gpu;
    for (const auto& g : out) {
      EXPECT_EQ(g.id.pid, me);
      by_gpu[g.gpu_index] = g;
    }
    EXPECT_EQ(by_gpu[2].mem_used_bytes, 3LL << 30);
    EXPECT_EQ(by_gpu[2].sm_pct, scan == 0 ? 40.0 : 55.0);
    EXPECT_EQ(by_gpu[3].mem_used_bytes, 1LL << 30);
    EXPECT_EQ(by_gpu[3].sm_pct, 10.0);
  }
}

// ROCm before 5.5 has no per-device process call: the per-pid figures are used for a process on one GPU only.
TEST(RocmSmi, ProcessesWithoutThePerDeviceCall) {
  json scen = scenario(2);
  const auto me = static_cast<int>(::getpid());
  scen["processes"] = {{{"pid", me}, {"gpus", {{"1", {{"vram_bytes", 5LL << 20}, {"cu_occupancy", 25}}}}}}};
  Fake f(scen, "old");
  ASSERT_TRUE(f.src->open());
  ASSERT_TRUE(f.src->lists_gpu_processes());
  std::vector<GpuProcessSample> out;
  std::vector<int> listed;
  f.src->gpu_processes(out, listed);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].gpu_index, 1);
  EXPECT_EQ(out[0].mem_used_bytes, 5LL << 20);
  EXPECT_EQ(out[0].sm_pct, 25.0);
}

// MI300 has no edge sensor: the GPU temperature is then the junction (hotspot) sensor's; with an edge sensor the
// junction is not asked for at all.
TEST(RocmSmi, GpuTemperatureFromTheJunctionWhereThereIsNoEdgeSensor) {
  json scen = scenario(2);
  scen["devices"][1]["unsupported"] = {"temp_edge_mc"};
  // GPU 0 says where it throttles and shuts down (RSMI_TEMP_CRITICAL, _EMERGENCY of its edge sensor); GPU 1 neither.
  scen["devices"][0]["metrics"]["temp_edge_crit_mc"] = 100000;
  scen["devices"][0]["metrics"]["temp_edge_emergency_mc"] = 105000;
  Fake f(scen);
  ::setenv("WATTSCOPE_FAKE_ROCM_SMI_CALLS", (f.dir / "calls.json").c_str(), 1);
  ASSERT_TRUE(f.src->open());
  const auto devs = f.src->devices();
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0].slowdown_temp_c, 100.0);
  EXPECT_EQ(devs[0].shutdown_temp_c, 105.0);
  EXPECT_FALSE(devs[1].slowdown_temp_c.has_value());
  for (int k = 0; k < 3; ++k) {
    const Frame fr = f.tick(k);
    ASSERT_EQ(fr.gpus.size(), 2u);
    EXPECT_DOUBLE_EQ(*on(fr, 0)->temp_gpu_c, at(scen["devices"][0]["metrics"]["temp_edge_mc"], k) / 1000);
    EXPECT_DOUBLE_EQ(*on(fr, 1)->temp_gpu_c, at(scen["devices"][1]["metrics"]["temp_junction_mc"], k) / 1000);
  }
  f.src.reset(); // rsmi_shut_down writes the call counts
  ::unsetenv("WATTSCOPE_FAKE_ROCM_SMI_CALLS");
  const json c = json::parse(read_file(f.dir / "calls.json"));
  // Over 3 ticks: memory on both GPUs, edge on GPU 0, edge once on GPU 1 (NOT_SUPPORTED switches it off), and the
  // junction on GPU 1 only; at open, GPU 0's edge limits (critical, emergency) and GPU 1's critical of the edge,
  // then of the junction (neither there).
  EXPECT_EQ(c["rsmi_dev_temp_metric_get"].get<int>(),
            3 * 2 /*memory*/ + 3 /*edge, gpu 0*/ + 1 /*edge, gpu 1*/ + 3 /*junction, gpu 1*/ + 2 + 2 /*limits*/);
}
} // namespace unit_rocm_smi
