#include "simulation/simulate.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "core/text.hpp"

// Embedded at build time (generated/simulate.S): the simulated libnvidia-ml and the built-in scenario.
extern "C" {
extern const char wattscope_sim_nvml_begin[];
extern const char wattscope_sim_nvml_end[];
extern const char wattscope_sim_training_begin[];
extern const char wattscope_sim_training_end[];
}

namespace wattscope {

namespace {

using json = nlohmann::json;

std::string read_scenario_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    throw std::invalid_argument(fmt::format("--simulate={}: no such scenario file (use --simulate alone for the "
                                            "built-in '{}' scenario)",
                                            path, kBuiltinScenario));
  if (!std::filesystem::is_regular_file(st))
    throw std::invalid_argument(fmt::format("--simulate={}: not a regular file", path));
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxScenarioBytes)
    throw std::invalid_argument(fmt::format("--simulate={}: {} bytes is too big for a scenario (at most {} bytes)",
                                            path, size, kMaxScenarioBytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("--simulate={}: cannot read it: {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The library's bytes in a file descriptor dlopen can read through /proc/self/fd: an anonymous memory file, or where
// memfd_create is refused (old kernels, some sandboxes) a private temporary file unlinked at once.
UniqueFd library_in_memory() {
  const char* begin = wattscope_sim_nvml_begin;
  const size_t size = static_cast<size_t>(wattscope_sim_nvml_end - wattscope_sim_nvml_begin);
  UniqueFd fd(::memfd_create("wattscope-simulated-nvml", MFD_CLOEXEC));
  std::string why_not_memfd = fd ? "" : std::strerror(errno);
  if (!fd) {
    const char* tmp = std::getenv("TMPDIR");
    std::string path = fmt::format("{}/wattscope-simulated-nvml-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    fd.reset(::mkostemp(path.data(), O_CLOEXEC));
    if (!fd)
      throw std::runtime_error(fmt::format("--simulate: cannot hold the simulated GPU library in memory "
                                           "(memfd_create: {}) nor in a temporary file in {} ({})",
                                           why_not_memfd, path, std::strerror(errno)));
    ::unlink(path.c_str());
  }
  for (size_t off = 0; off < size;) {
    const ssize_t n = ::write(fd.get(), begin + off, size - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error(
          fmt::format("--simulate: cannot write the simulated GPU library to memory: {}", std::strerror(errno)));
    off += static_cast<size_t>(n);
  }
  return fd;
}

} // namespace

std::shared_ptr<const Simulation> Simulation::load(const std::string& spec) {
  std::shared_ptr<Simulation> sim(new Simulation());
  std::string text;
  if (spec.empty() || spec == kBuiltinScenario) {
    sim->name_ = fmt::format("{} (built-in)", kBuiltinScenario);
    text.assign(wattscope_sim_training_begin,
                static_cast<size_t>(wattscope_sim_training_end - wattscope_sim_training_begin));
  } else {
    sim->name_ = spec;
    text = read_scenario_file(spec);
  }
  json sc;
  try {
    sc = parse_scenario_json(text);
    check_scenario(sc);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("--simulate={}: {}", sim->name_, e.what()));
  }
  sim->gpu_count_ = static_cast<int>(sc["devices"].size());

  // "pid": "command" -> a pid file in a private directory, written once `run` has started its command.
  bool wants_pid = false;
  for (auto& d : sc["devices"])
    if (d.contains("processes"))
      for (auto& p : d["processes"])
        if (p["pid"].is_string()) wants_pid = true;
  if (wants_pid) {
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = fmt::format("{}/wattscope-sim-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (::mkdtemp(dir.data())) {
      sim->private_dir_ = dir;
      sim->pid_file_ = dir + "/command.pid";
    }
    for (auto& d : sc["devices"])
      if (d.contains("processes"))
        for (auto& p : d["processes"])
          if (p["pid"].is_string()) {
            p.erase("pid");
            // Without a private directory the entry names nothing and the GPU shows no process: said in the docs.
            p["pid_file"] = sim->pid_file_;
          }
  }
  sim->scenario_json_ = sc.dump();
  sim->library_fd_ = library_in_memory();
  sim->library_path_ = fmt::format("/proc/self/fd/{}", sim->library_fd_.get());

  sim->timeline_ = ScenarioTimeline(sc);
  return sim;
}

Simulation::~Simulation() {
  if (!pid_file_.empty()) ::unlink(pid_file_.c_str());
  if (!private_dir_.empty()) ::rmdir(private_dir_.c_str());
}

void Simulation::command_started(pid_t pid) const noexcept {
  if (pid_file_.empty()) return;
  // Our own private directory (mode 0700, made by mkdtemp), never a path from outside.
  UniqueFd fd(::open(pid_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return;
  const std::string text = std::to_string(pid) + "\n";
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) return;
}

std::optional<std::pair<double, Marker>> Simulation::marker(size_t n) const {
  return timeline_.marker(n);
}

} // namespace wattscope
