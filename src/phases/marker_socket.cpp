#include "phases/marker_socket.hpp"

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

MarkerListener MarkerListener::in_private_dir(Handler on_marker) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp ? tmp : "/tmp";
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
      const ssize_t n = ::recv(sock_.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC);
      if (n < 0) break; // EAGAIN: drained
      const int64_t now = wall_now_ms();
      stats_->datagrams++;
      if (static_cast<size_t>(n) > buf.size()) {
        stats_->rejected++;
        if (logged_++ < 10) spdlog::warn("marker socket: a datagram of {} bytes ignored (limit {})", n, buf.size());
        continue;
      }
      handle_datagram(std::string_view(buf.data(), static_cast<size_t>(n)), now);
    }
    if (fds[1].revents & POLLIN) return;
  }
}

void MarkerListener::handle_datagram(std::string_view data, int64_t ts_ms) {
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    const std::string_view line = data.substr(0, nl);
    data = nl == std::string_view::npos ? std::string_view() : data.substr(nl + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      Marker m = parse_marker(line);
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

bool send_marker(const std::string& socket_path, std::string_view lines) noexcept {
  sockaddr_un addr{};
  if (!fill_address(socket_path, addr)) return false;
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return false;
  const ssize_t n = ::sendto(fd.get(), lines.data(), lines.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  return n == static_cast<ssize_t>(lines.size());
}

} // namespace wattscope
