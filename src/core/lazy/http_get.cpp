#include "core/lazy/http_get.hpp"

#include <mutex>

#include <curl/curl.h>
#include <fmt/format.h>

#include "core/lazy/lazy_lib.hpp"

namespace wattscope {

namespace {
struct Body {
  std::string text;
  size_t max = 0;
  bool too_big = false;
};
size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* b = static_cast<Body*>(user);
  if (b->text.size() + size * n > b->max) {
    b->too_big = true;
    return 0; // aborts the transfer
  }
  b->text.append(data, size * n);
  return size * n;
}
} // namespace

std::optional<std::string> http_get(const HttpGet& request, std::string& error) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* h = curl_easy_init();
  if (!h) {
    error = lazy::curl().available() ? "libcurl could not start a transfer" : lazy::curl().error();
    return std::nullopt;
  }
  char errbuf[CURL_ERROR_SIZE] = {};
  Body body;
  body.max = request.max_body_bytes;
  curl_slist* headers = nullptr;
  if (!request.bearer_token.empty()) {
    headers = curl_slist_append(headers, ("Authorization: Bearer " + request.bearer_token).c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  }
  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
  curl_easy_setopt(h, CURLOPT_USERAGENT, request.user_agent.c_str());
  curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, ""); // gzip where the server offers it
  if (!request.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, request.ca_file.c_str());
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
  const CURLcode rc = curl_easy_perform(h);
  curl_easy_cleanup(h);
  curl_slist_free_all(headers);
  if (body.too_big) {
    error = fmt::format("the answer is larger than {} bytes", request.max_body_bytes);
    return std::nullopt;
  }
  if (rc != CURLE_OK) {
    error = errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
    return std::nullopt;
  }
  return std::move(body.text);
}

} // namespace wattscope
