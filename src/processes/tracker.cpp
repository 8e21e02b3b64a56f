#include "processes/tracker.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "core/thread_name.hpp"
#include "processes/procfs.hpp"
#include "sources/procfs/cpu_source.hpp"

namespace wattscope {

namespace {
struct Seen {
  pid_t pid;
  PidStat st;
};
} // namespace

ProcessTracker::ProcessTracker(TrackerOptions opts, std::vector<std::shared_ptr<Source>> gpu_sources)
    : opts_(std::move(opts)), gpu_sources_(std::move(gpu_sources)) {
  if (opts_.period < std::chrono::seconds(1)) opts_.period = std::chrono::seconds(1);
  if (opts_.clock_ticks_per_s <= 0) opts_.clock_ticks_per_s = 100;
}

ProcessTracker::~ProcessTracker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProcessTracker::start_machine() {
  std::lock_guard lock(mu_);
  if (started_) return;
  started_ = true;
  run_mode_ = false;
  thread_ = std::thread([this] {
    name_this_thread("ws-processes");
    loop();
  });
}

void ProcessTracker::follow(pid_t root, std::string cgroup_dir) {
  std::lock_guard lock(mu_);
  if (started_) return;
  started_ = true;
  run_mode_ = true;
  root_ = root;
  cgroup_dir_ = std::move(cgroup_dir);
  thread_ = std::thread([this] {
    name_this_thread("ws-processes");
    loop();
  });
}

void ProcessTracker::stop() {
  {
    std::lock_guard lock(mu_);
    if (!started_ || stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<ProcessSnapshot> ProcessTracker::take() {
  std::lock_guard lock(mu_);
  return std::move(latest_);
}

std::vector<ProcessRow> ProcessTracker::final_rows() {
  std::vector<ProcessRow> out;
  for (const auto& [id, k] : known_) {
    if (!k.rowed) continue;
    ProcessRow r;
    r.id = id;
    r.ppid = k.ppid;
    r.comm = k.comm;
    r.unit = k.unit;
    r.unit_kind = k.unit_kind;
    r.cmdline = k.cmdline;
    r.uid = k.uid;
    r.last_tick = -1;
    out.push_back(std::move(r));
  }
  return out;
}

void ProcessTracker::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    lock.unlock();
    auto snap = scan();
    lock.lock();
    if (snap) {
      if (latest_) // not taken yet (ticks slower than scans, or skipped): its first-seen and gone rows carry over
        snap->rows.insert(snap->rows.begin(), latest_->rows.begin(), latest_->rows.end());
      latest_ = std::move(snap);
    }
    // The last scan is taken after stop() asks, so the end of the run is covered.
    if (stop_) return;
    cv_.wait_for(lock, opts_.period, [this] { return stop_; });
  }
}

std::shared_ptr<ProcessSnapshot> ProcessTracker::scan() {
  auto snap = std::make_shared<ProcessSnapshot>();
  snap->run_mode = run_mode_;
  const auto now = std::chrono::steady_clock::now();
  snap->window_s = prev_at_ == std::chrono::steady_clock::time_point{}
                       ? 0
                       : std::chrono::duration<double>(now - prev_at_).count();
  prev_at_ = now;
  const double hz = static_cast<double>(opts_.clock_ticks_per_s);
  const std::string& root = opts_.procfs_root;

  // Host CPU time in the window, for the busy share.
  ProcStat ps;
  if (read_small_file(root + "/stat", buf_) && parse_proc_stat(buf_, ps)) {
    if (prev_cpu_ && ps.total.total >= prev_cpu_->second && ps.total.busy >= prev_cpu_->first) {
      snap->cpu_busy_s = static_cast<double>(ps.total.busy - prev_cpu_->first) / hz;
      snap->cpu_total_s = static_cast<double>(ps.total.total - prev_cpu_->second) / hz;
    }
    prev_cpu_ = {ps.total.busy, ps.total.total};
  }

  // Every process's stat: the tree is found by parent pid, so the whole table is read.
  std::vector<Seen> seen;
  if (DIR* d = ::opendir(root.c_str())) {
    while (dirent* e = ::readdir(d)) {
      pid_t pid = 0;
      const std::string_view name = e->d_name;
      auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
      if (ec != std::errc() || p != name.data() + name.size() || pid <= 0) continue;
      if (!read_small_file(root + "/" + std::string(name) + "/stat", buf_)) continue; // gone meanwhile
      Seen s{pid, {}};
      if (parse_pid_stat(buf_, s.st)) seen.push_back(std::move(s));
    }
    ::closedir(d);
  }

  // run mode: the tree under the root (by ppid), plus the members of its cgroup.
  std::set<pid_t> tree;
  if (run_mode_) {
    tree.insert(root_);
    if (!cgroup_dir_.empty() && read_small_file(cgroup_dir_ + "/cgroup.procs", buf_)) {
      std::string_view t = buf_;
      while (!t.empty()) {
        const size_t nl = t.find('\n');
        pid_t pid = 0;
        std::from_chars(t.data(), t.data() + (nl == std::string_view::npos ? t.size() : nl), pid);
        if (pid > 0) tree.insert(pid);
        t.remove_prefix(nl == std::string_view::npos ? t.size() : nl + 1);
      }
    }
    std::unordered_map<pid_t, std::vector<pid_t>> children;
    for (const auto& s : seen)
      children[static_cast<pid_t>(s.st.ppid)].push_back(s.pid);
    std::vector<pid_t> todo(tree.begin(), tree.end());
    while (!todo.empty()) {
      const pid_t p = todo.back();
      todo.pop_back();
      for (pid_t c : children[p])
        if (tree.insert(c).second) todo.push_back(c);
    }
  }

  std::map<ProcessId, Known> now_known;
  std::unordered_map<pid_t, ProcessId> by_pid;
  std::map<ProcessId, double> cpu_s;
  for (const auto& s : seen) {
    if (run_mode_ && !tree.count(s.pid)) continue;
    const ProcessId id{s.pid, static_cast<int64_t>(s.st.start_time)};
    by_pid[s.pid] = id;
    Known k;
    auto old = known_.find(id);
    const bool fresh = old == known_.end();
    if (!fresh) {
      k = old->second;
    } else {
      k.comm = s.st.comm;
      if (read_small_file(root + "/" + std::to_string(s.pid) + "/cgroup", buf_)) {
        Unit u = parse_cgroup_unit(buf_);
        k.unit = std::move(u.name);
        k.unit_kind = std::move(u.kind);
      }
    }
    // A process first seen after the first scan started in the window: all its time is new. On the machine's first
    // scan, what processes used before the recording started is not counted.
    const uint64_t before = fresh ? (first_scan_ && !run_mode_ ? s.st.cpu_ticks() : 0) : old->second.cpu_ticks;
    const uint64_t t = s.st.cpu_ticks();
    cpu_s[id] = t >= before ? static_cast<double>(t - before) / hz : 0;
    k.cpu_ticks = t;
    k.ppid = s.st.ppid;
    k.comm = s.st.comm;
    now_known.emplace(id, std::move(k));
  }
  // A tracked process gone since the last scan was reaped by its parent, whose cutime/cstime now hold its whole
  // lifetime: take off what was already counted, so only its last moments go to the parent.
  for (const auto& [id, k] : known_) {
    if (now_known.count(id)) continue;
    auto parent = by_pid.find(static_cast<pid_t>(k.ppid));
    if (parent != by_pid.end()) {
      double& c = cpu_s[parent->second];
      c = std::max(0.0, c - static_cast<double>(k.cpu_ticks) / hz);
    }
    if (k.rowed) {
      ProcessRow r;
      r.id = id;
      r.ppid = k.ppid;
      r.comm = k.comm;
      r.unit = k.unit;
      r.unit_kind = k.unit_kind;
      r.cmdline = k.cmdline;
      r.uid = k.uid;
      r.last_tick = -1; // gone: accounting sets the tick it was last seen at
      snap->rows.push_back(std::move(r));
    }
  }

  // GPU use per process, from every source that lists it (milliseconds per call on a real driver).
  std::vector<GpuProcessSample> gpu;
  for (const auto& src : gpu_sources_)
    src->gpu_processes(gpu, snap->gpus_listed);
  std::map<ProcessId, double> gpu_score;
  for (auto& g : gpu) {
    auto it = by_pid.find(static_cast<pid_t>(g.id.pid));
    if (it != by_pid.end()) {
      g.id = it->second;
      g.in_run = true;
    } else if (!run_mode_) {
      // Not visible in this /proc (another pid namespace): kept under its pid with start time 0.
      g.in_run = true;
    } else {
      // Started after this scan read /proc, or a neighbour (someone else's process on the same GPU): its parent
      // chain says which.
      g.in_run = false;
      PidStat st;
      pid_t p = static_cast<pid_t>(g.id.pid);
      for (int depth = 0; depth < 64 && p > 1; ++depth) {
        if (!read_small_file(root + "/" + std::to_string(p) + "/stat", buf_) || !parse_pid_stat(buf_, st)) break;
        if (depth == 0) g.id.start_time = static_cast<int64_t>(st.start_time);
        if (tree.count(p)) {
          g.in_run = true;
          break;
        }
        p = static_cast<pid_t>(st.ppid);
      }
    }
    gpu_score[g.id] += g.sm_pct.value_or(0) + (g.mem_used_bytes ? 1e-12 * static_cast<double>(*g.mem_used_bytes) : 0);
  }
  snap->gpu_procs = std::move(gpu);

  // Which processes are sampled: all of a run's; the top N of a machine by CPU or GPU use.
  std::set<ProcessId> sampled;
  if (run_mode_) {
    for (const auto& [id, k] : now_known)
      sampled.insert(id);
  } else {
    std::vector<std::pair<double, ProcessId>> rank;
    for (const auto& [id, k] : now_known)
      rank.emplace_back(cpu_s[id] / std::max(snap->window_s, 1e-9) * 100 + gpu_score[id], id);
    const size_t n = std::min(opts_.top_processes, rank.size());
    std::partial_sort(rank.begin(), rank.begin() + static_cast<long>(n), rank.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = 0; i < n; ++i)
      sampled.insert(rank[i].second);
  }

  snap->procs.reserve(now_known.size());
  for (auto& [id, k] : now_known) {
    ProcessSample p;
    p.id = id;
    p.comm = k.comm;
    p.unit = k.unit;
    p.unit_kind = k.unit_kind;
    p.in_run = true;
    p.cpu_time_s = cpu_s[id];
    p.sampled = sampled.count(id) > 0;
    if (p.sampled) {
      const std::string dir = root + "/" + std::to_string(id.pid);
      if (snap->window_s > 0) p.cpu_pct = p.cpu_time_s / snap->window_s * 100;
      if (read_small_file(dir + "/smaps_rollup", buf_)) {
        const PidMemory m = parse_smaps_rollup(buf_);
        p.rss_bytes = m.rss_bytes;
        p.pss_bytes = m.pss_bytes;
        p.uss_bytes = m.uss_bytes;
      }
      if (read_small_file(dir + "/io", buf_)) { // not readable for other users' processes: missing
        const PidIo io = parse_pid_io(buf_);
        if (snap->window_s > 0 && io.read_bytes && k.read_bytes && *io.read_bytes >= *k.read_bytes)
          p.read_bytes_per_s = static_cast<double>(*io.read_bytes - *k.read_bytes) / snap->window_s;
        if (snap->window_s > 0 && io.write_bytes && k.write_bytes && *io.write_bytes >= *k.write_bytes)
          p.write_bytes_per_s = static_cast<double>(*io.write_bytes - *k.write_bytes) / snap->window_s;
        k.read_bytes = io.read_bytes;
        k.write_bytes = io.write_bytes;
      }
      if (!k.rowed) {
        k.rowed = true;
        if (read_small_file(dir + "/cmdline", buf_)) {
          std::replace(buf_.begin(), buf_.end(), '\0', ' ');
          while (!buf_.empty() && buf_.back() == ' ')
            buf_.pop_back();
          k.cmdline = buf_;
        }
        struct stat sb {};
        if (::stat(dir.c_str(), &sb) == 0) k.uid = sb.st_uid;
      }
    }
    snap->procs.push_back(std::move(p));
  }
  known_ = std::move(now_known);
  first_scan_ = false;
  return snap;
}

} // namespace wattscope
