#include "cli/child.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace wattscope {

namespace {
sigset_t control_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD})
    sigaddset(&set, s);
  return set;
}
void on_sigchld(int) {}

bool executable_file(const std::string& path, int& err) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) {
    err = errno;
    return false;
  }
  if (S_ISDIR(sb.st_mode)) {
    err = EISDIR;
    return false;
  }
  if (::access(path.c_str(), X_OK) != 0) {
    err = errno;
    return false;
  }
  return true;
}
} // namespace

void block_control_signals() {
  // SIGCHLD must not be SIG_IGN (that would auto-reap the child and lose its status); a no-op handler makes sure.
  struct sigaction sa {};
  sa.sa_handler = on_sigchld;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGCHLD, &sa, nullptr);
  sigset_t set = control_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

std::string resolve_command(const std::string& cmd) {
  if (cmd.empty()) throw CommandError(127, "empty command");
  int err = ENOENT;
  if (cmd.find('/') != std::string::npos) {
    if (executable_file(cmd, err)) return cmd;
    throw CommandError(err == ENOENT ? 127 : 126, fmt::format("cannot run '{}': {}", cmd, std::strerror(err)));
  }
  const char* path_env = std::getenv("PATH");
  std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  int found_err = ENOENT;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + cmd;
    if (executable_file(candidate, err)) return candidate;
    if (err == EACCES) found_err = EACCES;
    start = end + 1;
  }
  if (found_err == EACCES) throw CommandError(126, fmt::format("cannot run '{}': permission denied", cmd));
  throw CommandError(127, fmt::format("command not found: '{}'", cmd));
}

pid_t spawn_child(const std::string& path, const std::vector<std::string>& argv, int cgroup_procs_fd,
                  const std::vector<std::string>& extra_env) {
  // A close-on-exec pipe tells the parent whether exec succeeded: EOF means it did, an errno means it did not.
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw CommandError(126, fmt::format("pipe: {}", std::strerror(errno)));
  std::vector<char*> args;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The child's environment, built before fork (the child must not allocate): ours, with extra_env's names replaced.
  std::vector<char*> envp;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const auto name_len = entry.find('=');
    bool replaced = false;
    for (const auto& x : extra_env)
      if (name_len != std::string_view::npos && x.size() > name_len &&
          x.compare(0, name_len + 1, entry.substr(0, name_len + 1)) == 0)
        replaced = true;
    if (!replaced) envp.push_back(*e);
  }
  for (const auto& x : extra_env)
    envp.push_back(const_cast<char*>(x.c_str()));
  envp.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw CommandError(126, fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::close(fds[0]);
    signal(SIGCHLD, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // Into the run's cgroup before exec (write(2) is async-signal-safe); a failure leaves it where it was.
    if (cgroup_procs_fd >= 0) (void)!::write(cgroup_procs_fd, "0", 1);
    ::execve(path.c_str(), args.data(), envp.data());
    int e = errno;
    (void)!::write(fds[1], &e, sizeof e);
    ::_exit(e == ENOENT ? 127 : 126);
  }
  ::close(fds[1]);
  int child_errno = 0;
  ssize_t n;
  do
    n = ::read(fds[0], &child_errno, sizeof child_errno);
  while (n < 0 && errno == EINTR);
  ::close(fds[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    throw CommandError(child_errno == ENOENT ? 127 : 126,
                       fmt::format("cannot run '{}': {}", argv[0], std::strerror(child_errno)));
  }
  return pid;
}

ChildResult wait_child(pid_t pid) {
  sigset_t set = control_set();
  ChildResult r;
  for (;;) {
    int status = 0;
    pid_t w = ::wait4(pid, &status, WNOHANG, &r.usage);
    if (w == pid) {
      if (WIFEXITED(status)) {
        r.exit_code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        r.signal = WTERMSIG(status);
        r.exit_code = 128 + *r.signal;
      }
      return r;
    }
    // SIGCHLD is blocked from before the fork, so an exit between wait4 and here stays pending and ends the wait at
    // once: no periodic re-check, and no wake-up while the child runs (issue 12).
    siginfo_t info{};
    int sig = sigwaitinfo(&set, &info);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      // si_code <= 0 means a process sent it (kill, sigqueue); a terminal's signal comes from the kernel and
      // already went to the child's process group.
      if (info.si_code <= 0) ::kill(pid, sig);
    }
  }
}

std::optional<int> wait_for_stop(std::optional<std::chrono::nanoseconds> duration) {
  sigset_t set = control_set();
  const auto end = std::chrono::steady_clock::now() + duration.value_or(std::chrono::nanoseconds(0));
  // One wait for the whole duration (or for ever): the thread wakes only for a signal or the end, never to poll.
  for (;;) {
    siginfo_t info{};
    int sig;
    if (duration) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      struct timespec ts {
        static_cast<time_t>(left.count() / 1'000'000'000), static_cast<long>(left.count() % 1'000'000'000)
      };
      sig = sigtimedwait(&set, &info, &ts);
    } else {
      sig = sigwaitinfo(&set, &info);
    }
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) return sig;
  }
}

} // namespace wattscope
