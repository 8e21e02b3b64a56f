// How wattscope writes a file it is told to write (a report, a CSV runs file): one policy, here and nowhere else.
//
//  - A regular file (or a name that does not exist yet) is written to an unpredictable temporary in the target's
//    directory (created O_EXCL|O_NOFOLLOW, so nothing planted there is followed or reused), fsync'ed, and renamed
//    over the target on commit(). Readers see the old file or the new one, never half of one. A file replaced keeps
//    its permission bits (and, when we may, its owner); a new one gets 0666 less the umask, like `>` in a shell.
//  - "-" is standard output; a character device (/dev/null, a tty) or a FIFO is opened and written in place: it is
//    never renamed over, so /dev/null stays /dev/null.
//  - A symbolic link is refused with an error naming it and where it points, unless follow_symlinks is set; then the
//    link's target is written by these same rules and the link stays a link.
//  - Anything else (a directory, a socket, a block device) is refused.
//
// Errors are std::runtime_error naming the path and the reason. Destroying an OutputFile that was not committed
// removes its temporary and leaves the target as it was.
#pragma once

#include <string>
#include <string_view>

#include "core/fd.hpp"

namespace wattscope {

struct OutputOptions {
  bool follow_symlinks = false;
};

class OutputFile {
public:
  enum class Kind {
    Replace, // a regular file, written via a temporary and renamed into place
    Stream,  // "-", a character device or a FIFO, written in place
  };

  explicit OutputFile(const std::string& path, const OutputOptions& opts = {});
  ~OutputFile();
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(std::string_view bytes);
  // Makes what was written the target: fsync and rename for a regular file; a stream is closed. Throws on failure
  // (the target is then unchanged, for a regular file).
  void commit();

  Kind kind() const { return kind_; }
  const std::string& path() const { return path_; } // as given
  // The file written for a regular target, after links were followed (for messages).
  const std::string& target() const { return target_; }

private:
  void open_path(const std::string& path, const OutputOptions& opts, int depth);
  void discard() noexcept;

  std::string path_;
  std::string target_;
  Kind kind_ = Kind::Replace;
  UniqueFd dir_;      // the target's directory (Replace)
  std::string base_;  // the target's name in dir_
  std::string tmp_;   // the temporary's name in dir_, until committed or discarded
  UniqueFd fd_;       // what write() writes to
  bool done_ = false; // committed
};

// The whole of `bytes` to `path` by the policy above, committed.
void write_output(const std::string& path, std::string_view bytes, const OutputOptions& opts = {});

} // namespace wattscope
