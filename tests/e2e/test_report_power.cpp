// The report's "Power by process" chart in watts, end to end (issue 29): the real binary records a GPU (the fake NVML)
// drawing a constant 300 W, all of it used by one process of the run; the report's chart must read 300 W, not the
// scan's energy over a 500th of the run (~35 kW for this 4-second run).
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"

namespace e2e_report_power { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

json report_data(const std::string& html) {
  const std::string open = "<script id=\"ws-data\" type=\"application/json\">";
  const auto a = html.find(open);
  if (a == std::string::npos) return {};
  const auto b = html.find("</script", a + open.size());
  return json::parse(html.substr(a + open.size(), b - a - open.size()), nullptr, false);
}

} // namespace

TEST(ReportPower, ConstantPowerOfOneProcessReadsAsThatPower) {
  TempDir dir;
  TempDir empty; // no RAPL: the GPU is the only device with energy
  const json scen = {{"devices",
                      {{{"name", "NVIDIA H100"},
                        {"uuid", "GPU-report-power"},
                        {"metrics",
                         {{"power_mw", 300000},
                          {"energy_mj", {{"sine_integral", {{"base", 300000}, {"amp", 0}, {"period_s", 1}}}}},
                          {"util_gpu", 90},
                          {"mem_used_bytes", 1LL << 30},
                          {"mem_total_bytes", 80LL << 30}}},
                        {"processes", {{{"pid_file", dir / "w.pid"}, {"sm", 60}, {"mem_bytes", 1LL << 30}}}}}}}};
  write_file(dir / "scenario.json", scen.dump());
  Result r = run({wattscope(), "run", "--interval", "100ms", "--sysfs-root", empty.path(), "--db", dir / "w.db", "--",
                  "/bin/sh", "-c", "sleep 4.5 & echo $! > w.pid; wait"},
                 {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                  {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                  {"CUDA_VISIBLE_DEVICES", "\x01"}},
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result rep = run({wattscope(), "report", "--db", dir / "w.db", "-o", dir / "r.html"}, {}, dir.path());
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const json data = report_data(read_file(dir / "r.html"));
  ASSERT_TRUE(data.is_object());
  const json& P = data["runs"][0]["processes"];
  ASSERT_TRUE(P.is_object()) << data["runs"][0].dump();
  const json& power = P["power"];
  const size_t n = power["t"].size();
  ASSERT_GE(n, 3u) << power.dump();
  std::vector<double> sum(n, 0.0);
  for (const auto& s : power["series"])
    for (size_t i = 0; i < n; ++i)
      sum[i] += s["y"][i].get<double>();
  // The cells from the sleeper's second scan to the last before it exits hold 300 W exactly: its first carries only
  // the tick that adopted its scan (before it, the energy was nobody's), its last may end with it.
  size_t first = 0;
  while (first < n && sum[first] <= 0)
    ++first;
  size_t checked = 0;
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE(i);
    EXPECT_LE(sum[i], 300.0 * 1.03) << "never more than the GPU drew: " << power.dump();
    if (i <= first || i + 1 >= n) continue;
    EXPECT_NEAR(sum[i], 300.0, 300.0 * 0.03) << power.dump();
    ++checked;
  }
  EXPECT_GE(checked, 1u) << power.dump();
  // Not a CPU figure of 0: this run measured no CPU energy.
  for (const auto& p : P["table"])
    EXPECT_TRUE(p["cpu_energy_j"].is_null()) << p.dump();
}

} // namespace e2e_report_power
