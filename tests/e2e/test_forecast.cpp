// Forecasts end to end, under the real binary with the fake NVML library. A GPU whose memory grows 2 GB/s from 10 GB
// (80 GB device: out of memory 35 s after the driver started) and whose temperature rises 1 °C/s from 50 °C (the
// device's own 80 °C slowdown temperature, read through nvmlDeviceGetTemperatureThreshold, 30 s after):
// /api/v1/forecast gives the out-of-memory time within a stated tolerance of the truth computed from the GPU's own
// reading, once the history is 10 s and a third of the time left (a forecast reaches at most 3x its history ahead),
// and the throttle point the device's; `run` stores a declared total
// (`mark work --total`), prints the forecasts at its end and records the `forecast` event.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "http_client.hpp"

namespace e2e_forecast { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr double kFrom = 10e9, kRate = 2e9, kDevice = 80e9;  // bytes, bytes/s
constexpr double kTemp0 = 50, kTempRate = 1, kSlowdown = 80; // °C, °C/s, °C

// One segment of 1000 s (no loop): the ramps are straight lines in time since nvmlInit.
json scenario() {
  return {
      {"driver_version", "550.54.15"},
      {"nvml_version", "12.550.54.15"},
      {"timeline", {{"loop", false}, {"segments", json::array({{{"label", "all"}, {"s", 1000}}})}}},
      {"devices", json::array({{{"name", "NVIDIA H100 80GB HBM3"},
                                {"uuid", "GPU-3600"},
                                {"pci_bus_id", "00000000:36:00.0"},
                                {"slowdown_temp_c", static_cast<int>(kSlowdown)},
                                {"shutdown_temp_c", 92},
                                {"metrics",
                                 {{"power_mw", 300000},
                                  {"energy_mj", {{"linear", {1000000, 15}}}},
                                  {"util_gpu", 70},
                                  {"util_mem", 30}, // the fake answers utilisation only with both
                                  {"mem_used_bytes", {{"timeline", {{"all", {kFrom, kFrom + kRate * 1000}}}}}},
                                  {"mem_total_bytes", static_cast<long long>(kDevice)},
                                  {"temp_gpu", {{"timeline", {{"all", {kTemp0, kTemp0 + kTempRate * 1000}}}}}}}}}})}};
}

std::map<std::string, std::string> env(const TempDir& t) {
  return {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
          {"WATTSCOPE_FAKE_NVML_SCENARIO", t / "scenario.json"},
          {"CUDA_VISIBLE_DEVICES", "\x01"},
          {"WATTSCOPE_SOCKET", "\x01"},
          {"HOME", t.path()}};
}

} // namespace

TEST(Forecast, ServeAnswersOomAndThrottleTimesNearTheTruth) {
  TempDir t;
  write_file(t / "scenario.json", scenario().dump());
  const int pid = start({wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "50ms"}, env(t), t.path(),
                        t / "out.txt", t / "err.txt");
  const int port = wait_for_serve_port(t / "err.txt");
  json f, cur;
  for (int i = 0; i < 400; ++i) { // up to 20 s; a forecast needs 10 s of history
    auto r = http::get(port, "/api/v1/forecast");
    ASSERT_EQ(r.status, 200) << r.body;
    f = json::parse(r.body);
    if (!f["devices"].empty() && !f["devices"][0]["oom"]["in_s"].is_null()) break;
    std::this_thread::sleep_for(50ms);
  }
  cur = json::parse(http::get(port, "/api/v1/current").body);
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
  ASSERT_EQ(f["devices"].size(), 1u) << f.dump();
  const json& d = f["devices"][0];
  ASSERT_FALSE(d["oom"]["in_s"].is_null()) << f.dump(2);
  // The truth at the forecast's time, from the GPU's memory reading in /api/v1/current and the two times.
  const double mem_now = cur["gpus"][0]["mem_used_bytes"].get<double>();
  const double since_init_s =
      (mem_now - kFrom) / kRate - (cur["ts_ms"].get<double>() - f["ts_ms"].get<double>()) / 1000.0;
  EXPECT_NEAR(d["oom"]["in_s"].get<double>(), (kDevice - kFrom) / kRate - since_init_s, 2.0) << d.dump(2);
  EXPECT_LE(d["oom"]["low_s"].get<double>(), d["oom"]["in_s"].get<double>());
  EXPECT_NEAR(d["oom"]["growth_bytes_per_s"].get<double>(), kRate, 0.02 * kRate);
  // The throttle point is the device's own (nvmlDeviceGetTemperatureThreshold); a throttle forecast rests on a minute
  // of its trend at least (tests/unit/test_live_forecast.cpp checks its times), and says so until then.
  EXPECT_EQ(d["throttle"]["throttle_temp_source"], "device");
  EXPECT_EQ(d["throttle"]["throttle_temp_c"].get<double>(), kSlowdown);
  EXPECT_TRUE(d["throttle"]["in_s"].is_null()) << d.dump(2);
  EXPECT_NE(d["throttle"]["basis"].get<std::string>().find("rests on 60 s of a trend at least"), std::string::npos)
      << d.dump(2);
  EXPECT_NEAR(d["throttle"]["rise_c_per_s"].get<double>(), kTempRate, 0.1 * kTempRate);
  EXPECT_EQ(d["util_next_minute"]["mean_pct"].get<double>(), 70.0);
  EXPECT_TRUE(f["finish"].empty()); // nobody declared a total
}

TEST(Forecast, RunStoresTheDeclaredTotalPrintsTheForecastAndRecordsTheEvent) {
  TempDir t;
  write_file(t / "scenario.json", scenario().dump());
  auto e = env(t);
  e.erase("WATTSCOPE_SOCKET"); // `run` sets it for the child
  const std::string w = "'" + wattscope() + "'";
  Result r = run({wattscope(), "run", "--interval", "50ms", "--task", "forecast", "--", "sh", "-c",
                  w + " mark work 10 samples --total 1000 && sleep 11 && " + w + " mark work 10"},
                 e, t.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = t / "wattscope.db";
  auto work = query(db, "SELECT amount, unit, total FROM work ORDER BY seq");
  ASSERT_EQ(work.size(), 2u) << r.err;
  EXPECT_EQ(*work[0][2], "1000.0");
  EXPECT_FALSE(work[1][2].has_value()); // declared once: missing on the later row, not 0
  EXPECT_NE(r.err.find("forecast  GPU 0 out of memory in ~"), std::string::npos) << r.err;
  auto ev = query(db, "SELECT source, detail FROM events WHERE kind = 'forecast' ORDER BY seq");
  ASSERT_GE(ev.size(), 1u) << r.err;
  EXPECT_EQ(*ev[0][0], "gpu0");
  EXPECT_EQ(ev[0][1]->rfind("forecast: GPU 0 ", 0), 0u) << *ev[0][1];
  // `mark work --total` refuses what the protocol refuses, with the name of the problem.
  Result bad = run({wattscope(), "mark", "work", "1", "--total", "-5"}, {{"WATTSCOPE_SOCKET", "\x01"}}, t.path());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("total"), std::string::npos) << bad.err;
}

} // namespace e2e_forecast
