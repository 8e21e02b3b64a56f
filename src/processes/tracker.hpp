// Follows processes off the sampling thread, at most once a second whatever --interval is, and hands each scan to
// accounting with the next frame (core/processes.hpp). `run`: the wrapped command's whole tree, found by parent pid
// each scan (plus the members of its own cgroup, where one could be made), identified by (pid, start time). `record`
// and `serve`: every process, grouped into units by cgroup, the top N sampled. The thread sleeps between scans and
// does nothing until it has something to track.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/fd.hpp"
#include "core/processes.hpp"
#include "processes/kubelet.hpp"
#include "processes/procfs.hpp"
#include "sources/source.hpp"

namespace wattscope {

struct TrackerOptions {
  std::string procfs_root = "/proc";
  std::chrono::nanoseconds period = std::chrono::seconds(1); // never shorter than 1 s
  size_t top_processes = 20;                                 // machine mode: processes sampled per scan
  long clock_ticks_per_s = 100;                              // sysconf(_SC_CLK_TCK)
  bool keep_stat_fds = true; // on the kernel's procfs, keep /proc/PID/stat open between scans (within a budget)
  std::shared_ptr<KubeletPodNames> pod_names; // issue 18: names "pod <uid>" units; null: uids only
  // record --only-unit / --only-env (issue 18, a Slurm job's run): in machine mode, only the processes whose cgroup
  // unit is one of only_units ("slurm job 42") or whose environment holds one of only_env ("SLURM_JOB_ID=42") are
  // the run's; the others are left out, as `run` leaves out what is not its command's. Each process is judged once.
  std::vector<std::string> only_units;
  std::vector<std::string> only_env;
  bool filtered() const { return !only_units.empty() || !only_env.empty(); }
};

class ProcessTracker {
public:
  // gpu_sources: the sources whose lists_gpu_processes() is true; shared, as the sampler shares them.
  ProcessTracker(TrackerOptions opts, std::vector<std::shared_ptr<Source>> gpu_sources);
  // Issue 31: a GPU source that opened after the run began (its library's init ran beside the command). Thread-safe.
  void add_gpu_source(std::shared_ptr<Source> source);
  ~ProcessTracker();
  ProcessTracker(const ProcessTracker&) = delete;
  ProcessTracker& operator=(const ProcessTracker&) = delete;

  // Machine mode, or run mode once follow() names the root. cgroup_dir: the run's own cgroup v2 directory, whose
  // cgroup.procs lists daemonised descendants too; empty when none could be made.
  // start_machine() also raises the soft limit on open files (to at most 65536) so that every process's stat can stay
  // open between scans; `record` and `serve` start no command that would inherit it.
  void start_machine();
  void follow(pid_t root, std::string cgroup_dir = {});
  void stop(); // joins the thread; a last scan is taken so the end of the run is covered
  // The latest scan not yet taken, or null.
  std::shared_ptr<ProcessSnapshot> take();
  // After stop(): a `processes` row for every process still known, marked gone (accounting sets its ticks).
  std::vector<ProcessRow> final_rows();
  // One scan now, on the caller's thread (the thread calls this; tests and benchmarks may too).
  std::shared_ptr<ProcessSnapshot> scan();
  const TrackerOptions& options() const { return opts_; }
  // Filtered mode (only_units / only_env), after stop(): the Slurm steps its processes belonged to ("batch", "0",
  // "extern"), from the step_<ID> part of their cgroup path or their SLURM_STEP_ID; sorted, each once.
  std::vector<std::string> slurm_steps() const;
  // Filtered mode, after stop(): slurm_array_job_id and slurm_array_task_id from the environment of the job's
  // processes (SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID), when it is a job array's task; empty otherwise.
  std::map<std::string, std::string> slurm_array() const;

private:
  struct Known {
    uint64_t cpu_ticks = 0; // utime + stime + cutime + cstime at the last scan
    int64_t ppid = 0;
    std::optional<int64_t> read_bytes, write_bytes;
    std::string comm;
    std::string unit, unit_kind;
    bool rowed = false; // sampled at least once: it gets a `processes` row when gone or at the end
    std::string cmdline;
    std::optional<int64_t> uid;
    uint64_t scan = 0; // the scan that last saw it
    double cpu_s = 0;  // CPU seconds in this scan's window
    int64_t rss_pages = -1;
    bool kernel_thread = false;
    double next_smaps_s = 0; // steady-clock seconds from which its smaps_rollup may be read again
  };
  // One process's /proc/PID/stat as this scan read it.
  struct Seen {
    pid_t pid;
    PidStat st;
  };
  // This scan's processes that are tracked, in pid order, each with its entry in known_.
  using Mine = std::vector<std::pair<pid_t, std::map<ProcessId, Known>::iterator>>;
  void loop();
  // The steps of a scan, in order.
  void open_root();                          // once: the procfs root, and whether stat descriptors may be kept
  void read_host_cpu(ProcessSnapshot& snap); // the host's busy and total CPU time in the window (/proc/stat)
  void read_every_stat(std::chrono::steady_clock::time_point now); // seen_: every process's stat
  void read_process(pid_t pid, bool read_kthreads); // one process's stat (a known kernel thread's schedstat) to seen_
  std::set<pid_t> run_tree();                       // run mode: the root, its cgroup's members, their descendants
  Mine update_known(const std::set<pid_t>& tree, bool filtered); // known_ brought to this scan; the run's processes
  // Filtered mode, a process not yet known: whether it is the run's (its cgroup text read into cgroup_text).
  bool judged_in(const Seen& s, const ProcessId& id, std::string& cgroup_text, bool& have_cgroup);
  void fold_gone(const Mine& mine, ProcessSnapshot& snap); // processes gone: their parents' time, their rows
  void list_gpu_processes(ProcessSnapshot& snap);          // every GPU source's process list, into snap.gpu_procs
  // Each GPU process identified by this scan's (pid, start time) and judged the run's or not; its GPU use by id.
  std::map<ProcessId, double> attribute_gpu_processes(ProcessSnapshot& snap, const Mine& mine,
                                                      const std::set<pid_t>& tree, bool filtered);
  bool in_tree_by_parents(GpuProcessSample& g, const std::set<pid_t>& tree);
  // The top N by CPU and GPU use, of those that used either: sorted by address, for binary_search.
  std::vector<const Known*> busiest(const Mine& mine, const std::map<ProcessId, double>& gpu_score,
                                    double window_s) const;
  // One process's sample; detail (the top N): its memory map and I/O; every: all processes are sampled (a run).
  ProcessSample sample(const ProcessId& id, Known& k, bool detail, bool every, size_t top_n, double window_s,
                       std::chrono::steady_clock::time_point now);
  void read_detail(const ProcessId& id, Known& k, ProcessSample& p, size_t top_n, double window_s,
                   std::chrono::steady_clock::time_point now);
  void read_identity(const ProcessId& id, Known& k);       // its first row: command line and owner
  void name_pods(const Mine& mine, ProcessSnapshot& snap); // the kubelet's names of this scan's pods
  const Seen* find_seen(pid_t pid) const;                  // in seen_, sorted by pid
  static Known* find_mine(const Mine& mine, pid_t pid);
  static ProcessRow gone_row(const ProcessId& id, const Known& k); // its `processes` row, marked gone
  // Reads /proc/PID/stat into stat_buf_: through a descriptor kept open from an earlier scan where procfs is the real
  // one (a kept descriptor of a process that is gone fails with ESRCH, so a reused pid is never read as the old
  // process), else opened now. False when the process is gone.
  bool read_stat(pid_t pid, std::string_view& text);
  void close_stale_fds();
  // Filtered mode: whether a process first seen now is the run's (its cgroup text is in buf_ on entry, read again
  // only for the environment); notes its Slurm step.
  bool admits(pid_t pid, const std::string& cgroup_text);

  TrackerOptions opts_;
  std::vector<std::shared_ptr<Source>> gpu_sources_; // under gpu_sources_mu_ (issue 31: one may join late)
  std::mutex gpu_sources_mu_;
  bool run_mode_ = false;
  pid_t root_ = 0;
  std::string cgroup_dir_;
  // scan state: touched only by whoever scans (the thread, or the caller of scan() when no thread runs)
  std::map<ProcessId, Known> known_;
  uint64_t scan_no_ = 0;
  bool first_scan_ = true;
  std::optional<std::pair<uint64_t, uint64_t>> prev_cpu_; // busy, total ticks of /proc/stat
  std::chrono::steady_clock::time_point prev_at_{};
  std::string buf_;
  // Reused from scan to scan, so a steady scan allocates little: the stat of every process, the read buffer.
  std::vector<Seen> seen_;
  std::vector<char> stat_buf_;
  // The procfs root, open; whether it is the kernel's procfs (then stat descriptors are kept open between scans,
  // within a budget of descriptors); the kept ones by pid, with the scan that last read them.
  UniqueFd root_fd_;
  bool real_procfs_ = false;
  size_t fd_budget_ = 0;
  std::unordered_map<pid_t, std::pair<UniqueFd, uint64_t>> stat_fds_;
  // The last pid the kernel handed out (/proc/sys/kernel/ns_last_pid), read before each listing of /proc: while it
  // has not moved no process (or thread) was created, so the last scan's pids, less those gone, are all there are and
  // /proc need not be listed again (at most a minute, in case the pids went round to the same number).
  UniqueFd last_pid_fd_;
  std::optional<uint64_t> last_pid_;
  std::chrono::steady_clock::time_point listed_at_{};
  std::vector<pid_t> pids_;
  bool listed_ = false; // this scan listed /proc (for -v)
  // Known kernel threads: their CPU time from /proc/PID/schedstat (a read costs ~60 % of a stat read, cold), the rest
  // of their stat as last read (once a minute; at every listing where procfs is a fixture tree, whose files are not
  // kept open, so a reused pid shows only in stat). A kernel thread's time is always taken from schedstat once it is
  // known, so its CPU never mixes the two counts.
  struct KernelThread {
    PidStat st; // as last read; empty until its first schedstat read
    UniqueFd schedstat;
    uint64_t scan = 0; // the last scan that saw it: the others are gone, and let go of after each scan
  };
  std::unordered_map<pid_t, KernelThread> kthreads_;
  std::chrono::steady_clock::time_point kthreads_read_at_{};
  bool read_schedstat(pid_t pid, KernelThread& kt, uint64_t& ns);
  // Filtered mode: processes judged not the run's, with the scan that last saw them and their comm then (each is
  // judged again only after an exec).
  std::map<ProcessId, std::pair<uint64_t, std::string>> outside_;
  std::set<std::string> steps_;
  std::map<std::string, std::string> slurm_array_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  std::shared_ptr<ProcessSnapshot> latest_;
  std::thread thread_;
};

} // namespace wattscope
