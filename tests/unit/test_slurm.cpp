// Slurm jobs (issue 18): the prolog's reading of slurmd's environment and its configuration, the recorder's arguments
// (the job's GPUs, processes and tags) and environment, the epilog's stop of exactly the recorded process, the
// tracker's --only-unit / --only-env scoping on procfs fixture trees, and the tag filter of list/show.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../support/support.hpp"
#include "integrations/slurm_job.hpp"
#include "processes/procfs.hpp"
#include "processes/tracker.hpp"
#include "runs/run_tags.hpp"

namespace unit_slurm { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope

namespace {

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}
// The value after a flag in an argument list ("" when the flag is absent).
std::string after(const std::vector<std::string>& v, const std::string& flag) {
  auto it = std::find(v.begin(), v.end(), flag);
  return it == v.end() || it + 1 == v.end() ? "" : *(it + 1);
}
std::vector<std::string> tags_in(const std::vector<std::string>& v) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < v.size(); ++i)
    if (v[i] == "--tag") out.push_back(v[i + 1]);
  return out;
}

TEST(SlurmJob, ReadsSlurmdsEnvironmentAndRefusesWhatIsNotAJob) {
  const SlurmJob j = slurm_job_from_env(
      env_lookup({"SLURM_JOB_ID=4242", "SLURM_JOB_USER=ada", "SLURMD_NODENAME=gpu07", "SLURM_JOB_GPUS=1,3",
                  "SLURM_ARRAY_JOB_ID=4240", "SLURM_ARRAY_TASK_ID=2", "SLURM_JOB_PARTITION=gpu"}));
  EXPECT_EQ(j.job_id, "4242");
  EXPECT_EQ(j.user, "ada");
  EXPECT_EQ(j.node, "gpu07");
  EXPECT_EQ(j.gpus, "1,3");
  EXPECT_EQ(j.array_job_id, "4240");
  EXPECT_EQ(j.array_task_id, "2");
  EXPECT_THROW(slurm_job_from_env(env_lookup({"HOME=/root"})), std::invalid_argument);
  EXPECT_THROW(slurm_job_from_env(env_lookup({"SLURM_JOB_ID=42; rm -rf /"})), std::invalid_argument);
  EXPECT_EQ(slurm_job_from_env(env_lookup({"SLURM_JOBID=7"})).job_id, "7");
  // An array id that is not a number is left out, not passed on.
  EXPECT_EQ(slurm_job_from_env(env_lookup({"SLURM_JOB_ID=7", "SLURM_ARRAY_JOB_ID=x"})).array_job_id, "");
}

TEST(SlurmJob, RecorderIsScopedToTheJobsGpusProcessesAndTagged) {
  SlurmConfig cfg;
  cfg.db = "mysql://ws@db.example.org/energy";
  cfg.record_args = {"--cpu-tdp", "280"};
  SlurmJob j;
  j.job_id = "4242";
  j.user = "ada";
  j.node = "gpu07";
  j.gpus = "0,2";
  auto a = recorder_args(j, cfg);
  EXPECT_EQ(after(a, "--gpus"), "0,2");
  EXPECT_EQ(after(a, "--only-unit"), "slurm job 4242");
  EXPECT_EQ(after(a, "--only-env"), "SLURM_JOB_ID=4242");
  EXPECT_EQ(after(a, "--db"), cfg.db);
  EXPECT_EQ(after(a, "--task"), "slurm-job-4242");
  EXPECT_EQ(after(a, "--cpu-tdp"), "280");
  const auto tags = tags_in(a);
  EXPECT_TRUE(has(tags, "slurm_job_id=4242"));
  EXPECT_TRUE(has(tags, "slurm_user=ada"));
  EXPECT_TRUE(has(tags, "slurm_node=gpu07"));
  EXPECT_FALSE(std::any_of(tags.begin(), tags.end(), [](const auto& t) { return t.starts_with("slurm_array"); }));

  // No GPU allocated: none recorded (never the node's other jobs' GPUs); nor where SLURM_JOB_GPUS is not a list.
  j.gpus = "";
  EXPECT_EQ(after(recorder_args(j, cfg), "--gpus"), "none");
  j.gpus = "all";
  EXPECT_EQ(after(recorder_args(j, cfg), "--gpus"), "none");
  j.gpus = "0,x";
  EXPECT_EQ(after(recorder_args(j, cfg), "--gpus"), "none");
  // An array's tasks share a task name and carry both ids.
  j.array_job_id = "4240";
  j.array_task_id = "2";
  a = recorder_args(j, cfg);
  EXPECT_EQ(after(a, "--task"), "slurm-array-4240");
  EXPECT_TRUE(has(tags_in(a), "slurm_array_job_id=4240"));
  EXPECT_TRUE(has(tags_in(a), "slurm_array_task_id=2"));
  // A user name with a control character is not passed on as a tag.
  j.user = "ev\x1bil";
  a = recorder_args(j, cfg);
  EXPECT_FALSE(std::any_of(a.begin(), a.end(), [](const auto& t) { return t.starts_with("slurm_user="); }));
}

TEST(SlurmJob, RecorderEnvironmentCarriesNothingOfTheJob) {
  SlurmConfig cfg;
  cfg.state_dir = "/run/ws";
  cfg.mysql_password = "from-config";
  const auto e = recorder_env(cfg, {"SLURM_JOB_ID=42", "SLURM_STEP_ID=0", "HOME=/root", "CUDA_VISIBLE_DEVICES=1",
                                    "WATTSCOPE_FAKE_NVML_SCENARIO=/x.json", "WATTSCOPE_SLURM_DB=/y.db",
                                    "WATTSCOPE_MYSQL_PASSWORD=from-wrapper"});
  EXPECT_TRUE(has(e, "WATTSCOPE_FAKE_NVML_SCENARIO=/x.json"));
  EXPECT_TRUE(has(e, "WATTSCOPE_SPILL_DIR=/run/ws/spill"));
  EXPECT_TRUE(has(e, "WATTSCOPE_MYSQL_PASSWORD=from-config"));
  EXPECT_FALSE(has(e, "WATTSCOPE_MYSQL_PASSWORD=from-wrapper"));
  for (const auto& v : e) {
    EXPECT_FALSE(v.starts_with("SLURM_")) << v << ": the recorder would count itself as one of the job's processes";
    EXPECT_FALSE(v.starts_with("CUDA_VISIBLE_DEVICES=")) << "the GPUs are chosen by --gpus alone";
    EXPECT_FALSE(v.starts_with("WATTSCOPE_SLURM_")) << v;
  }
}

TEST(SlurmConfig, FileThenEnvironmentAndEveryProblemNamed) {
  TempDir d;
  write_file(d / "slurm.conf", "# comment\n\nWATTSCOPE_SLURM_DB = mysql://ws@db/energy\n"
                               "WATTSCOPE_SLURM_STATE_DIR=\"/run/ws\"\nWATTSCOPE_SLURM_RECORD_ARGS=--interval 2s  "
                               "--cpu-tdp 100\nWATTSCOPE_SLURM_STOP_TIMEOUT=5s\n");
  auto cfg = load_slurm_config(d / "slurm.conf", true, env_lookup({}));
  EXPECT_TRUE(cfg.problems.empty());
  EXPECT_EQ(cfg.db, "mysql://ws@db/energy");
  EXPECT_EQ(cfg.state_dir, "/run/ws");
  EXPECT_EQ(cfg.record_args, (std::vector<std::string>{"--interval", "2s", "--cpu-tdp", "100"}));
  EXPECT_EQ(cfg.stop_timeout, std::chrono::seconds(5));
  // The environment wins.
  cfg = load_slurm_config(d / "slurm.conf", true, env_lookup({"WATTSCOPE_SLURM_DB=/var/lib/ws.db"}));
  EXPECT_EQ(cfg.db, "/var/lib/ws.db");
  // A missing default file is no problem; a missing named one is.
  EXPECT_TRUE(load_slurm_config(d / "absent.conf", false, env_lookup({})).problems.empty());
  EXPECT_EQ(load_slurm_config(d / "absent.conf", true, env_lookup({})).problems.size(), 1u);
  // Typos and bad values are named with their file and line; the setting keeps its default.
  write_file(d / "bad.conf", "WATTSCOPE_SLURM_STATE_DIR=/run/ws\nWATTSCOPE_SLURM_DBB=x\nno equals sign\n"
                             "WATTSCOPE_SLURM_STOP_TIMEOUT=forever\n");
  cfg = load_slurm_config(d / "bad.conf", true, env_lookup({}));
  ASSERT_EQ(cfg.problems.size(), 3u);
  EXPECT_NE(cfg.problems[0].find("bad.conf:2: unknown key 'WATTSCOPE_SLURM_DBB'"), std::string::npos);
  EXPECT_NE(cfg.problems[1].find("bad.conf:3: expected KEY=VALUE"), std::string::npos);
  EXPECT_NE(cfg.problems[2].find("bad.conf:4: WATTSCOPE_SLURM_STOP_TIMEOUT"), std::string::npos);
  EXPECT_EQ(cfg.state_dir, "/run/ws") << "problems are logged in the configured state directory";
  EXPECT_EQ(cfg.stop_timeout, std::chrono::seconds(30));
}

// A child that lives until killed, and its start time, as the prolog writes them to the pid file.
pid_t sleeper() {
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

TEST(SlurmJob, EpilogStopsTheRecordedProcessAndNeverAReusedPid) {
  TempDir d;
  SlurmConfig cfg;
  cfg.state_dir = d.path();
  cfg.stop_timeout = std::chrono::seconds(5);
  SlurmJob job;
  job.job_id = "77";
  EXPECT_EQ(stop_recorder(job, cfg).kind, StopResult::Kind::NoRecorder);

  const pid_t pid = sleeper();
  // A pid file whose start time is not this process's: the pid was reused; it must not be signalled.
  write_file(pid_file_path(cfg.state_dir, "77"), std::to_string(pid) + " " + std::to_string(start_time_of(pid) + 1));
  EXPECT_EQ(stop_recorder(job, cfg).kind, StopResult::Kind::AlreadyGone);
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "a process that is not the recorder was signalled";
  EXPECT_FALSE(std::filesystem::exists(pid_file_path(cfg.state_dir, "77")));

  // The right one: SIGTERM, and the wait ends when it is gone (reaped here, as init reaps a real recorder).
  write_file(pid_file_path(cfg.state_dir, "77"), std::to_string(pid) + " " + std::to_string(start_time_of(pid)));
  write_file(job_log_path(cfg.state_dir, "77"), "recorder log\n");
  std::thread reaper([&] { ::waitpid(pid, &status, 0); });
  const StopResult r = stop_recorder(job, cfg);
  reaper.join();
  EXPECT_EQ(r.kind, StopResult::Kind::Stopped);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  EXPECT_LT(r.waited, std::chrono::seconds(5));
  EXPECT_FALSE(std::filesystem::exists(pid_file_path(cfg.state_dir, "77")));
  EXPECT_FALSE(std::filesystem::exists(job_log_path(cfg.state_dir, "77"))) << "a clean stop leaves no log";
  EXPECT_THROW(pid_file_path(cfg.state_dir, "../etc/x"), std::invalid_argument);
}

// A fixture /proc entry with a cgroup and an environment.
void proc(const TempDir& d, int pid, const std::string& comm, const std::string& cgroup, const std::string& environ) {
  const std::string dir = d / ("proc/" + std::to_string(pid));
  write_file(dir + "/stat", std::to_string(pid) + " (" + comm + ") S 1 1 1 0 -1 0 0 0 0 0 10 0 0 0 20 0 1 0 " +
                                std::to_string(1000 + pid) + " 1000 10\n");
  write_file(dir + "/cgroup", cgroup);
  write_file(dir + "/environ", environ);
  write_file(dir + "/cmdline", comm);
}
std::vector<int64_t> pids_of(const ProcessSnapshot& s) {
  std::vector<int64_t> out;
  for (const auto& p : s.procs) {
    EXPECT_TRUE(p.in_run) << p.id.pid;
    out.push_back(p.id.pid);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ProcessTracker, OnlyUnitAndOnlyEnvChooseTheJobsProcessesAndNameItsSteps) {
  using namespace std::string_literals;
  TempDir d;
  write_file(d / "proc/stat", "cpu  100 0 0 100 0 0 0 0 0 0\n");
  const std::string env42 = "HOME=/home/ada\0SLURM_JOB_ID=42\0"s;
  proc(d, 10, "bash", "0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n", "");
  proc(d, 11, "python", "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n", "");
  proc(d, 12, "python", "0::/system.slice/slurmstepd.scope/job_43/step_0/user/task_0\n", "SLURM_JOB_ID=43\0"s);
  proc(d, 13, "train", "0::/user.slice\n",
       env42 + "SLURM_STEP_ID=1\0SLURM_ARRAY_JOB_ID=40\0SLURM_ARRAY_TASK_ID=2\0"s); // no cgroup: the environment
  proc(d, 14, "prolog", "0::/system.slice/slurmd.service\n", env42 + "SLURM_SCRIPT_CONTEXT=prolog_slurmd\0"s);
  proc(d, 15, "other", "0::/user.slice\n", "SLURM_JOB_ID=420\0"s);
  proc(d, 16, "slurmstepd", "0::/system.slice/slurmd.service\n", "PATH=/bin\0"s); // forked, not yet exec'ed
  TrackerOptions o;
  o.procfs_root = d / "proc";
  o.only_units = {"slurm job 42"};
  o.only_env = {"SLURM_JOB_ID=42"};
  ProcessTracker t(o, {});
  auto s = t.scan();
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->run_mode) << "in_run marks the job's processes";
  EXPECT_EQ(pids_of(*s), (std::vector<int64_t>{10, 11, 13}));
  // 16 execs the job's batch script (same pid and start time, a new comm and environment): it is the job's now.
  proc(d, 16, "slurm_script", "0::/system.slice/slurmd.service\n", env42);
  s = t.scan();
  EXPECT_EQ(pids_of(*s), (std::vector<int64_t>{10, 11, 13, 16}));
  EXPECT_EQ(t.slurm_steps(), (std::vector<std::string>{"0", "1", "batch"}));
  EXPECT_EQ(t.slurm_array(),
            (std::map<std::string, std::string>{{"slurm_array_job_id", "40"}, {"slurm_array_task_id", "2"}}));

  // Without a filter, the machine: every process.
  TrackerOptions machine;
  machine.procfs_root = d / "proc";
  ProcessTracker all(machine, {});
  EXPECT_EQ(all.scan()->procs.size(), 7u);
}

RunInfo run_with(const std::string& id, const std::string& tags, std::optional<double> energy, const char* node_host) {
  RunInfo r;
  r.run_id = id;
  r.host = node_host;
  r.start_ms = 1'700'000'000'000;
  r.end_ms = r.start_ms + 10'000;
  r.tags = tags;
  r.total_energy_j = energy;
  r.summary = energy ? R"({"cpu":{"energy_j":)" + std::to_string(*energy) + "}}" : "{}";
  return r;
}

TEST(RunTags, ExactMatchOnEveryTagAndTheJobsTotalAcrossNodes) {
  const std::vector<RunInfo> runs = {
      run_with("a", R"({"slurm_job_id":"42","slurm_node":"n1"})", 100.0, "host-a"),
      run_with("b", R"({"slurm_job_id":"42","slurm_node":"n2"})", 50.0, "host-b"),
      run_with("c", R"({"slurm_job_id":"420","slurm_node":"n1"})", 7.0, "host-a"),
      run_with("d", R"({"slurm_job_id":"42"})", std::nullopt, "host-d"),
      run_with("e", R"({"n":42,"flag":true})", 1.0, "host-e"),
      run_with("f", "not json", 1.0, "host-f"),
  };
  auto ids = [](const std::vector<RunInfo>& rs) {
    std::string s;
    for (const auto& r : rs)
      s += r.run_id;
    return s;
  };
  EXPECT_EQ(ids(filter_runs(runs, parse_tag_filters({"slurm_job_id=42"}))), "abd");
  EXPECT_EQ(ids(filter_runs(runs, parse_tag_filters({"slurm_job_id=42", "slurm_node=n1"}))), "a");
  EXPECT_EQ(ids(filter_runs(runs, parse_tag_filters({"slurm_job_id=4"}))), "") << "exact, not a prefix";
  EXPECT_EQ(ids(filter_runs(runs, parse_tag_filters({"n=42", "flag=true"}))), "e");
  EXPECT_EQ(ids(filter_runs(runs, parse_tag_filters({"x=' OR 1=1 --"}))), "");
  EXPECT_THROW(parse_tag_filters({"no-equals"}), std::invalid_argument);
  EXPECT_THROW(parse_tag_filters({"bad key=1"}), std::invalid_argument);

  const auto job = filter_runs(runs, parse_tag_filters({"slurm_job_id=42"}));
  const auto j = runs_total_json(job, parse_tag_filters({"slurm_job_id=42"}));
  EXPECT_DOUBLE_EQ(j["total_energy_j"].get<double>(), 150.0) << "the run without energy is not a 0";
  EXPECT_EQ(j["runs_measured"], 2);
  EXPECT_EQ(j["nodes"], (nlohmann::json{"n1", "n2", "host-d"}));
  const std::string text = runs_total_text(job, parse_tag_filters({"slurm_job_id=42"}));
  EXPECT_NE(text.find("3 runs tagged slurm_job_id=42 on 3 nodes"), std::string::npos) << text;
  EXPECT_NE(text.find("1 of the 3 runs measured no energy"), std::string::npos) << text;
  EXPECT_TRUE(runs_total_json({}, {})["total_energy_j"].is_null());
}

} // namespace

// slurmd 22.05 gives the prolog no SLURM_ARRAY_* variables: the ids come from `scontrol show job -o`'s one line.
TEST(SlurmJob, ArrayIdsFromScontrolsLine) {
  wattscope::SlurmJob job;
  job.job_id = "5";
  wattscope::parse_scontrol_array_ids(
      "JobId=5 ArrayJobId=4 ArrayTaskId=1 JobName=wrap UserId=root(0) GroupId=root(0) JobState=RUNNING\n", job);
  EXPECT_EQ(job.array_job_id, "4");
  EXPECT_EQ(job.array_task_id, "1");
  wattscope::SlurmJob plain;
  plain.job_id = "7";
  wattscope::parse_scontrol_array_ids("JobId=7 JobName=wrap UserId=root(0) JobState=RUNNING\n", plain);
  EXPECT_EQ(plain.array_job_id, "");
  wattscope::SlurmJob odd; // a range ("1-3") or anything but digits is not taken
  wattscope::parse_scontrol_array_ids("JobId=8 ArrayJobId=8 ArrayTaskId=1-3 JobState=PENDING\n", odd);
  EXPECT_EQ(odd.array_job_id, "");
  EXPECT_EQ(odd.array_task_id, "");
}
} // namespace unit_slurm
