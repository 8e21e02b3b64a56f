#include "server/token.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

namespace wattscope {

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// ssh's rule for authorized_keys (StrictModes, auth.c secure_filename): the file and every directory above it are
// owned by root or by us, and no one else may write to them. A sticky directory (/tmp) is allowed, since no one else
// may rename or delete our file in it; a file someone else created there fails the owner check.
std::string who_else_may_change(const struct stat& st, bool directory) {
  const uid_t me = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != me)
    return fmt::format("is owned by uid {}, neither root nor this user", st.st_uid);
  const bool sticky = directory && (st.st_mode & S_ISVTX);
  if ((st.st_mode & S_IWOTH) && !sticky) return fmt::format("is world-writable (mode {:04o})", st.st_mode & 07777);
  if ((st.st_mode & S_IWGRP) && !sticky) return fmt::format("is group-writable (mode {:04o})", st.st_mode & 07777);
  return "";
}

} // namespace

std::string parse_token(std::string_view s) {
  if (s.ends_with("\r\n"))
    s.remove_suffix(2);
  else if (s.ends_with('\n'))
    s.remove_suffix(1);
  if (s.empty())
    throw std::invalid_argument("it is empty; put one line of at least 16 visible characters in it, e.g. with "
                                "`openssl rand -hex 32 > FILE`");
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') throw std::invalid_argument("it holds more than one line; a token file holds the token alone");
    if (c < 0x21 || c > 0x7e)
      throw std::invalid_argument(fmt::format("byte 0x{:02x} at position {} is not a visible ASCII character; a token "
                                              "is letters, digits and punctuation, without spaces",
                                              c, i));
  }
  if (s.size() < kMinTokenChars)
    throw std::invalid_argument(
        fmt::format("the token is {} characters long; use at least {}", s.size(), kMinTokenChars));
  return std::string(s);
}

std::string read_token_file(const std::string& path) {
  auto bad = [&](std::string_view why) { return std::invalid_argument(fmt::format("token file '{}': {}", path, why)); };
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below as not a regular file.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)};
  if (f.fd < 0) throw bad(fmt::format("cannot open it: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw bad(fmt::format("cannot stat it: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw bad("not a regular file");
  if (auto why = who_else_may_change(st, false); !why.empty())
    throw bad(fmt::format("it {}, so someone else could change the token; chmod go-w it or move it", why));
  std::error_code ec;
  const auto real = std::filesystem::canonical(path, ec);
  if (ec) throw bad(fmt::format("cannot resolve its directory: {}", ec.message()));
  for (auto dir = real.parent_path();; dir = dir.parent_path()) {
    struct stat ds {};
    if (::stat(dir.c_str(), &ds) != 0)
      throw bad(fmt::format("cannot stat directory '{}': {}", dir.string(), std::strerror(errno)));
    if (auto why = who_else_may_change(ds, true); !why.empty())
      throw bad(fmt::format("its directory '{}' {}, so someone else could replace the token file", dir.string(), why));
    if (dir == dir.root_path() || dir.parent_path() == dir) break;
  }
  if (st.st_size > static_cast<off_t>(kMaxTokenFileBytes))
    throw bad(
        fmt::format("it is {} bytes; a token file holds one line of at most {} bytes", st.st_size, kMaxTokenFileBytes));
  // Read at most one byte more than allowed: a file that grew since fstat is refused, never read whole.
  std::string buf(kMaxTokenFileBytes + 1, '\0');
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n = ::read(f.fd, buf.data() + got, buf.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw bad(fmt::format("cannot read it: {}", std::strerror(errno)));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > kMaxTokenFileBytes)
    throw bad(fmt::format("it is larger than {} bytes; a token file holds one line", kMaxTokenFileBytes));
  buf.resize(got);
  try {
    return parse_token(buf);
  } catch (const std::invalid_argument& e) {
    throw bad(e.what());
  }
}

} // namespace wattscope
