#include "processes/cgroup.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "processes/procfs.hpp"

namespace wattscope {

RunCgroup make_run_cgroup(const std::string& procfs_root, const std::string& cgroup_root, const std::string& name) {
  RunCgroup cg;
  std::string text;
  if (!read_small_file(procfs_root + "/self/cgroup", text)) {
    cg.why_not = fmt::format("{}/self/cgroup cannot be read", procfs_root);
    return cg;
  }
  const std::string own = cgroup_v2_path(text);
  if (own.empty()) {
    cg.why_not = "this system has no unified cgroup v2 hierarchy";
    return cg;
  }
  std::string base = cgroup_root + (own == "/" ? "" : own);
  if (!read_small_file(cgroup_root + "/cgroup.controllers", text) && ::access(cgroup_root.c_str(), F_OK) != 0) {
    cg.why_not = fmt::format("cgroup2 is not mounted at {}", cgroup_root);
    return cg;
  }
  const std::string dir = base + "/" + name;
  if (::mkdir(dir.c_str(), 0755) != 0) {
    cg.why_not = fmt::format("cannot create {}: {}", dir, std::strerror(errno));
    return cg;
  }
  const int fd = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    cg.why_not = fmt::format("cannot open {}/cgroup.procs: {}", dir, std::strerror(errno));
    ::rmdir(dir.c_str());
    return cg;
  }
  cg.dir = dir;
  cg.procs_fd = UniqueFd(fd);
  return cg;
}

bool remove_run_cgroup(const RunCgroup& cg) {
  if (cg.dir.empty()) return true;
  return ::rmdir(cg.dir.c_str()) == 0;
}

} // namespace wattscope
