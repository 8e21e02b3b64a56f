// A small blocking HTTP/1.1 client over loopback for the serve tests: raw sockets, a deadline on every call, and
// nothing hidden (the tests also need connections that misbehave on purpose, which a client library would not make).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wstest::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Response {
  int status = 0;                             // 0: no response (see error)
  std::map<std::string, std::string> headers; // names in lower case
  std::string body;                           // chunked bodies decoded
  std::string error;
  explicit operator bool() const { return status != 0; }
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// A blocking TCP connection to 127.0.0.1:port; rcvbuf > 0 sets SO_RCVBUF first; `source` (any 127.x.y.z, all of
// them this machine's loopback) makes it come from another address. -1 on failure.
inline int connect_loopback(int port, int rcvbuf = 0, const char* source = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  if (source) {
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, source, &src.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
      close(fd);
      return -1;
    }
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

inline bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads what is there within the deadline: >0 bytes appended, 0 end of stream, -1 error, -2 deadline passed.
inline int read_some(int fd, std::string& into, std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return -2;
  pollfd p{fd, POLLIN, 0};
  const int r = poll(&p, 1, static_cast<int>(left.count()));
  if (r == 0) return -2;
  if (r < 0) return -1;
  char buf[16384];
  const ssize_t n = recv(fd, buf, sizeof buf, 0);
  if (n < 0) return -1;
  into.append(buf, static_cast<size_t>(n));
  return n > 0 ? 1 : 0;
}

inline std::string request_text(const std::string& method, const std::string& target, const Headers& headers,
                                bool close) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const auto& [k, v] : headers)
    req += k + ": " + v + "\r\n";
  if (close) req += "Connection: close\r\n";
  return req + "\r\n";
}

// Parses the status line and headers at the start of `raw`; returns the body's offset, or 0 when incomplete.
inline size_t parse_head(const std::string& raw, Response& r) {
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return 0;
  if (raw.rfind("HTTP/1.", 0) != 0 || raw.size() < 12) {
    r.error = "not an HTTP response: " + raw.substr(0, 40);
    return std::string::npos;
  }
  r.status = std::stoi(raw.substr(9, 3));
  size_t pos = raw.find("\r\n") + 2;
  while (pos < end) {
    const size_t eol = raw.find("\r\n", pos);
    const std::string line = raw.substr(pos, eol - pos);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (auto& ch : name)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ')
        ++v;
      r.headers[name] = line.substr(v);
    }
    pos = eol + 2;
  }
  return end + 4;
}

// Decodes a complete chunked body; false while incomplete.
inline bool dechunk(std::string_view in, std::string& out) {
  out.clear();
  for (;;) {
    const size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) return false;
    const size_t len = std::stoul(std::string(in.substr(0, eol)), nullptr, 16);
    if (len == 0) return true;
    if (in.size() < eol + 2 + len + 2) return false;
    out.append(in.substr(eol + 2, len));
    in.remove_prefix(eol + 2 + len + 2);
  }
}

// One request on its own connection, answered whole (Content-Length, chunked, or up to the close) within `timeout`.
inline Response get(int port, const std::string& target, const Headers& headers = {},
                    std::chrono::milliseconds timeout = std::chrono::seconds(10), const std::string& method = "GET") {
  Response r;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int fd = connect_loopback(port);
  if (fd < 0) {
    r.error = "connect failed";
    return r;
  }
  std::string raw;
  size_t body_at = 0;
  if (!send_all(fd, request_text(method, target, headers, true))) r.error = "send failed";
  while (r.error.empty()) {
    const int got = read_some(fd, raw, deadline);
    if (got == -2) {
      r.error = "timed out";
      break;
    }
    if (body_at == 0) body_at = parse_head(raw, r);
    if (body_at == std::string::npos) break;
    if (body_at > 0) {
      const std::string_view body = std::string_view(raw).substr(body_at);
      if (method == "HEAD" || r.status == 304 || r.status == 204) break;
      if (r.header("transfer-encoding") == "chunked") {
        if (dechunk(body, r.body)) break;
      } else if (!r.header("content-length").empty()) {
        const size_t len = std::stoul(r.header("content-length"));
        if (body.size() >= len) {
          r.body = std::string(body.substr(0, len));
          break;
        }
      } else if (got == 0) {
        r.body = std::string(body);
        break;
      }
    }
    if (got <= 0) {
      if (body_at == 0 || r.body.empty()) r.error = got == 0 ? "closed before a whole response" : "read failed";
      break;
    }
  }
  close(fd);
  if (!r.error.empty()) r.status = 0;
  return r;
}

// Opens `target` and hands every piece of the body (raw, chunk framing included) to on_data until it returns false,
// the server closes, or `timeout` passes.
inline Response stream(int port, const std::string& target, const Headers& headers,
                       const std::function<bool(std::string_view)>& on_data,
                       std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  Response r;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int fd = connect_loopback(port);
  if (fd < 0) {
    r.error = "connect failed";
    return r;
  }
  std::string raw;
  size_t body_at = 0, passed = 0;
  send_all(fd, request_text("GET", target, headers, false));
  for (;;) {
    const int got = read_some(fd, raw, deadline);
    if (got < 0) {
      r.error = got == -2 ? "timed out" : "read failed";
      break;
    }
    if (body_at == 0) body_at = parse_head(raw, r);
    if (body_at == std::string::npos) break;
    if (body_at > 0) {
      if (passed < body_at) passed = body_at;
      const std::string_view fresh = std::string_view(raw).substr(passed);
      passed = raw.size();
      if (!fresh.empty() && !on_data(fresh)) break;
    }
    if (got == 0) break;
  }
  close(fd);
  return r;
}

} // namespace wstest::http
