// --scrape URL: a workload's own Prometheus endpoint, read at the sampling interval (at most 5 times a second) on a
// thread of its own, its token and request counters turned into work markers and its running-requests gauge into
// steady-state windows (phases/scrape.hpp, docs/inference.md). Bounded: one GET at a time per endpoint, a time limit
// of the period (at most 2 s), 4 MiB, 20,000 series. An endpoint that does not answer, answers too much or answers
// garbage gives nothing for that scrape (said once per kind of trouble); the next good scrape counts what the
// counters moved since the last good one, so nothing is lost or made up.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "phases/marker.hpp"
#include "phases/scrape.hpp"

namespace wattscope {

struct ScrapeOptions {
  std::vector<std::string> urls;
  std::vector<std::string> unit_mappings; // --scrape-unit METRIC=UNIT
  std::optional<double> max_batch;        // --scrape-max-batch
  std::chrono::nanoseconds period{std::chrono::seconds(1)};
  double hold_s = 20; // steady this long before a window's phase begins (tests shorten it)
};

class Scraper {
public:
  // `emit`: a work, begin or end marker, with its own time (mono_ns), as from the socket. Called on the scraper's
  // thread.
  Scraper(ScrapeOptions opts, std::function<void(Marker)> emit);
  ~Scraper();
  Scraper(const Scraper&) = delete;
  Scraper& operator=(const Scraper&) = delete;
  void start();
  void stop(); // a window still open is ended with the last scrape
  struct Stats {
    int64_t scrapes = 0, failed = 0, refused = 0, restarts = 0;
  };
  Stats stats() const;

private:
  struct Target {
    std::string url;
    ScrapeState state;
    std::string last_trouble; // said once per kind
    bool serving = false;     // its counters were found: a "serving" phase is open
    int64_t last_good_ns = 0; // the last scrape that answered well (mono_ns): where an open span ends
  };
  void loop();
  void scrape(Target& t);
  // At the last good scrape: the steady window (the endpoint stopped answering well), and with `serving_too` its
  // serving span (a long outage, or the run's end).
  void end_spans(Target& t, bool serving_too);

  ScrapeOptions opts_;
  std::function<void(Marker)> emit_;
  std::vector<Target> targets_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  Stats stats_;
};

} // namespace wattscope
