#include "sources/procfs/cpu_source.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/schema.hpp"

namespace wattscope {

namespace {

// A host name from the environment becomes a label value and a stored column: letters, digits, '.', '-', '_' only
// (what node names are made of), at most 253 characters; anything else makes it empty (the hostname is used).
std::string sanitize_host(std::string_view h) {
  if (h.size() > 253) return {};
  for (char c : h)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) return {};
  return std::string(h);
}

// Reads an unsigned decimal and advances; /proc/stat fields are plain non-negative integers.
uint64_t next_u64(std::string_view line, size_t& pos, bool& ok) {
  while (pos < line.size() && line[pos] == ' ')
    ++pos;
  if (pos >= line.size() || line[pos] < '0' || line[pos] > '9') {
    ok = false;
    return 0;
  }
  uint64_t v = 0;
  while (pos < line.size() && line[pos] >= '0' && line[pos] <= '9')
    v = v * 10 + static_cast<uint64_t>(line[pos++] - '0');
  return v;
}

bool parse_cpu_line(std::string_view line, size_t pos, CpuTimes& t) {
  // user nice system idle iowait irq softirq steal [guest guest_nice]; kernels before 2.6.11 stop after irq/softirq.
  uint64_t f[8] = {};
  int n = 0;
  for (; n < 8; ++n) {
    bool ok = true;
    f[n] = next_u64(line, pos, ok);
    if (!ok) break;
  }
  if (n < 4) return false;
  const uint64_t idle = f[3] + f[4];
  t.busy = f[0] + f[1] + f[2] + f[5] + f[6] + f[7];
  t.total = t.busy + idle;
  return true;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

bool parse_proc_stat(std::string_view text, ProcStat& out) {
  out.cores.clear();
  bool have_total = false;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.size() < 4 || line.substr(0, 3) != "cpu") {
      if (have_total) break; // the cpu lines come first and together
      continue;
    }
    if (line[3] == ' ') {
      have_total = parse_cpu_line(line, 3, out.total);
    } else {
      size_t pos = 3;
      bool ok = true;
      uint64_t idx = next_u64(line, pos, ok);
      CpuTimes t;
      if (!ok || !parse_cpu_line(line, pos, t)) continue;
      // Offline CPUs are absent from /proc/stat; keep positions stable by index.
      if (idx >= out.cores.size()) out.cores.resize(idx + 1);
      out.cores[idx] = t;
    }
  }
  return have_total;
}

bool parse_meminfo(std::string_view text, int64_t& total_bytes, int64_t& available_bytes) {
  total_bytes = available_bytes = -1;
  int64_t free_kb = -1, buffers_kb = 0, cached_kb = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = line.substr(0, colon);
    // Only five of ~55 lines matter, and the two that usually suffice come first: stop there (issue 12).
    if (key != "MemTotal" && key != "MemAvailable" && key != "MemFree" && key != "Buffers" && key != "Cached") continue;
    size_t pos = colon + 1;
    bool ok = true;
    auto kb = static_cast<int64_t>(next_u64(line, pos, ok));
    if (!ok) continue;
    if (key == "MemTotal")
      total_bytes = kb * 1024;
    else if (key == "MemAvailable")
      available_bytes = kb * 1024;
    else if (key == "MemFree")
      free_kb = kb;
    else if (key == "Buffers")
      buffers_kb = kb;
    else if (key == "Cached")
      cached_kb = kb;
    if (total_bytes >= 0 && available_bytes >= 0) break;
  }
  // Kernels before 3.14 have no MemAvailable; free + buffers + cache is the classic approximation.
  if (available_bytes < 0 && free_kb >= 0) available_bytes = (free_kb + buffers_kb + cached_kb) * 1024;
  return total_bytes > 0 && available_bytes >= 0;
}

std::string parse_cpu_model(std::string_view cpuinfo) {
  for (std::string_view key : {"model name", "Processor", "cpu model", "Model"}) {
    size_t start = 0;
    while (start < cpuinfo.size()) {
      size_t end = cpuinfo.find('\n', start);
      if (end == std::string_view::npos) end = cpuinfo.size();
      std::string_view line = cpuinfo.substr(start, end - start);
      start = end + 1;
      if (line.substr(0, key.size()) != key) continue;
      size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string_view v = line.substr(colon + 1);
      while (!v.empty() && v.front() == ' ')
        v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\r'))
        v.remove_suffix(1);
      if (!v.empty()) return std::string(v);
    }
  }
  return {};
}

OptF util_between(const CpuTimes& a, const CpuTimes& b) {
  if (b.total <= a.total || b.busy < a.busy) return std::nullopt;
  double pct = 100.0 * static_cast<double>(b.busy - a.busy) / static_cast<double>(b.total - a.total);
  return pct > 100.0 ? 100.0 : pct;
}

ProcfsCpuSource::ProcfsCpuSource(std::string procfs_root, PerCoreStorage per_core)
    : root_(std::move(procfs_root)), per_core_(per_core) {}

ProcfsCpuSource::~ProcfsCpuSource() = default; // the UniqueFds close the files

bool ProcfsCpuSource::read_fd(int fd, std::string& buf) noexcept {
  // procfs files are regenerated on each read from offset 0; pread keeps the fd open across ticks.
  buf.resize(buf.capacity() < 4096 ? 4096 : buf.capacity());
  size_t len = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf.data() + len, buf.size() - len, static_cast<off_t>(len));
    if (n < 0) return false;
    if (n == 0) break;
    len += static_cast<size_t>(n);
    // A short read is the end: a procfs file is generated whole into the buffer when it fits (as a regular file's
    // read stops only at its end), so asking again would be one more syscall per file per tick (issue 12).
    if (len < buf.size()) break;
    buf.resize(buf.size() * 2);
  }
  buf.resize(len);
  return true;
}

bool ProcfsCpuSource::open() {
  stat_fd_.reset(::open((root_ + "/stat").c_str(), O_RDONLY | O_CLOEXEC));
  meminfo_fd_.reset(::open((root_ + "/meminfo").c_str(), O_RDONLY | O_CLOEXEC));
  std::vector<std::string> missing;
  if (!stat_fd_) {
    missing.push_back(fmt::format("cannot open {}/stat; CPU utilisation will not be recorded", root_));
  } else if (read_fd(stat_fd_.get(), buf_) && parse_proc_stat(buf_, prev_)) {
    have_prev_ = true;
  }
  if (!meminfo_fd_) missing.push_back(fmt::format("cannot open {}/meminfo; host memory will not be recorded", root_));
  if (missing.empty()) {
    status_ = SourceStatus::ok(fmt::format("{} logical CPUs", prev_.cores.size()), false);
  } else {
    std::string detail;
    for (const auto& m : missing)
      detail += (detail.empty() ? "" : "; ") + m;
    status_ = SourceStatus::missing(detail, "is --procfs-root right? Point it at the host's /proc (in a container: "
                                            "mount it read-only)");
  }
  return stat_fd_.valid() || meminfo_fd_.valid();
}

bool ProcfsCpuSource::read_stat(Frame& frame) {
  if (stat_fd_ && read_fd(stat_fd_.get(), buf_) && parse_proc_stat(buf_, cur_)) {
    // issue 32: /proc/stat counts in USER_HZ (sysconf's clock ticks); the counter is exported as it stands.
    static const long hz = ::sysconf(_SC_CLK_TCK);
    if (hz > 0) frame.cpu.busy_s = static_cast<double>(cur_.total.busy) / static_cast<double>(hz);
    if (have_prev_) {
      frame.cpu.util_pct = util_between(prev_.total, cur_.total);
      frame.cpu.core_util_pct.resize(cur_.cores.size());
      for (size_t i = 0; i < cur_.cores.size(); ++i)
        frame.cpu.core_util_pct[i] = i < prev_.cores.size() ? util_between(prev_.cores[i], cur_.cores[i]) : OptF{};
    }
    std::swap(prev_, cur_);
    have_prev_ = true;
    return true;
  }
  return false;
}

void ProcfsCpuSource::per_core_rows(Frame& frame, bool fresh) {
  using Mode = PerCoreStorage::Mode;
  if (per_core_.mode == Mode::Off || !fresh) {
    frame.cpu.core_rows = false;
    return;
  }
  if (per_core_.mode == Mode::EveryTick) return;
  // Due once the period has passed since the last stored rows: the first full sample is (its rows cover the time
  // since the source opened, as every tick's would).
  const bool due = !stored_at_ || frame.mono - *stored_at_ + per_core_.interval / 2 >= per_core_.period;
  frame.cpu.core_rows = due;
  if (!due) return;
  // The mean over the period is the busy jiffies across it over all its jiffies: the ratio of the sums, not the mean of
  // each tick's ratio (a tick's share weighs by its length), and no tick between is needed. prev_ holds this tick's.
  if (stored_at_) {
    frame.cpu.core_util_pct.assign(prev_.cores.size(), OptF{});
    for (size_t i = 0; i < prev_.cores.size() && i < stored_cores_.size(); ++i)
      frame.cpu.core_util_pct[i] = util_between(stored_cores_[i], prev_.cores[i]);
  }
  stored_cores_ = prev_.cores;
  stored_at_ = frame.mono;
}

void ProcfsCpuSource::probe(Frame& frame) noexcept {
  try {
    probed_ok_ = read_stat(frame);
    probed_tick_ = frame.tick;
  } catch (...) {
    // allocation failure: the probe sees no CPU reading, which keeps the full rate
  }
}

void ProcfsCpuSource::sample(Frame& frame) noexcept {
  try {
    // Read again microseconds after the probe, /proc/stat would give the utilisation of no time at all.
    const bool fresh = frame.tick != probed_tick_ ? read_stat(frame) : probed_ok_;
    per_core_rows(frame, fresh && !frame.cpu.core_util_pct.empty());
    int64_t total = 0, avail = 0;
    if (meminfo_fd_ && read_fd(meminfo_fd_.get(), buf_) && parse_meminfo(buf_, total, avail)) {
      frame.cpu.mem_total_bytes = total;
      frame.cpu.mem_used_bytes = total - avail;
    }
  } catch (...) {
    // Allocation failure is the only thing that can throw here; the tick keeps what it has.
  }
}

void ProcfsCpuSource::describe(RunInfo& run) const {
  run.cpu_model = parse_cpu_model(read_whole_file(root_ + "/cpuinfo"));
  // issue 18: in a pod the hostname (UTS namespace) is the pod's name; the DaemonSet passes the node's name instead
  // (WATTSCOPE_HOST from spec.nodeName), so a fleet's series are labelled by node.
  std::string host;
  if (const char* h = std::getenv("WATTSCOPE_HOST"); h && *h) host = sanitize_host(h);
  if (host.empty()) host = read_whole_file(root_ + "/sys/kernel/hostname");
  while (!host.empty() && (host.back() == '\n' || host.back() == ' '))
    host.pop_back();
  if (host.empty()) {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) == 0) host = buf;
  }
  run.host = host;
}

} // namespace wattscope
