// Remote-write's on-disk queue: every batch is a file, sent oldest first and deleted once a receiver took it, so a
// receiver's outage, a hung connection or the end of a short job loses nothing. Bounded: past the bound the oldest
// files go, and the samples they held are counted and said.
//
// Layout under the queue root (one per URL: remote_write_queue_dir):
//   <root>/<owner>/lock                 flock()ed by the process that writes <owner>/ while it lives
//   <root>/<owner>/<seq>-<samples>.rw   a snappy-compressed WriteRequest, ready to POST; seq orders them
// A directory whose lock nobody holds was left by a process that ended before its receiver took everything: the next
// writer of the same URL adopts it and sends its batches before its own (a series' samples stay in time order).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wattscope::remote_write {

struct Segment {
  std::string path;
  uint64_t seq = 0, samples = 0, bytes = 0;
};

// One owner's directory of segments.
class SegmentDir {
public:
  // Opens (creating, 0700) `dir` and lists its segments; `lock`: take its lock (own directory) or try to (adopting:
  // nullopt from open_adopted when another process holds it). Throws std::runtime_error naming the path.
  static SegmentDir open_own(const std::string& dir);
  static std::optional<SegmentDir> open_adopted(const std::string& dir);
  SegmentDir(SegmentDir&&) noexcept;
  SegmentDir& operator=(SegmentDir&&) noexcept;
  SegmentDir(const SegmentDir&) = delete;
  ~SegmentDir();

  // A new segment after every other; throws std::runtime_error on a write error (the disk full).
  void push(std::string_view body, uint64_t samples);
  const Segment* front() const { return segments_.empty() ? nullptr : &segments_.front(); }
  std::optional<std::string> read_front() const; // the front segment's body; nullopt when it cannot be read
  void pop();                                    // deletes the front segment
  bool empty() const { return segments_.empty(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t samples() const { return samples_; }
  size_t size() const { return segments_.size(); }
  const std::string& dir() const { return dir_; }
  // Removes the directory once empty (an adopted one, fully sent).
  void remove_if_empty();

private:
  SegmentDir() = default;
  void scan();
  std::string dir_;
  int lock_fd_ = -1;
  std::deque<Segment> segments_;
  uint64_t next_seq_ = 1, bytes_ = 0, samples_ = 0;
};

// The queue root for `url` under `base`: <base>/<a name from the URL's host and a hash of the whole URL>.
std::string remote_write_queue_dir(const std::string& base, const std::string& url);
// The default base: $XDG_STATE_HOME/wattscope/remote-write (else ~/.local/state/...), /var/lib/wattscope/remote-write
// for root.
std::string default_remote_write_queue_base();
// The owner directories under `root` other than `own`, oldest first (their names start with the time they began).
std::vector<std::string> queue_owners(const std::string& root, std::string_view own);

} // namespace wattscope::remote_write
