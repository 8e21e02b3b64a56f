#include "alerts/notifiers.hpp"

#include "core/lazy/lazy_lib.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <tuple>

#include <curl/curl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_opt.hpp"
#include "core/thread_name.hpp"
#include "core/time_util.hpp"

namespace wattscope {

namespace {

void global_curl_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Scope names come from cgroups and rule messages from a file: neither may break a header line.
std::string one_line(std::string_view s) {
  std::string out;
  for (char c : s)
    out += (c == '\r' || c == '\n' || c == '\t') ? ' ' : c;
  return out;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

std::string rfc2822(int64_t ts_ms) {
  const std::time_t t = static_cast<std::time_t>(ts_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S +0000", &tm);
  return buf;
}

struct ReadCursor {
  const std::string* data;
  size_t pos = 0;
};
size_t read_body(char* buf, size_t size, size_t n, void* user) {
  auto* c = static_cast<ReadCursor*>(user);
  const size_t len = std::min(size * n, c->data->size() - c->pos);
  std::memcpy(buf, c->data->data() + c->pos, len);
  c->pos += len;
  return len;
}
size_t discard(char*, size_t size, size_t n, void*) {
  return size * n; // the receiver's answer is not needed: its status says it all
}
int abort_check(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<std::atomic<bool>*>(user)->load() ? 1 : 0;
}

// curl_easy_perform, but looking at `abort` every 50 ms (issue 31): the easy interface waits up to a second between
// progress callbacks, which three dead notifiers once added up past the end-of-run deadline.
CURLcode perform(CURL* h, const std::atomic<bool>& abort) {
  CURLM* m = curl_multi_init();
  if (!m) return curl_easy_perform(h);
  if (curl_multi_add_handle(m, h) != CURLM_OK) {
    curl_multi_cleanup(m);
    return curl_easy_perform(h);
  }
  CURLcode result = CURLE_OK;
  bool done = false;
  for (int running = 1; !done;) {
    if (curl_multi_perform(m, &running) != CURLM_OK) {
      result = CURLE_FAILED_INIT;
      break;
    }
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(m, &left))
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == h) {
        result = msg->data.result;
        done = true;
      }
    if (done || running == 0) break;
    if (abort.load()) {
      result = CURLE_ABORTED_BY_CALLBACK;
      break;
    }
    curl_multi_poll(m, nullptr, 0, 50, nullptr);
  }
  curl_multi_remove_handle(m, h);
  curl_multi_cleanup(m);
  return result;
}
} // namespace

// "user\npassword\n" from a file only its owner can read (as ssh treats keys).
std::pair<std::string, std::string> read_credentials(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("credentials_file " + path + ": cannot read it");
  if (!S_ISREG(st.st_mode)) throw std::runtime_error("credentials_file " + path + ": not a regular file");
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    throw std::runtime_error("credentials_file " + path + ": readable by others; chmod 600 it");
  std::ifstream in(path);
  std::string user, pass;
  std::getline(in, user);
  std::getline(in, pass);
  return {user, pass};
}

std::vector<std::string> header_lines(const std::string& path) {
  std::vector<std::string> out;
  if (path.empty()) return out;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw std::runtime_error("header_file " + path + ": not a readable regular file");
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    throw std::runtime_error("header_file " + path + ": readable by others; chmod 600 it");
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::string notification_text(const AlertNotification& n) {
  return fmt::format("[{}] {} on {} ({}): {}", upper(n.state == "repeat" ? "firing" : n.state), n.rule, n.scope, n.host,
                     n.message);
}

std::string webhook_body(const AlertNotification& n) {
  return dump({{"text", notification_text(n)},
               {"rule", n.rule},
               {"state", n.state},
               {"severity", n.severity},
               {"scope", n.scope},
               {"message", n.message},
               {"value", opt(n.value)},
               {"threshold", n.threshold},
               {"unit", n.unit},
               {"ts", iso_utc_ms(n.ts_ms)},
               {"since", iso_utc_ms(n.since_ms)},
               {"host", n.host},
               {"run_id", n.run_id},
               {"task", n.task}});
}

std::string alertmanager_body(const AlertNotification& n) {
  nlohmann::json labels = {{"alertname", n.rule}, {"severity", n.severity}, {"scope", n.scope}, {"instance", n.host},
                           {"job", "wattscope"},  {"task", n.task},         {"host", n.host}};
  // issue 32: the labels the GPU series carry, so that an inhibition or a silence can match either source by them
  if (!n.gpu.empty()) labels["gpu"] = n.gpu;
  if (!n.uuid.empty()) labels["uuid"] = n.uuid;
  nlohmann::json a = {{"labels", std::move(labels)},
                      {"annotations", {{"summary", n.message}, {"run_id", n.run_id}}},
                      {"startsAt", iso_utc_ms(n.since_ms)}};
  // Firing: endsAt a few re-sends ahead (Alertmanager resolves it then unless it hears again, as from Prometheus).
  // Resolved: when it cleared.
  if (n.state == "resolved")
    a["endsAt"] = iso_utc_ms(n.ends_ms ? n.ends_ms : n.ts_ms);
  else if (n.ends_ms)
    a["endsAt"] = iso_utc_ms(n.ends_ms);
  return dump(nlohmann::json::array({a}));
}

std::string email_message(const NotifierConfig& c, const AlertNotification& n) {
  std::string to;
  for (const auto& t : c.to)
    to += (to.empty() ? "" : ", ") + t;
  std::mt19937_64 rng(std::random_device{}());
  std::string out;
  out += "Date: " + rfc2822(n.ts_ms) + "\r\n";
  out += "From: " + c.from + "\r\n";
  out += "To: " + to + "\r\n";
  out += fmt::format("Message-ID: <{}.{:016x}@wattscope>\r\n", n.ts_ms, rng());
  out += "Subject: [wattscope] " + one_line(notification_text(n)).substr(0, 200) + "\r\n";
  out += "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n";
  out += one_line(n.message) + "\r\n\r\n";
  out += fmt::format("rule:      {}\r\nstate:     {}\r\nseverity:  {}\r\nscope:     {}\r\n", n.rule, n.state,
                     n.severity, one_line(n.scope));
  if (n.value)
    out += fmt::format("value:     {:.6g} {}\r\nthreshold: {:.6g} {}\r\n", *n.value, n.unit, n.threshold, n.unit);
  out += fmt::format("since:     {}\r\nhost:      {}\r\nrun:       {} ({})\r\n", iso_utc_ms(n.since_ms),
                     one_line(n.host), n.run_id, one_line(n.task));
  return out;
}

Notifier::Notifier(NotifierConfig cfg, std::function<void(const AlertNotification&, const std::string&)> on_failure)
    : cfg_(std::move(cfg)), on_failure_(std::move(on_failure)) {
  global_curl_init();
}

Notifier::~Notifier() {
  if (thread_.joinable()) stop(std::chrono::steady_clock::now());
}

void Notifier::start() {
  thread_ = std::thread([this] {
    name_this_thread("ws-notify");
    loop();
  });
}

void Notifier::enqueue(AlertNotification n) {
  std::optional<AlertNotification> dropped;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    if (cfg_.kind == NotifierConfig::Kind::Alertmanager) { // issue 32: its latest state once, in place
      for (auto& q : queue_)
        if (q.rule == n.rule && q.scope == n.scope) {
          q = std::move(n);
          return;
        }
    }
    if (queue_.size() >= kQueueCap) {
      dropped = std::move(queue_.front());
      queue_.pop_front();
    }
    queue_.push_back(std::move(n));
  }
  cv_.notify_one();
  if (dropped) {
    stats_.dropped++;
    on_failure_(*dropped, fmt::format("dropped: more than {} notifications waiting for {}", kQueueCap, cfg_.name));
  }
}

void Notifier::stop(std::chrono::steady_clock::time_point deadline) {
  request_stop(deadline);
  wait_until(deadline);
  abort_and_join();
}

void Notifier::request_stop(std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    deadline_ = deadline;
  }
  cv_.notify_all();
}

bool Notifier::wait_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return cv_.wait_until(lock, deadline, [&] { return finished_ || !thread_.joinable(); });
}

void Notifier::abort_and_join() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    if (!finished_) abort_ = true; // the transfer in flight sees it within a poll (send_once), the back-off at once
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Notifier::loop() {
  struct Finished { // wakes wait_until() however the loop ends
    Notifier* n;
    ~Finished() {
      {
        std::lock_guard lock(n->mu_);
        n->finished_ = true;
      }
      n->cv_.notify_all();
    }
  } finished{this};
  for (;;) {
    AlertNotification n;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      if (stopping_ && (abort_ || std::chrono::steady_clock::now() >= deadline_)) {
        // The run is over and its time to deliver is spent: what is left is reported, not sent.
        auto left = std::move(queue_);
        queue_.clear();
        lock.unlock();
        for (const auto& l : left) {
          stats_.failed++;
          on_failure_(l, "not delivered: the run ended first");
        }
        return;
      }
      n = std::move(queue_.front());
      queue_.pop_front();
    }
    auto backoff = cfg_.backoff;
    std::string error;
    int attempts = 0;
    for (;;) {
      ++attempts;
      error = send_once(n);
      if (error.empty() || attempts > cfg_.retries || abort_) break;
      // Back-off, cut short when the run ends past its delivery deadline.
      std::unique_lock lock(mu_);
      const auto until = std::chrono::steady_clock::now() + backoff;
      cv_.wait_until(lock, stopping_ ? std::min(until, deadline_) : until,
                     [&] { return abort_.load() || (stopping_ && std::chrono::steady_clock::now() >= deadline_); });
      if (abort_ || (stopping_ && std::chrono::steady_clock::now() >= deadline_)) break;
      backoff *= 2;
    }
    if (error.empty()) {
      stats_.sent++;
    } else {
      stats_.failed++;
      on_failure_(n, fmt::format("{} (after {} attempt{})", error, attempts, attempts == 1 ? "" : "s"));
    }
  }
}

std::string Notifier::send_once(const AlertNotification& n) {
  CURL* h = curl_easy_init();
  if (!h) return lazy::curl().available() ? "libcurl: cannot make a handle" : lazy::curl().error();
  std::unique_ptr<CURL, void (*)(CURL*)> guard(h, curl_easy_cleanup);
  curl_slist* headers = nullptr;
  curl_slist* rcpt = nullptr;
  auto free_lists = [&] {
    curl_slist_free_all(headers);
    curl_slist_free_all(rcpt);
  };
  std::string body, url = cfg_.url;
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::string user, pass;
  try {
    switch (cfg_.kind) {
    case NotifierConfig::Kind::Webhook:
      body = webhook_body(n);
      for (const auto& l : header_lines(cfg_.header_file))
        headers = curl_slist_append(headers, l.c_str());
      break;
    case NotifierConfig::Kind::Alertmanager:
      body = alertmanager_body(n);
      while (!url.empty() && url.back() == '/')
        url.pop_back();
      url += "/api/v2/alerts";
      for (const auto& l : header_lines(cfg_.header_file))
        headers = curl_slist_append(headers, l.c_str());
      break;
    case NotifierConfig::Kind::Email:
      body = email_message(cfg_, n);
      if (!cfg_.credentials_file.empty()) {
        std::tie(user, pass) = read_credentials(cfg_.credentials_file);
      } else {
        if (!cfg_.username_env.empty())
          if (const char* u = std::getenv(cfg_.username_env.c_str())) user = u;
        if (!cfg_.password_env.empty())
          if (const char* p = std::getenv(cfg_.password_env.c_str())) pass = p;
      }
      break;
    }
  } catch (const std::exception& e) {
    free_lists();
    return e.what();
  }
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(cfg_.timeout.count()));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(cfg_.timeout.count()));
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, abort_check);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &abort_);
  if (!cfg_.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, cfg_.ca_file.c_str());
  ReadCursor cursor{&body, 0};
  if (cfg_.kind == NotifierConfig::Kind::Email) {
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
    const std::string from = "<" + cfg_.from + ">";
    curl_easy_setopt(h, CURLOPT_MAIL_FROM, from.c_str());
    for (const auto& t : cfg_.to)
      rcpt = curl_slist_append(rcpt, ("<" + t + ">").c_str());
    curl_easy_setopt(h, CURLOPT_MAIL_RCPT, rcpt);
    curl_easy_setopt(h, CURLOPT_USE_SSL,
                     cfg_.starttls == "required"        ? static_cast<long>(CURLUSESSL_ALL)
                     : cfg_.starttls == "opportunistic" ? static_cast<long>(CURLUSESSL_TRY)
                                                        : static_cast<long>(CURLUSESSL_NONE));
    if (!user.empty()) curl_easy_setopt(h, CURLOPT_USERNAME, user.c_str());
    if (!pass.empty()) curl_easy_setopt(h, CURLOPT_PASSWORD, pass.c_str());
    curl_easy_setopt(h, CURLOPT_READFUNCTION, read_body);
    curl_easy_setopt(h, CURLOPT_READDATA, &cursor);
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
  } else {
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
  }
  const CURLcode rc = perform(h, abort_);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  free_lists();
  if (rc != CURLE_OK)
    return fmt::format("{}: {}", cfg_.name, errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc)));
  if (cfg_.kind != NotifierConfig::Kind::Email && (status < 200 || status > 299))
    return fmt::format("{}: HTTP {}", cfg_.name, status);
  return {};
}

} // namespace wattscope
