#include "sources/init_probe.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

namespace wattscope {

namespace {
constexpr const char* kProbeFlag = "--wattscope-init-probe";
constexpr const char* kProbeName = "wattscope (vendor init probe)";

// What the child writes on fd 3.
struct ProbeAnswer {
  int32_t kind = 0; // 0: the init function returned `value`; 1: no library loaded; 2: no init symbol found
  int32_t value = 0;
};

std::string signal_words(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* text = strsignal(sig);
  return fmt::format("SIG{} ({})", abbrev ? abbrev : std::to_string(sig).c_str(), text ? text : "unknown signal");
}

// The signals whose disposition a child must not inherit as "ignored" (exec resets caught ones by itself): a library
// that raises one must die of it, as it would in wattscope.
constexpr int kDefaultSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD};

[[noreturn]] void send_answer(ProbeAnswer a) {
  ssize_t n;
  do
    n = ::write(3, &a, sizeof a);
  while (n < 0 && errno == EINTR);
  ::_exit(n == static_cast<ssize_t>(sizeof a) ? 0 : 1);
}

// The child: a fresh process, so no lock of the parent's is held here. Plain libc only: this runs before main and
// before most static constructors.
// argv: name, flag, parent pid, shutdown symbol ("-": none), count of init symbols, init symbols..., libraries...
[[noreturn]] void probe_child_main(int argc, char** argv) {
  // It dies with the thread that waits for it, so it never outlives wattscope; a parent gone already: nothing to do.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != static_cast<pid_t>(std::strtol(argv[2], nullptr, 10))) ::_exit(1);
  // The crash is the answer, not something to dump: no core file in the user's directory.
  struct rlimit no_core {};
  ::setrlimit(RLIMIT_CORE, &no_core);
  // None of the handlers a runtime set up before us (AddressSanitizer's catches SIGSEGV and exits 1): a crash in the
  // library must show as the signal it is.
  for (int s : kDefaultSignals)
    std::signal(s, SIG_DFL);
  const char* shutdown_symbol = std::strcmp(argv[3], "-") == 0 ? nullptr : argv[3];
  const long n_init = std::strtol(argv[4], nullptr, 10);
  if (n_init < 1 || 5 + n_init >= argc) ::_exit(1);
  void* handle = nullptr;
  for (int i = 5 + static_cast<int>(n_init); i < argc && !handle; ++i)
    handle = ::dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
  if (!handle) send_answer({1, 0});
  using Fn = int (*)();
  Fn init = nullptr;
  for (int i = 5; i < 5 + n_init && !init; ++i)
    init = reinterpret_cast<Fn>(::dlsym(handle, argv[i]));
  if (!init) send_answer({2, 0});
  const int rc = init();
  if (rc == 0 && shutdown_symbol)
    if (auto shutdown = reinterpret_cast<Fn>(::dlsym(handle, shutdown_symbol))) shutdown();
  send_answer({0, rc});
}

// Every executable that can probe (it links this file) answers the probe's command line before its main runs.
__attribute__((constructor(101))) void probe_entry(int argc, char** argv, char** /*envp*/) {
  if (argc >= 7 && argv && argv[1] && std::strcmp(argv[1], kProbeFlag) == 0) probe_child_main(argc, argv);
}
} // namespace

InitProbe probe_library_init(const LibraryInit& what, std::chrono::milliseconds timeout) {
  InitProbe out;
  if (what.libraries.empty() || what.init_symbols.empty()) {
    out.detail = "nothing to probe";
    return out;
  }
  // Everything the child is given is built here, before it exists.
  std::vector<std::string> args = {kProbeName, kProbeFlag, std::to_string(::getpid()),
                                   what.shutdown_symbol.empty() ? "-" : what.shutdown_symbol,
                                   std::to_string(what.init_symbols.size())};
  args.insert(args.end(), what.init_symbols.begin(), what.init_symbols.end());
  args.insert(args.end(), what.libraries.begin(), what.libraries.end());
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    out.detail = fmt::format("no pipe for the probe: {}", std::strerror(errno));
    return out;
  }
  // Nothing of the parent's is the child's to hold: not the terminal or the pipes a caller reads to their end (a
  // child hung for minutes would hold `wattscope run ... | tee` open), not a store or a listening socket.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 3);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDWR, 0);
  posix_spawn_file_actions_adddup2(&actions, 0, 1);
  posix_spawn_file_actions_adddup2(&actions, 0, 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 4);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int s : kDefaultSignals)
    sigaddset(&defaults, s);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, "/proc/self/exe", &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (spawned != 0) {
    out.detail = fmt::format("cannot start the probe (/proc/self/exe): {}", std::strerror(spawned));
    ::close(fds[0]);
    return out;
  }
  ProbeAnswer got_answer;
  size_t got = 0;
  bool hung = false;
  const auto end = t0 + timeout;
  while (got < sizeof got_answer) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      hung = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count() + 1, 60'000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue; // the timeout is re-checked above
    const ssize_t n = ::read(fds[0], reinterpret_cast<char*>(&got_answer) + got, sizeof got_answer - got);
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
  if (got == sizeof got_answer && got_answer.kind == 0) {
    out.outcome = InitProbe::Outcome::Answered;
    out.code = got_answer.value;
  } else if (got == sizeof got_answer) {
    out.outcome = InitProbe::Outcome::NotRun;
    out.detail = got_answer.kind == 1 ? "the library did not load in the probe" : "no init function in the library";
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
