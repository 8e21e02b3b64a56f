#include "sources/dl_open.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include <spdlog/spdlog.h>

#include "sources/sysfs_util.hpp"

namespace wattscope {

DlOpened dl_open_first(const std::string& explicit_path, const std::vector<std::string>& defaults) {
  DlOpened out;
  const std::vector<std::string> candidates =
      explicit_path.empty() ? defaults : std::vector<std::string>{explicit_path};
  for (const auto& c : candidates) {
    out.handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (out.handle) {
      out.path = c;
      return out;
    }
    const char* e = ::dlerror();
    if (!out.errors.empty()) out.errors += "; ";
    out.errors += e ? e : c;
  }
  return out;
}

std::optional<bool> pci_bus_has_gpu(const std::string& sysfs_root, uint16_t vendor, bool accelerators) {
  const std::string dir = sysfs_root + "/bus/pci/devices";
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return std::nullopt;
  size_t seen = 0;
  while (const dirent* e = ::readdir(d.get())) {
    if (e->d_name[0] == '.') continue;
    if (++seen > kMaxPciDevices) break;
    const std::string base = dir + "/" + e->d_name;
    // "0x1002" and "0x030000": hexadecimal, as the kernel writes them.
    const std::string v = sysfs::read_line(base + "/vendor");
    const std::string c = sysfs::read_line(base + "/class");
    char* end = nullptr;
    const unsigned long vid = std::strtoul(v.c_str(), &end, 16);
    if (v.empty() || *end != '\0' || vid != vendor) continue;
    const unsigned long cls = std::strtoul(c.c_str(), &end, 16);
    if (c.empty() || *end != '\0') continue;
    const unsigned long base_class = (cls >> 16) & 0xff;
    if (base_class == 0x03 || (accelerators && base_class == 0x12)) return true;
  }
  return false;
}

namespace {
constexpr size_t kCaughtMax = 64 * 1024;
}

StderrToDebugLog::StderrToDebugLog(std::string who) : who_(std::move(who)) {
  std::fflush(stderr);
  spdlog::default_logger_raw()->flush();
  capture_ = ::memfd_create("wattscope-vendor-stderr", MFD_CLOEXEC);
  if (capture_ < 0) {
    char name[] = "/tmp/wattscope-stderr-XXXXXX";
    capture_ = ::mkostemp(name, O_CLOEXEC);
    if (capture_ >= 0) ::unlink(name);
  }
  if (capture_ < 0) return; // nowhere to put it: the library talks on stderr as before
  saved_ = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
  if (saved_ < 0 || ::dup2(capture_, 2) < 0) {
    if (saved_ >= 0) ::close(saved_);
    ::close(capture_);
    saved_ = capture_ = -1;
  }
}

std::vector<std::string> StderrToDebugLog::finish() {
  if (saved_ < 0) return lines_;
  std::fflush(stderr);
  ::dup2(saved_, 2);
  ::close(saved_);
  saved_ = -1;
  std::string text(kCaughtMax, '\0');
  const ssize_t n = ::pread(capture_, text.data(), text.size(), 0);
  ::close(capture_);
  capture_ = -1;
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(at, nl - at);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
      line.pop_back();
    for (char& ch : line) // a library's bytes reach a terminal through the log: no control characters
      if ((static_cast<unsigned char>(ch) < 0x20 && ch != '\t') || ch == 0x7f) ch = '?';
    if (!line.empty()) lines_.push_back(std::move(line));
    at = nl + 1;
  }
  for (const auto& l : lines_)
    spdlog::debug("{} said on stderr: {}", who_, l);
  return lines_;
}

StderrToDebugLog::~StderrToDebugLog() {
  try {
    finish();
  } catch (...) {
  }
}

} // namespace wattscope
