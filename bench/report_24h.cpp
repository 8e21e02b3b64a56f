// The report of a long run, as a user makes it: 24 h of 8 GPUs at 1 s (691,200 gpu_samples rows), 8 training
// processes scanned every 5 s with their attributed energy, hourly epochs with work. Prints the time of write_report,
// the table scans it issues (statements), the rows it reads and the process's peak RSS, so that one binary built from
// two commits compares two versions of the read side (docs/performance.md):
//   wattscope_bench_report_24h build DB [HOURS [INTERVAL_MS]]  # once, not timed (default 24 h at 1000 ms)
//   wattscope_bench_report_24h report DB OUT
// bench/read_memory.py builds runs of other lengths with it and times every view of them through the binary.
// The source uses only interfaces both sides of the run-model redesign have (write_report, the SQLite store).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/schema.hpp"
#include "report/report.hpp"
#include "sinks/sqlite/sqlite_store.hpp"

using namespace wattscope;
namespace fs = std::filesystem;

namespace {

int64_t g_step_ms = 1000;       // the sampling interval
int64_t g_ticks = 24 * 3600;    // the run's length in ticks
int64_t ticks_per(int64_t ms) { // ticks in `ms` of the run, at least one
  return std::max<int64_t>(1, ms / g_step_ms);
}
constexpr int kGpus = 8;
constexpr int64_t kStartMs = 1795262400000;

// Counts what the read side asks of the store: one scan is one statement (SQL) or one file pass (CSV).
class CountingReader final : public StoreReader {
public:
  explicit CountingReader(std::unique_ptr<StoreReader> inner) : inner_(std::move(inner)) {}
  std::string describe() const override { return inner_->describe(); }
  std::vector<RunInfo> runs() override { return inner_->runs(); }
  void scan(TableId table, const RunInfo& run, const RowFn& fn) override {
    ++scans;
    inner_->scan(table, run, [&](std::span<const Value> row) {
      ++rows;
      fn(row);
    });
  }
  int64_t scans = 0, rows = 0;

private:
  std::unique_ptr<StoreReader> inner_;
};

Frame frame_at(int64_t t, const std::vector<GpuDevice>& devs) {
  Frame f;
  f.tick = t;
  f.ts_ms = kStartMs + t * g_step_ms;
  const double t_s = static_cast<double>(t * g_step_ms) / 1000;
  // the last 5 min of each hour: an evaluation pass at lower power
  const bool eval = (t % ticks_per(3600 * 1000)) >= ticks_per(3300 * 1000);
  for (const auto& d : devs) {
    GpuSample g;
    g.gpu_index = d.gpu_index;
    const double phase = t_s / 60.0 + d.gpu_index;
    g.power_w = (eval ? 300 : 620) + 40 * std::sin(phase);
    g.energy_j = t_s * (eval ? 300 : 620);
    g.util_gpu_pct = eval ? 40 : 97 + 2 * std::sin(phase);
    g.mem_used_bytes = int64_t{60} << 30;
    g.mem_total_bytes = int64_t{80} << 30;
    g.temp_gpu_c = 65 + 5 * std::sin(phase / 10);
    g.clock_sm_mhz = 1980;
    g.power_limit_w = 700;
    f.gpus.push_back(g);
  }
  f.cpu.util_pct = 35 + 10 * std::sin(t_s / 300.0);
  f.cpu.package_energy_j = t_s * 180;
  if (t % ticks_per(5000) == 0) { // a process scan: 8 ranks, one per GPU
    auto snap = std::make_shared<ProcessSnapshot>();
    snap->window_s = 5;
    for (int p = 0; p < kGpus; ++p) {
      ProcessSample s;
      s.id = {1000 + p, 42};
      s.comm = "python3";
      s.in_run = s.sampled = true;
      s.cpu_pct = 100;
      s.rss_bytes = int64_t{12} << 30;
      s.cpu_energy_j = t_s * 20;
      snap->procs.push_back(s);
      GpuProcessSample g;
      g.id = s.id;
      g.gpu_index = p;
      g.in_run = true;
      g.mem_used_bytes = int64_t{58} << 30;
      g.energy_j = t_s * 600;
      snap->gpu_procs.push_back(g);
      if (t == 0) snap->rows.push_back({s.id, 1, "python3", "python3 train.py", 0, "", "", 0, std::nullopt});
    }
    f.processes = std::move(snap);
  }
  return f;
}

int build(const std::string& db) {
  std::vector<GpuDevice> devs(kGpus);
  for (int i = 0; i < kGpus; ++i) {
    devs[i].gpu_index = i;
    devs[i].uuid = "GPU-5f8a2c1e-0000-0000-0000-00000000000" + std::to_string(i);
    devs[i].name = "NVIDIA H100 80GB HBM3";
    devs[i].power_limit_w = 700;
  }
  RunInfo run;
  run.start_ms = kStartMs;
  run.run_id = new_run_id(run.start_ms);
  run.task = "train-24h";
  run.interval_ms = static_cast<double>(g_step_ms);
  auto sink = make_sqlite_sink(db);
  sink->begin_run(run);
  RowBatch batch;
  const int64_t hour = ticks_per(3600 * 1000);
  for (int64_t t = 0; t < g_ticks; ++t) {
    Frame f = frame_at(t, devs);
    if (t == 0) f.device_rows = devs;
    if (t % hour == 0) {
      PhaseRecord p; // hourly epochs, each closed an hour later with the energy of its hour
      p.phase_id = t / hour;
      p.name = "epoch";
      p.index = t / hour;
      p.start_ms = f.ts_ms;
      p.end_ms = f.ts_ms + 3600 * 1000;
      p.start_tick = t;
      p.end_tick = t + hour;
      p.energy_j = 3600.0 * 8 * 590;
      p.energy_method = "counter";
      f.phases.push_back(p);
      f.work.push_back({t / hour, f.ts_ms, 1.2e6, "samples", p.phase_id, std::nullopt});
    }
    append_frame_rows(run.run_id, f, batch);
    if (batch.sample_rows() >= 20000) {
      sink->write(batch);
      batch.clear();
    }
  }
  sink->write(batch);
  run.end_ms = kStartMs + g_ticks * g_step_ms;
  run.samples = g_ticks;
  run.exit_status = 0;
  sink->end_run(run);
  std::printf("built %s: %lld ticks of %lld ms x %d GPUs\n", db.c_str(), static_cast<long long>(g_ticks),
              static_cast<long long>(g_step_ms), kGpus);
  return 0;
}

int report(const std::string& db, const std::string& out) {
  CountingReader reader(make_sqlite_reader(db));
  const auto runs = reader.runs();
  const auto t0 = std::chrono::steady_clock::now();
  write_report(reader, runs, ReportOptions{}, out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("report_24h_8gpu  time_s %.2f  scans %lld  rows_read %lld  peak_rss_MiB %.0f  file_MB %.1f\n", s,
              static_cast<long long>(reader.scans), static_cast<long long>(reader.rows),
              static_cast<double>(ru.ru_maxrss) / 1024.0, static_cast<double>(fs::file_size(out)) / 1e6);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "build" && argc >= 3 && argc <= 5) {
    const double hours = argc > 3 ? std::atof(argv[3]) : 24;
    if (argc > 4) g_step_ms = std::atoll(argv[4]);
    if (!(hours > 0 && hours <= 24 * 366) || g_step_ms < 1 || g_step_ms > 3600 * 1000) {
      std::fprintf(stderr, "build: HOURS in (0, 8784] and INTERVAL_MS in [1, 3600000]\n");
      return 2;
    }
    g_ticks = static_cast<int64_t>(hours * 3600 * 1000) / g_step_ms;
    return build(argv[2]);
  }
  if (mode == "report" && argc == 4) return report(argv[2], argv[3]);
  std::fprintf(stderr, "usage: %s build DB [HOURS [INTERVAL_MS]] | report DB OUT.html\n", argv[0]);
  return 2;
}
