#include "phases/phase_tracker.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <spdlog/spdlog.h>

namespace wattscope {

namespace {
std::string gpu_key(int index) {
  return "gpu" + std::to_string(index);
}
} // namespace

namespace {
// How far from a marker a reading still counts as its known point: a counter period and a read of it
constexpr auto kNearReadings = std::chrono::milliseconds(150);
// How far after a marker a counter value may be made and still stand for a moment before it (a value held since the
// counter's last update): searched for those that bound the edge from both sides
constexpr auto kStraddleSpan = std::chrono::seconds(1);
constexpr double kInf = std::numeric_limits<double>::infinity();
double secs(std::chrono::nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}
} // namespace

void PhaseTracker::push(Marker m, int64_t ts_ms, SteadyClock::time_point at) {
  push(std::move(m), ts_ms, at, at);
}

void PhaseTracker::push(Marker m, int64_t ts_ms, SteadyClock::time_point at, SteadyClock::time_point arrived) {
  if (m.kind != Marker::Kind::Begin && m.kind != Marker::Kind::End && m.kind != Marker::Kind::Work) return;
  const bool phase = m.kind != Marker::Kind::Work;
  // An end whose sender waits: its readings are to be handed over as they come (after it is queued, whatever happens
  // below).
  struct Prompt {
    const std::function<void()>* hook = nullptr;
    ~Prompt() {
      if (hook && *hook) (*hook)();
    }
  } prompt{m.reply ? &prompt_hook_ : nullptr};
  // The reading is asked for the marker's own time; for one that came late it is read now (the power's integral back
  // to a time already past would rest on power not seen), and the marker is interpolated up to it.
  const SteadyClock::time_point edge = arrived - at > kLateMarker ? arrived : at;
  {
    std::lock_guard lock(mu_);
    // Begin and end may use the last kReservedForPhases places: a flood of work cannot push a phase's end out.
    const size_t limit = phase ? kMaxPending : kMaxPending - kReservedForPhases;
    if (pending_.size() + events_this_tick_ >= limit) {
      if (dropped_.total() == 0)
        spdlog::warn("markers arrive faster than wattscope settles them (more than {} for one tick); extra ones are "
                     "dropped and counted, and the run's work and phases are marked incomplete",
                     limit);
      (phase ? dropped_.phase : dropped_.work)++;
      return;
    }
    pending_.push_back({std::move(m), ts_ms, at, arrived, std::nullopt});
    if (!phase) return;
    // A reading per edge, within the edge gap and the budget; the phase markers refused are interpolated. One close
    // after the last edge asked for shares its reading, and waits for it.
    if (last_edge_ && edge >= *last_edge_ && edge - *last_edge_ < edge_gap_) {
      pending_.back().reading_for = *last_edge_;
      return;
    }
    if (edge_period_.count() > 0) {
      if (edge_refilled_ && edge > *edge_refilled_)
        edge_tokens_ =
            std::min<double>(edge_burst_, edge_tokens_ + std::chrono::duration<double>(edge - *edge_refilled_) /
                                                             std::chrono::duration<double>(edge_period_));
      if (!edge_refilled_ || edge > *edge_refilled_) edge_refilled_ = edge;
      if (edge_tokens_ < 1) return;
      edge_tokens_ -= 1;
    }
    last_edge_ = edge;
    ++edge_requests_;
    pending_.back().reading_for = edge;
  }
  if (!edge_hook_ || edge_hook_(edge)) return;
  std::lock_guard lock(mu_); // no reading was asked: nothing to wait for
  for (auto& p : pending_)
    if (p.reading_for == edge) p.reading_for.reset();
}

int64_t PhaseTracker::edge_requests() const {
  std::lock_guard lock(mu_);
  return edge_requests_;
}

bool PhaseTracker::admit_event_marker() {
  std::lock_guard lock(mu_);
  if (pending_.size() + events_this_tick_ >= kMaxPending - kReservedForPhases) {
    if (dropped_.total() == 0)
      spdlog::warn("markers arrive faster than wattscope settles them (more than {} for one tick); extra ones are "
                   "dropped and counted, and the run's work and phases are marked incomplete",
                   kMaxPending - kReservedForPhases);
    dropped_.points++;
    return false;
  }
  ++events_this_tick_;
  return true;
}

bool PhaseTracker::has_pending() const {
  if (unplaced_.load(std::memory_order_relaxed) > 0) return true;
  std::lock_guard lock(mu_);
  return !pending_.empty();
}

PhaseTracker::Dropped PhaseTracker::dropped_counts() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

namespace {
const char* kind_text(int k) {
  return k == 0 ? "reading" : k == 1 ? "interpolated" : "none";
}
} // namespace

void PhaseTracker::add_point(const std::string& device, Known k) {
  Line& line = lines_[device];
  line.any_hard = line.any_hard || k.hard;
  line.any_reading = line.any_reading || k.reading;
  auto& pts = line.pts;
  // Mostly in order (a tick after the last); a reading made in steps may stand for a time before the last tick.
  auto it = pts.end();
  while (it != pts.begin() && std::prev(it)->at > k.at)
    --it;
  pts.insert(it, k);
  if (pts.size() > kMaxPoints) pts.pop_front();
}

void PhaseTracker::add_reading(SteadyClock::time_point at, Energies energies) {
  for (auto& [device, e] : energies)
    add_point(device, {at, at, at, e, true, true, 0});
}

void PhaseTracker::add_gpu_reading(int gpu_index, SteadyClock::time_point at, double energy_j, double err_j,
                                   std::chrono::nanoseconds stale) {
  add_point(gpu_key(gpu_index), {at, at - stale, at, energy_j, err_j < 0, true, std::max(0.0, err_j)});
}

PhaseTracker::Edge PhaseTracker::edge_at(const Line& line, SteadyClock::time_point at, bool carry_on) const {
  using K = Edge::Kind;
  const auto& pts = line.pts;
  Edge out;
  if (pts.empty()) return out;
  // Where a device never gives a counter value (its energy is an estimate throughout), its estimates are its facts.
  const auto hard = [&](const Known& k) { return k.hard || !line.any_hard; };
  auto next = std::lower_bound(pts.begin(), pts.end(), at, [](const Known& k, auto t) { return k.at < t; });
  if (next == pts.begin()) { // before the device's first value: it counts from there (energy_j starts at 0)
    out.e = next->e;
    out.kind = next->reading && next->at - at <= kNearReadings ? K::reading : K::interpolated;
    return out;
  }
  auto prev = std::prev(next);
  // A reading soon after the marker is preferred to ticks between them (a tick's value may be older than its time).
  for (auto r = next; r != pts.end() && r->at - at <= kNearReadings; ++r)
    if (r->reading) {
      next = r;
      break;
    }
  bool used_reading = false;
  bool carried = false;
  double soft_err = kInf;
  if (next == pts.end()) {
    out.e = prev->e;                       // nothing after it yet: the last value, held
    if (carry_on && prev != pts.begin()) { // or carried on at its last rate (a window closed between ticks)
      const auto before = std::prev(prev);
      const double span = secs(prev->at - before->at);
      if (span > 0) out.e += std::max(0.0, (prev->e - before->e) / span) * secs(at - prev->at);
      carried = true;
    }
  } else {
    const double span = secs(next->at - prev->at);
    const double f = span > 0 ? secs(at - prev->at) / span : 1;
    out.e = prev->e + (next->e - prev->e) * f;
    // One made later, or whose value may be older than its read, is a point to interpolate to
    used_reading = next->reading && next->at - at <= kLateMarker && next->at - next->lo <= std::chrono::milliseconds(5);
    // A worked-out point at (almost) the marker's own time carries its own error.
    if (next->reading && !next->hard && next->at - at <= std::chrono::milliseconds(1)) soft_err = next->err_j;
    if (prev->reading && !prev->hard && at - prev->at <= std::chrono::milliseconds(1)) soft_err = prev->err_j;
  }
  // What the counter values around it make certain: E rises, and by no more than the device's cap per second.
  const Known* h0 = nullptr;
  const Known* h1 = nullptr;
  for (auto it = std::make_reverse_iterator(next == pts.end() ? pts.end() : std::next(next)); it != pts.rend(); ++it)
    if (hard(*it) && (it->hard ? it->hi : it->at) <= at) {
      h0 = &*it;
      break;
    }
  for (auto it = prev; it != pts.end(); ++it)
    if (hard(*it) && (it->hard ? it->lo : it->at) >= at) {
      h1 = &*it;
      break;
    }
  double lo = h0 ? h0->e : 0, hi = h1 ? h1->e : kInf;
  if (line.cap_w > 0) {
    if (h1) lo = std::max(lo, h1->e - line.cap_w * secs((h1->hard ? h1->hi : h1->at) - at));
    if (h0) hi = std::min(hi, h0->e + line.cap_w * secs(at - (h0->hard ? h0->lo : h0->at)));
    // A counter value whose moment lies on both sides of the edge (a reading of a counter that moves every 100 ms, its
    // updates' times not learnt) bounds it both ways by the cap over its span: without it, a phase at 100 ms stated a
    // bound of 126 % from the next anchor 5 s away.
    for (auto it = std::lower_bound(pts.begin(), pts.end(), at, [](const Known&k, auto t) { return k.at < t; });
         it != pts.end() && it->at - at <= kStraddleSpan; ++it)
      if (it->hard && it->lo < at && at < it->hi) {
        lo = std::max(lo, it->e - line.cap_w * secs(it->hi - at));
        hi = std::min(hi, it->e + line.cap_w * secs(at - it->lo));
      }
  }
  if (std::isfinite(soft_err) && out.e - soft_err <= hi && out.e + soft_err >= lo) {
    lo = std::max(lo, out.e - soft_err);
    hi = std::min(hi, out.e + soft_err);
  }
  if (lo <= hi) {
    out.e = std::clamp(out.e, lo, hi);
    out.bound_j = std::max(out.e - lo, hi - out.e);
  } else { // the facts disagree (a counter reset): say nothing certain
    out.bound_j = kInf;
  }
  out.kind = !h1 && line.any_hard ? K::none : used_reading ? K::reading : K::interpolated;
  if (next == pts.end()) out.kind = K::none;
  if (carried) out.kind = K::interpolated;
  return out;
}

std::map<std::string, PhaseTracker::Edge> PhaseTracker::edges_at(SteadyClock::time_point at, bool carry_on) const {
  std::map<std::string, Edge> out;
  for (const auto& [device, line] : lines_)
    if (!line.pts.empty()) out.emplace(device, edge_at(line, at, carry_on && !line.any_reading));
  return out;
}

std::pair<int64_t, int64_t> PhaseTracker::ticks_around(SteadyClock::time_point at) const {
  if (ticks_.empty()) return {0, 0};
  auto after = std::lower_bound(ticks_.begin(), ticks_.end(), at, [](const auto& t, auto a) { return t.second < a; });
  if (after == ticks_.end()) return {ticks_.back().first, ticks_.back().first};
  if (after->second == at || after == ticks_.begin()) return {after->first, after->first};
  return {std::prev(after)->first, after->first};
}

bool PhaseTracker::ready(const EdgeWait& e, SteadyClock::time_point now, SteadyClock::time_point served,
                         bool between_ticks) const {
  if (now - e.arrived >= kMaxEdgeWait) return true;
  if (now - e.arrived < hold_ || e.at > now) return false;
  if (e.reading_for && served < *e.reading_for) return false;
  bool any_read = false;
  for (const auto& [device, line] : lines_) {
    if (between_ticks && !line.any_reading) continue; // carried on to the edge (edges_at)
    bool after = false;
    for (auto it = line.pts.rbegin(); it != line.pts.rend() && !after; ++it) {
      if (it->at < e.at) break;
      after = (it->hard || !line.any_hard) && (it->hard ? it->lo : it->at) >= e.at;
    }
    if (!after) return false;
    any_read = true;
  }
  return any_read || !between_ticks;
}

void PhaseTracker::place(Frame& out, SteadyClock::time_point now, SteadyClock::time_point served, bool force) {
  const auto place_one = [&](EdgeWait& e, bool now_or_never) {
    if (e.edges || !(now_or_never || ready(e, now, served))) return;
    if (force && last_tick_mono_ && e.at > *last_tick_mono_) e.at = *last_tick_mono_; // the run's total ends there
    e.edges = edges_at(e.at);
  };
  // A bound whatever the markers' rate while a device is away: past kMaxPending phases waiting, the oldest are placed
  // with what is known.
  size_t crowded = closing_.size() > kMaxPending ? closing_.size() - kMaxPending : 0;
  int64_t unplaced = 0;
  for (auto& o : open_) {
    place_one(o.start, force);
    unplaced += o.start.edges ? 0 : 1;
  }
  for (auto it = closing_.begin(); it != closing_.end();) {
    const bool now_or_never = force || crowded > 0;
    crowded -= crowded > 0 ? 1 : 0;
    place_one(it->o.start, now_or_never);
    place_one(it->end, now_or_never);
    if (it->o.start.edges && it->end.edges) {
      close(*it, out);
      it = closing_.erase(it);
    } else {
      unplaced += (it->o.start.edges ? 0 : 1) + (it->end.edges ? 0 : 1);
      ++it;
    }
  }
  unplaced_.store(unplaced, std::memory_order_relaxed);
}

void PhaseTracker::prune(SteadyClock::time_point horizon) {
  for (auto& [device, line] : lines_) {
    auto& pts = line.pts;
    // Keep the last point, and the last hard one, before the horizon: a marker after it lies between them and later.
    size_t keep = 0;
    for (size_t i = 0; i < pts.size() && pts[i].at < horizon; ++i)
      keep = i;
    for (size_t i = keep + 1; i-- > 0;)
      if (pts[i].hard || !line.any_hard) {
        keep = std::min(keep, i);
        break;
      }
    pts.erase(pts.begin(), pts.begin() + static_cast<std::ptrdiff_t>(keep));
  }
  while (ticks_.size() > 2 && ticks_[1].second <= horizon)
    ticks_.pop_front();
  while (ticks_.size() > kMaxPoints)
    ticks_.pop_front();
}

void PhaseTracker::process(Frame& f) {
  // Each device's value at its own time: a GPU read its counter at its own moment of the tick (one after another on
  // a node of eight), and one that did not answer has no point here: it is interpolated across the gap when it does.
  for (const auto& d : f.device_rows)
    energy_method_[gpu_key(d.gpu_index)] = d.energy_method;
  OptF hottest;
  for (const auto& s : f.gpus)
    if (s.temp_gpu_c && (!hottest || *s.temp_gpu_c > *hottest)) hottest = s.temp_gpu_c;
  if (hottest) hottest_c_ = hottest;
  for (const auto& s : f.gpus) {
    const std::string key = gpu_key(s.gpu_index);
    Line& line = lines_[key];
    if (s.power_limit_w && *s.power_limit_w > 0) line.cap_w = std::max(line.cap_w, 1.5 * *s.power_limit_w);
    if (s.power_w && *s.power_w > 0) line.cap_w = std::max(line.cap_w, 1.5 * *s.power_w);
    if (!s.energy_j) continue;
    const auto at = s.energy_at.value_or(f.mono);
    // The counter's own value where it was read (the stored energy_j may be an estimate held above it); else the
    // estimate, soft.
    const bool counter = s.energy_counter_uj.has_value() && s.counter_energy_j.has_value();
    add_point(key, {at, at - s.energy_stale, at, counter ? *s.counter_energy_j : *s.energy_j, counter, false, 0});
  }
  const bool cpu_counter = f.cpu.power_method && std::string_view(f.cpu.power_method) == "counter";
  const auto cpu_point = [&](const char* key, const OptF& e, const OptF& w) {
    if (!e) return;
    Line& line = lines_[key];
    if (w && *w > 0) line.cap_w = std::max(line.cap_w, 1.5 * *w);
    // RAPL's counters move about every millisecond
    add_point(key, {f.mono, f.mono - std::chrono::milliseconds(1), f.mono, *e, cpu_counter, false, 0});
  };
  cpu_point("cpu_package", f.cpu.package_energy_j, f.cpu.package_power_w);
  cpu_point("cpu_dram", f.cpu.dram_energy_j, f.cpu.dram_power_w);
  if (f.cpu.power_method) energy_method_["cpu_package"] = energy_method_["cpu_dram"] = f.cpu.power_method;
  ticks_.emplace_back(f.tick, f.mono);
  last_tick_mono_ = f.mono;

  // Rows settled between ticks (windows answered early) come first, with this tick.
  take_between(f, f.tick);
  // Every marker that arrived before this tick began is settled now, in arrival order (a phase's row begins, an end
  // closes it, work counts to the innermost open phase); their edges are placed once the points around them came.
  const SteadyClock::time_point served = served_ ? served_() : SteadyClock::time_point::max();
  {
    std::lock_guard lock(mu_);
    events_this_tick_ = 0;
  }
  settle_due(f.mono, f);
  place(f, f.mono, served, false);
  SteadyClock::time_point horizon = f.mono - kMaxMarkerAge - kNearReadings; // a marker yet to arrive may be this old
  {
    std::lock_guard lock(mu_);
    for (const auto& p : pending_)
      horizon = std::min(horizon, p.at - kNearReadings);
  }
  for (const auto& o : open_)
    if (!o.start.edges) horizon = std::min(horizon, o.start.at - kNearReadings);
  for (const auto& c : closing_)
    horizon = std::min({horizon, c.o.start.at - kNearReadings, c.end.at - kNearReadings});
  prune(horizon);
}

void PhaseTracker::settle_due(SteadyClock::time_point by, Frame& out) {
  std::deque<Pending> due;
  {
    std::lock_guard lock(mu_);
    while (!pending_.empty() && pending_.front().arrived <= by) {
      due.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
  }
  for (const auto& p : due)
    settle(p, out);
}

void PhaseTracker::take_between(Frame& f, int64_t tick) {
  const auto prepend = [](auto& to, auto& from) {
    if (from.empty()) return;
    to.insert(to.begin(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
    from.clear();
  };
  for (auto& r : between_.phases)
    if (r.end_tick < 0) r.end_tick = tick; // closed before the tick after its end existed
  prepend(f.phases_begun, between_.phases_begun);
  prepend(f.phases, between_.phases);
  prepend(f.work, between_.work);
}

bool PhaseTracker::place_windows(SteadyClock::time_point now) {
  settle_due(now, between_);
  const SteadyClock::time_point served = served_ ? served_() : SteadyClock::time_point::max();
  const auto try_place = [&](EdgeWait& e) {
    if (!e.edges && ready(e, now, served, /*between_ticks=*/true)) e.edges = edges_at(e.at, /*carry_on=*/true);
  };
  bool any = false;
  for (auto it = closing_.begin(); it != closing_.end();) {
    if (it->reply_to.empty()) {
      ++it;
      continue;
    }
    try_place(it->o.start);
    try_place(it->end);
    if (!it->o.start.edges || !it->end.edges) {
      ++it;
      continue;
    }
    close(*it, between_);
    it = closing_.erase(it);
    any = true;
  }
  return any;
}

void PhaseTracker::end_phase(const Pending& p, std::vector<Open>::iterator it) {
  const std::string reply_to = p.m.reply ? p.m.reply_to : std::string();
  if (!it->window.empty()) { // a window: exactly this phase, whatever is open inside it
    closing_.push_back({std::move(*it), {p.at, p.arrived, p.reading_for, std::nullopt}, p.ts_ms, reply_to, p.m.name});
    open_.erase(it);
    return;
  }
  // A phase: it, and the phases (not windows) begun inside it and still open, the innermost first.
  const auto target = it - open_.begin();
  for (auto i = static_cast<std::ptrdiff_t>(open_.size()) - 1; i >= target; --i) {
    auto at = open_.begin() + i;
    if (!at->window.empty()) continue;
    const bool last = i == target;
    closing_.push_back({std::move(*at),
                        {p.at, p.arrived, p.reading_for, std::nullopt},
                        p.ts_ms,
                        last ? reply_to : std::string(),
                        p.m.name});
    open_.erase(at);
  }
}

void PhaseTracker::settle(const Pending& p, Frame& out) {
  const Marker& m = p.m;
  if (m.kind == Marker::Kind::Begin || m.kind == Marker::Kind::End) ++boundaries_; // issue 36
  switch (m.kind) {
  case Marker::Kind::Begin: {
    if (open_.size() >= kMaxOpenPhases) {
      // Dropped, and remembered by depth only: the `end` that pairs with it must not close its parent.
      ++lost_depth_;
      std::lock_guard lock(mu_);
      if (dropped_.open_phases++ == 0)
        spdlog::warn("more than {} phases open at once: further begins are dropped (counted) until some end",
                     kMaxOpenPhases);
      return;
    }
    Open o;
    o.rec.phase_id = next_phase_id_++;
    o.rec.name = m.name;
    o.rec.index = m.index;
    if (!open_.empty()) o.rec.parent = open_.back().rec.phase_id;
    o.rec.start_ms = p.ts_ms;
    o.rec.start_tick = ticks_around(p.at).first;
    o.rec.gpu_temp_start_c = hottest_c_;
    o.start = {p.at, p.arrived, p.reading_for, std::nullopt};
    o.window = m.window;
    out.phases_begun.push_back(o.rec);
    open_.push_back(std::move(o));
    return;
  }
  case Marker::Kind::End: {
    // `end` names the phase it ends, or ends the innermost one. Phases begun inside it and still open end with it.
    // A window's end names its window; windows are no phase a plain end closes.
    auto it = open_.end();
    const auto unmatched = [&] {
      if (unmatched_ends_++ < 10)
        spdlog::warn("marker 'end{}{}' ignored: no such {} is open", m.name.empty() ? "" : " ", m.name,
                     m.window.empty() ? "phase" : "window");
      if (m.reply && on_window_) on_window_({m.reply_to, m.window, m.name, std::nullopt, {}, 0});
    };
    if (!m.window.empty()) {
      for (auto r = open_.rbegin(); r != open_.rend(); ++r)
        if (r->window == m.window) {
          it = std::prev(r.base());
          break;
        }
      if (it == open_.end()) return unmatched();
      end_phase(p, it);
      return;
    }
    if (m.name.empty()) {
      if (lost_depth_ > 0) { // the innermost phase is one that was dropped
        --lost_depth_;
        return;
      }
      for (auto r = open_.rbegin(); r != open_.rend(); ++r)
        if (r->window.empty()) {
          it = std::prev(r.base());
          break;
        }
    } else {
      for (auto r = open_.rbegin(); r != open_.rend(); ++r)
        if (r->window.empty() && r->rec.name == m.name) {
          it = std::prev(r.base());
          break;
        }
      if (lost_depth_ > 0) {
        // The dropped phases were the innermost; an end naming none of the open ones ends one of them, one naming an
        // open phase ends it and every phase inside it, the dropped ones too.
        if (it == open_.end()) {
          --lost_depth_;
          return;
        }
        lost_depth_ = 0;
      }
    }
    if (it == open_.end()) return unmatched();
    end_phase(p, it);
    return;
  }
  case Marker::Kind::Work: {
    WorkRecord w;
    w.seq = next_work_seq_++;
    w.ts_ms = p.ts_ms;
    w.amount = m.amount;
    w.unit = m.unit;
    w.total = m.total;
    if (!open_.empty()) w.phase_id = open_.back().rec.phase_id;
    out.work.push_back(std::move(w));
    return;
  }
  default:
    return;
  }
}

void PhaseTracker::close(Closing& c, Frame& out) {
  PhaseRecord r = std::move(c.o.rec);
  const auto& end = *c.end.edges;
  const auto& start = *c.o.start.edges;
  r.end_ms = std::max(c.end_ms, r.start_ms);
  r.gpu_temp_end_c = hottest_c_;
  // Closed between ticks (a window answered early): the tick after its end is the next one (take_between).
  r.end_tick = ticks_.empty() || ticks_.back().second < c.end.at ? -1 : ticks_around(c.end.at).second;
  std::string method;
  bool any_simulated = false;
  // Edges over the devices that give readings at edges (the GPUs); over all where none does.
  bool any_reading = false;
  for (const auto& [device, e] : end)
    any_reading = any_reading || lines_[device].any_reading;
  int start_kind = 0, end_kind = 0;
  double bound = 0;
  for (const auto& [device, e] : end) {
    // A device that had not answered yet when the phase began starts from 0: energy_j counts from its first answer.
    auto se = start.find(device);
    const double start_j = se == start.end() ? 0.0 : se->second.e;
    r.device_energy_j.emplace_back(device, e.e - start_j);
    r.energy_j = r.energy_j.value_or(0) + (e.e - start_j);
    auto m = energy_method_.find(device);
    const std::string dm = m == energy_method_.end() ? std::string("integrated") : m->second;
    method = method.empty() || method == dm ? dm : "mixed";
    any_simulated = any_simulated || dm == "simulated";
    bound += e.bound_j + (se == start.end() ? 0.0 : se->second.bound_j);
    if (any_reading && !lines_[device].any_reading) continue;
    end_kind = std::max(end_kind, static_cast<int>(e.kind));
    if (se != start.end()) start_kind = std::max(start_kind, static_cast<int>(se->second.kind));
  }
  if (!end.empty()) {
    r.start_edge = kind_text(start_kind);
    r.end_edge = kind_text(end_kind);
    if (std::isfinite(bound)) r.energy_bound_j = bound;
  }
  // issue 19: a total with any simulated part in it is no measurement, and says so
  r.energy_method = any_simulated ? "simulated" : method;
  if (!c.reply_to.empty() && on_window_) {
    WindowReply w{c.reply_to, c.o.window, c.end_name, r, {}, secs(c.end.at - c.o.start.at)};
    for (const auto& [device, e] : r.device_energy_j) {
      auto m = energy_method_.find(device);
      w.methods[device] = m == energy_method_.end() ? "integrated" : m->second;
    }
    on_window_(w);
  }
  out.phases.push_back(std::move(r));
}

Frame PhaseTracker::finish(int64_t end_ms) {
  Frame out;
  out.markers_only = true;
  out.ts_ms = end_ms;
  std::deque<Pending> rest;
  {
    std::lock_guard lock(mu_);
    rest.swap(pending_);
  }
  out.tick = ticks_.empty() ? 0 : ticks_.back().first;
  take_between(out, out.tick);
  for (const auto& p : rest)
    settle(p, out);
  // Phases still open end with the run, at its last tick, where the run's own total ends too; every edge is placed
  // with the points that came (those after the last tick sit at it).
  const SteadyClock::time_point last = last_tick_mono_.value_or(SteadyClock::time_point{});
  while (!open_.empty()) {
    open_.back().rec.closed_by_run_end = true;
    closing_.push_back({std::move(open_.back()), {last, last, std::nullopt, std::nullopt}, end_ms, {}, {}});
    open_.pop_back();
  }
  place(out, last, SteadyClock::time_point::max(), true);
  return out;
}

std::optional<PhaseTracker::IndexedPhase> PhaseTracker::open_indexed_phase() const {
  for (auto it = open_.rbegin(); it != open_.rend(); ++it)
    if (it->rec.index) return IndexedPhase{it->rec.name, *it->rec.index, it->rec.start_ms};
  return std::nullopt;
}

} // namespace wattscope
