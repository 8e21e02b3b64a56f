// The advice's inputs from a stored run (`advise`, `show --json`, the report, the run summary) and from serve's frames
// (LiveAdvice: serve's live history, cached, recomputed at most every few seconds and never per request).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
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

// The advice's input built from stored rows as they stream by (gpu_devices, gpu_samples and cpu_samples rows, in any
// order of tables): the run model feeds it during the one pass it makes over a run's samples.
//
// Its memory is bounded: once a series holds kMaxPoints, every series is cut into steps twice as long as needed to
// hold it, on one grid from the run's start (so a GPU's step and the CPU's end together), and each step's samples are
// merged into one point (Input::step_ms). A run of length T is read in steps of T/kMaxPoints to 2T/kMaxPoints (a day:
// 11-21 s, a week: 1.2-2.5 min) in the same few MiB; a run of up to kMaxPoints samples a series, sample by sample.
class InputBuilder {
public:
  static constexpr size_t kMaxPoints = 8192;
  static_assert(kMaxPoints >= 1000 && kMaxPoints < 1000000, "advice_step_text writes it as N,NNN");

  explicit InputBuilder(const RunInfo& run);
  void device(std::span<const Value> gpu_devices_row);
  void gpu(std::span<const Value> gpu_samples_row);
  void cpu(std::span<const Value> cpu_samples_row);
  Input finish() &&;

private:
  template <class Point> void add(std::vector<Point>& points, const Point& p);
  template <class Point> void compact(std::vector<Point>& points) const;
  void coarsen();
  bool same_step(int64_t a_ms, int64_t b_ms) const;
  bool plausible(int64_t ts_ms) const;

  const RunInfo& run_;
  std::map<int, GpuSeries> by_index_;
  int64_t step_ms_ = 0; // 0: every sample its own point
  Input in_;
};

// The run's GPU and CPU series, read from the store (only read).
Input load_input(StoreReader& store, const RunInfo& run);

// The advice of a stored run; an empty list when it has no samples.
std::vector<Item> advise_run(StoreReader& store, const RunInfo& run);

// The run summary's advice (run and record): the top three, or "" when there is none.
std::string summary_text(StoreReader& store, const RunInfo& run);
std::string summary_text(const std::vector<Item>& items, const std::string& run_id);

// serve: the advice over the latest frames, recomputed when asked and older than kRecomputeEvery. It keeps no frames
// (issue 12): `source` copies the window out of serve's history when a recomputation is due (serve: the last hour of
// LiveState's fine ring, LiveState::advice_input), so a frame costs the advice nothing and the last hour is kept once.
class LiveAdvice {
public:
  static constexpr std::chrono::seconds kRecomputeEvery{10};

  explicit LiveAdvice(std::function<Input()> source) : source_(std::move(source)) {}
  // {"window": {"from", "to", "frames"}, "advice": [...]}; from the cache when it is fresh.
  nlohmann::json json();

private:
  const std::function<Input()> source_;
  std::mutex cache_mu_; // one computation at a time; requests in the meantime wait for its answer
  nlohmann::json cache_;
  std::chrono::steady_clock::time_point computed_{};
};

} // namespace wattscope::advice
