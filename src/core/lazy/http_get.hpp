// One bounded HTTP(S) GET through the lazily opened libcurl (lazy_lib.hpp): a time limit, a size limit (a larger
// answer is aborted, not buffered), http and https only, and an error text that says what went wrong. Used by the
// kubelet's pod names and by --scrape.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace wattscope {

struct HttpGet {
  std::string url;
  std::chrono::milliseconds timeout{3000};
  size_t max_body_bytes = 4u << 20;
  std::string bearer_token; // sent as "Authorization: Bearer" when not empty
  std::string ca_file;      // https: the server's CA; empty: the system's
  std::string user_agent = "wattscope";
};

// The body of a 2xx answer; nullopt with `error` set otherwise (no libcurl, a refused connection, a timeout, an HTTP
// error status, an answer over max_body_bytes).
std::optional<std::string> http_get(const HttpGet& request, std::string& error);

// One bounded HTTP(S) POST (remote-write): the status is the caller's to judge (a 5xx is retried, a 4xx is not).
struct HttpPost {
  std::string url;
  std::string body;
  std::vector<std::string> headers; // "Name: value"
  std::chrono::milliseconds timeout{30000};
  std::string bearer_token;        // "Authorization: Bearer" when not empty
  std::string user, password;      // basic auth when user is not empty
  std::string ca_file;             // https: the server's CA; empty: the system's
  std::string cert_file, key_file; // https: a client certificate
  std::string user_agent = "wattscope";
  // Polled while the request runs (several times a second): true aborts it (a run that ends mid-request).
  std::function<bool()> abort;
};
struct HttpAnswer {
  long status = 0;     // 0: no answer (refused, timed out, TLS failed: `error` says)
  std::string error;   // when status is 0
  std::string excerpt; // the answer's first 512 bytes (a receiver's reason for refusing)
};
HttpAnswer http_post(const HttpPost& request);

} // namespace wattscope
