#include "integrations/slurm_job.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "core/duration.hpp"
#include "core/fd.hpp"
#include "core/output_file.hpp"
#include "core/protected_file.hpp"
#include "core/text.hpp"
#include "core/time_util.hpp"
#include "processes/procfs.hpp"
#include "sources/nvml/gpu_selection.hpp"

extern char** environ;

namespace wattscope {

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string_view::npos;
}

std::string trimmed(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string_view::npos) return {};
  const size_t b = s.find_last_not_of(" \t\r");
  return std::string(s.substr(a, b - a + 1));
}

std::vector<std::string> split_spaces(std::string_view s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t a = s.find_first_not_of(" \t", at);
    if (a == std::string_view::npos) break;
    const size_t b = s.find_first_of(" \t", a);
    out.emplace_back(s.substr(a, b == std::string_view::npos ? std::string_view::npos : b - a));
    at = b == std::string_view::npos ? s.size() : b;
  }
  return out;
}

// Tag values come from slurmd, but are checked as any --tag is: a value that is not printable UTF-8 is left out.
void add_tag(std::vector<std::string>& args, const std::string& key, const std::string& value) {
  if (value.empty()) return;
  try {
    parse_tag(key + "=" + value);
  } catch (const std::invalid_argument&) {
    return;
  }
  args.push_back("--tag");
  args.push_back(key + "=" + value);
}

// A pid file names the process the root epilog signals, so it is trusted only as root wrote it: a regular file (never
// followed through a link), owned by this user (root under slurmd), that no one else may write to. Missing: nullopt.
std::optional<RecorderProcess> read_pid_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd && errno == ENOENT) return std::nullopt;
  if (!fd && errno == ELOOP)
    throw std::runtime_error(fmt::format("{}: a symbolic link, not a pid file the prolog wrote; not trusted", path));
  if (!fd) throw std::runtime_error(fmt::format("{}: cannot open it: {}", path, std::strerror(errno)));
  struct stat sb {};
  if (::fstat(fd.get(), &sb) != 0 || !S_ISREG(sb.st_mode))
    throw std::runtime_error(fmt::format("{}: not a regular file; not trusted", path));
  if (sb.st_uid != ::geteuid() || (sb.st_mode & (S_IWGRP | S_IWOTH)))
    throw std::runtime_error(fmt::format("{}: owned by uid {} with mode {:04o}, not written by the prolog (uid {}, "
                                         "writable by no one else); not trusted: remove it",
                                         path, sb.st_uid, sb.st_mode & 07777, ::geteuid()));
  char buf[64];
  ssize_t n = 0;
  while ((n = ::read(fd.get(), buf, sizeof buf)) < 0 && errno == EINTR) {
  }
  std::istringstream in(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0));
  std::string pid, start;
  in >> pid >> start;
  if (!all_digits(pid) || !all_digits(start)) throw std::runtime_error(fmt::format("{}: not a pid file", path));
  RecorderProcess p;
  p.pid = static_cast<pid_t>(std::stoll(pid));
  p.start_time = std::stoull(start);
  if (p.pid <= 1) throw std::runtime_error(fmt::format("{}: pid {} is not a recorder", path, pid));
  return p;
}

std::optional<PidStat> stat_of(pid_t pid, const std::string& procfs_root) {
  std::string text;
  PidStat st;
  if (!read_small_file(fmt::format("{}/{}/stat", procfs_root, pid), text) || !parse_pid_stat(text, st))
    return std::nullopt;
  return st;
}

// The state directory holds the pid files the root epilog signals and the logs it reads back: it is used only when no
// one else could have put a file in it (core/protected_file: this user's, writable by no one else, nor its parents by
// anyone but root or sticky). A 1777 directory such as /tmp would let any user plant job-N.pid and have the epilog
// kill a process of their choice.
void check_state_dir(const std::string& dir) {
  try {
    check_protected_directory(dir, "the state directory (WATTSCOPE_SLURM_STATE_DIR)");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
}

// Made 0700 when missing, then checked.
void ensure_state_dir(const std::string& dir) {
  if (dir.empty() || dir.front() != '/')
    throw std::runtime_error(fmt::format("WATTSCOPE_SLURM_STATE_DIR '{}' must be an absolute path", excerpt(dir)));
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("cannot make the state directory {}: {}", dir, std::strerror(errno)));
  check_state_dir(dir);
}

// The end of a job's log, read back into slurm.log: never through a link, and only a regular file of this user's,
// so that a planted job-N.log cannot make root copy the end of a file the planter may not read.
std::string read_tail(const std::string& path, size_t max_bytes = 2000) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) return errno == ELOOP ? fmt::format("({} is a symbolic link: not read)", path) : std::string();
  struct stat sb {};
  if (::fstat(fd.get(), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != ::geteuid())
    return fmt::format("({} is not a regular file of uid {}: not read)", path, ::geteuid());
  const auto size = static_cast<size_t>(sb.st_size);
  const size_t from = size > max_bytes ? size - max_bytes : 0;
  std::string out(size - from, '\0');
  const ssize_t n = ::pread(fd.get(), out.data(), out.size(), static_cast<off_t>(from));
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

} // namespace

std::vector<std::string> process_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e)
    out.emplace_back(*e);
  return out;
}

EnvLookup env_lookup(std::vector<std::string> environment) {
  return [environment = std::move(environment)](const std::string& name) -> std::optional<std::string> {
    for (const auto& e : environment)
      if (e.size() > name.size() && e[name.size()] == '=' && e.compare(0, name.size(), name) == 0)
        return e.substr(name.size() + 1);
    return std::nullopt;
  };
}

SlurmJob slurm_job_from_env(const EnvLookup& env) {
  SlurmJob j;
  auto get = [&](const char* name) { return env(name).value_or(""); };
  j.job_id = get("SLURM_JOB_ID");
  if (j.job_id.empty()) j.job_id = get("SLURM_JOBID"); // older slurmd
  if (j.job_id.empty())
    throw std::invalid_argument("SLURM_JOB_ID is not set: 'wattscope slurm prolog|epilog' is run by slurmd (Prolog= "
                                "and Epilog= in slurm.conf), not by hand");
  if (!all_digits(j.job_id))
    throw std::invalid_argument(fmt::format("SLURM_JOB_ID '{}' is not a job number", excerpt(j.job_id)));
  j.user = get("SLURM_JOB_USER");
  j.uid = get("SLURM_JOB_UID");
  j.node = get("SLURMD_NODENAME");
  j.gpus = get("SLURM_JOB_GPUS");
  j.array_job_id = get("SLURM_ARRAY_JOB_ID");
  j.array_task_id = get("SLURM_ARRAY_TASK_ID");
  j.partition = get("SLURM_JOB_PARTITION");
  j.cluster = get("SLURM_CLUSTER_NAME");
  if (!j.array_job_id.empty() && !all_digits(j.array_job_id)) j.array_job_id.clear();
  if (!j.array_task_id.empty() && !all_digits(j.array_task_id)) j.array_task_id.clear();
  return j;
}

void parse_scontrol_array_ids(std::string_view line, SlurmJob& job) {
  auto field = [&](std::string_view key) -> std::string {
    for (size_t at = line.find(key); at != std::string_view::npos; at = line.find(key, at + 1)) {
      if (at > 0 && line[at - 1] != ' ') continue; // "ArrayJobId=" inside another key
      std::string_view v = line.substr(at + key.size());
      v = v.substr(0, v.find_first_of(" \n"));
      const std::string s(v);
      return all_digits(s) ? s : std::string();
    }
    return {};
  };
  const std::string array_job = field("ArrayJobId="), array_task = field("ArrayTaskId=");
  if (array_job.empty() || array_task.empty()) return;
  job.array_job_id = array_job;
  job.array_task_id = array_task;
}

void array_ids_from_scontrol(SlurmJob& job) {
  if (!all_digits(job.job_id)) return; // the only text of ours in the command line: digits, checked
  const std::string cmd = "timeout 3 scontrol show job -o " + job.job_id + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return;
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0 && out.size() < (1u << 16);)
    out.append(buf, n);
  ::pclose(p);
  parse_scontrol_array_ids(out, job);
}

SlurmConfig load_slurm_config(const std::string& path, bool path_given, const EnvLookup& env) {
  SlurmConfig cfg;
  std::map<std::string, std::pair<std::string, std::string>> values; // key -> value, where ("file:line" or "env")
  static const char* const kKeys[] = {"WATTSCOPE_SLURM_DB",          "WATTSCOPE_SLURM_STATE_DIR",
                                      "WATTSCOPE_SLURM_RECORD_ARGS", "WATTSCOPE_SLURM_STOP_TIMEOUT",
                                      "WATTSCOPE_MYSQL_PASSWORD",    "WATTSCOPE_NVML_LIBRARY"};
  auto known = [](std::string_view k) {
    for (const char* key : kKeys)
      if (k == key) return true;
    return false;
  };
  // The prolog runs as root and hands the file's store, password and library to a root recorder: the file is read
  // only when no one but root (or this user) could have written it, as serve's token file. A missing default file is
  // no error (the environment alone configures the hooks).
  std::optional<std::string> text;
  struct stat sb {};
  if (path_given || ::stat(path.c_str(), &sb) == 0 || errno != ENOENT) {
    try {
      text = read_protected_file(path, "configuration file", kMaxSlurmConfigBytes);
    } catch (const std::invalid_argument& e) {
      cfg.problems.push_back(e.what());
    }
  }
  if (text) {
    cfg.config_file = path;
    std::istringstream in(*text);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      const std::string t = trimmed(line);
      if (t.empty() || t.front() == '#') continue;
      const size_t eq = t.find('=');
      const std::string where = fmt::format("{}:{}", path, n);
      if (eq == std::string::npos) {
        cfg.problems.push_back(fmt::format("{}: expected KEY=VALUE, found '{}'", where, excerpt(t)));
        continue;
      }
      std::string key = trimmed(t.substr(0, eq)), value = trimmed(t.substr(eq + 1));
      if (!known(key)) {
        cfg.problems.push_back(fmt::format("{}: unknown key '{}'; the keys are WATTSCOPE_SLURM_DB, "
                                           "WATTSCOPE_SLURM_STATE_DIR, WATTSCOPE_SLURM_RECORD_ARGS, "
                                           "WATTSCOPE_SLURM_STOP_TIMEOUT, WATTSCOPE_MYSQL_PASSWORD and "
                                           "WATTSCOPE_NVML_LIBRARY",
                                           where, excerpt(key)));
        continue;
      }
      if (value.size() >= 2 &&
          ((value.front() == '"' && value.back() == '"') || (value.front() == '\'' && value.back() == '\'')))
        value = value.substr(1, value.size() - 2);
      values[key] = {value, where};
    }
  }
  for (const char* key : kKeys)
    if (auto v = env(key)) values[key] = {*v, fmt::format("the environment's {}", key)};
  auto take = [&](const char* key, auto&& apply) {
    auto it = values.find(key);
    if (it == values.end()) return;
    try {
      apply(it->second.first);
    } catch (const std::invalid_argument& e) {
      cfg.problems.push_back(fmt::format("{}: {}: {}", it->second.second, key, e.what()));
    }
  };
  take("WATTSCOPE_SLURM_STATE_DIR", [&](const std::string& v) {
    if (v.empty() || v.front() != '/') throw std::invalid_argument("must be an absolute path");
    cfg.state_dir = v;
  });
  take("WATTSCOPE_SLURM_DB", [&](const std::string& v) {
    if (v.empty()) throw std::invalid_argument("empty; give a store such as mysql://wattscope@db.example.org/energy");
    cfg.db = v;
  });
  take("WATTSCOPE_SLURM_RECORD_ARGS", [&](const std::string& v) { cfg.record_args = split_spaces(v); });
  take("WATTSCOPE_SLURM_STOP_TIMEOUT", [&](const std::string& v) {
    const auto d = parse_duration(v);
    if (d < std::chrono::milliseconds(100) || d > std::chrono::hours(1))
      throw std::invalid_argument(fmt::format("'{}' is out of range; give 100ms to 1h, e.g. 30s", excerpt(v)));
    cfg.stop_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(d);
  });
  take("WATTSCOPE_MYSQL_PASSWORD", [&](const std::string& v) { cfg.mysql_password = v; });
  take("WATTSCOPE_NVML_LIBRARY", [&](const std::string& v) { cfg.nvml_library = v; });
  return cfg;
}

std::vector<std::string> recorder_args(const SlurmJob& job, const SlurmConfig& cfg) {
  // A job array's tasks share a task name, so `wattscope stats --task slurm-array-N` compares them.
  std::vector<std::string> a = {
      "--task", job.array_job_id.empty() ? "slurm-job-" + job.job_id : "slurm-array-" + job.array_job_id, "--db",
      cfg.db};
  // SLURM_JOB_GPUS: Slurm's indices of the job's GPUs on this node, as --gpus takes them. Anything else (a job
  // without GPUs, a value --gpus would refuse) records no GPU: never another job's.
  std::string gpus = "none";
  if (!job.gpus.empty()) {
    try {
      const GpuSelection sel = parse_gpu_selection(job.gpus, std::nullopt);
      if (!sel.all && !sel.tokens.empty()) gpus = job.gpus;
    } catch (const std::invalid_argument&) {
    }
  }
  a.insert(a.end(), {"--gpus", gpus, "--only-unit", "slurm job " + job.job_id, "--only-env",
                     "SLURM_JOB_ID=" + job.job_id, "--process-interval", "1s"});
  add_tag(a, "slurm_job_id", job.job_id);
  add_tag(a, "slurm_user", job.user);
  add_tag(a, "slurm_node", job.node);
  add_tag(a, "slurm_array_job_id", job.array_job_id);
  add_tag(a, "slurm_array_task_id", job.array_task_id);
  add_tag(a, "slurm_partition", job.partition);
  add_tag(a, "slurm_cluster", job.cluster);
  add_tag(a, "slurm_gpus", job.gpus);
  a.insert(a.end(), cfg.record_args.begin(), cfg.record_args.end());
  return a;
}

std::vector<std::string> recorder_env(const SlurmConfig& cfg, const std::vector<std::string>& environment) {
  std::vector<std::string> e = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                "WATTSCOPE_SPILL_DIR=" + cfg.state_dir + "/spill"};
  auto set = [&](const std::string& entry) {
    const std::string name = entry.substr(0, entry.find('=') + 1);
    std::erase_if(e, [&](const std::string& x) { return x.starts_with(name); });
    e.push_back(entry);
  };
  for (const auto& v : environment)
    if ((v.starts_with("WATTSCOPE_") && !v.starts_with("WATTSCOPE_SLURM_")) || v.starts_with("TZ=") ||
        v.starts_with("LANG=") || v.starts_with("LC_ALL="))
      set(v);
  // The configuration's values win over a wrapper's.
  if (cfg.mysql_password) set("WATTSCOPE_MYSQL_PASSWORD=" + *cfg.mysql_password);
  if (!cfg.nvml_library.empty()) set("WATTSCOPE_NVML_LIBRARY=" + cfg.nvml_library);
  return e;
}

std::string pid_file_path(const std::string& state_dir, const std::string& job_id) {
  if (!all_digits(job_id)) throw std::invalid_argument(fmt::format("job id '{}' is not a number", excerpt(job_id)));
  return state_dir + "/job-" + job_id + ".pid";
}

std::string job_log_path(const std::string& state_dir, const std::string& job_id) {
  if (!all_digits(job_id)) throw std::invalid_argument(fmt::format("job id '{}' is not a number", excerpt(job_id)));
  return state_dir + "/job-" + job_id + ".log";
}

bool recorder_alive(const RecorderProcess& p, const std::string& procfs_root) {
  const auto st = stat_of(p.pid, procfs_root);
  return st && st->start_time == p.start_time && st->state != 'Z' && st->state != 'X' && st->state != 'x';
}

RecorderProcess start_recorder(const std::string& exe, const SlurmJob& job, const SlurmConfig& cfg,
                               const std::vector<std::string>& environment) {
  ensure_state_dir(cfg.state_dir);
  const std::string pid_path = pid_file_path(cfg.state_dir, job.job_id);
  if (auto old = read_pid_file(pid_path); old && recorder_alive(*old))
    throw std::runtime_error(fmt::format("job {} is already recorded by pid {} ({})", job.job_id, old->pid, pid_path));
  const std::string log = job_log_path(cfg.state_dir, job.job_id);

  // -q: the recorder's log holds its errors, not the summary (read back from the store, which could outlast the
  // epilog's wait on a long job)
  std::vector<std::string> args = {exe, "-q", "record"};
  for (auto& a : recorder_args(job, cfg))
    args.push_back(std::move(a));
  std::vector<std::string> envs = recorder_env(cfg, environment);
  // The recorder runs as root and dlopens these: a library another user could replace would run as root.
  for (const auto& e : envs) {
    const size_t eq = e.find('=');
    const std::string name = e.substr(0, eq), value = e.substr(eq + 1);
    if (name.starts_with("WATTSCOPE_") && name.ends_with("_LIBRARY") && value.find('/') != std::string::npos) {
      try {
        check_protected_file(value, name);
      } catch (const std::invalid_argument& x) {
        throw std::runtime_error(fmt::format("{}; the recorder is not started", x.what()));
      }
    }
  }
  std::vector<char*> argv, envp;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : envs)
    envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  // Nothing of slurmd's is inherited: a pipe it reads the prolog's output from would otherwise stay open, and slurmd
  // wait for the recorder to end.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  // Its own session: slurmd's kill of the prolog's process group (a prolog timeout) does not reach it. SIGTERM and
  // friends start blocked: a job that ends before the recorder is listening leaves the signal pending, and the
  // recorder (which blocks them itself before it opens anything) takes it and finalises the run.
  sigset_t blocked, defaults;
  sigemptyset(&blocked);
  for (int s : {SIGTERM, SIGINT, SIGHUP})
    sigaddset(&blocked, s);
  sigemptyset(&defaults);
  for (int s : {SIGPIPE, SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM})
    sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &blocked);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error(fmt::format("cannot start {} record: {}", exe, std::strerror(rc)));

  // Until its pid file is written, the recorder is ours to stop: one the epilog cannot find would record on, unowned,
  // after the job (a full state directory). It is our child until we exit, so it is reaped here too.
  auto stop_and_reap = [&] {
    ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  };
  RecorderProcess p;
  p.pid = pid;
  const auto st = stat_of(pid, "/proc");
  if (!st) {
    stop_and_reap();
    throw std::runtime_error(fmt::format("the recorder (pid {}) exited at once; see {}", pid, log));
  }
  p.start_time = st->start_time;
  try {
    write_output(pid_path, fmt::format("{} {}\n", p.pid, p.start_time));
  } catch (const std::exception& e) {
    stop_and_reap();
    ::unlink(pid_path.c_str());
    throw std::runtime_error(
        fmt::format("cannot write the pid file ({}); the recorder (pid {}) was stopped", e.what(), pid));
  }
  // A recorder that fails at once (a store it cannot open, a flag it refuses) is said to have failed, with its log,
  // rather than logged as recording: give it a moment to fail.
  const auto deadline = std::chrono::steady_clock::now() + kRecorderStartGrace;
  for (;;) {
    int status = 0;
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno == ECHILD) || !recorder_alive(p)) {
      ::unlink(pid_path.c_str());
      std::string how = "exited at once";
      if (w == pid && WIFEXITED(status)) how = fmt::format("exited at once with status {}", WEXITSTATUS(status));
      if (w == pid && WIFSIGNALED(status)) how = fmt::format("was killed at once by signal {}", WTERMSIG(status));
      throw std::runtime_error(
          fmt::format("the recorder (pid {}) {}; its log ({}): {}", pid, how, log, excerpt(read_tail(log, 600), 600)));
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return p;
}

StopResult stop_recorder(const SlurmJob& job, const SlurmConfig& cfg) {
  StopResult r;
  const std::string pid_path = pid_file_path(cfg.state_dir, job.job_id);
  const std::string log = job_log_path(cfg.state_dir, job.job_id);
  struct stat sb {};
  if (::lstat(cfg.state_dir.c_str(), &sb) != 0 && errno == ENOENT) return r; // no prolog ever ran here
  check_state_dir(cfg.state_dir);
  const auto p = read_pid_file(pid_path);
  if (!p) return r; // the prolog did not start one (it logged why)
  r.process = *p;
  const auto t0 = std::chrono::steady_clock::now();
  auto waited = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  };
  if (!recorder_alive(*p)) {
    r.kind = StopResult::Kind::AlreadyGone;
    r.log_tail = read_tail(log);
  } else {
    ::kill(p->pid, SIGTERM);
    while (recorder_alive(*p) && waited() < cfg.stop_timeout)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (recorder_alive(*p)) {
      ::kill(p->pid, SIGKILL);
      for (int i = 0; i < 100 && recorder_alive(*p); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      r.kind = StopResult::Kind::Killed;
      r.log_tail = read_tail(log);
    } else {
      r.kind = StopResult::Kind::Stopped;
    }
  }
  r.waited = waited();
  ::unlink(pid_path.c_str());
  if (r.kind == StopResult::Kind::Stopped) ::unlink(log.c_str());
  return r;
}

void slurm_log(const SlurmConfig& cfg, const std::string& line) {
  const std::string text = fmt::format("{} wattscope slurm: {}\n", iso_utc_ms(wall_now_ms()), line);
  std::fputs(text.c_str(), stderr);
  try { // a directory refused for pid files is no place for the log either: stderr alone then
    check_state_dir(cfg.state_dir);
  } catch (const std::runtime_error&) {
    return;
  }
  UniqueFd fd(
      ::open((cfg.state_dir + "/slurm.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return;
  [[maybe_unused]] const ssize_t n = ::write(fd.get(), text.data(), text.size());
}

} // namespace wattscope
