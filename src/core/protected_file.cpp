#include "core/protected_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "core/fd.hpp"

namespace wattscope {

namespace {

// ssh's rule (auth.c secure_filename): the file and every directory above it are owned by root or by us, and no one
// else may write to them. A sticky directory (/tmp) is allowed, since no one else may rename or delete our file in it;
// a file someone else created there fails the owner check.
std::string who_else_may_change(const struct stat& st, bool directory) {
  const uid_t me = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != me)
    return fmt::format("is owned by uid {}, neither root nor this user", st.st_uid);
  const bool sticky = directory && (st.st_mode & S_ISVTX);
  if ((st.st_mode & S_IWOTH) && !sticky) return fmt::format("is world-writable (mode {:04o})", st.st_mode & 07777);
  if ((st.st_mode & S_IWGRP) && !sticky) return fmt::format("is group-writable (mode {:04o})", st.st_mode & 07777);
  return "";
}

// Every directory above `real` (an absolute, resolved path), under who_else_may_change's rule.
void check_parents(const std::filesystem::path& real, std::string_view what, const std::string& path,
                   std::string_view replaced) {
  for (auto dir = real.parent_path();; dir = dir.parent_path()) {
    struct stat ds {};
    if (::stat(dir.c_str(), &ds) != 0)
      throw std::invalid_argument(
          fmt::format("{} '{}': cannot stat directory '{}': {}", what, path, dir.string(), std::strerror(errno)));
    if (auto why = who_else_may_change(ds, true); !why.empty())
      throw std::invalid_argument(fmt::format("{} '{}': its directory '{}' {}, so someone else could replace {}", what,
                                              path, dir.string(), why, replaced));
    if (dir == dir.root_path() || dir.parent_path() == dir) break;
  }
}

// Opens `path` and checks the file and its directories; returns the open descriptor and its stat.
UniqueFd open_checked(const std::string& path, std::string_view what, struct stat& st) {
  auto bad = [&](std::string_view why) { return std::invalid_argument(fmt::format("{} '{}': {}", what, path, why)); };
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below as not a regular file.
  UniqueFd f(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!f) throw bad(fmt::format("cannot open it: {}", std::strerror(errno)));
  if (::fstat(f.get(), &st) != 0) throw bad(fmt::format("cannot stat it: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw bad("not a regular file");
  if (auto why = who_else_may_change(st, false); !why.empty())
    throw bad(fmt::format("it {}, so someone else could change it; chmod go-w it or move it", why));
  std::error_code ec;
  const auto real = std::filesystem::canonical(path, ec);
  if (ec) throw bad(fmt::format("cannot resolve its directory: {}", ec.message()));
  check_parents(real, what, path, "the file");
  return f;
}

} // namespace

std::string read_protected_file(const std::string& path, std::string_view what, size_t max_bytes) {
  auto bad = [&](std::string_view why) { return std::invalid_argument(fmt::format("{} '{}': {}", what, path, why)); };
  struct stat st {};
  UniqueFd f = open_checked(path, what, st);
  if (st.st_size > static_cast<off_t>(max_bytes))
    throw bad(fmt::format("it is {} bytes; a {} holds at most {} bytes", st.st_size, what, max_bytes));
  // Read at most one byte more than allowed: a file that grew since fstat is refused, never read whole.
  std::string buf(max_bytes + 1, '\0');
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n = ::read(f.get(), buf.data() + got, buf.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw bad(fmt::format("cannot read it: {}", std::strerror(errno)));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) throw bad(fmt::format("it is larger than {} bytes", max_bytes));
  buf.resize(got);
  return buf;
}

void check_protected_file(const std::string& path, std::string_view what) {
  struct stat st {};
  open_checked(path, what, st);
}

void check_protected_directory(const std::string& path, std::string_view what) {
  auto bad = [&](std::string_view why) { return std::invalid_argument(fmt::format("{} '{}': {}", what, path, why)); };
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) throw bad(fmt::format("cannot stat it: {}", std::strerror(errno)));
  if (S_ISLNK(st.st_mode)) throw bad("a symbolic link; give the directory itself");
  if (!S_ISDIR(st.st_mode)) throw bad("not a directory");
  if (st.st_uid != ::geteuid())
    throw bad(fmt::format("it belongs to uid {}, not to this user (uid {}); chown it or give another", st.st_uid,
                          ::geteuid()));
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    throw bad(fmt::format("it is {}-writable (mode {:04o}), so another user could plant files in it; chmod 0700 it "
                          "or give a directory only this user can write",
                          (st.st_mode & S_IWOTH) ? "world" : "group", st.st_mode & 07777));
  std::error_code ec;
  const auto real = std::filesystem::canonical(path, ec);
  if (ec) throw bad(fmt::format("cannot resolve it: {}", ec.message()));
  check_parents(real, what, path, "it");
}

std::string default_config_path(std::string_view name) {
  std::vector<std::string> candidates;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x)
    candidates.push_back(std::string(x) + "/wattscope/" + std::string(name));
  else if (const char* h = std::getenv("HOME"); h && *h)
    candidates.push_back(std::string(h) + "/.config/wattscope/" + std::string(name));
  candidates.push_back("/etc/wattscope/" + std::string(name));
  for (const auto& c : candidates) {
    struct stat st {};
    if (::stat(c.c_str(), &st) == 0) return c;
  }
  return {};
}

} // namespace wattscope
