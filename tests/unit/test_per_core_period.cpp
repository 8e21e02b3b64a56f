// Per-core utilisation stored every 5 s (or per process scan where longer), as the true mean over that period, every
// tick with --per-core-every-tick, or not at all with --no-per-core.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "../support/support.hpp"
#include "cli/command.hpp"
#include "cli/record_flags.hpp"
#include "core/schema.hpp"
#include "recording/session.hpp"
#include "recording/sources.hpp"
#include "sources/procfs/cpu_source.hpp"

namespace unit_per_core_period { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace std::chrono_literals;

namespace {

// Cumulative jiffies of two cores: (busy, idle) each. /proc/stat's user field carries busy, idle carries idle.
struct Jiffies {
  uint64_t busy0, idle0, busy1, idle1;
};

std::string stat_text(const Jiffies& j) {
  return fmt::format("cpu  {} 0 0 {} 0 0 0 0 0 0\ncpu0 {} 0 0 {} 0 0 0 0 0 0\ncpu1 {} 0 0 {} 0 0 0 0 0 0\nintr 1\n",
                     j.busy0 + j.busy1, j.idle0 + j.idle1, j.busy0, j.idle0, j.busy1, j.idle1);
}

// Ticks of unequal lengths (in jiffies) and shares, so that the mean of each tick's share is not the period's share:
// only the ratio of the period's busy jiffies to all its jiffies is the true mean.
// Ticks 1..5 (busy/all jiffies):
//   core 0: +10/300, +50/100, +0/100, +100/100, +90/100  -> 250 busy of 700 (mean of the shares: 52.7 %)
//   core 1: +300/300, +0/100, +25/100, +75/100, +0/100   -> 400 busy of 700
const Jiffies kSeries[] = {
    {1000, 1000, 2000, 2000}, // read at open()
    {1090, 1010, 2000, 2100}, // tick 0: stored (the first full sample), the tick's own share
    {1100, 1300, 2300, 2100}, // tick 1
    {1150, 1350, 2300, 2200}, // tick 2
    {1150, 1450, 2325, 2275}, // tick 3
    {1250, 1450, 2400, 2300}, // tick 4
    {1340, 1460, 2400, 2400}, // tick 5: a period (5 s) after tick 0: stored, the mean over ticks 1..5
};

struct Fixture {
  wstest::TempDir root;
  void write(const Jiffies& j) { wstest::write_file(root / "stat", stat_text(j)); }
};

std::vector<Frame> run_series(Fixture& fx, PerCoreStorage per_core) {
  fx.write(kSeries[0]);
  wstest::write_file(fx.root / "meminfo", "MemTotal: 1000 kB\nMemAvailable: 500 kB\n");
  ProcfsCpuSource src(fx.root.path(), per_core);
  EXPECT_TRUE(src.open());
  std::vector<Frame> frames;
  const SteadyClock::time_point t0{std::chrono::hours(1)};
  for (size_t i = 1; i < std::size(kSeries); ++i) {
    fx.write(kSeries[i]);
    Frame f;
    f.tick = static_cast<int64_t>(i - 1);
    f.ts_ms = 1'000'000 + 1000 * f.tick;
    // A few milliseconds of jitter either way, as a real grid has: tick 5 lands 3 ms before the period's end.
    f.mono = t0 + std::chrono::seconds(f.tick) + (i == 6 ? -3ms : 2ms * static_cast<int>(i % 2));
    src.sample(f);
    frames.push_back(std::move(f));
  }
  return frames;
}

PerCoreStorage period_mode() {
  PerCoreStorage p;
  p.mode = PerCoreStorage::Mode::Period;
  p.period = 5s;
  p.interval = 1s;
  return p;
}

size_t core_rows_of(const Frame& f) {
  RowBatch b;
  append_frame_rows("run", f, b);
  return b.tables[static_cast<size_t>(TableId::CpuCoreSamples)].rows();
}

} // namespace

TEST(PerCorePeriod, StoredOncePerPeriodAsThePeriodsTrueMean) {
  Fixture fx;
  const auto frames = run_series(fx, period_mode());
  ASSERT_EQ(frames.size(), 6u);
  // Tick 0: stored, its own share since open().
  ASSERT_TRUE(frames[0].cpu.core_rows);
  ASSERT_EQ(frames[0].cpu.core_util_pct.size(), 2u);
  EXPECT_DOUBLE_EQ(*frames[0].cpu.core_util_pct[0], 90.0);
  EXPECT_DOUBLE_EQ(*frames[0].cpu.core_util_pct[1], 0.0);
  EXPECT_EQ(core_rows_of(frames[0]), 2u);
  for (size_t i = 1; i <= 4; ++i) {
    EXPECT_FALSE(frames[i].cpu.core_rows) << "tick " << i;
    EXPECT_EQ(core_rows_of(frames[i]), 0u) << "tick " << i;
    EXPECT_EQ(frames[i].cpu.core_util_pct.size(), 2u) << "the live view still sees every core, tick " << i;
  }
  // Tick 5: the mean over ticks 1..5, from the jiffies across the period.
  ASSERT_TRUE(frames[5].cpu.core_rows);
  ASSERT_EQ(frames[5].cpu.core_util_pct.size(), 2u);
  EXPECT_DOUBLE_EQ(*frames[5].cpu.core_util_pct[0], 100.0 * 250 / 700);
  EXPECT_DOUBLE_EQ(*frames[5].cpu.core_util_pct[1], 100.0 * 400 / 700);
  // Not the last tick's share (90 % and 0 %).
  EXPECT_NE(*frames[5].cpu.core_util_pct[0], 90.0);
  EXPECT_EQ(core_rows_of(frames[5]), 2u);
  // The total is every tick's, whatever the per-core period.
  ASSERT_TRUE(frames[3].cpu.util_pct);
  EXPECT_DOUBLE_EQ(*frames[3].cpu.util_pct, 100.0 * 25 / 200);
}

TEST(PerCorePeriod, EveryTickStoresEachTicksShare) {
  Fixture fx;
  PerCoreStorage every;
  every.mode = PerCoreStorage::Mode::EveryTick;
  const auto frames = run_series(fx, every);
  for (const auto& f : frames) {
    EXPECT_TRUE(f.cpu.core_rows);
    EXPECT_EQ(core_rows_of(f), 2u);
  }
  EXPECT_DOUBLE_EQ(*frames[1].cpu.core_util_pct[0], 100.0 * 10 / 300);
  EXPECT_DOUBLE_EQ(*frames[5].cpu.core_util_pct[0], 100.0 * 90 / 100);
}

TEST(PerCorePeriod, OffStoresNoCoreRows) {
  Fixture fx;
  PerCoreStorage off;
  off.mode = PerCoreStorage::Mode::Off;
  const auto frames = run_series(fx, off);
  for (const auto& f : frames) {
    EXPECT_FALSE(f.cpu.core_rows);
    EXPECT_EQ(core_rows_of(f), 0u);
    EXPECT_TRUE(f.cpu.util_pct); // the CPU total is still recorded
  }
}

TEST(PerCorePeriod, UnreadableStatStoresNothingAndKeepsThePeriod) {
  Fixture fx;
  fx.write(kSeries[0]);
  ProcfsCpuSource src(fx.root.path(), period_mode());
  ASSERT_TRUE(src.open());
  fx.write(kSeries[1]);
  Frame f0;
  f0.mono = SteadyClock::time_point{1h};
  src.sample(f0);
  ASSERT_TRUE(f0.cpu.core_rows);
  // A /proc/stat without cpu lines: no reading, so no rows, and the period still runs from tick 0.
  wstest::write_file(fx.root / "stat", "intr 1\n");
  Frame f1;
  f1.mono = f0.mono + 5s;
  src.sample(f1);
  EXPECT_FALSE(f1.cpu.core_rows);
  fx.write(kSeries[6]);
  Frame f2;
  f2.mono = f0.mono + 6s;
  src.sample(f2);
  ASSERT_TRUE(f2.cpu.core_rows);
  EXPECT_DOUBLE_EQ(*f2.cpu.core_util_pct[0], 100.0 * 250 / 700);
}

TEST(PerCorePeriod, FlagsChooseTheMode) {
  RecordFlags f;
  f.no_db = true;
  EXPECT_EQ(session_options(f, {}, false).per_core.mode, PerCoreStorage::Mode::Period);
  f.per_core_every_tick = true;
  EXPECT_EQ(session_options(f, {}, false).per_core.mode, PerCoreStorage::Mode::EveryTick);
  f.per_core_every_tick = false;
  f.no_per_core = true;
  EXPECT_EQ(session_options(f, {}, false).per_core.mode, PerCoreStorage::Mode::Off);
  f.per_core_every_tick = true;
  EXPECT_THROW(session_options(f, {}, false), UsageError);
}

// The session's procfs source stores per-core rows at the process-scan period: --process-interval 1s at a 250 ms
// interval is every fourth tick; under 1 s (or the interval) the tracker never scans, and neither are cores stored.
TEST(PerCorePeriod, TheSessionsSourceStoresEveryFiveSecondsOrPerProcessScanWhereLonger) {
  // At 250 ms: 5 s is 20 ticks, whatever the scan period under it (run scans every second); 8 s is 32.
  for (const auto& [process_interval, every] : {std::pair{1000ms, 20}, {2000ms, 20}, {100ms, 20}, {8000ms, 32}}) {
    Fixture fx;
    fx.write(kSeries[0]);
    SessionOptions o;
    o.procfs_root = fx.root.path();
    o.interval = 250ms;
    o.process_interval = process_interval;
    std::unique_ptr<Source> src;
    for (auto& s : make_sources(o))
      if (s && s->name() == "procfs") src = std::move(s);
    ASSERT_TRUE(src);
    ASSERT_TRUE(src->open());
    std::vector<int64_t> stored;
    Jiffies j = kSeries[0];
    for (int64_t t = 0; t < 70; ++t) {
      j.busy0 += 10;
      j.idle0 += 15;
      j.busy1 += 20;
      j.idle1 += 5;
      fx.write(j);
      Frame f;
      f.tick = t;
      f.mono = SteadyClock::time_point{1h} + 250ms * t;
      src->sample(f);
      if (f.cpu.core_rows) stored.push_back(t);
    }
    std::vector<int64_t> want;
    for (int64_t t = 0; t < 70; t += every)
      want.push_back(t);
    EXPECT_EQ(stored, want) << "--process-interval " << process_interval.count() << " ms";
  }
}

} // namespace unit_per_core_period
