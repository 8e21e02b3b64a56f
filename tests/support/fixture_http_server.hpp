// A tiny HTTP/1.1 server on a free loopback port, for the outside systems wattscope queries that this machine cannot
// run (the kubelet's /pods, issue 18): every GET is answered with the status and body set, after an optional delay,
// and counted. One connection at a time; the connection is closed after each answer.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace wstest {

class FixtureHttpServer {
public:
  FixtureHttpServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("fixture server: cannot listen on loopback");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~FixtureHttpServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  void answer(int status, std::string body, std::chrono::milliseconds delay = {}) {
    std::lock_guard lk(mu_);
    status_ = status;
    body_ = std::move(body);
    delay_ = delay;
  }
  int port() const { return port_; }
  std::string url(const std::string& path = "/pods") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  int requests() const { return requests_; }
  std::vector<std::string> request_lines() const {
    std::lock_guard lk(mu_);
    return lines_;
  }

private:
  void loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string req;
      char buf[4096];
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (req.find("\r\n\r\n") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 100) <= 0) continue;
        const ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      int status;
      std::string body;
      std::chrono::milliseconds delay;
      {
        std::lock_guard lk(mu_);
        lines_.push_back(req.substr(0, req.find("\r\n")));
        status = status_;
        body = body_;
        delay = delay_;
      }
      ++requests_;
      for (auto until = std::chrono::steady_clock::now() + delay; !stop_ && std::chrono::steady_clock::now() < until;)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const std::string head = "HTTP/1.1 " + std::to_string(status) + (status == 200 ? " OK" : " Error") +
                               "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                               "\r\nConnection: close\r\n\r\n";
      const std::string all = head + body;
      for (size_t off = 0; off < all.size();) {
        const ssize_t n = ::send(c, all.data() + off, all.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
      ::close(c);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  mutable std::mutex mu_;
  int status_ = 200;
  std::string body_;
  std::chrono::milliseconds delay_{0};
  std::vector<std::string> lines_;
  std::thread thread_;
};

} // namespace wstest
