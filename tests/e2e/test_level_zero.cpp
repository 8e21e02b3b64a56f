// The Intel backend end to end: the real binary loads the fake Level Zero loader through the production dlopen path
// (WATTSCOPE_LEVEL_ZERO_LIBRARY), beside an hwmon fixture of the same card.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "../support/sysfs_fixtures.hpp"

namespace e2e_level_zero { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

constexpr double kCounterStepUj = 15'000'000; // per read, 100 ms apart on the counter's clock: 150 W

// The fixture's Intel card (card1, 0000:00:02.0) as Level Zero sees it.
json intel_arc() {
  return {
      {"devices",
       {{{"name", "Intel(R) Arc(TM) A770 Graphics"},
         {"pci", {0, 0, 2, 0}},
         {"power_domains",
          {{{"domain", "card"},
            {"card", true},
            {"energy_uj", {{"linear", {2'000'000'000, kCounterStepUj}}}},
            {"timestamp_us", {{"linear", {9'000'000, 100'000}}}}}}},
         {"engines",
          {{{"type", "all"}, {"active_us", {{"linear", {0, 40'000}}}}, {"timestamp_us", {{"linear", {0, 100'000}}}}}}},
         {"memory", {{{"location", "device"}, {"size", 17'179'869'184LL}, {"free", {{"linear", {16e9, -1e8}}}}}}},
         {"frequency", {{{"domain", "gpu"}, {"actual_mhz", {{"linear", {2000, 10}}}}}}},
         {"temperature", {{{"sensor", "gpu"}, {"celsius", {{"linear", {45, 0.5}}}}}}}}}}};
}

struct Run {
  TempDir dir;
  Result result;
  std::string db() const { return dir / "wattscope.db"; }
  std::string root() const { return dir / "sys"; }
};

std::map<std::string, std::string> env_for(const Run& r, bool with_level_zero) {
  return {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
          {"WATTSCOPE_LEVEL_ZERO_LIBRARY", with_level_zero ? fake_level_zero() : "/nonexistent/libze_loader.so.1"},
          {"WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO", r.dir / "scenario.json"},
          {"WATTSCOPE_CGROUP_ROOT", "none"}};
}

std::unique_ptr<Run> record(const json& scen, bool with_level_zero) {
  auto r = std::make_unique<Run>();
  write_file(r->dir / "scenario.json", scen.dump());
  amd_and_intel_gpus(r->root());
  r->result = run(
      {wattscope(), "run", "--task", "intel", "--interval", "50ms", "--sysfs-root", r->root(), "--", "sleep", "0.6"},
      env_for(*r, with_level_zero), r->dir.path());
  return r;
}

} // namespace

TEST(LevelZeroE2E, TheCardHwmonAlsoSeesIsRecordedOnceByLevelZero) {
  auto r = record(intel_arc(), true);
  ASSERT_EQ(r->result.exit_code, 0) << r->result.err;
  auto devs = query(r->db(), "SELECT gpu_index, vendor, name, pci_bus_id, energy_method, power_source, "
                             "mem_total_bytes FROM gpu_devices ORDER BY gpu_index");
  ASSERT_EQ(devs.size(), 2u) << r->result.err; // the AMD card (hwmon) and the Intel card, once
  int intel = -1;
  for (const auto& d : devs) {
    if (d[1] != "intel") continue;
    EXPECT_EQ(intel, -1) << "the Intel card recorded twice";
    intel = std::stoi(*d[0]);
    EXPECT_EQ(d[2], "Intel(R) Arc(TM) A770 Graphics"); // Level Zero's name, not hwmon's "Intel i915 GPU 0x56a0"
    EXPECT_EQ(d[3], "0000:00:02.0");
    EXPECT_EQ(d[4], "counter");
    EXPECT_EQ(d[5], "level zero energy counter (card)");
    EXPECT_EQ(d[6], "17179869184");
  }
  ASSERT_GE(intel, 0);
  EXPECT_NE(devs[0][0], devs[1][0]); // indices never collide across backends
  // Every stored row of the Intel card is Level Zero's, read by read: energy exactly the counter's rise, power from
  // its deltas (150 W, not hwmon's 31 W), utilisation from activity deltas, memory, clock and temperature.
  auto rows = query(r->db(), "SELECT energy_j, power_w, util_gpu_pct, mem_used_bytes, mem_free_bytes, clock_gfx_mhz, "
                             "temp_gpu_c FROM gpu_samples WHERE gpu_index = " +
                                 std::to_string(intel) + " ORDER BY tick");
  ASSERT_GE(rows.size(), 3u);
  for (size_t k = 0; k < rows.size(); ++k) {
    SCOPED_TRACE("row " + std::to_string(k));
    const auto& row = rows[k];
    ASSERT_TRUE(row[0]);
    EXPECT_NEAR(std::stod(*row[0]), static_cast<double>(k) * kCounterStepUj / 1e6, 1e-9);
    if (k == 0) {
      EXPECT_FALSE(row[1]); // no interval yet: missing, never 0
      EXPECT_FALSE(row[2]);
    } else {
      ASSERT_TRUE(row[1] && row[2]);
      EXPECT_NEAR(std::stod(*row[1]), 150.0, 1e-9);
      EXPECT_NEAR(std::stod(*row[2]), 40.0, 1e-9);
    }
    const double free = 16e9 - 1e8 * static_cast<double>(k);
    EXPECT_EQ(std::stod(*row[3]), 17'179'869'184.0 - free);
    EXPECT_EQ(std::stod(*row[4]), free);
    EXPECT_EQ(std::stoll(*row[5]), 2000 + 10 * static_cast<long long>(k));
    EXPECT_NEAR(std::stod(*row[6]), 45 + 0.5 * static_cast<double>(k), 1e-9);
  }
  EXPECT_EQ(scalar(r->db(), "SELECT count(DISTINCT gpu_index) FROM gpu_samples"), "2");
  EXPECT_EQ(scalar(r->db(), "SELECT count(*) FROM events WHERE source = 'level-zero'"), "0");
}

TEST(LevelZeroE2E, WithoutLevelZeroHwmonStillRecordsTheCard) {
  // The control for the test above: the same fixture without the loader records the Intel card through hwmon.
  auto r = record(intel_arc(), false);
  ASSERT_EQ(r->result.exit_code, 0) << r->result.err;
  EXPECT_EQ(scalar(r->db(), "SELECT count(*) FROM gpu_devices WHERE vendor = 'intel'"), "1");
  EXPECT_EQ(scalar(r->db(), "SELECT power_source FROM gpu_devices WHERE vendor = 'intel'"), "hwmon power1_input");
  // A loader named by WATTSCOPE_LEVEL_ZERO_LIBRARY that is not there is said (a machine with none is quiet).
  EXPECT_EQ(scalar(r->db(), "SELECT count(*) FROM events WHERE source = 'level-zero'"), "1");
}

TEST(LevelZeroE2E, LostGpuIsAnEventAndItsRowsStop) {
  json scen = intel_arc();
  scen["devices"][0]["lost_at_tick"] = 3;
  auto r = record(scen, true);
  ASSERT_EQ(r->result.exit_code, 0) << r->result.err;
  EXPECT_EQ(scalar(r->db(), "SELECT count(*) FROM gpu_samples g JOIN gpu_devices d USING (run_id, gpu_index) "
                            "WHERE d.vendor = 'intel'"),
            "3");
  EXPECT_EQ(scalar(r->db(), "SELECT count(*) FROM events WHERE kind = 'device-lost'"), "1");
}

TEST(LevelZeroE2E, DoctorReportsTheBackendAndItsPowerDomains) {
  TempDir dir;
  write_file(dir / "scenario.json", intel_arc().dump());
  const std::string root = dir / "sys";
  amd_and_intel_gpus(root);
  auto env = std::map<std::string, std::string>{{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                                                {"WATTSCOPE_LEVEL_ZERO_LIBRARY", fake_level_zero()},
                                                {"WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO", dir / "scenario.json"}};
  auto doc = run({wattscope(), "doctor", "--json", "--sysfs-root", root}, env, dir.path());
  ASSERT_EQ(doc.exit_code, 0) << doc.err;
  const json j = json::parse(doc.out);
  json l0, hwmon;
  for (const auto& s : j["sources"]) {
    if (s["name"] == "level-zero") l0 = s;
    if (s["name"] == "hwmon-gpu") hwmon = s;
  }
  ASSERT_FALSE(l0.is_null()) << doc.out;
  EXPECT_EQ(l0["status"], "ok");
  const json& dev = l0["details"]["devices"][0];
  EXPECT_EQ(dev["pci_bus_id"], "0000:00:02.0");
  EXPECT_EQ(dev["power_domains"][0]["domain"], "card");
  EXPECT_EQ(dev["metrics"]["energy_counter"], true);
  EXPECT_NE(std::find(j["power_sources"].begin(), j["power_sources"].end(), "level-zero"), j["power_sources"].end());
  // hwmon is left the AMD card only: the Intel one is Level Zero's, in doctor as in a run.
  ASSERT_FALSE(hwmon.is_null());
  ASSERT_EQ(hwmon["details"].size(), 1u) << hwmon.dump();
  EXPECT_EQ(hwmon["details"][0]["vendor"], "amd");

  auto text = run({wattscope(), "doctor", "--sysfs-root", root}, env, dir.path());
  EXPECT_NE(text.out.find("level-zero"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("card [energy]"), std::string::npos) << text.out;
}
} // namespace e2e_level_zero
