// The libcurl entry points wattscope calls, each forwarding to libcurl opened on first use (see lazy_lib.hpp).
// Without the library each fails the way libcurl itself reports failure (a null handle, CURLE_FAILED_INIT), which
// every caller already handles; lazy::curl().error() says why.
#include "core/lazy/lazy_lib.hpp"

#include <cstdarg>
#include <curl/curl.h>

namespace {
using wattscope::lazy::curl;
using wattscope::lazy::function;
} // namespace

extern "C" {

CURLcode curl_global_init(long flags) {
  static auto* f = function<decltype(::curl_global_init)>(curl(), "curl_global_init");
  return f ? f(flags) : CURLE_FAILED_INIT;
}

CURL* curl_easy_init() {
  static auto* f = function<decltype(::curl_easy_init)>(curl(), "curl_easy_init");
  return f ? f() : nullptr;
}

void curl_easy_cleanup(CURL* h) {
  static auto* f = function<decltype(::curl_easy_cleanup)>(curl(), "curl_easy_cleanup");
  if (f) f(h);
}

CURLcode curl_easy_perform(CURL* h) {
  static auto* f = function<decltype(::curl_easy_perform)>(curl(), "curl_easy_perform");
  return f ? f(h) : CURLE_FAILED_INIT;
}

const char* curl_easy_strerror(CURLcode rc) {
  static auto* f = function<decltype(::curl_easy_strerror)>(curl(), "curl_easy_strerror");
  return f ? f(rc) : "libcurl is not available";
}

curl_slist* curl_slist_append(curl_slist* list, const char* s) {
  static auto* f = function<decltype(::curl_slist_append)>(curl(), "curl_slist_append");
  return f ? f(list, s) : nullptr;
}

void curl_slist_free_all(curl_slist* list) {
  static auto* f = function<decltype(::curl_slist_free_all)>(curl(), "curl_slist_free_all");
  if (f) f(list);
}

// The option's number says the type of its one argument (curl.h's CURLOPTTYPE_* ranges, which libcurl itself reads
// the argument by): long, a data pointer, a function pointer, curl_off_t, or a blob pointer.
CURLcode curl_easy_setopt(CURL* h, CURLoption option, ...) {
  static auto* f = function<CURLcode(CURL*, CURLoption, ...)>(curl(), "curl_easy_setopt");
  if (!f) return CURLE_FAILED_INIT;
  va_list ap;
  va_start(ap, option);
  CURLcode rc;
  if (option < CURLOPTTYPE_OBJECTPOINT)
    rc = f(h, option, va_arg(ap, long));
  else if (option < CURLOPTTYPE_FUNCTIONPOINT)
    rc = f(h, option, va_arg(ap, void*));
  else if (option < CURLOPTTYPE_OFF_T)
    rc = f(h, option, va_arg(ap, void (*)()));
  else if (option < CURLOPTTYPE_BLOB)
    rc = f(h, option, va_arg(ap, curl_off_t));
  else
    rc = f(h, option, va_arg(ap, void*));
  va_end(ap);
  return rc;
}

// Every CURLINFO_* argument is a pointer to where the answer goes.
CURLcode curl_easy_getinfo(CURL* h, CURLINFO info, ...) {
  static auto* f = function<CURLcode(CURL*, CURLINFO, ...)>(curl(), "curl_easy_getinfo");
  if (!f) return CURLE_FAILED_INIT;
  va_list ap;
  va_start(ap, info);
  const CURLcode rc = f(h, info, va_arg(ap, void*));
  va_end(ap);
  return rc;
}

// issue 31: the multi interface, so that a notifier can look at its abort flag every 50 ms during a transfer.
CURLM* curl_multi_init() {
  static auto* f = function<decltype(::curl_multi_init)>(curl(), "curl_multi_init");
  return f ? f() : nullptr;
}

CURLMcode curl_multi_add_handle(CURLM* m, CURL* h) {
  static auto* f = function<decltype(::curl_multi_add_handle)>(curl(), "curl_multi_add_handle");
  return f ? f(m, h) : CURLM_INTERNAL_ERROR;
}

CURLMcode curl_multi_remove_handle(CURLM* m, CURL* h) {
  static auto* f = function<decltype(::curl_multi_remove_handle)>(curl(), "curl_multi_remove_handle");
  return f ? f(m, h) : CURLM_INTERNAL_ERROR;
}

CURLMcode curl_multi_perform(CURLM* m, int* running) {
  static auto* f = function<decltype(::curl_multi_perform)>(curl(), "curl_multi_perform");
  return f ? f(m, running) : CURLM_INTERNAL_ERROR;
}

CURLMcode curl_multi_poll(CURLM* m, curl_waitfd* fds, unsigned int nfds, int timeout_ms, int* numfds) {
  static auto* f = function<decltype(::curl_multi_poll)>(curl(), "curl_multi_poll");
  return f ? f(m, fds, nfds, timeout_ms, numfds) : CURLM_INTERNAL_ERROR;
}

CURLMsg* curl_multi_info_read(CURLM* m, int* left) {
  static auto* f = function<decltype(::curl_multi_info_read)>(curl(), "curl_multi_info_read");
  return f ? f(m, left) : nullptr;
}

CURLMcode curl_multi_cleanup(CURLM* m) {
  static auto* f = function<decltype(::curl_multi_cleanup)>(curl(), "curl_multi_cleanup");
  return f ? f(m) : CURLM_INTERNAL_ERROR;
}

} // extern "C"
