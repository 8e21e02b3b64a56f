// A small tmpfs mounted inside a test's own temporary directory, to fill up on purpose; unmounted at destruction
// (lazily, so a file still open somewhere cannot keep it). Needs root (CI runs as root); ok() says whether it worked.
#pragma once

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace wstest {

class TmpfsMount {
public:
  TmpfsMount(std::string dir, size_t size_kib) : dir_(std::move(dir)) {
    if (::geteuid() != 0) {
      why_ = "not root";
      return;
    }
    ::mkdir(dir_.c_str(), 0755);
    const std::string opts = "size=" + std::to_string(size_kib) + "k";
    if (::mount("tmpfs", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
      why_ = std::string("mount -t tmpfs failed: ") + std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;

  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return dir_; }

  // Writes `name` until the file system says it is full: every byte taken. Returns the bytes written.
  size_t fill(const std::string& name) const {
    const int fd = ::open((dir_ + "/" + name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return 0;
    const std::vector<char> block(4096, 'x');
    size_t total = 0;
    for (;;) {
      const ssize_t n = ::write(fd, block.data(), block.size());
      if (n <= 0) break;
      total += static_cast<size_t>(n);
    }
    // The last pages a small write can squeeze into.
    for (;;) {
      const ssize_t n = ::write(fd, block.data(), 1);
      if (n <= 0) break;
      total += 1;
    }
    ::close(fd);
    return total;
  }
  void unfill(const std::string& name) const { ::unlink((dir_ + "/" + name).c_str()); }

private:
  std::string dir_;
  std::string why_;
  bool mounted_ = false;
};

} // namespace wstest
