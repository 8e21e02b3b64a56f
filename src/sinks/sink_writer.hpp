// The bus end for one sink: a bounded hand-off queue and a writer thread that turns frames into rows and commits them
// in batches (--commit-every). The sampler only ever appends to the queue; a slow or failing store never stalls it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/duration.hpp"
#include "core/frame.hpp"
#include "sinks/sink.hpp"

namespace wattscope {

using FramePtr = std::shared_ptr<const Frame>;

struct WriterStats {
  std::atomic<int64_t> rows_written{0};
  std::atomic<int64_t> batches{0};
  std::atomic<int64_t> failures{0};
};

class SinkWriter {
public:
  SinkWriter(std::unique_ptr<Sink> sink, CommitPolicy policy, std::string run_id,
             std::shared_ptr<const std::vector<GpuDevice>> devices);
  ~SinkWriter();
  void start();
  void push(FramePtr frame); // never blocks on the store
  // Drains everything queued, writes the final run row and joins. Returns false if rows could not be stored.
  bool finish(const RunInfo& final_run);
  const WriterStats& stats() const { return stats_; }
  std::string describe() const { return sink_->describe(); }

private:
  void loop();
  bool try_commit(RowBatch& batch);

  std::unique_ptr<Sink> sink_;
  CommitPolicy policy_;
  std::string run_id_;
  std::shared_ptr<const std::vector<GpuDevice>> devices_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<FramePtr> queue_;
  bool stopping_ = false;
  bool failing_ = false;
  WriterStats stats_;
};

} // namespace wattscope
