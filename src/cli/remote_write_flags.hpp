// --remote-write and its options (run, record, serve; docs/remote-write.md), and the wiring that feeds the writer the
// same exposition serve's /metrics renders: serve hands over its own live state, run and record build one.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "remote_write/writer.hpp"

namespace CLI {
class App;
}

namespace wattscope {

class LiveState;
class Session;
struct SessionOptions;
struct RunInfo;

struct RemoteWriteFlags {
  std::vector<std::string> urls;
  std::string bearer_token_file, user, password_file, ca_file, cert_file, key_file;
  std::vector<std::string> external_labels;
  std::string queue_dir;
  std::string queue_max = "256MiB";
  std::string interval = "1s";
  std::string timeout = "30s";
};

void add_remote_write_options(CLI::App& sub, RemoteWriteFlags& f);
// The writer's options from the flags (token and password files read under the root-read rules). Throws UsageError
// naming the flag.
remote_write::Options remote_write_options(const RemoteWriteFlags& f);
// "256MiB", "1GiB", "500MB", "1048576": bytes. Throws std::invalid_argument.
uint64_t parse_byte_size(const std::string& text);

// A recording's remote-write: construct before the Session (it chains opts.on_frame), then call the steps in order.
class RemoteWriteHook {
public:
  // live: serve's live state (its on_frame already pushes to it); null: a private one is built (run, record), and its
  // series carry the run's run_id, since two runs on one node would otherwise write the same series.
  RemoteWriteHook(const RemoteWriteFlags& flags, SessionOptions& opts, LiveState* live);
  ~RemoteWriteHook();
  bool enabled() const { return enabled_; }
  void opened(Session& session); // after open(): the writer, its queues adopted
  void started(Session& session);
  // After session.finish(): the last frame, staleness markers, and the queues sent for up to `drain`.
  void finish(const RunInfo& run, std::chrono::milliseconds drain = std::chrono::milliseconds(5000));
  std::string summary() const; // what finish left: one line per URL
  const remote_write::Writer* writer() const { return writer_.get(); }

private:
  bool enabled_ = false;
  bool own_live_ = false;
  remote_write::Options options_;
  std::unique_ptr<LiveState> owned_;
  LiveState* live_ = nullptr;
  std::shared_ptr<std::atomic<remote_write::Writer*>> target_; // where on_frame finds the writer once it exists
  std::unique_ptr<remote_write::Writer> writer_;
};

} // namespace wattscope
