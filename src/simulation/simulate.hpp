// --simulate (issue 19): simulated GPUs, for a demo and for trying wattscope on a machine without a GPU.
//
// The simulated GPU library is the test suite's fake libnvidia-ml (tests/fakes/fake_nvml.cpp), built with wattscope
// and embedded in the binary. --simulate copies it into an anonymous memory file (memfd_create; an unlinked private
// temporary file where memfd is not allowed) and NVML's own loader dlopens it from /proc/self/fd/N: the production
// loading and sampling path runs unchanged, and wattscope stays one file. The scenario (docs/simulate.md) is handed
// to that library in memory. Everything it produces is labelled: devices carry energy_method "simulated", the run
// the tag simulated=true, and every view says so in words.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fd.hpp"
#include "phases/marker.hpp"
#include "simulation/scenario.hpp"

namespace wattscope {

inline constexpr const char* kBuiltinScenario = "training";

class Simulation {
public:
  // spec: "" or "training" for the built-in scenario, else the path of a JSON scenario file. Throws
  // std::invalid_argument naming the problem with the scenario (an unreadable file, bad JSON, a field that is wrong
  // and where), std::runtime_error when the library cannot be put in memory.
  static std::shared_ptr<const Simulation> load(const std::string& spec);
  ~Simulation();
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  // "training (built-in)" or the scenario file's path, as the run's tag simulate_scenario records it.
  const std::string& name() const { return name_; }
  // Where NVML's loader finds the simulated library: /proc/self/fd/N of the in-memory copy.
  const std::string& library_path() const { return library_path_; }
  // The scenario as the library reads it: a process entry's "pid": "command" made a pid file this object owns.
  const std::string& scenario_json() const { return scenario_json_; }
  int gpu_count() const { return gpu_count_; }

  // `run`: the wrapped command's pid, so the simulated GPUs list its processes ("pid": "command"). Never throws.
  void command_started(pid_t pid) const noexcept;

  // The markers the scenario's timeline sends (phases begin/end, work done), as an endless sequence when it loops:
  // the n-th one and its time in seconds since the scenario began; none past the end when it does not loop.
  std::optional<std::pair<double, Marker>> marker(size_t n) const;

private:
  Simulation() = default;
  std::string name_;
  std::string library_path_;
  std::string scenario_json_;
  std::string private_dir_; // holds the pid file; removed with this object
  std::string pid_file_;
  UniqueFd library_fd_;
  int gpu_count_ = 0;
  ScenarioTimeline timeline_;
};

} // namespace wattscope
