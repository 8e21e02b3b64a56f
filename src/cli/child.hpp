// The wrapped command: started as a child, signals forwarded, exit status mapped the shell's way.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace wattscope {

// Blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD in the calling thread; call before any thread starts so every thread
// inherits the mask and the main thread alone takes them with sigtimedwait.
void block_control_signals();

// Where CMD would be executed from, as execvp would search. Throws CommandError(127 or 126) with a message.
struct CommandError : std::runtime_error {
  CommandError(int code, const std::string& msg) : std::runtime_error(msg), exit_code(code) {}
  int exit_code;
};
std::string resolve_command(const std::string& cmd);

struct ChildResult {
  int exit_code = 0; // status, or 128+N when killed by signal N, 127/126 when exec failed
  std::optional<int> signal;
  struct rusage usage {};
};

// Starts argv; throws CommandError when exec fails.
// `path` comes from resolve_command; exec uses it directly so the forked child does no PATH search (no malloc).
// cgroup_procs_fd: the run's cgroup.procs (attribution), which the child writes "0" into before exec so that nothing
// it starts escapes the cgroup; -1 for none. `extra_env` ("NAME=value") is added to (or replaces in) the child's
// environment, e.g. WATTSCOPE_SOCKET.
pid_t spawn_child(const std::string& path, const std::vector<std::string>& argv, int cgroup_procs_fd = -1,
                  const std::vector<std::string>& extra_env = {});
// Waits for the child; SIGINT/SIGTERM/SIGHUP sent to wattscope with kill(2) are passed on to it. (A terminal's
// Ctrl-C already reaches the child through the process group, so it is not sent twice.)
ChildResult wait_child(pid_t pid);
// For `record`: waits until the duration passes (if any) or SIGINT/SIGTERM/SIGHUP arrives. Returns the signal, if any.
std::optional<int> wait_for_stop(std::optional<std::chrono::nanoseconds> duration);

} // namespace wattscope
