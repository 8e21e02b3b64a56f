// Issue 31: a vendor library's init tried once in a child process before it is trusted in ours. A library that
// crashes inside nvmlInit (a driver bug, a mismatched kernel module) would otherwise take wattscope down, and with it
// the user's command; in a child it only turns its backend off.
//
// The child is a fresh wattscope (this executable, /proc/self/exe, started with posix_spawn), never a bare fork: a
// fork of a process whose other threads hold a lock (the allocator's under ASan, the loader's, a logger's mutex) leaves
// that lock held for ever in the child, which then hangs in its first malloc or dlopen. That happened: under load, a
// Slurm job's recorder probed for its 60 s bound and recorded the job without its GPU (CI, slurm.jobs).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace wattscope {

struct InitProbe {
  enum class Outcome { Answered, Crashed, Hung, NotRun };
  Outcome outcome = Outcome::NotRun;
  int code = 0;       // Answered: what the init function returned (the library's return code)
  std::string detail; // Crashed / Hung / NotRun: what happened, in words ("killed by SIGSEGV (Segmentation fault)")
  double seconds = 0; // how long the child took, from its start to its answer
  bool answered() const { return outcome == Outcome::Answered; }
};

// What the child does: dlopen the first of `libraries` that loads, call the first of `init_symbols` that resolves
// (an int(void) function such as nvmlInit_v2), and, where it returned 0, `shutdown_symbol` (int(void)) too.
struct LibraryInit {
  std::vector<std::string> libraries;    // paths or sonames, tried in order
  std::vector<std::string> init_symbols; // newest first
  std::string shutdown_symbol;           // empty: none
};

// Runs `what` in a child (no core file, default signal dispositions, stdio on /dev/null, only its answer pipe open,
// killed if wattscope dies) and waits at most `timeout` for its answer; a child still running then is killed. NotRun
// when the child could not be started, or loaded none of the libraries or found no init symbol: the caller then loads
// in-process and says why itself.
InitProbe probe_library_init(const LibraryInit& what, std::chrono::milliseconds timeout);

// WATTSCOPE_<NAME>_PROBE: "off" (or "0") skips the probe where the library is known safe; a number of seconds bounds
// it; unset: `fallback`. Returns zero for off.
std::chrono::milliseconds probe_timeout_from_env(const char* variable, std::chrono::milliseconds fallback);

} // namespace wattscope
