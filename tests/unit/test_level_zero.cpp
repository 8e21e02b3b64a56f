// The Level Zero backend against the fake loader (tests/fakes/fake_level_zero.cpp), loaded through the production
// dlopen path: values per tick and device, energy exact from the counters (wraps included), utilisation from activity
// deltas, missing functions, unsupported features, a lost device, processes.
#include <gtest/gtest.h>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "sources/levelzero/level_zero_source.hpp"

namespace unit_level_zero { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr int kTicks = 8;
constexpr uint64_t kTickUs = 100'000; // the fake's timestamps advance 100 ms a read

// A scenario on disk, named to the fake loader for as long as this lives.
struct Scenario {
  TempDir dir;
  explicit Scenario(const json& s) {
    write_file(dir / "scenario.json", s.dump());
    ::setenv("WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO", (dir / "scenario.json").c_str(), 1);
  }
};

std::unique_ptr<LevelZeroSource> open_fake(const std::string& variant = "") {
  LevelZeroSource::Options o;
  o.library_path = fake_level_zero(variant);
  auto s = std::make_unique<LevelZeroSource>(o);
  EXPECT_TRUE(s->open()) << s->status().line();
  return s;
}

std::vector<Frame> ticks(LevelZeroSource& src, int n) {
  std::vector<Frame> out;
  const auto t0 = SteadyClock::now();
  for (int k = 0; k < n; ++k) {
    Frame f;
    f.tick = k;
    f.mono = t0 + k * 100ms;
    src.sample(f);
    out.push_back(std::move(f));
  }
  return out;
}

const GpuSample* gpu(const Frame& f, int index) {
  for (const auto& g : f.gpus)
    if (g.gpu_index == index) return &g;
  return nullptr;
}

// Cumulative counters with per-tick increments that differ per device and tick, so a value from the wrong tick or
// device shows.
json cumulative(uint64_t start, uint64_t base_inc, uint64_t step, int dev) {
  json a = json::array();
  uint64_t v = start;
  for (int k = 0; k < kTicks; ++k) {
    if (k > 0) v += base_inc + step * static_cast<uint64_t>(k) + static_cast<uint64_t>(dev) * 7;
    a.push_back(v);
  }
  return a;
}
json series(double base, double step, int dev) {
  json a = json::array();
  for (int k = 0; k < kTicks; ++k)
    a.push_back(base + step * k + dev * 3);
  return a;
}
json linear_ts() {
  return {{"linear", {5'000'000, kTickUs}}};
}

json device(int i) {
  return {
      {"name", "Intel(R) Data Center GPU Max 1550"},
      {"pci", {0, 0x3a + i, 0, 0}},
      {"power_domains",
       {{{"domain", "card"},
         {"card", true},
         {"energy_uj", cumulative(1'000'000'000ULL * (i + 1), 20'000, 1000, i)},
         {"timestamp_us", linear_ts()}},
        {{"domain", "package"}, {"energy_uj", cumulative(5'000, 9'000, 100, i)}, {"timestamp_us", linear_ts()}}}},
      {"engines",
       {{{"type", "all"}, {"active_us", cumulative(777, 30'000, 5'000, i)}, {"timestamp_us", linear_ts()}},
        {{"type", "media_encode"}, {"active_us", cumulative(0, 10'000, 0, i)}, {"timestamp_us", linear_ts()}},
        {{"type", "media_decode"}, {"active_us", cumulative(0, 20'000, 0, i)}, {"timestamp_us", linear_ts()}}}},
      {"memory",
       {{{"location", "device"},
         {"size", 68'719'476'736LL},
         {"physical_size", 68'719'476'736LL},
         {"free", series(60e9, -1e9, i)}},
        {{"location", "system"}, {"size", 1'000'000}, {"free", 5}}}},
      {"frequency",
       {{{"domain", "gpu"}, {"actual_mhz", series(900, 100, i)}, {"max_mhz", 1600}},
        {{"domain", "memory"}, {"actual_mhz", 3200}, {"max_mhz", 3200}}}},
      {"temperature",
       {{{"sensor", "gpu"}, {"celsius", series(40, 1.5, i)}},
        {{"sensor", "memory"}, {"celsius", series(50, 0.5, i)}},
        {{"sensor", "global"}, {"celsius", 99}}}},
      {"processes", {{{"pid", 4242 + i}, {"mem_bytes", 1'000'000 * (i + 1)}}}},
  };
}

json scenario(int n) {
  json s = {{"devices", json::array()}};
  for (int i = 0; i < n; ++i)
    s["devices"].push_back(device(i));
  return s;
}

} // namespace

TEST(LevelZero, EveryValuePerTickAndDevice) {
  const json scen = scenario(2);
  Scenario on_disk(scen);
  auto src = open_fake();
  ASSERT_TRUE(src->status().is_ok());
  const auto devs = src->devices();
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[1].pci_bus_id, "0000:3b:00.0");
  EXPECT_EQ(devs[0].vendor, "intel");
  EXPECT_EQ(devs[0].name, "Intel(R) Data Center GPU Max 1550");
  EXPECT_EQ(*devs[0].mem_total_bytes, 68'719'476'736LL); // the device module only, not system memory
  EXPECT_EQ(*devs[0].clock_mem_max_mhz, 3200);
  EXPECT_STREQ(devs[0].power_source.c_str(), "level zero energy counter (card)");
  // The GPU sensor's zes_temp_properties_t.maxTemperature (the fake answers 105 °C): where the throttle forecast aims.
  EXPECT_EQ(devs[0].slowdown_temp_c, 105.0);

  const auto frames = ticks(*src, kTicks);
  for (int d = 0; d < 2; ++d) {
    const json& m = scen["devices"][d];
    const json& energy = m["power_domains"][0]["energy_uj"];
    const json& active = m["engines"][0]["active_us"];
    for (int k = 0; k < kTicks; ++k) {
      SCOPED_TRACE("gpu " + std::to_string(d) + " tick " + std::to_string(k));
      const GpuSample* s = gpu(frames[k], d);
      ASSERT_NE(s, nullptr);
      // Energy: exactly the card counter's rise since the first reading, in µJ (accounting makes joules of it).
      ASSERT_TRUE(s->energy_counter_uj);
      EXPECT_EQ(*s->energy_counter_uj, energy[k].get<int64_t>() - energy[0].get<int64_t>());
      const double mem_free = m["memory"][0]["free"][k].get<double>();
      EXPECT_EQ(*s->mem_total_bytes, 68'719'476'736LL);
      EXPECT_EQ(*s->mem_free_bytes, static_cast<int64_t>(mem_free));
      EXPECT_EQ(*s->mem_used_bytes, 68'719'476'736LL - static_cast<int64_t>(mem_free));
      EXPECT_EQ(*s->clock_gfx_mhz, m["frequency"][0]["actual_mhz"][k].get<int64_t>());
      EXPECT_EQ(*s->clock_mem_mhz, 3200);
      EXPECT_DOUBLE_EQ(*s->temp_gpu_c, m["temperature"][0]["celsius"][k].get<double>()); // the GPU sensor, not global
      EXPECT_DOUBLE_EQ(*s->temp_mem_c, m["temperature"][1]["celsius"][k].get<double>());
      if (k == 0) { // no interval yet: power and utilisation are missing, never 0
        EXPECT_FALSE(s->power_w);
        EXPECT_FALSE(s->util_gpu_pct);
        EXPECT_FALSE(s->util_enc_pct);
        continue;
      }
      // Power from the counter's own deltas: µJ over µs is W.
      const double de = energy[k].get<double>() - energy[k - 1].get<double>();
      ASSERT_TRUE(s->power_w);
      EXPECT_NEAR(*s->power_w, de / kTickUs, 1e-9);
      EXPECT_STREQ(s->power_source, "level zero energy counter (card)");
      const double da = active[k].get<double>() - active[k - 1].get<double>();
      ASSERT_TRUE(s->util_gpu_pct);
      EXPECT_NEAR(*s->util_gpu_pct, 100.0 * da / kTickUs, 1e-9);
      EXPECT_NEAR(*s->util_enc_pct, 100.0 * (10'000 + 7 * d) / kTickUs, 1e-9);
      EXPECT_NEAR(*s->util_dec_pct, 100.0 * (20'000 + 7 * d) / kTickUs, 1e-9);
    }
  }
  // Doctor's details: both domains, the card's the one the device's energy comes from.
  const json rep = src->report();
  ASSERT_EQ(rep["devices"].size(), 2u);
  EXPECT_EQ(rep["devices"][0]["power_domains"][0]["domain"], "card");
  EXPECT_EQ(rep["devices"][0]["power_domains"][0]["device_energy"], true);
  EXPECT_EQ(rep["devices"][0]["power_domains"][1]["domain"], "package");
  EXPECT_EQ(rep["devices"][0]["power_domains"][1]["device_energy"], false);
  // Issue 30: the counter as last read, not the energy counted since open.
  const json& pkg = scen["devices"][0]["power_domains"][1]["energy_uj"];
  EXPECT_EQ(rep["devices"][0]["power_domains"][1]["energy_uj"].get<int64_t>(), pkg[kTicks - 1].get<int64_t>());
}

TEST(LevelZero, EnergyIsExactAcrossACounterWrap) {
  // A 64-bit counter 300 mJ below its top wraps between ticks 2 and 3; a second device's 32-bit counter wraps too.
  const uint64_t top = ~uint64_t{0};
  json e64 = {top - 700'000, top - 500'000, top - 300'000, 200'000 - 1, 400'000 - 1};
  json e32 = {4'294'000'000ULL, 4'294'500'000ULL, 32'704ULL, 532'704ULL, 1'032'704ULL};
  json scen = {{"devices",
                {{{"pci", {0, 3, 0, 0}},
                  {"power_domains", {{{"domain", "package"}, {"energy_uj", e64}, {"timestamp_us", linear_ts()}}}}},
                 {{"pci", {0, 4, 0, 0}},
                  {"power_domains", {{{"domain", "card"}, {"energy_uj", e32}, {"timestamp_us", linear_ts()}}}}}}}};
  Scenario on_disk(scen);
  auto src = open_fake();
  const auto frames = ticks(*src, 5);
  const int64_t expect64[] = {0, 200'000, 400'000, 900'000, 1'100'000};
  const int64_t expect32[] = {0, 500'000, 1'000'000, 1'500'000, 2'000'000};
  for (int k = 0; k < 5; ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(*gpu(frames[k], 0)->energy_counter_uj, expect64[k]);
    EXPECT_EQ(*gpu(frames[k], 1)->energy_counter_uj, expect32[k]);
    if (k > 0) {
      EXPECT_NEAR(*gpu(frames[k], 0)->power_w, static_cast<double>(expect64[k] - expect64[k - 1]) / kTickUs, 1e-9);
      EXPECT_NEAR(*gpu(frames[k], 1)->power_w, 5.0, 1e-9);
    }
  }
  for (const auto& f : frames)
    EXPECT_TRUE(f.events.empty()); // a wrap is no event
  EXPECT_STREQ(gpu(frames[1], 0)->power_source, "level zero energy counter (package)");
}

TEST(LevelZeroCounter, ResetIsCountedOnFromTheNewValueNotAsAHugeWrap) {
  EnergyCounter c;
  c.add(50'000'000'000ULL, 1'000'000, 0);
  auto st = c.add(50'001'000'000ULL, 1'100'000, 0.1);
  EXPECT_EQ(st.delta_uj, 1'000'000u);
  EXPECT_DOUBLE_EQ(*st.power_w, 10.0);
  st = c.add(1'000, 1'200'000, 0.1); // a driver reload: not 2^64 - 50 kJ, nor a 32-bit wrap
  EXPECT_TRUE(st.reset);
  EXPECT_FALSE(st.power_w);
  EXPECT_EQ(c.total_uj(), 1'000'000);
  st = c.add(3'000, 1'300'000, 0.1);
  EXPECT_EQ(c.total_uj(), 1'002'000);
  EXPECT_DOUBLE_EQ(*st.power_w, 0.02);
}

TEST(LevelZeroCounter, TimestampsThatDoNotAdvanceFallBackToTheSteadyClock) {
  EnergyCounter c;
  c.add(0, 0, 0);
  const auto st = c.add(2'000'000, 0, 0.5); // no timestamp from the driver: 2 J over the 0.5 s between reads
  EXPECT_DOUBLE_EQ(*st.power_w, 4.0);
}

TEST(LevelZero, UtilisationCombinesEngineGroupsByTheirScope) {
  // Device 0: compute and render groups, no engines-all group: the busier of the two. Device 1: only per-stack
  // engines-all groups: their mean (the device's share of busy time).
  json scen = {
      {"devices",
       {{{"pci", {0, 5, 0, 0}},
         {"engines",
          {{{"type", "compute_all"}, {"active_us", {0, 60'000, 70'000}}, {"timestamp_us", linear_ts()}},
           {{"type", "render_all"}, {"active_us", {0, 20'000, 100'000}}, {"timestamp_us", linear_ts()}},
           {{"type", "copy"}, {"active_us", {0, 100'000, 200'000}}, {"timestamp_us", linear_ts()}}}}},
        {{"pci", {0, 6, 0, 0}},
         {"engines",
          {{{"type", "all"}, {"subdevice", 0}, {"active_us", {0, 80'000, 80'000}}, {"timestamp_us", linear_ts()}},
           {{"type", "all"},
            {"subdevice", 1},
            {"active_us", {0, 20'000, 120'000}},
            {"timestamp_us", linear_ts()}}}}}}}};
  Scenario on_disk(scen);
  auto src = open_fake();
  const auto frames = ticks(*src, 3);
  EXPECT_NEAR(*gpu(frames[1], 0)->util_gpu_pct, 60.0, 1e-9); // max(60, 20); the copy engine does not count
  EXPECT_NEAR(*gpu(frames[2], 0)->util_gpu_pct, 80.0, 1e-9); // max(10, 80)
  EXPECT_NEAR(*gpu(frames[1], 1)->util_gpu_pct, 50.0, 1e-9); // mean(80, 20)
  EXPECT_NEAR(*gpu(frames[2], 1)->util_gpu_pct, 50.0, 1e-9); // mean(0, 100)
  EXPECT_FALSE(gpu(frames[1], 0)->util_enc_pct);             // no encoder group: missing, not 0
  // No power domain at all: energy and power missing, the rest recorded.
  EXPECT_FALSE(gpu(frames[1], 0)->energy_counter_uj);
  EXPECT_FALSE(gpu(frames[1], 0)->power_w);
  EXPECT_FALSE(src->status().measures_power);
}

TEST(LevelZero, MissingFunctionsLeaveTheirMetricsMissing) {
  Scenario on_disk(scenario(1));
  auto src = open_fake("sparse"); // no energy counter, engine or process calls
  const auto frames = ticks(*src, 3);
  const GpuSample* s = gpu(frames[2], 0);
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->energy_counter_uj);
  EXPECT_FALSE(s->power_w);
  EXPECT_FALSE(s->util_gpu_pct);
  EXPECT_FALSE(s->util_dec_pct);
  EXPECT_TRUE(s->mem_used_bytes); // what the library has is still read
  EXPECT_TRUE(s->temp_gpu_c);
  EXPECT_FALSE(src->lists_gpu_processes());
  const json rep = src->report();
  const auto missing = rep["missing_functions"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(missing.begin(), missing.end(), "zesPowerGetEnergyCounter"), missing.end());
  EXPECT_FALSE(src->status().measures_power);
}

TEST(LevelZero, UnsupportedFeaturesAreMissingAndNotAskedAgain) {
  json scen = scenario(1);
  scen["devices"][0]["unsupported"] = {"memory_state", "temperature_state", "energy_counter"};
  Scenario on_disk(scen);
  auto src = open_fake();
  const auto frames = ticks(*src, 3);
  for (const auto& f : frames) {
    const GpuSample* s = gpu(f, 0);
    ASSERT_NE(s, nullptr);
    EXPECT_FALSE(s->mem_used_bytes);
    EXPECT_FALSE(s->mem_total_bytes);
    EXPECT_FALSE(s->temp_gpu_c);
    EXPECT_FALSE(s->temp_mem_c);
    EXPECT_FALSE(s->energy_counter_uj);
    EXPECT_FALSE(s->power_w);
    EXPECT_TRUE(s->clock_gfx_mhz);
  }
  EXPECT_TRUE(gpu(frames[2], 0)->util_gpu_pct);
  const json m = src->report()["devices"][0]["metrics"];
  EXPECT_EQ(m["memory"], false);
  EXPECT_EQ(m["temperature"], false);
  EXPECT_EQ(m["frequency"], true);
}

TEST(LevelZero, TransientErrorsAreMissingForThatTickOnly) {
  json scen = scenario(1);
  scen["devices"][0]["errors"] = {{"memory_state", {{"code", 0x70010001}, {"ticks", {1}}}}}; // NOT_AVAILABLE
  Scenario on_disk(scen);
  auto src = open_fake();
  const auto frames = ticks(*src, 3);
  EXPECT_TRUE(gpu(frames[0], 0)->mem_used_bytes);
  EXPECT_FALSE(gpu(frames[1], 0)->mem_used_bytes);
  EXPECT_TRUE(gpu(frames[2], 0)->mem_used_bytes);
}

TEST(LevelZero, LostDeviceIsMarkedOnceAndTheOthersGoOn) {
  json scen = scenario(2);
  scen["devices"][0]["lost_at_tick"] = 3;
  Scenario on_disk(scen);
  auto src = open_fake();
  const auto frames = ticks(*src, 6);
  int lost_events = 0;
  for (int k = 0; k < 6; ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(gpu(frames[k], 0) != nullptr, k < 3);
    EXPECT_NE(gpu(frames[k], 1), nullptr);
    for (const auto& ev : frames[k].events) {
      EXPECT_EQ(ev.kind, "device-lost");
      EXPECT_EQ(ev.source, "gpu0");
      EXPECT_NE(ev.detail.find("ZE_RESULT_ERROR_DEVICE_LOST"), std::string::npos) << ev.detail;
      EXPECT_EQ(k, 3);
      ++lost_events;
    }
  }
  EXPECT_EQ(lost_events, 1);
  EXPECT_EQ(src->report()["devices"][0]["lost"], true);
  // The lost GPU is not listed for processes; the other is.
  std::vector<GpuProcessSample> procs;
  std::vector<int> listed;
  src->gpu_processes(procs, listed);
  EXPECT_EQ(listed, std::vector<int>{1});
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_EQ(procs[0].id.pid, 4243);
}

TEST(LevelZero, ProcessesWithTheirDeviceMemory) {
  Scenario on_disk(scenario(2));
  auto src = open_fake();
  ASSERT_TRUE(src->lists_gpu_processes());
  std::vector<GpuProcessSample> procs;
  std::vector<int> listed;
  src->gpu_processes(procs, listed);
  ASSERT_EQ(procs.size(), 2u);
  EXPECT_EQ(listed, (std::vector<int>{0, 1}));
  EXPECT_EQ(procs[0].id.pid, 4242);
  EXPECT_EQ(procs[0].gpu_index, 0);
  EXPECT_EQ(*procs[0].mem_used_bytes, 1'000'000);
  EXPECT_EQ(*procs[1].mem_used_bytes, 2'000'000);
  EXPECT_FALSE(procs[0].sm_pct); // Level Zero has no per-process utilisation: missing, not 0
}

TEST(LevelZero, OlderLoaderBringsSysmanUpThroughZeInit) {
  Scenario on_disk(scenario(1));
  auto src = open_fake("legacy"); // no zesInit: zeInit, with ZES_ENABLE_SYSMAN=1 set before it
  EXPECT_NE(src->status().detail.find("zeInit"), std::string::npos) << src->status().detail;
  const auto frames = ticks(*src, 2);
  ASSERT_NE(gpu(frames[1], 0), nullptr);
  EXPECT_TRUE(gpu(frames[1], 0)->power_w);
}

TEST(LevelZero, ALibraryWithNoWayToStartSaysWhichFunctionsItLacks) {
  Scenario on_disk(scenario(1));
  LevelZeroSource::Options o;
  o.library_path = fake_level_zero("broken");
  LevelZeroSource src(o);
  EXPECT_FALSE(src.open());
  // A broken install is said, not hidden (issue 30: missing, and said, as a named library that cannot be loaded).
  EXPECT_EQ(src.status().state, SourceStatus::State::Missing);
  EXPECT_TRUE(src.status().said);
  EXPECT_NE(src.status().detail.find("zesInit"), std::string::npos) << src.status().detail;
}

TEST(LevelZero, NoLoaderIsQuietButANamedOneThatIsMissingIsNot) {
  LevelZeroSource::Options o;
  o.library_path = "/nonexistent/libze_loader.so.1";
  LevelZeroSource named(o);
  EXPECT_FALSE(named.open());
  EXPECT_EQ(named.status().state, SourceStatus::State::Missing); // issue 30: one rule for every backend
  EXPECT_TRUE(named.status().said);
  EXPECT_NE(named.status().detail.find("WATTSCOPE_LEVEL_ZERO_LIBRARY"), std::string::npos);
  // A loader with no GPU driver behind it (the fake without a scenario answers UNINITIALIZED, as the real one does).
  ::unsetenv("WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO");
  o.library_path = fake_level_zero();
  LevelZeroSource no_driver(o);
  EXPECT_FALSE(no_driver.open());
  EXPECT_EQ(no_driver.status().state, SourceStatus::State::Missing); // the usual case: said at debug level only
}

TEST(LevelZero, ReleasesAGpuAnEarlierBackendClaimed) {
  Scenario on_disk(scenario(2));
  auto src = open_fake();
  EXPECT_EQ(src->release_claimed({"0000:3a:00.0"}), 1u);
  ASSERT_EQ(src->devices().size(), 1u);
  EXPECT_EQ(src->devices()[0].pci_bus_id, "0000:3b:00.0");
}
} // namespace unit_level_zero
