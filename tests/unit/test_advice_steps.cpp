// Reading a long run's advice in bounded memory: past InputBuilder::kMaxPoints samples a series, the advice reads the
// run in steps (each the mean of its samples). The runs here are written to a real SQLite store through the sink and
// read back through the run model, as `advise` reads them; their powers are known, so the idle energy is too.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>

#include "../support/support.hpp"
#include "advice/advice_input.hpp"
#include "report/report.hpp"
#include "runs/run_model.hpp"
#include "sinks/sqlite/sqlite_store.hpp"

namespace unit_advice_steps { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wstest;

namespace {

constexpr double kBusyW = 300, kIdleW = 60, kCpuW = 50;

// Two GPUs for `seconds` at `tick_s`: GPU 0 busy until `busy_until_s`, then idle; GPU 1 busy throughout. Each GPU's
// counter is its power's exact integral; the CPU package reads kCpuW.
RunInfo record(const TempDir& dir, double tick_s, double seconds, double busy_until_s) {
  std::vector<GpuDevice> devs(2);
  for (int i = 0; i < 2; ++i) {
    devs[i].gpu_index = i;
    devs[i].vendor = "nvidia";
    devs[i].uuid = "GPU-steps-" + std::to_string(i);
    devs[i].name = "NVIDIA H100";
    devs[i].mem_total_bytes = 80LL << 30;
  }
  RunInfo run;
  run.start_ms = 1795262609000;
  run.run_id = new_run_id(run.start_ms);
  run.task = "advice-steps";
  run.interval_ms = tick_s * 1000;
  run.version = "test";
  auto sink = make_sqlite_sink(dir / "w.db");
  sink->begin_run(run);
  const auto ticks = static_cast<int64_t>(std::llround(seconds / tick_s));
  RowBatch batch;
  for (int64_t k = 0; k <= ticks; ++k) {
    const double t = static_cast<double>(k) * tick_s;
    Frame f;
    f.tick = k;
    f.ts_ms = run.start_ms + std::llround(t * 1000);
    for (int i = 0; i < 2; ++i) {
      const bool idle = i == 0 && t > busy_until_s + 1e-9;
      GpuSample g;
      g.gpu_index = i;
      g.power_w = idle ? kIdleW : kBusyW;
      g.energy_j = i == 0 && t > busy_until_s ? kBusyW * busy_until_s + kIdleW * (t - busy_until_s) : kBusyW * t;
      g.util_gpu_pct = idle ? 0 : 95;
      g.mem_used_bytes = 40LL << 30;
      f.gpus.push_back(g);
    }
    f.cpu.util_pct = 20;
    f.cpu.package_energy_j = kCpuW * t;
    append_frame_rows(run.run_id, f, batch);
    if (batch.sample_rows() >= 20000) {
      sink->write(batch);
      batch.clear();
    }
  }
  sink->write(batch);
  run.end_ms = run.start_ms + std::llround(seconds * 1000);
  run.exit_status = 0;
  run.samples = ticks + 1;
  sink->end_run(run);
  return run;
}

double idle_energy_j(const RunModel& m) {
  for (const auto& item : *m.advice)
    if (item.kind == "idle_gpu") return item.evidence["idle_energy_j"].get<double>();
  ADD_FAILURE() << "no idle_gpu item";
  return 0;
}

} // namespace

TEST(AdviceSteps, ARunOfFewSamplesIsReadSampleBySampleAndItsIdleEnergyIsExact) {
  TempDir dir;
  const RunInfo run = record(dir, 1.0, 4000, 3000);
  auto reader = make_sqlite_reader(dir / "w.db");
  const RunModel m = load_run_model(*reader, *reader->run_by_id(run.run_id), {.advice = true});
  EXPECT_EQ(m.advice_step_ms, 0);
  EXPECT_TRUE(m.json()["advice_step_s"].is_null());
  EXPECT_EQ(m.advice_step_text(), "");
  EXPECT_TRUE(build_report_data(*reader, {m.run}, {})["runs"][0]["advice_step_s"].is_null());
  EXPECT_NEAR(idle_energy_j(m), kIdleW * 1000, 1e-6);
}

TEST(AdviceSteps, ALongRunIsReadInStepsWithinOneStepOfItsTruth) {
  TempDir dir;
  // 40,001 samples a series at 100 ms: almost five times kMaxPoints.
  const RunInfo run = record(dir, 0.1, 4000, 3000);
  auto reader = make_sqlite_reader(dir / "w.db");
  const RunInfo stored = *reader->run_by_id(run.run_id);

  // The input itself: bounded, every sample counted once, on one grid for the GPUs and the CPU.
  const advice::Input in = advice::load_input(*reader, stored);
  ASSERT_GT(in.step_ms, 100);
  ASSERT_EQ(in.gpus.size(), 2u);
  for (const auto& g : in.gpus) {
    EXPECT_LE(g.points.size(), advice::InputBuilder::kMaxPoints);
    uint64_t samples = 0;
    for (const auto& p : g.points)
      samples += p.samples;
    EXPECT_EQ(samples, 40001u);
    // The counter at each step's end is the sample's: the last point holds the run's whole energy.
    EXPECT_NEAR(*g.points.back().energy_j, g.gpu_index == 0 ? kBusyW * 3000 + kIdleW * 1000 : kBusyW * 4000, 1e-3);
  }
  ASSERT_EQ(in.cpu.size(), in.gpus[0].points.size());
  for (size_t k = 0; k < in.cpu.size(); ++k)
    ASSERT_EQ(in.cpu[k].ts_ms, in.gpus[0].points[k].ts_ms) << k;

  // The idle energy is the truth's but for the one step where GPU 0 went idle: at most that step of idle power.
  const RunModel m = load_run_model(*reader, stored, {.advice = true});
  EXPECT_EQ(m.advice_step_ms, in.step_ms);
  EXPECT_DOUBLE_EQ(m.json()["advice_step_s"].get<double>(), static_cast<double>(in.step_ms) / 1000);
  EXPECT_NE(m.advice_step_text().find("read in steps of"), std::string::npos);
  // The report (and serve's run page, which is the report) says it too.
  EXPECT_DOUBLE_EQ(build_report_data(*reader, {stored}, {})["runs"][0]["advice_step_s"].get<double>(),
                   static_cast<double>(in.step_ms) / 1000);
  EXPECT_NEAR(idle_energy_j(m), kIdleW * 1000, kIdleW * static_cast<double>(in.step_ms) / 1000);
}

// Stored times can be anything a damaged or hand-made store holds: out of order, at either end of int64. Rows more
// than a century from the run's start are left out, the rest stay bounded, and nothing overflows, in the input or in
// the estimators that take differences of its times (the ASan job runs this with UBSan).
TEST(AdviceSteps, TimesAnywhereInInt64StayBounded) {
  RunInfo run;
  run.start_ms = 1795262609000;
  advice::InputBuilder b(run);
  const Table& t = table(TableId::GpuSamples);
  std::vector<Value> row(t.columns.size());
  row[column_index(TableId::GpuSamples, "gpu_index")] = int64_t{0};
  row[column_index(TableId::GpuSamples, "power_w")] = 100.0;
  row[column_index(TableId::GpuSamples, "mem_used_bytes")] = INT64_MAX;
  const size_t ts = column_index(TableId::GpuSamples, "ts_ms");
  constexpr int64_t k99YearsMs = int64_t{99} * 365 * 86400 * 1000;
  for (int64_t k = 0; k < 40000; ++k) {
    switch (k % 4) {
    case 0: // left out
      row[ts] = INT64_MIN + k;
      break;
    case 1: // left out
      row[ts] = INT64_MAX - k;
      break;
    case 2: // read: within a century, on either side, out of order
      row[ts] = run.start_ms + (k % 8 == 2 ? k99YearsMs - k : -k99YearsMs + k);
      break;
    default:
      row[ts] = run.start_ms + (k * 7919) % 100000;
    }
    b.gpu(row);
  }
  const advice::Input in = std::move(b).finish();
  ASSERT_EQ(in.gpus.size(), 1u);
  EXPECT_LE(in.gpus[0].points.size(), advice::InputBuilder::kMaxPoints);
  EXPECT_GT(in.step_ms, 0);
  uint64_t samples = 0;
  for (const auto& p : in.gpus[0].points)
    samples += p.samples;
  EXPECT_EQ(samples, 20000u);
  EXPECT_EQ(*in.gpus[0].points.front().mem_used_bytes, INT64_MAX);
  (void)advice::advise(in);
}

} // namespace unit_advice_steps
