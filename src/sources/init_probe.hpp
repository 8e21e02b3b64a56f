// Issue 31: a vendor library's init tried once in a child process before it is trusted in ours. A library that
// crashes inside nvmlInit (a driver bug, a mismatched kernel module) would otherwise take wattscope down, and with it
// the user's command; in a child it only turns its backend off.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace wattscope {

struct InitProbe {
  enum class Outcome { Answered, Crashed, Hung, NotRun };
  Outcome outcome = Outcome::NotRun;
  int code = 0;       // Answered: what the function returned (the library's return code)
  std::string detail; // Crashed / Hung / NotRun: what happened, in words ("killed by SIGSEGV (Segmentation fault)")
  double seconds = 0; // how long the child took
  bool answered() const { return outcome == Outcome::Answered; }
};

// Runs `fn` in a forked child (no core file, default signal dispositions) and waits for its int through a pipe, at
// most `timeout`; a child still running then is killed. The child does nothing else: fn should load, initialise and
// shut down, and return the library's code.
InitProbe probe_in_child(const std::function<int()>& fn, std::chrono::milliseconds timeout);

// WATTSCOPE_<NAME>_PROBE: "off" (or "0") skips the probe where the library is known safe; a number of seconds bounds
// it; unset: `fallback`. Returns zero for off.
std::chrono::milliseconds probe_timeout_from_env(const char* variable, std::chrono::milliseconds fallback);

} // namespace wattscope
