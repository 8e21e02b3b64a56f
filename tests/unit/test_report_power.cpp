// The report's "Power by process" chart is in watts (issue 29): each process's attributed energy between two scans over
// the time between them, averaged over display cells by time, never divided by a width it does not fill. The runs here
// go through the real accounting (the attribution of each tick's counter energy by the scan's SM shares) into a real
// SQLite store, and the report's data is read back from it; the powers are known, so the chart's values are too.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "../support/support.hpp"
#include "accounting/accounting.hpp"
#include "report/report.hpp"
#include "sinks/sqlite/sqlite_store.hpp"

namespace unit_report_power { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wstest;
using json = nlohmann::json;

namespace {

struct Worker {
  int64_t pid;
  double sm_pct; // its share of the GPU is sm_pct over the sum of all workers'
};

struct RunSpec {
  double tick_s = 0.1;                    // sampling interval
  int ticks_per_scan = 10;                // a process scan every this many ticks
  int scans = 6;                          // the run is this many scan intervals long
  std::function<double(double)> power_w;  // the GPU's power at time t (s since run start)
  std::function<double(double)> energy_j; // its exact integral from 0 to t
  std::vector<Worker> workers = {{4242, 50}};
  std::optional<double> cpu_w; // a CPU package at this constant power (all of it busy in the workers)
  // Each worker's memory on GPU 0 at scan k (1-based), and what it also holds on GPU 1 (0: nothing there).
  std::function<int64_t(int)> gpu0_mem_bytes = [](int) { return int64_t{1} << 30; };
  int64_t gpu1_mem_bytes = 0;
};

// Records a run as the pipeline would (accounting fills the scans' energy; the rows go to SQLite) and returns the
// report's data for it.
json report_of(const TempDir& dir, const RunSpec& spec, size_t buckets = 1000) {
  GpuDevice dev;
  dev.gpu_index = 0;
  dev.vendor = "nvidia";
  dev.uuid = "GPU-report-power";
  dev.name = "NVIDIA H100";
  std::vector<GpuDevice> devs = {dev};
  Accounting acc(devs);
  RunInfo run;
  run.start_ms = 1795262609000;
  run.run_id = new_run_id(run.start_ms);
  run.task = "report-power";
  run.command = "python train.py";
  run.interval_ms = spec.tick_s * 1000;
  run.version = "test";
  auto sink = make_sqlite_sink(dir / "w.db");
  sink->begin_run(run);
  RowBatch batch;
  const int ticks = spec.ticks_per_scan * spec.scans;
  const auto mono0 = SteadyClock::now();
  for (int k = 0; k <= ticks; ++k) {
    const double t = k * spec.tick_s;
    Frame f;
    f.tick = k;
    f.ts_ms = run.start_ms + static_cast<int64_t>(std::llround(t * 1000));
    f.mono = mono0 + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(t));
    GpuSample g;
    g.gpu_index = 0;
    g.power_w = spec.power_w(t);
    g.util_gpu_pct = 90;
    g.energy_counter_uj = static_cast<int64_t>(std::llround(spec.energy_j(t) * 1e6));
    f.gpus.push_back(g);
    if (spec.cpu_w) {
      f.cpu.package_energy_j = *spec.cpu_w * t;
      f.cpu.package_power_w = *spec.cpu_w;
      f.cpu.power_method = "counter";
    }
    if (k > 0 && k % spec.ticks_per_scan == 0) {
      auto snap = std::make_shared<ProcessSnapshot>();
      snap->run_mode = true;
      const double window = spec.ticks_per_scan * spec.tick_s;
      snap->window_s = window;
      snap->cpu_total_s = window;
      snap->cpu_busy_s = window;
      snap->gpus_listed = {0};
      for (const auto& w : spec.workers) {
        ProcessSample p;
        p.id = {w.pid, 1000 + w.pid};
        p.comm = "worker" + std::to_string(w.pid);
        p.in_run = true;
        p.sampled = true;
        p.cpu_time_s = window / static_cast<double>(spec.workers.size());
        snap->procs.push_back(p);
        GpuProcessSample gp;
        gp.id = p.id;
        gp.in_run = true;
        gp.sm_pct = w.sm_pct;
        gp.mem_used_bytes = spec.gpu0_mem_bytes(k / spec.ticks_per_scan);
        snap->gpu_procs.push_back(gp);
        if (spec.gpu1_mem_bytes > 0) {
          GpuProcessSample on1;
          on1.id = p.id;
          on1.gpu_index = 1;
          on1.in_run = true;
          on1.mem_used_bytes = spec.gpu1_mem_bytes;
          snap->gpu_procs.push_back(on1);
        }
        if (k == spec.ticks_per_scan) {
          ProcessRow r;
          r.id = p.id;
          r.comm = p.comm;
          snap->rows.push_back(r);
        }
      }
      f.processes = snap;
    }
    acc.process(f);
    append_frame_rows(run.run_id, f, batch);
  }
  sink->write(batch);
  const RunSummary s = acc.summary();
  run.end_ms = run.start_ms + static_cast<int64_t>(std::llround(ticks * spec.tick_s * 1000));
  run.exit_status = 0;
  run.samples = s.samples;
  run.total_energy_j = s.total_energy_j();
  run.summary = s.to_json().dump();
  sink->end_run(run);
  sink.reset();
  auto reader = make_sqlite_reader(dir / "w.db");
  ReportOptions opts;
  opts.buckets = buckets;
  const json data = build_report_data(*reader, reader->runs(), opts);
  return data["runs"][0]["processes"];
}

// The stacked value at each point: the sum over the chart's series.
std::vector<double> stacked(const json& power) {
  std::vector<double> sum(power["t"].size(), 0.0);
  for (const auto& s : power["series"])
    for (size_t i = 0; i < sum.size(); ++i)
      sum[i] += s["y"][i].get<double>();
  return sum;
}

const json& series_named(const json& power, const std::string& prefix) {
  for (const auto& s : power["series"])
    if (s["name"].get<std::string>().rfind(prefix, 0) == 0) return s;
  static const json none;
  ADD_FAILURE() << "no series " << prefix << " in " << power.dump();
  return none;
}

// A cell is "inside" when its middle is past the first scan: the first scan's step carries only the tick that adopted
// it (what came before the first scan is unattributed), spread over the time since the run's start.
bool inside(const json& power, size_t i, double first_scan_s) {
  return power["t"][i].get<double>() > first_scan_s;
}

} // namespace

TEST(ReportPowerByProcess, ShortRunAtConstantPowerIsThatPowerInWatts) {
  TempDir dir;
  RunSpec spec; // 6 scans, one a second, 250 W: today's chart divided each scan's 250 J by a 12 ms bucket (20.8 kW)
  spec.power_w = [](double) { return 250.0; };
  spec.energy_j = [](double t) { return 250.0 * t; };
  const json P = report_of(dir, spec);
  ASSERT_TRUE(P.is_object());
  const json& power = P["power"];
  const auto sum = stacked(power);
  size_t checked = 0;
  for (size_t i = 0; i < sum.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_LE(sum[i], 250.0 * 1.001) << "never more than the device drew";
    if (!inside(power, i, 1.0) || sum[i] == 0) continue; // (today's chart: 0 between the buckets with a scan)
    EXPECT_NEAR(sum[i], 250.0, 0.25);
    ++checked;
  }
  EXPECT_EQ(checked, 5u);
  EXPECT_EQ(power["cells"], "scan intervals");
  EXPECT_NEAR(power["step_s"].get<double>(), 1.0, 1e-9);
  EXPECT_EQ(power["t"].size(), 6u) << power.dump(); // [0, 1], [1, 2] ... [5, 6]: one step per scan interval
  EXPECT_EQ(power["edges"].size(), 7u);
}

TEST(ReportPowerByProcess, SharesStackToTheDevicePowerAndAreaToTheTablesEnergy) {
  TempDir dir;
  RunSpec spec;
  spec.scans = 8;
  spec.workers = {{11, 60}, {12, 20}}; // 3:1
  spec.power_w = [](double) { return 400.0; };
  spec.energy_j = [](double t) { return 400.0 * t; };
  spec.cpu_w = 40.0; // busy in both workers alike: 20 W each
  const json P = report_of(dir, spec);
  const json& power = P["power"];
  const json& a = series_named(power, "worker11");
  const json& b = series_named(power, "worker12");
  const auto sum = stacked(power);
  for (size_t i = 0; i < sum.size(); ++i) {
    if (!inside(power, i, 1.0)) continue;
    SCOPED_TRACE(i);
    EXPECT_NEAR(a["y"][i].get<double>(), 300.0 + 20.0, 0.1);
    EXPECT_NEAR(b["y"][i].get<double>(), 100.0 + 20.0, 0.1);
    EXPECT_NEAR(sum[i], 440.0, 0.2); // the GPU and the CPU, all of it attributed
  }
  // The areas (each value times its cell's width) are the table's energy.
  double area = 0, table = 0;
  for (const auto& s : power["series"])
    for (size_t i = 0; i < sum.size(); ++i)
      area += s["y"][i].get<double>() * (power["edges"][i + 1].get<double>() - power["edges"][i].get<double>());
  for (const auto& p : P["table"])
    table += p["cpu_energy_j"].get<double>() + p["gpu_energy_j"].get<double>();
  EXPECT_NEAR(area, table, 1e-3 * table);
}

TEST(ReportPowerByProcess, LongRunIsAveragedOverTimeNotOverBuckets) {
  TempDir dir;
  // 1,200 scans a second apart into 500 cells of 2.4 s: today's buckets held 2 or 3 scans' energy and showed 208 W
  // and 312 W for a constant 260 W.
  RunSpec spec;
  spec.tick_s = 1.0;
  spec.ticks_per_scan = 1;
  spec.scans = 1200;
  spec.power_w = [](double) { return 260.0; };
  spec.energy_j = [](double t) { return 260.0 * t; };
  const json P = report_of(dir, spec);
  const json& power = P["power"];
  const auto sum = stacked(power);
  for (size_t i = 0; i < sum.size(); ++i) {
    if (!inside(power, i, 1.0)) continue;
    SCOPED_TRACE(i);
    EXPECT_NEAR(sum[i], 260.0, 0.1);
  }
  EXPECT_EQ(power["cells"], "equal cells");
  EXPECT_EQ(power["t"].size(), 500u);
  EXPECT_NEAR(power["step_s"].get<double>(), 2.4, 1e-9);
}

TEST(ReportPowerByProcess, AStepInPowerIsAveragedByTheTimeOnEachSide) {
  TempDir dir;
  // 100 W, then 400 W from t = 600.5 s: the step falls inside a scan interval (the counter's energy over [600, 601]
  // is 250 J) and inside the 2.4 s cell [600, 602.4], whose mean is (250 + 400 + 0.4 * 400) J / 2.4 s = 337.5 W.
  RunSpec spec;
  spec.tick_s = 1.0;
  spec.ticks_per_scan = 1;
  spec.scans = 1200;
  spec.power_w = [](double t) { return t < 600.5 ? 100.0 : 400.0; };
  spec.energy_j = [](double t) { return t < 600.5 ? 100.0 * t : 100.0 * 600.5 + 400.0 * (t - 600.5); };
  const json P = report_of(dir, spec);
  const json& power = P["power"];
  const auto sum = stacked(power);
  for (size_t i = 0; i < sum.size(); ++i) {
    if (!inside(power, i, 1.0)) continue;
    const double e0 = power["edges"][i].get<double>(), e1 = power["edges"][i + 1].get<double>();
    // The truth at the scans' resolution: each scan interval's mean power, averaged over the cell by time.
    double truth = 0;
    for (double s = std::floor(e0); s < e1; s += 1.0) {
      const double overlap = std::min(e1, s + 1) - std::max(e0, s);
      if (overlap > 0) truth += (spec.energy_j(s + 1) - spec.energy_j(s)) * overlap;
    }
    truth /= e1 - e0;
    SCOPED_TRACE(i);
    EXPECT_NEAR(sum[i], truth, 1e-3 * truth);
  }
  EXPECT_NEAR(sum[100], 100.0, 0.1);
  EXPECT_NEAR(sum[250], 337.5, 0.1); // [600, 602.4]
  EXPECT_NEAR(sum[400], 400.0, 0.4);
}

TEST(ReportPowerByProcess, CpuEnergyOfARunWithoutCpuPowerIsNullNotZero) {
  TempDir dir;
  RunSpec spec;
  spec.power_w = [](double) { return 100.0; };
  spec.energy_j = [](double t) { return 100.0 * t; };
  const json P = report_of(dir, spec); // no CPU power at all
  ASSERT_FALSE(P["table"].empty());
  for (const auto& p : P["table"]) {
    EXPECT_TRUE(p["cpu_energy_j"].is_null()) << p.dump();
    EXPECT_GT(p["gpu_energy_j"].get<double>(), 0);
  }
}

// A process's peak GPU memory is the most it held on every GPU together at one scan, over a long run's scans.
TEST(ReportProcesses, PeakGpuMemoryIsTheMostAtOneScanOnEveryGpuTogether) {
  TempDir dir;
  RunSpec spec;
  spec.scans = 200;
  spec.power_w = [](double) { return 250.0; };
  spec.energy_j = [](double t) { return 250.0 * t; };
  // Rises to its most at scan 120, then falls: the peak is neither the first nor the last scan's.
  spec.gpu0_mem_bytes = [](int k) { return (int64_t{1} << 30) + (int64_t{1} << 20) * (120 - std::abs(k - 120)); };
  spec.gpu1_mem_bytes = int64_t{3} << 30;
  const json P = report_of(dir, spec);
  ASSERT_EQ(P["table"].size(), 1u);
  EXPECT_EQ(P["table"][0]["peak_gpu_mem_bytes"].get<int64_t>(), (int64_t{4} << 30) + (int64_t{120} << 20));
}

} // namespace unit_report_power
