// RAPL, hwmon GPUs, the estimate and doctor, end to end on sysfs fixture trees.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/sysfs_fixtures.hpp"

namespace e2e_sysfs { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {
const std::map<std::string, std::string> kNoNvml = {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}};

// Runs as an unprivileged user where the tests run as root (CI does): root reads any file, whatever its mode.
std::vector<std::string> unprivileged(std::vector<std::string> argv) {
  if (geteuid() != 0) return argv;
  argv.insert(argv.begin(), {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"});
  return argv;
}
} // namespace

TEST(Sysfs, RecordsRaplZonesAndHwmonGpusWithExactEnergy) {
  TempDir dir;
  const std::string root = dir / "sys";
  two_socket_rapl(root);
  // package-1 sits 2 J below its wrap point: the update below wraps it.
  write_rapl_zone(root, {"intel-rapl:1", "package-1", 262143328850 - 2'000'000, 262143328850, 0});
  amd_and_intel_gpus(root);
  int pid = start({wattscope(), "record", "--interval", "50ms", "--sysfs-root", root}, kNoNvml, dir.path(), dir / "out",
                  dir / "err");
  std::this_thread::sleep_for(400ms);
  set_energy(root, "intel-rapl:0", 1'000'000 + 25'000'000);                             // +25 J
  set_energy(root, "intel-rapl:0:1", 200'000 + 3'000'000);                              // +3 J
  set_energy(root, "intel-rapl:1", 5'000'000);                                          // wrapped: +7 J
  set_energy(root, "intel-rapl:1:0", 400'000 + 1'500'000);                              // +1.5 J
  write_file(root + "/class/drm/card1/device/hwmon/hwmon5/energy1_input", "9000000\n"); // Intel GPU +4 J
  std::this_thread::sleep_for(400ms);
  kill(pid, SIGTERM);
  ASSERT_EQ(wait_exit(pid), 0) << read_file(dir / "err");
  const std::string db = dir / "wattscope.db";

  auto last = [&](const std::string& domain) {
    return std::stod(
        scalar(db, "SELECT energy_j FROM cpu_power_samples WHERE domain='" + domain + "' ORDER BY tick DESC LIMIT 1"));
  };
  EXPECT_DOUBLE_EQ(last("intel-rapl:0"), 25.0);
  EXPECT_DOUBLE_EQ(last("intel-rapl:0:1"), 3.0);
  EXPECT_DOUBLE_EQ(last("intel-rapl:1"), 7.0);
  EXPECT_DOUBLE_EQ(last("intel-rapl:1:0"), 1.5);
  EXPECT_DOUBLE_EQ(last("intel-rapl:2"), 0.0);
  // Sockets kept apart.
  EXPECT_EQ(scalar(db, "SELECT group_concat(DISTINCT socket) FROM (SELECT socket FROM cpu_power_samples WHERE "
                       "zone='package' ORDER BY socket)"),
            "0,1");
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM cpu_power_samples WHERE zone='psys' AND socket IS NOT NULL"), "0");
  EXPECT_DOUBLE_EQ(std::stod(scalar(db, "SELECT package_energy_j FROM cpu_samples ORDER BY tick DESC LIMIT 1")), 32.0);
  EXPECT_DOUBLE_EQ(std::stod(scalar(db, "SELECT dram_energy_j FROM cpu_samples ORDER BY tick DESC LIMIT 1")), 4.5);
  EXPECT_EQ(scalar(db, "SELECT DISTINCT power_method FROM cpu_samples WHERE power_method IS NOT NULL"), "counter");
  // hwmon GPUs in gpu_samples with their vendor (gpu_devices', shown by the view), numbered from 0.
  EXPECT_EQ(scalar(db, "SELECT group_concat(v) FROM (SELECT DISTINCT gpu_index || ':' || vendor AS v FROM "
                       "gpu_samples_named ORDER BY v)"),
            "0:amd,1:intel");
  EXPECT_EQ(scalar(db, "SELECT energy_method FROM gpu_devices WHERE vendor='intel'"), "counter");
  EXPECT_EQ(scalar(db, "SELECT energy_method FROM gpu_devices WHERE vendor='amd'"), "integrated");
  EXPECT_DOUBLE_EQ(std::stod(scalar(db, "SELECT max(energy_j) FROM gpu_samples_named WHERE vendor='intel'")), 4.0);
  EXPECT_EQ(scalar(db, "SELECT DISTINCT temp_mem_c FROM gpu_samples_named WHERE vendor='amd'"), "70.0");

  auto j = json::parse(run({wattscope(), "show", "--json"}, {}, dir.path()).out);
  EXPECT_DOUBLE_EQ(j["cpu"]["energy_j"].get<double>(), 36.5);
  EXPECT_EQ(j["cpu"]["energy_method"], "counter");
  EXPECT_EQ(j["cpu"]["zones"].size(), 6u);
  double gpus = 0;
  for (const auto& g : j["gpus"])
    gpus += g["energy_j"].get<double>();
  EXPECT_NEAR(j["total_energy_j"].get<double>(), 36.5 + gpus, 1e-9);
  const std::string err = read_file(dir / "err");
  EXPECT_NE(err.find("CPU power package 32.0 J"), std::string::npos) << err;
  EXPECT_NE(err.find("socket 0 25.0 J · socket 1 7.00 J"), std::string::npos) << err;
}

TEST(Sysfs, UnreadableCountersAreReportedWithTheFixAndNoZeroIsStored) {
  TempDir dir;
  chmod(dir.path().c_str(), 0777);
  const std::string root = dir / "sys";
  two_socket_rapl(root);
  for (const auto& e : std::filesystem::recursive_directory_iterator(root + "/class/powercap"))
    if (e.path().filename() == "energy_uj") chmod(e.path().c_str(), 0000);
  auto r = run(unprivileged({wattscope(), "record", "--interval", "50ms", "--duration", "300ms", "--sysfs-root", root,
                             "--db", dir / "w.db"}),
               kNoNvml, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("no permission"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sudo chmod a+r"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/etc/tmpfiles.d/"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("no permission"), r.err.rfind("no permission")); // said once
  const std::string db = dir / "w.db";
  EXPECT_GE(std::stoi(scalar(db, "SELECT count(*) FROM cpu_samples")), 3);
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM cpu_samples WHERE package_power_w IS NOT NULL OR package_energy_j IS "
                       "NOT NULL"),
            "0");
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM cpu_power_samples"), "0");
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM events WHERE source='rapl' AND detail LIKE 'no permission%'"), "1");

  auto doc = run(unprivileged({wattscope(), "doctor", "--json", "--sysfs-root", root}), kNoNvml, dir.path());
  EXPECT_EQ(doc.exit_code, 1) << doc.err; // nothing measures power in this tree for this user
  auto j = json::parse(doc.out);
  const auto& rapl = j["sources"][1];
  EXPECT_EQ(rapl["name"], "rapl");
  EXPECT_EQ(rapl["status"], "no permission");
  EXPECT_NE(rapl["fix"].get<std::string>().find("tmpfiles.d"), std::string::npos);
  EXPECT_EQ(rapl["details"].size(), 6u);
  EXPECT_EQ(rapl["details"][0]["status"], "no permission");
}

TEST(Sysfs, DoctorTellsTheTruthAboutEachSource) {
  TempDir dir;
  const std::string root = dir / "sys";
  two_socket_rapl(root);
  amd_and_intel_gpus(root);
  auto doc = run({wattscope(), "doctor", "--json", "--sysfs-root", root}, kNoNvml, dir.path());
  ASSERT_EQ(doc.exit_code, 0) << doc.err;
  auto j = json::parse(doc.out);
  std::map<std::string, json> by;
  for (const auto& s : j["sources"])
    by[s["name"]] = s;
  EXPECT_EQ(by["procfs"]["status"], "ok");
  EXPECT_EQ(by["rapl"]["status"], "ok");
  EXPECT_EQ(by["rapl"]["details"].size(), 6u);
  EXPECT_EQ(by["hwmon-gpu"]["status"], "ok");
  EXPECT_EQ(by["hwmon-gpu"]["details"].size(), 2u);
  EXPECT_EQ(by["nvml"]["status"], "missing");
  EXPECT_NE(by["nvml"]["fix"].get<std::string>().find("WATTSCOPE_NVML_LIBRARY"), std::string::npos);
  EXPECT_EQ(j["power_measurable"], true);
  // The libraries opened only on use (core/lazy/lazy_lib.hpp) are listed with what needs them; scripts/setup.sh
  // installs both.
  ASSERT_EQ(j["libraries"].size(), 2u) << j.dump();
  EXPECT_EQ(j["libraries"][0]["name"], "libcurl");
  EXPECT_EQ(j["libraries"][0]["available"], true) << j["libraries"][0]["fix"];
  EXPECT_EQ(j["libraries"][1]["name"], "libmariadb");
  EXPECT_EQ(j["libraries"][1]["available"], true) << j["libraries"][1]["fix"];
  auto text = run({wattscope(), "doctor", "--sysfs-root", root}, kNoNvml, dir.path());
  EXPECT_NE(text.out.find("libcurl    ok"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("intel-rapl:1 package-1 (socket 1) · ok"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("power: measurable here (rapl, hwmon-gpu)"), std::string::npos) << text.out;
  // An empty tree: nothing measurable, exit 1.
  TempDir empty;
  EXPECT_EQ(run({wattscope(), "doctor", "--sysfs-root", empty.path()}, kNoNvml, dir.path()).exit_code, 1);
}

TEST(Sysfs, EstimateOnlyWhenAskedAndLabelled) {
  TempDir dir;
  TempDir empty; // no RAPL here
  auto r = run({wattscope(), "run", "--interval", "50ms", "--cpu-tdp", "200", "--sysfs-root", empty.path(), "--",
                "sleep", "0.4"} /* several ticks: utilisation needs two */,
               kNoNvml, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = dir / "wattscope.db";
  EXPECT_EQ(scalar(db, "SELECT DISTINCT power_method FROM cpu_samples WHERE power_method IS NOT NULL"), "estimated");
  auto j = json::parse(run({wattscope(), "show", "--json"}, {}, dir.path()).out);
  EXPECT_EQ(j["cpu"]["energy_method"], "estimated");
  EXPECT_NE(r.err.find("[estimated]"), std::string::npos) << r.err;
  // Without --cpu-tdp there is no CPU power figure at all.
  auto plain =
      run({wattscope(), "run", "--db", "plain.db", "--sysfs-root", empty.path(), "--", "true"}, kNoNvml, dir.path());
  EXPECT_EQ(scalar(dir / "plain.db", "SELECT count(*) FROM cpu_samples WHERE package_power_w IS NOT NULL"), "0");
  EXPECT_TRUE(
      json::parse(run({wattscope(), "show", "--db", "plain.db", "--json"}, {}, dir.path()).out)["cpu"]["energy_j"]
          .is_null());
  EXPECT_NE(run({wattscope(), "run", "--cpu-tdp", "-5", "--", "true"}, kNoNvml, dir.path()).exit_code, 0);
}
} // namespace e2e_sysfs
