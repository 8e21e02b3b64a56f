// Slurm jobs recorded without touching job scripts (issue 18): slurmd runs `wattscope slurm prolog` as root before a
// job's first step on a node, and `wattscope slurm epilog` after its end (docs/slurm.md). The prolog starts a detached
// `wattscope record` scoped to the job (its GPUs, its processes, its tags); the epilog stops it with SIGTERM and a
// bounded wait, so a job that fails or is cancelled is finalised too. Neither ever fails a job: slurmd drains a node
// whose prolog or epilog fails, so every problem is logged and the command exits 0.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace wattscope {

// A variable of the environment, or nullopt when unset: of this process's (environ) or of a list of "NAME=value".
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
std::vector<std::string> process_environment();
EnvLookup env_lookup(std::vector<std::string> environment);

// What slurmd tells its prolog and epilog about the job (their environment).
struct SlurmJob {
  std::string job_id{};       // SLURM_JOB_ID: digits
  std::string user{};         // SLURM_JOB_USER
  std::string uid{};          // SLURM_JOB_UID
  std::string node{};         // SLURMD_NODENAME
  std::string gpus{};         // SLURM_JOB_GPUS: "0,2" (Slurm's GPU indices on this node); empty: none allocated
  std::string array_job_id{}; // SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID: empty outside a job array
  std::string array_task_id{};
  std::string partition{}; // SLURM_JOB_PARTITION
  std::string cluster{};   // SLURM_CLUSTER_NAME
};
// Throws std::invalid_argument naming the variable when SLURM_JOB_ID is missing or not a number (not run by slurmd).
SlurmJob slurm_job_from_env(const EnvLookup& env);
// slurmd 22.05 gives the prolog no SLURM_ARRAY_* variables: a job array's ids from `scontrol show job -o ID`'s
// ArrayJobId= and ArrayTaskId= (parse_scontrol_array_ids reads that one line; digits only, else left empty).
void parse_scontrol_array_ids(std::string_view scontrol_line, SlurmJob& job);
// Runs `scontrol show job -o ID` (at most 3 s, through timeout(1)) and fills the array ids it names.
void array_ids_from_scontrol(SlurmJob& job);

// Where runs go and how the recorder runs: /etc/wattscope/slurm.conf (or the file WATTSCOPE_SLURM_CONFIG names), lines
// of KEY=VALUE with the keys below, '#' comments; a variable of the same name in the environment wins.
struct SlurmConfig {
  std::string db = "/var/lib/wattscope/slurm.db"; // WATTSCOPE_SLURM_DB: any --db (mysql://USER@HOST/DB shared)
  std::string state_dir = "/run/wattscope-slurm"; // WATTSCOPE_SLURM_STATE_DIR: pid files, logs
  std::vector<std::string> record_args;           // WATTSCOPE_SLURM_RECORD_ARGS: more `record` flags, by spaces
  std::chrono::milliseconds stop_timeout{30000};  // WATTSCOPE_SLURM_STOP_TIMEOUT: epilog's wait, e.g. 30s
  std::optional<std::string> mysql_password;      // WATTSCOPE_MYSQL_PASSWORD, for the recorder only
  std::string nvml_library;                       // WATTSCOPE_NVML_LIBRARY, passed on when set
  std::string config_file;                        // the file read ("" when none was)
  // What was wrong with the file or the environment, each naming the file and line or the variable (the setting keeps
  // its default). The prolog logs them and records nothing, rather than record somewhere unintended.
  std::vector<std::string> problems;
};
inline constexpr const char* kDefaultSlurmConfig = "/etc/wattscope/slurm.conf";
inline constexpr size_t kMaxSlurmConfigBytes = 64 * 1024;
// path: the file (a missing default file is no error); env: the overrides. Never throws: see `problems`. The file is
// read only under serve's token file rules (core/protected_file.hpp: a regular file of at most kMaxSlurmConfigBytes
// that only root or this user could have changed, nor its directories); otherwise the refusal is the problem and
// nothing of the file is used.
SlurmConfig load_slurm_config(const std::string& path, bool path_given, const EnvLookup& env);

// The arguments of `wattscope record` for the job (after the program's name): its GPUs (--gpus from SLURM_JOB_GPUS,
// `none` when it has none), its processes (--only-unit "slurm job N", --only-env SLURM_JOB_ID=N), its tags, the store.
std::vector<std::string> recorder_args(const SlurmJob& job, const SlurmConfig& cfg);
// The recorder's whole environment: PATH, the spill directory in the state directory, the configuration's password and
// NVML library, and the WATTSCOPE_* variables of `environment` (a wrapper script's); nothing of the job's, so that its
// own environment never makes it one of the job's processes.
std::vector<std::string> recorder_env(const SlurmConfig& cfg, const std::vector<std::string>& environment);

// A recorder is its pid and its start time (/proc/PID/stat), so that a pid reused by another process is never
// signalled.
struct RecorderProcess {
  pid_t pid = 0;
  uint64_t start_time = 0;
};
std::string pid_file_path(const std::string& state_dir, const std::string& job_id);
std::string job_log_path(const std::string& state_dir, const std::string& job_id);
// Whether that process still runs (a zombie or a reused pid does not). procfs_root: /proc in production.
bool recorder_alive(const RecorderProcess& p, const std::string& procfs_root = "/proc");

// The state directory (made 0700 when missing) must be this user's (root's, under slurmd), writable by no one else,
// below directories only root (or a sticky bit) guards: core/protected_file's check_protected_directory.
// The prolog's work: starts the recorder (`exe` record ARGS) in its own session with SIGTERM/SIGINT/SIGHUP blocked
// until it waits for them (so a job over before it is ready still finalises its run), stdin from /dev/null,
// stdout/stderr to the job's log, and writes its pid file. Returns it. Throws std::runtime_error naming the problem:
// a library in its environment (WATTSCOPE_*_LIBRARY) that someone other than root could replace (it is not started);
// a pid file it cannot write (the recorder is killed: the epilog could never stop it); a recorder that exits within
// kRecorderStartGrace (its log's end is in the message).
inline constexpr std::chrono::milliseconds kRecorderStartGrace{250};
RecorderProcess start_recorder(const std::string& exe, const SlurmJob& job, const SlurmConfig& cfg,
                               const std::vector<std::string>& environment);

struct StopResult {
  enum class Kind { NoRecorder, AlreadyGone, Stopped, Killed } kind = Kind::NoRecorder;
  RecorderProcess process;
  std::chrono::milliseconds waited{0};
  std::string log_tail; // the recorder's own log when it did not stop cleanly (AlreadyGone, Killed)
};
// The epilog's work: SIGTERM to the job's recorder, a wait of at most cfg.stop_timeout for it to finalise its run,
// then SIGKILL (the run is then unfinished: `wattscope repair` finalises it). Removes the pid file, and the job's log
// when the recorder stopped cleanly. Throws std::runtime_error, touching nothing, on a state directory someone else
// could write to (see start_recorder) or a pid file root did not write (another owner, writable by others, a link).
StopResult stop_recorder(const SlurmJob& job, const SlurmConfig& cfg);

// One line, time-stamped, appended to <state_dir>/slurm.log (created 0600; only in a state directory that passes the
// check above, never through a link) and written to stderr; never throws.
void slurm_log(const SlurmConfig& cfg, const std::string& line);

} // namespace wattscope
