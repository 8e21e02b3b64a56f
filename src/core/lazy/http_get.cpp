#include "core/lazy/http_get.hpp"

#include <algorithm>
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
// Keeps the first bytes of an answer and reads past the rest (a receiver's error text can be long).
size_t on_excerpt(char* data, size_t size, size_t n, void* user) {
  auto* b = static_cast<Body*>(user);
  const size_t len = size * n;
  if (b->text.size() < b->max) b->text.append(data, std::min(len, b->max - b->text.size()));
  return len;
}
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* abort = static_cast<const std::function<bool()>*>(user);
  return (*abort)() ? 1 : 0; // non-zero aborts the transfer (CURLE_ABORTED_BY_CALLBACK)
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

HttpAnswer http_post(const HttpPost& request) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HttpAnswer answer;
  CURL* h = curl_easy_init();
  if (!h) {
    answer.error = lazy::curl().available() ? "libcurl could not start a transfer" : lazy::curl().error();
    return answer;
  }
  char errbuf[CURL_ERROR_SIZE] = {};
  Body body;
  body.max = 512;
  curl_slist* headers = nullptr;
  for (const auto& hdr : request.headers)
    headers = curl_slist_append(headers, hdr.c_str());
  if (!request.bearer_token.empty())
    headers = curl_slist_append(headers, ("Authorization: Bearer " + request.bearer_token).c_str());
  headers = curl_slist_append(headers, "Expect:"); // no 100-continue round trip before each batch
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min<int64_t>(request.timeout.count(), 10000)));
  curl_easy_setopt(h, CURLOPT_USERAGENT, request.user_agent.c_str());
  curl_easy_setopt(h, CURLOPT_POST, 1L);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body.data());
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  if (!request.user.empty()) {
    curl_easy_setopt(h, CURLOPT_USERNAME, request.user.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, request.password.c_str());
  }
  if (!request.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, request.ca_file.c_str());
  if (!request.cert_file.empty()) curl_easy_setopt(h, CURLOPT_SSLCERT, request.cert_file.c_str());
  if (!request.key_file.empty()) curl_easy_setopt(h, CURLOPT_SSLKEY, request.key_file.c_str());
  if (request.abort) {
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &request.abort);
  }
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_excerpt);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
  const CURLcode rc = curl_easy_perform(h);
  if (rc == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &answer.status);
  curl_easy_cleanup(h);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    answer.status = 0;
    answer.error = errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
  }
  answer.excerpt = std::move(body.text);
  return answer;
}

} // namespace wattscope
