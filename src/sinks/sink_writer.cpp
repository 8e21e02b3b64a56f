#include "sinks/sink_writer.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "core/thread_name.hpp"

namespace wattscope {

namespace {
// Frames queued beyond this mean the store has fallen far behind; we say so (and at every doubling) but keep them all.
constexpr size_t kBacklogWarnFrames = 100'000;
constexpr auto kRetryDelay = std::chrono::milliseconds(500);
// After the drain's deadline: time for an abandoned store to move what it holds to its spill file (a local SQLite
// write: milliseconds), or for a MySQL reconnect already under way, which nothing interrupts, to time out (its connect
// timeout is 3 s; against a frozen server it gave up after 3.0 s, measured with the mariadb client).
constexpr auto kAbandonGrace = std::chrono::milliseconds(3500);

// A frame that carries a phase's begin or end is committed at most kPhaseEdgeCommit after it reaches the writer, and
// at once where the last commit is that long ago: a recorder killed with -9 leaves the phase behind for `repair`. The
// floor keeps the cost bounded: a phase per training step at 10 ms ticks makes at most 10 commits a second, not 100.
constexpr auto kPhaseEdgeCommit = std::chrono::milliseconds(100);

bool has_phase_edge(const Frame& f) {
  return !f.phases_begun.empty() || !f.phases.empty();
}

// Memory one queued frame holds, for the backlog warning.
size_t frame_bytes(const Frame& f) {
  size_t n = sizeof(Frame) + 2 * sizeof(void*) * 2; // the frame and its shared_ptr control block and queue slot
  n += f.cpu.core_util_pct.capacity() * sizeof(OptF) + f.cpu.zones.capacity() * sizeof(PowerZoneSample);
  n += f.gpus.capacity() * sizeof(GpuSample) + f.events.capacity() * sizeof(Event);
  for (const auto& e : f.events)
    n += e.kind.capacity() + e.source.capacity() + e.detail.capacity();
  return n;
}
} // namespace

struct SinkWriter::State {
  std::unique_ptr<Sink> sink;
  CommitPolicy policy;
  std::string run_id;
  std::mutex mu;
  std::condition_variable cv;      // wakes the writer
  std::condition_variable done_cv; // wakes finish()
  // Guarded by mu.
  std::deque<FramePtr> queue;
  size_t warn_at = kBacklogWarnFrames;
  bool idle = false;        // the writer sleeps until a frame or the end arrives
  bool edge_queued = false; // a queued frame carries a phase edge (kPhaseEdgeCommit)
  bool stopping = false;
  bool abandoned = false;
  bool done = false;
  bool stored = true; // every row reached the store (or its spill file) and the final run row was written
  std::optional<RunInfo> final_run;
  // Samples (frames) handed over and committed; the difference is what a writer left behind takes with it.
  std::atomic<int64_t> frames_pushed{0};
  std::atomic<int64_t> frames_stored{0};
  WriterStats stats;
  bool failing = false; // writer thread only
};

SinkWriter::SinkWriter(std::unique_ptr<Sink> sink, CommitPolicy policy, std::string run_id)
    : state_(std::make_shared<State>()) {
  state_->sink = std::move(sink);
  state_->policy = policy;
  state_->run_id = std::move(run_id);
  if (policy.rows == 0 && policy.interval.count() == 0) state_->policy.interval = std::chrono::seconds(1);
}

SinkWriter::~SinkWriter() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true; // no final run row: the run was not finished (start-up failed, or an exception)
  }
  state_->cv.notify_all();
  finish(RunInfo{}, SteadyClock::now() + kDefaultDrainTimeout);
}

const WriterStats& SinkWriter::stats() const {
  return state_->stats;
}
std::string SinkWriter::describe() const {
  return state_->sink->describe();
}

std::string SinkWriter::stored_text() const {
  return state_->sink->stored_text();
}

void SinkWriter::start() {
  // The thread holds the state: if it has to be left behind at the end, nothing it uses is freed under it.
  thread_ = std::thread([s = state_] {
    name_this_thread("ws-writer");
    loop(*s);
  });
}

void SinkWriter::push(FramePtr frame) {
  State& s = *state_;
  s.frames_pushed.fetch_add(1, std::memory_order_relaxed);
  size_t warn = 0, bytes = 0;
  bool wake = false;
  {
    std::lock_guard lock(s.mu);
    if (s.queue.size() + 1 == s.warn_at) {
      warn = s.warn_at;
      bytes = warn * frame_bytes(*frame);
      s.warn_at *= 2;
    }
    const bool edge = !s.edge_queued && has_phase_edge(*frame);
    s.edge_queued = s.edge_queued || edge;
    s.queue.push_back(std::move(frame));
    // Woken for the first frame after an idle spell, when a commit by row count falls due, or for a phase edge (its
    // commit may fall due sooner than the next one by the policy); not for every frame.
    wake = s.idle || edge || (s.policy.rows > 0 && static_cast<int64_t>(s.queue.size()) >= s.policy.rows);
  }
  if (warn)
    spdlog::warn("{} is falling behind: {} samples (about {} MiB) wait in memory; none is dropped", s.sink->describe(),
                 warn, bytes >> 20);
  if (wake) s.cv.notify_one();
}

bool SinkWriter::try_commit(State& s, RowBatch& batch, int64_t frames) {
  try {
    s.sink->write(batch);
    s.stats.rows_written.fetch_add(static_cast<int64_t>(batch.sample_rows()), std::memory_order_relaxed);
    s.stats.batches.fetch_add(1, std::memory_order_relaxed);
    s.frames_stored.fetch_add(frames, std::memory_order_relaxed);
    batch.clear();
    if (s.failing) spdlog::info("{} is writable again; the rows held back are stored", s.sink->describe());
    s.failing = false;
    return true;
  } catch (const std::exception& e) {
    s.stats.failures.fetch_add(1, std::memory_order_relaxed);
    if (!s.failing)
      spdlog::error("cannot write to {}: {}; keeping the rows and retrying", s.sink->describe(), e.what());
    s.failing = true;
    return false;
  }
}

void SinkWriter::loop(State& s) {
  RowBatch batch;
  int64_t batch_frames = 0;
  std::vector<FramePtr> taken;
  // Commits by time follow the frames: the first frame is committed as it arrives (as if the last commit were an
  // interval ago), and a commit falls due a little early (5 % of --commit-every, at most 25 ms), so that with a 1 s
  // commit and 1 s ticks each frame is committed as it arrives. Before, the first commit fell a second after the
  // writer started, just before the second frame: every later frame arrived just after a commit and waited for the
  // next one, a second later, woken by its own timer (2 wake-ups a tick, and each row stored a second late).
  const auto commit_slack = std::min<std::chrono::nanoseconds>(s.policy.interval / 20, std::chrono::milliseconds(25));
  auto last_commit = SteadyClock::now() - std::max<std::chrono::nanoseconds>(s.policy.interval, kPhaseEdgeCommit);
  auto last_attempt = last_commit;
  bool batch_edge = false; // the batch holds a phase edge: due kPhaseEdgeCommit after the last commit
  auto finished = [&](bool stored) {
    std::lock_guard lock(s.mu);
    s.stored = s.stored && stored;
    s.done = true;
    s.done_cv.notify_all();
  };
  for (;;) {
    bool stopping = false, abandoned = false;
    {
      std::unique_lock lock(s.mu);
      const auto rows_due = [&] {
        return s.policy.rows > 0 && !s.failing &&
               static_cast<int64_t>(s.queue.size() + batch.sample_rows()) >= s.policy.rows;
      };
      if (s.stopping) {
        if (s.failing && !s.abandoned) // retry, spaced, until it works or the drain's deadline abandons the store
          s.cv.wait_until(lock, last_attempt + kRetryDelay, [&] { return s.abandoned; });
      } else if (batch.empty() && s.queue.empty()) {
        s.idle = true; // nothing to store: sleep until a frame or the end arrives, without periodic wake-ups
        s.cv.wait(lock, [&] { return s.stopping || !s.queue.empty(); });
        s.idle = false;
      } else if (s.failing || s.policy.interval.count() > 0 || batch_edge || s.edge_queued) {
        auto wake_at = s.failing                       ? last_attempt + kRetryDelay
                       : s.policy.interval.count() > 0 ? last_commit + s.policy.interval - commit_slack
                                                       : SteadyClock::time_point::max();
        const bool edge = batch_edge || s.edge_queued;
        if (!s.failing && edge) wake_at = std::min(wake_at, last_commit + kPhaseEdgeCommit);
        // An edge arriving while the wait was set without one sets it again, earlier.
        s.cv.wait_until(lock, wake_at, [&] { return s.stopping || rows_due() || (!edge && s.edge_queued); });
      } else {
        s.cv.wait(lock, [&] { return s.stopping || rows_due() || s.edge_queued; });
      }
      stopping = s.stopping;
      abandoned = s.abandoned;
      taken.assign(std::make_move_iterator(s.queue.begin()), std::make_move_iterator(s.queue.end()));
      s.queue.clear();
      batch_edge = batch_edge || s.edge_queued;
      s.edge_queued = false;
    }
    // Rows reference the run id owned by the state, which outlives the batch.
    for (const auto& f : taken)
      append_frame_rows(s.run_id, *f, batch);
    batch_frames += static_cast<int64_t>(taken.size());
    taken.clear();
    const auto now = SteadyClock::now();
    const bool due =
        s.failing ? now - last_attempt >= kRetryDelay || abandoned
                  : (s.policy.rows > 0 && static_cast<int64_t>(batch.sample_rows()) >= s.policy.rows) ||
                        (s.policy.interval.count() > 0 && now - last_commit + commit_slack >= s.policy.interval) ||
                        (batch_edge && now - last_commit >= kPhaseEdgeCommit) || stopping;
    if (!batch.empty() && due) {
      last_attempt = now;
      if (try_commit(s, batch, batch_frames)) {
        last_commit = now;
        batch_frames = 0;
        batch_edge = false;
      }
    }
    if (!stopping) continue;
    bool more = false;
    {
      std::lock_guard lock(s.mu);
      more = !s.queue.empty();
    }
    if (more) continue;
    if (!batch.empty()) {
      if (!abandoned) continue; // retried above until the deadline
      spdlog::error("{}: {} rows could not be stored", s.sink->describe(), batch.sample_rows());
      finished(false);
      return;
    }
    std::optional<RunInfo> final_run;
    {
      std::lock_guard lock(s.mu);
      final_run = s.final_run;
    }
    bool ok = true;
    if (final_run) {
      try {
        s.sink->end_run(*final_run);
      } catch (const std::exception& e) {
        spdlog::error("cannot finalise the run in {}: {}", s.sink->describe(), e.what());
        ok = false;
      }
    }
    finished(ok);
    return;
  }
}

void SinkWriter::begin_finish(const RunInfo& final_run) {
  {
    std::lock_guard lock(state_->mu);
    if (state_->final_run || !thread_.joinable()) return;
    state_->final_run = final_run;
    state_->stopping = true;
  }
  state_->cv.notify_all();
}

bool SinkWriter::finish(const RunInfo& final_run, SteadyClock::time_point deadline) {
  if (!thread_.joinable()) return false;
  if (!final_run.run_id.empty()) begin_finish(final_run);
  State& s = *state_;
  std::unique_lock lock(s.mu);
  if (!s.done_cv.wait_until(lock, deadline, [&] { return s.done; })) {
    s.abandoned = true;
    lock.unlock();
    s.cv.notify_all();
    spdlog::warn("{} did not finish storing the run in time; giving up on it", s.sink->describe());
    s.sink->abandon();
    lock.lock();
    if (!s.done_cv.wait_for(lock, kAbandonGrace, [&] { return s.done; })) {
      // Stuck in a call nothing can interrupt: the thread is left behind and its rows go with the process.
      const int64_t lost = s.frames_pushed.load() - s.frames_stored.load();
      lock.unlock();
      spdlog::error("{} is stuck in a write; {} samples it had not stored are lost", s.sink->describe(), lost);
      thread_.detach();
      return false;
    }
  }
  const bool stored = s.stored;
  lock.unlock();
  thread_.join();
  return stored;
}

} // namespace wattscope
