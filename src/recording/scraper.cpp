#include "recording/scraper.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/frame.hpp" // SteadyClock
#include "core/lazy/http_get.hpp"
#include "core/text.hpp"
#include "core/thread_name.hpp"
#include "core/time_util.hpp"

namespace wattscope {

namespace {
constexpr auto kMinPeriod = std::chrono::milliseconds(200);
constexpr auto kMaxTimeout = std::chrono::milliseconds(2000);
constexpr auto kLongGap = std::chrono::nanoseconds(std::chrono::seconds(3)); // within the markers' 5 s of lateness
constexpr const char* kSteadyPhase = "steady-state";
constexpr const char* kServingPhase = "serving"; // from the first good scrape to the run's end

int64_t mono_ns_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch()).count();
}

Marker marker(Marker::Kind kind, int64_t at, std::string unit = {}, double amount = 0) {
  Marker m;
  m.kind = kind;
  if (kind == Marker::Kind::Work) {
    m.unit = std::move(unit);
    m.amount = amount;
  } else {
    m.name = unit.empty() ? kSteadyPhase : unit;
  }
  m.mono_ns = at;
  return m;
}
} // namespace

Scraper::Scraper(ScrapeOptions opts, std::function<void(Marker)> emit)
    : opts_(std::move(opts)), emit_(std::move(emit)) {
  const auto metrics = scrape_metrics(opts_.unit_mappings); // throws on a bad mapping, before anything starts
  SteadyRule rule;
  rule.max_batch = opts_.max_batch;
  rule.hold_s = opts_.hold_s;
  for (const auto& url : opts_.urls)
    targets_.push_back({url, ScrapeState(metrics, rule), {}, false, 0});
  opts_.period = std::max<std::chrono::nanoseconds>(opts_.period, kMinPeriod);
}

Scraper::~Scraper() {
  stop();
}

void Scraper::start() {
  if (targets_.empty() || thread_.joinable()) return;
  thread_ = std::thread([this] {
    name_this_thread("ws-scrape");
    loop();
  });
}

void Scraper::stop() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& t : targets_)
    end_spans(t, true);
}

void Scraper::end_spans(Target& t, bool serving_too) {
  // The work counted ends at the last good scrape; so do the spans it covers (the time after it made tokens nobody
  // counted: they would be J per output token too high).
  if (t.state.in_window()) emit_(marker(Marker::Kind::End, t.last_good_ns));
  t.state.reset_window();
  if (!serving_too) return;
  if (t.serving) emit_(marker(Marker::Kind::End, t.last_good_ns, kServingPhase));
  t.serving = false;
  t.state.rebaseline();
}

Scraper::Stats Scraper::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Scraper::loop() {
  auto next = SteadyClock::now();
  for (;;) {
    for (auto& t : targets_)
      scrape(t);
    next += opts_.period;
    const auto now = SteadyClock::now();
    if (next < now) next = now; // a slow endpoint delays the next scrape, never piles them up
    std::unique_lock lock(mu_);
    if (cv_.wait_until(lock, next, [this] { return stop_; })) return;
  }
}

void Scraper::scrape(Target& t) {
  HttpGet get;
  get.url = t.url;
  get.timeout = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(opts_.period), kMaxTimeout);
  get.max_body_bytes = ScrapeLimits{}.max_body_bytes;
  get.user_agent = "wattscope-scrape";
  std::string error;
  int64_t at = mono_ns_now();
  const auto trouble = [&](const std::string& kind, const std::string& text, bool refused) {
    {
      std::lock_guard lock(mu_);
      (refused ? stats_.refused : stats_.failed)++;
    }
    // A steady window needs every scrape; the serving span rides out a short gap (the next good scrape counts what
    // the counters moved across it, and its energy is inside the span), not a long one: it ends at the last good
    // scrape, and the endpoint's counters are read afresh when it answers again.
    end_spans(t, at - t.last_good_ns > kLongGap.count());
    if (t.last_trouble != kind)
      spdlog::warn("--scrape {}: {}; nothing is read from it until it answers well (counted from there)",
                   excerpt(t.url, 120), text);
    t.last_trouble = kind;
  };
  auto body = http_get(get, error);
  // The counters are the engine's at some moment between the request and the answer's arrival (a busy engine, or a
  // loaded machine, answers well after the request): the middle of the two stands for their time, off by at most half
  // the round trip. The request's own time made J per output token 6-9 % high on a loaded 2-core machine.
  at += (mono_ns_now() - at) / 2;
  if (!body) { // said once per kind of failure: the text without its numbers (a timeout's milliseconds)
    std::string kind = error;
    std::erase_if(kind, [](char c) { return c >= '0' && c <= '9'; });
    return trouble(kind, error, false);
  }
  const ScrapeParse parsed = parse_exposition(*body, t.state.wanted());
  // An endpoint that lies is not believed in part: a scrape with a bad line or too many series is refused whole.
  if (parsed.bad_lines > 0 || parsed.cut)
    return trouble("bad",
                   parsed.cut
                       ? fmt::format("more than {} series or bytes ({})", ScrapeLimits{}.max_series, parsed.first_error)
                       : fmt::format("{} bad line(s), the first {}", parsed.bad_lines, parsed.first_error),
                   true);
  if (!t.last_trouble.empty()) spdlog::info("--scrape {}: answers well again", excerpt(t.url, 120));
  t.last_trouble.clear();
  const bool was_in_window = t.state.in_window();
  const ScrapeStep step = t.state.observe(parsed, static_cast<double>(at) / 1e9);
  if (!step.restarts.empty() && t.serving) { // the spans end at the last scrape before the restart
    if (was_in_window) emit_(marker(Marker::Kind::End, t.last_good_ns));
    emit_(marker(Marker::Kind::End, t.last_good_ns, kServingPhase));
    t.serving = false;
  }
  t.last_good_ns = at;
  {
    std::lock_guard lock(mu_);
    stats_.scrapes++;
    stats_.restarts += static_cast<int64_t>(step.restarts.size());
  }
  if (!t.serving && !step.engine.empty()) {
    // The span the endpoint's work covers: J per output token is its energy over its tokens, not the run's (whose
    // start, before the engine answered, made no tokens that were counted).
    t.serving = true;
    spdlog::info("--scrape {}: {} counters found", excerpt(t.url, 120), step.engine);
    emit_(marker(Marker::Kind::Begin, at, kServingPhase));
  }
  for (const auto& engine : step.restarts)
    spdlog::info("--scrape {}: the {} counters fell: a restart; counted from 0 again", excerpt(t.url, 120), engine);
  // The work since the last scrape first: done before a window's end, it counts to the window.
  for (const auto& [unit, amount] : step.work)
    emit_(marker(Marker::Kind::Work, at, unit, amount));
  if (step.steady_begins) emit_(marker(*step.steady_begins ? Marker::Kind::Begin : Marker::Kind::End, at));
}

} // namespace wattscope
