#include "phases/marker_socket.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/text.hpp"
#include "core/thread_name.hpp"
#include "core/time_util.hpp"

namespace wattscope {

namespace {
bool fill_address(const std::string& path, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return true;
}

UniqueFd bind_socket(const std::string& path) {
  sockaddr_un addr{};
  if (!fill_address(path, addr))
    throw std::runtime_error(fmt::format("marker socket path '{}' is {} bytes; Unix sockets allow at most {}: choose "
                                         "a shorter path (or a shorter TMPDIR)",
                                         excerpt(path, 120), path.size(), sizeof addr.sun_path - 1));
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) throw std::runtime_error(fmt::format("marker socket: {}", std::strerror(errno)));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    throw std::runtime_error(fmt::format("cannot listen for markers at '{}': {}", path, std::strerror(e)));
  }
  // Only this user may send: the socket file's mode is what the kernel checks on connect/sendto.
  if (::chmod(path.c_str(), 0600) != 0) {
    const int e = errno;
    ::unlink(path.c_str());
    throw std::runtime_error(fmt::format("marker socket '{}': chmod: {}", path, std::strerror(e)));
  }
  return fd;
}
} // namespace

MarkerListener::MarkerListener(std::string path, std::string private_dir, UniqueFd sock, Handler on_marker)
    : path_(std::move(path)), private_dir_(std::move(private_dir)), sock_(std::move(sock)),
      on_marker_(std::move(on_marker)), stats_(std::make_unique<MarkerStats>()) {
  stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_fd_) throw std::runtime_error(fmt::format("marker socket: eventfd: {}", std::strerror(errno)));
}

MarkerListener::MarkerListener(MarkerListener&& o) noexcept
    : path_(std::move(o.path_)), private_dir_(std::move(o.private_dir_)), sock_(std::move(o.sock_)),
      stop_fd_(std::move(o.stop_fd_)), on_marker_(std::move(o.on_marker_)), stats_(std::move(o.stats_)),
      thread_(std::move(o.thread_)), logged_(o.logged_) {
  o.path_.clear();
  o.private_dir_.clear();
}

int remove_stale_marker_dirs(const std::string& base) noexcept {
  try {
    UniqueFd dfd(::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dfd) return 0;
    DIR* d = ::fdopendir(dfd.get());
    if (!d) return 0;
    dfd.release();
    int removed = 0, looked = 0;
    const time_t now = ::time(nullptr);
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name.size() != 16 || !name.starts_with("wattscope-")) continue;
      const std::string_view suffix = name.substr(10);
      if (suffix.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") !=
          std::string_view::npos)
        continue;
      if (++looked > 1000) break; // a bounded start-up cost, whatever /tmp holds
      const std::string dir = base + "/" + std::string(name);
      struct stat st {};
      if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
          (st.st_mode & 07777) != 0700)
        continue;
      // Only a directory that holds nothing but the socket is ours to clean: read it first (a few entries at most).
      bool other = false;
      if (DIR* inner = ::opendir(dir.c_str())) {
        while (const dirent* f = ::readdir(inner)) {
          const std::string_view n = f->d_name;
          if (n != "." && n != ".." && n != "markers.sock") other = true;
        }
        ::closedir(inner);
      } else {
        continue;
      }
      if (other) continue;
      const std::string sock = dir + "/markers.sock";
      struct stat ss {};
      if (::lstat(sock.c_str(), &ss) == 0) {
        if (!S_ISSOCK(ss.st_mode) || ss.st_uid != ::geteuid()) continue;
        // A live run's socket takes a connect; a dead run's refuses it.
        sockaddr_un addr{};
        UniqueFd probe(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        if (!probe || !fill_address(sock, addr)) continue;
        if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 || errno != ECONNREFUSED)
          continue;
        ::unlink(sock.c_str());
      } else if (now - st.st_mtime < 60) {
        continue; // empty and new: a run between mkdtemp and bind
      }
      // rmdir removes only an empty directory: one that holds anything else stays.
      if (::rmdir(dir.c_str()) == 0) ++removed;
    }
    ::closedir(d);
    return removed;
  } catch (...) {
    return 0;
  }
}

MarkerListener MarkerListener::in_private_dir(Handler on_marker) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp ? tmp : "/tmp";
  if (const int n = remove_stale_marker_dirs(base); n > 0)
    spdlog::debug("removed {} marker director{} left by runs that were killed", n, n == 1 ? "y" : "ies");
  std::string templ = base + "/wattscope-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) // mode 0700
    throw std::runtime_error(fmt::format("cannot make a private directory for the marker socket under '{}': {}", base,
                                         std::strerror(errno)));
  std::string dir(buf.data());
  std::string path = dir + "/markers.sock";
  try {
    UniqueFd fd = bind_socket(path);
    return MarkerListener(path, dir, std::move(fd), std::move(on_marker));
  } catch (...) {
    ::rmdir(dir.c_str());
    throw;
  }
}

MarkerListener MarkerListener::at_path(const std::string& path, Handler on_marker) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      throw std::runtime_error(fmt::format(
          "'{}' exists and is not a socket; wattscope will not replace it: choose another --socket path", path));
    // A socket file with a live listener answers; a stale one (a wattscope that was killed) refuses the connection.
    sockaddr_un addr{};
    UniqueFd probe(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (probe && fill_address(path, addr) &&
        ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0)
      throw std::runtime_error(fmt::format("another wattscope already listens for markers at '{}'", path));
    ::unlink(path.c_str());
  }
  return MarkerListener(path, "", bind_socket(path), std::move(on_marker));
}

std::string default_marker_socket_path() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  struct stat st {};
  // The runtime directory counts where it is this user's own (logind makes it 0700); else /tmp, per user.
  if (xdg && *xdg == '/' && ::stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid())
    return std::string(xdg) + "/wattscope/markers.sock";
  return fmt::format("/tmp/wattscope-user-{}/markers.sock", ::geteuid());
}

MarkerListener MarkerListener::at_default_path(Handler on_marker) {
  const std::string path = default_marker_socket_path();
  const std::string dir = path.substr(0, path.rfind('/'));
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(
        fmt::format("cannot make the marker socket's directory '{}': {}", dir, std::strerror(errno)));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    throw std::runtime_error(fmt::format("'{}' is not a directory of this user's alone (mode 0700): wattscope will not "
                                         "listen there; remove it, or give --socket PATH",
                                         dir));
  return at_path(path, std::move(on_marker));
}

MarkerListener::~MarkerListener() {
  stop();
  if (!path_.empty()) ::unlink(path_.c_str());
  if (!private_dir_.empty()) ::rmdir(private_dir_.c_str());
}

void MarkerListener::start() {
  if (!thread_.joinable() && sock_)
    thread_ = std::thread([this] {
      name_this_thread("ws-markers");
      loop();
    });
}

void MarkerListener::stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  (void)!::write(stop_fd_.get(), &one, sizeof one);
  thread_.join();
}

void MarkerListener::loop() {
  std::vector<char> buf(kMaxMarkerDatagramBytes);
  pollfd fds[2] = {{sock_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
  for (;;) {
    // Blocks until a marker arrives or stop() is called: no timeout, no wake-ups without work.
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::warn("marker socket: poll: {}; markers are no longer received", std::strerror(errno));
      return;
    }
    // Whatever arrived before the stop is still handled, so an `end` sent just before the child exits counts.
    for (;;) {
      sockaddr_un from{};
      socklen_t from_len = sizeof from;
      const ssize_t n = ::recvfrom(sock_.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC,
                                   reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n < 0) break; // EAGAIN: drained
      const int64_t now = wall_now_ms();
      stats_->datagrams++;
      if (static_cast<size_t>(n) > buf.size()) {
        stats_->rejected++;
        if (logged_++ < 10) spdlog::warn("marker socket: a datagram of {} bytes ignored (limit {})", n, buf.size());
        continue;
      }
      // The sender's address, for a marker that asks for a reply: named only where its socket is bound (the Python
      // helper's is autobound in the abstract namespace); an unbound sender cannot be answered.
      std::string_view reply_to;
      if (from_len > sizeof(sa_family_t) && from_len <= sizeof from && from.sun_family == AF_UNIX)
        reply_to = std::string_view(reinterpret_cast<const char*>(&from), from_len);
      handle_datagram(std::string_view(buf.data(), static_cast<size_t>(n)), now, reply_to);
    }
    if (fds[1].revents & POLLIN) return;
  }
}

void MarkerListener::handle_datagram(std::string_view data, int64_t ts_ms, std::string_view reply_to) {
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    const std::string_view line = data.substr(0, nl);
    data = nl == std::string_view::npos ? std::string_view() : data.substr(nl + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      Marker m = parse_marker(line);
      if (m.reply) {
        if (reply_to.empty()) { // nowhere to answer: the window is still a phase
          m.reply = false;
        } else {
          m.reply_to = reply_to;
        }
      }
      stats_->accepted++;
      on_marker_(std::move(m), ts_ms);
    } catch (const std::exception& e) {
      const int64_t n = ++stats_->rejected;
      // The first few are said in full; then once at every power of two, so a flood cannot flood the log.
      if (n <= 10 || (n & (n - 1)) == 0)
        spdlog::warn("marker ignored ({} so far): {}: {}", n, e.what(), excerpt(line, 80));
    }
  }
}

bool MarkerListener::reply(const std::string& to, std::string_view message) const noexcept {
  if (!sock_ || to.size() <= sizeof(sa_family_t) || to.size() > sizeof(sockaddr_un)) return false;
  sockaddr_un addr{};
  std::memcpy(&addr, to.data(), to.size());
  if (addr.sun_family != AF_UNIX) return false;
  // Never waits: a sender that is gone (or whose queue is full) loses its answer, and the run goes on.
  return ::sendto(sock_.get(), message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                  reinterpret_cast<const sockaddr*>(&addr),
                  static_cast<socklen_t>(to.size())) == static_cast<ssize_t>(message.size());
}

bool send_marker(const std::string& socket_path, std::string_view lines) noexcept {
  sockaddr_un addr{};
  if (!fill_address(socket_path, addr)) {
    errno = ENAMETOOLONG;
    return false;
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return false;
  const ssize_t n = ::sendto(fd.get(), lines.data(), lines.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int err = n < 0 ? errno : EMSGSIZE; // a short datagram send: too large for the socket
  fd.reset();
  errno = err; // the reason stays for the caller (close may not change it)
  return n == static_cast<ssize_t>(lines.size());
}

std::string marker_send_failure(const std::string& socket_path, int err) {
  const std::string at = excerpt(socket_path, 200);
  switch (err) {
  case ENOENT:
  case ECONNREFUSED:
  case ENOTSOCK:
    return fmt::format("no wattscope listening at {}", at);
  case EAGAIN:
    return fmt::format("the queue of the wattscope listening at {} is full", at);
  case EACCES:
  case EPERM:
    return fmt::format("permission denied at {}: the socket (or a directory on its way) is another user's; a run's "
                       "marker socket takes markers from its own user only",
                       at);
  case ENAMETOOLONG:
    return fmt::format("the socket path {} is too long", at);
  default:
    return fmt::format("cannot send to {}: {}", at, std::strerror(err));
  }
}

} // namespace wattscope
