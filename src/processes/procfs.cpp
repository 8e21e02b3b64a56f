#include "processes/procfs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <vector>

namespace wattscope {

namespace {
std::string_view next_field(std::string_view& s) {
  while (!s.empty() && s.front() == ' ')
    s.remove_prefix(1);
  const size_t end = s.find(' ');
  std::string_view f = s.substr(0, end);
  s.remove_prefix(end == std::string_view::npos ? s.size() : end);
  return f;
}
template <class T> bool num(std::string_view f, T& out) {
  auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), out);
  return ec == std::errc() && p == f.data() + f.size();
}
// "Key:   1234 kB" lines: the value of `key` in bytes (kB x 1024), or nothing.
std::optional<int64_t> kb_line(std::string_view text, std::string_view key) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':') continue;
    std::string_view rest = line.substr(key.size() + 1);
    int64_t v = 0;
    std::string_view f = next_field(rest);
    if (!num(f, v) || v < 0) return std::nullopt;
    const bool kb = next_field(rest) == "kB";
    // No memory or I/O counter the kernel writes comes near 1 EiB: a larger value (a fixture tree, a corrupt file)
    // is unknown, and the sums made of three of them (USS) cannot overflow (fuzz_procfs found v * 1024 overflowing).
    constexpr int64_t kMaxBytes = int64_t{1} << 60;
    if (v > (kb ? kMaxBytes / 1024 : kMaxBytes)) return std::nullopt;
    return kb ? v * 1024 : v;
  }
  return std::nullopt;
}
bool all_hex(std::string_view s) {
  if (s.size() < 12) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}
} // namespace

bool parse_schedstat_ns(std::string_view text, uint64_t& ns) {
  return num(text.substr(0, text.find_first_of(" \n")), ns);
}

bool parse_pid_stat(std::string_view text, PidStat& out) {
  const size_t open = text.find('(');
  // memrchr, not string_view::rfind, which steps back one character at a time over the ~250 after the comm
  const void* last = text.empty() ? nullptr : ::memrchr(text.data(), ')', text.size());
  const size_t close =
      last ? static_cast<size_t>(static_cast<const char*>(last) - text.data()) : std::string_view::npos;
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return false;
  out.comm.assign(text.data() + open + 1, close - open - 1);
  // Fields after comm, numbered as proc(5) does: 3 state, 4 ppid, 9 flags, 14 utime, 15 stime, 16 cutime,
  // 17 cstime, 22 starttime, 24 rss (pages). Split in one pass over the characters: a call to find the next space
  // per field made this parse half of what the machine-wide process scan did in user space (issue 12).
  std::string_view f[22];
  const char* p = text.data() + close + 1;
  const char* const end = text.data() + text.size();
  for (auto& x : f) { // the line ends in a newline, which ends its last field as a space does
    while (p != end && (*p == ' ' || *p == '\n'))
      ++p;
    const char* from = p;
    while (p != end && *p != ' ' && *p != '\n')
      ++p;
    x = std::string_view(from, static_cast<size_t>(p - from));
  }
  if (f[0].size() != 1) return false;
  out.state = f[0][0];
  if (!num(f[21], out.rss_pages)) out.rss_pages = -1; // a format without it: unknown
  uint64_t flags = 0;
  constexpr uint64_t kPfKthread = 0x00200000; // include/linux/sched.h
  out.kernel_thread = num(f[6], flags) && (flags & kPfKthread) != 0;
  int64_t cut = 0, cst = 0; // signed in the kernel's format
  return num(f[1], out.ppid) && num(f[11], out.utime) && num(f[12], out.stime) && num(f[13], cut) && num(f[14], cst) &&
         num(f[19], out.start_time) &&
         (out.cutime = static_cast<uint64_t>(std::max<int64_t>(cut, 0)),
          out.cstime = static_cast<uint64_t>(std::max<int64_t>(cst, 0)), true);
}

PidMemory parse_smaps_rollup(std::string_view text) {
  PidMemory m;
  m.rss_bytes = kb_line(text, "Rss");
  m.pss_bytes = kb_line(text, "Pss");
  const auto clean = kb_line(text, "Private_Clean");
  const auto dirty = kb_line(text, "Private_Dirty");
  if (clean && dirty) m.uss_bytes = *clean + *dirty + kb_line(text, "Private_Hugetlb").value_or(0);
  return m;
}

PidIo parse_pid_io(std::string_view text) {
  return {kb_line(text, "read_bytes"), kb_line(text, "write_bytes")};
}

std::string cgroup_v2_path(std::string_view text) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, 3) == "0::") return std::string(line.substr(3));
  }
  return {};
}

Unit parse_cgroup_unit(std::string_view text) {
  std::string path = cgroup_v2_path(text);
  if (path.empty()) { // cgroup v1: the systemd hierarchy names the unit
    size_t at = text.find(":name=systemd:");
    if (at != std::string_view::npos) {
      std::string_view rest = text.substr(at + 14);
      path = std::string(rest.substr(0, rest.find('\n')));
    }
  }
  std::vector<std::string_view> parts;
  std::string_view p = path;
  while (!p.empty()) {
    const size_t slash = p.find('/');
    std::string_view part = p.substr(0, slash);
    if (!part.empty()) parts.push_back(part);
    p.remove_prefix(slash == std::string_view::npos ? p.size() : slash + 1);
  }
  auto strip = [](std::string_view s, std::string_view prefix, std::string_view suffix) -> std::string_view {
    if (s.size() < prefix.size() + suffix.size() || s.substr(0, prefix.size()) != prefix ||
        s.substr(s.size() - suffix.size()) != suffix)
      return {};
    return s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
  };
  // Slurm: /system.slice/slurmstepd.scope/job_4242/step_0/… or /slurm/uid_1000/job_4242/…
  bool slurm = false;
  for (auto part : parts) {
    if (part == "slurm" || part == "slurmstepd.scope" || part.substr(0, 5) == "slurm") slurm = true;
    if (slurm && part.substr(0, 4) == "job_" && part.size() > 4)
      return {"slurm job " + std::string(part.substr(4)), "slurm-job"};
  }
  // Kubernetes: kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice or
  // kubepods/besteffort/pod<uid>. Read from inside a pod (the DaemonSet), the path is relative to the reader's own
  // cgroup namespace, whose root is its container's cgroup: "/../../../kubepods-besteffort.slice/…-pod<uid>.slice/…"
  // (issue 18), so the leading ".." steps are skipped.
  size_t first = 0;
  while (first < parts.size() && parts[first] == "..")
    ++first;
  if (first < parts.size() && parts[first].substr(0, 8) == "kubepods") {
    for (auto part : parts) {
      const size_t pod = part.rfind("pod");
      if (pod == std::string_view::npos || (pod > 0 && part[pod - 1] != '-')) continue; // "kubepods" itself
      std::string uid(part.substr(pod + 3));
      if (uid.size() > 6 && uid.substr(uid.size() - 6) == ".slice") uid.resize(uid.size() - 6);
      for (auto& c : uid)
        if (c == '_') c = '-'; // systemd escapes the uid's dashes
      if (uid.size() >= 8) return {"pod " + uid, "k8s-pod"};
    }
  }
  // Containers: docker-<id>.scope, docker/<id>, cri-containerd-<id>.scope, crio-<id>.scope, libpod-<id>.scope
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    for (auto [prefix, engine] : {std::pair{"docker-", "docker"},
                                  {"cri-containerd-", "containerd"},
                                  {"crio-", "cri-o"},
                                  {"libpod-", "podman"}}) {
      std::string_view id = strip(*it, prefix, ".scope");
      if (all_hex(id)) return {std::string(engine) + " " + std::string(id.substr(0, 12)), "container"};
    }
    if (it != parts.rbegin() && (*it == "docker" || *it == "containerd" || *it == "libpod_parent")) {
      std::string_view id = *(it - 1);
      if (all_hex(id)) return {std::string(*it) + " " + std::string(id.substr(0, 12)), "container"};
    }
  }
  // systemd: the innermost service, else a user session.
  for (auto it = parts.rbegin(); it != parts.rend(); ++it)
    if (it->size() > 8 && it->substr(it->size() - 8) == ".service") return {std::string(*it), "systemd-service"};
  for (auto it = parts.rbegin(); it != parts.rend(); ++it)
    if (!strip(*it, "session-", ".scope").empty()) return {std::string(*it), "user-session"};
  return {};
}

bool read_small_file(const std::string& path, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.clear();
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1u << 20)) break; // procfs files we read are small; a huge cmdline is cut
  }
  ::close(fd);
  return true;
}

} // namespace wattscope
