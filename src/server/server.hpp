// `wattscope serve`'s HTTP side: Prometheus /metrics, the JSON API, server-sent events and the dashboard, all
// answered from LiveState. Binds to loopback unless told otherwise; any other address needs a bearer token.
//
// One event-driven network thread (Boost.Asio, requests parsed by Boost.Beast) holds every connection, so no client
// can hold a thread: a request header block must arrive whole within header_timeout, connections are capped in all
// and per address (when full, the longest-waiting connection of that address that has not sent a whole request is
// closed to make room, and if there is none the newcomer gets a 503 at once: nothing is queued), event streams are
// written without blocking from a bounded buffer, and a client that takes no byte for stalled_write_timeout is
// dropped. Requests that read a store or a long history run on a small pool started on first use.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "server/live.hpp"
#include "sinks/store.hpp"

namespace wattscope {

namespace advice {
class LiveAdvice; // advice (issue 14)
}

struct ListenAddress {
  std::string host = "127.0.0.1";
  int port = 9400;
  bool loopback() const;
};
// "127.0.0.1:9400", ":9400" (loopback), "0.0.0.0:9400", "[::1]:9400". Throws std::invalid_argument.
ListenAddress parse_listen(const std::string& text);

struct ServerOptions {
  ListenAddress listen;
  std::string token;              // empty: no authentication (loopback only)
  std::optional<StoreSpec> store; // for /api/v1/runs
  // Against misbehaving clients; the defaults hold a Prometheus, a few dozen dashboards and a reverse proxy.
  int max_connections = 1024;                     // lowered at bind() to what the open-file limit allows
  int max_connections_per_address = 256;          // a browser opens up to 6 per host, plus one event stream per tab
  std::chrono::milliseconds header_timeout{5000}; // whole request header block; also the keep-alive idle time
  std::chrono::milliseconds stalled_write_timeout{5000}; // a client that takes no byte for this long is dropped
  size_t max_header_bytes = 8 * 1024;                    // larger header blocks get 431
  size_t max_stream_buffer_bytes = 64 * 1024;            // per event stream; frames beyond it are skipped
  int workers = 2;                                       // for /api/v1/history and /api/v1/runs
  // ---- advice (issue 14): /api/v1/advice answers from it (cached; null: 404) ----
  advice::LiveAdvice* advice = nullptr;
  // ---- end advice ----
};

class HttpServer {
public:
  HttpServer(LiveState& live, ServerOptions opts);
  ~HttpServer();
  // Binds; throws std::runtime_error naming the address and the reason.
  void bind();
  void run(); // serves until stop(), on the calling thread
  void stop();
  int port() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace wattscope
