#include "alerts/engine.hpp"

#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/json_opt.hpp"
#include "core/thread_name.hpp"
#include "core/time_util.hpp"

namespace wattscope {

namespace {
std::string_view kind_name(NotifierConfig::Kind k) {
  switch (k) {
  case NotifierConfig::Kind::Webhook:
    return "webhook";
  case NotifierConfig::Kind::Email:
    return "email";
  case NotifierConfig::Kind::Alertmanager:
    return "alertmanager";
  }
  return "?";
}
} // namespace

AlertEngine::AlertEngine(AlertConfig cfg, AlertContext ctx, std::function<void(Event)> emit)
    : cfg_(std::move(cfg)), ctx_(std::move(ctx)), emit_(std::move(emit)), eval_(cfg_.rules) {
  eval_.set_run_mode(ctx_.run_mode);
  for (const auto& n : cfg_.notifiers)
    notifiers_.push_back(
        std::make_unique<Notifier>(n, [this, name = n.name](const AlertNotification& a, const std::string& why) {
          spdlog::warn("alert {} on {} not delivered to {}: {}", a.rule, a.scope, name, why);
          emit_({0, wall_now_ms(), "alert-delivery-failed", name,
                 dump({{"rule", a.rule}, {"scope", a.scope}, {"state", a.state}, {"error", why}})});
        }));
}

AlertEngine::~AlertEngine() {
  if (started_) stop(std::chrono::steady_clock::now());
}

void AlertEngine::start() {
  started_ = true;
  next_resend_.assign(notifiers_.size(), std::chrono::steady_clock::now());
  for (size_t i = 0; i < notifiers_.size(); ++i)
    next_resend_[i] += notifiers_[i]->config().resend_every;
  for (auto& n : notifiers_)
    n->start();
  thread_ = std::thread([this] {
    name_this_thread("ws-alerts");
    loop();
  });
}

void AlertEngine::offer(std::shared_ptr<const Frame> f) {
  bool dropped = false;
  {
    std::lock_guard lock(qmu_);
    if (stopping_) return;
    if (queue_.size() >= kFrameQueue) {
      queue_.pop_front();
      dropped = true;
    }
    queue_.push_back(std::move(f));
  }
  if (dropped) frames_dropped_++;
  qcv_.notify_one();
}

void AlertEngine::stop(std::chrono::steady_clock::time_point delivery_deadline) {
  if (!started_) return;
  started_ = false;
  {
    std::lock_guard lock(qmu_);
    stopping_ = true;
  }
  qcv_.notify_all();
  if (thread_.joinable()) thread_.join();
  try {
    resolve_at_end();
  } catch (const std::exception& e) {
    spdlog::error("alerts: {}", e.what());
  }
  // Side by side, to one deadline for all (issue 31): each is told first, then waited for, then cut. Stopping them one
  // after the other gave each dead one the abort latency of its own transfer on top of the others'.
  for (auto& n : notifiers_)
    n->request_stop(delivery_deadline);
  for (auto& n : notifiers_)
    n->wait_until(delivery_deadline);
  for (auto& n : notifiers_)
    n->abort_and_join();
  if (const int64_t d = frames_dropped_.load())
    emit_({0, wall_now_ms(), "alert-frames-dropped", "alerts",
           fmt::format("{} frames were not evaluated: the alert thread fell {} frames behind", d, kFrameQueue)});
}

void AlertEngine::loop() {
  auto next = std::chrono::steady_clock::time_point::max();
  for (;;) {
    std::shared_ptr<const Frame> f;
    {
      std::unique_lock lock(qmu_);
      auto ready = [&] { return stopping_ || !queue_.empty(); };
      if (next == std::chrono::steady_clock::time_point::max())
        qcv_.wait(lock, ready);
      else
        qcv_.wait_until(lock, next, ready);
      if (queue_.empty() && stopping_) return; // every frame offered is evaluated
      if (!queue_.empty()) {
        f = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    try {
      if (f) handle(*f);
      next = resend_due(std::chrono::steady_clock::now()); // also while no frame comes (a stalled sampler)
    } catch (const std::exception& e) {
      spdlog::error("alerts: {}", e.what()); // a thread must not end the process
    }
  }
}

void AlertEngine::deliver(const AlertNotification& n, bool to_people) {
  for (auto& no : notifiers_)
    if (no->config().kind == NotifierConfig::Kind::Alertmanager || to_people) no->enqueue(n);
}

std::chrono::steady_clock::time_point AlertEngine::resend_due(std::chrono::steady_clock::time_point now) {
  auto next = std::chrono::steady_clock::time_point::max();
  const int64_t wall = wall_now_ms();
  for (size_t i = 0; i < notifiers_.size(); ++i) {
    const NotifierConfig& c = notifiers_[i]->config();
    if (c.kind != NotifierConfig::Kind::Alertmanager) continue;
    if (now >= next_resend_[i]) {
      for (auto& [key, s] : sent_) {
        AlertNotification n = s.n;
        n.state = "firing";
        n.ts_ms = wall;
        n.ends_ms = wall + kLapseResends * c.resend_every.count();
        notifiers_[i]->enqueue(std::move(n));
      }
      next_resend_[i] = now + c.resend_every;
    }
    next = std::min(next, next_resend_[i]);
  }
  return next;
}

void AlertEngine::resolve_at_end() {
  if (sent_.empty()) return;
  const int64_t wall = wall_now_ms();
  std::vector<nlohmann::json> recent;
  for (auto& [key, s] : sent_) {
    AlertNotification n = s.n;
    n.state = "resolved";
    n.message = fmt::format("{} on {} resolved: no longer watched (the {} ended while it fired)", n.rule, n.scope,
                            ctx_.run_mode ? "run" : "session");
    n.ts_ms = n.ends_ms = wall;
    n.value.reset();
    deliver(n, s.people);
    emit_({0, wall, "alert", n.scope,
           dump({{"rule", n.rule},
                 {"state", "resolved"},
                 {"severity", n.severity},
                 {"value", nullptr},
                 {"threshold", n.threshold},
                 {"unit", n.unit},
                 {"message", n.message},
                 {"notified", s.people}})});
    recent.push_back({{"rule", n.rule},
                      {"severity", n.severity},
                      {"scope", n.scope},
                      {"state", "resolved"},
                      {"message", n.message},
                      {"value", nullptr},
                      {"threshold", n.threshold},
                      {"ts", iso_utc_ms(wall)}});
  }
  sent_.clear();
  std::lock_guard lock(board_mu_);
  firing_.clear();
  for (auto& r : recent) {
    recent_.push_front(std::move(r));
    if (recent_.size() > kRecent) recent_.pop_back();
  }
}

void AlertEngine::handle(const Frame& f) {
  for (const auto& d : f.device_rows) { // issue 32: a GPU alert carries the UUID its series do
    const auto i = static_cast<size_t>(d.gpu_index);
    if (d.gpu_index < 0 || i > 4096) continue;
    if (uuids_.size() <= i) uuids_.resize(i + 1);
    uuids_[i] = d.uuid;
  }
  eval_.evaluate(f, scratch_);
  if (scratch_.empty()) return;
  std::vector<nlohmann::json> recent;
  for (const auto& t : scratch_) {
    const AlertRule& r = eval_.rules()[t.rule];
    const std::string message = eval_.message(t);
    const std::string unit = r.kind != AlertKind::Threshold ? std::string() // issue 36: an anomaly rule's is 1 or 0
                             : r.relative_to.empty()        ? std::string(alert_metric_unit(r.scope, r.metric_index))
                                                            : std::string("%");
    nlohmann::json detail = {{"rule", r.name},        {"state", to_string(t.change)}, {"severity", r.severity},
                             {"value", opt(t.value)}, {"threshold", t.threshold},     {"unit", unit},
                             {"message", message}};
    if (!r.relative_to.empty()) detail["raw_value"] = opt(t.raw);
    if (t.change != AlertChange::Repeat) {
      detail["notified"] = t.notify;
      emit_({0, t.ts_ms, "alert", t.scope, dump(detail)});
    }
    nlohmann::json rj = {
        {"rule", r.name},     {"severity", r.severity}, {"scope", t.scope},         {"state", to_string(t.change)},
        {"message", message}, {"value", opt(t.value)},  {"threshold", t.threshold}, {"ts", iso_utc_ms(t.ts_ms)}};
    recent.push_back(std::move(rj));
    if (t.change == AlertChange::Pending || t.change == AlertChange::Cancelled) continue;
    AlertNotification n{
        r.name,
        r.severity,
        t.scope,
        t.change == AlertChange::Resolved ? "resolved" : t.change == AlertChange::Repeat ? "repeat" : "firing",
        message,
        t.value,
        t.threshold,
        unit,
        t.ts_ms,
        t.since_ms,
        ctx_.host,
        ctx_.run_id,
        ctx_.task,
        {},
        {},
        0};
    if ((r.scope == AlertScope::Gpu || r.kind == AlertKind::DeviceLost) && t.scope.starts_with("gpu")) {
      n.gpu = t.scope.substr(3);
      const auto i = static_cast<size_t>(std::strtoul(n.gpu.c_str(), nullptr, 10));
      if (i < uuids_.size()) n.uuid = uuids_[i];
    }
    // People hear what the rule's notify says (firing, repeat_every, resolved); Alertmanager hears every change, and
    // the firing ones again every resend_every (resend_due), each with an endsAt ahead of it.
    const auto key = std::make_pair(r.name, t.scope);
    if (t.change == AlertChange::Resolved) {
      auto it = sent_.find(key);
      const bool am = it != sent_.end();
      if (am) sent_.erase(it);
      n.ends_ms = t.ts_ms;
      for (auto& no : notifiers_)
        if (no->config().kind == NotifierConfig::Kind::Alertmanager ? am : t.notify) no->enqueue(n);
      continue;
    }
    auto& s = sent_[key];
    s.people = s.people || (t.change == AlertChange::Firing && t.notify);
    s.n = n;
    s.n.state = "firing";
    for (auto& no : notifiers_) {
      if (no->config().kind == NotifierConfig::Kind::Alertmanager) {
        if (t.change == AlertChange::Repeat) continue; // resend_due keeps it alive
        AlertNotification a = s.n;
        a.ends_ms = t.ts_ms + kLapseResends * no->config().resend_every.count();
        no->enqueue(std::move(a));
      } else if (t.notify) {
        no->enqueue(n);
      }
    }
  }
  auto firing = eval_.firing();
  std::lock_guard lock(board_mu_);
  firing_ = std::move(firing);
  for (auto& r : recent) {
    recent_.push_front(std::move(r));
    if (recent_.size() > kRecent) recent_.pop_back();
  }
}

std::vector<FiringAlert> AlertEngine::firing() const {
  std::lock_guard lock(board_mu_);
  return firing_;
}

nlohmann::json AlertEngine::json() const {
  nlohmann::json firing = nlohmann::json::array(), recent = nlohmann::json::array(),
                 notifiers = nlohmann::json::array();
  {
    std::lock_guard lock(board_mu_);
    for (const auto& a : firing_)
      firing.push_back({{"rule", a.rule},
                        {"severity", a.severity},
                        {"scope", a.scope},
                        {"message", a.message},
                        {"value", opt(a.value)},
                        {"threshold", a.threshold},
                        {"since", iso_utc_ms(a.since_ms)}});
    for (const auto& r : recent_)
      recent.push_back(r);
  }
  for (const auto& n : notifiers_)
    notifiers.push_back({{"name", n->config().name},
                         {"kind", kind_name(n->config().kind)},
                         {"sent", n->stats().sent.load()},
                         {"failed", n->stats().failed.load()},
                         {"dropped", n->stats().dropped.load()}});
  return {{"rules", cfg_.rules.size()},
          {"firing", std::move(firing)},
          {"recent", std::move(recent)},
          {"notifiers", std::move(notifiers)},
          {"frames_dropped", frames_dropped_.load()}};
}

} // namespace wattscope
