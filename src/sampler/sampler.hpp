// One thread on a fixed steady-clock grid: tick N is due at t0 + N * interval, so a late tick never shifts later ones.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/frame.hpp"
#include "sources/source.hpp"

namespace wattscope {

// Pure schedule arithmetic, testable without sleeping.
class GridSchedule {
public:
  GridSchedule(SteadyClock::time_point t0, std::chrono::nanoseconds interval) : t0_(t0), interval_(interval) {}
  SteadyClock::time_point due(int64_t slot) const { return t0_ + interval_ * slot; }
  // The slot to run after `done` finished at `now`: done+1 when it is still ahead (wait for it); otherwise the latest
  // slot already due, so a stall skips the slots it missed instead of firing a burst of catch-up ticks.
  int64_t next_slot(int64_t done, SteadyClock::time_point now) const;

private:
  SteadyClock::time_point t0_;
  std::chrono::nanoseconds interval_;
};

struct SamplerStats {
  std::atomic<int64_t> ticks{0};
  std::atomic<int64_t> skipped{0};      // grid slots missed because a tick overran
  std::atomic<int64_t> last_tick_ns{0}; // CPU-side duration of the latest tick (sources + hand-off)
  std::atomic<int64_t> total_tick_ns{0};
};

class Sampler {
public:
  using FrameHandler = std::function<void(Frame&)>;
  Sampler(std::vector<Source*> sources, std::chrono::nanoseconds interval, FrameHandler on_frame);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  void start(); // first tick at once
  void stop();  // lets the tick in progress finish, then joins
  const SamplerStats& stats() const { return stats_; }
  std::chrono::nanoseconds interval() const { return interval_; }

private:
  void loop();
  std::vector<Source*> sources_;
  std::chrono::nanoseconds interval_;
  FrameHandler on_frame_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  SamplerStats stats_;
};

} // namespace wattscope
