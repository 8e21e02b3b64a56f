// Issue 30: vendor libraries on the machines they really meet. The recorded command's environment is exactly the one
// it was given (a Level Zero loader without zesInit needs ZES_ENABLE_SYSMAN=1 for wattscope's own start only); ROCm
// SMI and Level Zero are started only where their vendor's GPU is on the PCI bus, and what they print while starting
// goes to the debug log; a library named by its variable that cannot be loaded is reported one way for every backend;
// doctor shows the Level Zero counter as read; the smaller figures (Intel's maximum clock, AMD's free memory).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "sources/dl_open.hpp"
#include "sources/levelzero/level_zero_source.hpp"
#include "sources/rocm/rocm_smi_source.hpp"

namespace e2e_vendor_quiet { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

std::string fake_rocm(const std::string& variant = "") {
  return std::string(WATTSCOPE_FAKES_DIR) + "/librocm_smi64-fake" + (variant.empty() ? "" : "-" + variant) + ".so";
}

json intel_gpu() {
  return {{"devices",
           {{{"name", "Intel(R) Arc(TM) A770 Graphics"},
             {"pci", {0, 3, 0, 0}},
             {"power_domains",
              {{{"domain", "card"},
                {"card", true},
                {"energy_uj", {{"linear", {2'000'000'000, 1'000'000}}}},
                {"timestamp_us", {{"linear", {9'000'000, 100'000}}}}}}},
             {"frequency", {{{"domain", "gpu"}, {"actual_mhz", 2000}, {"max_mhz", 2400}}}}}}}};
}

json amd_gpu() {
  return {{"version", {6, 1, 2}},
          {"devices",
           {{{"name", "AMD Instinct MI210"},
             {"unique_id", 77},
             {"pci_bus_id", "0000:c1:00.0"},
             {"metrics",
              {{"socket_power_uw", 200000000},
               {"vram_used_bytes", 3LL << 30},
               {"vram_total_bytes", 64LL << 30},
               {"busy_pct", 40}}}}}}};
}

// A PCI bus under `root`: (slot, vendor, class) each.
void pci_bus(const std::string& root, const std::vector<std::tuple<std::string, std::string, std::string>>& devs) {
  write_file(root + "/bus/pci/devices/.keep", "");
  for (const auto& [slot, vendor, cls] : devs) {
    write_file(root + "/bus/pci/devices/" + slot + "/vendor", vendor + "\n");
    write_file(root + "/bus/pci/devices/" + slot + "/class", cls + "\n");
  }
}

std::vector<std::string> split_env(const std::string& block) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < block.size()) {
    const size_t end = block.find('\0', at);
    out.push_back(block.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

std::map<std::string, json> by_name(const json& doctor) {
  std::map<std::string, json> by;
  for (const auto& s : doctor["sources"])
    by[s["name"].get<std::string>()] = s;
  return by;
}

} // namespace

// Item 4: a Level Zero loader without zesInit (Debian 12's libze1 1.8) needs ZES_ENABLE_SYSMAN=1 at zeInit; the
// command must not inherit it. The command's /proc/self/environ is the environment wattscope was given, byte for
// byte, in order, plus only the documented WATTSCOPE_SOCKET.
TEST(VendorQuiet, TheCommandsEnvironmentIsExactlyTheOneGiven) {
  TempDir dir;
  write_file(dir / "l0.json", intel_gpu().dump());
  const std::vector<std::string> given = {"HOME=" + dir.path(),
                                          "WATTSCOPE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1",
                                          "WATTSCOPE_LEVEL_ZERO_LIBRARY=" + fake_level_zero("legacy"),
                                          "WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO=" + dir / "l0.json",
                                          "WATTSCOPE_CGROUP_ROOT=none",
                                          "ODD=tab\there=and= equals",
                                          "EMPTY="};
  std::vector<std::string> argv = {"/usr/bin/env", "-i"};
  argv.insert(argv.end(), given.begin(), given.end());
  for (const char* a : {"run", "--interval", "50ms", "--db"})
    argv.push_back(a);
  argv.insert(argv.end(), {dir / "w.db", "--", "/bin/cp", "/proc/self/environ", dir / "child.env"});
  argv.insert(argv.begin() + 2 + static_cast<long>(given.size()), wattscope());
  const Result r = run(argv, {}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The loader was started through zeInit and found the GPU: the variable was there when it mattered.
  EXPECT_EQ(scalar(dir / "w.db", "SELECT count(*) FROM gpu_devices WHERE vendor = 'intel'"), "1") << r.err;
  std::vector<std::string> child = split_env(read_file(dir / "child.env"));
  ASSERT_FALSE(child.empty());
  ASSERT_EQ(child.back().rfind("WATTSCOPE_SOCKET=", 0), 0u) << child.back();
  child.pop_back();
  EXPECT_EQ(child, given);
}

// Item 5: no AMD and no Intel GPU on the PCI bus: neither library is loaded, doctor says so, a run says nothing.
TEST(VendorQuiet, NoAmdOrIntelGpuOnThePciBusSkipsTheirLibraries) {
  TempDir dir;
  const std::string root = dir / "sys";
  // A virtual VGA adapter and Intel's chipset (an ISA bridge, not a display controller).
  pci_bus(root, {{"0000:00:01.0", "0x1234", "0x030000"}, {"0000:00:1f.0", "0x8086", "0x060100"}});
  const std::map<std::string, std::string> env = {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                                                  {"WATTSCOPE_ROCM_SMI_LIBRARY", "\x01"},
                                                  {"WATTSCOPE_LEVEL_ZERO_LIBRARY", "\x01"},
                                                  {"WATTSCOPE_CGROUP_ROOT", "none"}};
  const Result doc = run({wattscope(), "doctor", "--json", "--sysfs-root", root}, env, dir.path());
  ASSERT_EQ(doc.exit_code, 1) << doc.err; // nothing in this fixture measures power
  auto by = by_name(json::parse(doc.out));
  EXPECT_EQ(by["rocm-smi"]["status"], "missing");
  EXPECT_EQ(by["rocm-smi"]["detail"], "no AMD GPU on the PCI bus");
  EXPECT_EQ(by["level-zero"]["status"], "missing");
  EXPECT_EQ(by["level-zero"]["detail"], "no Intel GPU on the PCI bus");
  const Result text = run({wattscope(), "doctor", "--sysfs-root", root}, env, dir.path());
  EXPECT_NE(text.out.find("no AMD GPU on the PCI bus"), std::string::npos) << text.out;

  const Result r =
      run({wattscope(), "run", "--interval", "50ms", "--sysfs-root", root, "--db", dir / "w.db", "--", "sleep", "0.2"},
          env, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("ROCm"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Level Zero"), std::string::npos) << r.err;
  EXPECT_EQ(scalar(dir / "w.db", "SELECT count(*) FROM events WHERE source IN ('rocm-smi', 'level-zero')"), "0");
}

// The bus as the backends read it: display controllers of the vendor; AMD's accelerators (class 0x12) too.
TEST(VendorQuiet, PciBusLookup) {
  TempDir dir;
  EXPECT_EQ(wattscope::pci_bus_has_gpu(dir / "none", 0x1002, true), std::nullopt); // no sysfs: cannot tell
  pci_bus(dir / "a", {{"0000:00:02.0", "0x8086", "0x030000"}, {"0000:c1:00.0", "0x1002", "0x120000"}});
  EXPECT_EQ(wattscope::pci_bus_has_gpu(dir / "a", 0x8086, false), true);
  EXPECT_EQ(wattscope::pci_bus_has_gpu(dir / "a", 0x1002, true), true);
  EXPECT_EQ(wattscope::pci_bus_has_gpu(dir / "a", 0x1002, false), false);
  EXPECT_EQ(wattscope::pci_bus_has_gpu(dir / "a", 0x10de, false), false);
  pci_bus(dir / "b", {{"0000:03:00.0", "0x1002", "0x038000"}, {"0000:03:00.1", "0x1002", "0x040300"}});
  EXPECT_EQ(wattscope::pci_bus_has_gpu(dir / "b", 0x1002, true), true);
  pci_bus(dir / "c", {{"0000:03:00.1", "0x1002", "0x040300"}, {"0000:04:00.0", "garbage", "0x030000"}});
  EXPECT_EQ(wattscope::pci_bus_has_gpu(dir / "c", 0x1002, true), false);
}

// Item 5: what ROCm SMI prints while it starts (as the real one does where it finds no GPU it likes) reaches the
// debug log, never the terminal: a run's stderr holds wattscope's own lines only.
TEST(VendorQuiet, WhatALibraryPrintsWhileStartingGoesToTheDebugLog) {
  for (const int init_error : {0, 8}) {
    SCOPED_TRACE(init_error);
    TempDir dir;
    json scen = amd_gpu();
    scen["init_stderr"] = "Failed to open drm root directory /sys/class/drm.\nException caught: rsmi_init.\n";
    scen["init_error"] = init_error;
    write_file(dir / "rocm.json", scen.dump());
    const std::map<std::string, std::string> env = {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                                                    {"WATTSCOPE_ROCM_SMI_LIBRARY", fake_rocm()},
                                                    {"WATTSCOPE_FAKE_ROCM_SMI_SCENARIO", dir / "rocm.json"},
                                                    {"WATTSCOPE_LEVEL_ZERO_LIBRARY", "\x01"},
                                                    {"WATTSCOPE_CGROUP_ROOT", "none"}};
    const std::vector<std::string> cmd = {wattscope(), "record",       "--interval", "50ms", "--duration",
                                          "200ms",     "--sysfs-root", dir / "sys",  "--db", dir / "w.db"};
    const Result r = run(cmd, env, dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("drm root"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("Exception caught"), std::string::npos) << r.err;
    if (init_error == 0) {
      EXPECT_EQ(scalar(dir / "w.db", "SELECT count(*) FROM gpu_devices WHERE vendor = 'amd'"), "1") << r.err;
    }
    // With -v the lines are there, in the debug log, said to be the library's.
    std::vector<std::string> verbose = cmd;
    verbose.insert(verbose.begin() + 1, "-v");
    verbose.back() = dir / "w2.db";
    const Result v = run(verbose, env, dir.path());
    ASSERT_EQ(v.exit_code, 0) << v.err;
    EXPECT_NE(v.err.find("rocm-smi said on stderr: Exception caught: rsmi_init."), std::string::npos) << v.err;
    EXPECT_NE(v.err.find("rocm-smi said on stderr: Failed to open drm root directory"), std::string::npos) << v.err;
  }
}

// Item 6: a library named by its environment variable that cannot be loaded is, for every backend, "missing", said
// once on stderr, with one source-missing event.
TEST(VendorQuiet, ANamedLibraryThatCannotBeLoadedIsReportedOneWayByEveryBackend) {
  TempDir dir;
  const std::map<std::string, std::string> env = {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                                                  {"WATTSCOPE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so"},
                                                  {"WATTSCOPE_LEVEL_ZERO_LIBRARY", "/nonexistent/libze_loader.so.1"},
                                                  {"WATTSCOPE_CGROUP_ROOT", "none"}};
  const Result doc = run({wattscope(), "doctor", "--json", "--sysfs-root", dir / "sys"}, env, dir.path());
  ASSERT_EQ(doc.exit_code, 1) << doc.err; // nothing here measures power
  auto by = by_name(json::parse(doc.out));
  const std::map<std::string, std::string> variable = {{"nvml", "WATTSCOPE_NVML_LIBRARY"},
                                                       {"rocm-smi", "WATTSCOPE_ROCM_SMI_LIBRARY"},
                                                       {"level-zero", "WATTSCOPE_LEVEL_ZERO_LIBRARY"}};
  for (const auto& [name, var] : variable) {
    SCOPED_TRACE(name);
    EXPECT_EQ(by[name]["status"], "missing");
    EXPECT_NE(by[name]["detail"].get<std::string>().find("cannot load " + var + "=/nonexistent/"), std::string::npos)
        << by[name].dump();
  }
  const Result r = run({wattscope(), "record", "--interval", "50ms", "--duration", "200ms", "--sysfs-root", dir / "sys",
                        "--db", dir / "w.db"},
                       env, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& [name, var] : variable) {
    SCOPED_TRACE(name);
    EXPECT_EQ(scalar(dir / "w.db", "SELECT count(*) FROM events WHERE kind = 'source-missing' AND source = '" + name +
                                       "' AND detail LIKE 'missing: %'"),
              "1");
    const size_t first = r.err.find("cannot load " + var);
    EXPECT_NE(first, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("cannot load " + var, first + 1), std::string::npos) << "said once: " << r.err;
  }
}

// Item 6: doctor --json shows each Level Zero power domain's counter as read (the fake's first reading), not 0.
TEST(VendorQuiet, DoctorShowsTheLevelZeroCounterAsRead) {
  TempDir dir;
  write_file(dir / "l0.json", intel_gpu().dump());
  const std::map<std::string, std::string> env = {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                                                  {"WATTSCOPE_LEVEL_ZERO_LIBRARY", fake_level_zero()},
                                                  {"WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO", dir / "l0.json"}};
  const Result doc = run({wattscope(), "doctor", "--json", "--sysfs-root", dir / "sys"}, env, dir.path());
  ASSERT_EQ(doc.exit_code, 0) << doc.err;
  auto by = by_name(json::parse(doc.out));
  const json& domain = by["level-zero"]["details"]["devices"][0]["power_domains"][0];
  EXPECT_EQ(domain["energy_uj"], 2'000'000'000LL) << domain.dump();
}

// Item 8: Intel's maximum shader clock is the GPU frequency domain's maximum; AMD's free memory is total less used.
TEST(VendorQuiet, IntelMaximumClockAndAmdFreeMemory) {
  TempDir dir;
  write_file(dir / "l0.json", intel_gpu().dump());
  write_file(dir / "rocm.json", amd_gpu().dump());
  ASSERT_EQ(setenv("WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO", (dir / "l0.json").c_str(), 1), 0);
  ASSERT_EQ(setenv("WATTSCOPE_FAKE_ROCM_SMI_SCENARIO", (dir / "rocm.json").c_str(), 1), 0);
  {
    wattscope::LevelZeroSource::Options o;
    o.library_path = fake_level_zero();
    wattscope::LevelZeroSource l0(o);
    ASSERT_TRUE(l0.open()) << l0.status().line();
    ASSERT_EQ(l0.devices().size(), 1u);
    EXPECT_EQ(l0.devices()[0].clock_sm_max_mhz, 2400);
  }
  {
    wattscope::RocmSmiSource::Options o;
    o.library_path = fake_rocm();
    wattscope::RocmSmiSource amd(o);
    ASSERT_TRUE(amd.open()) << amd.status().line();
    wattscope::Frame f;
    f.mono = wattscope::SteadyClock::now();
    amd.sample(f);
    ASSERT_EQ(f.gpus.size(), 1u);
    EXPECT_EQ(f.gpus[0].mem_free_bytes, (64LL << 30) - (3LL << 30));
  }
  unsetenv("WATTSCOPE_FAKE_LEVEL_ZERO_SCENARIO");
  unsetenv("WATTSCOPE_FAKE_ROCM_SMI_SCENARIO");
}

} // namespace e2e_vendor_quiet
