#include "sampler/sampler.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/thread_name.hpp"
#include "core/time_util.hpp"

namespace wattscope {

using namespace std::chrono_literals;

namespace {
constexpr size_t kMaxHeldReadings = 1024; // issue 33: per worker, between two ticks
} // namespace

int64_t GridSchedule::next_slot(int64_t done, SteadyClock::time_point now) const {
  if (now < t0_) return done + 1;
  int64_t latest_due = (now - t0_) / interval_;
  return latest_due > done ? latest_due : done + 1;
}

std::chrono::nanoseconds source_deadline(std::chrono::nanoseconds interval) {
  return std::clamp<std::chrono::nanoseconds>(interval * 3 / 4, 250ms, 1s);
}

// What wakes the sampler between ticks: the run's stop, and readings a caller waits on (hand_over_readings_soon).
struct Sampler::Bell {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false; // guarded by mu
  bool rung = false; // guarded by mu: readings to hand over
  std::atomic<int64_t> prompt_until_ns{0};
  void ring() {
    {
      std::lock_guard lock(mu);
      rung = true;
    }
    cv.notify_all();
  }
  bool prompt() const {
    return SteadyClock::now().time_since_epoch().count() < prompt_until_ns.load(std::memory_order_relaxed);
  }
};

// One source that may block, on its own thread. The scratch frame belongs to the worker while `requested || busy`
// and to the sampler otherwise; the worker writes only its gpus and events, so merging them is an append.
struct Sampler::Worker {
  std::shared_ptr<Source> source;
  std::mutex mu;
  std::condition_variable wake; // sampler -> worker: a tick is asked for, or quit
  std::condition_variable done; // worker -> sampler: the tick asked for is filled
  bool requested = false;       // guarded by mu
  bool probe = false;           // guarded by mu: the tick asked for is a probe (adaptive sampling), not a sample
  bool busy = false;            // guarded by mu: inside source->sample()
  bool quit = false;            // guarded by mu
  bool ready = false;           // guarded by mu: the thread runs and waits for its first tick
  // issue 33: an off-grid reading of the energy counters is asked for (reading_wanted), being taken (reading_busy, not
  // `busy`: a tick asked meanwhile is queued behind it, not treated as late), and taken (readings, for the next tick).
  bool reading_wanted = false;             // guarded by mu
  bool reading_busy = false;               // guarded by mu
  SteadyClock::time_point reading_asked{}; // guarded by mu: the edge the wanted reading is for
  bool reading_steps = false;              // guarded by mu: a reading in steps is under way
  SteadyClock::time_point serving_for{};   // guarded by mu: the edge of the reading under way
  std::vector<CounterReading> readings;    // guarded by mu
  std::shared_ptr<Bell> bell;              // set before the thread starts
  Frame scratch;
  // Sampler thread only.
  bool asked = false;    // asked on this tick
  bool unmerged = false; // asked on an earlier tick, answered after its deadline: the samples are stale
  int64_t late_since = -1;
  SteadyClock::time_point late_mono{};
  std::thread thread;
};

Sampler::Sampler(std::vector<std::shared_ptr<Source>> sources, std::chrono::nanoseconds interval, FrameHandler on_frame,
                 AdaptiveOptions adaptive, size_t gpus)
    : interval_(interval), on_frame_(std::move(on_frame)), adaptive_(adaptive), gpus_(gpus),
      bell_(std::make_shared<Bell>()) {
  for (auto& s : sources) {
    if (s->may_block()) {
      auto w = std::make_shared<Worker>();
      w->source = std::move(s);
      workers_.push_back(std::move(w));
    } else {
      inline_.push_back(std::move(s));
    }
  }
}

Sampler::~Sampler() {
  stop();
}

void Sampler::start_worker(const std::shared_ptr<Worker>& w) {
  // The thread holds the worker (and through it the source): a detached thread never outlives what it uses.
  w->bell = bell_;
  w->thread = std::thread([w] {
    name_this_thread("ws-" + std::string(w->source->name()));
    std::unique_lock lock(w->mu);
    w->ready = true;
    w->done.notify_all();
    std::vector<CounterReading> got;
    // issue 33: a reading in steps (the source's next one due then), for the edge marked at `step_for`; ticks asked
    // meanwhile are taken between the steps.
    std::optional<SteadyClock::time_point> step_at;
    SteadyClock::time_point step_for{};
    for (;;) {
      const auto asked = [&] { return w->requested || w->quit || (!step_at && w->reading_wanted); };
      if (step_at)
        w->wake.wait_until(lock, *step_at, asked);
      else
        w->wake.wait(lock, asked);
      if (w->quit) return;
      if (!w->requested) { // issue 33: a reading at a phase's edge, between ticks
        if (!step_at) {
          w->reading_wanted = false;
          step_for = w->reading_asked;
          w->serving_for = step_for;
        } else if (SteadyClock::now() < *step_at) {
          continue; // woken early, with nothing to do
        }
        w->reading_busy = true;
        lock.unlock();
        got.clear();
        step_at = w->source->read_energy_counters(got, step_for);
        lock.lock();
        w->reading_busy = false;
        w->reading_steps = step_at.has_value();
        // Bounded whatever the asker does: the sampler takes them every tick; past the bound they are dropped (the
        // phase's edge is then interpolated between ticks, as without readings).
        if (w->readings.size() + got.size() <= kMaxHeldReadings)
          w->readings.insert(w->readings.end(), got.begin(), got.end());
        if (!got.empty() && !step_at && w->bell->prompt()) { // someone waits on it: handed over now
          lock.unlock();
          w->bell->ring();
          lock.lock();
        }
        continue; // nobody waits on it: a tick asked meanwhile is taken next
      }
      w->requested = false;
      w->busy = true;
      const bool probe = w->probe;
      lock.unlock();
      if (probe)
        w->source->probe(w->scratch);
      else
        w->source->sample(w->scratch);
      lock.lock();
      w->busy = false;
      // Told after the lock is let go: the sampler, woken while it is held, would block on it at once, a second
      // wake-up and two more futex calls every tick (issue 12). The thread holds `w`, so it outlives the notify.
      lock.unlock();
      w->done.notify_all();
      lock.lock();
    }
  });
}

void Sampler::adopt(std::shared_ptr<Source> source) {
  std::lock_guard lock(mu_);
  if (!stop_) adopted_.push_back(std::move(source));
}

// Sampler thread, before a tick: the workers list is the sampler thread's own once it runs.
void Sampler::take_adopted() {
  std::vector<std::shared_ptr<Source>> taken;
  {
    std::lock_guard lock(mu_);
    if (adopted_.empty()) return;
    taken.swap(adopted_);
  }
  for (auto& s : taken) {
    if (!s->may_block()) {
      inline_.push_back(std::move(s));
      continue;
    }
    auto w = std::make_shared<Worker>();
    w->source = std::move(s);
    start_worker(w);
    if (w->source->reads_energy_counters()) {
      std::lock_guard lock(mu_);
      counter_workers_.push_back(w);
    }
    workers_.push_back(std::move(w));
  }
}

bool Sampler::request_counter_reading(SteadyClock::time_point at) {
  std::vector<std::shared_ptr<Worker>> asked;
  {
    std::lock_guard lock(mu_);
    if (stop_) return false;
    asked = counter_workers_;
  }
  bool any = false;
  for (auto& w : asked) {
    {
      std::lock_guard lock(w->mu);
      if (w->quit || w->reading_wanted) continue;
      w->reading_wanted = true;
      w->reading_asked = at;
    }
    any = true;
    w->wake.notify_one();
  }
  return any;
}

void Sampler::hand_over_readings_soon() {
  const auto until = SteadyClock::now() + std::chrono::seconds(1);
  bell_->prompt_until_ns.store(until.time_since_epoch().count(), std::memory_order_relaxed);
  bell_->ring();
}

void Sampler::hand_over_readings() {
  if (!readings_handler_) return; // nobody takes them between ticks: they travel with the next frame
  std::vector<std::shared_ptr<Worker>> workers;
  {
    std::lock_guard lock(mu_);
    workers = counter_workers_;
  }
  std::vector<CounterReading> got;
  for (auto& w : workers) {
    std::lock_guard lock(w->mu);
    got.insert(got.end(), w->readings.begin(), w->readings.end());
    w->readings.clear();
  }
  counter_readings_.fetch_add(static_cast<int64_t>(got.size()), std::memory_order_relaxed);
  try {
    readings_handler_(got);
  } catch (const std::exception& e) {
    spdlog::error("readings between ticks: {}", e.what()); // the sampling loop never throws (STYLE 14)
  }
}

SteadyClock::time_point Sampler::counter_readings_served() const {
  std::vector<std::shared_ptr<Worker>> workers;
  {
    std::lock_guard lock(mu_);
    workers = counter_workers_;
  }
  auto served = SteadyClock::time_point::max();
  const auto before = [](SteadyClock::time_point t) { return t - SteadyClock::duration(1); };
  for (auto& w : workers) {
    std::lock_guard lock(w->mu);
    if (w->quit) continue;
    if (w->reading_wanted)
      served = std::min(served, before(std::min(w->reading_asked, w->serving_for)));
    else if (w->reading_busy || w->reading_steps || !w->readings.empty())
      served = std::min(served, before(w->serving_for));
  }
  return served;
}

void Sampler::start() {
  for (auto& w : workers_) {
    start_worker(w);
    if (w->source->reads_energy_counters()) {
      std::lock_guard lock(mu_);
      counter_workers_.push_back(w);
    }
  }
  // Tick 0 waits until every worker runs: a thread still being created on a loaded machine reads its device late,
  // and the energy counter's first reading with it (in one loaded run the counter and the power integral parted by
  // 1 % over 2 s at 300 W, as if the first reading came ~27 ms after the tick's time).
  for (auto& w : workers_) {
    std::unique_lock lock(w->mu);
    w->done.wait_for(lock, std::chrono::seconds(1), [&] { return w->ready; });
  }
  thread_ = std::thread([this] {
    name_this_thread("ws-sampler");
    loop();
  });
}

bool Sampler::wait_for_counter_readings(SteadyClock::time_point until) {
  std::vector<std::shared_ptr<Worker>> workers;
  {
    std::lock_guard lock(mu_);
    workers = counter_workers_;
  }
  bool held = false;
  for (auto& w : workers)
    for (;;) {
      {
        std::lock_guard lock(w->mu);
        if (w->quit || !(w->reading_wanted || w->reading_busy || w->reading_steps)) {
          held = held || !w->readings.empty();
          break;
        }
      }
      if (SteadyClock::now() >= until) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  return held;
}

void Sampler::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  {
    std::lock_guard lock(bell_->mu);
    bell_->stop = true;
  }
  bell_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& w : workers_) {
    bool busy = false;
    {
      std::lock_guard lock(w->mu);
      w->quit = true;
      busy = w->busy || w->reading_busy;
    }
    w->wake.notify_all();
    if (!w->thread.joinable()) continue;
    if (busy) {
      // Waiting would hand the stall to the end of the run: the call's result could not be used anyway.
      spdlog::warn("{} is still inside a driver call at the end of the run; not waiting for it", w->source->name());
      w->thread.detach();
    } else {
      w->thread.join();
    }
  }
}

void Sampler::ask(Worker& w, Frame& frame, bool probe) {
  std::unique_lock lock(w.mu);
  w.asked = !(w.requested || w.busy); // still inside an earlier tick's call: not asked again
  if (!w.asked) return;
  if (w.unmerged) {
    // Answered after its deadline: its samples belong to a tick already handed off and are dropped (missing, never a
    // late repeat); its events (a device lost, say) are still news.
    for (auto& e : w.scratch.events)
      frame.events.push_back(std::move(e));
  }
  w.scratch.tick = frame.tick;
  w.scratch.ts_ms = frame.ts_ms;
  w.scratch.mono = frame.mono;
  w.scratch.last = frame.last; // issue 33: a source on a worker reads its scheduled values on the run's last sample
  w.scratch.gpus.clear();      // keeps its capacity: a tick on time allocates nothing here
  w.scratch.migs.clear();      // issue 17: MIG instances (NVML), merged like the GPUs
  w.scratch.events.clear();
  w.requested = true;
  w.probe = probe;
  w.unmerged = true;
  lock.unlock();
  w.wake.notify_one();
}

void Sampler::collect(Worker& w, Frame& frame, SteadyClock::time_point deadline) {
  const std::string_view name = w.source->name();
  if (!w.asked) {
    stats_.late.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::unique_lock lock(w.mu);
  if (!w.done.wait_until(lock, deadline, [&] { return !w.requested && !w.busy; })) {
    lock.unlock();
    stats_.late.fetch_add(1, std::memory_order_relaxed);
    if (w.late_since < 0) { // one event per episode, not one per tick while it stays hung
      w.late_since = frame.tick;
      w.late_mono = frame.mono;
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - frame.mono).count();
      std::string detail = fmt::format("{} did not answer within {} ms; its devices are missing from tick {} until it "
                                       "answers on time again",
                                       name, ms, frame.tick);
      spdlog::warn("{}", detail);
      frame.events.push_back({0, frame.ts_ms, "source-late", std::string(name), std::move(detail)});
    }
    return;
  }
  // issue 33: the counters read at phase edges since the last tick (the tick waited for a read in progress)
  if (!w.readings.empty()) {
    counter_readings_.fetch_add(static_cast<int64_t>(w.readings.size()), std::memory_order_relaxed);
    frame.counter_readings.insert(frame.counter_readings.end(), w.readings.begin(), w.readings.end());
    w.readings.clear();
  }
  lock.unlock(); // the scratch is the sampler's again
  w.unmerged = false;
  frame.gpus.insert(frame.gpus.end(), w.scratch.gpus.begin(), w.scratch.gpus.end());
  frame.migs.insert(frame.migs.end(), w.scratch.migs.begin(), w.scratch.migs.end()); // issue 17
  for (auto& e : w.scratch.events)
    frame.events.push_back(std::move(e));
  if (w.late_since >= 0) {
    const double gap_s = std::chrono::duration<double>(frame.mono - w.late_mono).count();
    std::string detail = fmt::format("{} answers on time again; its devices were missing from tick {} to tick {} "
                                     "({:.1f} s); energy counters span the gap",
                                     name, w.late_since, frame.tick - 1, gap_s);
    spdlog::info("{}", detail);
    frame.events.push_back({0, frame.ts_ms, "source-recovered", std::string(name), std::move(detail)});
    w.late_since = -1;
  }
}

void Sampler::gather(Frame& frame, bool probe, SteadyClock::time_point deadline) {
  const size_t before = frame.gpus.size();
  // Workers first, so they run while the inline sources read procfs and sysfs.
  for (auto& w : workers_)
    ask(*w, frame, probe);
  for (auto& s : inline_) {
    if (probe)
      s->probe(frame);
    else
      s->sample(frame);
  }
  const size_t inline_gpus = frame.gpus.size();
  for (auto& w : workers_)
    collect(*w, frame, deadline);
  // Devices in index order whatever thread sampled them (indices are unique within a frame).
  if (inline_gpus > before && frame.gpus.size() > inline_gpus)
    std::sort(frame.gpus.begin(), frame.gpus.end(),
              [](const GpuSample& a, const GpuSample& b) { return a.gpu_index < b.gpu_index; });
}

namespace {
std::string seconds_text(std::chrono::nanoseconds d) {
  return fmt::format("{:g} s", std::chrono::duration<double>(d).count());
}
} // namespace

bool Sampler::final_read_wanted() const { // issue 33
  for (const auto& s : inline_)
    if (s->wants_final_read()) return true;
  for (const auto& w : workers_)
    if (w->source->wants_final_read()) return true;
  return false;
}

void Sampler::loop() {
  GridSchedule grid(SteadyClock::now(), interval_); // anchored on tick 0's own time below
  const auto wait_for_sources = source_deadline(interval_);
  // Adaptive sampling (issue 18): the grid stays at --interval; while idle, most of its slots only probe.
  const bool adaptive = adaptive_.enabled();
  IdleSchedule idle(adaptive_, interval_);
  ActivityRule rule(gpus_, cpu_scope_);
  stats_.interval_ns.store(interval_.count(), std::memory_order_relaxed);
  int64_t probes_since_full = 0;
  SteadyClock::time_point last_full{};
  std::string why;
  bool stopping = false;
  int64_t slot = 0;
  for (;;) {
    if (slot > 0) { // tick 0 is taken whatever happens: every run has at least its starting sample
      const auto due = grid.due(slot);
      for (;;) {
        bool rung = false;
        {
          std::unique_lock lock(bell_->mu);
          // wait_until on steady_clock uses pthread_cond_clockwait: immune to wall-clock jumps.
          bell_->cv.wait_until(lock, due, [this] { return bell_->stop || bell_->rung; });
          stopping = bell_->stop;
          rung = bell_->rung;
          bell_->rung = false;
        }
        // Readings someone waits on, between ticks; the tick itself takes those that come as it is due.
        if (stopping || !rung || SteadyClock::now() >= due) break;
        hand_over_readings();
      }
      // issue 33: the run's last phase edge is read before its last sample (a reading in steps takes up to a period
      // of the counter and the read; bounded), and a reading held makes that sample, however recent the last one
      bool readings_held = false;
      if (stopping) readings_held = wait_for_counter_readings(SteadyClock::now() + kFinalReadingWait);
      // A run ends with one last full sample, now: its energy counters and the integrals close at the end of the
      // run, not up to an interval (or an idle interval) before it. Without it, a 7 s run at --interval 5s stored
      // 5 s of energy, and a phase after the last tick got none (issue 29: phases must add up to the run). Skipped
      // only when the last full sample ended so recently that it already is the end.
      if (stopping && probes_since_full == 0 && SteadyClock::now() - last_full < kFinalSampleAfter &&
          !final_read_wanted() && !readings_held)
        break;
    }
    take_adopted();
    const auto started = SteadyClock::now();
    // The grid starts at tick 0's own time (frame.mono), not at the thread's start before it: a thread preempted in
    // between (over 1 ms under ASan) would put every later tick that much before tick 0's time plus its slots.
    if (slot == 0) grid = GridSchedule(started, interval_);
    Frame frame;
    frame.tick = slot;
    frame.mono = started;
    frame.ts_ms = wall_now_ms();
    frame.last = stopping; // the last full sample of a run, at its end
    const auto deadline = started + (slot == 0 ? std::max(wait_for_sources, kFirstTickDeadline) : wait_for_sources);
    bool full = stopping || idle.full_due(slot);
    bool quiet = true;
    why.clear();
    if (!full) {
      gather(frame, /*probe=*/true, deadline);
      quiet = rule.quiet(frame, &why, idle.idle());
      if (quiet && !frame.events.empty()) { // a device lost or failing is news: stored now, at full rate
        quiet = false;
        why = fmt::format("{} {}", frame.events.front().kind, frame.events.front().source);
      }
      if (quiet && activity_hint_ && activity_hint_()) {
        quiet = false;
        why = "markers arrived";
      }
      if (!quiet) {
        // The tick that saw activity is stored in full. The probe's GPU readings give way to the full ones; its
        // CPU reading and its events stay (the CPU source does not read /proc/stat twice in one tick).
        frame.gpus.clear();
        full = true;
        gather(frame, /*probe=*/false, std::max(deadline, SteadyClock::now() + wait_for_sources));
      }
    } else {
      gather(frame, /*probe=*/false, deadline);
      if (adaptive) quiet = rule.quiet(frame, idle.idle() ? &why : nullptr, idle.idle());
    }
    // The last sample of a run is no news about activity: it can come microseconds after the last probe, when
    // /proc/stat has not moved ("CPU utilisation unknown"), and a switch logged at the end would be a false one.
    if (adaptive && !stopping) {
      const auto change = idle.observe(slot, frame.mono, quiet, full);
      if (change != IdleSchedule::Switch::None) {
        const bool to_idle = change == IdleSchedule::Switch::ToIdle;
        std::string detail =
            to_idle ? fmt::format("interval {}: every GPU below {:g} % utilisation and the CPU within {:.2g} cores of "
                                  "its idle baseline ({:.2f} cores) for {}; full samples every {}, a probe (GPU "
                                  "utilisation, /proc/stat) every {}; back to full rate when a GPU reaches {:g} % or "
                                  "the CPU {:.2g} cores above the baseline. Energy counters span the gaps; devices "
                                  "integrated from power are integrated over {} steps",
                                  seconds_text(idle.interval_in_force()), kIdleGpuUtilPct,
                                  ActivityRule::cpu_margin_cores(frame.cpu.core_util_pct.size(), false),
                                  rule.baseline_cores().value_or(0), seconds_text(adaptive_.idle_after),
                                  seconds_text(idle.interval_in_force()), seconds_text(interval_), kIdleGpuUtilPct,
                                  ActivityRule::cpu_margin_cores(frame.cpu.core_util_pct.size(), true),
                                  seconds_text(idle.interval_in_force()))
                    : fmt::format("interval {}: {}; full samples every {} again", seconds_text(interval_), why,
                                  seconds_text(interval_));
        const char* kind = to_idle ? "sampling-idle" : "sampling-active";
        spdlog::info("{}: {}", kind, detail);
        frame.events.push_back({0, frame.ts_ms, kind, "sampler", std::move(detail)});
        stats_.interval_ns.store(idle.interval_in_force().count(), std::memory_order_relaxed);
      }
    }
    if (full) {
      frame.probe_ticks = probes_since_full;
      probes_since_full = 0;
      try {
        on_frame_(frame);
      } catch (const std::exception& e) {
        // The sampling loop never throws (STYLE 14); a failing hand-off is reported and the next tick goes on.
        spdlog::error("tick {}: {}", slot, e.what());
      }
    } else {
      ++probes_since_full;
      stats_.probe_ticks.fetch_add(1, std::memory_order_relaxed);
    }
    const auto finished = SteadyClock::now();
    if (full) last_full = finished;
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(finished - started).count();
    stats_.last_tick_ns.store(ns, std::memory_order_relaxed);
    stats_.total_tick_ns.fetch_add(ns, std::memory_order_relaxed);
    stats_.ticks.fetch_add(1, std::memory_order_relaxed);
    if (stopping) break;
    // Tick 0 makes every first read (the counters' baselines, calls timed for their cost: 22 ms for 8 H100 counters):
    // where that overran the interval, the grid starts again from its end rather than count the slots it took as
    // skipped.
    if (slot == 0 && finished - started > interval_) grid = GridSchedule(finished - interval_, interval_);
    const int64_t next = grid.next_slot(slot, finished);
    if (next > slot + 1) stats_.skipped.fetch_add(next - slot - 1, std::memory_order_relaxed);
    slot = next;
  }
}

} // namespace wattscope
