#include "sources/init_probe.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

namespace wattscope {

namespace {
std::string signal_words(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* text = strsignal(sig);
  return fmt::format("SIG{} ({})", abbrev ? abbrev : std::to_string(sig).c_str(), text ? text : "unknown signal");
}

[[noreturn]] void child_main(int fd, const std::function<int()>& fn) {
  // Nothing of the parent's is the child's to hold: not the terminal or the pipes a caller reads to their end (a
  // child hung for minutes would hold `wattscope run ... | tee` open), not a store or a listening socket; and it dies
  // with the thread that waits for it, so it never outlives wattscope.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (const int null = ::open("/dev/null", O_RDWR); null >= 0) {
    for (int std_fd = 0; std_fd <= 2; ++std_fd)
      ::dup2(null, std_fd);
    if (null > 2) ::close(null);
  }
  if (fd != 3) {
    ::dup2(fd, 3);
    fd = 3;
  }
  ::syscall(SYS_close_range, 4U, ~0U, 0U);
  // The crash is the answer, not something to dump: no core file in the user's directory, and none of the parent's
  // handlers (they would report a crash of wattscope).
  struct rlimit no_core {};
  ::setrlimit(RLIMIT_CORE, &no_core);
  for (int s : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTERM, SIGINT, SIGHUP, SIGPIPE})
    std::signal(s, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
  const int rc = fn();
  ssize_t n;
  do
    n = ::write(fd, &rc, sizeof rc);
  while (n < 0 && errno == EINTR);
  ::_exit(n == sizeof rc ? 0 : 1);
}
} // namespace

InitProbe probe_in_child(const std::function<int()>& fn, std::chrono::milliseconds timeout) {
  InitProbe out;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    out.detail = fmt::format("no pipe for the probe: {}", std::strerror(errno));
    return out;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    out.detail = fmt::format("cannot fork the probe: {}", std::strerror(errno));
    ::close(fds[0]);
    ::close(fds[1]);
    return out;
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_main(fds[1], fn);
  }
  ::close(fds[1]);
  int rc = 0;
  size_t got = 0;
  bool hung = false;
  const auto end = t0 + timeout;
  while (got < sizeof rc) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      hung = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count() + 1, 60'000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue; // the timeout is re-checked above
    const ssize_t n = ::read(fds[0], reinterpret_cast<char*>(&rc) + got, sizeof rc - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break; // the child is gone without an answer
    got += static_cast<size_t>(n);
  }
  ::close(fds[0]);
  if (hung) ::kill(pid, SIGKILL);
  int status = 0;
  pid_t w;
  do
    w = ::waitpid(pid, &status, 0);
  while (w < 0 && errno == EINTR);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (got == sizeof rc) {
    out.outcome = InitProbe::Outcome::Answered;
    out.code = rc;
  } else if (hung) {
    out.outcome = InitProbe::Outcome::Hung;
    out.detail = fmt::format("still inside it after {:g} s (killed)", std::chrono::duration<double>(timeout).count());
  } else {
    out.outcome = InitProbe::Outcome::Crashed;
    if (w == pid && WIFSIGNALED(status))
      out.detail = fmt::format("killed by {}", signal_words(WTERMSIG(status)));
    else if (w == pid && WIFEXITED(status))
      out.detail = fmt::format("exited with status {} without an answer", WEXITSTATUS(status));
    else
      out.detail = "ended without an answer";
  }
  return out;
}

std::chrono::milliseconds probe_timeout_from_env(const char* variable, std::chrono::milliseconds fallback) {
  const char* v = std::getenv(variable);
  if (!v || !*v) return fallback;
  const std::string_view s(v);
  if (s == "off" || s == "0" || s == "no" || s == "false") return std::chrono::milliseconds(0);
  char* endp = nullptr;
  const double secs = std::strtod(v, &endp);
  if (endp == v || *endp != '\0' || !(secs > 0) || secs > 86400) return fallback;
  return std::chrono::milliseconds(static_cast<long long>(secs * 1000));
}

} // namespace wattscope
