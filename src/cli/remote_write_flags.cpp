#include "cli/remote_write_flags.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/command.hpp"
#include "core/duration.hpp"
#include "core/protected_file.hpp"
#include "recording/session.hpp"
#include "server/live.hpp"
#include "server/token.hpp"

namespace wattscope {

void add_remote_write_options(CLI::App& sub, RemoteWriteFlags& f) {
  const std::string g = "Remote-write (docs/remote-write.md)";
  sub.add_option("--remote-write", f.urls,
                 "Push the series /metrics exposes to this Prometheus remote-write receiver (Prometheus with "
                 "--web.enable-remote-write-receiver: http://HOST:9090/api/v1/write; VictoriaMetrics: "
                 "http://HOST:8428/api/v1/write; Mimir, Thanos, Cortex). Repeatable. Batches wait on disk while a "
                 "receiver is down and are sent in order when it is back")
      ->group(g);
  sub.add_option("--remote-write-bearer-token-file", f.bearer_token_file,
                 "Send 'Authorization: Bearer <the file's token>' (a file only you or root can change)")
      ->group(g);
  sub.add_option("--remote-write-user", f.user, "Basic auth user (the password from --remote-write-password-file)")
      ->group(g);
  sub.add_option("--remote-write-password-file", f.password_file,
                 "Basic auth password, read from this file (a file only you or root can change)")
      ->group(g);
  sub.add_option("--remote-write-ca-file", f.ca_file, "https: the receiver's CA certificate (default: the system's)")
      ->group(g);
  sub.add_option("--remote-write-cert-file", f.cert_file, "https: a client certificate (with --remote-write-key-file)")
      ->group(g);
  sub.add_option("--remote-write-key-file", f.key_file, "https: the client certificate's key")->group(g);
  sub.add_option("--external-label", f.external_labels,
                 "NAME=VALUE added to every pushed series that lacks the label, e.g. cluster=a100-east (repeatable; "
                 "host is added as the machine's name unless given)")
      ->group(g);
  sub.add_option("--remote-write-queue", f.queue_dir,
                 "Where batches wait while a receiver is down (default ~/.local/state/wattscope/remote-write, "
                 "/var/lib/wattscope/remote-write for root)")
      ->group(g);
  sub.add_option("--remote-write-queue-max", f.queue_max,
                 "The most each receiver's queue holds on disk; past it the oldest batches are dropped and said")
      ->capture_default_str()
      ->group(g);
  sub.add_option("--remote-write-interval", f.interval,
                 "A sample of every series at most this often (at most once per sampling interval)")
      ->capture_default_str()
      ->group(g);
  sub.add_option("--remote-write-timeout", f.timeout, "How long one push may take before it is retried")
      ->capture_default_str()
      ->group(g);
}

uint64_t parse_byte_size(const std::string& text) {
  uint64_t n = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, n);
  if (ec != std::errc() || p == text.data())
    throw std::invalid_argument(fmt::format("'{}' is not a size (e.g. 256MiB, 1GiB)", text));
  const std::string_view unit(p, static_cast<size_t>(end - p));
  uint64_t scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KiB" || unit == "K")
    scale = 1ull << 10;
  else if (unit == "MiB" || unit == "M")
    scale = 1ull << 20;
  else if (unit == "GiB" || unit == "G")
    scale = 1ull << 30;
  else if (unit == "kB" || unit == "KB")
    scale = 1000;
  else if (unit == "MB")
    scale = 1000 * 1000;
  else if (unit == "GB")
    scale = 1000ull * 1000 * 1000;
  else
    throw std::invalid_argument(fmt::format("'{}': unknown unit '{}' (B, KiB, MiB, GiB, kB, MB, GB)", text, unit));
  if (n > (1ull << 50) / scale) throw std::invalid_argument(fmt::format("'{}' is too large", text));
  return n * scale;
}

namespace {

// A batch is cut every 5 s, or every sample when they are further apart.
std::chrono::milliseconds batch_for(std::chrono::milliseconds interval) {
  return std::max(interval, std::chrono::milliseconds(5000));
}

std::chrono::milliseconds ms_flag(const char* flag, const std::string& value, std::chrono::milliseconds min,
                                  std::chrono::milliseconds max) {
  const auto d = flag_value(flag, [&] { return parse_duration(value); });
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d);
  if (ms < min || ms > max)
    throw UsageError(
        fmt::format("{} {}: expected between {} ms and {} s", flag, value, min.count(), max.count() / 1000));
  return ms;
}

void check_url(const std::string& url) {
  if (!url.starts_with("http://") && !url.starts_with("https://"))
    throw UsageError(fmt::format("--remote-write '{}': expected an http:// or https:// URL, e.g. "
                                 "http://prometheus:9090/api/v1/write",
                                 remote_write::redact_url(url)));
  if (url.size() > 2048) throw UsageError("--remote-write: a URL longer than 2048 characters");
  for (const unsigned char c : url)
    if (c <= 0x20 || c == 0x7f)
      throw UsageError(
          fmt::format("--remote-write '{}': a space or control character in the URL", remote_write::redact_url(url)));
}

} // namespace

remote_write::Options remote_write_options(const RemoteWriteFlags& f) {
  remote_write::Options o;
  for (const auto& url : f.urls) {
    check_url(url);
    if (std::find(o.urls.begin(), o.urls.end(), url) != o.urls.end())
      throw UsageError(fmt::format("--remote-write {} is given twice", remote_write::redact_url(url)));
    o.urls.push_back(url);
  }
  if (o.urls.empty()) {
    if (!f.bearer_token_file.empty() || !f.user.empty() || !f.password_file.empty() || !f.ca_file.empty() ||
        !f.cert_file.empty() || !f.key_file.empty() || !f.external_labels.empty() || !f.queue_dir.empty())
      throw UsageError("the --remote-write-* options and --external-label need --remote-write URL");
    return o;
  }
  if (!f.bearer_token_file.empty())
    o.bearer_token =
        flag_value("--remote-write-bearer-token-file", [&] { return read_token_file(f.bearer_token_file); });
  if (!f.user.empty() != !f.password_file.empty())
    throw UsageError("--remote-write-user and --remote-write-password-file go together (basic auth)");
  if (!f.user.empty()) {
    if (!o.bearer_token.empty())
      throw UsageError("give --remote-write-bearer-token-file or basic auth (--remote-write-user), not both");
    if (f.user.find(':') != std::string::npos || f.user.size() > 256)
      throw UsageError("--remote-write-user: a user name without ':' and at most 256 characters");
    o.user = f.user;
    o.password = flag_value("--remote-write-password-file", [&] {
      std::string p = read_protected_file(f.password_file, "--remote-write-password-file", 4096);
      while (!p.empty() && (p.back() == '\n' || p.back() == '\r'))
        p.pop_back();
      if (p.empty()) throw std::invalid_argument("the file is empty");
      return p;
    });
  }
  if (!f.cert_file.empty() != !f.key_file.empty())
    throw UsageError("--remote-write-cert-file and --remote-write-key-file go together");
  for (const auto& file :
       {std::pair{"--remote-write-ca-file", &f.ca_file}, std::pair{"--remote-write-cert-file", &f.cert_file},
        std::pair{"--remote-write-key-file", &f.key_file}})
    if (!file.second->empty()) flag_value(file.first, [&] { check_protected_file(*file.second, file.first); });
  o.ca_file = f.ca_file;
  o.cert_file = f.cert_file;
  o.key_file = f.key_file;
  for (const auto& l : f.external_labels) {
    auto kv =
        flag_value(fmt::format("--external-label '{}'", l), [&] { return remote_write::parse_external_label(l); });
    for (const auto& [name, value] : o.external_labels)
      if (name == kv.first) throw UsageError(fmt::format("--external-label {} is given twice", name));
    o.external_labels.push_back(std::move(kv));
  }
  o.queue_base = f.queue_dir;
  o.queue_max_bytes = flag_value("--remote-write-queue-max", [&] { return parse_byte_size(f.queue_max); });
  if (o.queue_max_bytes < (1u << 20))
    throw UsageError(fmt::format("--remote-write-queue-max {}: at least 1MiB", f.queue_max));
  o.interval = ms_flag("--remote-write-interval", f.interval, std::chrono::milliseconds(100), std::chrono::hours(1));
  o.timeout = ms_flag("--remote-write-timeout", f.timeout, std::chrono::milliseconds(100), std::chrono::minutes(5));
  o.batch = batch_for(o.interval);
  return o;
}

RemoteWriteHook::RemoteWriteHook(const RemoteWriteFlags& flags, SessionOptions& opts, LiveState* live)
    : options_(remote_write_options(flags)) {
  enabled_ = !options_.urls.empty();
  if (!enabled_) return;
  if (options_.interval < opts.interval) {
    options_.interval = std::chrono::duration_cast<std::chrono::milliseconds>(opts.interval);
    options_.batch = batch_for(options_.interval);
  }
  live_ = live;
  if (!live_) {
    own_live_ = true;
    owned_ = std::make_unique<LiveState>(opts.interval, opts.interval);
    owned_->set_process_cap(opts.top_processes);
    live_ = owned_.get();
  }
  auto slot = std::make_shared<std::atomic<remote_write::Writer*>>(nullptr);
  target_ = slot;
  auto previous = std::move(opts.on_frame);
  LiveState* feed = own_live_ ? live_ : nullptr; // serve's own on_frame pushes to its live state already
  opts.on_frame = [previous, feed, slot](const std::shared_ptr<const Frame>& fr) {
    if (previous) previous(fr);
    if (feed) feed->push(fr);
    if (auto* w = slot->load(std::memory_order_acquire)) w->frame(fr->ts_ms);
  };
}

RemoteWriteHook::~RemoteWriteHook() {
  if (target_) target_->store(nullptr, std::memory_order_release);
}

void RemoteWriteHook::opened(Session& session) {
  if (!enabled_) return;
  if (own_live_) {
    live_->set_run(session.run(), session.devices());
    // Two runs on one node write the same GPU series; the run's id keeps them apart (its task: wattscope_run_info).
    if (std::none_of(options_.external_labels.begin(), options_.external_labels.end(),
                     [](const auto& l) { return l.first == "run_id"; }))
      options_.external_labels.emplace_back("run_id", session.run().run_id);
  }
  // host on every series (build_info and the process families lack it in /metrics): nodes must not collide.
  if (std::none_of(options_.external_labels.begin(), options_.external_labels.end(),
                   [](const auto& l) { return l.first == "host"; }))
    options_.external_labels.emplace_back("host", session.run().host);
  LiveState* live = live_;
  writer_ = std::make_unique<remote_write::Writer>(options_, [live] { return live->metrics_text(); });
  live_->set_remote_write(writer_.get());
  target_->store(writer_.get(), std::memory_order_release);
}

void RemoteWriteHook::started(Session& session) {
  if (!enabled_ || !writer_) return;
  if (own_live_) live_->set_sampler(session.sampler_stats());
  writer_->start();
}

void RemoteWriteHook::finish(const RunInfo& run, std::chrono::milliseconds drain) {
  if (!enabled_ || !writer_) return;
  target_->store(nullptr, std::memory_order_release);
  const int64_t end_ms = run.end_ms.value_or(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  writer_->finish(std::chrono::steady_clock::now() + drain, end_ms);
}

std::string RemoteWriteHook::summary() const {
  return writer_ ? writer_->summary() : std::string();
}

} // namespace wattscope
