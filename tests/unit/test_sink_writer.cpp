// The writer's end-of-run drain is bounded: a store that hangs cannot hold the run's exit.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>

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

auto devices() {
  return std::make_shared<const std::vector<GpuDevice>>();
}

} // namespace

TEST(SinkWriter, DrainPastItsDeadlineSpillsWhatAnAbandonedStoreHolds) {
  auto gate = std::make_shared<Gate>();
  SinkWriter w(std::make_unique<FrozenSink>(gate, true), CommitPolicy{0, 50ms}, "r1", devices());
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
    SinkWriter w(std::make_unique<FrozenSink>(gate, false), CommitPolicy{0, 50ms}, "r1", devices());
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
  SinkWriter w(std::make_unique<FrozenSink>(gate, true), CommitPolicy{1000, 0ns}, "r1", devices());
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
  SinkWriter w(std::make_unique<BrokenSink>(), CommitPolicy{0, 50ms}, "r1", devices());
  w.start();
  w.push(frame(0));
  const auto t = SteadyClock::now();
  EXPECT_FALSE(w.finish(final_run(), t + 1200ms));
  const auto took = SteadyClock::now() - t;
  EXPECT_GE(took, 1190ms); // kept trying while there was time
  EXPECT_LT(took, 3s);
  EXPECT_GE(w.stats().failures.load(), 2);
}
} // namespace unit_sink_writer
