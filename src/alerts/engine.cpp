#include "alerts/engine.hpp"

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
  // Side by side: each notifier has until the same deadline.
  for (auto& n : notifiers_)
    n->stop(delivery_deadline);
  if (const int64_t d = frames_dropped_.load())
    emit_({0, wall_now_ms(), "alert-frames-dropped", "alerts",
           fmt::format("{} frames were not evaluated: the alert thread fell {} frames behind", d, kFrameQueue)});
}

void AlertEngine::loop() {
  for (;;) {
    std::shared_ptr<const Frame> f;
    {
      std::unique_lock lock(qmu_);
      qcv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return; // stopping, and every frame offered is evaluated
      f = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      handle(*f);
    } catch (const std::exception& e) {
      spdlog::error("alerts: {}", e.what()); // a thread must not end the process
    }
  }
}

void AlertEngine::handle(const Frame& f) {
  eval_.evaluate(f, scratch_);
  if (scratch_.empty()) return;
  std::vector<nlohmann::json> recent;
  for (const auto& t : scratch_) {
    const AlertRule& r = eval_.rules()[t.rule];
    const std::string message = eval_.message(t);
    const std::string unit = r.kind == AlertKind::DeviceLost ? std::string()
                             : r.relative_to.empty()         ? std::string(alert_metric_unit(r.scope, r.metric_index))
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
    if (!t.notify) continue;
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
        ctx_.task};
    for (auto& no : notifiers_)
      no->enqueue(n);
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
