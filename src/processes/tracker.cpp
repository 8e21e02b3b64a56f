#include "processes/tracker.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <set>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "core/thread_name.hpp"
#include "core/time_util.hpp"
#include "processes/procfs.hpp"
#include "sources/procfs/cpu_source.hpp"

namespace wattscope {

namespace {
// statfs(2)'s f_type of the kernel's procfs.
constexpr long kProcSuperMagic = 0x9fa0;

// "PID/NAME" into buf, for openat on the procfs root: no allocation.
const char* pid_path(char (&buf)[64], pid_t pid, const char* name) {
  // to_chars, not snprintf: this runs once per process per scan, and snprintf was a twentieth of the scan's work
  char* p = std::to_chars(buf, buf + 20, static_cast<int>(pid)).ptr;
  *p++ = '/';
  const size_t n = std::min(std::strlen(name), static_cast<size_t>(buf + sizeof buf - 1 - p));
  std::memcpy(p, name, n);
  p[n] = '\0';
  return buf;
}
} // namespace

void ProcessTracker::add_gpu_source(std::shared_ptr<Source> source) {
  std::lock_guard lock(gpu_sources_mu_);
  gpu_sources_.push_back(std::move(source));
}

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
  // A descriptor per process, kept between scans, saves an open and a close per process per scan (bench/
  // process_tracking.cpp). The default soft limit (1024) is too low for a busy machine; the hard one allows more.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 65536);
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
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

ProcessRow ProcessTracker::gone_row(const ProcessId& id, const Known& k) {
  ProcessRow r;
  r.id = id;
  r.ppid = k.ppid;
  r.comm = k.comm;
  r.unit = k.unit;
  r.unit_kind = k.unit_kind;
  r.cmdline = k.cmdline;
  r.uid = k.uid;
  r.last_tick = -1; // gone: accounting sets the tick it was last seen at
  return r;
}

std::vector<ProcessRow> ProcessTracker::final_rows() {
  std::vector<ProcessRow> out;
  for (const auto& [id, k] : known_)
    if (k.rowed) out.push_back(gone_row(id, k));
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

bool ProcessTracker::read_stat(pid_t pid, std::string_view& text) {
  char path[64];
  if (stat_buf_.empty()) stat_buf_.resize(4096); // a stat line is a few hundred bytes; comm at most 64
  auto kept = real_procfs_ ? stat_fds_.find(pid) : stat_fds_.end();
  if (kept != stat_fds_.end()) {
    const ssize_t n = ::pread(kept->second.first.get(), stat_buf_.data(), stat_buf_.size(), 0);
    if (n > 0) {
      kept->second.second = scan_no_;
      text = std::string_view(stat_buf_.data(), static_cast<size_t>(n));
      return true;
    }
    stat_fds_.erase(kept); // gone (ESRCH): the pid, if listed again, is another process
  }
  UniqueFd fd(::openat(root_fd_.get(), pid_path(path, pid, "stat"), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  const ssize_t n = ::pread(fd.get(), stat_buf_.data(), stat_buf_.size(), 0);
  if (n <= 0) return false;
  text = std::string_view(stat_buf_.data(), static_cast<size_t>(n));
  if (real_procfs_ && stat_fds_.size() < fd_budget_) stat_fds_.emplace(pid, std::pair{std::move(fd), scan_no_});
  return true;
}

bool ProcessTracker::read_schedstat(pid_t pid, KernelThread& kt, uint64_t& ns) {
  char path[64];
  char text[128];
  // Kept open on the kernel's procfs (a gone thread's descriptor answers ESRCH), like the stat descriptors.
  UniqueFd fresh;
  if (!kt.schedstat) fresh.reset(::openat(root_fd_.get(), pid_path(path, pid, "schedstat"), O_RDONLY | O_CLOEXEC));
  const int fd = kt.schedstat ? kt.schedstat.get() : fresh.get();
  if (fd < 0) return false;
  const ssize_t n = ::pread(fd, text, sizeof text, 0);
  if (n <= 0 || !parse_schedstat_ns(std::string_view(text, static_cast<size_t>(n)), ns)) {
    kt.schedstat.reset();
    return false;
  }
  if (fresh && real_procfs_) kt.schedstat = std::move(fresh);
  return true;
}

void ProcessTracker::close_stale_fds() {
  for (auto it = stat_fds_.begin(); it != stat_fds_.end();)
    it = it->second.second == scan_no_ ? std::next(it) : stat_fds_.erase(it);
}

namespace {
// Slurm's special step ids (slurm.h): the batch script, the extern step (PrologFlags=Contain), an interactive step.
std::string slurm_step_name(std::string_view id) {
  if (id == "4294967291" || id == "batch") return "batch";
  if (id == "4294967292" || id == "extern") return "extern";
  if (id == "4294967290" || id == "interactive") return "interactive";
  return std::string(id);
}
} // namespace

bool ProcessTracker::admits(pid_t pid, const std::string& cgroup_text) {
  if (pid == ::getpid()) return false; // the recorder itself is not the job it records
  bool in = false;
  std::string step;
  if (!opts_.only_units.empty() && !cgroup_text.empty()) {
    const Unit u = parse_cgroup_unit(cgroup_text);
    in = !u.name.empty() &&
         std::find(opts_.only_units.begin(), opts_.only_units.end(), u.name) != opts_.only_units.end();
    // Slurm's cgroup path names the step below the job: …/job_42/step_batch/…, …/job_42/step_0/user/task_0
    if (in && u.kind == "slurm-job") {
      const size_t at = cgroup_text.find("/step_");
      if (at != std::string::npos) {
        const size_t from = at + 6, to = cgroup_text.find_first_of("/\n", from);
        step = slurm_step_name(std::string_view(cgroup_text).substr(from, to == std::string::npos ? to : to - from));
      }
    }
  }
  if (!opts_.only_env.empty()) {
    char path[64];
    // /proc/PID/environ is the environment the process was started with: NUL-separated, readable by its owner and
    // root (the Slurm prolog runs as root). Not readable: the process cannot be judged by it, so it is left out.
    if (read_small_file(opts_.procfs_root + "/" + pid_path(path, pid, "environ"), buf_)) {
      bool env_in = false, slurm_script = false;
      std::string env_step, array_job, array_task;
      std::string_view t = buf_;
      while (!t.empty()) {
        const size_t nul = t.find('\0');
        const std::string_view entry = t.substr(0, nul);
        t.remove_prefix(nul == std::string_view::npos ? t.size() : nul + 1);
        for (const auto& want : opts_.only_env)
          if (entry == want) env_in = true;
        if (entry.starts_with("SLURM_STEP_ID=")) env_step = slurm_step_name(entry.substr(14));
        if (entry.starts_with("SLURM_ARRAY_JOB_ID=")) array_job = entry.substr(19);
        if (entry.starts_with("SLURM_ARRAY_TASK_ID=")) array_task = entry.substr(20);
        // slurmd's own prolog and epilog carry the job's variables too, but they are not the job's work
        if (entry.starts_with("SLURM_SCRIPT_CONTEXT=")) slurm_script = true;
      }
      if (env_in && !slurm_script) {
        in = true;
        if (step.empty()) step = env_step.empty() ? "batch" : env_step;
      }
      // slurmd gives its prolog no array ids (22.05); the job's own processes carry them.
      auto digits = [](const std::string& v) {
        return !v.empty() && v.size() <= 20 && v.find_first_not_of("0123456789") == std::string::npos;
      };
      if (in && !slurm_script && digits(array_job) && digits(array_task)) {
        slurm_array_.try_emplace("slurm_array_job_id", array_job);
        slurm_array_.try_emplace("slurm_array_task_id", array_task);
      }
    }
  }
  if (in && !step.empty() && steps_.size() < 1000) steps_.insert(step);
  return in;
}

std::vector<std::string> ProcessTracker::slurm_steps() const {
  return {steps_.begin(), steps_.end()};
}

std::map<std::string, std::string> ProcessTracker::slurm_array() const {
  return slurm_array_;
}

namespace {
// Share of one core that the top N's smaps_rollup reads may take together (see ProcessTracker::sample()).
constexpr double kSmapsBudget = 0.0001;

// A kernel thread's CPU time in clock ticks from its schedstat nanoseconds (it has no children: cutime is 0).
void schedstat_time(PidStat& st, uint64_t ns, long clock_ticks_per_s) {
  st.utime = ns / (1000000000u / static_cast<uint64_t>(std::clamp<long>(clock_ticks_per_s, 1, 1000000000)));
  st.stime = st.cutime = st.cstime = 0;
}

// cgroup.procs: one pid a line.
void add_pids(std::string_view text, std::set<pid_t>& out) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    pid_t pid = 0;
    std::from_chars(text.data(), text.data() + (nl == std::string_view::npos ? text.size() : nl), pid);
    if (pid > 0) out.insert(pid);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  }
}
} // namespace

std::shared_ptr<ProcessSnapshot> ProcessTracker::scan() {
  const double cpu0 = thread_cpu_s(); // the scan's cost by part, for -v (a machine's own figures)
  auto snap = std::make_shared<ProcessSnapshot>();
  const bool filtered = !run_mode_ && opts_.filtered();
  snap->run_mode = run_mode_ || filtered; // filtered: in_run marks the unit's processes, as a run's tree
  ++scan_no_;
  const auto now = std::chrono::steady_clock::now();
  snap->window_s =
      prev_at_ == std::chrono::steady_clock::time_point{} ? 0 : std::chrono::duration<double>(now - prev_at_).count();
  prev_at_ = now;
  open_root();
  read_host_cpu(*snap);
  read_every_stat(now);
  const double cpu_proc = thread_cpu_s();
  std::sort(seen_.begin(), seen_.end(), [](const Seen& a, const Seen& b) { return a.pid < b.pid; });
  const std::set<pid_t> tree = run_mode_ ? run_tree() : std::set<pid_t>{};
  Mine mine = update_known(tree, filtered);
  fold_gone(mine, *snap);
  const double cpu_gpu0 = thread_cpu_s();
  list_gpu_processes(*snap);
  const double cpu_gpu = thread_cpu_s() - cpu_gpu0;
  const auto gpu_score = attribute_gpu_processes(*snap, mine, tree, filtered);
  const std::vector<const Known*> top = busiest(mine, gpu_score, snap->window_s);
  snap->procs.reserve(mine.size());
  for (auto& [pid, it] : mine)
    snap->procs.push_back(sample(it->first, it->second, std::binary_search(top.begin(), top.end(), &it->second),
                                 run_mode_ || filtered, top.size(), snap->window_s, now));
  if (opts_.pod_names) name_pods(mine, *snap);
  first_scan_ = false;
  if (spdlog::should_log(spdlog::level::debug)) {
    const double end = thread_cpu_s();
    spdlog::debug("process scan {}: {} processes{}, {} sampled; {:.0f} us of CPU: /proc {:.0f}, GPU lists {:.0f}, the "
                  "rest {:.0f}",
                  scan_no_, seen_.size(), listed_ ? " (listed)" : "", top.size(), (end - cpu0) * 1e6,
                  (cpu_proc - cpu0) * 1e6, cpu_gpu * 1e6, (end - cpu_proc - cpu_gpu) * 1e6);
  }
  return snap;
}

void ProcessTracker::open_root() {
  if (root_fd_) return;
  root_fd_.reset(::open(opts_.procfs_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct statfs sf {};
  real_procfs_ = root_fd_ && ::fstatfs(root_fd_.get(), &sf) == 0 && static_cast<long>(sf.f_type) == kProcSuperMagic;
  // Kept descriptors take at most half of what the limit leaves after 512 for everything else (stores, sockets).
  rlimit rl{};
  if (opts_.keep_stat_fds && real_procfs_ && ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 1024)
    fd_budget_ = static_cast<size_t>(std::min<rlim_t>(rl.rlim_cur - 512, 1u << 20) / 2);
}

void ProcessTracker::read_host_cpu(ProcessSnapshot& snap) {
  const double hz = static_cast<double>(opts_.clock_ticks_per_s);
  ProcStat ps;
  if (!read_small_file(opts_.procfs_root + "/stat", buf_) || !parse_proc_stat(buf_, ps)) return;
  if (prev_cpu_ && ps.total.total >= prev_cpu_->second && ps.total.busy >= prev_cpu_->first) {
    snap.cpu_busy_s = static_cast<double>(ps.total.busy - prev_cpu_->first) / hz;
    snap.cpu_total_s = static_cast<double>(ps.total.total - prev_cpu_->second) / hz;
  }
  prev_cpu_ = {ps.total.busy, ps.total.total};
}

void ProcessTracker::read_every_stat(std::chrono::steady_clock::time_point now) {
  seen_.clear();
  std::optional<uint64_t> last_pid;
  if (!last_pid_fd_ && root_fd_)
    last_pid_fd_.reset(::openat(root_fd_.get(), "sys/kernel/ns_last_pid", O_RDONLY | O_CLOEXEC));
  if (last_pid_fd_) {
    char text[32];
    const ssize_t n = ::pread(last_pid_fd_.get(), text, sizeof text, 0);
    uint64_t v = 0;
    if (n > 0 && std::from_chars(text, text + n, v).ec == std::errc()) last_pid = v;
  }
  listed_ = !last_pid || last_pid != last_pid_ || now - listed_at_ >= std::chrono::minutes(1);
  // On the kernel's procfs a kept schedstat descriptor answers ESRCH once its thread is gone, so a known kernel
  // thread's stat (its name, for kworkers rename themselves) is read again only once a minute, not at every listing:
  // on the H100 VM something started a process between most scans, and each listing read 174 stat files more.
  const bool read_kthreads =
      listed_ && (!real_procfs_ || now - kthreads_read_at_ >= std::chrono::minutes(1) || kthreads_.empty());
  if (read_kthreads) kthreads_read_at_ = now;
  if (!listed_) {
    for (pid_t pid : pids_)
      read_process(pid, read_kthreads);
  } else if (root_fd_) {
    if (DIR* d = ::fdopendir(::dup(root_fd_.get()))) {
      ::rewinddir(d);
      while (dirent* e = ::readdir(d)) {
        pid_t pid = 0;
        const std::string_view name = e->d_name;
        auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
        if (ec != std::errc() || p != name.data() + name.size() || pid <= 0) continue;
        read_process(pid, read_kthreads);
      }
      ::closedir(d);
      last_pid_ = last_pid; // read before the listing: a pid handed out after it moves it
      listed_at_ = now;
    } else {
      last_pid_.reset();
    }
  }
  pids_.clear();
  for (const auto& x : seen_)
    pids_.push_back(x.pid);
  std::erase_if(kthreads_, [&](const auto& kt) { return kt.second.scan != scan_no_; });
  close_stale_fds();
}

void ProcessTracker::read_process(pid_t pid, bool read_kthreads) {
  auto kt = kthreads_.find(pid);
  uint64_t ns = 0;
  if (kt != kthreads_.end() && !read_kthreads) {
    if (read_schedstat(pid, kt->second, ns)) {
      seen_.push_back({pid, kt->second.st});
      schedstat_time(seen_.back().st, ns, opts_.clock_ticks_per_s);
      kt->second.scan = scan_no_;
      return;
    }
    kthreads_.erase(kt); // gone (then its stat fails too), or no schedstat any more: its stat says which
    kt = kthreads_.end();
  }
  std::string_view text;
  if (!read_stat(pid, text)) { // gone meanwhile
    if (kt != kthreads_.end()) kthreads_.erase(kt);
    return;
  }
  seen_.push_back({pid, {}});
  PidStat& st = seen_.back().st;
  if (!parse_pid_stat(text, st)) {
    seen_.pop_back();
    return;
  }
  if (!st.kernel_thread) {
    if (kt != kthreads_.end()) kthreads_.erase(kt);
    return;
  }
  if (kt == kthreads_.end() || kt->second.st.start_time != st.start_time)
    kt = kthreads_.insert_or_assign(pid, KernelThread{}).first; // new, or its pid reused (a fixture tree)
  if (read_schedstat(pid, kt->second, ns)) {
    schedstat_time(st, ns, opts_.clock_ticks_per_s);
    kt->second.st = st;
    kt->second.scan = scan_no_;
  } else {
    kthreads_.erase(kt); // no schedstat here (a kernel without CONFIG_SCHED_INFO): stat every scan
  }
}

const ProcessTracker::Seen* ProcessTracker::find_seen(pid_t pid) const {
  auto it = std::lower_bound(seen_.begin(), seen_.end(), pid, [](const Seen& s, pid_t p) { return s.pid < p; });
  return it != seen_.end() && it->pid == pid ? &*it : nullptr;
}

std::set<pid_t> ProcessTracker::run_tree() {
  std::set<pid_t> tree{root_};
  if (!cgroup_dir_.empty() && read_small_file(cgroup_dir_ + "/cgroup.procs", buf_)) add_pids(buf_, tree);
  std::unordered_map<pid_t, std::vector<pid_t>> children;
  for (const auto& s : seen_)
    children[static_cast<pid_t>(s.st.ppid)].push_back(s.pid);
  std::vector<pid_t> todo(tree.begin(), tree.end());
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (pid_t c : children[p])
      if (tree.insert(c).second) todo.push_back(c);
  }
  return tree;
}

ProcessTracker::Mine ProcessTracker::update_known(const std::set<pid_t>& tree, bool filtered) {
  const double hz = static_cast<double>(opts_.clock_ticks_per_s);
  Mine mine;
  mine.reserve(seen_.size());
  char path[64];
  std::string cgroup_text;
  for (const auto& s : seen_) {
    if (run_mode_ && !tree.count(s.pid)) continue;
    const ProcessId id{s.pid, static_cast<int64_t>(s.st.start_time)};
    bool have_cgroup = false;
    if (filtered && !known_.count(id) && !judged_in(s, id, cgroup_text, have_cgroup)) continue;
    auto [it, fresh] = known_.try_emplace(id);
    Known& k = it->second;
    if (fresh &&
        (have_cgroup || read_small_file(opts_.procfs_root + "/" + pid_path(path, s.pid, "cgroup"), cgroup_text))) {
      Unit u = parse_cgroup_unit(cgroup_text);
      k.unit = std::move(u.name);
      k.unit_kind = std::move(u.kind);
    }
    // A process first seen after the first scan started in the window: all its time is new. On the machine's first
    // scan, what processes used before the recording started is not counted.
    const uint64_t before = fresh ? (first_scan_ && !run_mode_ ? s.st.cpu_ticks() : 0) : k.cpu_ticks;
    const uint64_t t = s.st.cpu_ticks();
    k.cpu_s = t >= before ? static_cast<double>(t - before) / hz : 0;
    k.cpu_ticks = t;
    k.ppid = s.st.ppid;
    if (k.comm != s.st.comm) k.comm = s.st.comm;
    k.rss_pages = s.st.rss_pages;
    k.kernel_thread = s.st.kernel_thread;
    k.scan = scan_no_;
    mine.emplace_back(s.pid, it);
  }
  for (auto it = outside_.begin(); it != outside_.end();)
    it = it->second.first == scan_no_ ? std::next(it) : outside_.erase(it);
  return mine;
}

bool ProcessTracker::judged_in(const Seen& s, const ProcessId& id, std::string& cgroup_text, bool& have_cgroup) {
  // A process outside stays outside (its cgroup and environ are read once, not every scan) until it execs: a child
  // of slurmstepd is moved into the job's cgroup and given the job's environment between fork and exec.
  auto o = outside_.find(id);
  if (o != outside_.end() && o->second.second == s.st.comm) {
    o->second.first = scan_no_;
    return false;
  }
  char path[64];
  have_cgroup = read_small_file(opts_.procfs_root + "/" + pid_path(path, s.pid, "cgroup"), cgroup_text);
  if (!have_cgroup) cgroup_text.clear();
  if (!admits(s.pid, cgroup_text)) {
    outside_.insert_or_assign(id, std::pair{scan_no_, s.st.comm});
    return false;
  }
  if (o != outside_.end()) outside_.erase(o);
  return true;
}

ProcessTracker::Known* ProcessTracker::find_mine(const Mine& mine, pid_t pid) {
  auto it = std::lower_bound(mine.begin(), mine.end(), pid, [](const auto& m, pid_t p) { return m.first < p; });
  return it != mine.end() && it->first == pid ? &it->second->second : nullptr;
}

void ProcessTracker::fold_gone(const Mine& mine, ProcessSnapshot& snap) {
  const double hz = static_cast<double>(opts_.clock_ticks_per_s);
  // A tracked process gone since the last scan was reaped by its parent, whose cutime/cstime now hold its whole
  // lifetime: take off what was already counted, so only its last moments go to the parent.
  for (auto it = known_.begin(); it != known_.end();) {
    const Known& k = it->second;
    if (k.scan == scan_no_) {
      ++it;
      continue;
    }
    if (Known* parent = find_mine(mine, static_cast<pid_t>(k.ppid)))
      parent->cpu_s = std::max(0.0, parent->cpu_s - static_cast<double>(k.cpu_ticks) / hz);
    if (k.rowed) snap.rows.push_back(gone_row(it->first, k));
    it = known_.erase(it);
  }
}

void ProcessTracker::list_gpu_processes(ProcessSnapshot& snap) {
  // GPU use per process, from every source that lists it (milliseconds per call on a real driver).
  std::vector<std::shared_ptr<Source>> gpu_sources;
  {
    std::lock_guard lock(gpu_sources_mu_);
    gpu_sources = gpu_sources_;
  }
  for (const auto& src : gpu_sources)
    src->gpu_processes(snap.gpu_procs, snap.gpus_listed);
}

std::map<ProcessId, double> ProcessTracker::attribute_gpu_processes(ProcessSnapshot& snap, const Mine& mine,
                                                                    const std::set<pid_t>& tree, bool filtered) {
  std::map<ProcessId, double> gpu_score;
  for (auto& g : snap.gpu_procs) {
    auto m = std::lower_bound(mine.begin(), mine.end(), static_cast<pid_t>(g.id.pid),
                              [](const auto& x, pid_t p) { return x.first < p; });
    if (m != mine.end() && m->first == g.id.pid) {
      g.id = m->second->first;
      g.in_run = true;
    } else if (!run_mode_ && !filtered) {
      // Not visible in this /proc (another pid namespace): kept under its pid with start time 0.
      g.in_run = true;
    } else {
      // Started after this scan read /proc, or a neighbour (someone else's process on the same GPU): its parent
      // chain says which.
      g.in_run = in_tree_by_parents(g, tree);
    }
    gpu_score[g.id] += g.sm_pct.value_or(0) + (g.mem_used_bytes ? 1e-12 * static_cast<double>(*g.mem_used_bytes) : 0);
  }
  return gpu_score;
}

bool ProcessTracker::in_tree_by_parents(GpuProcessSample& g, const std::set<pid_t>& tree) {
  PidStat st;
  pid_t p = static_cast<pid_t>(g.id.pid);
  for (int depth = 0; depth < 64 && p > 1; ++depth) {
    if (const Seen* s = find_seen(p)) {
      st = s->st;
    } else if (!read_small_file(opts_.procfs_root + "/" + std::to_string(p) + "/stat", buf_) ||
               !parse_pid_stat(buf_, st)) {
      return false;
    }
    if (depth == 0) g.id.start_time = static_cast<int64_t>(st.start_time);
    if (tree.count(p)) return true;
    p = static_cast<pid_t>(st.ppid);
  }
  return false;
}

std::vector<const ProcessTracker::Known*>
ProcessTracker::busiest(const Mine& mine, const std::map<ProcessId, double>& gpu_score, double window_s) const {
  // Sampled (process_samples rows): every process of a run; the top N of a machine by CPU or GPU use. Memory detail
  // (smaps_rollup walks every mapping) and I/O are read for the top N only, in either mode: a run of 1,000
  // processes would otherwise cost 6x a bare /proc scan (bench/process_tracking.cpp); the others' RSS comes from stat.
  std::vector<std::pair<double, const Known*>> rank;
  rank.reserve(mine.size());
  for (auto& [pid, it] : mine) {
    auto g = gpu_score.find(it->first);
    rank.emplace_back(it->second.cpu_s / std::max(window_s, 1e-9) * 100 + (g != gpu_score.end() ? g->second : 0),
                      &it->second);
  }
  // The top N are the busiest of those that used a CPU or a GPU in the window: a process that did neither (most of a
  // machine's, kernel threads first) is no one's top, gets no row and costs no detail read (on an idle machine the
  // 20 lowest pids, kernel threads, took two thirds of a scan's system calls for nothing).
  const size_t active =
      static_cast<size_t>(std::count_if(rank.begin(), rank.end(), [](const auto& r) { return r.first > 0; }));
  const size_t n = std::min(opts_.top_processes, active);
  std::partial_sort(rank.begin(), rank.begin() + static_cast<long>(n), rank.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const Known*> top(n);
  for (size_t i = 0; i < n; ++i)
    top[i] = rank[i].second;
  std::sort(top.begin(), top.end()); // for binary_search
  return top;
}

ProcessSample ProcessTracker::sample(const ProcessId& id, Known& k, bool detail, bool every, size_t top_n,
                                     double window_s, std::chrono::steady_clock::time_point now) {
  static const long page_bytes = ::sysconf(_SC_PAGESIZE) > 0 ? ::sysconf(_SC_PAGESIZE) : 4096;
  ProcessSample p;
  p.id = id;
  p.comm = k.comm;
  p.unit = k.unit;
  p.unit_kind = k.unit_kind;
  p.in_run = true;
  p.cpu_time_s = k.cpu_s;
  p.sampled = every || detail;
  // Known from stat for every process, sampled or not: `top` and serve's board show them (an idle process is at
  // 0 %, not unknown); only the sampled get process_samples rows.
  if (window_s > 0) p.cpu_pct = p.cpu_time_s / window_s * 100;
  if (k.rss_pages >= 0) p.rss_bytes = k.rss_pages * page_bytes;
  // A kernel thread has no memory map (smaps_rollup: ESRCH) and does no I/O.
  if (detail && !k.kernel_thread) read_detail(id, k, p, top_n, window_s, now);
  if (p.sampled && !k.rowed) read_identity(id, k);
  return p;
}

void ProcessTracker::read_detail(const ProcessId& id, Known& k, ProcessSample& p, size_t top_n, double window_s,
                                 std::chrono::steady_clock::time_point now) {
  const std::string dir = opts_.procfs_root + "/" + std::to_string(id.pid);
  // smaps_rollup walks the process's page tables: milliseconds for a process of many GiB (a training job), every
  // scan. Each process's read is spaced by its own cost so that the top N's together stay under 0.01 % of a core
  // (the NVML calls alone for 8 GPUs at 1 s cost about 0.02 %), however long that makes the gap (at most ten
  // minutes: a read of 15 ms for each of 20 processes); between reads PSS and USS are missing, RSS comes from stat.
  const double now_s = std::chrono::duration<double>(now.time_since_epoch()).count();
  if (now_s >= k.next_smaps_s) {
    const double c0 = thread_cpu_s();
    if (read_small_file(dir + "/smaps_rollup", buf_)) {
      const PidMemory m = parse_smaps_rollup(buf_);
      if (m.rss_bytes) p.rss_bytes = m.rss_bytes;
      p.pss_bytes = m.pss_bytes;
      p.uss_bytes = m.uss_bytes;
    }
    const double cost_s = thread_cpu_s() - c0;
    k.next_smaps_s = now_s + std::min(600.0, cost_s * static_cast<double>(std::max<size_t>(top_n, 1)) / kSmapsBudget);
  }
  if (read_small_file(dir + "/io", buf_)) { // not readable for other users' processes: missing
    const PidIo io = parse_pid_io(buf_);
    if (window_s > 0 && io.read_bytes && k.read_bytes && *io.read_bytes >= *k.read_bytes)
      p.read_bytes_per_s = static_cast<double>(*io.read_bytes - *k.read_bytes) / window_s;
    if (window_s > 0 && io.write_bytes && k.write_bytes && *io.write_bytes >= *k.write_bytes)
      p.write_bytes_per_s = static_cast<double>(*io.write_bytes - *k.write_bytes) / window_s;
    k.read_bytes = io.read_bytes;
    k.write_bytes = io.write_bytes;
  }
}

void ProcessTracker::read_identity(const ProcessId& id, Known& k) {
  k.rowed = true;
  const std::string dir = opts_.procfs_root + "/" + std::to_string(id.pid);
  if (read_small_file(dir + "/cmdline", buf_)) {
    std::replace(buf_.begin(), buf_.end(), '\0', ' ');
    while (!buf_.empty() && buf_.back() == ' ')
      buf_.pop_back();
    k.cmdline = buf_;
  }
  struct stat sb {};
  if (::stat(dir.c_str(), &sb) == 0) k.uid = sb.st_uid;
}

void ProcessTracker::name_pods(const Mine& mine, ProcessSnapshot& snap) {
  // The names of this scan's pods, from the kubelet's list (a lookup in a cache; a miss asks the kubelet thread for
  // a fetch and the pod stays named by uid until its answer).
  for (auto& [pid, it] : mine) {
    const Known& k = it->second;
    if (k.unit_kind != "k8s-pod" || k.unit.size() <= 4) continue;
    bool have = false;
    for (const auto& [u, names] : snap.pods)
      have = have || u == k.unit;
    if (have) continue;
    if (auto names = opts_.pod_names->find(k.unit.substr(4))) snap.pods.emplace_back(k.unit, std::move(*names));
  }
}

} // namespace wattscope
