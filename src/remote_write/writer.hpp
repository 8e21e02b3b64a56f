// `--remote-write URL`: the series `/metrics` exposes, pushed to Prometheus' remote-write receiver, VictoriaMetrics,
// Mimir, Thanos or Cortex (remote-write 1.0). docs/remote-write.md has the series, their count per node and the
// choice between this and a shared MariaDB.
//
// Two kinds of thread, so a slow receiver never slows the recording and one receiver never holds up another:
//   the batcher: at most once per `interval`, the latest frame's exposition (render(), serve's own /metrics text)
//     stamped with the frame's time; every `batch` (or max_samples) the batch is encoded, compressed and put in
//     each URL's on-disk queue (queue.hpp);
//   a sender per URL: POSTs the oldest queued batch; 2xx deletes it; 5xx, 429 or no answer retries it with backoff
//     (0.5 s doubling to 30 s) while newer batches wait behind it on disk; any other 4xx is a batch the receiver will
//     never take: it is dropped and said.
// The sampler thread only calls frame(): a timestamp stored and a wake-up.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "remote_write/series.hpp"

namespace wattscope::remote_write {

struct Options {
  std::vector<std::string> urls;
  std::string bearer_token;   // read from its file by the caller
  std::string user, password; // basic auth (password read from its file by the caller)
  std::string ca_file, cert_file, key_file;
  Labels external_labels;
  std::string queue_base;                  // empty: default_remote_write_queue_base()
  uint64_t queue_max_bytes = 256ull << 20; // per URL, adopted batches included
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds batch{5000};
  std::chrono::milliseconds timeout{30000};
  size_t max_samples_per_batch = 5000;
  std::chrono::milliseconds backoff_min{500}, backoff_max{30000};
};

// Where a URL stands; read by /metrics and the end-of-run line.
struct TargetStats {
  std::string url; // scheme://host:port/path: no credentials, no query
  std::string queue_dir;
  uint64_t sent = 0;     // samples a receiver took
  uint64_t dropped = 0;  // samples dropped from a full queue (the oldest)
  uint64_t rejected = 0; // samples in batches the receiver refused for good (4xx)
  uint64_t failures = 0; // requests that failed and were retried
  uint64_t queued = 0;   // samples waiting on disk
  uint64_t queued_bytes = 0;
  uint64_t adopted = 0; // samples found queued by an earlier process, sent before ours
  bool failing = false; // the last attempt failed
  std::string last_error;
};

// `url` with any user:password@ and ?query removed: what logs and labels may show.
std::string redact_url(std::string_view url);

class Writer {
public:
  // Opens each URL's queue (adopting batches earlier processes left) and checks that snappy is there. Throws
  // std::runtime_error naming the problem. render: serve's /metrics text of the latest frame.
  Writer(Options opts, std::function<std::string()> render);
  ~Writer(); // stops at once; what is queued stays on disk
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void start();
  // From the sampler thread, after the frame reached render(): its time. Cheap.
  void frame(int64_t ts_ms);
  // The last frame taken, every series marked stale at end_ts_ms, and the queues sent until `deadline`; what a
  // receiver has not taken by then stays on disk for the next writer of the same URL.
  void finish(std::chrono::steady_clock::time_point deadline, int64_t end_ts_ms);

  std::vector<TargetStats> stats() const;
  // One line per URL for the end of a run: what was sent, what waits and where.
  std::string summary() const;

private:
  struct Target;
  void batch_loop();
  void take(std::unique_lock<std::mutex>& lock, int64_t ts); // under batch_mu_: the latest frame into the batch
  // Under batch_mu_: takes the batch, then encodes and queues it with the lock released (the sampler's frame() never
  // waits on a compression or a disk write). Only the batcher calls it, or finish() once the batcher has stopped.
  void seal(std::unique_lock<std::mutex>& lock);
  void send_loop(Target& t);
  Options opts_;
  std::function<std::string()> render_;
  std::vector<std::unique_ptr<Target>> targets_;
  BatchBuilder builder_;
  std::mutex batch_mu_;
  std::condition_variable batch_cv_;
  int64_t pending_ts_ = -1, seen_ts_ = -1, taken_ts_ = -1;
  bool batch_stop_ = false;
  std::chrono::steady_clock::time_point batch_due_{};
  std::thread batcher_;
  std::atomic<bool> started_{false};
};

} // namespace wattscope::remote_write
