// The AMD ROCm SMI backend end to end: the real binary loads the fake librocm_smi64 through the production dlopen path
// (WATTSCOPE_ROCM_SMI_LIBRARY). A card that hwmon also sees is recorded once, by ROCm SMI; processes are attributed;
// doctor reports the backend.
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include "../support/sysfs_fixtures.hpp"

namespace e2e_rocm_smi { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

std::string fake_rocm() {
  return std::string(WATTSCOPE_FAKES_DIR) + "/librocm_smi64-fake.so";
}

// One MI210 at `bus`, drawing 200 W, its counter advancing 65536 counts (1 J at 15.2587890625 µJ) per read.
json mi210(const std::string& bus) {
  return {{"name", "AMD Instinct MI210"},
          {"unique_id", 0x1122334455667788ULL},
          {"pci_bus_id", bus},
          {"metrics",
           {{"energy_count", {{"linear", {1000000, 65536}}}},
            {"energy_resolution_uj", 15.2587890625},
            {"socket_power_uw", 200000000},
            {"busy_pct", 50},
            {"vram_used_bytes", 1LL << 30},
            {"vram_total_bytes", 68702699520LL},
            {"temp_edge_mc", 44000},
            {"temp_junction_mc", 58000}}}};
}

std::map<std::string, std::string> env(const TempDir& dir) {
  return {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
          {"WATTSCOPE_ROCM_SMI_LIBRARY", fake_rocm()},
          {"WATTSCOPE_FAKE_ROCM_SMI_SCENARIO", dir / "rocm.json"}};
}

} // namespace

// The hwmon fixture's amdgpu card0 sits at 0000:03:00.0; ROCm SMI reports the same card: one AMD GPU is recorded,
// with ROCm SMI's readings, and the Intel card stays hwmon's.
TEST(RocmSmiE2E, ACardSeenByRocmSmiAndHwmonIsRecordedOnceByRocmSmi) {
  TempDir dir;
  const std::string root = dir / "sys";
  amd_and_intel_gpus(root);
  write_file(dir / "rocm.json", json({{"version", {6, 1, 2}}, {"devices", {mi210("0000:03:00.0")}}}).dump());
  auto r = run(
      {wattscope(), "record", "--interval", "50ms", "--duration", "600ms", "--sysfs-root", root, "--db", dir / "w.db"},
      env(dir), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "w.db";
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM gpu_devices WHERE vendor='amd'"), "1");
  EXPECT_EQ(scalar(db, "SELECT name || '|' || pci_bus_id || '|' || power_source || '|' || energy_method FROM "
                       "gpu_devices WHERE vendor='amd'"),
            "AMD Instinct MI210|0000:03:00.0|rsmi_dev_current_socket_power_get|counter");
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM gpu_devices WHERE vendor='intel'"), "1");
  EXPECT_EQ(scalar(db, "SELECT group_concat(DISTINCT power_w) FROM gpu_samples_named WHERE vendor='amd'"), "200.0")
      << "ROCm SMI's reading, not hwmon's 123.45 W";
  EXPECT_EQ(scalar(db, "SELECT group_concat(DISTINCT temp_gpu_c) FROM gpu_samples_named WHERE vendor='amd'"), "44.0");
  // Energy from the counter, exact: 1 J per read after the first (a read whose tick was late leaves no row, so the
  // rows may count fewer reads than the counter saw, never more).
  const auto rows = std::stoi(scalar(db, "SELECT count(*) FROM gpu_samples_named WHERE vendor='amd'"));
  ASSERT_GE(rows, 3);
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM gpu_samples_named WHERE vendor='amd' AND energy_j != round(energy_j)"),
            "0");
  EXPECT_GE(std::stod(scalar(db, "SELECT max(energy_j) FROM gpu_samples_named WHERE vendor='amd'")), rows - 1.0);
  EXPECT_EQ(scalar(db, "SELECT min(energy_j) FROM gpu_samples_named WHERE vendor='amd'"), "0.0");
}

// Claims are by PCI bus id, not by vendor: an AMD card ROCm SMI does not report stays hwmon's.
TEST(RocmSmiE2E, ACardOnAnotherBusStaysHwmons) {
  TempDir dir;
  const std::string root = dir / "sys";
  amd_and_intel_gpus(root);
  write_file(dir / "rocm.json", json({{"devices", {mi210("0000:c3:00.0")}}}).dump());
  auto r = run(
      {wattscope(), "record", "--interval", "50ms", "--duration", "400ms", "--sysfs-root", root, "--db", dir / "w.db"},
      env(dir), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(scalar(dir / "w.db", "SELECT group_concat(pci_bus_id, ',') FROM (SELECT pci_bus_id FROM gpu_devices "
                                 "WHERE vendor='amd' ORDER BY pci_bus_id)"),
            "0000:03:00.0,0000:c3:00.0");
}

// A process of the run on the AMD GPU gets its share of the GPU's energy.
TEST(RocmSmiE2E, ProcessesOnTheGpuAreAttributed) {
  TempDir dir;
  json gpu = mi210("0000:03:00.0");
  write_file(
      dir / "rocm.json",
      json({{"devices", {gpu}},
            {"processes",
             {{{"pid_file", dir / "w.pid"}, {"gpus", {{"0", {{"vram_bytes", 2LL << 30}, {"cu_occupancy", 70}}}}}}}}})
          .dump());
  TempDir empty;
  auto e = env(dir);
  e["CUDA_VISIBLE_DEVICES"] = "\x01";
  Result r = run({wattscope(), "run", "--interval", "200ms", "--sysfs-root", empty.path(), "--db", dir / "w.db", "--",
                  "/bin/sh", "-c", "sleep 2.5 & echo $! > w.pid; wait"},
                 e, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string pid = read_file(dir / "w.pid");
  const std::string db = dir / "w.db";
  EXPECT_EQ(scalar(db, "SELECT MAX(sm_pct) FROM process_gpu_samples WHERE gpu_index = 0 AND pid = " +
                           std::to_string(std::stoi(pid))),
            "70.0");
  EXPECT_EQ(scalar(db, "SELECT MAX(mem_used_bytes) FROM process_gpu_samples WHERE gpu_index = 0 AND pid = " +
                           std::to_string(std::stoi(pid))),
            std::to_string(2LL << 30));
  EXPECT_GT(std::stod(scalar(db, "SELECT MAX(energy_j) FROM process_gpu_samples WHERE gpu_index = 0 AND pid = " +
                                     std::to_string(std::stoi(pid)))),
            0.0);
}

TEST(RocmSmiE2E, DoctorReportsTheBackend) {
  TempDir dir;
  json gpu = mi210("0000:03:00.0");
  write_file(dir / "rocm.json", json({{"version", {6, 1, 2}}, {"driver_version", "6.8.5"}, {"devices", {gpu}}}).dump());
  TempDir empty;
  auto doc = run({wattscope(), "doctor", "--json", "--sysfs-root", empty.path()}, env(dir), dir.path());
  ASSERT_EQ(doc.exit_code, 0) << doc.err;
  const json j = json::parse(doc.out);
  json rocm;
  for (const auto& s : j["sources"])
    if (s["name"] == "rocm-smi") rocm = s;
  ASSERT_TRUE(rocm.is_object()) << doc.out;
  EXPECT_EQ(rocm["status"], "ok");
  EXPECT_EQ(rocm["details"]["rocm_smi_version"], "6.1.2");
  EXPECT_EQ(rocm["details"]["driver_version"], "6.8.5");
  EXPECT_EQ(rocm["details"]["devices"][0]["pci_bus_id"], "0000:03:00.0");
  EXPECT_TRUE(rocm["details"]["devices"][0]["metrics"]["energy_count"].get<bool>());
  EXPECT_FALSE(rocm["details"]["devices"][0]["metrics"]["fan_speed"].get<bool>()) << "the scenario has no fan";
  EXPECT_TRUE(j["power_measurable"].get<bool>());
  auto text = run({wattscope(), "doctor", "--sysfs-root", empty.path()}, env(dir), dir.path());
  EXPECT_NE(text.out.find("rocm-smi"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("AMD Instinct MI210"), std::string::npos) << text.out;

  // Without the library: missing, with a fix, and doctor still answers.
  auto none = env(dir);
  none["WATTSCOPE_ROCM_SMI_LIBRARY"] = "/nonexistent/librocm_smi64.so";
  auto j2 = json::parse(run({wattscope(), "doctor", "--json", "--sysfs-root", empty.path()}, none, dir.path()).out);
  for (const auto& s : j2["sources"])
    if (s["name"] == "rocm-smi") {
      EXPECT_EQ(s["status"], "missing");
      EXPECT_FALSE(s["fix"].get<std::string>().empty());
    }
}

// Most machines have no ROCm: a run there says nothing about it (debug only) and stores no source-missing event.
// Issue 30: no AMD GPU on the PCI bus, and no library named (a named one that cannot be loaded is said, as for NVML).
TEST(RocmSmiE2E, NoRocmIsQuiet) {
  TempDir dir;
  TempDir empty;
  write_file(empty.path() + "/bus/pci/devices/0000:00:01.0/vendor", "0x1234\n");
  write_file(empty.path() + "/bus/pci/devices/0000:00:01.0/class", "0x030000\n");
  auto e = env(dir);
  e["WATTSCOPE_ROCM_SMI_LIBRARY"] = "\x01";
  auto r = run({wattscope(), "record", "--interval", "50ms", "--duration", "200ms", "--sysfs-root", empty.path(),
                "--db", dir / "w.db"},
               e, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("ROCm"), std::string::npos) << r.err;
  EXPECT_EQ(scalar(dir / "w.db", "SELECT count(*) FROM events WHERE source = 'rocm-smi'"), "0");
  EXPECT_EQ(scalar(dir / "w.db", "SELECT count(*) FROM events WHERE source = 'nvml'"), "1") << "NVML still says so";
}
} // namespace e2e_rocm_smi
