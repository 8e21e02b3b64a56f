// The bus end for one sink: a hand-off queue and a writer thread that turns frames into rows and commits them in
// batches (--commit-every). The sampler only ever appends to the queue; a slow or failing store never stalls it.
//
// The queue is deliberately unbounded, because no sample may be lost: a store that keeps failing (a full disk under
// SQLite or CSV) keeps every frame in memory and retries; MySQL spills to a local file during an outage instead, so
// its queue stays short. At 100k frames waiting (28 h at 1 s, under 3 h at 100 ms) the writer warns, with the memory
// held, and again at every doubling: a frame of an 8-GPU, 128-CPU host holds about 5.5 KiB (8 GPU samples of 352 B,
// 128 core loads of 16 B, the frame's 264 B: sizeof on x86-64), so 100k of them about 550 MB.
//
// The writer thread sleeps until there is work: a frame after an idle spell, a commit falling due, a retry, or the end.
//
// Stopping is bounded: finish() waits for the drain until a deadline. Past it the store is abandoned (Sink::abandon:
// MySQL breaks off the call in progress and moves what it holds to its spill file, which `wattscope export` replays);
// a writer that is still not back after a short grace (a hung local filesystem under SQLite or CSV) is left behind,
// and the samples it had not stored are reported as lost.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/duration.hpp"
#include "core/frame.hpp"
#include "sinks/sink.hpp"

namespace wattscope {

using FramePtr = std::shared_ptr<const Frame>;

// How long the end of a run waits for its stores before giving up on them.
inline constexpr std::chrono::milliseconds kDefaultDrainTimeout{5000};

struct WriterStats {
  std::atomic<int64_t> rows_written{0};
  std::atomic<int64_t> batches{0};
  std::atomic<int64_t> failures{0};
};

class SinkWriter {
public:
  SinkWriter(std::unique_ptr<Sink> sink, CommitPolicy policy, std::string run_id);
  ~SinkWriter(); // as finish() without a final run row, if finish() was not called
  SinkWriter(const SinkWriter&) = delete;
  SinkWriter& operator=(const SinkWriter&) = delete;

  void start();
  void push(FramePtr frame); // never blocks on the store
  // Starts the drain: everything queued is stored, then the final run row. Returns at once, so that several stores
  // drain side by side under one deadline.
  void begin_finish(const RunInfo& final_run);
  // Waits for the drain until `deadline` (starting it if begin_finish was not called), then abandons the store (see
  // above). Returns false if rows could not be stored, here or in a spill file.
  bool finish(const RunInfo& final_run, SteadyClock::time_point deadline);
  bool finish(const RunInfo& final_run) { return finish(final_run, SteadyClock::now() + kDefaultDrainTimeout); }
  const WriterStats& stats() const;
  std::string describe() const;
  std::string stored_text() const; // Sink::stored_text

private:
  // Shared with the writer thread, so a thread left behind at the end never touches freed memory.
  struct State;
  static void loop(State& s);
  static bool try_commit(State& s, RowBatch& batch, int64_t frames);

  std::shared_ptr<State> state_;
  std::thread thread_;
};

} // namespace wattscope
