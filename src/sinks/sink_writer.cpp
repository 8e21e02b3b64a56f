#include "sinks/sink_writer.hpp"

#include <spdlog/spdlog.h>

namespace wattscope {

namespace {
// Frames queued beyond this mean the store has fallen far behind; we say so (once) but keep every frame.
constexpr size_t kBacklogWarnFrames = 100'000;
constexpr auto kRetryDelay = std::chrono::milliseconds(500);
constexpr int kFinalAttempts = 5;
} // namespace

SinkWriter::SinkWriter(std::unique_ptr<Sink> sink, CommitPolicy policy, std::string run_id,
                       std::shared_ptr<const std::vector<GpuDevice>> devices)
    : sink_(std::move(sink)), policy_(policy), run_id_(std::move(run_id)), devices_(std::move(devices)) {
  if (policy_.rows == 0 && policy_.interval.count() == 0) policy_.interval = std::chrono::seconds(1);
}

SinkWriter::~SinkWriter() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SinkWriter::start() {
  thread_ = std::thread([this] { loop(); });
}

void SinkWriter::push(FramePtr frame) {
  bool warn = false;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(frame));
    warn = queue_.size() == kBacklogWarnFrames;
  }
  if (warn) spdlog::warn("{} is falling behind: {} samples waiting in memory", sink_->describe(), kBacklogWarnFrames);
  if (policy_.rows > 0) cv_.notify_one();
}

bool SinkWriter::try_commit(RowBatch& batch) {
  try {
    sink_->write(batch);
    stats_.rows_written.fetch_add(static_cast<int64_t>(batch.sample_rows()), std::memory_order_relaxed);
    stats_.batches.fetch_add(1, std::memory_order_relaxed);
    batch.clear();
    if (failing_) spdlog::info("{} is writable again; the rows held back are stored", sink_->describe());
    failing_ = false;
    return true;
  } catch (const std::exception& e) {
    stats_.failures.fetch_add(1, std::memory_order_relaxed);
    if (!failing_) spdlog::error("cannot write to {}: {}; keeping the rows and retrying", sink_->describe(), e.what());
    failing_ = true;
    return false;
  }
}

void SinkWriter::loop() {
  RowBatch batch;
  std::vector<FramePtr> taken;
  auto last_commit = SteadyClock::now();
  const auto wake_every = policy_.interval.count() ? std::min<std::chrono::nanoseconds>(policy_.interval, kRetryDelay)
                                                   : std::chrono::nanoseconds(kRetryDelay);
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, wake_every, [&] {
        return stopping_ || (policy_.rows > 0 && !failing_ &&
                             static_cast<int64_t>(queue_.size() + batch.sample_rows()) >= policy_.rows);
      });
      stopping = stopping_;
      taken.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
      queue_.clear();
    }
    // Rows reference device strings owned by devices_ and the run id owned by this writer: both outlive the batch.
    for (const auto& f : taken)
      append_frame_rows(run_id_, *f, *devices_, batch);
    taken.clear();
    const auto now = SteadyClock::now();
    const bool due = (policy_.rows > 0 && static_cast<int64_t>(batch.sample_rows()) >= policy_.rows) ||
                     (policy_.interval.count() > 0 && now - last_commit >= policy_.interval);
    if (!batch.empty() && (due || stopping)) {
      if (try_commit(batch)) last_commit = now;
    }
    if (stopping) {
      std::lock_guard lock(mu_);
      if (queue_.empty() && batch.empty()) return;
      if (queue_.empty() && failing_) {
        // Final drain: a few spaced retries, then report what could not be stored.
        for (int i = 0; i < kFinalAttempts && !batch.empty(); ++i) {
          std::this_thread::sleep_for(kRetryDelay);
          if (try_commit(batch)) break;
        }
        if (!batch.empty()) {
          spdlog::error("{}: {} rows could not be stored", sink_->describe(), batch.sample_rows());
          return;
        }
      }
    }
  }
}

bool SinkWriter::finish(const RunInfo& final_run) {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (failing_) return false;
  try {
    sink_->end_run(final_run);
  } catch (const std::exception& e) {
    spdlog::error("cannot finalise the run in {}: {}", sink_->describe(), e.what());
    return false;
  }
  return true;
}

} // namespace wattscope
