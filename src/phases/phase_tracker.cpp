#include "phases/phase_tracker.hpp"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

namespace wattscope {

namespace {
std::string gpu_key(int index) {
  return "gpu" + std::to_string(index);
}
} // namespace

namespace {
// How far from a marker a reading still counts as a known point around it (PhaseTracker::Position::near_readings)
constexpr auto kNearReadings = std::chrono::milliseconds(150);
} // namespace

PhaseTracker::Energies PhaseTracker::Position::energies() const {
  Energies out = ticks_energies();
  // A device with a reading on each side of the marker, close by, is interpolated between those
  for (auto& [device, e] : out) {
    const Point* r0 = nullptr;
    const Point* r1 = nullptr;
    for (const auto& p : near_readings) {
      if (p.energies->find(device) == p.energies->end()) continue;
      if (p.at <= at) r0 = &p;
      if (p.at >= at && !r1) r1 = &p;
    }
    if (!r0 || !r1) continue;
    const double e0 = r0->energies->at(device), e1 = r1->energies->at(device);
    const double span = std::chrono::duration<double>(r1->at - r0->at).count();
    e = span > 0 ? e0 + (e1 - e0) * std::chrono::duration<double>(at - r0->at).count() / span : e0;
  }
  return out;
}

PhaseTracker::Energies PhaseTracker::Position::ticks_energies() const {
  if (at <= points.front().at) return *points.front().energies;
  if (at >= points.back().at) return *points.back().energies;
  Energies out;
  for (const auto& [device, e_last] : *points.back().energies) {
    // The nearest known points at or before and at or after `at` that have the device; one that first answered later
    // counts from 0 at the first point (energy_j counts from its first answer).
    SteadyClock::time_point t0 = points.front().at, t1 = points.back().at;
    double e0 = 0, e1 = e_last;
    bool have_after = false;
    for (const auto& p : points) {
      auto it = p.energies->find(device);
      if (it == p.energies->end()) continue;
      if (p.at <= at) {
        t0 = p.at;
        e0 = it->second;
      }
      if (p.at >= at && !have_after) {
        t1 = p.at;
        e1 = it->second;
        have_after = true;
      }
    }
    const double span = std::chrono::duration<double>(t1 - t0).count();
    const double fraction = span > 0 ? std::clamp(std::chrono::duration<double>(at - t0).count() / span, 0.0, 1.0) : 0;
    out.emplace(device, e0 + (e1 - e0) * fraction);
  }
  return out;
}

void PhaseTracker::push(Marker m, int64_t ts_ms, SteadyClock::time_point at) {
  if (m.kind != Marker::Kind::Begin && m.kind != Marker::Kind::End && m.kind != Marker::Kind::Work) return;
  const bool phase = m.kind != Marker::Kind::Work;
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
    pending_.push_back({std::move(m), ts_ms, at});
    if (!phase) return;
    // issue 33: a reading per edge, within the edge gap and the budget; the phase markers refused are interpolated.
    if (last_edge_ && at - *last_edge_ < edge_gap_) return;
    if (edge_period_.count() > 0) {
      if (edge_refilled_ && at > *edge_refilled_)
        edge_tokens_ =
            std::min<double>(edge_burst_, edge_tokens_ + std::chrono::duration<double>(at - *edge_refilled_) /
                                                             std::chrono::duration<double>(edge_period_));
      if (!edge_refilled_ || at > *edge_refilled_) edge_refilled_ = at;
      if (edge_tokens_ < 1) return;
      edge_tokens_ -= 1;
    }
    last_edge_ = at;
    ++edge_requests_;
  }
  if (edge_hook_) edge_hook_(at);
}

int64_t PhaseTracker::edge_requests() const {
  std::lock_guard lock(mu_);
  return edge_requests_;
}

void PhaseTracker::add_reading(SteadyClock::time_point at, Energies energies) {
  if (readings_.size() >= kMaxReadings || energies.empty()) return;
  readings_.emplace_back(at, std::move(energies));
}

void PhaseTracker::add_gpu_reading(int gpu_index, SteadyClock::time_point at, double energy_j) {
  add_reading(at, Energies{{gpu_key(gpu_index), energy_j}});
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
  std::lock_guard lock(mu_);
  return !pending_.empty();
}

PhaseTracker::Dropped PhaseTracker::dropped_counts() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

void PhaseTracker::process(Frame& f) {
  // This tick's energies: every device that answered, merged over the last known values of those that did not (a
  // late source keeps its devices' previous reading; the difference over a gap stays exact at the next answer).
  Energies now = history_.empty() ? Energies{} : history_.back().energies;
  for (const auto& d : f.device_rows)
    energy_method_[gpu_key(d.gpu_index)] = d.energy_method;
  for (const auto& s : f.gpus)
    if (s.energy_j) now[gpu_key(s.gpu_index)] = *s.energy_j;
  if (f.cpu.package_energy_j) now["cpu_package"] = *f.cpu.package_energy_j;
  if (f.cpu.dram_energy_j) now["cpu_dram"] = *f.cpu.dram_energy_j;
  if (f.cpu.power_method) energy_method_["cpu_package"] = energy_method_["cpu_dram"] = f.cpu.power_method;

  history_.push_back({f.tick, f.mono, std::move(now)});
  // In arrival order; a marker that arrived after this tick began waits for the next tick, the one after it (and,
  // with a hold, for the reading at its edge: issue 33).
  const SteadyClock::time_point cutoff = f.mono - hold_;
  std::deque<Pending> due;
  {
    std::lock_guard lock(mu_);
    while (!pending_.empty() && pending_.front().at <= cutoff) {
      due.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    events_this_tick_ = 0;
  }
  // issue 33: the readings taken at phase edges, known points between the ticks around them
  std::stable_sort(readings_.begin(), readings_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& p : due)
    settle(p, position_at(p.at), f);
  // What a marker still waiting can lie between: the last tick at or before the cutoff, and every one since.
  while (history_.size() > 2 && (history_[1].mono <= cutoff || history_.size() > kMaxHeldTicks))
    history_.pop_front();
  std::erase_if(readings_, [&](const auto& r) { return r.first < history_.front().mono - kNearReadings; });
}

PhaseTracker::Position PhaseTracker::position_at(SteadyClock::time_point at) const {
  Position pos;
  pos.at = at;
  // The kept tick at or before `at` and the one at or after it (history_ is in time order, never empty here).
  auto after = std::lower_bound(history_.begin(), history_.end(), at,
                                [](const TickPoint& t, SteadyClock::time_point a) { return t.mono < a; });
  if (after == history_.end()) --after; // after the newest tick (the run's end): it sits there
  auto before = after;
  if (after->mono > at && after != history_.begin()) --before;
  if (before->mono > at) { // before the oldest kept tick: the run's first tick (energy 0), or a bound's loss
    pos.tick_before = pos.tick_after = before->tick;
    pos.points.push_back({before->mono, &before->energies});
    return pos; // no readings either: the run's start is 0 whatever they say
  }
  pos.tick_before = before->tick;
  pos.tick_after = after->tick;
  pos.points.push_back({before->mono, &before->energies});
  if (after != before) {
    auto r = std::upper_bound(readings_.begin(), readings_.end(), before->mono,
                              [](SteadyClock::time_point a, const auto& x) { return a < x.first; });
    for (; r != readings_.end() && r->first < after->mono; ++r)
      pos.points.push_back({r->first, &r->second});
    pos.points.push_back({after->mono, &after->energies});
  }
  // The readings around the marker, within a counter period and a read of it on either side
  auto r = std::lower_bound(readings_.begin(), readings_.end(), at - kNearReadings,
                            [](const auto& x, SteadyClock::time_point a) { return x.first < a; });
  for (; r != readings_.end() && r->first <= at + kNearReadings; ++r)
    pos.near_readings.push_back({r->first, &r->second});
  return pos;
}

void PhaseTracker::settle(const Pending& p, const Position& pos, Frame& out) {
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
    o.rec.start_tick = pos.tick_before;
    o.start_energy = pos.energies();
    out.phases_begun.push_back(o.rec);
    open_.push_back(std::move(o));
    return;
  }
  case Marker::Kind::End: {
    // `end` names the phase it ends, or ends the innermost one. Phases begun inside it and still open end with it.
    auto it = open_.end();
    if (m.name.empty()) {
      if (lost_depth_ > 0) { // the innermost phase is one that was dropped
        --lost_depth_;
        return;
      }
      if (!open_.empty()) it = open_.end() - 1;
    } else {
      for (auto r = open_.rbegin(); r != open_.rend(); ++r)
        if (r->rec.name == m.name) {
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
    if (it == open_.end()) {
      if (unmatched_ends_++ < 10)
        spdlog::warn("marker 'end{}{}' ignored: no such phase is open", m.name.empty() ? "" : " ", m.name);
      return;
    }
    const Energies end = pos.energies();
    while (open_.end() != it) {
      close(open_.back(), p.ts_ms, pos.tick_after, end, out);
      open_.pop_back();
    }
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

void PhaseTracker::close(Open& o, int64_t ts_ms, int64_t tick, const Energies& end, Frame& out) {
  PhaseRecord r = std::move(o.rec);
  r.end_ms = std::max(ts_ms, r.start_ms);
  r.end_tick = tick;
  std::string method;
  bool any_simulated = false;
  for (const auto& [device, end_j] : end) {
    // A device that had not answered yet when the phase began starts from 0: energy_j counts from its first answer.
    auto s = o.start_energy.find(device);
    const double start_j = s == o.start_energy.end() ? 0.0 : s->second;
    r.device_energy_j.emplace_back(device, end_j - start_j);
    r.energy_j = r.energy_j.value_or(0) + (end_j - start_j);
    auto m = energy_method_.find(device);
    const std::string dm = m == energy_method_.end() ? std::string("integrated") : m->second;
    method = method.empty() || method == dm ? dm : "mixed";
    any_simulated = any_simulated || dm == "simulated";
  }
  // issue 19: a total with any simulated part in it is no measurement, and says so
  r.energy_method = any_simulated ? "simulated" : method;
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
  // The last tick (none: a run that ended before its first, energy 0 everywhere)
  static const Energies kNone;
  const int64_t tick = history_.empty() ? 0 : history_.back().tick;
  const SteadyClock::time_point last_mono = history_.empty() ? SteadyClock::time_point{} : history_.back().mono;
  const Energies& last_energy = history_.empty() ? kNone : history_.back().energies;
  out.tick = tick;
  // Markers after the last tick have no later tick: they sit at the last one, where the run's own total ends too.
  // Those held for a reading (issue 33) lie between the kept ticks, with the readings that came.
  Position pos;
  pos.tick_before = pos.tick_after = tick;
  pos.points.push_back({last_mono, &last_energy});
  std::erase_if(readings_, [&](const auto& r) { return r.first >= last_mono; }); // the run's total ends there
  std::stable_sort(readings_.begin(), readings_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& p : rest) {
    if (p.at < last_mono && !history_.empty()) {
      settle(p, position_at(p.at), out);
      continue;
    }
    pos.at = p.at;
    settle(p, pos, out);
  }
  while (!open_.empty()) {
    open_.back().rec.closed_by_run_end = true;
    close(open_.back(), end_ms, tick, last_energy, out);
    open_.pop_back();
  }
  return out;
}

std::optional<PhaseTracker::IndexedPhase> PhaseTracker::open_indexed_phase() const {
  for (auto it = open_.rbegin(); it != open_.rend(); ++it)
    if (it->rec.index) return IndexedPhase{it->rec.name, *it->rec.index, it->rec.start_ms};
  return std::nullopt;
}

} // namespace wattscope
