#include "top/remote.hpp"

#include "core/lazy/lazy_lib.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/stored_json.hpp"
#include "core/thread_name.hpp"

namespace wattscope::top {

namespace {

constexpr size_t kMaxEventBytes = 16u << 20; // one /api/v1/current document; more is not a serve talking
constexpr size_t kMaxAlertsBytes = 4u << 20;

struct CurlHandle {
  CURL* h = curl_easy_init();
  curl_slist* headers = nullptr;
  char error[CURL_ERROR_SIZE] = {};
  ~CurlHandle() {
    if (headers) curl_slist_free_all(headers);
    if (h) curl_easy_cleanup(h);
  }
};

// What went wrong, in words: an HTTP status a user can act on, or curl's own message.
std::string failure(CurlHandle& c, CURLcode rc, std::string_view path) {
  if (rc == CURLE_HTTP_RETURNED_ERROR) {
    long code = 0;
    curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &code);
    if (code == 401 || code == 403) return fmt::format("HTTP {}: the token was refused; check --token-file", code);
    if (code == 404) return fmt::format("HTTP 404 for {}: is this a wattscope serve?", path);
    return fmt::format("HTTP {} for {}", code, path);
  }
  if (c.error[0]) return c.error;
  return curl_easy_strerror(rc);
}

void common_setup(CurlHandle& c, const std::string& url, const RemoteOptions& o) {
  curl_easy_setopt(c.h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c.h, CURLOPT_NOSIGNAL, 1L); // threads: no SIGALRM for DNS timeouts
  curl_easy_setopt(c.h, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(c.h, CURLOPT_ERRORBUFFER, c.error);
  curl_easy_setopt(c.h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout.count()));
  curl_easy_setopt(c.h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c.h, CURLOPT_USERAGENT, "wattscope-top");
  if (!o.token.empty()) c.headers = curl_slist_append(c.headers, ("Authorization: Bearer " + o.token).c_str());
}

} // namespace

struct StreamCtx {
  RemoteHost* self;
  std::string buf;
  bool too_big = false;
};

namespace {

size_t on_stream_bytes(char* data, size_t size, size_t n, void* user) {
  auto* ctx = static_cast<StreamCtx*>(user);
  ctx->buf.append(data, size * n);
  // Server-sent events: blocks separated by a blank line; the data lines of a block, joined, are one event.
  for (;;) {
    const size_t end = ctx->buf.find("\n\n");
    if (end == std::string::npos) break;
    std::string block = ctx->buf.substr(0, end);
    ctx->buf.erase(0, end + 2);
    std::string event;
    size_t pos = 0;
    while (pos <= block.size()) {
      size_t nl = block.find('\n', pos);
      if (nl == std::string::npos) nl = block.size();
      std::string_view line(block.data() + pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (line.starts_with(' ')) line.remove_prefix(1);
        if (!event.empty()) event += '\n';
        event += line;
      }
      pos = nl + 1;
    }
    if (!event.empty()) ctx->self->on_event(event);
  }
  if (ctx->buf.size() > kMaxEventBytes) {
    ctx->too_big = true;
    return 0; // ends the transfer
  }
  return size * n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<std::atomic<bool>*>(user)->load() ? 1 : 0;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* out = static_cast<std::string*>(user);
  if (out->size() + size * n > kMaxAlertsBytes) return 0;
  out->append(data, size * n);
  return size * n;
}

} // namespace

void init_http_client() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string normalize_url(const std::string& url) {
  std::string u = url;
  for (unsigned char c : u)
    if (c <= 0x20 || c == 0x7f)
      throw std::invalid_argument(fmt::format("'{}': a URL has no spaces or control characters", url));
  if (!u.starts_with("http://") && !u.starts_with("https://"))
    throw std::invalid_argument(
        fmt::format("'{}': expected http://HOST:PORT or https://HOST:PORT (serve's address)", url));
  const size_t host = u.find("://") + 3;
  while (u.size() > host && u.ends_with('/'))
    u.pop_back();
  if (host >= u.size() || u[host] == '/' || u[host] == ':')
    throw std::invalid_argument(fmt::format("'{}': no host in the URL", url));
  return u;
}

RemoteHost::RemoteHost(RemoteOptions opts) : opts_(std::move(opts)) {
  view_.url = opts_.url;
  view_.name = opts_.url;
  stream_view_ = view_;
}

RemoteHost::~RemoteHost() {
  stop_ = true;
  {
    std::lock_guard lock(wait_mu_);
    wait_cv_.notify_all();
  }
  if (stream_.joinable()) stream_.join();
  if (alerts_.joinable()) alerts_.join();
}

void RemoteHost::start() {
  init_http_client();
  stream_ = std::thread([this] {
    name_this_thread("ws-top-stream");
    stream_loop();
  });
  alerts_ = std::thread([this] {
    name_this_thread("ws-top-alerts");
    alerts_loop();
  });
}

HostView RemoteHost::snapshot(std::chrono::steady_clock::time_point now) const {
  std::lock_guard lock(mu_);
  HostView v = view_;
  if (v.state == HostView::State::Live) {
    if (const auto age = v.age_s(now); age && *age > stale_after_s(v)) {
      v.state = HostView::State::NotAnswering;
      v.problem = fmt::format("nothing for {:.0f}s", *age);
    }
  }
  if (v.state != HostView::State::Live) v.alerts.clear(); // unknown while it does not answer
  return v;
}

void RemoteHost::on_event(const std::string& data) {
  // Any host can answer: its JSON is bounded in depth as a store's is (the size is bounded as it arrives).
  const BoundedJson b = parse_bounded_json(data, kMaxEventBytes);
  const auto& j = b.value;
  const auto now = std::chrono::steady_clock::now();
  if (b.refusal == JsonRefusal::NotJson) {
    stream_view_.problem = "an event that is not JSON";
  } else if (!b.ok()) {
    stream_view_.problem = "an event refused: " + b.why;
  } else {
    try {
      apply_current_json(stream_view_, j, now);
    } catch (const std::exception& e) {
      stream_view_.problem = e.what();
    }
  }
  publish();
}

void RemoteHost::publish() {
  HostView next = stream_view_; // copied outside the lock too
  std::lock_guard lock(mu_);
  // The alerts are the alerts thread's: kept as they are.
  next.alerts = std::move(view_.alerts);
  next.alerts_supported = view_.alerts_supported;
  next.alerts_asked = view_.alerts_asked;
  next.forecast = std::move(view_.forecast); // issue 36: the alerts thread's too
  view_ = std::move(next);
}

void RemoteHost::mark_down(const std::string& why) {
  stream_view_.state = HostView::State::NotAnswering;
  stream_view_.problem = why;
  publish();
}

void RemoteHost::stream_loop() {
  const std::string url = opts_.url + "/api/v1/events";
  while (!stop_) {
    CurlHandle c;
    if (!c.h) {
      mark_down(lazy::curl().available() ? "libcurl could not make a handle" : lazy::curl().error());
    } else {
      StreamCtx ctx{this, {}, false};
      common_setup(c, url, opts_);
      c.headers = curl_slist_append(c.headers, "Accept: text/event-stream");
      curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.headers);
      curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, on_stream_bytes);
      curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &ctx);
      curl_easy_setopt(c.h, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(c.h, CURLOPT_XFERINFOFUNCTION, on_progress);
      curl_easy_setopt(c.h, CURLOPT_XFERINFODATA, &stop_);
      // A stream that goes quiet (a hung host, a dropped route) is given up after 10 s and dialled again; the view
      // marks the host as not answering well before, from the age of its data.
      curl_easy_setopt(c.h, CURLOPT_LOW_SPEED_LIMIT, 1L);
      curl_easy_setopt(c.h, CURLOPT_LOW_SPEED_TIME, 10L);
      curl_easy_setopt(c.h, CURLOPT_TCP_KEEPALIVE, 1L);
      const CURLcode rc = curl_easy_perform(c.h);
      if (stop_) break;
      if (ctx.too_big)
        mark_down("an event larger than 16 MiB");
      else if (rc == CURLE_OK)
        mark_down("the event stream ended");
      else
        mark_down(failure(c, rc, "/api/v1/events"));
    }
    std::unique_lock lock(wait_mu_);
    wait_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_.load(); });
  }
}

// One GET of a small JSON endpoint (alerts, forecasts), abandoned within 5 s or as soon as the view stops.
RemoteHost::Reply RemoteHost::get(const std::string& url) {
  Reply r;
  CurlHandle c;
  if (!c.h) return r;
  common_setup(c, url, opts_);
  curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.headers);
  curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(c.h, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(c.h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c.h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c.h, CURLOPT_XFERINFODATA, &stop_);
  r.ok = curl_easy_perform(c.h) == CURLE_OK;
  curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &r.code);
  r.asked = true;
  return r;
}

// issue 36: /api/v1/forecast's one-line summary; an older serve (404) or a bad answer shows none.
void RemoteHost::fetch_forecast() {
  const Reply r = get(opts_.url + "/api/v1/forecast");
  const auto j = parse_bounded_json(r.body, kMaxAlertsBytes).value;
  std::string line;
  if (r.ok && r.code == 200 && j.is_object() && j.contains("line") && j["line"].is_string())
    line = j["line"].get<std::string>().substr(0, 400);
  std::lock_guard lock(mu_);
  view_.forecast = std::move(line);
}

void RemoteHost::alerts_loop() {
  const std::string url = opts_.url + "/api/v1/alerts";
  while (!stop_) {
    const Reply r = get(url);
    if (r.asked) {
      const long code = r.code;
      std::lock_guard lock(mu_);
      view_.alerts_asked = true;
      if (r.ok) {
        const auto j = parse_bounded_json(r.body, kMaxAlertsBytes).value;
        try {
          view_.alerts = parse_alerts(j);
          view_.alerts_supported = true;
        } catch (const std::exception&) {
          view_.alerts.clear();
          view_.alerts_supported = false;
        }
      } else if (code == 404) { // this serve has no alerts: nothing to show
        view_.alerts.clear();
        view_.alerts_supported = false;
      } else {
        view_.alerts.clear();
      }
    }
    fetch_forecast(); // issue 36: as often as the alerts
    std::unique_lock lock(wait_mu_);
    wait_cv_.wait_for(lock, opts_.alerts_every, [this] { return stop_.load(); });
  }
}

} // namespace wattscope::top
