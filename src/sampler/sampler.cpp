#include "sampler/sampler.hpp"

#include <spdlog/spdlog.h>

#include "core/time_util.hpp"

namespace wattscope {

int64_t GridSchedule::next_slot(int64_t done, SteadyClock::time_point now) const {
  if (now < t0_) return done + 1;
  int64_t latest_due = (now - t0_) / interval_;
  return latest_due > done ? latest_due : done + 1;
}

Sampler::Sampler(std::vector<Source*> sources, std::chrono::nanoseconds interval, FrameHandler on_frame)
    : sources_(std::move(sources)), interval_(interval), on_frame_(std::move(on_frame)) {}

Sampler::~Sampler() {
  stop();
}

void Sampler::start() {
  thread_ = std::thread([this] { loop(); });
}

void Sampler::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Sampler::loop() {
  const GridSchedule grid(SteadyClock::now(), interval_);
  int64_t slot = 0;
  for (;;) {
    if (slot > 0) { // tick 0 is taken whatever happens: every run has at least its starting sample
      std::unique_lock lock(mu_);
      // wait_until on steady_clock uses pthread_cond_clockwait: immune to wall-clock jumps.
      if (cv_.wait_until(lock, grid.due(slot), [this] { return stop_; })) break;
    }
    const auto started = SteadyClock::now();
    Frame frame;
    frame.tick = slot;
    frame.mono = started;
    frame.ts_ms = wall_now_ms();
    for (Source* s : sources_)
      s->sample(frame);
    try {
      on_frame_(frame);
    } catch (const std::exception& e) {
      // The sampling loop never throws (STYLE 14); a failing hand-off is reported and the next tick goes on.
      spdlog::error("tick {}: {}", slot, e.what());
    }
    const auto finished = SteadyClock::now();
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(finished - started).count();
    stats_.last_tick_ns.store(ns, std::memory_order_relaxed);
    stats_.total_tick_ns.fetch_add(ns, std::memory_order_relaxed);
    stats_.ticks.fetch_add(1, std::memory_order_relaxed);
    const int64_t next = grid.next_slot(slot, finished);
    if (next > slot + 1) stats_.skipped.fetch_add(next - slot - 1, std::memory_order_relaxed);
    slot = next;
  }
}

} // namespace wattscope
