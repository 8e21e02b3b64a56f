// The Slurm hooks' state directory, as an unprivileged user would attack it: the root prolog and epilog read pid
// files there (the epilog SIGTERMs, then SIGKILLs, the pid a file names) and copy the end of job logs into slurm.log.
// So the directory is used only when no one but root could have put a file in it, a pid file only when root wrote it,
// and a job log never through a link. The planting is done by a child that has become uid 65534 (nobody), as a local
// user would; the tests need root (CI runs as root) and skip otherwise.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "../support/support.hpp"
#include "core/text.hpp"
#include "integrations/slurm_job.hpp"
#include "processes/procfs.hpp"

namespace unit_slurm_state_trust {

using namespace wattscope;
using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using namespace std::chrono_literals;

namespace {

constexpr uid_t kNobody = 65534;
constexpr const char* kSecret = "root's secret: hunter2";

SlurmJob job_of(const std::string& id) {
  SlurmJob j;
  j.job_id = id;
  return j;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Runs `plant` in a child that has dropped to uid/gid 65534 (only system calls in it: the parent has threads).
// True when it succeeded.
bool as_nobody(const std::function<bool()>& plant) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(2);
    ::_exit(plant() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool write_as_is(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// The victim: a process of root's that the planter would like killed.
pid_t victim() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}
uint64_t start_time_of(pid_t pid) {
  std::string text;
  PidStat st;
  EXPECT_TRUE(read_small_file("/proc/" + std::to_string(pid) + "/stat", text) && parse_pid_stat(text, st));
  return st.start_time;
}
bool alive(pid_t pid) {
  return ::waitpid(pid, nullptr, WNOHANG) == 0;
}
void end(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// A test directory nobody can enter (mkdtemp makes it 0700), with a root-only file in it.
struct Scene {
  TempDir d;
  std::string state = d / "state";
  std::string secret = d / "secret";
  Scene() {
    EXPECT_EQ(::chmod(d.path().c_str(), 0755), 0);
    write_file(secret, kSecret);
    EXPECT_EQ(::chmod(secret.c_str(), 0600), 0);
  }
  SlurmConfig cfg() const {
    SlurmConfig c;
    c.state_dir = state;
    c.stop_timeout = 300ms;
    return c;
  }
};

std::string epilog_stderr(const Scene& s, const std::string& job_id) {
  const Result r = run({wattscope(), "slurm", "epilog"}, {{"SLURM_JOB_ID", job_id},
                                                          {"WATTSCOPE_SLURM_CONFIG", s.d / "absent.conf"},
                                                          {"WATTSCOPE_SLURM_STATE_DIR", s.state},
                                                          {"WATTSCOPE_SLURM_STOP_TIMEOUT", "300ms"}});
  EXPECT_EQ(r.exit_code, 0) << "a failing epilog drains the node";
  return r.err;
}

} // namespace

TEST(SlurmStateDirTrust, AWorldWritableStateDirectoryIsRefusedWhateverAUserPlantsInIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  Scene s;
  ASSERT_EQ(::mkdir(s.state.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(s.state.c_str(), 01777), 0); // as /tmp
  const pid_t pid = victim();
  const std::string line = std::to_string(pid) + " " + std::to_string(start_time_of(pid)) + "\n";
  ASSERT_TRUE(as_nobody([&] {
    return write_as_is(pid_file_path(s.state, "9"), line) &&
           ::symlink(s.secret.c_str(), job_log_path(s.state, "9").c_str()) == 0;
  })) << "the planter could not write into the 1777 directory";

  try {
    stop_recorder(job_of("9"), s.cfg());
    ADD_FAILURE() << "the epilog used a world-writable state directory";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "world-writable (mode 1777)") && contains(e.what(), s.state)) << e.what();
  }
  EXPECT_TRUE(alive(pid)) << "the root epilog signalled the process a user named";
  const std::string err = epilog_stderr(s, "9");
  EXPECT_TRUE(contains(err, "state directory") && contains(err, "world-writable")) << err;
  EXPECT_FALSE(contains(err, "hunter2")) << "a planted log leaked a root-only file: " << err;
  EXPECT_TRUE(alive(pid));
  EXPECT_FALSE(std::filesystem::exists(s.state + "/slurm.log")) << "slurm.log was written into the refused directory";
  // The prolog refuses it too, before anything starts (a planted live pid would otherwise make it skip the job).
  try {
    start_recorder("/bin/true", job_of("9"), s.cfg(), {});
    ADD_FAILURE() << "the prolog used a world-writable state directory";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "world-writable")) << e.what();
  }
  end(pid);
}

TEST(SlurmStateDirTrust, TheDirectoryAndItsParentsMustBeRootsAlone) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  Scene s;
  const SlurmJob job{.job_id = "10"};
  auto refusal = [&] {
    try {
      stop_recorder(job, s.cfg());
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // Made first by a user (the default place gone after a reboot, a shared /tmp): theirs, so refused.
  ASSERT_EQ(::chmod(s.d.path().c_str(), 0777), 0);
  ASSERT_TRUE(as_nobody([&] { return ::mkdir(s.state.c_str(), 0700) == 0; }));
  ASSERT_EQ(::chmod(s.d.path().c_str(), 0755), 0);
  std::string why = refusal();
  EXPECT_TRUE(contains(why, "belongs to uid 65534")) << why;
  EXPECT_THROW(start_recorder("/bin/true", job, s.cfg(), {}), std::runtime_error);
  std::filesystem::remove(s.state);

  ASSERT_EQ(::mkdir(s.state.c_str(), 0700), 0);
  EXPECT_EQ(refusal(), "") << "root's own 0700 directory";
  ASSERT_EQ(::chmod(s.state.c_str(), 0770), 0);
  EXPECT_TRUE(contains(refusal(), "group-writable (mode 0770)"));
  ASSERT_EQ(::chmod(s.state.c_str(), 0700), 0);
  // A parent others may write to lets them rename the directory away and put theirs in its place.
  ASSERT_EQ(::chmod(s.d.path().c_str(), 0777), 0);
  why = refusal();
  EXPECT_TRUE(contains(why, "its directory '" + s.d.path() + "'") && contains(why, "world-writable")) << why;
  ASSERT_EQ(::chmod(s.d.path().c_str(), 01777), 0);
  EXPECT_EQ(refusal(), "") << "a sticky parent, as /tmp: no one else can rename root's directory in it";
  ASSERT_EQ(::chown(s.d.path().c_str(), kNobody, kNobody), 0);
  EXPECT_TRUE(contains(refusal(), "neither root nor this user"));
  ASSERT_EQ(::chown(s.d.path().c_str(), 0, 0), 0);
  // A link to a good directory is not the directory.
  ASSERT_EQ(::symlink(s.state.c_str(), (s.d / "link").c_str()), 0);
  SlurmConfig linked = s.cfg();
  linked.state_dir = s.d / "link";
  EXPECT_THROW(stop_recorder(job, linked), std::runtime_error);
}

TEST(SlurmStateDirTrust, PidFilesRootDidNotWriteAndLinkedLogsAreNotTrusted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  Scene s;
  ASSERT_EQ(::mkdir(s.state.c_str(), 0700), 0);
  const SlurmJob job{.job_id = "11"};
  const std::string pid_path = pid_file_path(s.state, "11");
  const pid_t pid = victim();
  const std::string line = std::to_string(pid) + " " + std::to_string(start_time_of(pid)) + "\n";
  // Left by a user while the directory was open to them (or copied in with their ownership): not root's.
  write_file(pid_path, line);
  ASSERT_EQ(::chown(pid_path.c_str(), kNobody, kNobody), 0);
  try {
    stop_recorder(job, s.cfg());
    ADD_FAILURE() << "a pid file owned by uid 65534 was trusted";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "owned by uid 65534") && contains(e.what(), "not trusted")) << e.what();
  }
  EXPECT_TRUE(alive(pid));
  ASSERT_EQ(::chown(pid_path.c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod(pid_path.c_str(), 0666), 0);
  EXPECT_THROW(stop_recorder(job, s.cfg()), std::runtime_error) << "root's, but anyone could have rewritten it";
  std::filesystem::remove(pid_path);
  write_file(s.d / "elsewhere.pid", line);
  ASSERT_EQ(::symlink((s.d / "elsewhere.pid").c_str(), pid_path.c_str()), 0);
  EXPECT_THROW(stop_recorder(job, s.cfg()), std::runtime_error) << "a link is not the prolog's pid file";
  EXPECT_TRUE(alive(pid));
  std::filesystem::remove(pid_path);

  // A recorder that had exited (the pid file names a start time that is not the victim's): the epilog reads its log
  // back, which must not follow a link to a root-only file.
  write_file(pid_path, std::to_string(pid) + " " + std::to_string(start_time_of(pid) + 1) + "\n");
  ASSERT_EQ(::symlink(s.secret.c_str(), job_log_path(s.state, "11").c_str()), 0);
  const StopResult r = stop_recorder(job, s.cfg());
  EXPECT_EQ(r.kind, StopResult::Kind::AlreadyGone);
  EXPECT_FALSE(contains(r.log_tail, "hunter2")) << r.log_tail;
  EXPECT_TRUE(contains(r.log_tail, "symbolic link: not read")) << r.log_tail;
  EXPECT_TRUE(alive(pid));
  end(pid);
}

} // namespace unit_slurm_state_trust
