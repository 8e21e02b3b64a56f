// Issue 31, item 15 (parts): a GPU lock file planted as a hard link (or a FIFO) is refused, never written through;
// marker directories left by runs killed with -9 are cleaned at the next start, and nothing else is; `mark --strict`
// says "permission denied" when it is, not "no wattscope listening".
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>

#include "../support/support.hpp"
#include "phases/marker_socket.hpp"
#include "sources/nvml/gpu_grab.hpp"

namespace unit_small_hardening {

using namespace wattscope;
using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

GpuState idle(int i) {
  GpuState g;
  g.index = i;
  g.uuid = "GPU-h" + std::to_string(i);
  g.mem_used_bytes = 0;
  g.mem_total_bytes = 1LL << 34;
  g.compute_processes = 0;
  return g;
}

// A datagram socket file at `path` that nobody listens on: what a run killed with -9 leaves.
void stale_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << path;
  ::close(fd);
}

} // namespace

TEST(GpuLockFile, AHardLinkOrAFifoAtTheLocksNameIsRefusedAndNeverWritten) {
  TempDir dir;
  GrabRequest req;
  req.lock_dir = dir / "locks";
  ASSERT_EQ(::mkdir(req.lock_dir.c_str(), 0700), 0);
  // Someone links a file they want destroyed (say /etc/shadow under a root run) to the name of GPU 0's lock.
  write_file(dir / "precious", "precious contents\n");
  ASSERT_EQ(::link((dir / "precious").c_str(), (req.lock_dir + "/GPU-h0.lock").c_str()), 0);
  try {
    grab_free_gpus({idle(0)}, req);
    ADD_FAILURE() << "a lock file with two names was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "GPU 0: its lock file") && contains(e.what(), "2 hard links")) << e.what();
  }
  EXPECT_EQ(read_file(dir / "precious"), "precious contents\n") << "the linked file was written through the lock";
  // A FIFO: refused at once, not waited on.
  ASSERT_EQ(::mkfifo((req.lock_dir + "/GPU-h1.lock").c_str(), 0600), 0);
  auto grab = std::async(std::launch::async, [&] {
    try {
      grab_free_gpus({idle(1)}, req);
      return std::string("taken");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
  });
  ASSERT_EQ(grab.wait_for(10s), std::future_status::ready) << "a FIFO lock file blocked";
  EXPECT_TRUE(contains(grab.get(), "not a regular file"));
  // A plain lock file is taken as before, and holds the pid.
  GpuGrab ok = grab_free_gpus({idle(2)}, req);
  EXPECT_EQ(ok.cuda_visible, "GPU-h2");
  EXPECT_EQ(read_file(req.lock_dir + "/GPU-h2.lock"), std::to_string(::getpid()) + "\n");
}

TEST(MarkerDirs, WhatKilledRunsLeftIsCleanedAtStartAndNothingElse) {
  TempDir base;
  auto mk = [&](const std::string& name, mode_t mode) {
    const std::string d = base / name;
    EXPECT_EQ(::mkdir(d.c_str(), mode), 0) << d;
    EXPECT_EQ(::chmod(d.c_str(), mode), 0);
    return d;
  };
  const std::string stale = mk("wattscope-Stale1", 0700);
  stale_socket(stale + "/markers.sock");
  const std::string live = mk("wattscope-Live01", 0700);
  auto listener = MarkerListener::at_path(live + "/markers.sock", [](Marker, int64_t) {});
  const std::string crowded = mk("wattscope-Other1", 0700);
  stale_socket(crowded + "/markers.sock");
  write_file(crowded + "/notes.txt", "someone's file");
  const std::string fresh = mk("wattscope-Empty1", 0700);
  const std::string old_empty = mk("wattscope-Old001", 0700);
  const timespec old[2] = {{::time(nullptr) - 600, 0}, {::time(nullptr) - 600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, old_empty.c_str(), old, 0), 0);
  const std::string open_mode = mk("wattscope-Mode77", 0755);
  stale_socket(open_mode + "/markers.sock");
  const std::string other_name = mk("wattscope-notmine7", 0700);
  stale_socket(other_name + "/markers.sock");
  ASSERT_EQ(::symlink(stale.c_str(), (base / "wattscope-Link01").c_str()), 0);

  // A run starts: its own private directory is made under $TMPDIR, after the cleaning.
  const char* saved = std::getenv("TMPDIR");
  const std::string saved_value = saved ? saved : "";
  ::setenv("TMPDIR", base.path().c_str(), 1);
  std::optional<MarkerListener> run;
  try {
    run.emplace(MarkerListener::in_private_dir([](Marker, int64_t) {}));
  } catch (...) {
  }
  if (saved)
    ::setenv("TMPDIR", saved_value.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  ASSERT_TRUE(run.has_value());

  namespace fs = std::filesystem;
  EXPECT_FALSE(fs::exists(stale)) << "a killed run's directory stayed";
  EXPECT_FALSE(fs::exists(old_empty)) << "an empty directory left for ten minutes stayed";
  EXPECT_TRUE(fs::exists(live + "/markers.sock")) << "a live run's socket was removed";
  EXPECT_TRUE(fs::exists(crowded + "/notes.txt") && fs::exists(crowded + "/markers.sock"));
  EXPECT_TRUE(fs::exists(fresh)) << "a run between mkdtemp and bind lost its directory";
  EXPECT_TRUE(fs::exists(open_mode + "/markers.sock"));
  EXPECT_TRUE(fs::exists(other_name + "/markers.sock"));
  EXPECT_TRUE(fs::is_symlink(base / "wattscope-Link01"));
  EXPECT_TRUE(fs::exists(run->path())) << "the new run's own socket";
  EXPECT_TRUE(send_marker(run->path(), "{\"kind\":\"mark\",\"name\":\"x\"}\n"));
}

TEST(MarkStrict, PermissionDeniedIsSaidAsSuch) {
  EXPECT_TRUE(contains(marker_send_failure("/x/s", EACCES), "permission denied at /x/s"));
  EXPECT_TRUE(contains(marker_send_failure("/x/s", ECONNREFUSED), "no wattscope listening at /x/s"));
  EXPECT_TRUE(contains(marker_send_failure("/x/s", EAGAIN), "queue"));
  TempDir dir;
  EXPECT_FALSE(send_marker(dir / "nobody.sock", "{}\n"));
  EXPECT_EQ(errno, ENOENT);
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0)
    GTEST_SKIP() << "needs root and setpriv to run mark as another user";
  // A root run's socket in a directory only root may enter: another user's `mark` is refused by the kernel.
  auto listener = MarkerListener::at_path(dir / "run.sock", [](Marker, int64_t) {});
  const Result r = run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", wattscope(), "mark",
                        "--socket", dir / "run.sock", "--strict", "mark", "x"},
                       {{"HOME", "/"}});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "permission denied at " + dir / "run.sock")) << r.err;
  EXPECT_FALSE(contains(r.err, "no wattscope listening")) << r.err;
}

} // namespace unit_small_hardening
