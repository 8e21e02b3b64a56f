// `wattscope top`: the live view of this machine (through the pipeline, as record and serve sample it, with no store)
// or of several `serve` endpoints. Output goes to ncurses on a terminal, or as plain text frames for --once, pipes and
// TERM=dumb. The terminal is restored on every way out: q, Ctrl-C, SIGTERM, SIGHUP, an exception, a crash.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "recording/session.hpp"
#include "top/model.hpp"
#include "top/render.hpp"

namespace wattscope::top {

struct TopOptions {
  std::chrono::nanoseconds interval = std::chrono::seconds(1); // redraw (and, locally, sampling) interval
  std::vector<std::string> connect;                            // serve URLs (normalize_url'ed); empty: this machine
  std::string token;                                           // bearer token for them
  bool once = false;                                           // one plain-text frame, then exit
  SortKey sort = SortKey::Power;
  Thresholds thresholds = kDefaultThresholds;
  // The local view's firing alerts, asked at every redraw (the alert evaluator plugs in here); null: none.
  std::function<std::vector<FiringAlert>()> local_alerts;
};

// Runs until q or a signal (or one frame with --once). `local` holds the pipeline options for the local view (ignored
// with --connect). Returns the exit status. Throws std::runtime_error when the local pipeline cannot start.
int run_top(const TopOptions& opts, const SessionOptions& local);

} // namespace wattscope::top
