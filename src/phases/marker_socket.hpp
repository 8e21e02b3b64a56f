// The marker socket: a Unix datagram socket a run listens on (its path in the child's WATTSCOPE_SOCKET) and the
// client side that `wattscope mark` (and, in Python, python/wattscope) use to send to it.
//
// Datagrams, not a stream: a client needs no connection state, a send never waits for wattscope (MSG_DONTWAIT: a full
// queue or a wattscope that is gone drops the marker), and one datagram is one whole message, so a client that dies
// mid-write can not leave half a line that corrupts the next one.
//
// The listening side is one thread blocked in poll(2) on the socket and an eventfd that stop() signals: it wakes only
// when a marker arrives or the run ends, never on a timer.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "core/fd.hpp"
#include "phases/marker.hpp"

namespace wattscope {

inline constexpr const char* kMarkerSocketEnv = "WATTSCOPE_SOCKET";
// One datagram: several marker lines may share one, each at most kMaxMarkerLineBytes. Larger ones are refused whole.
inline constexpr size_t kMaxMarkerDatagramBytes = 65536;

struct MarkerStats {
  std::atomic<int64_t> datagrams{0};
  std::atomic<int64_t> accepted{0}; // markers handed on
  std::atomic<int64_t> rejected{0}; // lines that were not markers (bad JSON, unknown kind, bad name, too long)
};

class MarkerListener {
public:
  // Called on the listener thread for every valid marker, with the wall-clock time it arrived (UTC ms). Must not
  // block for long: it delays the next marker only, never sampling.
  using Handler = std::function<void(Marker, int64_t ts_ms)>;

  // A socket in a new private directory (mode 0700, under $TMPDIR or /tmp) named markers.sock, for `run`: only this
  // user can reach it. The directory is removed when the listener is.
  static MarkerListener in_private_dir(Handler on_marker);
  // A socket at `path` (record/serve --socket). An existing socket there that nobody listens on (a crashed
  // wattscope's) is replaced; anything else there is refused. Throws std::runtime_error naming the problem.
  static MarkerListener at_path(const std::string& path, Handler on_marker);
  // At this user's default socket (default_marker_socket_path()), making its private directory where it is missing;
  // a directory there that is not this user's alone is refused (any other user could take the socket's place).
  static MarkerListener at_default_path(Handler on_marker);

  MarkerListener(MarkerListener&&) noexcept;
  MarkerListener& operator=(MarkerListener&&) = delete;
  MarkerListener(const MarkerListener&) = delete;
  ~MarkerListener(); // stops, removes the socket (and the private directory)

  void start();
  void stop(); // returns once the thread has handled what had arrived and ended
  const std::string& path() const { return path_; }
  // Thread-safe: a datagram back to a marker's sender (Marker::reply_to), from this socket, never blocking. False when
  // it could not be sent (the sender is gone, its queue is full).
  bool reply(const std::string& to, std::string_view message) const noexcept;
  const MarkerStats& stats() const { return *stats_; }

private:
  MarkerListener(std::string path, std::string private_dir, UniqueFd sock, Handler on_marker);
  void loop();
  void handle_datagram(std::string_view data, int64_t ts_ms, std::string_view reply_to);

  std::string path_;
  std::string private_dir_;
  UniqueFd sock_;
  UniqueFd stop_fd_;
  Handler on_marker_;
  std::unique_ptr<MarkerStats> stats_;
  std::thread thread_;
  int64_t logged_ = 0; // rejected lines logged so far (rate limit)
};

// Removes what runs killed with -9 left under `base` ($TMPDIR or /tmp): directories named wattscope-XXXXXX (mkdtemp's
// six characters) owned by this user, holding nothing but a markers.sock that nobody listens on any more (or nothing
// at all, for at least a minute, so a run between mkdtemp and bind keeps its own). Anything else is left alone.
// Returns how many were removed; never throws. MarkerListener::in_private_dir calls it first.
int remove_stale_marker_dirs(const std::string& base) noexcept;

// This user's default marker socket, where a `wattscope record --socket` (or `serve --socket`) started without a path
// listens and where the Python helper and `wattscope mark` look when WATTSCOPE_SOCKET is not set:
// $XDG_RUNTIME_DIR/wattscope/markers.sock where the session has a runtime directory, else
// /tmp/wattscope-user-UID/markers.sock ($TMPDIR is not used: the helper must find the same path from any shell).
std::string default_marker_socket_path();

// Sends one encoded marker (or several lines) to `socket_path` without ever blocking: false when it was dropped
// (no socket, nobody listening, its queue full). Never throws.
bool send_marker(const std::string& socket_path, std::string_view lines) noexcept;
// Why the marker was not delivered, from the errno that send_marker leaves when it returns false: nobody listening
// (ENOENT, ECONNREFUSED), a full queue (EAGAIN), no permission (EACCES, EPERM: another user's run, or a directory on
// the way this user cannot enter), a path too long, or the system's words. For `mark --strict`.
std::string marker_send_failure(const std::string& socket_path, int err);

} // namespace wattscope
