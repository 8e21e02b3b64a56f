// The writer's end-of-run drain is bounded: a store that hangs cannot hold the run's exit.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "sinks/sink_writer.hpp"

namespace unit_sink_writer { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace std::chrono_literals;

namespace {

// What the test sees of a sink the writer owns (and may outlive the writer, on a thread left behind).
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int64_t stored_rows = 0;  // written to the store
  int64_t spilled_rows = 0; // kept elsewhere after abandon()
  bool ended = false;
  std::atomic<bool> destroyed{false};
  void release() {
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

// Every write blocks until the gate opens: a frozen server. With `interruptible`, abandon() breaks the call off and
// the rows go to a "spill file" (as MySQL does).
class FrozenSink final : public Sink {
public:
  FrozenSink(std::shared_ptr<Gate> g, bool interruptible) : g_(std::move(g)), interruptible_(interruptible) {}
  ~FrozenSink() override { g_->destroyed = true; }
  std::string describe() const override { return "frozen"; }
  void begin_run(const RunInfo&) override {}
  void write(const RowBatch& batch) override {
    std::unique_lock lock(g_->mu);
    g_->cv.wait(lock, [&] { return g_->open || abandoned_; });
    (abandoned_ ? g_->spilled_rows : g_->stored_rows) += static_cast<int64_t>(batch.sample_rows());
  }
  void end_run(const RunInfo&) override {
    std::lock_guard lock(g_->mu);
    g_->ended = true;
  }
  void abandon() noexcept override {
    if (!interruptible_) return;
    {
      std::lock_guard lock(g_->mu);
      abandoned_ = true;
    }
    g_->cv.notify_all();
  }

private:
  std::shared_ptr<Gate> g_;
  bool interruptible_;
  bool abandoned_ = false; // guarded by g_->mu
};

class BrokenSink final : public Sink {
public:
  std::string describe() const override { return "broken"; }
  void begin_run(const RunInfo&) override {}
  void write(const RowBatch&) override { throw std::runtime_error("disk full"); }
  void end_run(const RunInfo&) override {}
};

FramePtr frame(int64_t tick) {
  auto f = std::make_shared<Frame>();
  f->tick = tick;
  f->ts_ms = 1'700'000'000'000 + tick;
  f->cpu.util_pct = 1.0;
  return f;
}

RunInfo final_run() {
  RunInfo r;
  r.run_id = "r1";
  r.end_ms = 1;
  return r;
}

} // namespace

TEST(SinkWriter, DrainPastItsDeadlineSpillsWhatAnAbandonedStoreHolds) {
  auto gate = std::make_shared<Gate>();
  SinkWriter w(std::make_unique<FrozenSink>(gate, true), CommitPolicy{0, 50ms}, "r1");
  w.start();
  for (int i = 0; i < 10; ++i)
    w.push(frame(i));
  std::this_thread::sleep_for(100ms); // the first commit is now stuck in the store
  const auto t = SteadyClock::now();
  EXPECT_TRUE(w.finish(final_run(), t + 300ms));
  const auto took = SteadyClock::now() - t;
  EXPECT_GE(took, 290ms);
  EXPECT_LT(took, 1500ms);
  std::lock_guard lock(gate->mu);
  EXPECT_EQ(gate->stored_rows + gate->spilled_rows, 10); // one cpu_samples row per frame: none lost
  EXPECT_EQ(gate->spilled_rows, 10);
  EXPECT_TRUE(gate->ended); // the final run row went in too (into the spill file, for MySQL)
}

TEST(SinkWriter, AStoreThatCannotBeInterruptedIsLeftBehindAndReported) {
  auto gate = std::make_shared<Gate>();
  {
    SinkWriter w(std::make_unique<FrozenSink>(gate, false), CommitPolicy{0, 50ms}, "r1");
    w.start();
    for (int i = 0; i < 10; ++i)
      w.push(frame(i));
    std::this_thread::sleep_for(100ms);
    const auto t = SteadyClock::now();
    EXPECT_FALSE(w.finish(final_run(), t + 200ms)); // the rows are not stored, and it says so
    EXPECT_LT(SteadyClock::now() - t, 5s);          // deadline + grace, not "whenever the store answers"
  }
  // The writer is destroyed; its thread, still inside write(), keeps the sink alive. When the store finally answers
  // the thread finishes against live memory and lets go of the sink.
  EXPECT_FALSE(gate->destroyed.load());
  gate->release();
  for (int i = 0; i < 300 && !gate->destroyed.load(); ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(gate->destroyed.load());
}

TEST(SinkWriter, HealthyStoreDrainsEverythingBeforeTheDeadline) {
  auto gate = std::make_shared<Gate>();
  gate->release();
  SinkWriter w(std::make_unique<FrozenSink>(gate, true), CommitPolicy{1000, 0ns}, "r1");
  w.start();
  for (int i = 0; i < 2500; ++i)
    w.push(frame(i));
  const auto t = SteadyClock::now();
  EXPECT_TRUE(w.finish(final_run(), t + 10s));
  EXPECT_LT(SteadyClock::now() - t, 5s); // returns when done, not at the deadline
  EXPECT_EQ(gate->stored_rows, 2500);
  EXPECT_EQ(gate->spilled_rows, 0);
  EXPECT_TRUE(gate->ended);
  EXPECT_EQ(w.stats().rows_written.load(), 2500);
}

TEST(SinkWriter, FailingStoreIsRetriedUntilTheDeadlineThenReported) {
  SinkWriter w(std::make_unique<BrokenSink>(), CommitPolicy{0, 50ms}, "r1");
  w.start();
  w.push(frame(0));
  const auto t = SteadyClock::now();
  EXPECT_FALSE(w.finish(final_run(), t + 1200ms));
  const auto took = SteadyClock::now() - t;
  EXPECT_GE(took, 1190ms); // kept trying while there was time
  EXPECT_LT(took, 3s);
  EXPECT_GE(w.stats().failures.load(), 2);
}

namespace {
// Records when each batch was written, and whether it held a phase row.
struct Commits {
  std::mutex mu;
  std::vector<std::pair<SteadyClock::time_point, bool>> at;
  size_t count() {
    std::lock_guard lock(mu);
    return at.size();
  }
};
class RecordingSink final : public Sink {
public:
  explicit RecordingSink(std::shared_ptr<Commits> c) : c_(std::move(c)) {}
  std::string describe() const override { return "recording"; }
  void begin_run(const RunInfo&) override {}
  void write(const RowBatch& batch) override {
    std::lock_guard lock(c_->mu);
    c_->at.emplace_back(SteadyClock::now(), batch.tables[static_cast<size_t>(TableId::Phases)].rows() > 0);
  }
  void end_run(const RunInfo&) override {}

private:
  std::shared_ptr<Commits> c_;
};

FramePtr frame_with_begin(int64_t tick, int64_t phase_id) {
  auto f = std::make_shared<Frame>(*frame(tick));
  PhaseRecord p;
  p.phase_id = phase_id;
  p.name = "step";
  p.start_ms = f->ts_ms;
  f->phases_begun.push_back(p);
  return f;
}

// Waits until `n` commits happened or `limit` passed; true when they did.
bool commits_reach(Commits& c, size_t n, std::chrono::milliseconds limit) {
  const auto until = SteadyClock::now() + limit;
  while (c.count() < n && SteadyClock::now() < until)
    std::this_thread::sleep_for(2ms);
  return c.count() >= n;
}
} // namespace

// A phase's begin (or end) is committed promptly however long the commit period, so that a recorder killed with -9
// leaves it in the store; frames without one wait for the period.
TEST(SinkWriter, AFrameWithAPhaseEdgeIsCommittedWithinTheEdgeBoundNotThePeriod) {
  auto commits = std::make_shared<Commits>();
  SinkWriter w(std::make_unique<RecordingSink>(commits), CommitPolicy{0, 60s}, "r1");
  w.start();
  w.push(frame(0)); // the first frame is committed as it arrives
  ASSERT_TRUE(commits_reach(*commits, 1, 2s));
  w.push(frame(1));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(commits->count(), 1u) << "a plain frame waits for the 60 s period";
  const auto sent = SteadyClock::now();
  w.push(frame_with_begin(2, 0));
  ASSERT_TRUE(commits_reach(*commits, 2, 2s));
  {
    std::lock_guard lock(commits->mu);
    EXPECT_TRUE(commits->at[1].second);
    EXPECT_LT(commits->at[1].first - sent, 150ms); // at once: the last commit is over 100 ms ago
  }
  // Rows-only policy: the same bound.
  auto by_rows = std::make_shared<Commits>();
  SinkWriter r(std::make_unique<RecordingSink>(by_rows), CommitPolicy{100000, 0ns}, "r2");
  r.start();
  r.push(frame_with_begin(0, 0));
  EXPECT_TRUE(commits_reach(*by_rows, 1, 2s));
  EXPECT_TRUE(w.finish(final_run()));
  EXPECT_TRUE(r.finish(final_run()));
}

// A phase per tick at 10 ms (a training step each) costs at most one commit per 100 ms, not one per tick, and no edge
// waits longer than that.
TEST(SinkWriter, PhaseEdgesEveryTickMakeAtMostTenCommitsASecond) {
  auto commits = std::make_shared<Commits>();
  SinkWriter w(std::make_unique<RecordingSink>(commits), CommitPolicy{0, 60s}, "r1");
  w.start();
  const auto t0 = SteadyClock::now();
  for (int i = 0; i < 100; ++i) { // 1 s of ticks
    w.push(frame_with_begin(i, i));
    std::this_thread::sleep_until(t0 + (i + 1) * 10ms);
  }
  const auto last_push = SteadyClock::now();
  ASSERT_TRUE(commits_reach(*commits, 2, 2s));
  std::this_thread::sleep_for(200ms);
  std::lock_guard lock(commits->mu);
  const auto span = std::chrono::duration<double>(last_push - t0).count();
  EXPECT_LE(static_cast<double>(commits->at.size()), span * 10 + 2) << commits->at.size() << " commits";
  EXPECT_GE(commits->at.size(), 5u); // yet every 100 ms or so, not once a minute
  EXPECT_LT(commits->at.back().first - last_push, 150ms);
  for (size_t i = 1; i < commits->at.size(); ++i)
    EXPECT_GE(commits->at[i].first - commits->at[i - 1].first, 90ms) << i;
}

} // namespace unit_sink_writer
