// A move-only owner of one file descriptor: closed exactly once, by whoever holds it last. Copying is impossible, so
// two owners can never close the same number (and close someone else's file that reused it).
#pragma once

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace wattscope {

class UniqueFd {
public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }

  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }

  // Gives the descriptor up without closing it.
  int release() noexcept { return std::exchange(fd_, -1); }
  // Closes the held descriptor (if any) and holds `fd` instead.
  void reset(int fd = -1) noexcept {
    const int old = std::exchange(fd_, fd);
    if (old >= 0) ::close(old);
  }
  // Closes now and says how that went: 0, or the errno (NFS and some FUSE file systems report write errors only
  // here). Linux releases the descriptor even when close fails, so it is never retried.
  int close() noexcept {
    const int old = release();
    if (old < 0) return 0;
    return ::close(old) == 0 ? 0 : errno;
  }

private:
  int fd_ = -1;
};

} // namespace wattscope
