// `wattscope serve`'s HTTP side (cpp-httplib): Prometheus /metrics, the JSON API, server-sent events and the dashboard,
// all answered from LiveState. Binds to loopback unless told otherwise; any other address needs a bearer token.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "server/live.hpp"
#include "sinks/store.hpp"

namespace wattscope {

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
  int threads = 96;               // each open event stream holds one
};

class HttpServer {
public:
  HttpServer(LiveState& live, ServerOptions opts);
  ~HttpServer();
  // Binds; throws std::runtime_error naming the address and the reason.
  void bind();
  void run(); // serves until stop()
  void stop();
  int port() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace wattscope
