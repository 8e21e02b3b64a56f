// The alert engine of one session (issue 14): frames in from the sampler thread through a bounded queue that never
// blocks it, rules evaluated on the engine's own thread, every transition an `events` row (kind `alert`), and
// notifications handed to the notifiers, each on its own thread.
//
// For serve and `top`: firing() and json() are safe from any thread and cheap (a copy under a short lock). The JSON
// is what serve answers at /api/v1/alerts:
//   {"rules": 8, "firing": [{"rule", "severity", "scope", "message", "value", "threshold", "since"}],
//    "recent": [{"rule", "severity", "scope", "state", "message", "value", "threshold", "ts"}],   (newest first)
//    "notifiers": [{"name", "kind", "sent", "failed", "dropped"}], "frames_dropped": 0}
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "alerts/evaluator.hpp"
#include "alerts/notifiers.hpp"
#include "alerts/rules.hpp"
#include "core/frame.hpp"

namespace wattscope {

struct AlertContext {
  std::string host;
  std::string run_id;
  std::string task;
  bool run_mode = false; // `run`: the GPUs recorded are the command's (allocated_only rules)
};

class AlertEngine {
public:
  // `emit`: where the engine's events go (Accounting::add_event); thread-safe, never blocking for long.
  AlertEngine(AlertConfig cfg, AlertContext ctx, std::function<void(Event)> emit);
  ~AlertEngine();
  AlertEngine(const AlertEngine&) = delete;
  AlertEngine& operator=(const AlertEngine&) = delete;

  void start();
  // From the sampler thread: queues the frame and returns at once. When the engine is kFrameQueue frames behind,
  // the oldest waiting frame is dropped (and counted): evaluation never holds sampling up.
  void offer(std::shared_ptr<const Frame> f);
  // Evaluates every frame already offered, then gives the notifiers until `delivery_deadline` to deliver.
  void stop(std::chrono::steady_clock::time_point delivery_deadline);

  std::vector<FiringAlert> firing() const;
  nlohmann::json json() const;
  const AlertConfig& config() const { return cfg_; }
  int64_t frames_dropped() const { return frames_dropped_.load(); }
  static constexpr size_t kFrameQueue = 64;
  static constexpr size_t kRecent = 100;

  // issue 32: firing alerts go to Alertmanager again every resend_every with endsAt this many periods ahead (as
  // Prometheus does: 4 x its resend delay), so that Alertmanager keeps them as long as wattscope does.
  static constexpr int kLapseResends = 4;

private:
  void loop();
  void handle(const Frame& f);
  // issue 32: re-sends what is firing to each Alertmanager whose period is due; the next time one is.
  std::chrono::steady_clock::time_point resend_due(std::chrono::steady_clock::time_point now);
  void resolve_at_end(); // the session is over: what still fires is resolved, for Alertmanager and for people
  void deliver(const AlertNotification& n, bool to_people);

  AlertConfig cfg_;
  AlertContext ctx_;
  std::function<void(Event)> emit_;
  AlertEvaluator eval_;
  std::vector<std::unique_ptr<Notifier>> notifiers_;
  std::vector<AlertTransition> scratch_;

  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<std::shared_ptr<const Frame>> queue_;
  bool stopping_ = false;
  bool started_ = false;
  std::atomic<int64_t> frames_dropped_{0};
  std::thread thread_;

  // ---- issue 32, on the engine's thread: every alert firing now as last sent, by (rule, scope), and whether people
  // were told it fires (so they hear it resolve); the next re-send to each notifier (Alertmanager ones only); UUIDs
  // by GPU index, from the frames' device rows.
  struct Sent {
    AlertNotification n;
    bool people = false;
  };
  std::map<std::pair<std::string, std::string>, Sent> sent_;
  std::vector<std::chrono::steady_clock::time_point> next_resend_;
  std::vector<std::string> uuids_;

  mutable std::mutex board_mu_; // what serve and top read
  std::vector<FiringAlert> firing_;
  std::deque<nlohmann::json> recent_;
};

} // namespace wattscope
