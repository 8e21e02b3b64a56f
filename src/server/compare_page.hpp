// serve's compare view (issue 35): /runs/compare?... (the page) and /api/v1/compare?... (its JSON), read from the
// store on request and kept for a few seconds, drawn by the same builder and page as the static multi-run report.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "sinks/store.hpp"

namespace wattscope {

struct CompareAnswer {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

class CompareView {
public:
  explicit CompareView(StoreSpec store) : store_(std::move(store)) {}
  // `raw_query` is what follows '?'. A bad query is a 400 naming the problem, runs or tasks the store lacks a 404,
  // a store that cannot be read a 503. Thread-safe: serve's pool calls it.
  CompareAnswer answer(bool html, std::string_view raw_query);

  static constexpr int64_t kCacheMs = 10'000; // a stored run does not change; new ones show within 10 s
  static constexpr size_t kCacheEntries = 32;

private:
  struct Entry {
    int64_t at_ms = 0;
    std::string json, html;
  };
  StoreSpec store_;
  std::mutex mutex_;
  std::map<std::string, Entry> cache_;
};

} // namespace wattscope
