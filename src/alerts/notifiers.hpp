// Where alert notifications go (issue 14): a generic webhook (JSON with a Slack-compatible `text`), e-mail through
// SMTP (libcurl, STARTTLS, credentials from the environment or a file), and Prometheus Alertmanager's v2 API. Each
// notifier delivers on its own thread from a bounded queue, with retries and exponential back-off, so a dead or slow
// endpoint delays only its own notifications: never sampling, storing, evaluation, or the other notifiers.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "alerts/rules.hpp"

namespace wattscope {

struct AlertNotification {
  std::string rule;
  std::string severity;
  std::string scope;
  std::string state; // firing | resolved | repeat
  std::string message;
  std::optional<double> value;
  double threshold = 0;
  std::string unit;
  int64_t ts_ms = 0;
  int64_t since_ms = 0;
  std::string host, run_id, task;
  // issue 32: a GPU scope's index and UUID, labelled as every GPU series is (gpu="0", uuid="GPU-…"); empty otherwise.
  std::string gpu, uuid;
  // issue 32, Alertmanager's endsAt: firing, when the alert lapses unless sent again (the engine re-sends it every
  // resend_every); resolved, when it cleared. 0: not set.
  int64_t ends_ms = 0;
};

// One line a person reads: "[FIRING] gpu_temperature_high on gpu0 (node7): gpu0 at 91 °C, above 85 °C".
std::string notification_text(const AlertNotification& n);
// The bodies each notifier sends (tests and docs/alerts.md show them).
std::string webhook_body(const AlertNotification& n);
std::string alertmanager_body(const AlertNotification& n);
std::string email_message(const NotifierConfig& c, const AlertNotification& n);

// The files a notifier reads at each delivery, read and checked as delivery does (a regular file, owner-only
// permissions); `alerts check` calls them too. Throw std::runtime_error naming the file and the problem.
std::pair<std::string, std::string> read_credentials(const std::string& path); // "user\npassword\n"
std::vector<std::string> header_lines(const std::string& path);                // "" -> none

struct DeliveryStats {
  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> failed{0};  // notifications given up after every retry
  std::atomic<int64_t> dropped{0}; // the queue was full
};

class Notifier {
public:
  // `on_failure(detail)`: a notification given up (after its retries, dropped, or left when the run ended); called
  // on the notifier's thread, must not block.
  Notifier(NotifierConfig cfg, std::function<void(const AlertNotification&, const std::string&)> on_failure);
  ~Notifier();
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;
  void start();
  // Never blocks; the oldest waiting notification goes when the queue is full. For Alertmanager, a notification of an
  // alert (rule and scope) already waiting takes its place: Alertmanager wants the alert's latest state, once.
  void enqueue(AlertNotification n);
  // Delivers what is queued until `deadline`, then abandons the rest (each one reported as a failure).
  void stop(std::chrono::steady_clock::time_point deadline);
  // issue 31: the same in steps, so that a session's notifiers all work to one deadline side by side, and a dead one
  // cannot add its overrun to another's: request_stop on each, wait_until the deadline on each, then abort and join.
  void request_stop(std::chrono::steady_clock::time_point deadline);
  bool wait_until(std::chrono::steady_clock::time_point deadline); // true: the thread has finished
  void abort_and_join(); // cuts the transfer in flight (within ~50 ms), reports what is left, joins
  const NotifierConfig& config() const { return cfg_; }
  const DeliveryStats& stats() const { return stats_; }
  static constexpr size_t kQueueCap = 256;

private:
  void loop();
  // One attempt; "" on success, else why it failed.
  std::string send_once(const AlertNotification& n);

  NotifierConfig cfg_;
  std::function<void(const AlertNotification&, const std::string&)> on_failure_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<AlertNotification> queue_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point deadline_{};
  std::atomic<bool> abort_{false}; // past the deadline: the transfer in flight is cut
  bool finished_ = false;          // under mu_: loop() has returned
  DeliveryStats stats_;
  std::thread thread_;
};

} // namespace wattscope
