#include "phases/phase_tracker.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace wattscope {

namespace {
std::string gpu_key(int index) {
  return "gpu" + std::to_string(index);
}
} // namespace

void PhaseTracker::push(Marker m, int64_t ts_ms, SteadyClock::time_point at) {
  if (m.kind != Marker::Kind::Begin && m.kind != Marker::Kind::End && m.kind != Marker::Kind::Work) return;
  std::lock_guard lock(mu_);
  if (pending_.size() >= kMaxPending) {
    if (dropped_++ == 0) spdlog::warn("markers arrive faster than wattscope settles them; extra ones are dropped");
    return;
  }
  pending_.push_back({std::move(m), ts_ms, at});
}

bool PhaseTracker::has_pending() const {
  std::lock_guard lock(mu_);
  return !pending_.empty();
}

int64_t PhaseTracker::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

void PhaseTracker::process(Frame& f) {
  // This tick's counters: every device that answered, merged over the last known values of those that did not (a
  // late source keeps its devices' previous reading; the counter difference over a gap stays exact).
  std::map<std::string, double> now = last_energy_;
  for (const auto& d : f.device_rows)
    energy_method_[gpu_key(d.gpu_index)] = d.energy_method;
  for (const auto& s : f.gpus)
    if (s.energy_j) now[gpu_key(s.gpu_index)] = *s.energy_j;
  if (f.cpu.package_energy_j) now["cpu_package"] = *f.cpu.package_energy_j;
  if (f.cpu.dram_energy_j) now["cpu_dram"] = *f.cpu.dram_energy_j;
  if (f.cpu.power_method) energy_method_["cpu_package"] = energy_method_["cpu_dram"] = f.cpu.power_method;

  std::deque<Pending> due;
  {
    std::lock_guard lock(mu_);
    // In arrival order; a marker that arrived after this tick began waits for the next tick, which brackets it.
    while (!pending_.empty() && pending_.front().at <= f.mono) {
      due.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
  }
  if (!last_tick_) {
    // Nothing before the first tick: a phase begun before it starts there (energy since run start is 0 there).
    last_tick_ = f.tick;
    last_energy_ = now;
  }
  for (const auto& p : due)
    settle(p.m, p.ts_ms, f, f.tick, now);
  last_tick_ = f.tick;
  last_energy_ = std::move(now);
}

void PhaseTracker::settle(const Marker& m, int64_t ts_ms, Frame& out, int64_t tick,
                          const std::map<std::string, double>& now) {
  switch (m.kind) {
  case Marker::Kind::Begin: {
    Open o;
    o.rec.phase_id = next_phase_id_++;
    o.rec.name = m.name;
    o.rec.index = m.index;
    if (!open_.empty()) o.rec.parent = open_.back().rec.phase_id;
    o.rec.start_ms = ts_ms;
    o.rec.start_tick = last_tick_.value_or(tick);
    o.start_energy = last_energy_;
    open_.push_back(std::move(o));
    return;
  }
  case Marker::Kind::End: {
    // `end` names the phase it ends, or ends the innermost one. Phases begun inside it and still open end with it.
    auto it = open_.end();
    if (m.name.empty()) {
      if (!open_.empty()) it = open_.end() - 1;
    } else {
      for (auto r = open_.rbegin(); r != open_.rend(); ++r)
        if (r->rec.name == m.name) {
          it = std::prev(r.base());
          break;
        }
    }
    if (it == open_.end()) {
      if (unmatched_ends_++ < 10)
        spdlog::warn("marker 'end{}{}' ignored: no such phase is open", m.name.empty() ? "" : " ", m.name);
      return;
    }
    while (open_.end() != it) {
      close(open_.back(), ts_ms, tick, now, out);
      open_.pop_back();
    }
    return;
  }
  case Marker::Kind::Work: {
    WorkRecord w;
    w.seq = next_work_seq_++;
    w.ts_ms = ts_ms;
    w.amount = m.amount;
    w.unit = m.unit;
    if (!open_.empty()) w.phase_id = open_.back().rec.phase_id;
    out.work.push_back(std::move(w));
    return;
  }
  default:
    return;
  }
}

void PhaseTracker::close(Open& o, int64_t ts_ms, int64_t tick, const std::map<std::string, double>& now, Frame& out) {
  PhaseRecord r = std::move(o.rec);
  r.end_ms = std::max(ts_ms, r.start_ms);
  r.end_tick = tick;
  std::string method;
  bool any_simulated = false;
  for (const auto& [device, end_j] : now) {
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
  const int64_t tick = last_tick_.value_or(0);
  out.tick = tick;
  // Markers after the last tick have no later tick to bracket them: they are settled at the last one.
  for (const auto& p : rest)
    settle(p.m, p.ts_ms, out, tick, last_energy_);
  while (!open_.empty()) {
    open_.back().rec.closed_by_run_end = true;
    close(open_.back(), end_ms, tick, last_energy_, out);
    open_.pop_back();
  }
  return out;
}

} // namespace wattscope
