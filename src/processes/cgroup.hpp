// The run's own cgroup v2, so that descendants which daemonise (double fork, setsid) stay in the run: the child moves
// itself into it between fork and exec. Made under wattscope's own cgroup where that is writable (root, or a subtree
// delegated to the user); elsewhere (a read-only /sys/fs/cgroup in a container, cgroup v1) the run says once that
// daemonised descendants may be missed, and follows the tree by parent pid alone.
#pragma once

#include <string>

#include "core/fd.hpp"

namespace wattscope {

struct RunCgroup {
  std::string dir;     // empty: none was made
  UniqueFd procs_fd;   // its cgroup.procs, open for the child to write "0" into
  std::string why_not; // why none was made
};

// cgroup_root: where cgroup2 is mounted (<sysfs root>/fs/cgroup); procfs_root: for /proc/self/cgroup.
RunCgroup make_run_cgroup(const std::string& procfs_root, const std::string& cgroup_root, const std::string& name);
// Removes the directory when it is empty; false (and it stays) while daemonised descendants still live in it.
bool remove_run_cgroup(const RunCgroup& cg);

} // namespace wattscope
