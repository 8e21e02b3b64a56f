// What process tracking (issue 13) costs with 1,000 processes on the machine, at its 1 Hz: the tracker's scan
// against a bare /proc scan of the same processes in the same run (every /proc/PID/stat read once into a reused
// buffer and its pid, ppid and CPU times parsed: the least any tracker must do). Real processes, not a fixture: the
// benchmark forks N children that sleep in pause(), so procfs does its real work (a fixture tree of regular files
// would be cheaper to read than procfs, whose files are generated per read).
//
//   wattscope_bench_processes [--processes N] [--scans K] [--top N] [--period-ms 1000]
//
// Prints, per mode, CPU time per scan (this thread's), the ratio to the bare scan, and the share of one core at one
// scan a second. The goal (issue 13): under 0.5 % of one core.
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "accounting/accounting.hpp"
#include "processes/procfs.hpp"
#include "processes/tracker.hpp"
#include "server/process_board.hpp"

using namespace wattscope;

namespace {

std::chrono::milliseconds g_period{1000};

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// The floor: /proc listed, every stat read and its fields parsed, nothing kept.
size_t bare_scan(std::string& buf) {
  size_t n = 0;
  DIR* d = ::opendir("/proc");
  if (!d) return 0;
  char path[300]; // d_name is at most 255 bytes
  while (dirent* e = ::readdir(d)) {
    const char* name = e->d_name;
    if (name[0] < '1' || name[0] > '9') continue;
    std::snprintf(path, sizeof path, "/proc/%s/stat", name);
    if (!read_small_file(path, buf)) continue;
    PidStat st;
    if (parse_pid_stat(buf, st)) ++n;
  }
  ::closedir(d);
  return n;
}

struct Figures {
  double per_scan_s = 0;
  size_t processes = 0;
};

template <class F> Figures measure(int scans, F&& scan) {
  scan(); // warm: first-seen work (cgroup, cmdline) is a one-off per process, not the steady cost
  Figures f;
  std::vector<double> each;
  for (int i = 0; i < scans; ++i) {
    // At the tracker's own pace: what it reads depends on time (smaps_rollup is spaced by its cost), and caches are
    // as cold as a second of other work leaves them.
    std::this_thread::sleep_for(g_period);
    const double t0 = thread_cpu_s();
    f.processes = scan();
    each.push_back(thread_cpu_s() - t0);
  }
  std::sort(each.begin(), each.end());
  f.per_scan_s = each[each.size() / 2]; // median: a scan that met a page fault storm does not set the figure
  return f;
}

} // namespace

int main(int argc, char** argv) {
  int nproc = 1000, scans = 11;
  size_t top = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--processes")
      nproc = std::atoi(argv[i + 1]);
    else if (a == "--scans")
      scans = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--top")
      top = static_cast<size_t>(std::atoi(argv[i + 1]));
    else if (a == "--period-ms")
      g_period = std::chrono::milliseconds(std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: %s [--processes N] [--scans K] [--top N] [--period-ms MS]\n", argv[0]);
      return 2;
    }
  }
  // N sleeping children, which die with us (PR_SET_PDEATHSIG) should the benchmark be killed.
  const pid_t me = ::getpid();
  std::vector<pid_t> kids;
  for (int i = 0; i < nproc; ++i) {
    const pid_t p = ::fork();
    if (p < 0) {
      std::perror("fork");
      break;
    }
    if (p == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != me) ::_exit(0);
      for (;;)
        ::pause();
    }
    kids.push_back(p);
  }
  std::printf("process tracking, %zu sleeping child processes (+ the machine's own), median of %d scans\n", kids.size(),
              scans);

  std::string buf;
  double downstream_only = 0;
  const Figures bare = measure(scans, [&] { return bare_scan(buf); });

  // As start_machine() does: a soft limit on open files high enough to keep every stat open between scans.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 65536);
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  ::getrlimit(RLIMIT_NOFILE, &rl);
  std::printf("open-file limit %llu\n", static_cast<unsigned long long>(rl.rlim_cur));
  TrackerOptions opts;
  opts.top_processes = top;
  if (const long hz = ::sysconf(_SC_CLK_TCK); hz > 0) opts.clock_ticks_per_s = hz;
  // record / serve: the whole machine, the top N sampled. No GPU source: NVML's calls are the driver's cost, made
  // once per GPU, not per process.
  ProcessTracker machine(opts, {});
  const Figures mach = measure(scans, [&] { return machine.scan()->procs.size(); });
  TrackerOptions reopen = opts;
  reopen.keep_stat_fds = false; // where the limit is low, or /proc is not the kernel's
  ProcessTracker machine_reopen(reopen, {});
  const Figures mach_reopen = measure(scans, [&] { return machine_reopen.scan()->procs.size(); });
  // run: the benchmark's own tree (the 1,000 children are the run's processes).
  ProcessTracker run(opts, {});
  run.follow(me); // starts the tracker's thread, which scans once; then the scans are taken here
  run.stop();
  const Figures tree = measure(scans, [&] { return run.scan()->procs.size(); });

  // Downstream, on the sampler thread once per scan: accounting adopts the scan (shares, totals) and, in serve, the
  // process board sorts and formats the top N. The machine scan's snapshots, with measured CPU energy.
  Accounting acc({});
  ProcessBoardBuilder board(top, "bench");
  int64_t tick = 0;
  double pkg_j = 0;
  const Figures downstream = measure(scans, [&] {
    auto snap = machine.scan();
    const double t0 = thread_cpu_s();
    Frame f;
    f.tick = ++tick;
    f.cpu.package_energy_j = pkg_j += 50;
    f.cpu.package_power_w = 50;
    f.cpu.power_method = "counter";
    f.processes = snap;
    acc.process(f);
    board.build(*snap);
    // only the downstream part is this figure's: the scan's own time is taken back off below
    downstream_only += thread_cpu_s() - t0;
    return snap->procs.size();
  });
  auto row = [&](const char* what, const Figures& f) {
    std::printf("  %-34s %6zu processes  %8.3f ms CPU per scan  %5.2fx bare  %6.3f %% of one core at 1 Hz\n", what,
                f.processes, f.per_scan_s * 1e3, f.per_scan_s / bare.per_scan_s, f.per_scan_s * 100);
  };
  row("bare /proc scan (stat only)", bare);
  row("tracker, machine (record/serve)", mach);
  row("tracker, machine, stat reopened", mach_reopen);
  row("tracker, run (the command's tree)", tree);
  Figures acc_fig = downstream;
  acc_fig.per_scan_s = downstream_only / (scans + 1); // a mean (the warm-up scan included), not a median
  row("accounting + serve board, per scan", acc_fig);

  for (pid_t p : kids)
    ::kill(p, SIGKILL);
  for (pid_t p : kids)
    ::waitpid(p, nullptr, 0);
  return 0;
}
