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

private:
  void loop();
  void handle(const Frame& f);

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

  mutable std::mutex board_mu_; // what serve and top read
  std::vector<FiringAlert> firing_;
  std::deque<nlohmann::json> recent_;
};

} // namespace wattscope
