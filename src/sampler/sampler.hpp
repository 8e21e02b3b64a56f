// One thread on a fixed steady-clock grid: tick N is due at t0 + N * interval, so a late tick never shifts later ones.
//
// Sources that only read procfs/sysfs run inline on the sampler thread. A source that may block inside a vendor
// library (Source::may_block: NVML, and later ROCm SMI and Level Zero) runs on a worker thread of its own, woken once
// per tick and never otherwise. The tick waits for it until a deadline inside the tick (source_deadline); one still
// busy then leaves its devices out of that frame (missing, never 0 or a repeat) with one `source-late` event, is not
// asked again while it stays busy, and says `source-recovered` when it answers on time again. So a GPU that hangs the
// driver for seconds costs its own samples only: the CPU, RAPL and the other sources keep their schedule.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/frame.hpp"
#include "sampler/adaptive.hpp"
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

// How long a tick waits for a source that may block: three quarters of the interval, at least 250 ms, at most 1 s;
// tick 0 waits up to 2 s (the first answered tick settles each device's energy method). A source still busy is not
// waited for again, so the deadline is paid once per stall and can afford to be generous; and it must be, because a
// job that saturates every core delays thread wake-ups: under a load of 9 on 2 cores, a 50 ms deadline dropped 5 of
// 78 GPU samples of a healthy (fake) NVML at a 50 ms interval. At most 1 s: no healthy NVML tick takes that long,
// and past it the frame goes out for the live view. Below a 333 ms interval the first tick of a stall overruns and
// skips a few slots (2 at 100 ms) instead of the whole stall.
std::chrono::nanoseconds source_deadline(std::chrono::nanoseconds interval);
inline constexpr std::chrono::nanoseconds kFirstTickDeadline = std::chrono::seconds(2);
// A stop this soon after the last full sample ended takes no final one: that sample already is the run's end (a
// command that exits at once gets its starting sample only; 5 ms of a 700 W GPU is 3.5 J).
inline constexpr std::chrono::nanoseconds kFinalSampleAfter = std::chrono::milliseconds(5);

struct SamplerStats {
  std::atomic<int64_t> ticks{0};
  std::atomic<int64_t> skipped{0};      // grid slots missed because a tick overran
  std::atomic<int64_t> late{0};         // (source, tick) pairs left out because the source was still busy
  std::atomic<int64_t> last_tick_ns{0}; // CPU-side duration of the latest tick (sources + hand-off)
  std::atomic<int64_t> total_tick_ns{0};
  // Adaptive sampling (issue 18): the interval full samples are taken at now (--interval, or --idle-interval while
  // idle), and the ticks that only probed (counted in `ticks`, never handed on).
  std::atomic<int64_t> interval_ns{0};
  std::atomic<int64_t> probe_ticks{0};
};

class Sampler {
public:
  using FrameHandler = std::function<void(Frame&)>;
  // Shared ownership: a worker stuck in a driver call when the run ends is left behind (detached) and keeps its
  // source alive until the call returns, so nothing it touches is freed under it.
  // `adaptive` off: every tick is a full sample. On: `gpus` is how many GPUs the sources opened, all of which must
  // answer quiet for the machine to count as idle.
  Sampler(std::vector<std::shared_ptr<Source>> sources, std::chrono::nanoseconds interval, FrameHandler on_frame,
          AdaptiveOptions adaptive = {}, size_t gpus = 0);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Adaptive sampling (issue 18), before start(): asked on each probe tick; true (markers waiting to settle, say) takes
  // that tick in full and back to the full rate, as activity does.
  void set_activity_hint(std::function<bool()> hint) { activity_hint_ = std::move(hint); }
  // Adaptive sampling, before start() (issue 33): the CPU part of the activity rule judges this scope's busy cores
  // instead of the machine's (`run`: the command's processes). Called on the sampling thread.
  void set_cpu_scope(ActivityRule::ScopeCores scope) { cpu_scope_ = std::move(scope); }
  void start(); // first tick at once
  // Issue 31: a source opened after start() (a vendor library whose init ran beside the command). Thread-safe; it is
  // sampled from the next tick on, on a worker of its own if it may block.
  void adopt(std::shared_ptr<Source> source);
  // Issue 33, thread-safe (a phase's begin or end): each source that reads_energy_counters() reads them now, on its
  // worker, between ticks (a tick asked meanwhile waits for the read: at most one read per GPU, micro- to a few
  // milliseconds). The readings travel in the next frame (Frame::counter_readings). A worker busy inside a tick reads
  // after it; one stuck in the driver never does. The caller bounds how often it asks (PhaseTracker's edge gap and
  // budget).
  // `at`: when the edge was marked (a source whose counter moves on a period reads it just after the next update
  // and works the energy back to `at`, sources/counter_clock.hpp).
  // False when no reading was asked (every reader has one for an earlier edge still waiting to start, or none reads).
  bool request_counter_reading(SteadyClock::time_point at = SteadyClock::now());
  // Sampler thread (in the frame handler): the latest edge every reading asked up to has been handed over for, in
  // this frame or an earlier one; time_point::max() when none is under way.
  SteadyClock::time_point counter_readings_served() const;
  int64_t counter_readings() const { return counter_readings_.load(std::memory_order_relaxed); }
  // Before start(): readings taken between ticks may be handed over at once (on the sampler thread, between ticks)
  // rather than with the next frame, for a caller waiting on them (a measured window's end).
  using ReadingsHandler = std::function<void(std::vector<CounterReading>&)>;
  void set_readings_handler(ReadingsHandler h) { readings_handler_ = std::move(h); }
  // Thread-safe: for the next second, each reading is handed to the readings handler as soon as it is taken; the
  // handler is also called now (with what is already taken, or nothing).
  void hand_over_readings_soon();
  // Lets the tick in progress finish (bounded by its deadline), then joins. A worker still inside its source is not
  // waited for: it is detached and ends when the call returns.
  void stop();
  const SamplerStats& stats() const { return stats_; }
  std::chrono::nanoseconds interval() const { return interval_; }

private:
  struct Worker;
  struct Bell;
  void hand_over_readings(); // sampler thread, between ticks
  void loop();
  void start_worker(const std::shared_ptr<Worker>& w);
  void take_adopted();
  void ask(Worker& w, Frame& frame, bool probe);
  void collect(Worker& w, Frame& frame, SteadyClock::time_point deadline);
  // One round over every source: a full sample, or the probe (adaptive sampling).
  void gather(Frame& frame, bool probe, SteadyClock::time_point deadline);
  bool final_read_wanted() const; // issue 33: a source reads something on a schedule that the run must end on

  std::vector<std::shared_ptr<Source>> inline_;
  std::vector<std::shared_ptr<Worker>> workers_;
  std::chrono::nanoseconds interval_;
  FrameHandler on_frame_;
  AdaptiveOptions adaptive_;
  size_t gpus_ = 0;
  std::function<bool()> activity_hint_;
  ActivityRule::ScopeCores cpu_scope_;
  std::thread thread_;
  mutable std::mutex mu_;
  bool stop_ = false;
  std::vector<std::shared_ptr<Source>> adopted_; // guarded by mu_: sources to join at the next tick
  // issue 33: at the run's end, waits (until `until` at most) for the off-grid readings asked for or under way;
  // whether any is held for the next frame (or still under way)
  bool wait_for_counter_readings(SteadyClock::time_point until);
  static constexpr std::chrono::milliseconds kFinalReadingWait{500};
  std::vector<std::shared_ptr<Worker>> counter_workers_; // guarded by mu_: workers whose source reads_energy_counters()
  std::atomic<int64_t> counter_readings_{0};             // issue 33: off-grid readings taken (GPU reads)
  // What wakes the sampler between ticks (the run's stop, readings to hand over early), shared with the workers: a
  // worker left behind in a driver call may ring it after the sampler is gone.
  std::shared_ptr<Bell> bell_;
  ReadingsHandler readings_handler_;
  SamplerStats stats_;
};

} // namespace wattscope
