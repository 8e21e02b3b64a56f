// What `serve` answers from: the latest frame and a bounded, compact in-memory history, fed by the sampler. No HTTP
// request ever reaches NVML or sysfs (DCGM's watch-table idea): a scrape or a page view only reads this.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/frame.hpp"
#include "core/schema.hpp"
#include "sampler/sampler.hpp"

namespace wattscope {

class LiveState {
public:
  // retain: how much history to keep; at most kMaxPoints points are kept (older frames decimated on the way in).
  LiveState(std::chrono::nanoseconds retain, std::chrono::nanoseconds interval);

  void set_run(const RunInfo& run, std::vector<GpuDevice> devices);
  void set_sampler(const SamplerStats* stats) { sampler_ = stats; }
  // From the sampler thread, after accounting: never blocks for long.
  void push(const std::shared_ptr<const Frame>& frame);
  void stop(); // wakes every waiting event stream

  std::shared_ptr<const Frame> latest() const;
  // Blocks until a frame newer than `after_seq` arrives, the timeout passes, or stop(). Returns {frame, seq}.
  std::pair<std::shared_ptr<const Frame>, uint64_t> wait_next(uint64_t after_seq, std::chrono::milliseconds timeout);
  bool stopped() const;

  nlohmann::json current_json() const;
  // Points in [now - range, now], averaged into `step` buckets (peak power kept alongside).
  nlohmann::json history_json(std::chrono::nanoseconds range, std::chrono::nanoseconds step) const;
  std::string metrics_text() const; // Prometheus text exposition format 0.0.4

  const RunInfo& run() const { return run_; }
  const std::vector<GpuDevice>& devices() const { return devices_; }
  static constexpr size_t kMaxPoints = 200'000;

private:
  // A compact history point: the CPU metrics flagged kHistory in the registry, then per GPU the GPU ones.
  size_t width() const;

  // Two locks, so no reader waits for another's work: mu_ guards the latest frame, devices, run and events (what
  // /metrics, /api/v1/current and the event streams read, briefly); ring_mu_ guards the history ring, which
  // /api/v1/history aggregates for milliseconds. A history request therefore never holds up a scrape. push() takes
  // them one after the other, never both at once.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  mutable std::mutex ring_mu_;
  std::vector<int> ring_gpus_; // gpu_index of each GPU column group in the ring, fixed by set_run
  bool stop_ = false;
  RunInfo run_;
  std::vector<GpuDevice> devices_;
  const SamplerStats* sampler_ = nullptr;
  std::shared_ptr<const Frame> latest_;
  uint64_t seq_ = 0;
  std::deque<Event> recent_events_;
  size_t stride_ = 1; // keep one frame in `stride_` (constant after construction)
  std::deque<int64_t> ts_;
  std::deque<float> values_;
  size_t capacity_;
};

} // namespace wattscope
