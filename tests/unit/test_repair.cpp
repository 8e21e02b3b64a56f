// Phases through a kill: a begun phase is stored at once as an open row and replaced by its closed row (SQLite by key,
// CSV by the later row of a key); `repair` closes the open ones from the stored samples, and the CSV store takes the
// closed rows after what the recorder left.
#include <gtest/gtest.h>

#include <map>

#include "../support/support.hpp"
#include "core/schema.hpp"
#include "runs/phase_view.hpp"
#include "runs/repair.hpp"
#include "sinks/csv/csv_store.hpp"
#include "sinks/sqlite/sqlite_store.hpp"
#include "sinks/store.hpp"

namespace unit_repair { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;

namespace {

constexpr int64_t kStart = 1795262600000;

RunInfo run_info() {
  RunInfo r;
  r.start_ms = kStart;
  r.run_id = "20261121-120000-0000abcd";
  r.task = "killed";
  r.interval_ms = 100;
  return r;
}

PhaseRecord begun(int64_t id, std::string name, OptI parent, int64_t start_ms) {
  PhaseRecord p;
  p.phase_id = id;
  p.name = std::move(name);
  p.parent = parent;
  p.start_ms = start_ms;
  p.start_tick = (start_ms - kStart) / 100;
  return p;
}

// Tick t at kStart + 100 t: GPU 0 at 200 W (20 J a tick), GPU 1 at 50 W, the CPU package at 10 W with the method
// RAPL's counter has.
Frame tick(int64_t t) {
  Frame f;
  f.tick = t;
  f.ts_ms = kStart + 100 * t;
  for (int g = 0; g < 2; ++g) {
    GpuSample s;
    s.gpu_index = g;
    s.energy_j = (g == 0 ? 20.0 : 5.0) * static_cast<double>(t);
    f.gpus.push_back(s);
  }
  f.cpu.package_energy_j = 1.0 * static_cast<double>(t);
  f.cpu.power_method = "counter";
  return f;
}

std::vector<GpuDevice> devices() {
  std::vector<GpuDevice> d(2);
  for (int g = 0; g < 2; ++g) {
    d[static_cast<size_t>(g)].gpu_index = g;
    d[static_cast<size_t>(g)].vendor = "nvidia";
    d[static_cast<size_t>(g)].energy_method = "counter";
  }
  return d;
}

// A recorder's batches of ticks `first` to `last`: train (0) begun at tick 2, epoch (1) inside it at 3.5, step (2)
// inside that at tick 5 and ended at tick 7 (stored closed), then eval (3) begun at 8.25: the kill comes after tick
// `last`.
void record(Sink& sink, RunInfo& run, int first, int last) {
  const auto devs = devices();
  if (first == 0) sink.begin_run(run);
  for (int t = first; t <= last; ++t) {
    Frame f = tick(t);
    if (t == 0) f.device_rows = devs;
    if (t == 2) f.phases_begun.push_back(begun(0, "train", std::nullopt, kStart + 200));
    if (t == 4) f.phases_begun.push_back(begun(1, "epoch", 0, kStart + 350));
    if (t == 5) f.phases_begun.push_back(begun(2, "step", 1, kStart + 500));
    if (t == 7) {
      PhaseRecord p = begun(2, "step", 1, kStart + 500);
      p.end_ms = kStart + 700;
      p.end_tick = 7;
      p.device_energy_j = {{"cpu_package", 2.0}, {"gpu0", 40.0}, {"gpu1", 10.0}};
      p.energy_j = 52.0;
      p.energy_method = "counter";
      f.phases.push_back(p);
    }
    if (t == 9) f.phases_begun.push_back(begun(3, "eval", std::nullopt, kStart + 825));
    RowBatch b; // a commit a tick, as a phase edge makes
    append_frame_rows(run.run_id, f, b);
    sink.write(b);
  }
}

std::map<int64_t, PhaseRecord> by_id(const PhaseData& d) {
  std::map<int64_t, PhaseRecord> out;
  for (const auto& p : d.phases)
    out[p.phase_id] = p;
  return out;
}

void repair(const StoreSpec& spec) {
  auto reader = open_reader(spec);
  const RunInfo stored = reader->runs().at(0);
  ASSERT_TRUE(unfinished(stored));
  const RunInfo fixed = rebuild_from_samples(*reader, stored);
  Frame closing;
  closing.markers_only = true;
  closing.phases = close_open_phases(*reader, stored);
  RowBatch rows;
  append_frame_rows(fixed.run_id, closing, rows);
  open_sink(spec)->finalise_run(fixed, rows);
}

void expect_repaired(const StoreSpec& spec) {
  auto reader = open_reader(spec);
  const RunInfo run = reader->runs().at(0);
  ASSERT_FALSE(unfinished(run));
  EXPECT_EQ(*run.end_ms, kStart + 1000);
  auto phases = by_id(load_phase_data(*reader, run));
  ASSERT_EQ(phases.size(), 4u);
  // step ended before the kill: kept as the recorder stored it
  EXPECT_FALSE(phases[2].closed_by_repair);
  EXPECT_EQ(phases[2].end_ms, kStart + 700);
  EXPECT_DOUBLE_EQ(*phases[2].energy_j, 52.0);
  // the others end at the last sample (tick 10), each device's energy its counter there less at the start
  const std::map<int64_t, double> start_tick = {{0, 2.0}, {1, 3.5}, {3, 8.25}};
  for (const auto& [id, t0] : start_tick) {
    SCOPED_TRACE(phases[id].name);
    const PhaseRecord& p = phases[id];
    EXPECT_TRUE(p.closed_by_repair);
    EXPECT_FALSE(p.closed_by_run_end);
    EXPECT_FALSE(phase_open(p));
    EXPECT_EQ(p.end_ms, kStart + 1000);
    EXPECT_EQ(p.energy_method, "counter");
    std::map<std::string, double> dev(p.device_energy_j.begin(), p.device_energy_j.end());
    ASSERT_EQ(dev.size(), 3u);
    EXPECT_NEAR(dev["gpu0"], 20.0 * (10 - t0), 1e-9);
    EXPECT_NEAR(dev["gpu1"], 5.0 * (10 - t0), 1e-9);
    EXPECT_NEAR(dev["cpu_package"], 1.0 * (10 - t0), 1e-9);
    EXPECT_NEAR(*p.energy_j, 26.0 * (10 - t0), 1e-9);
  }
  EXPECT_EQ(phases[1].parent, 0);
  EXPECT_EQ(phases[2].parent, 1);
  EXPECT_FALSE(phases[3].parent);
  // The edges, as stored: on a tick, between ticks, and the unknown end.
  int edges = 0;
  reader->scan(TableId::Phases, run, [&](std::span<const Value> row) {
    const int64_t id = value_int(row[column_index(TableId::Phases, "phase_id")]).value_or(-1);
    if (id == 2) return;
    ++edges;
    EXPECT_EQ(value_text(row[column_index(TableId::Phases, "end_edge")]), "none");
    EXPECT_EQ(value_text(row[column_index(TableId::Phases, "start_edge")]), id == 0 ? "reading" : "interpolated");
    EXPECT_TRUE(is_null(row[column_index(TableId::Phases, "energy_bound_j")]));
    EXPECT_EQ(value_int(row[column_index(TableId::Phases, "closed_by_repair")]), 1);
  });
  EXPECT_EQ(edges, 3);
}

} // namespace

TEST(Repair, BegunPhasesAreStoredOpenAndReplacedByTheirClosedRow) {
  wstest::TempDir dir;
  for (const StoreSpec& spec :
       {StoreSpec{StoreSpec::Kind::Sqlite, dir / "w.db"}, StoreSpec{StoreSpec::Kind::Csv, dir / "csv"}}) {
    SCOPED_TRACE(spec.location);
    RunInfo run = run_info();
    auto sink = open_sink(spec);
    record(*sink, run, 0, 6);
    auto reader = open_reader(spec);
    auto phases = by_id(load_phase_data(*reader, reader->runs().at(0)));
    ASSERT_EQ(phases.size(), 3u);
    for (const auto& [id, p] : phases) {
      EXPECT_TRUE(phase_open(p)) << id;
      EXPECT_FALSE(p.energy_j);
    }
    EXPECT_EQ(phases[1].parent, 0);
    record(*sink, run, 7, 7); // step's end: its open row replaced, never doubled
    phases = by_id(load_phase_data(*reader, reader->runs().at(0)));
    ASSERT_EQ(phases.size(), 3u);
    EXPECT_FALSE(phase_open(phases[2]));
    EXPECT_DOUBLE_EQ(*phases[2].energy_j, 52.0);
    EXPECT_TRUE(phase_open(phases[1]));
  }
}

TEST(Repair, OpenPhasesAreClosedAtTheLastSampleFromTheStoredEnergy) {
  wstest::TempDir dir;
  const StoreSpec sqlite{StoreSpec::Kind::Sqlite, dir / "w.db"};
  const StoreSpec csv{StoreSpec::Kind::Csv, dir / "csv"};
  for (const auto& spec : {sqlite, csv}) {
    RunInfo run = run_info();
    auto sink = open_sink(spec);
    record(*sink, run, 0, 10);
  }
  const std::string phases_csv = dir / ("csv/" + csv_file_name(run_info(), TableId::Phases));
  for (const auto& spec : {sqlite, csv}) {
    SCOPED_TRACE(spec.location);
    repair(spec);
    expect_repaired(spec);
  }
  // CSV keeps every row it was given: the open ones, then the closed ones after them; a reader takes the last.
  size_t lines = 0;
  for (char c : wstest::read_file(phases_csv))
    lines += c == '\n';
  EXPECT_EQ(lines, 1u /*header*/ + 4 /*open*/ + 1 /*step closed*/ + 3 /*closed by repair*/);
}

TEST(Repair, ARunWithNoOpenPhaseHasNothingToClose) {
  wstest::TempDir dir;
  const StoreSpec spec{StoreSpec::Kind::Sqlite, dir / "w.db"};
  RunInfo run = run_info();
  auto sink = open_sink(spec);
  record(*sink, run, 0, 1);
  auto reader = open_reader(spec);
  EXPECT_TRUE(close_open_phases(*reader, reader->runs().at(0)).empty());
}

} // namespace unit_repair
