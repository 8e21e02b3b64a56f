#include "sources/nvml/gpu_grab.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "sources/nvml/gpu_selection.hpp"
#include "sources/nvml/nvml_loader.hpp"

namespace wattscope {

using namespace nvml;

namespace {

std::string cstr(const char* buf, size_t n) {
  return std::string(buf, strnlen(buf, n));
}

// A lock file is named by the GPU's UUID: only characters a UUID has, so a name from the driver never leaves the dir.
bool safe_uuid(const std::string& u) {
  if (u.empty() || u.size() > 96) return false;
  for (char c : u)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-')) return false;
  return true;
}

// Makes `dir` and its missing parents; refuses one that is a symlink or not ours (or root's).
void make_lock_dir(const std::string& dir) {
  const mode_t mode = ::geteuid() == 0 ? 0755 : 0700;
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    const std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), mode) != 0 && errno != EEXIST)
      throw std::runtime_error(fmt::format("cannot make the GPU lock directory {}: {} (set WATTSCOPE_LOCK_DIR to a "
                                           "directory you can write)",
                                           part, std::strerror(errno)));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error(fmt::format("the GPU lock directory {} is not a directory", dir));
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    throw std::runtime_error(fmt::format("the GPU lock directory {} belongs to another user (uid {}); set "
                                         "WATTSCOPE_LOCK_DIR to a directory of your own",
                                         dir, st.st_uid));
}

// The pid a lock file says holds it ("" when unreadable): for the message only.
std::string holder(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return {};
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  for (char c : s)
    if (c < '0' || c > '9') return {};
  return s;
}

} // namespace

std::optional<int> parse_free_gpus(const std::string& flag) {
  if (!flag.starts_with("free")) return std::nullopt;
  const std::string n = flag.size() > 5 && flag[4] == ':' ? flag.substr(5) : "";
  int v = 0;
  auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
  if (n.empty() || ec != std::errc() || end != n.data() + n.size() || v < 1 || v > 64)
    throw std::invalid_argument(
        fmt::format("--gpus '{}': expected free:N, N the number of free GPUs to take (1 to 64), e.g. free:2", flag));
  return v;
}

double parse_mem_pct(const std::string& value) {
  std::string v = value;
  if (!v.empty() && v.back() == '%') v.pop_back();
  double pct = -1;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), pct);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !(pct >= 0 && pct <= 100))
    throw std::invalid_argument(
        fmt::format("--free-mem-max '{}': expected a share of the GPU's memory from 0 to 100 %, e.g. 5%", value));
  return pct;
}

std::vector<GpuState> probe_gpus(const std::string& library_path) {
  std::string why;
  auto lib = Library::load(library_path, why);
  if (!lib) throw std::runtime_error("--gpus free: cannot read the GPUs: " + why);
  Return rc = lib->init();
  if (rc != kSuccess) throw std::runtime_error("--gpus free: nvmlInit failed with " + error_name(rc));
  struct Shutdown {
    Library& l;
    ~Shutdown() { l.shutdown(); }
  } shutdown{*lib};
  unsigned int count = 0;
  if ((rc = lib->device_count(&count)) != kSuccess)
    throw std::runtime_error("--gpus free: nvmlDeviceGetCount failed with " + error_name(rc));
  std::vector<GpuState> out;
  char buf[kStringBuffer] = {};
  for (unsigned int i = 0; i < count; ++i) {
    Device d{};
    if (lib->device_by_index(i, &d) != kSuccess) continue;
    GpuState g;
    g.index = static_cast<int>(i);
    if (lib->device_uuid && lib->device_uuid(d, buf, sizeof buf) == kSuccess) g.uuid = cstr(buf, sizeof buf);
    if (lib->device_name && lib->device_name(d, buf, sizeof buf) == kSuccess) g.name = cstr(buf, sizeof buf);
    MemoryV2 m2{};
    m2.version = kMemoryV2Version;
    Memory m1{};
    if (lib->device_memory_v2 && lib->device_memory_v2(d, &m2) == kSuccess) {
      g.mem_used_bytes = static_cast<int64_t>(m2.used);
      g.mem_total_bytes = static_cast<int64_t>(m2.total);
    } else if (lib->device_memory && lib->device_memory(d, &m1) == kSuccess) {
      g.mem_used_bytes = static_cast<int64_t>(m1.used);
      g.mem_total_bytes = static_cast<int64_t>(m1.total);
    }
    // How many compute processes: asked with no buffer, NVML answers SUCCESS for none, INSUFFICIENT_SIZE (with the
    // count) for some.
    unsigned int n = 0;
    rc = kErrorNotSupported;
    if (lib->device_compute_processes) rc = lib->device_compute_processes(d, &n, nullptr);
    if (rc != kSuccess && rc != kErrorInsufficientSize && lib->device_compute_processes_v1) {
      n = 0;
      rc = lib->device_compute_processes_v1(d, &n, nullptr);
    }
    if (rc == kSuccess) g.compute_processes = 0;
    if (rc == kErrorInsufficientSize) g.compute_processes = static_cast<int>(std::max(n, 1u));
    unsigned int temp = 0;
    if (lib->device_temperature && lib->device_temperature(d, kTemperatureGpu, &temp) == kSuccess) g.temp_c = temp;
    out.push_back(std::move(g));
  }
  return out;
}

std::string default_lock_dir() {
  if (const char* d = std::getenv("WATTSCOPE_LOCK_DIR"); d && *d) return d;
  if (::geteuid() == 0) return "/run/wattscope/locks";
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x == '/') return std::string(x) + "/wattscope";
  return fmt::format("/tmp/wattscope-locks-{}", ::geteuid());
}

GpuGrab grab_free_gpus(const std::vector<GpuState>& gpus, const GrabRequest& req) {
  const GpuSelection visible = parse_gpu_selection("", req.cuda_visible);
  make_lock_dir(req.lock_dir);
  GpuGrab out;
  std::vector<std::string> why_not;
  int candidates = 0;
  for (const auto& g : gpus) {
    if (static_cast<int>(out.gpus.size()) == req.count) break;
    const std::string name = fmt::format("GPU {}", g.index);
    if (!visible.selects(g.index, g.uuid)) continue; // not this job's to take
    ++candidates;
    if (!g.compute_processes) {
      why_not.push_back(name + ": its compute processes cannot be listed");
      continue;
    }
    if (*g.compute_processes > 0) {
      why_not.push_back(
          fmt::format("{}: {} compute process{}", name, *g.compute_processes, *g.compute_processes == 1 ? "" : "es"));
      continue;
    }
    if (!g.mem_used_bytes || !g.mem_total_bytes || *g.mem_total_bytes <= 0) {
      why_not.push_back(name + ": its memory use cannot be read");
      continue;
    }
    const double used_pct = 100.0 * static_cast<double>(*g.mem_used_bytes) / static_cast<double>(*g.mem_total_bytes);
    if (used_pct >= req.mem_max_pct) {
      why_not.push_back(
          fmt::format("{}: {:.1f} % of its memory in use (--free-mem-max {} %)", name, used_pct, req.mem_max_pct));
      continue;
    }
    if (!safe_uuid(g.uuid)) {
      why_not.push_back(name + ": no usable UUID to name it by");
      continue;
    }
    const std::string path = req.lock_dir + "/" + g.uuid + ".lock";
    // O_NONBLOCK: a FIFO planted there must not hang the run; it is refused below.
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644));
    // Another user's lock file in a shared directory (WATTSCOPE_LOCK_DIR, sticky and world-writable): flock needs
    // only a descriptor, so read-only is enough to take or test it.
    if (!fd && errno == EACCES) fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (!fd) {
      why_not.push_back(fmt::format("{}: cannot open its lock file {}: {}", name, path, std::strerror(errno)));
      continue;
    }
    // The pid is written into the file below: a hard link planted at the lock's name (to /etc/passwd, say, when the
    // run is root's) would have that file truncated. A lock file is a regular file with one name.
    struct stat lst {};
    if (::fstat(fd.get(), &lst) != 0 || !S_ISREG(lst.st_mode) || lst.st_nlink != 1) {
      why_not.push_back(fmt::format("{}: its lock file {} is not a plain file ({}); remove it", name, path,
                                    !S_ISREG(lst.st_mode) ? std::string("not a regular file")
                                                          : fmt::format("{} hard links", lst.st_nlink)));
      continue;
    }
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      const std::string pid = holder(fd.get());
      why_not.push_back(fmt::format("{}: taken by another wattscope run{} ({})", name,
                                    pid.empty() ? "" : " (pid " + pid + ")", path));
      continue;
    }
    // Who holds it, for the message another run gives; the lock itself is the flock, released when we exit.
    const std::string me = fmt::format("{}\n", ::getpid());
    if (::ftruncate(fd.get(), 0) == 0 && ::pwrite(fd.get(), me.data(), me.size(), 0) < 0) {
      // the pid is only informative
    }
    out.gpus.push_back(g);
    out.locks.push_back(std::move(fd));
  }
  if (static_cast<int>(out.gpus.size()) < req.count) {
    std::string reasons;
    for (const auto& w : why_not)
      reasons += "\n  " + w;
    throw std::runtime_error(fmt::format("--gpus free:{}: {} of {} GPU{}{} free, {} needed:{}", req.count,
                                         out.gpus.size(), candidates, candidates == 1 ? "" : "s",
                                         visible.all ? "" : " in CUDA_VISIBLE_DEVICES", req.count, reasons));
  }
  for (const auto& g : out.gpus)
    out.cuda_visible += (out.cuda_visible.empty() ? "" : ",") + g.uuid;
  return out;
}

} // namespace wattscope
