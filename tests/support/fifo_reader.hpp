// Reads a FIFO on a thread, from a descriptor opened before any writer: a test whose writer never comes (or that
// replaces the FIFO instead of writing into it) stops at finish() instead of hanging on open().
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

namespace wstest {

class FifoReader {
public:
  explicit FifoReader(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~FifoReader() { finish(); }
  FifoReader(const FifoReader&) = delete;
  FifoReader& operator=(const FifoReader&) = delete;

  bool ok() const { return fd_ >= 0; }
  // Call once the writer is done (its process exited): drains what is left and returns all that was read.
  std::string finish() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    return got_;
  }

private:
  void loop() {
    if (fd_ < 0) return;
    char buf[65536];
    for (;;) {
      const bool done = done_;
      pollfd p{fd_, POLLIN, 0};
      ::poll(&p, 1, 20);
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n > 0) {
        got_.append(buf, static_cast<size_t>(n));
        continue;
      }
      // 0: no writer (yet, or any more); EAGAIN: a writer, nothing to read now. Either way, stop once told to.
      if (done) return;
      if (n == 0) ::usleep(5000);
    }
  }

  int fd_;
  std::atomic<bool> done_{false};
  std::string got_;
  std::thread thread_;
};

} // namespace wstest
