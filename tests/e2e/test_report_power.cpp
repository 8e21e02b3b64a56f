// The report's "Power by process" chart in watts, end to end (issue 29): the real binary records a GPU (the fake NVML)
// drawing a constant 300 W, all of it used by one process of the run; the report's chart must read 300 W, not the
// scan's energy over a 500th of the run (~35 kW for this 4-second run).
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include <signal.h>

#include <fmt/format.h>

#include "../support/support.hpp"
#include "http_client.hpp"

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

// Zoom to the minute: a two-hour log at 1 s (imported from nvidia-smi) with a one-minute 100 -> 700 W staircase an
// hour in. The whole run's charts keep at most 2 points per bucket of 7.2 s; `report --from 60m --to 61m --resolution
// 1s` draws that minute at its own resolution, every point the staircase's value at its second, on a clock axis
// (the window in UTC in the data). serve's /api/v1/runs/ID/series answers the same window the same way.
TEST(ReportPower, AWindowIsDrawnAtItsOwnResolution) {
  TempDir dir;
  std::string csv = "timestamp, index, name, uuid, power.draw [W], utilization.gpu [%]\n";
  auto staircase = [](int s) { return s >= 3600 && s < 3660 ? 100.0 + 100.0 * ((s - 3600) * 7 / 60) : 150.0; };
  for (int s = 0; s < 7200; ++s)
    csv += fmt::format("2026/11/20 {:02}:{:02}:{:02}.000, 0, NVIDIA H100, GPU-z, {:.2f} W, 50 %\n", 8 + s / 3600,
                       s / 60 % 60, s % 60, staircase(s));
  write_file(dir / "log.csv", csv);
  const std::string db = dir / "z.db";
  ASSERT_EQ(run({wattscope(), "import", "nvidia-smi", dir / "log.csv", "--task", "stairs", "--utc", "--db", db}, {},
                dir.path())
                .exit_code,
            0);
  auto power = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> args = {wattscope(), "report", "--db", db, "-o", dir / "r.html"};
    args.insert(args.end(), flags.begin(), flags.end());
    const Result r = run(args, {}, dir.path());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const json data = report_data(read_file(dir / "r.html"));
    return std::make_pair(data["runs"][0]["gpus"][0]["series"]["power_w"], data["runs"][0]["window"]);
  };
  const auto [whole, no_window] = power({});
  EXPECT_LE(whole["t"].size(), 2000u);
  EXPECT_TRUE(no_window.is_null());
  const auto [minute, window] = power({"--from", "60m", "--to", "61m", "--resolution", "1s"});
  ASSERT_EQ(minute["t"].size(), 61u) << minute.dump();
  for (size_t i = 0; i < minute["t"].size(); ++i) {
    const double t = minute["t"][i].get<double>();
    EXPECT_DOUBLE_EQ(t, 3600.0 + static_cast<double>(i));
    EXPECT_DOUBLE_EQ(minute["y"][i].get<double>(), staircase(static_cast<int>(t))) << t;
  }
  EXPECT_EQ(window["from"], "2026-11-20T09:00:00.000Z");
  EXPECT_EQ(window["to"], "2026-11-20T09:01:00.000Z");
  // Bad windows are said, naming the flag.
  for (const auto& [flags, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--from", "2h", "--to", "1h"}, "--from must be before --to"},
           {{"--from", "yesterday"}, "--from 'yesterday': not a time"},
           {{"--resolution", "1ms"}, "at most 20000 are drawn"}}) {
    std::vector<std::string> args = {wattscope(), "report", "--db", db, "-o", dir / "x.html"};
    args.insert(args.end(), flags.begin(), flags.end());
    const Result r = run(args, {}, dir.path());
    EXPECT_EQ(r.exit_code, 2) << flags[0];
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  }

  const int pid = start({wattscope(), "serve", "--listen", "127.0.0.1:0", "--db", db},
                        {{"WATTSCOPE_NVML_LIBRARY", dir / "absent-nvml.so"}}, dir.path(), dir / "out", dir / "err");
  const int port = wait_for_serve_port(dir / "err", 200);
  const std::string id = json::parse(run({wattscope(), "show", "--db", db, "--json"}, {}, dir.path()).out)["run_id"];
  const auto reply =
      http::get(port, "/api/v1/runs/" + id + "/series?from=2026-11-20T09:00:00Z&to=2026-11-20T09:01:00Z&buckets=60", {},
                std::chrono::seconds(10));
  const auto bad = http::get(port, "/api/v1/runs/" + id + "/series?from=soon", {}, std::chrono::seconds(10));
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json zoomed = json::parse(reply.body)["gpus"][0]["series"]["power_w"];
  EXPECT_EQ(zoomed, minute) << "serve's zoom and report --from/--to draw one window alike";
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("'from'"), std::string::npos) << bad.body;
}
} // namespace e2e_report_power
