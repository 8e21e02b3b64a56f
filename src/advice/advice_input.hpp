// The advice's inputs from a stored run (`advise`, `show --json`, the report, the run summary) and from serve's frames
// (LiveAdvice: the live history, cached, recomputed at most every few seconds and never per request).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "advice/advice.hpp"
#include "core/frame.hpp"
#include "core/schema.hpp"
#include "sinks/sink.hpp"

namespace wattscope::advice {

// One GPU sample and the CPU's at the same tick, as the estimators want them.
GpuPoint gpu_point(int64_t ts_ms, const GpuSample& s);
CpuPoint cpu_point(int64_t ts_ms, const CpuSample& s);

// The run's GPU and CPU series, read from the store (only read).
Input load_input(StoreReader& store, const RunInfo& run);

// The advice of a stored run; an empty list when it has no samples.
std::vector<Item> advise_run(StoreReader& store, const RunInfo& run);

// The run summary's advice (run and record): the top three, or "" when there is none.
std::string summary_text(StoreReader& store, const RunInfo& run);

// serve: a bounded window of the latest frames (kWindowFrames), fed on the sampler thread (push is an append under a
// short lock), and the advice over it, recomputed when asked and older than kRecomputeEvery.
class LiveAdvice {
public:
  // An hour at serve's default 1 s interval: long enough for a training loop's pattern, bounded in memory
  // (8 GPUs: about 4 MB).
  static constexpr size_t kWindowFrames = 3600;
  static constexpr std::chrono::seconds kRecomputeEvery{10};

  void set_devices(const std::vector<GpuDevice>& devices);
  void push(const Frame& frame);
  // {"window": {"from", "to", "frames"}, "advice": [...]}; from the cache when it is fresh.
  nlohmann::json json();

private:
  struct Tick {
    CpuPoint cpu;
    std::vector<GpuPoint> gpus; // with gpu_index in gpu_index_
    std::vector<int> gpu_index;
  };
  std::mutex mu_; // guards devices_ and frames_, held only to append or copy
  std::vector<GpuDevice> devices_;
  std::deque<Tick> frames_;
  std::mutex cache_mu_; // one computation at a time; requests in the meantime wait for its answer
  nlohmann::json cache_;
  std::chrono::steady_clock::time_point computed_{};
};

} // namespace wattscope::advice
