// A `wattscope serve` endpoint watched by top --connect: its event stream (/api/v1/events, one /api/v1/current
// document per frame) on one thread, its firing alerts (/api/v1/alerts, when it has them) on another, both through
// libcurl. The latest state is copied out under a lock; a host that stops sending is marked, never shown as if live.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "top/model.hpp"

namespace wattscope::top {

struct RemoteOptions {
  std::string url;   // http(s)://host:port, no trailing slash
  std::string token; // sent as "Authorization: Bearer TOKEN" when not empty
  std::chrono::milliseconds alerts_every{2000};
  std::chrono::milliseconds connect_timeout{3000};
};

// "http://h:9400/" -> "http://h:9400". Throws std::invalid_argument naming the problem: not http(s), no host,
// control characters or spaces.
std::string normalize_url(const std::string& url);

class RemoteHost {
public:
  explicit RemoteHost(RemoteOptions opts);
  ~RemoteHost(); // stops and joins its threads (within about a second)
  RemoteHost(const RemoteHost&) = delete;
  RemoteHost& operator=(const RemoteHost&) = delete;
  void start();
  // A copy of what is known now, with the state brought up to date (not answering when it went quiet).
  HostView snapshot(std::chrono::steady_clock::time_point now) const;
  // One event's data (a /api/v1/current document), from the stream's write callback (the stream thread alone).
  void on_event(const std::string& data);

private:
  void stream_loop();
  void alerts_loop();
  void fetch_forecast();                  // issue 36
  void mark_down(const std::string& why); // the stream thread alone
  void publish();                         // stream_view_ -> view_

  RemoteOptions opts_;
  // The stream thread's own view: each event is parsed and applied to it outside mu_, then copied into view_ (the
  // copy is bounded by the model's caps), so the UI thread's snapshot never waits on an endpoint's document.
  HostView stream_view_;
  mutable std::mutex mu_;
  HostView view_;
  std::atomic<bool> stop_{false};
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
  std::thread stream_, alerts_;
};

// curl_global_init, once, before any thread uses libcurl.
void init_http_client();

} // namespace wattscope::top
