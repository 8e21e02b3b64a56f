// `wattscope serve` against clients that misbehave: slow request headers, idle connections, event streams that are
// never read, too many connections from one address. /metrics must keep answering through all of it, and the big
// static asset must go out precompressed with validators. Bounds here are generous (seconds): they prove a property,
// the figures are measured in bench/serve.sh.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "http_client.hpp"

namespace e2e_serve_hostile { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
namespace http = wstest::http;
using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kToken = "s3cret-token-0123456789";

// `wattscope serve` with one fake GPU at 100 ms, optionally token-protected, on a free loopback port.
class Serve {
public:
  explicit Serve(bool with_token) {
    write_file(dir_ / "scenario.json",
               R"({"devices": [{"name": "NVIDIA H100", "uuid": "GPU-0", "metrics": {"power_instant_mw": 250000,
                   "energy_mj": {"linear": [0, 25000]}, "util_gpu": 90, "mem_used_bytes": 1000000000,
                   "mem_total_bytes": 85899345920, "temp_gpu": 60}}]})");
    std::vector<std::string> args = {wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "100ms"};
    if (with_token) {
      write_file(dir_ / "token", kToken + "\n");
      args.insert(args.end(), {"--token-file", dir_ / "token"});
    }
    pid_ =
        start(args, {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()}, {"WATTSCOPE_FAKE_NVML_SCENARIO", dir_ / "scenario.json"}},
              dir_.path(), dir_ / "out", dir_ / "err");
    port_ = wait_for_serve_port(dir_ / "err", 200);
    std::this_thread::sleep_for(300ms);
  }
  ~Serve() {
    kill(pid_, SIGKILL);
    wait_exit(pid_);
  }
  int port() const { return port_; }
  int pid() const { return pid_; }
  http::Headers auth() const { return {{"Authorization", "Bearer " + kToken}}; }

private:
  TempDir dir_;
  int pid_ = -1;
  int port_ = 0;
};

void raise_fd_limit() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
}

// The status of the response that arrives on `fd` within `timeout` (0: none).
int read_status(int fd, std::chrono::milliseconds timeout) {
  std::string raw;
  const auto deadline = Clock::now() + timeout;
  while (raw.find("\r\n") == std::string::npos)
    if (http::read_some(fd, raw, deadline) <= 0) break;
  return raw.rfind("HTTP/1.", 0) == 0 && raw.size() >= 12 ? std::stoi(raw.substr(9, 3)) : 0;
}

// True when the server has closed `fd` (a FIN or a reset), without reading what is queued on it.
bool peer_closed(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

std::string gunzip(const std::string& in) {
  z_stream zs{};
  inflateInit2(&zs, 15 + 16);
  std::string out;
  char buf[65536];
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof buf - zs.avail_out);
  }
  inflateEnd(&zs);
  return rc == Z_STREAM_END ? out : "(corrupt gzip)";
}

} // namespace

TEST(ServeUnderLoad, MetricsAnswersWhileSlowIdleAndNonReadingClientsHang) {
  raise_fd_limit();
  Serve s(/*with_token=*/true);
  // 120 connections that send a request header one byte every 2 s, without the token.
  const std::string slow_request = "GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: slow\r\n\r\n";
  std::vector<int> slow, idle, sse;
  for (int i = 0; i < 120; ++i)
    slow.push_back(http::connect_loopback(s.port()));
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    for (size_t sent = 0; !done; ++sent) {
      for (int fd : slow)
        send(fd, slow_request.data() + sent % slow_request.size(), 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      for (int i = 0; i < 20 && !done; ++i)
        std::this_thread::sleep_for(100ms);
    }
  });
  // Stops the trickle and closes every connection however the test ends (an ASSERT returns early).
  struct Cleanup {
    std::atomic<bool>& done;
    std::thread& t;
    std::vector<std::vector<int>*> fds;
    ~Cleanup() {
      done = true;
      t.join();
      for (auto* v : fds)
        for (int fd : *v)
          close(fd);
    }
  } cleanup{done, trickle, {&slow, &idle, &sse}};
  // 500 connections that send nothing, and 100 event streams that are never read (small receive buffers, so they
  // fill in a few seconds).
  for (int i = 0; i < 500; ++i)
    idle.push_back(http::connect_loopback(s.port()));
  for (int i = 0; i < 100; ++i) {
    const int fd = http::connect_loopback(s.port(), 4096);
    http::send_all(fd, http::request_text("GET", "/api/v1/events", s.auth(), false));
    sse.push_back(fd);
  }
  // Before: these requests queued behind the held worker threads for up to 24 s. Timed over 12 s, long enough for
  // the slow headers to pass their deadline and the streams' buffers to fill.
  int answered = 0;
  Clock::duration worst{};
  const auto until = Clock::now() + 12s;
  while (Clock::now() < until) {
    const auto t0 = Clock::now();
    auto r = http::get(s.port(), "/metrics", s.auth(), 2s);
    const auto took = Clock::now() - t0;
    worst = std::max(worst, took);
    ASSERT_EQ(r.status, 200) << r.error << " after "
                             << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
    EXPECT_NE(r.body.find("wattscope_gpu_power_watts"), std::string::npos);
    ++answered;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_LT(worst, 2s);
  EXPECT_GE(answered, 20);
  // A slow-header connection was closed by its deadline (or to make room), never answered with data.
  int slow_closed = 0;
  for (int fd : slow)
    slow_closed += peer_closed(fd) ? 1 : 0;
  EXPECT_EQ(slow_closed, 120);
}

TEST(ServeUnderLoad, AnEventStreamThatStopsReadingIsDroppedAndTheOthersKeepGoing) {
  Serve s(/*with_token=*/false);
  const int stuck = http::connect_loopback(s.port(), 4096);
  http::send_all(stuck, http::request_text("GET", "/api/v1/events", {}, false));
  // A reader connected all along keeps receiving frames while the other one is stuck and then dropped.
  std::atomic<int> frames{0};
  std::thread reader([&] {
    http::stream(
        s.port(), "/api/v1/events", {},
        [&](std::string_view chunk) {
          for (size_t p = chunk.find("data: "); p != std::string_view::npos; p = chunk.find("data: ", p + 1))
            ++frames;
          return !peer_closed(stuck) || frames < 50;
        },
        40s);
  });
  const auto t0 = Clock::now();
  while (!peer_closed(stuck) && Clock::now() - t0 < 40s)
    std::this_thread::sleep_for(100ms);
  const auto dropped_after = Clock::now() - t0;
  reader.join();
  close(stuck);
  // Its buffers fill within a few seconds at 10 frames/s; then 5 s of no progress and it is dropped.
  EXPECT_LT(dropped_after, 30s) << "the stream that is never read was not dropped";
  EXPECT_GT(dropped_after, 4s) << "dropped before it had been stuck for 5 s";
  EXPECT_GE(frames.load(), 40) << "the reading client starved";
}

TEST(ServeUnderLoad, AnAddressOverItsConnectionCapIsRefusedOthersAreNot) {
  raise_fd_limit();
  Serve s(/*with_token=*/false);
  // Event streams are busy connections: nothing can be closed to make room for more from the same address.
  std::vector<int> streams;
  int refused_at = -1;
  for (int i = 0; i < 400 && refused_at < 0; ++i) {
    const int fd = http::connect_loopback(s.port());
    ASSERT_GE(fd, 0);
    http::send_all(fd, http::request_text("GET", "/api/v1/events", {}, false));
    const int status = read_status(fd, 3s);
    if (status == 200) {
      streams.push_back(fd);
    } else {
      EXPECT_EQ(status, 503) << "connection " << i;
      refused_at = i;
      close(fd);
    }
  }
  EXPECT_GE(refused_at, 16) << "the per-address cap is too small for a few browsers";
  EXPECT_LE(refused_at, 300) << "no per-address cap: 400 event streams from one address were all accepted";
  // Refused at once, not queued; another address is served as usual meanwhile.
  const auto t0 = Clock::now();
  const int again = http::connect_loopback(s.port());
  http::send_all(again, http::request_text("GET", "/metrics", {}, true));
  EXPECT_EQ(read_status(again, 2s), 503);
  EXPECT_LT(Clock::now() - t0, 1s);
  close(again);
  const int other = http::connect_loopback(s.port(), 0, "127.0.0.2");
  ASSERT_GE(other, 0);
  http::send_all(other, http::request_text("GET", "/metrics", {}, true));
  EXPECT_EQ(read_status(other, 2s), 200);
  close(other);
  // Room again once some streams go away.
  for (int i = 0; i < 10; ++i) {
    close(streams.back());
    streams.pop_back();
  }
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(http::get(s.port(), "/metrics", {}, 2s).status, 200);
  for (int fd : streams)
    close(fd);
}

TEST(ServeUnderLoad, IdleServeRunsAFewThreadsNotAPool) {
  Serve s(/*with_token=*/false);
  ASSERT_EQ(http::get(s.port(), "/metrics").status, 200);
  int threads = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(s.pid()) + "/task"))
    ++threads;
  // The sampler's, the stores', the network thread and the event-stream watcher: a handful, not 96 workers.
  EXPECT_LE(threads, 16);
}

TEST(ServeAssets, PlotlyGoesOutPrecompressedWithValidatorsAndA304) {
  Serve s(/*with_token=*/false);
  auto page = http::get(s.port(), "/");
  ASSERT_EQ(page.status, 200) << page.error;
  EXPECT_EQ(page.header("cache-control"), "no-cache");
  ASSERT_FALSE(page.header("etag").empty());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(page.body, m, std::regex("/assets/plotly-[0-9a-f]{16}\\.min\\.js")))
      << "the dashboard does not load plotly.js from a versioned URL";
  const std::string url = m.str();
  EXPECT_EQ(http::get(s.port(), "/", {{"If-None-Match", page.header("etag")}}).status, 304);

  // What Chromium sends. Before: Brotli-compressed afresh for each request, about 17 s of CPU.
  const auto t0 = Clock::now();
  auto gz = http::get(s.port(), url, {{"Accept-Encoding", "gzip, deflate, br"}}, 5s);
  const auto took = Clock::now() - t0;
  ASSERT_EQ(gz.status, 200) << gz.error;
  EXPECT_LT(took, 2s);
  EXPECT_EQ(gz.header("content-encoding"), "gzip");
  EXPECT_NE(gz.header("cache-control").find("immutable"), std::string::npos) << gz.header("cache-control");
  EXPECT_NE(gz.header("cache-control").find("max-age=31536000"), std::string::npos);
  EXPECT_EQ(gz.header("vary"), "Accept-Encoding");
  const std::string original =
      read_file(std::string(WATTSCOPE_SOURCE_DIR) + "/node_modules/plotly.js-dist-min/plotly.min.js");
  EXPECT_LT(gz.body.size(), original.size() / 2);
  EXPECT_TRUE(gunzip(gz.body) == original) << "the gzip body is not plotly.min.js";

  auto again = http::get(s.port(), url, {{"Accept-Encoding", "gzip"}, {"If-None-Match", gz.header("etag")}});
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  // No gzip accepted (or refused with q=0): the body as it is.
  for (const char* ae : {"identity", "br", "gzip;q=0, br"}) {
    auto plain = http::get(s.port(), url, {{"Accept-Encoding", ae}});
    ASSERT_EQ(plain.status, 200) << ae;
    EXPECT_EQ(plain.header("content-encoding"), "") << ae;
    EXPECT_TRUE(plain.body == original) << ae;
  }
  EXPECT_EQ(http::get(s.port(), "/assets/plotly-0000000000000000.min.js").status, 404);
}

TEST(ServeHttp, TheTokenComesFirstAndOversizedHeadersAreRefused) {
  Serve s(/*with_token=*/true);
  // Without the token even a bad request is a 401: nothing is parsed or computed first.
  auto bad_query = http::get(s.port(), "/api/v1/history?range=%00");
  EXPECT_EQ(bad_query.status, 401);
  EXPECT_EQ(bad_query.header("www-authenticate"), "Bearer");
  EXPECT_EQ(http::get(s.port(), "/metrics", {{"Authorization", "Bearer " + kToken + "x"}}).status, 401);
  EXPECT_EQ(http::get(s.port(), "/metrics", {{"Authorization", "bearer " + kToken}}).status, 200);
  // A query error names the parameter and shows the value printable (it used to answer "'").
  auto q = http::get(s.port(), "/api/v1/history?range=%00", s.auth());
  ASSERT_EQ(q.status, 400);
  const std::string msg = json::parse(q.body)["error"];
  EXPECT_NE(msg.find("'range'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\\x00"), std::string::npos) << msg;
  // A header block of 20 kB is refused with 431.
  auto big = http::get(s.port(), "/metrics", {s.auth()[0], {"X-Padding", std::string(20000, 'a')}});
  EXPECT_EQ(big.status, 431) << big.error;
  // Only GET and HEAD.
  EXPECT_EQ(http::get(s.port(), "/metrics", s.auth(), 5s, "DELETE").status, 405);
  auto head = http::get(s.port(), "/metrics", s.auth(), 5s, "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
}
} // namespace e2e_serve_hostile

namespace e2e_serve_hostile {

// Every query parameter of every path is decoded once and refused with a 400 when it holds a control character (a
// NUL once ended the runs search early: q=%00zzzz matched every run); the API's endpoints that take no parameter
// refuse one, as those that take some refuse an unknown one.
TEST(ServeHttp, ControlCharactersAndUnknownParametersAreRefusedOnEveryPath) {
  Serve s(/*with_token=*/false);
  for (const char* target : {"/api/v1/runs?q=%00zzzz", "/runs?task=a%0db", "/metrics?x=%01", "/?q=%7f",
                             "/api/v1/history?range=1h&step=%09", "/api/v1/current?%00=1", "/api/v1/forecast?x=%1b"}) {
    SCOPED_TRACE(target);
    auto r = http::get(s.port(), target);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("control character"), std::string::npos) << r.body;
  }
  for (const char* path : {"/api/v1/forecast", "/api/v1/current", "/api/v1/alerts", "/api/v1/advice"}) {
    SCOPED_TRACE(path);
    auto r = http::get(s.port(), std::string(path) + "?bogus=1");
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("unknown query parameter 'bogus'"), std::string::npos) << r.body;
    EXPECT_EQ(http::get(s.port(), path).status, 200);
  }
  // UTF-8 is not a control character.
  EXPECT_EQ(http::get(s.port(), "/?lang=caf%C3%A9").status, 200);
}

// The dashboard goes out with its Content-Security-Policy: its own inline scripts by hash, nothing from elsewhere.
TEST(ServeAssets, TheDashboardCarriesAContentSecurityPolicyHashingItsScripts) {
  Serve s(/*with_token=*/false);
  auto page = http::get(s.port(), "/");
  ASSERT_EQ(page.status, 200) << page.error;
  const std::string csp = page.header("content-security-policy");
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("script-src 'self' 'sha256-"), std::string::npos) << csp;
  EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe-eval"), std::string::npos) << csp;
  EXPECT_EQ(http::get(s.port(), "/metrics").header("content-security-policy"), "");
}

} // namespace e2e_serve_hostile
