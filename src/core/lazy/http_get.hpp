// One bounded HTTP(S) GET through the lazily opened libcurl (lazy_lib.hpp): a time limit, a size limit (a larger
// answer is aborted, not buffered), http and https only, and an error text that says what went wrong. Used by the
// kubelet's pod names and by --scrape.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

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

} // namespace wattscope
