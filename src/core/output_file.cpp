#include "core/output_file.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace wattscope {

namespace fs = std::filesystem;

namespace {

// Linux's own limit on links followed in one lookup (MAXSYMLINKS).
constexpr int kMaxLinkDepth = 40;
constexpr int kTempAttempts = 100;

[[noreturn]] void fail(const std::string& path, std::string_view why) {
  throw std::runtime_error(fmt::format("cannot write '{}': {}", path, why));
}
[[noreturn]] void fail_errno(const std::string& path, int err) {
  fail(path, std::strerror(err));
}

// 12 characters from the kernel's random pool: a name nobody can plant a link at in advance (and O_EXCL refuses one
// that is there anyway).
std::string random_suffix() {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char bytes[12];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(fmt::format("getrandom: {}", std::strerror(errno)));
    got += static_cast<size_t>(n);
  }
  std::string s;
  for (unsigned char b : bytes)
    s.push_back(kAlphabet[b % (sizeof kAlphabet - 1)]);
  return s;
}

const char* kind_name(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

} // namespace

OutputFile::OutputFile(const std::string& path, const OutputOptions& opts) : path_(path) {
  if (path.empty()) throw std::runtime_error("cannot write a file with an empty name");
  if (path == "-") {
    // Standard output, written as it is (a terminal, a pipe or a file the shell opened): our own descriptor for it,
    // so closing ours leaves fd 1 alone.
    const int fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) fail("standard output", std::strerror(errno));
    fd_.reset(fd);
    kind_ = Kind::Stream;
    target_ = "-";
    return;
  }
  open_path(path, opts, 0);
}

void OutputFile::open_path(const std::string& path, const OutputOptions& opts, int depth) {
  if (depth > kMaxLinkDepth) fail(path_, std::strerror(ELOOP));
  const fs::path p(path);
  const std::string base = p.filename().string();
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  if (base.empty() || base == "." || base == "..") fail(path_, "it names a directory; give a file name");

  UniqueFd dirfd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dirfd) fail(path_, fmt::format("directory '{}': {}", dir, std::strerror(errno)));

  struct stat st {};
  const bool exists = ::fstatat(dirfd.get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (!exists && errno != ENOENT) fail_errno(path_, errno);

  if (exists && S_ISLNK(st.st_mode)) {
    char buf[4096];
    const ssize_t n = ::readlinkat(dirfd.get(), base.c_str(), buf, sizeof buf - 1);
    if (n < 0) fail_errno(path_, errno);
    const std::string to(buf, static_cast<size_t>(n));
    if (!opts.follow_symlinks) {
      // /dev/stdout is a link into /proc/self/fd: "-" is the way to say it.
      if (path == "/dev/stdout" || path == "/dev/fd/1" || path == "/proc/self/fd/1")
        fail(path_, "it is a symbolic link, and wattscope does not write through links; for standard output, give -");
      std::error_code ec;
      const fs::path real = fs::weakly_canonical(fs::absolute(path), ec);
      fail(path_, fmt::format("it is a symbolic link to '{}', and wattscope does not write through links; give the "
                              "file's own path{}",
                              to, ec ? std::string() : fmt::format(" ('{}')", real.string())));
    }
    const fs::path next = fs::path(to).is_absolute() ? fs::path(to) : fs::path(dir) / to;
    open_path(next.string(), opts, depth + 1);
    return;
  }

  if (exists && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    // Written in place, never replaced. A FIFO blocks here until someone reads it, as `> fifo` does in a shell.
    UniqueFd fd(::openat(dirfd.get(), base.c_str(), O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC));
    if (!fd) fail_errno(path_, errno);
    struct stat now {};
    if (::fstat(fd.get(), &now) != 0) fail_errno(path_, errno);
    if (!S_ISCHR(now.st_mode) && !S_ISFIFO(now.st_mode)) fail(path_, "it was replaced while being opened; try again");
    fd_ = std::move(fd);
    kind_ = Kind::Stream;
    target_ = path;
    return;
  }

  if (exists && !S_ISREG(st.st_mode))
    fail(path_, fmt::format("it is {}; wattscope writes only regular files, character devices and FIFOs",
                            kind_name(st.st_mode)));
  // A file we may not write stays as it is, as it would for `>`; replacing it by rename would get round that.
  if (exists && ::faccessat(dirfd.get(), base.c_str(), W_OK, AT_EACCESS | AT_SYMLINK_NOFOLLOW) != 0)
    fail_errno(path_, errno);

  const std::string stem = base.size() > 200 ? base.substr(0, 200) : base;
  for (int attempt = 0; attempt < kTempAttempts && !fd_; ++attempt) {
    std::string name = "." + stem + "." + random_suffix() + ".tmp";
    const int fd =
        ::openat(dirfd.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);
    if (fd >= 0) {
      fd_.reset(fd);
      tmp_ = std::move(name);
    } else if (errno != EEXIST) {
      fail(path_, fmt::format("cannot create a temporary file in '{}': {}", dir, std::strerror(errno)));
    }
  }
  if (!fd_) fail(path_, fmt::format("no free temporary name in '{}'", dir));
  dir_ = std::move(dirfd);
  base_ = base;
  target_ = path;
  kind_ = Kind::Replace;
  if (exists) {
    // The replacement keeps the permissions (and, where we may, the owner) of the file it replaces: a report kept
    // private stays private. Owner first: chown clears set-id bits that the chmod then sets again.
    if (st.st_uid != ::geteuid() || st.st_gid != ::getegid()) (void)::fchown(fd_.get(), st.st_uid, st.st_gid);
    if (::fchmod(fd_.get(), st.st_mode & 07777) != 0) fail_errno(path_, errno);
  }
}

OutputFile::~OutputFile() {
  discard();
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : path_(std::move(o.path_)), target_(std::move(o.target_)), kind_(o.kind_), dir_(std::move(o.dir_)),
      base_(std::move(o.base_)), tmp_(std::exchange(o.tmp_, {})), fd_(std::move(o.fd_)), done_(o.done_) {}

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this != &o) {
    discard();
    path_ = std::move(o.path_);
    target_ = std::move(o.target_);
    kind_ = o.kind_;
    dir_ = std::move(o.dir_);
    base_ = std::move(o.base_);
    tmp_ = std::exchange(o.tmp_, {});
    fd_ = std::move(o.fd_);
    done_ = o.done_;
  }
  return *this;
}

void OutputFile::discard() noexcept {
  fd_.reset();
  if (!tmp_.empty() && dir_) ::unlinkat(dir_.get(), tmp_.c_str(), 0);
  tmp_.clear();
}

void OutputFile::write(std::string_view bytes) {
  if (!fd_) fail(path_, done_ ? "already committed" : "not open");
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_.get(), bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno(path_, errno);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void OutputFile::commit() {
  if (!fd_) fail(path_, done_ ? "already committed" : "not open");
  if (kind_ == Kind::Stream) {
    done_ = true;
    if (const int err = fd_.close(); err != 0) fail_errno(path_, err);
    return;
  }
  if (::fsync(fd_.get()) != 0) fail_errno(path_, errno);
  if (const int err = fd_.close(); err != 0) fail_errno(path_, err);
  // Whatever took the target's name while we wrote must still be a file we may replace: never a rename over a device,
  // a FIFO, a link or a directory.
  struct stat st {};
  if (::fstatat(dir_.get(), base_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
    fail(path_, "it stopped being a regular file while the new one was written; left it alone");
  if (::renameat(dir_.get(), tmp_.c_str(), dir_.get(), base_.c_str()) != 0) fail_errno(path_, errno);
  tmp_.clear();
  done_ = true;
  // The rename is durable once the directory is: best effort (a directory we may not read cannot be synced).
  UniqueFd d(::openat(dir_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d) (void)::fsync(d.get());
}

void write_output(const std::string& path, std::string_view bytes, const OutputOptions& opts) {
  OutputFile out(path, opts);
  out.write(bytes);
  out.commit();
}

} // namespace wattscope
