// Attribution parts (issue 13): units from cgroup paths, the process tracker on procfs fixture trees, and the energy
// split, whose parts add up to the measured energy.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "../support/support.hpp"
#include "accounting/accounting.hpp"
#include "processes/procfs.hpp"
#include "processes/tracker.hpp"
#include "server/process_board.hpp"
#include "sources/nvml/gpu_grab.hpp"
#include "sources/nvml/gpu_selection.hpp"

namespace unit_attribution { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope

namespace {

TEST(CgroupUnit, RecognisesSlurmPodsContainersServicesSessions) {
  EXPECT_EQ(parse_cgroup_unit("0::/slurm/uid_1000/job_4242/step_0/task_0\n").name, "slurm job 4242");
  EXPECT_EQ(parse_cgroup_unit("0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n").kind, "slurm-job");
  const Unit pod = parse_cgroup_unit("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                                     "1f2e3d4c_5b6a_7980_a1b2_c3d4e5f60718.slice/cri-containerd-"
                                     "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n");
  EXPECT_EQ(pod.kind, "k8s-pod");
  EXPECT_EQ(pod.name, "pod 1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718");
  EXPECT_EQ(parse_cgroup_unit("0::/kubepods/besteffort/pod0a1b2c3d-aaaa-bbbb-cccc-111122223333/abc\n").name,
            "pod 0a1b2c3d-aaaa-bbbb-cccc-111122223333");
  const Unit docker = parse_cgroup_unit(
      "0::/system.slice/docker-3fa9c1d2e4b5a6978800112233445566778899aabbccddeeff00112233445566.scope\n");
  EXPECT_EQ(docker.kind, "container");
  EXPECT_EQ(docker.name, "docker 3fa9c1d2e4b5");
  EXPECT_EQ(parse_cgroup_unit("0::/machine.slice/libpod-aabbccddeeff00112233.scope/container\n").name,
            "podman aabbccddeeff");
  EXPECT_EQ(
      parse_cgroup_unit("12:cpu:/docker/aabbccddeeff00112233\n1:name=systemd:/docker/aabbccddeeff00112233\n").name,
      "docker aabbccddeeff");
  EXPECT_EQ(parse_cgroup_unit("0::/system.slice/nginx.service\n").name, "nginx.service");
  EXPECT_EQ(parse_cgroup_unit("0::/user.slice/user-1000.slice/session-3.scope\n").kind, "user-session");
  EXPECT_EQ(parse_cgroup_unit("0::/\n").kind, "");
  EXPECT_EQ(parse_cgroup_unit("garbage").kind, "");
}

TEST(ProcfsParsers, StatWithSpacesInCommSmapsAndIo) {
  PidStat st;
  ASSERT_TRUE(parse_pid_stat("42 (my (odd) proc) S 7 42 42 0 -1 4194560 100 0 0 0 150 50 30 20 20 0 1 0 "
                             "123456 1000 10 18446744073709551615",
                             st));
  EXPECT_EQ(st.comm, "my (odd) proc");
  EXPECT_EQ(st.ppid, 7);
  EXPECT_EQ(st.cpu_ticks(), 150u + 50 + 30 + 20);
  EXPECT_EQ(st.start_time, 123456u);
  EXPECT_FALSE(st.kernel_thread); // flags 4194560 = 0x400100: no PF_KTHREAD
  // A kworker as a 6.x kernel shows it: flags 0x04208060 has PF_KTHREAD (0x00200000).
  ASSERT_TRUE(parse_pid_stat("59 (kworker/1:1-events) I 2 0 0 0 -1 69238880 0 0 0 0 0 12 0 0 20 0 1 0 40 0 0 "
                             "18446744073709551615",
                             st));
  EXPECT_TRUE(st.kernel_thread);
  EXPECT_EQ(st.ppid, 2);
  EXPECT_FALSE(parse_pid_stat("42 (x) S 7", st));
  const PidMemory m = parse_smaps_rollup("Rss:  100 kB\nPss:   60 kB\nPrivate_Clean: 10 kB\nPrivate_Dirty: 30 kB\n");
  EXPECT_EQ(m.rss_bytes, 100 * 1024);
  EXPECT_EQ(m.pss_bytes, 60 * 1024);
  EXPECT_EQ(m.uss_bytes, 40 * 1024);
  EXPECT_FALSE(parse_smaps_rollup("").rss_bytes.has_value()); // missing, not 0
  // Values no kernel writes (fuzz_procfs: 1440737190741910300 kB overflowed the multiplication) are unknown.
  EXPECT_FALSE(parse_smaps_rollup("Rss:  1440737190741910300 kB\nPss: 60 kB\n").rss_bytes.has_value());
  EXPECT_EQ(parse_smaps_rollup("Rss:  1440737190741910300 kB\nPss: 60 kB\n").pss_bytes, 60 * 1024);
  EXPECT_FALSE(parse_smaps_rollup("Rss: -4 kB\n").rss_bytes.has_value());
  EXPECT_FALSE(parse_smaps_rollup("Private_Clean: 1125899906842625 kB\nPrivate_Dirty: 1 kB\n").uss_bytes.has_value());
  const PidIo io = parse_pid_io("rchar: 5\nwchar: 6\nread_bytes: 4096\nwrite_bytes: 8192\n");
  EXPECT_EQ(io.read_bytes, 4096);
  EXPECT_EQ(io.write_bytes, 8192);
}

// A fixture /proc: stat lines with the fields the tracker reads.
void proc(const TempDir& d, int pid, int ppid, uint64_t start, uint64_t utime, uint64_t cutime = 0,
          const std::string& comm = "worker", const std::string& cgroup = "0::/system.slice/slurmstepd.scope/job_9\n",
          uint64_t flags = 0) {
  const std::string dir = d / ("proc/" + std::to_string(pid));
  write_file(dir + "/stat", std::to_string(pid) + " (" + comm + ") S " + std::to_string(ppid) + " 1 1 0 -1 " +
                                std::to_string(flags) + " 0 0 0 0 " + std::to_string(utime) + " 0 " +
                                std::to_string(cutime) + " 0 20 0 1 0 " + std::to_string(start) + " 1000 10\n");
  write_file(dir + "/cgroup", cgroup);
  write_file(dir + "/smaps_rollup", "Rss: 8 kB\nPss: 4 kB\nPrivate_Clean: 1 kB\nPrivate_Dirty: 2 kB\n");
  write_file(dir + "/cmdline", comm + std::string("\0--flag\0", 8));
}
void host_stat(const TempDir& d, uint64_t busy, uint64_t idle) {
  write_file(d / "proc/stat", "cpu  " + std::to_string(busy) + " 0 0 " + std::to_string(idle) + " 0 0 0 0 0 0\n");
}
void remove_proc(const TempDir& d, int pid) {
  std::filesystem::remove_all(d / ("proc/" + std::to_string(pid)));
}

// Issue 12: memory detail (smaps_rollup) is read for the top N, and only among processes that used a CPU in the
// window; a kernel thread (PF_KTHREAD) is never read for it (it has no memory map: the kernel answers ESRCH).
TEST(ProcessTracker, DetailOnlyForActiveProcessesAndNeverForKernelThreads) {
  TempDir d;
  host_stat(d, 1000, 1000);
  proc(d, 100, 1, 5000, 10);
  proc(d, 101, 2, 5001, 10, 0, "kworker/0:1", "0::/\n", 0x00208040); // flagged a kernel thread
  proc(d, 102, 1, 5002, 10);
  TrackerOptions o;
  o.procfs_root = d / "proc";
  o.clock_ticks_per_s = 100;
  ProcessTracker t(o, {}); // the machine, scanned by hand: the first scan counts no one's earlier time
  ASSERT_TRUE(t.scan());
  host_stat(d, 1300, 1100);
  proc(d, 100, 1, 5000, 30);                                         // busy in the window
  proc(d, 101, 2, 5001, 30, 0, "kworker/0:1", "0::/\n", 0x00208040); // busy too
  auto s = t.scan();                                                 // 102 did nothing
  ASSERT_TRUE(s);
  std::map<int, const ProcessSample*> by_pid;
  for (const auto& p : s->procs)
    by_pid[static_cast<int>(p.id.pid)] = &p;
  ASSERT_EQ(by_pid.size(), 3u);
  EXPECT_TRUE(by_pid[100]->sampled);
  EXPECT_EQ(by_pid[100]->pss_bytes, 4 * 1024);
  EXPECT_TRUE(by_pid[101]->sampled) << "a busy kernel thread is one of the top N";
  EXPECT_FALSE(by_pid[101]->pss_bytes.has_value()) << "but is not read for memory";
  EXPECT_FALSE(by_pid[102]->sampled) << "a process that used no CPU in the window is no one's top";
  EXPECT_FALSE(by_pid[102]->pss_bytes.has_value());
  EXPECT_EQ(by_pid[102]->cpu_pct, 0.0) << "yet its CPU % is known (top shows 0.0, not '-')";
  EXPECT_EQ(by_pid[102]->rss_bytes, 10 * ::sysconf(_SC_PAGESIZE)) << "and its RSS, from stat";
}

// Issue 12: listing /proc cost as much as reading every process's stat, so it is listed only when the kernel has
// handed out a pid since the last listing (ns_last_pid moved); otherwise the last scan's processes, less those gone,
// are all there are. The fixture cheats to show it: a process that appears while ns_last_pid stays put is not seen
// until it moves.
TEST(ProcessTracker, ListsProcOnlyAfterAPidWasHandedOut) {
  TempDir d;
  host_stat(d, 1000, 1000);
  write_file(d / "proc/sys/kernel/ns_last_pid", "300\n");
  proc(d, 100, 1, 5000, 10);
  proc(d, 101, 1, 5001, 10);
  TrackerOptions o;
  o.procfs_root = d / "proc";
  o.clock_ticks_per_s = 100;
  ProcessTracker t(o, {});
  auto pids = [](const std::shared_ptr<ProcessSnapshot>& s) {
    std::set<int> out;
    for (const auto& p : s->procs)
      out.insert(static_cast<int>(p.id.pid));
    return out;
  };
  EXPECT_EQ(pids(t.scan()), (std::set<int>{100, 101}));
  remove_proc(d, 101);
  proc(d, 102, 1, 5002, 10); // appears with no pid handed out: only a fixture can do that
  EXPECT_EQ(pids(t.scan()), (std::set<int>{100})) << "not listed again: 101 gone, 102 not seen";
  write_file(d / "proc/sys/kernel/ns_last_pid", "302\n");
  EXPECT_EQ(pids(t.scan()), (std::set<int>{100, 102})) << "a pid was handed out: listed";
  remove_proc(d, 100);
  EXPECT_EQ(pids(t.scan()), (std::set<int>{102}));
}

// Issue 12: between listings a kernel thread's CPU time is read from its schedstat (nanoseconds; a read costs ~60 % of
// a stat read), the rest of its stat kept from the last listing, where its comm is read again (kworkers rename
// themselves). Once known, its time always comes from schedstat, so the two counts never mix.
TEST(ProcessTracker, KernelThreadsTimeFromSchedstatBetweenListings) {
  TempDir d;
  host_stat(d, 1000, 1000);
  write_file(d / "proc/sys/kernel/ns_last_pid", "300\n");
  proc(d, 100, 1, 5000, 10);
  proc(d, 101, 2, 5001, 7, 0, "kworker/0:1", "0::/\n", 0x00208040);
  write_file(d / "proc/101/schedstat", "1000000000 5 9\n"); // 1 s on a CPU: 100 ticks, not stat's 7
  TrackerOptions o;
  o.procfs_root = d / "proc";
  o.clock_ticks_per_s = 100;
  ProcessTracker t(o, {});
  auto kworker = [](const std::shared_ptr<ProcessSnapshot>& s) {
    for (const auto& p : s->procs)
      if (p.id.pid == 101) return p;
    return ProcessSample{};
  };
  ASSERT_EQ(kworker(t.scan()).id.pid, 101);
  host_stat(d, 1300, 1100);
  write_file(d / "proc/101/schedstat", "1500000000 5 12\n");
  proc(d, 101, 2, 5001, 900, 0, "kworker/0:1-events", "0::/\n", 0x00208040); // not read: no pid handed out
  ProcessSample k = kworker(t.scan());
  EXPECT_NEAR(k.cpu_time_s, 0.5, 1e-9) << "from schedstat";
  EXPECT_EQ(k.comm, "kworker/0:1") << "as last listed";
  write_file(d / "proc/sys/kernel/ns_last_pid", "301\n");
  write_file(d / "proc/101/schedstat", "1700000000 5 12\n");
  k = kworker(t.scan());
  EXPECT_NEAR(k.cpu_time_s, 0.2, 1e-9) << "listed: stat read again, its time still from schedstat";
  EXPECT_EQ(k.comm, "kworker/0:1-events");
  // A kernel without schedstat files: stat every scan, as for any process.
  std::filesystem::remove(d / "proc/101/schedstat");
  proc(d, 101, 2, 5001, 930, 0, "kworker/0:1-events", "0::/\n", 0x00208040);
  k = kworker(t.scan());
  EXPECT_EQ(k.id.pid, 101) << "still seen";
}

TEST(ProcessTracker, FollowsTheTreeKeepsReapedTimeAndNeverMergesAReusedPid) {
  TempDir d;
  host_stat(d, 1000, 1000);
  proc(d, 100, 1, 5000, 10);   // the run's root
  proc(d, 101, 100, 5001, 20); // its child
  proc(d, 102, 101, 5002, 30); // a grandchild
  proc(d, 200, 1, 10, 99);     // not the run's
  TrackerOptions o;
  o.procfs_root = d / "proc";
  o.clock_ticks_per_s = 100;
  ProcessTracker t(o, {});
  // follow() starts a thread; the fixture is scanned by hand instead, in run mode.
  t.follow(100);
  t.stop();
  t.take(); // the thread's scans of the same state
  host_stat(d, 1300, 1100);
  // 102 exits and 101 reaps it: 101's cutime now holds 102's whole 45 ticks, of which 30 were already counted.
  remove_proc(d, 102);
  proc(d, 101, 100, 5001, 25, 45);
  auto s = t.scan();
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->run_mode);
  ASSERT_TRUE(s->cpu_total_s && s->cpu_busy_s);
  EXPECT_NEAR(*s->cpu_busy_s, 3.0, 1e-9);
  EXPECT_NEAR(*s->cpu_total_s, 4.0, 1e-9);
  double c101 = -1;
  for (const auto& p : s->procs) {
    EXPECT_NE(p.id.pid, 200) << "a process outside the tree";
    if (p.id.pid == 101) c101 = p.cpu_time_s;
  }
  // 5 own ticks + 45 reaped - 30 already counted = 20 ticks = 0.2 s
  EXPECT_NEAR(c101, 0.20, 1e-9);
  bool gone_row = false;
  for (const auto& r : s->rows)
    if (r.id == ProcessId{102, 5002}) gone_row = r.last_tick.has_value();
  EXPECT_TRUE(gone_row) << "the grandchild's final row";

  // pid 101 is reused by a new process (another start time): a new identity, and a new row.
  remove_proc(d, 101);
  proc(d, 101, 100, 9000, 3);
  s = t.scan();
  bool old_gone = false;
  for (const auto& r : s->rows)
    if (r.id == ProcessId{101, 5001}) old_gone = r.last_tick.has_value();
  EXPECT_TRUE(old_gone);
  bool new_final = false;
  for (const auto& r : t.final_rows()) {
    EXPECT_NE(r.id, (ProcessId{101, 5001})) << "the old 101 had its row already";
    if (r.id == ProcessId{101, 9000}) new_final = r.cmdline == "worker --flag";
  }
  EXPECT_TRUE(new_final) << "the new 101 gets its own row";
  for (const auto& p : s->procs)
    if (p.id.pid == 101) {
      EXPECT_EQ(p.id.start_time, 9000);
      EXPECT_NEAR(p.cpu_time_s, 0.03, 1e-9) << "the new process's time only";
      EXPECT_EQ(p.unit, "slurm job 9");
      EXPECT_EQ(p.rss_bytes, 8192);
      EXPECT_EQ(p.uss_bytes, 3072);
    }
}

Frame frame(int64_t tick, double gpu_j, double pkg_j) {
  Frame f;
  f.tick = tick;
  GpuSample g;
  g.gpu_index = 0;
  g.power_w = 100;
  g.energy_counter_uj = static_cast<int64_t>(gpu_j * 1e6);
  f.gpus.push_back(g);
  f.cpu.package_energy_j = pkg_j;
  f.cpu.power_method = "counter";
  return f;
}

TEST(Attributor, PartsAddUpToTheMeasuredEnergyPerDevice) {
  GpuDevice dev;
  dev.gpu_index = 0;
  Accounting acc({dev});
  auto f0 = frame(0, 1000, 50);
  acc.process(f0);
  auto f1 = frame(1, 1000.37, 50.9);
  acc.process(f1); // no scan yet: unattributed
  auto snap = std::make_shared<ProcessSnapshot>();
  snap->run_mode = true;
  snap->cpu_busy_s = 3;
  snap->cpu_total_s = 8;
  ProcessSample a;
  a.id = {10, 1};
  a.in_run = true;
  a.sampled = true;
  a.cpu_time_s = 2;
  snap->procs.push_back(a);
  snap->gpus_listed = {0};
  GpuProcessSample ga, gn;
  ga.id = {10, 1};
  ga.in_run = true;
  ga.sm_pct = 30;
  gn.id = {77, 5};
  gn.sm_pct = 10;
  snap->gpu_procs = {ga, gn};
  double gpu = 1000.37, pkg = 50.9;
  for (int t = 2; t < 40; ++t) {
    gpu += 0.1 * t + 1.0 / 3, pkg += 0.7 + t * 0.013;
    auto f = frame(t, gpu, pkg);
    if (t == 2) f.processes = snap;
    if (t == 20) { // from here nobody is busy on the GPU, but the run's process holds memory
      auto idle = std::make_shared<ProcessSnapshot>(*snap);
      idle->gpu_procs[0].sm_pct = 0;
      idle->gpu_procs[0].mem_used_bytes = 1 << 20;
      idle->gpu_procs[1].sm_pct = 0;
      f.processes = idle;
    }
    acc.process(f);
    if (t == 2) {
      ASSERT_TRUE(f.processes->gpu_procs[0].energy_j);
      EXPECT_GT(*f.processes->gpu_procs[0].energy_j, 0) << "accounting filled the scan's energy";
      EXPECT_NEAR(*f.processes->gpu_procs[0].power_w, 75, 1e-9);
    }
  }
  const RunSummary s = acc.summary();
  const auto& g = s.attribution.devices.at("gpu0");
  const auto& c = s.attribution.devices.at("cpu");
  ASSERT_EQ(s.gpus.size(), 1u);
  EXPECT_NEAR(g.measured_j(), s.gpus[0].energy_j, 1e-9 * s.gpus[0].energy_j);
  EXPECT_NEAR(c.measured_j(), *s.cpu_energy_j(), 1e-9 * *s.cpu_energy_j());
  EXPECT_GT(g.unattributed_j, 0); // the interval before the first scan
  EXPECT_GT(g.memory_share_j, 0);
  EXPECT_GT(g.sm_share_j, 0);
  // CPU: 2 of 8 CPU-seconds were the run's, 1 someone else's, 5 idle.
  EXPECT_NEAR(c.attributed_j / c.other_j, 2.0, 1e-9);
  EXPECT_NEAR((c.attributed_j + c.other_j) / (c.measured_j() - 50.9), 3.0 / 8, 1e-9);
  const auto& mine = s.attribution.processes.at(ProcessId{10, 1});
  EXPECT_NEAR(mine.cpu_energy_j, c.attributed_j, 1e-9);
  EXPECT_NEAR(mine.gpu_total_j(), g.attributed_j, 1e-9);
}

TEST(Attributor, CpuPowerIsSplitAndUnitsKeepTheEnergyOfExitedProcesses) {
  Accounting acc({});
  auto cpu_frame = [](int64_t tick, double pkg_j) {
    Frame f;
    f.tick = tick;
    f.cpu.package_energy_j = pkg_j;
    f.cpu.package_power_w = 40;
    f.cpu.power_method = "counter";
    return f;
  };
  auto f0 = cpu_frame(0, 100);
  acc.process(f0);
  auto proc = [](int64_t pid, double cpu_s, const char* unit) {
    ProcessSample p;
    p.id = {pid, 1};
    p.in_run = true;
    p.cpu_time_s = cpu_s;
    p.unit = unit;
    p.unit_kind = "slurm-job";
    return p;
  };
  auto snap = std::make_shared<ProcessSnapshot>();
  snap->cpu_busy_s = 4;
  snap->cpu_total_s = 8;
  snap->procs = {proc(1, 3, "slurm job 9"), proc(2, 1, "slurm job 9"), proc(3, 0, "slurm job 10")};
  auto f1 = cpu_frame(1, 110);
  f1.processes = snap;
  acc.process(f1);
  // Busy half the time, 3:1 between the two: 3/8 and 1/8 of the 40 W.
  EXPECT_NEAR(*snap->procs[0].cpu_power_w, 15, 1e-9);
  EXPECT_NEAR(*snap->procs[1].cpu_power_w, 5, 1e-9);
  EXPECT_EQ(*snap->procs[2].cpu_power_w, 0);
  ASSERT_EQ(snap->units.size(), 2u);
  EXPECT_EQ(snap->units[0].unit, "slurm job 10");
  EXPECT_EQ(snap->units[1].unit, "slurm job 9");
  EXPECT_EQ(snap->units[1].processes, 2u);
  EXPECT_NEAR(snap->units[1].cpu_power_w, 20, 1e-9);
  EXPECT_NEAR(snap->units[1].cpu_energy_j, 5, 1e-9) << "half of the interval's 10 J";
  // Process 2 exits: its unit keeps what it used, and goes on growing with process 1.
  auto later = std::make_shared<ProcessSnapshot>();
  later->cpu_busy_s = 2;
  later->cpu_total_s = 8;
  later->procs = {proc(1, 2, "slurm job 9")};
  auto f2 = cpu_frame(2, 118);
  f2.processes = later;
  acc.process(f2);
  ASSERT_EQ(later->units.size(), 1u);
  EXPECT_EQ(later->units[0].processes, 1u);
  EXPECT_NEAR(later->units[0].cpu_energy_j, 5 + 2, 1e-9) << "a quarter of the next 8 J added";
  EXPECT_NEAR(acc.summary().attribution.units.at("slurm job 9").cpu_energy_j, 7, 1e-9);
}

// An estimate (TDP x utilisation) is the busy time's energy alone: split over the busy time, with no idle part.
// Measured package energy includes the idle package's: split over the whole capacity, the rest idle.
TEST(Attributor, AnEstimatedCpuIsSplitOverItsBusyTimeAndHasNoIdleShare) {
  for (const char* method : {"estimated", "counter"}) {
    SCOPED_TRACE(method);
    Accounting acc({});
    auto cpu_frame = [&](int64_t tick, double pkg_j) {
      Frame f;
      f.tick = tick;
      f.cpu.package_energy_j = pkg_j;
      f.cpu.package_power_w = 50;
      f.cpu.util_pct = 50;
      f.cpu.power_method = method;
      return f;
    };
    auto f0 = cpu_frame(0, 0);
    acc.process(f0);
    auto snap = std::make_shared<ProcessSnapshot>();
    snap->cpu_busy_s = 4; // busy half of the 8 CPU-seconds; the run's process has 1 s of it, others 3 s
    snap->cpu_total_s = 8;
    ProcessSample mine;
    mine.id = {1, 1};
    mine.in_run = true;
    mine.cpu_time_s = 1;
    snap->procs = {mine};
    auto f1 = cpu_frame(1, 50);
    f1.processes = snap;
    acc.process(f1);
    auto f2 = cpu_frame(2, 100); // the next 50 J, split by the same scan
    acc.process(f2);
    const auto d = acc.summary().attribution.devices.at("cpu"); // a copy: summary() is a value
    const bool est = std::string_view(method) == "estimated";
    // 100 J in all: estimated, the run's 1 of 4 busy seconds is 25 J and the others' 75 J; measured, 1/8 and 3/8.
    EXPECT_NEAR(d.attributed_j, est ? 25 : 12.5, 1e-9);
    EXPECT_NEAR(d.other_j, est ? 75 : 37.5, 1e-9);
    EXPECT_NEAR(d.idle_j, est ? 0 : 50, 1e-9);
    EXPECT_NEAR(d.attributed_j + d.other_j + d.unattributed_j, 100, 1e-9);
    EXPECT_NEAR(*snap->procs[0].cpu_power_w, est ? 12.5 : 6.25, 1e-9);
    EXPECT_EQ(d.method, est ? "attributed (estimated)" : "attributed");
  }
}

// A scan as accounting leaves it: power and energy filled.
ProcessSample filled(int64_t pid, double cpu_w, double cpu_j, const std::string& unit = "") {
  ProcessSample p;
  p.id = {pid, 100 + pid};
  p.comm = "p" + std::to_string(pid);
  p.cpu_power_w = cpu_w;
  p.cpu_energy_j = cpu_j;
  p.unit = unit;
  p.unit_kind = unit.empty() ? "" : "container";
  return p;
}

std::string series(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) out += line + "\n";
  return out;
}

double value_of(const std::string& text, const std::string& prefix) {
  const std::string l = series(text, prefix);
  if (l.empty()) return NAN;
  return std::stod(l.substr(l.rfind(' ') + 1));
}

TEST(ProcessBoard, TopNSeriesTheRestAsOtherWhoseEnergyOnlyGrows) {
  ProcessBoardBuilder b(2, "node\"1");
  ProcessSnapshot s1;
  s1.procs = {filled(1, 30, 100, "docker aaa"), filled(2, 20, 50), filled(3, 10, 400, "docker aaa"), filled(4, 0, 0)};
  GpuProcessSample g;
  g.id = {2, 102};
  g.gpu_index = 0;
  g.power_w = 100;
  g.energy_j = 1000;
  g.mem_used_bytes = 1 << 30;
  s1.gpu_procs = {g};
  s1.units = {{"docker aaa", "container", std::nullopt, 2, 40, 0, 500, 0}};
  s1.gpus_listed = {0};
  auto b1 = b.build(s1);
  const std::string& m = b1->metrics_text;
  // Top 2 by power: 2 (20 W CPU + 100 W GPU), then 1 (30 W); 3 is `other`; 4 has no figure at all.
  EXPECT_EQ(value_of(m, "wattscope_process_power_watts{pid=\"2\",start_time=\"102\",comm=\"p2\",unit=\"\","
                        "host=\"node\\\"1\",device=\"gpu0\"}"),
            100);
  EXPECT_EQ(value_of(m, "wattscope_process_power_watts{pid=\"1\","), 30);
  EXPECT_EQ(series(m, "wattscope_process_power_watts{pid=\"3\""), "");
  EXPECT_EQ(series(m, "wattscope_process_power_watts{pid=\"4\""), "");
  EXPECT_EQ(value_of(m, "wattscope_process_power_watts{pid=\"other\""), 10);
  EXPECT_EQ(value_of(m, "wattscope_process_energy_joules_total{pid=\"other\""), 400);
  EXPECT_NE(m.find("# TYPE wattscope_process_energy_joules_total counter"), std::string::npos);
  EXPECT_NE(m.find("top 2 processes by power"), std::string::npos) << "the cap is in the HELP text";
  EXPECT_EQ(value_of(m, "wattscope_unit_energy_joules_total{unit=\"docker "
                        "aaa\",unit_kind=\"container\",namespace=\"\",pod=\"\",device=\"cpu\""),
            500);
  EXPECT_EQ(value_of(m, "wattscope_unit_energy_joules_total{unit=\"docker "
                        "aaa\",unit_kind=\"container\",namespace=\"\",pod=\"\",device=\"gpu\""),
            0)
      << "a GPU host: the unit used none of its GPUs";
  ASSERT_EQ(b1->processes.size(), 2u);
  EXPECT_EQ(b1->processes[0]["pid"], 2);
  EXPECT_EQ(b1->processes[0]["power_w"], 120.0);
  EXPECT_EQ(b1->processes_other["processes"], 1);

  // Next scan: 3 climbs into the top 2 and 1 drops out. `other` must not fall by 3's 400 J: it adds what 1 used
  // since the last scan (10 J), and 3's history stays in 3's own series.
  ProcessSnapshot s2;
  s2.procs = {filled(1, 1, 110, "docker aaa"), filled(2, 20, 60), filled(3, 50, 450, "docker aaa")};
  s2.gpu_procs = {g};
  auto b2 = b.build(s2);
  EXPECT_EQ(value_of(b2->metrics_text, "wattscope_process_energy_joules_total{pid=\"other\""), 410);
  EXPECT_EQ(value_of(b2->metrics_text, "wattscope_process_energy_joules_total{pid=\"3\","), 450);
  EXPECT_EQ(value_of(b2->metrics_text, "wattscope_process_power_watts{pid=\"other\""), 1);
}

TEST(ProcessBoard, AUnitOnAHostWithoutGpusHasNoGpuSeries) {
  ProcessBoardBuilder b(2, "cpu-node");
  ProcessSnapshot s;
  s.procs = {filled(1, 30, 100, "docker aaa")};
  s.units = {{"docker aaa", "container", std::nullopt, 1, 30, 0, 100, 0}};
  const std::string m = b.build(s)->metrics_text; // no GPU listed its processes: gpus_listed is empty
  EXPECT_EQ(value_of(m, "wattscope_unit_power_watts{unit=\"docker "
                        "aaa\",unit_kind=\"container\",namespace=\"\",pod=\"\",device=\"cpu\""),
            30);
  EXPECT_EQ(series(m, "wattscope_unit_power_watts{unit=\"docker "
                      "aaa\",unit_kind=\"container\",namespace=\"\",pod=\"\",device=\"gpu\""),
            "")
      << "missing, never 0";
  EXPECT_EQ(series(m, "wattscope_unit_energy_joules_total{unit=\"docker "
                      "aaa\",unit_kind=\"container\",namespace=\"\",pod=\"\",device=\"gpu\""),
            "");
}

GpuState idle_gpu(int i) {
  GpuState g;
  g.index = i;
  g.uuid = "GPU-u" + std::to_string(i);
  g.mem_used_bytes = 1 << 20;
  g.mem_total_bytes = 1LL << 34;
  g.compute_processes = 0;
  return g;
}

TEST(FreeGpus, LocksMakeASecondGrabTakeAnotherGpuOrFailSayingWhy) {
  TempDir dir;
  GrabRequest req;
  req.lock_dir = dir / "locks/nested";
  std::vector<GpuState> gpus = {idle_gpu(0), idle_gpu(1), idle_gpu(2)};
  gpus[0].compute_processes = 2;
  gpus[2].mem_used_bytes = gpus[2].mem_total_bytes; // full
  GpuGrab first = grab_free_gpus(gpus, req);
  ASSERT_EQ(first.gpus.size(), 1u);
  EXPECT_EQ(first.cuda_visible, "GPU-u1");
  // The lock is an flock on its own open file: a second grab (another run, or this process again) cannot take it.
  try {
    grab_free_gpus(gpus, req);
    ADD_FAILURE() << "GPU 1 was taken twice";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("0 of 3 GPUs free, 1 needed"), std::string::npos) << m;
    EXPECT_NE(m.find("GPU 0: 2 compute processes"), std::string::npos) << m;
    EXPECT_NE(m.find("GPU 1: taken by another wattscope run (pid " + std::to_string(::getpid()) + ")"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("GPU 2: 100.0 % of its memory in use"), std::string::npos) << m;
  }
  first.locks.clear(); // the run ends
  EXPECT_EQ(grab_free_gpus(gpus, req).cuda_visible, "GPU-u1");
  // Two at once take two different GPUs, and unknown process lists are never taken.
  gpus[2].mem_used_bytes = 0;
  gpus[0].compute_processes.reset();
  req.count = 2;
  GpuGrab two = grab_free_gpus(gpus, req);
  EXPECT_EQ(two.cuda_visible, "GPU-u1,GPU-u2");
  // A UUID that could leave the lock directory is refused.
  std::vector<GpuState> odd = {idle_gpu(0)};
  odd[0].uuid = "../../etc/passwd";
  req.count = 1;
  EXPECT_THROW(grab_free_gpus(odd, req), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(dir / "etc"));
}

TEST(FreeGpus, FlagParsing) {
  EXPECT_EQ(parse_free_gpus("0,1"), std::nullopt);
  EXPECT_EQ(parse_free_gpus("free:3"), 3);
  for (const char* bad : {"free:", "free:0", "free:-1", "free:65", "free:2x", "free"})
    EXPECT_THROW(parse_free_gpus(bad), std::invalid_argument) << bad;
  EXPECT_EQ(parse_mem_pct("5%"), 5);
  EXPECT_EQ(parse_mem_pct("12.5"), 12.5);
  for (const char* bad : {"", "%", "101", "-1", "five"})
    EXPECT_THROW(parse_mem_pct(bad), std::invalid_argument) << bad;
  EXPECT_THROW(parse_gpu_selection("free:1", std::nullopt), std::invalid_argument);
}

TEST(GpuSelection, CudaDeviceOrderAndMigEntries) {
  EXPECT_TRUE(parse_gpu_selection("", std::string("0,1")).cuda_fastest_first);
  EXPECT_TRUE(parse_gpu_selection("", std::string("1"), std::string("FASTEST_FIRST")).cuda_fastest_first);
  EXPECT_FALSE(parse_gpu_selection("", std::string("1"), std::string("PCI_BUS_ID")).cuda_fastest_first);
  EXPECT_FALSE(parse_gpu_selection("", std::string("GPU-abc")).cuda_fastest_first) << "UUIDs need no order";
  const GpuSelection mig = parse_gpu_selection("", std::string("MIG-bbbb"));
  EXPECT_TRUE(mig.names_mig());
  EXPECT_FALSE(mig.selects(0, "GPU-aaaa"));
  EXPECT_EQ(mig.mig_match({"MIG-aaaa-1", "MIG-bbbb-2"}), "MIG-bbbb");
  EXPECT_EQ(mig.mig_match({"MIG-cccc"}), "");
}

} // namespace

// Issue 12: a serve that runs for months sees every process that ever ran. Per-process totals stay bounded: the
// least-energy processes gone for two scans are dropped, a heavy long-lived one is kept, and the unit they belong to
// keeps every joule (it equals the CPU's busy energy, attributed + other, throughout).
TEST(Attributor, PerProcessTotalsStayBoundedOverAMachinesLifetime) {
  Accounting acc({});
  double pkg_j = 0;
  const int scans = static_cast<int>(Attributor::kMaxKeptProcesses) * 2;
  for (int k = 0; k <= scans; ++k) {
    Frame f;
    f.tick = k;
    pkg_j += 10;
    f.cpu.package_energy_j = pkg_j;
    f.cpu.package_power_w = 10;
    f.cpu.power_method = "counter";
    auto snap = std::make_shared<ProcessSnapshot>();
    snap->run_mode = false; // record / serve: the machine
    snap->cpu_busy_s = 2;
    snap->cpu_total_s = 4;
    auto proc = [](int64_t pid, double cpu_s) {
      ProcessSample p;
      p.id = {pid, pid};
      p.in_run = true; // as the tracker marks every process of the machine
      p.cpu_time_s = cpu_s;
      p.unit = "u";
      p.unit_kind = "service";
      return p;
    };
    snap->procs = {proc(1, 1.5), proc(1000 + k, 0.5)}; // a heavy one for ever, and a new short one each scan
    f.processes = snap;
    acc.process(f);
  }
  const auto& sum = acc.summary().attribution;
  EXPECT_LE(sum.processes.size(), Attributor::kMaxKeptProcesses);
  ASSERT_TRUE(sum.processes.count(ProcessId{1, 1}));
  const auto& cpu = sum.devices.at("cpu");
  EXPECT_NEAR(sum.units.at("u").cpu_energy_j, cpu.attributed_j + cpu.other_j, 1e-6 * cpu.measured_j());
  EXPECT_GT(sum.units.at("u").cpu_energy_j, 0);
}
} // namespace unit_attribution
