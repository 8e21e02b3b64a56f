// Issue 17: the NVIDIA health and throughput metrics, Xid events and MIG, against the fake libnvidia-ml (tests/fakes)
// through the production dlopen path. Most tests run the real binary; the event thread's clean stop is checked
// in-process (and under ASan in the sanitizer build).
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "http_client.hpp"
#include "sources/nvml/nvml_source.hpp"

namespace e2e_nvml_health { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr int kReads = 40; // length of every scripted series

// Distinct per call: a value in the wrong row or column shows.
json series(long long base, long long step) {
  json a = json::array();
  for (int k = 0; k < kReads; ++k)
    a.push_back(base + step * k + (k * k) % 7);
  return a;
}

json base_metrics() {
  return {{"power_mw", 250000},
          {"energy_mj", {{"linear", {1000000, 25}}}},
          {"util_gpu", 50},
          {"util_mem", 10},
          {"mem_used_bytes", 1LL << 30},
          {"mem_total_bytes", 80LL << 30}};
}

json health_metrics() {
  json m = base_metrics();
  m["ecc_corrected"] = series(5, 3);
  m["ecc_uncorrected"] = series(1, 1);
  m["remapped_cor"] = series(10, 2);
  m["remapped_unc"] = series(20, 1);
  m["remap_pending"] = json::array({0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 0, 1});
  m["remap_failed"] = json::array({0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1});
  m["pcie_replays"] = series(100, 9);
  m["violation_power_ns"] = series(7'000'000'000LL, 123'456'789LL);
  m["violation_thermal_ns"] = series(2'000'000'000LL, 33'000'000LL);
  // NVLink: KiB counters and NVML's own timestamps, 100 ms apart: the rate is exact.
  m["nvlink_tx_kib"] = json{{"linear", {1'000'000, 50}}};
  m["nvlink_rx_kib"] = json{{"linear", {2'000'000, 30}}};
  m["field_timestamp_us"] = json{{"linear", {5'000'000, 100'000}}};
  return m;
}

json device(const json& metrics, const std::string& uuid = "GPU-health-0") {
  return {{"name", "NVIDIA H100 80GB HBM3"}, {"uuid", uuid}, {"pci_bus_id", "00000000:3B:00.0"}, {"metrics", metrics}};
}

struct Run {
  TempDir dir;
  Result result;
  json calls;
  std::string db() const { return dir / "w.db"; }
};

std::unique_ptr<Run> run_with(const json& scen, std::vector<std::string> args,
                              std::map<std::string, std::string> env = {}) {
  auto r = std::make_unique<Run>();
  write_file(r->dir / "scenario.json", scen.dump());
  env["WATTSCOPE_NVML_LIBRARY"] = fake_nvml();
  env["WATTSCOPE_FAKE_NVML_SCENARIO"] = r->dir / "scenario.json";
  env["WATTSCOPE_FAKE_NVML_CALLS"] = r->dir / "calls.json";
  env.emplace("CUDA_VISIBLE_DEVICES", "\x01");
  args.insert(args.begin(), wstest::wattscope());
  r->result = run(args, env, r->dir.path());
  const std::string calls = read_file(r->dir / "calls.json");
  r->calls = calls.empty() ? json::object() : json::parse(calls);
  return r;
}

long long calls_of(const json& calls, const char* symbol) {
  return calls.contains(symbol) ? calls[symbol].get<long long>() : 0;
}

// The value a health column holds in each row, checked against the scripted series: every row carries the latest
// read (read k, k = 0, 1, ... in order, each held until the next), and the number of reads is what the fake counted.
void expect_carried_reads(const std::vector<std::optional<std::string>>& column, const std::function<double(int)>& read,
                          long long reads, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_GE(reads, 2) << "the run is long enough for two reads";
  int k = 0;
  for (size_t row = 0; row < column.size(); ++row) {
    ASSERT_TRUE(column[row].has_value()) << "row " << row;
    const double v = std::stod(*column[row]);
    if (std::fabs(v - read(k)) > 1e-9 * std::max(1.0, std::fabs(read(k)))) {
      ++k; // the next read
      ASSERT_LT(k, reads) << "row " << row << " holds " << v;
      EXPECT_NEAR(v, read(k), 1e-9 * std::max(1.0, std::fabs(read(k)))) << "row " << row;
    }
  }
  EXPECT_EQ(k + 1, reads) << "every read shows in some row";
}

std::vector<std::optional<std::string>> column(const std::string& db, const std::string& col) {
  std::vector<std::optional<std::string>> out;
  for (auto& row : query(db, "SELECT " + col + " FROM gpu_samples ORDER BY tick"))
    out.push_back(row[0]);
  return out;
}

} // namespace

TEST(NvmlHealth, EveryCounterIsTheFakesLatestReadOnEveryRow) {
  const json scen = {{"devices", {device(health_metrics())}}};
  // 2.3 s at 100 ms: the health counters are read once a second (three reads), the NVLink field every tick.
  auto r = run_with(scen, {"run", "--interval", "100ms", "--db", "w.db", "--", "sleep", "2.3"});
  ASSERT_EQ(r->result.exit_code, 0) << r->result.err;
  const json& m = scen["devices"][0]["metrics"];
  const auto at = [&](const char* name) { return [&m, name](int k) { return m[name][k].get<double>(); }; };
  const long long ecc_reads = calls_of(r->calls, "nvmlDeviceGetTotalEccErrors") / 2; // corrected + uncorrected
  expect_carried_reads(column(r->db(), "ecc_corrected_errors"), at("ecc_corrected"), ecc_reads, "ecc corrected");
  expect_carried_reads(column(r->db(), "ecc_uncorrected_errors"), at("ecc_uncorrected"), ecc_reads, "ecc uncorrected");
  const long long rows_reads = calls_of(r->calls, "nvmlDeviceGetRemappedRows");
  expect_carried_reads(column(r->db(), "remapped_rows_correctable"), at("remapped_cor"), rows_reads, "remapped cor");
  expect_carried_reads(column(r->db(), "remapped_rows_uncorrectable"), at("remapped_unc"), rows_reads, "remapped unc");
  // The pending/failure flags repeat values, so the read index cannot be told from them alone: the same rows as the
  // row counts, whose series never repeats.
  const auto cor = column(r->db(), "remapped_rows_correctable");
  const auto pending = column(r->db(), "remap_pending");
  const auto failed = column(r->db(), "remap_failed");
  for (size_t row = 0; row < cor.size(); ++row) {
    int k = 0;
    while (k < kReads && m["remapped_cor"][k].get<double>() != std::stod(*cor[row]))
      ++k;
    ASSERT_LT(k, kReads);
    EXPECT_EQ(std::stod(pending[row].value_or("-1")), m["remap_pending"][k].get<double>()) << "row " << row;
    EXPECT_EQ(std::stod(failed[row].value_or("-1")), m["remap_failed"][k].get<double>()) << "row " << row;
  }
  expect_carried_reads(column(r->db(), "pcie_replays"), at("pcie_replays"),
                       calls_of(r->calls, "nvmlDeviceGetPcieReplayCounter"), "pcie replays");
  // Violation time: seconds since the run's first reading, from NVML's nanoseconds.
  // Read on the same health ticks as the ECC counters (issue 30: as field values, so no call of its own to count).
  const long long violation_reads = ecc_reads;
  const double p0 = m["violation_power_ns"][0].get<double>(), t0 = m["violation_thermal_ns"][0].get<double>();
  expect_carried_reads(
      column(r->db(), "throttle_power_s"), [&](int k) { return (m["violation_power_ns"][k].get<double>() - p0) / 1e9; },
      violation_reads, "throttle power");
  expect_carried_reads(
      column(r->db(), "throttle_thermal_s"),
      [&](int k) { return (m["violation_thermal_ns"][k].get<double>() - t0) / 1e9; }, violation_reads,
      "throttle thermal");
  // Cheap: once a second, not once a tick.
  const int ticks = std::stoi(scalar(r->db(), "SELECT count(*) FROM gpu_samples"));
  EXPECT_GE(ticks, 15);
  EXPECT_LE(calls_of(r->calls, "nvmlDeviceGetPcieReplayCounter"), 4);
  // NVLink: 50 and 30 KiB per 100 ms of NVML time, every row but the first (which only sets the base).
  auto rates = query(r->db(), "SELECT nvlink_tx_bytes_per_s, nvlink_rx_bytes_per_s FROM gpu_samples ORDER BY tick");
  ASSERT_GE(rates.size(), 3u);
  EXPECT_FALSE(rates[0][0].has_value());
  EXPECT_FALSE(rates[0][1].has_value());
  for (size_t i = 1; i < rates.size(); ++i) {
    EXPECT_EQ(rates[i][0].value_or("missing"), "512000") << "row " << i;
    EXPECT_EQ(rates[i][1].value_or("missing"), "307200") << "row " << i;
  }
  // And the counters themselves, in bytes, every row (the first too): 50 and 30 KiB more each reading.
  auto totals = query(r->db(), "SELECT nvlink_tx_bytes, nvlink_rx_bytes FROM gpu_samples ORDER BY tick");
  ASSERT_EQ(totals.size(), rates.size());
  EXPECT_GE(std::stoll(totals[0][0].value_or("0")), 1'000'000LL * 1024);
  for (size_t i = 1; i < totals.size(); ++i) {
    EXPECT_EQ(std::stoll(totals[i][0].value_or("0")) - std::stoll(totals[i - 1][0].value_or("0")), 50 * 1024) << i;
    EXPECT_EQ(std::stoll(totals[i][1].value_or("0")) - std::stoll(totals[i - 1][1].value_or("0")), 30 * 1024) << i;
  }
  // No MIG on this GPU: its mode answers NOT_SUPPORTED, so missing.
  EXPECT_EQ(scalar(r->db(), "SELECT count(mig_mode) FROM gpu_samples"), "0");
}

TEST(NvmlHealth, UnsupportedCountersAreMissingAndProbedOnce) {
  const json scen = {{"devices", {device(base_metrics())}}};
  auto r = run_with(scen, {"run", "--interval", "100ms", "--db", "w.db", "--", "sleep", "1.3"});
  ASSERT_EQ(r->result.exit_code, 0) << r->result.err;
  EXPECT_GE(std::stoi(scalar(r->db(), "SELECT count(*) FROM gpu_samples")), 5);
  for (const char* col :
       {"ecc_corrected_errors", "ecc_uncorrected_errors", "remapped_rows_correctable", "remapped_rows_uncorrectable",
        "remap_pending", "remap_failed", "pcie_replays", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s",
        "nvlink_tx_bytes", "nvlink_rx_bytes", "throttle_power_s", "throttle_thermal_s", "mig_mode"})
    EXPECT_EQ(scalar(r->db(), std::string("SELECT count(") + col + ") FROM gpu_samples"), "0") << col;
  // Asked once, answered NOT_SUPPORTED, never again.
  EXPECT_EQ(calls_of(r->calls, "nvmlDeviceGetTotalEccErrors"), 1);
  EXPECT_EQ(calls_of(r->calls, "nvmlDeviceGetRemappedRows"), 1);
  EXPECT_EQ(calls_of(r->calls, "nvmlDeviceGetPcieReplayCounter"), 1);
  EXPECT_EQ(calls_of(r->calls, "nvmlDeviceGetViolationStatus"), 2); // power and thermal, once each
}

TEST(NvmlHealth, XidErrorsBecomeEventsRows) {
  json d0 = device(base_metrics());
  d0["xid"] = {{{"after_s", 0.2}, {"xid", 79}},
               {{"after_s", 0.5}, {"xid", 48}, {"gpu_instance", 2}, {"compute_instance", 0}}};
  json d1 = device(base_metrics(), "GPU-health-1");
  d1["pci_bus_id"] = "00000000:5E:00.0";
  d1["unsupported"] = {"xid"}; // registering answers NOT_SUPPORTED: that GPU's Xids are not watched, the other's are
  const json scen = {{"devices", {d0, d1}}};
  auto r = run_with(scen, {"run", "--interval", "100ms", "--db", "w.db", "--", "sleep", "1.2"});
  ASSERT_EQ(r->result.exit_code, 0) << r->result.err;
  auto rows = query(r->db(), "SELECT kind, source, detail, ts_ms FROM events WHERE kind = 'xid' ORDER BY seq");
  ASSERT_EQ(rows.size(), 2u) << r->result.err;
  EXPECT_EQ(rows[0][1], "gpu0");
  EXPECT_EQ(rows[0][2].value_or("").rfind("Xid 79 on NVIDIA GPU 0 (GPU-health-0)", 0), 0u) << *rows[0][2];
  EXPECT_EQ(rows[1][2].value_or(""), "Xid 48 on NVIDIA GPU 0 (GPU-health-0), MIG GPU instance 2 compute instance 0");
  EXPECT_LE(std::stoll(*rows[0][3]), std::stoll(*rows[1][3]));
  EXPECT_NE(r->result.err.find("Xid 79 on NVIDIA GPU 0"), std::string::npos) << r->result.err;
  EXPECT_EQ(calls_of(r->calls, "nvmlEventSetFree"), 1) << "the set is freed at the end";
}

// In-process: the ticks' polls deliver Xid events into frames, and the source goes at once.
TEST(NvmlHealth, XidEventsArePolledAndTheSourceStopsAtOnce) {
  TempDir dir;
  json d0 = device(base_metrics());
  d0["xid"] = {{{"after_s", 0.05}, {"xid", 13}}};
  write_file(dir / "scenario.json", json{{"devices", {d0}}}.dump());
  ASSERT_EQ(setenv("WATTSCOPE_FAKE_NVML_SCENARIO", (dir / "scenario.json").c_str(), 1), 0);
  for (int round = 0; round < 3; ++round) { // open and close again: a second event set on a fresh nvmlInit
    SCOPED_TRACE(round);
    auto opts = wattscope::NvmlSource::Options{};
    opts.library_path = fake_nvml();
    opts.event_poll = 200ms;
    auto src = std::make_unique<wattscope::NvmlSource>(opts);
    ASSERT_TRUE(src->open()) << src->status().line();
    EXPECT_TRUE(src->watches_xid());
    bool seen = false;
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!seen && std::chrono::steady_clock::now() < until) {
      wattscope::Frame f;
      f.mono = wattscope::SteadyClock::now();
      src->sample(f);
      for (const auto& e : f.events)
        seen = seen || (e.kind == "xid" && e.detail.rfind("Xid 13 on NVIDIA GPU 0", 0) == 0);
      std::this_thread::sleep_for(20ms);
    }
    EXPECT_TRUE(seen);
    const auto t0 = std::chrono::steady_clock::now();
    src.reset(); // frees the set, shuts NVML down: nothing waits in nvmlEventSetWait
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
  }
  unsetenv("WATTSCOPE_FAKE_NVML_SCENARIO");
}

TEST(NvmlHealth, EventWaitThatKeepsFailingGivesUpWithoutSpinning) {
  json d0 = device(base_metrics());
  const json scen = {{"devices", {d0}}, {"event_wait_error", 999}};
  auto r = run_with(scen, {"run", "--interval", "100ms", "--db", "w.db", "--", "sleep", "0.8"});
  ASSERT_EQ(r->result.exit_code, 0) << r->result.err;
  // One poll per event_poll (250 ms), failing or not, not a busy loop: a handful of calls in 0.8 s.
  EXPECT_LE(calls_of(r->calls, "nvmlEventSetWait_v2"), 10);
  EXPECT_GE(calls_of(r->calls, "nvmlEventSetWait_v2"), 1);
}

// ---- MIG ----

namespace {
json mig_device(const std::string& neighbour_pid_file, const std::string& worker_pid_file) {
  json d = device(base_metrics(), "GPU-mig-parent");
  d["processes"] = {{{"pid_file", neighbour_pid_file}, {"sm", 40}, {"mem_bytes", 3LL << 30}},
                    {{"pid_file", worker_pid_file}, {"sm", 40}, {"mem_bytes", 2LL << 30}}};
  d["mig"] = {{{"uuid", "MIG-aaaa-1111"},
               {"gpu_instance", 1},
               {"compute_instance", 0},
               {"metrics", {{"mem_used_bytes", 3LL << 30}, {"mem_total_bytes", 20LL << 30}}},
               {"processes", {{{"pid_file", neighbour_pid_file}, {"mem_bytes", 3LL << 30}}}}},
              {{"uuid", "MIG-bbbb-2222"},
               {"gpu_instance", 2},
               {"compute_instance", 0},
               {"metrics", {{"mem_used_bytes", 2LL << 30}, {"mem_total_bytes", 40LL << 30}}},
               {"processes", {{{"pid_file", worker_pid_file}, {"mem_bytes", 2LL << 30}}}}}};
  return d;
}
} // namespace

// CUDA_VISIBLE_DEVICES=MIG-… records the parent GPU and counts only that instance's processes; the same run with
// the whole GPU selected counts the neighbour in the other instance as `other` (the control: the test can fail).
TEST(NvmlMig, MigUuidSelectionScopesAttributionToTheInstance) {
  for (const bool scoped : {true, false}) {
    SCOPED_TRACE(scoped ? "CUDA_VISIBLE_DEVICES=MIG-bbbb" : "--gpus all");
    TempDir dir;
    const int neighbour = start({"/bin/sleep", "30"}, {}, dir.path(), dir / "n.out", dir / "n.err");
    write_file(dir / "n.pid", std::to_string(neighbour));
    write_file(dir / "scenario.json", json{{"devices", {mig_device(dir / "n.pid", dir / "w.pid")}}}.dump());
    std::vector<std::string> args = {wstest::wattscope(), "run", "--interval", "200ms", "--db", dir / "w.db"};
    if (!scoped) args.insert(args.end(), {"--gpus", "all"});
    args.insert(args.end(), {"--", "/bin/sh", "-c", "sleep 2.4 & echo $! > w.pid; wait"});
    Result r = run(args,
                   {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                    {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                    {"CUDA_VISIBLE_DEVICES", scoped ? "MIG-bbbb" : "\x01"}},
                   dir.path());
    ::kill(neighbour, SIGTERM);
    wait_exit(neighbour);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    Result show = run({wstest::wattscope(), "show", "--db", dir / "w.db", "--json"});
    ASSERT_EQ(show.exit_code, 0) << show.err;
    const json j = json::parse(show.out);
    ASSERT_EQ(j["gpus"].size(), 1u);
    const json& g0 = j["attribution"]["devices"]["gpu0"];
    EXPECT_GT(g0["attributed_j"].get<double>(), 0) << j["attribution"].dump(2);
    const std::string neighbour_rows =
        scalar(dir / "w.db", "SELECT count(*) FROM process_gpu_samples WHERE pid = " + std::to_string(neighbour));
    if (scoped) {
      EXPECT_EQ(g0["other_j"].get<double>(), 0) << "the other instance's process is not this run's neighbour";
      EXPECT_EQ(neighbour_rows, "0");
      // Show says the instances and that energy is per GPU.
      Result text = run({wstest::wattscope(), "show", "--db", dir / "w.db"});
      EXPECT_NE(text.out.find("MIG       gpu0 GI 1 CI 0 MIG-aaaa-1111; gpu0 GI 2 CI 0 MIG-bbbb-2222 (selected)"),
                std::string::npos)
          << text.out;
      EXPECT_NE(text.out.find("energy and power are per GPU"), std::string::npos) << text.out;
    } else {
      EXPECT_GT(g0["other_j"].get<double>(), 0) << "the whole GPU: the neighbour's share is someone else's";
      EXPECT_NE(neighbour_rows, "0");
    }
    EXPECT_EQ(scalar(dir / "w.db", "SELECT min(mig_mode) || max(mig_mode) FROM gpu_samples"), "11");
  }
}

std::string metric_line(const std::string& metrics, const std::string& prefix) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return line;
  return "";
}

// /metrics: the instances as wattscope_gpu_mig_* with gpu_instance labels, the health families, pci_bus_id.
TEST(NvmlMig, MetricsShowInstancesHealthAndPciBusId) {
  TempDir dir;
  json d = mig_device(dir / "none.pid", dir / "none2.pid");
  d["metrics"] = health_metrics();
  write_file(dir / "scenario.json", json{{"devices", {d}}}.dump());
  const int pid = start({wstest::wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "100ms"},
                        {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                         {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
                         {"CUDA_VISIBLE_DEVICES", "\x01"}},
                        dir.path(), dir / "out", dir / "err");
  const int port = wait_for_serve_port(dir / "err", 100);
  ASSERT_GT(port, 0) << read_file(dir / "err");
  // The slow thread reads the instances once a second: wait for their memory.
  std::string body;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until) {
    body = http::get(port, "/metrics", {}, 5s).body;
    if (body.find("wattscope_gpu_mig_memory_used_bytes{") != std::string::npos &&
        body.find("wattscope_gpu_nvlink_transmit_bytes_total{") != std::string::npos)
      break;
    std::this_thread::sleep_for(200ms);
  }
  kill(pid, SIGKILL);
  wait_exit(pid);
  const std::string inst2 = "gpu=\"0\",uuid=\"GPU-mig-parent\",gpu_instance=\"2\",compute_instance=\"0\","
                            "mig_uuid=\"MIG-bbbb-2222\",host=\"";
  EXPECT_NE(metric_line(body, "wattscope_gpu_mig_memory_used_bytes{" + inst2).find("} 2147483648"), std::string::npos)
      << body;
  EXPECT_NE(metric_line(body, "wattscope_gpu_mig_memory_total_bytes{" + inst2).find("} 42949672960"), std::string::npos)
      << body;
  EXPECT_NE(metric_line(body, "wattscope_gpu_mig_instance_info{" + inst2).find("selected=\"false\"} 1"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("wattscope_gpu_mig_processes{gpu=\"0\""), std::string::npos) << body;
  EXPECT_NE(body.find("# TYPE wattscope_gpu_mig_memory_used_bytes gauge"), std::string::npos);
  // The parent's series carry its bus id; its MIG mode and health families are there.
  const std::string power = metric_line(body, "wattscope_gpu_power_watts{");
  EXPECT_NE(power.find(",pci_bus_id=\"00000000:3B:00.0\""), std::string::npos) << power;
  EXPECT_NE(metric_line(body, "wattscope_gpu_up{").find(",pci_bus_id=\"00000000:3B:00.0\""), std::string::npos);
  EXPECT_NE(metric_line(body, "wattscope_gpu_mig_mode{").find("} 1"), std::string::npos) << body;
  for (const char* family :
       {"# TYPE wattscope_gpu_ecc_errors_total counter", "# TYPE wattscope_gpu_remapped_rows gauge",
        "# TYPE wattscope_gpu_pcie_replays_total counter", "# TYPE wattscope_gpu_throttle_seconds_total counter",
        "# TYPE wattscope_gpu_nvlink_transmit_bytes_total counter",
        "# TYPE wattscope_gpu_nvlink_receive_bytes_total counter"})
    EXPECT_NE(body.find(family), std::string::npos) << family;
  // NVLink as NVML's counter in bytes (rate() sees every byte), not the last tick's rate (one tick of each scrape's
  // window); the per-tick rate stays in the store for the report.
  EXPECT_EQ(body.find("nvlink_transmit_bytes_per_second"), std::string::npos) << body;
  const std::string tx = metric_line(body, "wattscope_gpu_nvlink_transmit_bytes_total{");
  ASSERT_FALSE(tx.empty());
  const double tx_bytes = std::stod(tx.substr(tx.rfind(' ') + 1));
  EXPECT_GE(tx_bytes, 1'000'000.0 * 1024) << tx << ": the fake counts from 1,000,000 KiB";
  EXPECT_EQ(std::fmod(tx_bytes, 1024.0), 0.0) << tx;
  EXPECT_NE(body.find("error=\"corrected\"}"), std::string::npos);
  EXPECT_NE(body.find("reason=\"thermal\"}"), std::string::npos);
  // Power has no per-instance series: NVML measures it per GPU.
  EXPECT_EQ(body.find("wattscope_gpu_power_watts{gpu=\"0\",uuid=\"GPU-mig-parent\",gpu_instance"), std::string::npos);
}
} // namespace e2e_nvml_health
