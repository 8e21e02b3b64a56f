// Issue 31, end to end with the real binary: a hostile scenario file gets an error that names the problem (never a
// crash), and a long scenario timeline costs neither memory nor time.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../support/support.hpp"

namespace e2e_hardening_scenario { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope

namespace {

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i)
    out += s;
  return out;
}

// A HOME of the test's own, so no rules file of the machine's is read (and the test's one is, where it puts it).
std::map<std::string, std::string> home_env(const TempDir& dir) {
  return {{"HOME", dir.path()}, {"XDG_CONFIG_HOME", "\x01"}, {"WATTSCOPE_CGROUP_ROOT", "none"}};
}

TEST(HardeningScenario, ADeepScenarioIsAnErrorNotACrash) {
  TempDir dir;
  const std::string value = repeat("{\"linear\":[1,2],\"max\":", 20'000) + "1" + repeat("}", 20'000); // 460 KB
  write_file(dir / "deep.json",
             "{\"devices\":[{\"name\":\"x\",\"uuid\":\"GPU-x\",\"metrics\":{\"power_mw\":" + value + "}}]}");
  const auto r =
      run({wattscope(), "run", "--simulate=" + dir / "deep.json", "--db", dir / "w.db", "--", "true"}, home_env(dir));
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("objects and lists nested deeper than 32 levels"), std::string::npos) << r.err;
}

TEST(HardeningScenario, ALibraryKnobOfTheWrongTypeIsAnErrorNotAnAbort) {
  TempDir dir;
  // The simulated library read "unsupported" as a list of strings inside an NVML call: exit 134 before issue 31.
  write_file(dir / "knob.json",
             R"({"devices": [{"name": "x", "uuid": "GPU-x", "unsupported": 5, "metrics": {"power_mw": 1}}]})");
  const auto r =
      run({wattscope(), "run", "--simulate=" + dir / "knob.json", "--db", dir / "w.db", "--", "true"}, home_env(dir));
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("devices[0].unsupported: expected a list of names"), std::string::npos) << r.err;
}

TEST(HardeningScenario, SixtyFourGpusSharingAUuidAreRefused) {
  TempDir dir;
  std::string devs;
  for (int i = 0; i < 64; ++i)
    devs += std::string(i ? "," : "") + R"({"name":"x","uuid":"GPU-same","metrics":{"power_mw":1}})";
  write_file(dir / "same.json", "{\"devices\":[" + devs + "]}");
  const auto r =
      run({wattscope(), "run", "--simulate=" + dir / "same.json", "--db", dir / "w.db", "--", "true"}, home_env(dir));
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("devices[1].uuid: 'GPU-same' is also devices[0].uuid"), std::string::npos) << r.err;
}

TEST(HardeningScenario, ATimelineOfElevenDaysCostsWhatAShortOneDoes) {
  // One segment of 999,999 s with one unit of work a second: two million markers, which were all listed at start
  // (this scenario: ~550 MB and ~12 s for a 1 s run on a loaded machine before issue 31).
  TempDir dir;
  write_file(dir / "long.json", R"({"timeline": {"segments": [{"label": "a", "s": 999999, "work_per_s": 1}]},
    "devices": [{"name": "x", "uuid": "GPU-x", "metrics": {"power_mw": 100000}}]})");
  const auto t0 = std::chrono::steady_clock::now();
  const int pid =
      start({wattscope(), "run", "--simulate=" + dir / "long.json", "--db", dir / "w.db", "--", "sleep", "1"},
            home_env(dir), dir.path(), dir / "out", dir / "err");
  int status = 0;
  rusage ru{};
  ASSERT_EQ(::wait4(pid, &status, 0, &ru), pid);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status)) << read_file(dir / "err");
  EXPECT_EQ(WEXITSTATUS(status), 0) << read_file(dir / "err");
  // Its peak resident memory (VmHWM, as the kernel reports it for a reaped child) and its time: generous bounds
  // for a shared machine, far below what listing the markers took.
  EXPECT_LT(ru.ru_maxrss, 150 * 1024) << "KiB";
  EXPECT_LT(wall_s, 6.0);
  // The work of the first second was recorded, from the markers computed on demand.
  EXPECT_NE(scalar(dir / "w.db", "SELECT COUNT(*) FROM work"), "0");
}

} // namespace
} // namespace e2e_hardening_scenario
