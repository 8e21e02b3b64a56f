// issue 33: cost-aware reads for the vendor GPU sources (ROCm SMI, Level Zero; NVML keeps its own copy of the same
// rule inside NvmlSource). Each per-tick call's cost is the quickest of kTimedReads timed reads, timed again every
// recheck period, since a driver update or a GPU under load can change it. A call costing more than the budget
// (--max-read-cost) is read at most once its period; the ticks between carry its last value with its age (age_ms).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "core/frame.hpp"
#include "core/instrumented.hpp"
#include "core/metrics.hpp"

namespace wattscope {

struct ReadCostOptions {
  // 0: every call every tick. An instrumented build's budget is kInstrumentedCostFactor times this, as NVML's
  // (core/instrumented.hpp): its own calls cost that much more.
  std::chrono::nanoseconds max_read_cost = std::chrono::microseconds(50 * kInstrumentedCostFactor);
  std::chrono::nanoseconds costly_period = std::chrono::seconds(1);
  std::chrono::nanoseconds recheck_period = std::chrono::seconds(30);
};

// One call's measured cost and its schedule on one device.
struct ReadCost {
  static constexpr int kTimedReads = 5;
  int timed = 0;                                                    // reads timed in the current round
  std::chrono::nanoseconds least = std::chrono::nanoseconds::max(); // the quickest of the round
  std::chrono::nanoseconds measured{-1};                            // the last round's; -1 before the first
  std::chrono::nanoseconds period{0};                               // 0: every tick; else at most once this often
  SteadyClock::time_point next{}, last{}, recheck{};

  bool due(SteadyClock::time_point now) const { return period.count() <= 0 || now >= next; }
  bool timing() const { return timed < kTimedReads; }
  // A timed read's cost. Returns true when a round ends and the call's period changed; `natural` is how often the
  // call is read when it is over the budget.
  bool time(std::chrono::nanoseconds took, SteadyClock::time_point now, const ReadCostOptions& o,
            std::chrono::nanoseconds natural) {
    least = std::min(least, took);
    if (++timed < kTimedReads) return false;
    measured = least;
    recheck = now + o.recheck_period;
    const bool costly = o.max_read_cost.count() > 0 && measured > o.max_read_cost;
    const auto p = costly ? natural : std::chrono::nanoseconds{0};
    if (p == period) return false;
    period = p;
    return true;
  }
  // After a successful read at `now`: when the next one is due, and a new timing round once the recheck is reached.
  void read_at(SteadyClock::time_point now) {
    if (now >= recheck && timed >= kTimedReads) {
      timed = 0;
      least = std::chrono::nanoseconds::max();
    }
    last = now;
    next = now + period * 9 / 10; // less a tenth for jitter: ticks a period apart read it every time
  }
};

// The registry members a call fills, kept from its last read...
inline void hold_metrics(GpuSample& held, GpuMetricSet fills, const GpuSample& s) {
  for (size_t i = 0; i < kGpuMetrics.size(); ++i) {
    if (!(fills & (GpuMetricSet{1} << i))) continue;
    const auto& m = kGpuMetrics[i];
    if (m.real)
      held.*m.real = s.*m.real;
    else
      held.*m.integer = s.*m.integer;
  }
  if (fills & metric_bit(GpuMetric::power_w)) held.power_source = s.power_source;
}

// ...and carried over the ticks it is not read, each with that read's age. A member another call filled this tick
// is left as it is.
inline void carry_metrics(const GpuSample& held, GpuMetricSet fills, SteadyClock::time_point read_at,
                          SteadyClock::time_point now, GpuSample& s) {
  const auto age = static_cast<int32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now - read_at).count());
  for (size_t i = 0; i < kGpuMetrics.size(); ++i) {
    if (!(fills & (GpuMetricSet{1} << i))) continue;
    const auto& m = kGpuMetrics[i];
    if (m.real) {
      if (s.*m.real || !(held.*m.real)) continue;
      s.*m.real = held.*m.real;
    } else {
      if (s.*m.integer || !(held.*m.integer)) continue;
      s.*m.integer = held.*m.integer;
    }
    if (i == static_cast<size_t>(GpuMetric::power_w)) s.power_source = held.power_source;
    s.age_ms.emplace_back(static_cast<uint16_t>(i), age);
  }
}

} // namespace wattscope
