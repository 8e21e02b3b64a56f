#include "server/server.hpp"

#include "advice/advice_input.hpp" // advice (issue 14)

#include <sys/mman.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <sys/resource.h>

#include <atomic>
#include <charconv>
#include <ctime>
#include <deque>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/thread_name.hpp"
#include "runs/run_view.hpp"
#include "server/auth.hpp"
#include "server/compare_page.hpp"
#include "server/query.hpp"
#include "server/runs_pages.hpp"
#include "server/static_files.hpp"
#include "web/csp.hpp"

namespace wattscope {

bool ListenAddress::loopback() const {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

ListenAddress parse_listen(const std::string& text) {
  ListenAddress l;
  const auto colon = text.rfind(':');
  if (colon == std::string::npos)
    throw std::invalid_argument(fmt::format("--listen '{}': expected HOST:PORT, e.g. 127.0.0.1:9400", text));
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (!host.empty()) l.host = host;
  const std::string port = text.substr(colon + 1);
  int p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || end != port.data() + port.size() || p < 0 || p > 65535)
    throw std::invalid_argument(fmt::format("--listen '{}': '{}' is not a port number", text, port));
  l.port = p;
  return l;
}

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Request = http::request<http::empty_body>;

// A piece of output: a view into static data (owner empty) or into a string the owner keeps alive.
struct Chunk {
  std::shared_ptr<const void> owner;
  std::string_view data;
  std::string_view asset{}; // a static body, whole: handed back to the kernel once sent (release_asset)
};

// An embedded asset lives in the binary's read-only pages. Once sent, its pages are dropped from this process's
// resident set (MADV_DONTNEED on a private, never-written file mapping: the next reader faults them back in from the
// page cache, ~0.2 ms for plotly's 1.4 MB). Without it a single dashboard view left serve 1.5-4.6 MB larger for
// good (issue 12). A large one is queued in page-aligned pieces of kAssetPiece, each dropped once written, and no
// write offers the socket more than kMaxWrite: sent whole, plotly's 4.6 MB identity body was all resident at once
// (serve's peak RSS 16.9 MiB against 12.6 after it). Small bodies are not worth the call.
constexpr size_t kAssetPiece = 256 * 1024;
constexpr size_t kMaxWrite = 256 * 1024;
void release_asset(std::string_view a) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(a.data()) + page - 1) & ~(page - 1);
  const auto end = (reinterpret_cast<uintptr_t>(a.data()) + a.size()) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string_view, std::string>> headers;
  std::string body;
  std::string_view static_body; // sent instead of `body` when set (assets: never copied)
  bool close = false;
};

std::string_view reason(int status) {
  switch (status) {
  case 200:
    return "OK";
  case 204:
    return "No Content";
  case 304:
    return "Not Modified";
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 413:
    return "Content Too Large";
  case 431:
    return "Request Header Fields Too Large";
  case 503:
    return "Service Unavailable";
  default:
    return "Error";
  }
}

Response page_response(PageReply p) { // issue 35
  Response r;
  r.status = p.status;
  r.content_type = std::move(p.content_type);
  r.headers = std::move(p.headers);
  r.body = std::move(p.body);
  return r;
}

Response json_error(int status, const std::string& msg) {
  Response r;
  r.status = status;
  r.body = nlohmann::json{{"error", msg}, {"status", status}}.dump();
  return r;
}

Response content(std::string body, std::string content_type) {
  Response r;
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  return r;
}

// An HTTP date (RFC 9110 5.6.7), written without the C locale's help.
std::string http_date(std::time_t t) {
  static constexpr const char* days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{}, {:02} {} {} {:02}:{:02}:{:02} GMT", days[tm.tm_wday], tm.tm_mday, months[tm.tm_mon],
                     tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

// Sent to a connection refused at accept, before any of its bytes are read.
constexpr std::string_view kRefused = "HTTP/1.1 503 Service Unavailable\r\n"
                                      "Content-Type: application/json\r\n"
                                      "Retry-After: 1\r\n"
                                      "Connection: close\r\n"
                                      "Content-Length: 73\r\n"
                                      "\r\n"
                                      R"({"error":"too many connections from this address or in all","status":503})";
static_assert(kRefused.size() - kRefused.find("\r\n\r\n") - 4 == 73);

// One event-stream message, framed once for every HTTP/1.1 client (chunked) and once for HTTP/1.0 ones.
struct StreamMessage {
  std::string raw, chunked;
  explicit StreamMessage(std::string m) : raw(std::move(m)), chunked(fmt::format("{:x}\r\n{}\r\n", raw.size(), raw)) {}
};

} // namespace

struct HttpServer::Impl {
  struct Conn;

  LiveState& live;
  ServerOptions opts;
  StaticFiles files{opts.store.has_value()};
  RunsPages runs_pages{opts.store, files.plotly_url()}; // issue 35
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer sweep_timer{io};
  asio::steady_timer accept_retry{io};
  std::optional<asio::thread_pool> pool; // made on the first request that needs it; io thread only
  std::thread watcher;                   // turns new frames into event-stream messages
  int bound_port = 0;
  int max_connections = 0;
  std::string date; // the Date header, refreshed by the sweep
  bool stopping = false;

  // io thread only:
  std::unordered_map<Conn*, std::shared_ptr<Conn>> conns;
  std::unordered_map<std::string, int> per_address;
  int heavy_in_flight = 0;
  std::unique_ptr<CompareView> compare_view; // issue 35: made on the first compare request
  std::atomic<int> streams{0};               // read by the watcher: no subscriber, no JSON made

  static constexpr int kMaxHeavyInFlight = 32;
  static constexpr auto kSweepEvery = std::chrono::milliseconds(250);
  static constexpr auto kDrainFor = std::chrono::seconds(1);

  struct Conn : std::enable_shared_from_this<Conn> {
    enum class State { reading, handling, writing, streaming, draining, closed };
    Impl& srv;
    tcp::socket sock;
    std::string address;
    State state = State::reading;
    Clock::time_point since = Clock::now(); // when the current request's header was first waited for
    beast::flat_buffer buf{16 * 1024};
    std::optional<http::request_parser<http::empty_body>> parser;
    std::deque<Chunk> out;
    size_t out_bytes = 0;
    bool write_in_flight = false;
    Clock::time_point write_since;
    bool close_after_write = false;
    bool chunked_stream = false;

    Conn(Impl& s, tcp::socket so, std::string addr) : srv(s), sock(std::move(so)), address(std::move(addr)) {}

    // Waiting for a whole request header (or for a closing client to go): closing it loses nothing.
    bool waiting() const { return state == State::reading || state == State::draining; }

    void start_read() {
      state = State::reading;
      since = Clock::now();
      parser.emplace();
      parser->header_limit(static_cast<std::uint32_t>(srv.opts.max_header_bytes));
      http::async_read_header(sock, buf, *parser,
                              [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
    }

    void on_header(beast::error_code ec) {
      if (state == State::closed) return;
      if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
        return reply(
            json_error(431, fmt::format("the request header block is larger than {} bytes", srv.opts.max_header_bytes)),
            false, true);
      if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
          ec == asio::error::operation_aborted)
        return close();
      if (ec) return reply(json_error(400, fmt::format("malformed request: {}", ec.message())), false, true);
      state = State::handling;
      const auto length = parser->content_length();
      srv.handle(shared_from_this(), parser->get(), (length && *length > 0) || parser->chunked());
    }

    // Queues a response; `head` leaves the body out. The connection closes after it when asked or needed.
    void reply(Response r, bool head, bool force_close = false) {
      if (state == State::closed) return;
      const std::string_view body = r.static_body.data() ? r.static_body : std::string_view(r.body);
      const bool close_it = force_close || r.close || srv.stopping;
      std::string h = fmt::format("HTTP/1.1 {} {}\r\nDate: {}\r\n", r.status, reason(r.status), srv.date);
      if (r.status != 304 && r.status != 204)
        h += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", r.content_type, body.size());
      for (const auto& [k, v] : r.headers)
        h += fmt::format("{}: {}\r\n", k, v);
      if (close_it) h += "Connection: close\r\n";
      h += "\r\n";
      state = State::writing;
      close_after_write = close_it;
      push(std::make_shared<std::string>(std::move(h)));
      if (!head && r.status != 304 && r.status != 204 && !body.empty()) {
        if (r.static_body.data())
          push_asset(r.static_body);
        else
          push(std::make_shared<std::string>(std::move(r.body)));
      }
      pump();
    }

    void push(std::shared_ptr<const std::string> s) {
      const std::string_view v = *s;
      push_chunk({std::move(s), v});
    }
    void push_asset(std::string_view a) {
      if (a.size() < 2 * kAssetPiece) return push_chunk({nullptr, a});
      const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
      while (!a.empty()) {
        // Pieces end on page boundaries, so that releasing each drops every page of the asset but its first and last.
        const auto end = (reinterpret_cast<uintptr_t>(a.data()) + kAssetPiece) & ~(page - 1);
        const size_t n = std::min(a.size(), static_cast<size_t>(end - reinterpret_cast<uintptr_t>(a.data())));
        push_chunk({nullptr, a.substr(0, n), a.substr(0, n)});
        a.remove_prefix(n);
      }
    }
    void push_chunk(Chunk c) {
      out_bytes += c.data.size();
      out.push_back(std::move(c));
    }

    // Writes what is queued without ever blocking: one write_some at a time, whatever the socket takes.
    void pump() {
      if (write_in_flight || state == State::closed) return;
      if (out.empty()) return written();
      std::vector<asio::const_buffer> bufs;
      size_t offered = 0;
      for (const auto& c : out) {
        if (bufs.size() == 16 || offered >= kMaxWrite) break;
        const size_t n = std::min(c.data.size(), kMaxWrite - offered);
        bufs.emplace_back(c.data.data(), n);
        offered += n;
      }
      write_in_flight = true;
      write_since = Clock::now();
      sock.async_write_some(bufs, [self = shared_from_this()](beast::error_code ec, size_t n) {
        self->write_in_flight = false;
        if (self->state == State::closed) return;
        if (ec) return self->close();
        self->consume(n);
        self->pump();
      });
    }

    void consume(size_t n) {
      out_bytes -= n;
      while (n > 0) {
        Chunk& c = out.front();
        if (n >= c.data.size()) {
          n -= c.data.size();
          if (c.asset.data()) release_asset(c.asset);
          out.pop_front();
        } else {
          c.data.remove_prefix(n);
          n = 0;
        }
      }
    }

    void written() {
      if (state != State::writing) return; // a stream waits for its next message
      if (close_after_write) return drain();
      start_read();
    }

    // Closing with unread input would send a reset that can destroy the answer before the client reads it (a 431,
    // a 401): say we are done, read what still comes for a moment (the sweep ends it), then close.
    void drain() {
      beast::error_code ignored;
      sock.shutdown(tcp::socket::shutdown_send, ignored);
      state = State::draining;
      since = Clock::now();
      buf.clear();
      read_rest();
    }
    void read_rest() {
      sock.async_read_some(buf.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t) {
        if (self->state != State::draining) return;
        if (ec) return self->close();
        self->read_rest();
      });
    }

    void stream(std::string first, bool http11) {
      state = State::streaming;
      chunked_stream = http11;
      // A stream holds little: a small kernel buffer makes a client that stops reading show up as stalled soon,
      // instead of after megabytes of autotuned buffer (and memory) per connection.
      beast::error_code ignored;
      sock.set_option(asio::socket_base::send_buffer_size(16 * 1024), ignored);
      std::string h =
          fmt::format("HTTP/1.{} 200 OK\r\nDate: {}\r\nContent-Type: text/event-stream\r\n"
                      "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n{}\r\n",
                      http11 ? 1 : 0, srv.date, http11 ? "Transfer-Encoding: chunked\r\n" : "Connection: close\r\n");
      push(std::make_shared<std::string>(std::move(h)));
      send_event(std::make_shared<const StreamMessage>(std::move(first)));
      ++srv.streams;
    }

    // Queues one message unless this client's buffer is full (then the client misses it; a client that stays full
    // is dropped by the sweep).
    void send_event(const std::shared_ptr<const StreamMessage>& m) {
      const std::string& s = chunked_stream ? m->chunked : m->raw;
      if (out_bytes + s.size() > srv.opts.max_stream_buffer_bytes && out_bytes > 0) return;
      push_chunk({m, s});
      pump();
    }

    // Drops a client that stopped reading: a reset, since a FIN would wait behind the unsent data for as long as the
    // client keeps its window shut, and the kernel would keep the buffers that long.
    void abort() {
      beast::error_code ignored;
      sock.set_option(asio::socket_base::linger(true, 0), ignored);
      close();
    }

    void close() {
      if (state == State::closed) return;
      const auto keep = shared_from_this(); // forget() may drop the last other reference
      if (state == State::streaming) --srv.streams;
      state = State::closed;
      beast::error_code ignored;
      sock.shutdown(tcp::socket::shutdown_both, ignored);
      sock.close(ignored);
      out.clear();
      out_bytes = 0;
      srv.forget(this);
    }
  };

  Impl(LiveState& l, ServerOptions o) : live(l), opts(std::move(o)) { date = http_date(std::time(nullptr)); }

  // ---- connections --------------------------------------------------------------------------------------------

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted || stopping) return;
      if (ec) {
        // Out of descriptors or memory: accepting again at once would spin; the sweep frees some meanwhile.
        spdlog::debug("serve: accept: {}", ec.message());
        accept_retry.expires_after(std::chrono::milliseconds(100));
        accept_retry.async_wait([this](beast::error_code e) {
          if (!e && !stopping) accept();
        });
        return;
      }
      admit(std::move(s));
      accept();
    });
  }

  void admit(tcp::socket s) {
    beast::error_code ec;
    const auto ep = s.remote_endpoint(ec);
    if (ec) return;
    auto a = ep.address();
    if (a.is_v6() && a.to_v6().is_v4_mapped()) a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
    std::string address = a.to_string();
    auto it = per_address.find(address);
    if (it != per_address.end() && it->second >= opts.max_connections_per_address && !evict_from(address))
      return refuse(s);
    if (static_cast<int>(conns.size()) >= max_connections && !evict_for_total()) return refuse(s);
    s.set_option(tcp::no_delay(true), ec); // headers and body go out in separate writes
    auto c = std::make_shared<Conn>(*this, std::move(s), address);
    conns.emplace(c.get(), c);
    ++per_address[address];
    c->start_read();
  }

  // Makes room by closing the connection of `address` that has waited longest without sending a whole request
  // header (idle keep-alive, idle new, or slow): such a connection costs its client nothing to open again. False when
  // every connection of the address is busy.
  bool evict_from(const std::string& address) {
    Conn* victim = nullptr;
    for (const auto& [p, c] : conns)
      if (c->address == address && c->waiting() && (!victim || c->since < victim->since)) victim = c.get();
    if (!victim) return false;
    victim->close();
    return true;
  }

  // At the total cap the address holding most connections gives one up first.
  bool evict_for_total() {
    Conn* victim = nullptr;
    int victim_held = 0;
    for (const auto& [p, c] : conns) {
      if (!c->waiting()) continue;
      const int held = per_address[c->address];
      if (!victim || held > victim_held || (held == victim_held && c->since < victim->since)) {
        victim = c.get();
        victim_held = held;
      }
    }
    if (!victim) return false;
    victim->close();
    return true;
  }

  static void refuse(tcp::socket& s) {
    beast::error_code ignored;
    s.non_blocking(true, ignored);
    s.write_some(asio::buffer(kRefused.data(), kRefused.size()), ignored);
    // Take in the request if it is already here, so the close is a FIN after the 503 rather than a reset.
    char scratch[4096];
    s.read_some(asio::buffer(scratch), ignored);
    s.shutdown(tcp::socket::shutdown_both, ignored);
    s.close(ignored);
  }

  void forget(Conn* c) {
    auto it = per_address.find(c->address);
    if (it != per_address.end() && --it->second <= 0) per_address.erase(it);
    conns.erase(c); // a handler still holding a shared_ptr keeps the object alive until it returns
  }

  // Header deadlines and stalled writers, checked a few times a second over every connection (a thousand at most).
  void sweep() {
    sweep_timer.expires_after(kSweepEvery);
    sweep_timer.async_wait([this](beast::error_code ec) {
      if (ec || stopping) return;
      date = http_date(std::time(nullptr));
      const auto now = Clock::now();
      std::vector<std::shared_ptr<Conn>> late, stalled;
      for (const auto& [p, c] : conns)
        if (c->write_in_flight && now - c->write_since > opts.stalled_write_timeout)
          stalled.push_back(c);
        else if ((c->state == Conn::State::reading && now - c->since > opts.header_timeout) ||
                 (c->state == Conn::State::draining && now - c->since > kDrainFor))
          late.push_back(c);
      for (const auto& c : late)
        c->close();
      for (const auto& c : stalled)
        c->abort();
      sweep();
    });
  }

  void broadcast(const std::shared_ptr<const StreamMessage>& m) {
    for (const auto& [p, c] : conns)
      if (c->state == Conn::State::streaming) c->send_event(m);
  }

  // The watcher thread: one JSON per new frame for all streams, made off the network thread; a comment every 15 s
  // of silence keeps proxies from closing the streams.
  void watch() {
    uint64_t seq = live.wait_next(0, std::chrono::milliseconds(0)).second;
    while (!live.stopped()) {
      auto [frame, now] = live.wait_next(seq, std::chrono::seconds(15));
      if (live.stopped()) break;
      seq = now;
      if (streams.load() == 0) continue;
      auto m = std::make_shared<const StreamMessage>(frame ? "data: " + live.current_json().dump() + "\n\n"
                                                           : std::string(": keep-alive\n\n"));
      asio::post(io, [this, m] { broadcast(m); });
    }
  }

  void shut_down() {
    stopping = true;
    beast::error_code ignored;
    acceptor.close(ignored);
    sweep_timer.cancel();
    accept_retry.cancel();
    std::vector<std::shared_ptr<Conn>> all;
    for (const auto& [p, c] : conns)
      all.push_back(c);
    for (const auto& c : all)
      c->close();
    io.stop();
  }

  // ---- requests -----------------------------------------------------------------------------------------------

  void handle(const std::shared_ptr<Conn>& c, const Request& req, bool has_body) {
    // The token first: nothing else is looked at, parsed or computed for a request without it.
    if (!opts.token.empty() && !bearer_matches(req[http::field::authorization], opts.token)) {
      Response r = json_error(401, "missing or wrong bearer token (Authorization: Bearer TOKEN)");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return c->reply(std::move(r), false, true);
    }
    const bool head = req.method() == http::verb::head;
    if (req.method() != http::verb::get && !head) {
      Response r = json_error(405, "only GET and HEAD are served");
      r.headers.emplace_back("Allow", "GET, HEAD");
      return c->reply(std::move(r), false, true);
    }
    // No request here has a body; one that announces a body would leave it unread in the stream.
    if (has_body) return c->reply(json_error(413, "requests to serve carry no body"), head, true);
    const bool keep = req.keep_alive() && req.version() == 11;
    const std::string_view target = req.target();
    const size_t q = target.find('?');
    const std::string_view path = target.substr(0, q);
    const std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);

    auto send = [&](Response r) {
      r.close = r.close || !keep;
      c->reply(std::move(r), head);
    };
    // Every query is decoded once here, whatever the path: a bad escape or a control character (%00, %0a, ...) is a
    // 400 before any handler, store or page sees it.
    if (auto parsed = query::parse(query); auto* e = std::get_if<query::Error>(&parsed))
      return send(json_error(400, e->message));
    // The API's endpoints that take no parameters refuse one, as those that take some refuse an unknown one.
    auto takes_none = [&](std::string_view endpoint) {
      auto e = query::parse_none(query, endpoint);
      if (e) send(json_error(400, e->message));
      return e.has_value();
    };

    if (const StaticFile* f = files.find(path)) return send(static_file(*f, req));
    if (path == "/metrics") {
      // issue 32: gzip where the client takes it (Prometheus asks for it), from LiveState's once-per-body copy.
      // OpenMetrics where the scrape asks for it (Prometheus does, first), else the 0.0.4 text.
      const bool gz = accepts_gzip(req[http::field::accept_encoding]);
      const auto format =
          accepts_openmetrics(req[http::field::accept]) ? MetricsFormat::OpenMetrics : MetricsFormat::Text004;
      Response r =
          content(gz ? live.metrics_gzip(format) : live.metrics_text(format),
                  format == MetricsFormat::OpenMetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                                       : "text/plain; version=0.0.4; charset=utf-8");
      r.headers.emplace_back("Vary", "Accept-Encoding, Accept");
      if (gz) r.headers.emplace_back("Content-Encoding", "gzip");
      return send(std::move(r));
    }
    if (path == "/api/v1/current") {
      if (takes_none(path)) return;
      return send(content(live.current_json().dump(), "application/json"));
    }
    if (path == "/api/v1/alerts") {
      if (takes_none(path)) return;
      return send(content(live.alerts_json().dump(), "application/json"));
    }
    if (path == "/api/v1/forecast") { // the live forecasts (docs/forecasts.md)
      if (takes_none(path)) return;
      return send(content(live.forecast_json().dump(), "application/json"));
    }
    if (path == "/healthz") return send(content("ok\n", "text/plain"));
    if (path == "/favicon.ico") {
      Response r;
      r.status = 204;
      return send(std::move(r));
    }
    if (path == "/runs/compare" || path == "/api/v1/compare") { // issue 35: docs/compare.md
      if (!opts.store) return send(json_error(404, "serve was started without --db: no runs are stored"));
      if (!compare_view) compare_view = std::make_unique<CompareView>(*opts.store);
      return heavy(c, head, keep, [view = compare_view.get(), html = path == "/runs/compare", q = std::string(query)] {
        CompareAnswer a = view->answer(html, q);
        Response r = content(std::move(a.body), std::move(a.content_type));
        r.status = a.status;
        return r;
      });
    }
    if (path == "/api/v1/events") {
      if (takes_none(path)) return;
      if (head) return send(content("", "text/event-stream"));
      return c->stream("retry: 2000\ndata: " + live.current_json().dump() + "\n\n", req.version() == 11);
    }
    if (path == "/api/v1/history") {
      auto parsed = query::parse_history(query);
      if (auto* e = std::get_if<query::Error>(&parsed)) return send(json_error(400, e->message));
      const auto hq = std::get<query::HistoryQuery>(parsed);
      return heavy(c, head, keep,
                   [this, hq] { return content(live.history_json(hq.range, hq.step).dump(), "application/json"); });
    }
    // ---- advice (issue 14): over the last hour of LiveState's fine ring, recomputed at most every 10 s, never per
    // request
    if (path == "/api/v1/advice") {
      if (takes_none(path)) return;
      if (!opts.advice) return send(json_error(404, "advice is not kept by this server"));
      return heavy(c, head, keep, [this] { return content(opts.advice->json().dump(), "application/json"); });
    }
    // ---- end advice ----
    // issue 35: the stored runs (/api/v1/runs, /api/v1/runs/ID, /api/v1/jobs/ID, /runs, /runs/ID, /jobs/ID)
    if (RunsPages::handles(path)) {
      if (auto bad = runs_pages.check(path, query)) return send(page_response(std::move(*bad)));
      return heavy(c, head, keep, [this, p = std::string(path), q = std::string(query)] {
        return page_response(runs_pages.answer(p, q));
      });
    }
    send(json_error(404, fmt::format("no such path: {} (see / for the dashboard, /metrics, /api/v1/...)",
                                     query::printable(path, 200))));
  }

  Response static_file(const StaticFile& f, const Request& req) {
    const bool gz = accepts_gzip(req[http::field::accept_encoding]);
    Response r;
    r.content_type = f.content_type;
    r.headers.emplace_back("ETag", gz ? f.etag_gzip : f.etag);
    r.headers.emplace_back("Cache-Control", f.cache_control);
    r.headers.emplace_back("Vary", "Accept-Encoding");
    if (!f.csp.empty()) r.headers.emplace_back("Content-Security-Policy", f.csp);
    const std::string_view inm = req[http::field::if_none_match];
    if (!inm.empty() && (etag_listed(inm, f.etag) || etag_listed(inm, f.etag_gzip))) {
      r.status = 304;
      return r;
    }
    if (gz) r.headers.emplace_back("Content-Encoding", "gzip");
    r.static_body = gz ? f.gzip : f.identity;
    return r;
  }

  // Runs `work` on the pool (it may read a store or a long history) and answers on the network thread.
  template <class Work> void heavy(const std::shared_ptr<Conn>& c, bool head, bool keep, Work work) {
    if (heavy_in_flight >= kMaxHeavyInFlight) {
      Response r = json_error(503, "too many history and run requests at once; try again");
      r.headers.emplace_back("Retry-After", "1");
      return c->reply(std::move(r), head, !keep);
    }
    if (!pool) pool.emplace(static_cast<size_t>(std::max(1, opts.workers)));
    ++heavy_in_flight;
    asio::post(*pool, [this, c, head, keep, work = std::move(work)]() mutable {
      Response r;
      try {
        r = work();
      } catch (const std::exception& e) {
        r = json_error(500, e.what());
      }
      // A page made here (a run's report, the runs pages, the compare view) gets its policy here, off the network
      // thread: its inline scripts hashed (a few ms for a report's data).
      if (r.content_type.starts_with("text/html"))
        r.headers.emplace_back("Content-Security-Policy", content_security_policy(r.body));
      r.close = r.close || !keep;
      asio::post(io, [this, c, head, r = std::move(r)]() mutable {
        --heavy_in_flight;
        c->reply(std::move(r), head);
      });
    });
  }
};

HttpServer::HttpServer(LiveState& live, ServerOptions opts) : impl_(std::make_unique<Impl>(live, std::move(opts))) {}

HttpServer::~HttpServer() {
  stop();
  if (impl_->pool) impl_->pool->join();
}

void HttpServer::bind() {
  auto& s = *impl_;
  const auto& l = s.opts.listen;
  auto fail = [&](const std::string& why) {
    return std::runtime_error(fmt::format("cannot listen on {}:{} ({}); pass another --listen", l.host, l.port, why));
  };
  beast::error_code ec;
  const std::string host = l.host == "localhost" ? "127.0.0.1" : l.host;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) throw fail("not an IP address of this machine");
  const tcp::endpoint ep(address, static_cast<unsigned short>(l.port));
  s.acceptor.open(ep.protocol(), ec);
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw fail(ec.message());
  s.bound_port = s.acceptor.local_endpoint().port();
  // Every connection is a descriptor: take what the hard limit allows, and cap connections below it so that the
  // store, the sampler and sysfs still find descriptors.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    const rlim_t want = std::min<rlim_t>(rl.rlim_max, 65536);
    if (rl.rlim_cur < want) {
      rl.rlim_cur = want;
      setrlimit(RLIMIT_NOFILE, &rl);
      getrlimit(RLIMIT_NOFILE, &rl);
    }
    s.max_connections = std::min<int>(s.opts.max_connections, static_cast<int>(rl.rlim_cur) - 128);
  } else {
    s.max_connections = s.opts.max_connections;
  }
  s.max_connections = std::max(s.max_connections, 16);
}

void HttpServer::run() {
  auto& s = *impl_;
  s.watcher = std::thread([&s] {
    name_this_thread("ws-events");
    s.watch();
  });
  asio::post(s.io, [&s] {
    if (s.stopping) return;
    s.accept();
    s.sweep();
  });
  s.io.run();
  s.watcher.join();
}

void HttpServer::stop() {
  auto& s = *impl_;
  s.live.stop(); // wakes the watcher
  asio::post(s.io, [&s] { s.shut_down(); });
}

int HttpServer::port() const {
  return impl_->bound_port;
}

} // namespace wattscope
