#include "remote_write/writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/lazy/http_get.hpp"
#include "core/thread_name.hpp"
#include "remote_write/queue.hpp"
#include "remote_write/wire.hpp"
#include "wattscope/version.hpp"

namespace wattscope::remote_write {

using Clock = std::chrono::steady_clock;

struct Writer::Target {
  std::string url, shown, root;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<SegmentDir> adopted; // oldest first, sent before own
  std::optional<SegmentDir> own;
  TargetStats stats;
  bool stop = false; // leave now (the destructor, or finish's deadline passed)
  bool draining = false;
  Clock::time_point deadline = Clock::time_point::max();
  // When a request in flight must give up (finish's deadline, or at once when the writer goes): read by libcurl's
  // progress callback without the lock.
  std::atomic<int64_t> abort_at{std::numeric_limits<int64_t>::max()};
  std::thread thread;

  uint64_t queued() const {
    uint64_t n = own ? own->samples() : 0;
    for (const auto& d : adopted)
      n += d.samples();
    return n;
  }
  uint64_t queued_bytes() const {
    uint64_t n = own ? own->bytes() : 0;
    for (const auto& d : adopted)
      n += d.bytes();
    return n;
  }
  SegmentDir* next() {
    for (auto& d : adopted)
      if (!d.empty()) return &d;
    return own && !own->empty() ? &*own : nullptr;
  }
};

std::string redact_url(std::string_view url) {
  std::string_view scheme;
  if (const size_t at = url.find("://"); at != std::string_view::npos) {
    scheme = url.substr(0, at + 3);
    url.remove_prefix(at + 3);
  }
  url = url.substr(0, url.find_first_of("?#"));
  const size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  return fmt::format("{}{}{}", scheme, authority, slash == std::string_view::npos ? "" : url.substr(slash));
}

Writer::Writer(Options opts, std::function<std::string()> render)
    : opts_(std::move(opts)), render_(std::move(render)), builder_(opts_.external_labels) {
  std::string error;
  if (!snappy_compress("", error)) throw std::runtime_error("--remote-write needs libsnappy: " + error);
  const std::string base = opts_.queue_base.empty() ? default_remote_write_queue_base() : opts_.queue_base;
  const auto now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const std::string owner = fmt::format("{:013}-{}", now_ms, ::getpid());
  for (const auto& url : opts_.urls) {
    auto t = std::make_unique<Target>();
    t->url = url;
    t->shown = redact_url(url);
    t->root = remote_write_queue_dir(base, url);
    t->own = SegmentDir::open_own(t->root + "/" + owner);
    for (const auto& dir : queue_owners(t->root, owner))
      if (auto d = SegmentDir::open_adopted(dir)) {
        if (d->empty()) {
          d->remove_if_empty();
          continue;
        }
        t->stats.adopted += d->samples();
        t->adopted.push_back(std::move(*d));
      }
    if (t->stats.adopted)
      spdlog::info("remote-write {}: {} samples an earlier wattscope left queued are sent first", t->shown,
                   t->stats.adopted);
    t->stats.url = t->shown;
    t->stats.queue_dir = t->root + "/" + owner;
    targets_.push_back(std::move(t));
  }
}

Writer::~Writer() {
  {
    std::lock_guard lock(batch_mu_);
    batch_stop_ = true;
  }
  batch_cv_.notify_all();
  if (batcher_.joinable()) batcher_.join();
  for (auto& t : targets_) {
    {
      std::lock_guard lock(t->mu);
      t->stop = true;
    }
    t->abort_at = 0;
    t->cv.notify_all();
    if (t->thread.joinable()) t->thread.join();
  }
}

void Writer::start() {
  if (started_.exchange(true)) return;
  batcher_ = std::thread([this] {
    name_this_thread("ws-rw-batch");
    batch_loop();
  });
  for (auto& t : targets_)
    t->thread = std::thread([this, tp = t.get()] {
      name_this_thread("ws-rw-send");
      send_loop(*tp);
    });
  // Batches adopted from an earlier process go out now, not at the first batch of this one.
  for (auto& t : targets_)
    t->cv.notify_all();
}

void Writer::frame(int64_t ts_ms) {
  {
    std::lock_guard lock(batch_mu_);
    pending_ts_ = ts_ms;
  }
  batch_cv_.notify_one();
}

void Writer::batch_loop() {
  std::unique_lock lock(batch_mu_);
  // A frame within a quarter interval of its due time is taken: the sampler's ticks jitter around the interval.
  const int64_t due_ms = opts_.interval.count() - opts_.interval.count() / 4;
  while (!batch_stop_) {
    auto ready = [&] { return batch_stop_ || pending_ts_ > seen_ts_; };
    if (builder_.samples() > 0)
      batch_cv_.wait_until(lock, batch_due_, ready);
    else
      batch_cv_.wait(lock, ready);
    if (batch_stop_) break;
    if (pending_ts_ > seen_ts_) {
      seen_ts_ = pending_ts_;
      if (taken_ts_ < 0 || seen_ts_ - taken_ts_ >= due_ms) take(lock, seen_ts_);
    }
    if (builder_.samples() >= opts_.max_samples_per_batch || (builder_.samples() > 0 && Clock::now() >= batch_due_))
      seal(lock);
  }
}

void Writer::take(std::unique_lock<std::mutex>& lock, int64_t ts) {
  lock.unlock();
  const std::string text = render_(); // serve's exposition of the latest frame: LiveState's lock, briefly
  lock.lock();
  if (builder_.samples() == 0) batch_due_ = Clock::now() + opts_.batch;
  builder_.add(text, ts);
  taken_ts_ = ts;
}

void Writer::seal(std::unique_lock<std::mutex>& lock) {
  const size_t samples = builder_.samples();
  const std::vector<Series> series = builder_.take();
  if (samples == 0) return;
  lock.unlock();
  struct Relock {
    std::unique_lock<std::mutex>& l;
    ~Relock() { l.lock(); }
  } relock{lock};
  std::string error;
  const auto body = snappy_compress(encode_write_request(series), error);
  if (!body) {
    spdlog::warn("remote-write: a batch of {} samples could not be compressed: {}", samples, error);
    return;
  }
  for (auto& t : targets_) {
    {
      std::lock_guard tl(t->mu);
      try {
        t->own->push(*body, samples);
      } catch (const std::exception& e) {
        t->stats.dropped += samples;
        spdlog::warn("remote-write {}: a batch of {} samples is lost: {}", t->shown, samples, e.what());
        continue;
      }
      // Past the bound the oldest batches go (an adopted one first: it is older still), never the newest.
      uint64_t dropped = 0;
      while (t->queued_bytes() > opts_.queue_max_bytes) {
        SegmentDir* d = t->next();
        if (!d || (d == &*t->own && d->size() <= 1)) break;
        dropped += d->front()->samples;
        d->pop();
      }
      if (dropped) {
        t->stats.dropped += dropped;
        spdlog::warn("remote-write {}: its queue passed {} MiB while the receiver did not take it: the oldest {} "
                     "samples were dropped ({} dropped so far)",
                     t->shown, opts_.queue_max_bytes >> 20, dropped, t->stats.dropped);
      }
    }
    t->cv.notify_all();
  }
}

void Writer::send_loop(Target& t) {
  std::unique_lock lock(t.mu);
  auto backoff = opts_.backoff_min;
  const std::vector<std::string> headers = {"Content-Encoding: snappy", "Content-Type: application/x-protobuf",
                                            "X-Prometheus-Remote-Write-Version: 0.1.0"};
  const std::string agent = fmt::format("wattscope/{}", kVersion);
  for (;;) {
    t.cv.wait(lock, [&] { return t.stop || t.next() || t.draining; });
    if (t.stop) return;
    SegmentDir* d = t.next();
    if (!d) {
      if (t.draining) return; // everything sent
      continue;
    }
    if (Clock::now() >= t.deadline) return;
    const Segment seg = *d->front();
    const auto body = d->read_front();
    if (!body) {
      t.stats.dropped += seg.samples;
      spdlog::warn("remote-write {}: queued batch '{}' cannot be read: dropped ({} samples)", t.shown, seg.path,
                   seg.samples);
      d->pop();
      continue;
    }
    HttpPost post;
    post.url = t.url;
    post.body = *body;
    post.headers = headers;
    post.timeout = opts_.timeout;
    if (t.draining) // never past finish's deadline, however long a hung receiver would keep us
      post.timeout = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(t.deadline - Clock::now()),
                                std::chrono::milliseconds(100), opts_.timeout);
    post.bearer_token = opts_.bearer_token;
    post.user = opts_.user;
    post.password = opts_.password;
    post.ca_file = opts_.ca_file;
    post.cert_file = opts_.cert_file;
    post.key_file = opts_.key_file;
    post.user_agent = agent;
    post.abort = [&t] { return Clock::now().time_since_epoch().count() >= t.abort_at.load(); };
    lock.unlock();
    const HttpAnswer answer = http_post(post);
    lock.lock();
    // The batch sent is still the front unless the bound dropped it meanwhile.
    auto pop_sent = [&] {
      std::vector<SegmentDir*> dirs;
      for (auto& q : t.adopted)
        dirs.push_back(&q);
      dirs.push_back(&*t.own);
      for (auto* q : dirs)
        if (!q->empty() && q->front()->path == seg.path) {
          q->pop();
          break;
        }
      for (auto it = t.adopted.begin(); it != t.adopted.end();)
        if (it->empty()) {
          it->remove_if_empty();
          it = t.adopted.erase(it);
        } else {
          ++it;
        }
    };
    const bool retry = answer.status == 0 || answer.status == 429 || answer.status >= 500;
    if (answer.status >= 200 && answer.status < 300) {
      pop_sent();
      t.stats.sent += seg.samples;
      if (t.stats.failing)
        spdlog::info("remote-write {}: answering again; {} queued samples follow in order", t.shown, t.queued());
      t.stats.failing = false;
      backoff = opts_.backoff_min;
      continue;
    }
    const std::string why = answer.status == 0
                                ? answer.error
                                : fmt::format("HTTP {}{}{}", answer.status, answer.excerpt.empty() ? "" : ": ",
                                              answer.excerpt.substr(0, 200));
    t.stats.last_error = why;
    if (!retry) {
      pop_sent();
      t.stats.rejected += seg.samples;
      spdlog::warn("remote-write {}: the receiver refused a batch of {} samples for good ({}); it is dropped", t.shown,
                   seg.samples, why);
      continue;
    }
    ++t.stats.failures;
    if (!t.stats.failing)
      spdlog::warn("remote-write {}: {}; batches wait in {} and are sent in order when it answers", t.shown, why,
                   t.stats.queue_dir);
    t.stats.failing = true;
    const auto until = std::min(Clock::now() + backoff, t.deadline);
    // The run's end cuts a backoff short (its drain has a deadline of its own: one more try, not a 30 s wait).
    const bool was_draining = t.draining;
    t.cv.wait_until(lock, until, [&] { return t.stop || t.draining != was_draining; });
    backoff = std::min(backoff * 2, opts_.backoff_max);
  }
}

void Writer::finish(Clock::time_point deadline, int64_t end_ts_ms) {
  if (!started_) return;
  // The batcher stops first (its batch in hand is queued before it returns), so the last batch is queued after every
  // earlier one: a receiver refuses samples older than those it has.
  {
    std::lock_guard lock(batch_mu_);
    batch_stop_ = true;
  }
  batch_cv_.notify_all();
  if (batcher_.joinable()) batcher_.join();
  {
    std::unique_lock lock(batch_mu_);
    if (pending_ts_ > taken_ts_) take(lock, pending_ts_); // the run's last frame, whatever the interval
    builder_.end(std::max(end_ts_ms, taken_ts_ + 1));
    seal(lock);
  }
  for (auto& t : targets_) {
    {
      std::lock_guard lock(t->mu);
      t->draining = true;
      t->deadline = deadline;
    }
    t->abort_at = deadline.time_since_epoch().count();
    t->cv.notify_all();
  }
  for (auto& t : targets_) {
    if (t->thread.joinable()) t->thread.join();
    std::lock_guard lock(t->mu);
    t->stop = true;
    if (t->adopted.empty() && t->own && t->own->empty()) t->own->remove_if_empty();
  }
}

std::vector<TargetStats> Writer::stats() const {
  std::vector<TargetStats> out;
  for (const auto& t : targets_) {
    std::lock_guard lock(t->mu);
    TargetStats s = t->stats;
    s.queued = t->queued();
    s.queued_bytes = t->queued_bytes();
    out.push_back(std::move(s));
  }
  return out;
}

std::string Writer::summary() const {
  std::string out;
  for (const auto& s : stats()) {
    out += fmt::format("remote-write {}: {} samples sent", s.url, s.sent);
    if (s.dropped) out += fmt::format(", {} dropped from a full queue", s.dropped);
    if (s.rejected) out += fmt::format(", {} refused by the receiver", s.rejected);
    if (s.queued)
      out += fmt::format("; {} still queued in {} ({}): the next wattscope with --remote-write {} sends them first",
                         s.queued, s.queue_dir, s.last_error.empty() ? "not sent in time" : s.last_error, s.url);
    out += '\n';
  }
  return out;
}

} // namespace wattscope::remote_write
