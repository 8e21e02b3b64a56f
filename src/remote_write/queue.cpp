#include "remote_write/queue.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "core/protected_file.hpp"

namespace wattscope::remote_write {

namespace fs = std::filesystem;

namespace {

// A queued batch is at most a few MB (a batch holds at most a few thousand samples); anything larger is not ours.
constexpr uint64_t kMaxSegmentBytes = 64ull << 20;

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(fmt::format("remote-write queue: {} '{}': {}", what, path, std::strerror(errno)));
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::path p(dir);
  fs::path at;
  for (const auto& part : p) {
    at /= part;
    if (at.empty() || fs::exists(at, ec)) continue;
    if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) fail("cannot create", at.string());
  }
}

// "<seq>-<samples>.rw"
bool parse_name(std::string_view name, uint64_t& seq, uint64_t& samples) {
  if (!name.ends_with(".rw")) return false;
  name.remove_suffix(3);
  const size_t dash = name.find('-');
  if (dash == std::string_view::npos) return false;
  const auto a = std::from_chars(name.data(), name.data() + dash, seq);
  const auto b = std::from_chars(name.data() + dash + 1, name.data() + name.size(), samples);
  return a.ec == std::errc() && a.ptr == name.data() + dash && b.ec == std::errc() &&
         b.ptr == name.data() + name.size();
}

} // namespace

SegmentDir::SegmentDir(SegmentDir&& o) noexcept
    : dir_(std::move(o.dir_)), lock_fd_(std::exchange(o.lock_fd_, -1)), segments_(std::move(o.segments_)),
      next_seq_(o.next_seq_), bytes_(o.bytes_), samples_(o.samples_) {}

SegmentDir& SegmentDir::operator=(SegmentDir&& o) noexcept {
  if (this != &o) {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    dir_ = std::move(o.dir_);
    lock_fd_ = std::exchange(o.lock_fd_, -1);
    segments_ = std::move(o.segments_);
    next_seq_ = o.next_seq_;
    bytes_ = o.bytes_;
    samples_ = o.samples_;
  }
  return *this;
}

SegmentDir::~SegmentDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_); // releases the flock
}

SegmentDir SegmentDir::open_own(const std::string& dir) {
  make_dirs(dir);
  try {
    check_protected_directory(dir, "remote-write queue");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
  SegmentDir d;
  d.dir_ = dir;
  const std::string lock = dir + "/lock";
  d.lock_fd_ = ::open(lock.c_str(), O_CREAT | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (d.lock_fd_ < 0) fail("cannot open", lock);
  if (::flock(d.lock_fd_, LOCK_EX | LOCK_NB) != 0) fail("cannot lock", lock);
  d.scan();
  return d;
}

std::optional<SegmentDir> SegmentDir::open_adopted(const std::string& dir) {
  SegmentDir d;
  d.dir_ = dir;
  const std::string lock = dir + "/lock";
  d.lock_fd_ = ::open(lock.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (d.lock_fd_ < 0) return std::nullopt;
  if (::flock(d.lock_fd_, LOCK_EX | LOCK_NB) != 0) return std::nullopt; // its writer lives (or another adopted it)
  try {
    check_protected_directory(dir, "remote-write queue");
  } catch (const std::invalid_argument&) {
    return std::nullopt; // not a directory only we could have written: its files are not sent
  }
  d.scan();
  return d;
}

void SegmentDir::scan() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(".") && name.ends_with(".tmp")) { // a write cut short: never renamed, never complete
      fs::remove(e.path(), ec);
      continue;
    }
    Segment s;
    if (!parse_name(name, s.seq, s.samples) || !e.is_regular_file(ec) || e.is_symlink(ec)) continue;
    s.path = e.path().string();
    s.bytes = e.file_size(ec);
    if (ec || s.bytes > kMaxSegmentBytes) continue;
    segments_.push_back(std::move(s));
  }
  std::sort(segments_.begin(), segments_.end(), [](const Segment& a, const Segment& b) { return a.seq < b.seq; });
  for (const auto& s : segments_) {
    bytes_ += s.bytes;
    samples_ += s.samples;
  }
  next_seq_ = segments_.empty() ? 1 : segments_.back().seq + 1;
}

void SegmentDir::push(std::string_view body, uint64_t samples) {
  Segment s;
  s.seq = next_seq_;
  s.samples = samples;
  s.bytes = body.size();
  const std::string name = fmt::format("{:016}-{}.rw", s.seq, samples);
  s.path = dir_ + "/" + name;
  const std::string tmp = dir_ + "/." + name + ".tmp";
  const int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot create", tmp);
  size_t done = 0;
  while (done < body.size()) {
    const ssize_t n = ::write(fd, body.data() + done, body.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = err;
      fail("cannot write", tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), s.path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    errno = err;
    fail("cannot store", s.path);
  }
  ++next_seq_;
  bytes_ += s.bytes;
  samples_ += s.samples;
  segments_.push_back(std::move(s));
}

std::optional<std::string> SegmentDir::read_front() const {
  if (segments_.empty()) return std::nullopt;
  const Segment& s = segments_.front();
  const int fd = ::open(s.path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out(s.bytes, '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done != out.size()) return std::nullopt;
  return out;
}

void SegmentDir::pop() {
  if (segments_.empty()) return;
  const Segment& s = segments_.front();
  ::unlink(s.path.c_str());
  bytes_ -= std::min(bytes_, s.bytes);
  samples_ -= std::min(samples_, s.samples);
  segments_.pop_front();
}

void SegmentDir::remove_if_empty() {
  if (!segments_.empty()) return;
  std::error_code ec;
  fs::remove(dir_ + "/lock", ec);
  fs::remove(dir_, ec);
}

std::string remote_write_queue_dir(const std::string& base, const std::string& url) {
  // FNV-1a of the whole URL (two URLs never share a queue), after a readable part: the host and port.
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : url) {
    h ^= c;
    h *= 1099511628211ull;
  }
  std::string_view rest = url;
  if (const size_t at = rest.find("://"); at != std::string_view::npos) rest.remove_prefix(at + 3);
  rest = rest.substr(0, rest.find('/'));
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) rest.remove_prefix(at + 1); // no credentials
  std::string host;
  for (const char c : rest.substr(0, 64))
    host.push_back((std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_');
  return fmt::format("{}/{}-{:016x}", base, host.empty() ? "url" : host, h);
}

std::string default_remote_write_queue_base() {
  if (::geteuid() == 0) return "/var/lib/wattscope/remote-write";
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && x[0] == '/')
    return std::string(x) + "/wattscope/remote-write";
  if (const char* home = std::getenv("HOME"); home && home[0] == '/')
    return std::string(home) + "/.local/state/wattscope/remote-write";
  return fmt::format("/tmp/wattscope-{}/remote-write", ::geteuid());
}

std::vector<std::string> queue_owners(const std::string& root, std::string_view own) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name == own || name.starts_with(".") || !e.is_directory(ec) || e.is_symlink(ec)) continue;
    out.push_back(name);
  }
  // Names are "<start ms, 13 digits>-<pid>": their order is the order the writers began.
  std::sort(out.begin(), out.end());
  for (auto& n : out)
    n = root + "/" + n;
  return out;
}

} // namespace wattscope::remote_write
