// Reading one process from procfs, and naming the unit (job, pod, container, service) its cgroup belongs to. Pure
// parsers are exposed for fixture tests; readers take the procfs root the sources already use (--procfs-root).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace wattscope {

struct PidStat {
  std::string comm;
  char state = '?';
  int64_t ppid = 0;
  uint64_t utime = 0, stime = 0, cutime = 0, cstime = 0; // clock ticks
  uint64_t start_time = 0;                               // clock ticks after boot
  int64_t rss_pages = 0;                                 // field 24: resident set, in pages
  bool kernel_thread = false;                            // field 9 has PF_KTHREAD: no memory map, no cmdline
  uint64_t cpu_ticks() const { return utime + stime + cutime + cstime; }
};
// /proc/PID/stat. The comm may hold spaces and parentheses: it runs to the last ')'.
bool parse_pid_stat(std::string_view text, PidStat& out);
// /proc/PID/schedstat: "SUM_EXEC_RUNTIME_NS RUN_DELAY_NS TIMESLICES"; the first, the task's time on a CPU.
bool parse_schedstat_ns(std::string_view text, uint64_t& ns);

struct PidMemory {
  std::optional<int64_t> rss_bytes, pss_bytes, uss_bytes;
};
// /proc/PID/smaps_rollup: Rss, Pss, and USS = Private_Clean + Private_Dirty + Private_Hugetlb.
PidMemory parse_smaps_rollup(std::string_view text);

struct PidIo {
  std::optional<int64_t> read_bytes, write_bytes; // storage bytes (read_bytes/write_bytes, not rchar/wchar)
};
PidIo parse_pid_io(std::string_view text);

struct Unit {
  std::string name; // "slurm job 4242", "pod 0f1e…", "docker 3fa9c1d2e4b5", "nginx.service", "session-3.scope"
  std::string kind; // slurm-job | k8s-pod | container | systemd-service | user-session; empty: none
};
// The unit of a process from its /proc/PID/cgroup text (the v2 "0::" line, else the systemd v1 line). The most
// specific match wins, in this order: Slurm job (slurm/uid_*/job_N, or job_N under slurmstepd), Kubernetes pod
// (kubepods…pod<uid>), container (docker-<id>.scope, docker/<id>, cri-containerd-<id>, crio-<id>, libpod-<id>),
// systemd service (*.service), user session (session-N.scope).
Unit parse_cgroup_unit(std::string_view cgroup_text);
// The cgroup v2 path of a process ("/user.slice/…"), from the "0::" line; empty when there is none.
std::string cgroup_v2_path(std::string_view cgroup_text);

// Reads a small procfs file whole; false when it cannot be opened (the process is gone, or not ours to read).
bool read_small_file(const std::string& path, std::string& out);

} // namespace wattscope
