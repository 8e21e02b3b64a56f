// Issue 31, items 12 and 13: the Slurm hooks run as root, so their configuration is read only when no one else could
// have written it (serve's token file rules), a library handed to the root recorder must be as safe, and a recorder
// whose pid file cannot be written (a full state directory) or that fails at once is never left behind nor reported
// as recording.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include <fmt/format.h>
#include <sys/wait.h>

#include "../support/support.hpp"
#include "../support/tmpfs.hpp"
#include "core/protected_file.hpp"
#include "integrations/slurm_job.hpp"

namespace unit_slurm_trust {

using namespace wattscope;
using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using namespace std::chrono_literals;

namespace {

const std::string kConf = "WATTSCOPE_SLURM_DB=/var/lib/ws.db\nWATTSCOPE_NVML_LIBRARY=/opt/evil/libnvidia-ml.so\n";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The one problem a configuration had ("" when none), and that nothing of the file was used when it had one.
std::string problem_of(const std::string& path) {
  const SlurmConfig cfg = load_slurm_config(path, true, env_lookup({}));
  if (cfg.problems.empty()) return "";
  EXPECT_EQ(cfg.problems.size(), 1u);
  EXPECT_EQ(cfg.nvml_library, "") << "a library path was taken from a refused file";
  EXPECT_EQ(cfg.db, SlurmConfig{}.db);
  EXPECT_EQ(cfg.config_file, "");
  return cfg.problems.front();
}

std::string conf_file(const std::string& path, mode_t mode) {
  write_file(path, kConf);
  EXPECT_EQ(::chmod(path.c_str(), mode), 0);
  return path;
}

} // namespace

TEST(SlurmConfigTrust, WritableByOthersIsRefusedAndNoLibraryTaken) {
  TempDir d;
  EXPECT_EQ(problem_of(conf_file(d / "ok.conf", 0600)), "");
  EXPECT_EQ(load_slurm_config(d / "ok.conf", true, env_lookup({})).nvml_library, "/opt/evil/libnvidia-ml.so");
  EXPECT_EQ(problem_of(conf_file(d / "ok.conf", 0644)), "") << "readable by others is the admin's choice";
  std::string p = problem_of(conf_file(d / "ww.conf", 0666));
  EXPECT_TRUE(contains(p, "configuration file '" + d / "ww.conf" + "'") && contains(p, "world-writable")) << p;
  EXPECT_TRUE(contains(problem_of(conf_file(d / "gw.conf", 0620)), "group-writable"));

  // Its directories: a non-sticky directory others may write lets them put their own file in its place.
  const std::string sub = d / "etc";
  ASSERT_EQ(::mkdir(sub.c_str(), 0700), 0);
  conf_file(sub + "/slurm.conf", 0600);
  ASSERT_EQ(::chmod(sub.c_str(), 0777), 0);
  p = problem_of(sub + "/slurm.conf");
  EXPECT_TRUE(contains(p, "its directory '" + sub + "'") && contains(p, "world-writable")) << p;
  ASSERT_EQ(::chmod(sub.c_str(), 0775), 0);
  EXPECT_TRUE(contains(problem_of(sub + "/slurm.conf"), "group-writable"));
  ASSERT_EQ(::chmod(sub.c_str(), 0755), 0);
  EXPECT_EQ(problem_of(sub + "/slurm.conf"), "");
  // A link from a safe place to a file in an unsafe one: the file's own directory is what counts.
  ASSERT_EQ(::chmod(sub.c_str(), 0777), 0);
  ASSERT_EQ(::symlink((sub + "/slurm.conf").c_str(), (d / "link.conf").c_str()), 0);
  EXPECT_TRUE(contains(problem_of(d / "link.conf"), "its directory '" + sub + "'"));
  ASSERT_EQ(::chmod(sub.c_str(), 0755), 0);

  // The environment's own values still apply under a refused file (they come from the root wrapper script).
  const SlurmConfig cfg = load_slurm_config(d / "ww.conf", true, env_lookup({"WATTSCOPE_SLURM_DB=/srv/ws.db"}));
  EXPECT_EQ(cfg.db, "/srv/ws.db");
  EXPECT_EQ(cfg.nvml_library, "");
}

TEST(SlurmConfigTrust, OwnedBySomeoneElseIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "changing a file's owner needs root";
  TempDir d;
  const std::string path = conf_file(d / "slurm.conf", 0600);
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  EXPECT_TRUE(contains(problem_of(path), "owned by uid 65534"));
}

TEST(SlurmConfigTrust, OnlyARegularFileOfBoundedSizeIsRead) {
  TempDir d;
  // A FIFO used to hang the prolog (and slurmd's job start) until a writer came.
  const std::string fifo = d / "fifo.conf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto answer = std::async(std::launch::async, [&] { return problem_of(fifo); });
  ASSERT_EQ(answer.wait_for(10s), std::future_status::ready) << "reading a FIFO configuration blocked";
  EXPECT_TRUE(contains(answer.get(), "not a regular file"));
  // /dev/zero used to be read for a second.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(contains(problem_of("/dev/zero"), "not a regular file"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
  EXPECT_TRUE(contains(problem_of(d.path()), "not a regular file"));
  write_file(d / "big.conf", std::string(kMaxSlurmConfigBytes + 1, '#'));
  EXPECT_TRUE(contains(problem_of(d / "big.conf"), "at most 65536 bytes"));
  EXPECT_TRUE(contains(problem_of(d / "absent.conf"), "cannot open it"));
  // The default file, absent, is no problem; present and unsafe, it is.
  EXPECT_TRUE(load_slurm_config(d / "absent.conf", false, env_lookup({})).problems.empty());
  EXPECT_EQ(load_slurm_config(conf_file(d / "ww.conf", 0666), false, env_lookup({})).problems.size(), 1u);
}

TEST(SlurmConfigTrust, ProtectedFileChecksTheFileAndItsDirectories) {
  TempDir d;
  const std::string sub = d / "lib";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  write_file(sub + "/libx.so", "not really a library");
  EXPECT_NO_THROW(check_protected_file(sub + "/libx.so", "library"));
  EXPECT_EQ(read_protected_file(sub + "/libx.so", "library", 100), "not really a library");
  ASSERT_EQ(::chmod((sub + "/libx.so").c_str(), 0646), 0);
  EXPECT_THROW(check_protected_file(sub + "/libx.so", "library"), std::invalid_argument);
  ASSERT_EQ(::chmod((sub + "/libx.so").c_str(), 0644), 0);
  ASSERT_EQ(::chmod(sub.c_str(), 0777), 0);
  EXPECT_THROW(check_protected_file(sub + "/libx.so", "library"), std::invalid_argument);
  ASSERT_EQ(::chmod(sub.c_str(), 01777), 0);
  EXPECT_NO_THROW(check_protected_file(sub + "/libx.so", "library")) << "a sticky directory, as /tmp";
  EXPECT_THROW(check_protected_file(sub, "library"), std::invalid_argument);
}

namespace {

// A stand-in for `wattscope` as the prolog starts it: a script that records its pid where the test can read it, then
// does what `body` says.
std::string fake_recorder(const TempDir& d, const std::string& body) {
  const std::string path = d / "fake-wattscope";
  write_file(path, "#!/bin/sh\necho $$ > '" + d / "recorder.pid" + "'\n" + body + "\n");
  EXPECT_EQ(::chmod(path.c_str(), 0755), 0);
  return path;
}

bool process_exists(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno != ESRCH;
}

} // namespace

TEST(SlurmPrologRecorder, LibraryOthersCouldReplaceIsNeverHandedToTheRootRecorder) {
  TempDir d;
  const std::string lib_dir = d / "lib";
  ASSERT_EQ(::mkdir(lib_dir.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(lib_dir.c_str(), 0777), 0);
  write_file(lib_dir + "/libnvidia-ml.so", "");
  SlurmConfig cfg;
  cfg.state_dir = d / "state";
  cfg.nvml_library = lib_dir + "/libnvidia-ml.so";
  SlurmJob job;
  job.job_id = "41";
  const std::string exe = fake_recorder(d, "exec sleep 30");
  try {
    start_recorder(exe, job, cfg, {});
    ADD_FAILURE() << "the recorder was started with a library in a world-writable directory";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "WATTSCOPE_NVML_LIBRARY") && contains(e.what(), "world-writable")) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(d / "recorder.pid")) << "the recorder ran";
  // The same through the wrapper's environment (WATTSCOPE_ROCM_SMI_LIBRARY and friends are passed on too).
  cfg.nvml_library.clear();
  EXPECT_THROW(start_recorder(exe, job, cfg, {"WATTSCOPE_ROCM_SMI_LIBRARY=" + lib_dir + "/libnvidia-ml.so"}),
               std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(d / "recorder.pid")) << "the recorder ran";
}

TEST(SlurmPrologRecorder, FullStateDirectoryLeavesNoRecorderRunning) {
  TempDir d;
  TmpfsMount fs(d / "state", 64);
  if (!fs.ok()) GTEST_SKIP() << fs.why();
  ASSERT_EQ(::chmod(fs.path().c_str(), 0700), 0);
  SlurmConfig cfg;
  cfg.state_dir = fs.path();
  SlurmJob job;
  job.job_id = "42";
  const std::string exe = fake_recorder(d, "exec sleep 30");
  fs.fill("filler");
  pid_t pid = 0;
  try {
    const RecorderProcess p = start_recorder(exe, job, cfg, {});
    pid = p.pid;
    ADD_FAILURE() << "start_recorder said the recorder runs, with no pid file to stop it by";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "pid file") && contains(msg, "was stopped")) << msg;
    // "the recorder (pid N) was stopped": the process started (it may not have got as far as the script's first line).
    const size_t at = msg.find("(pid ");
    if (at != std::string::npos) pid = static_cast<pid_t>(std::stol(msg.substr(at + 5)));
  }
  ASSERT_GT(pid, 1) << "no recorder pid";
  EXPECT_FALSE(process_exists(pid)) << "the recorder (pid " << pid << ") was left running with no pid file";
  if (process_exists(pid)) ::kill(pid, SIGKILL);
  EXPECT_FALSE(std::filesystem::exists(pid_file_path(cfg.state_dir, "42")));

  // With room again, the same start works and the epilog stops it.
  fs.unfill("filler");
  ::unlink((d / "recorder.pid").c_str());
  const RecorderProcess p = start_recorder(exe, job, cfg, {});
  EXPECT_EQ(read_file(pid_file_path(cfg.state_dir, "42")), fmt::format("{} {}\n", p.pid, p.start_time));
  // The stand-in (sleep) keeps the SIGTERM the prolog starts it with blocked, so the epilog ends up killing it: what
  // matters here is that the epilog finds it.
  cfg.stop_timeout = 500ms;
  std::thread reaper([&] { ::waitpid(p.pid, nullptr, 0); });
  const StopResult stopped = stop_recorder(job, cfg);
  reaper.join();
  EXPECT_TRUE(stopped.kind == StopResult::Kind::Stopped || stopped.kind == StopResult::Kind::Killed);
  EXPECT_EQ(stopped.process.pid, p.pid);
  EXPECT_FALSE(process_exists(p.pid));
}

TEST(SlurmPrologRecorder, ARecorderThatExitsAtOnceIsReportedNotRecording) {
  TempDir d;
  SlurmConfig cfg;
  cfg.state_dir = d / "state";
  SlurmJob job;
  job.job_id = "43";
  const std::string exe = fake_recorder(d, "echo 'cannot open the store' >&2\nexit 3");
  try {
    const RecorderProcess p = start_recorder(exe, job, cfg, {});
    ADD_FAILURE() << "reported as recording: pid " << p.pid;
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "status 3") && contains(e.what(), "cannot open the store")) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(pid_file_path(cfg.state_dir, "43")));
}

namespace {

// `wattscope slurm prolog` as slurmd runs it, given at most `limit` (a FIFO configuration used to hang it for good).
struct PrologRun {
  int exit_code = -1;
  bool finished = false;
  std::string err;
  std::chrono::steady_clock::duration took{};
};
PrologRun prolog(const TempDir& d, const std::string& config, std::chrono::seconds limit = 10s) {
  const auto t0 = std::chrono::steady_clock::now();
  const int pid = start({wattscope(), "slurm", "prolog"},
                        {{"SLURM_JOB_ID", "7"},
                         {"SLURM_ARRAY_JOB_ID", "7"}, // no scontrol call (up to 3 s) for the array ids
                         {"SLURM_ARRAY_TASK_ID", "0"},
                         {"WATTSCOPE_SLURM_CONFIG", config},
                         {"WATTSCOPE_SLURM_STATE_DIR", d / "state"},
                         {"WATTSCOPE_SLURM_DB", d / "jobs.db"}},
                        d.path(), d / "prolog.out", d / "prolog.err");
  PrologRun r;
  int status = 0;
  while (std::chrono::steady_clock::now() - t0 < limit) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      r.finished = true;
      r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  if (!r.finished) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  r.took = std::chrono::steady_clock::now() - t0;
  r.err = read_file(d / "prolog.err");
  return r;
}

} // namespace

TEST(SlurmPrologCli, HostileConfigurationsNeitherHangNorStartARecorder) {
  TempDir d;
  ASSERT_EQ(::mkdir((d / "state").c_str(), 0700), 0); // made by an earlier job's prolog; the log goes there
  const std::string fifo = d / "fifo.conf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string evil = conf_file(d / "evil.conf", 0666);
  for (const auto& [config, why] : {std::pair<std::string, std::string>{fifo, "not a regular file"},
                                    {"/dev/zero", "not a regular file"},
                                    {d.path(), "not a regular file"},
                                    {evil, "world-writable"}}) {
    SCOPED_TRACE(config);
    const PrologRun r = prolog(d, config);
    ASSERT_TRUE(r.finished) << "the prolog hung on " << config;
    EXPECT_EQ(r.exit_code, 0) << "a failing prolog drains the node";
    EXPECT_LT(r.took, 5s);
    EXPECT_TRUE(contains(r.err, why)) << r.err;
    EXPECT_TRUE(contains(r.err, "not recorded until the configuration is mended")) << r.err;
    EXPECT_FALSE(contains(r.err, "recording as pid")) << r.err;
    EXPECT_FALSE(std::filesystem::exists(pid_file_path(d / "state", "7")));
    EXPECT_TRUE(contains(read_file(d / "state/slurm.log"), why)) << "the refusal is in the node's log";
  }
}

} // namespace unit_slurm_trust
