// What `serve` shows of its processes and units (issue 13): the top N by power as Prometheus series and JSON, the rest
// folded into one `other` series, so a busy machine's pid churn cannot blow up a time-series database. Built once per
// process scan (at most once a second) on the sampler thread, outside the live state's locks; a scrape then appends
// the prepared text and never sorts or formats per process.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/processes.hpp"

namespace wattscope {

struct ProcessBoard {
  std::string metrics_text;       // the wattscope_process_* and wattscope_unit_* families, HELP and TYPE included
  nlohmann::json processes;       // array: the top N, highest power first
  nlohmann::json processes_other; // the rest, summed
  nlohmann::json units;           // array: the top N units, highest power first
  nlohmann::json units_other;     // the rest, summed
  size_t cap = 0;
};

// Escapes a Prometheus label value (exposition format 0.0.4): backslash, double quote and line feed.
std::string prom_label_value(std::string_view v);

// Which processes the wattscope_process_* families write one by one (serve --process-metrics). Their pid,
// start_time and comm labels make a new series per process, so a node starting short jobs grows series without
// bound: serve exports GPU processes (and the CPU-only processes of the units named in cpu_units, by name or kind,
// --process-metrics-unit), not every shell, daemon and kernel thread. The unit families (Slurm job, pod, container,
// service) are always written; the JSON lists hold every process either way.
struct ProcessSeries {
  enum class Which { None, Gpu, All } which = Which::All;
  std::vector<std::string> cpu_units; // with Gpu: "slurm job 42" (a unit) or "slurm-job" (every unit of a kind)
};

class ProcessBoardBuilder {
public:
  // cap: processes (and units) exported one by one; host: the host label of every series.
  ProcessBoardBuilder(size_t cap, std::string host, ProcessSeries series = {})
      : cap_(cap), host_(std::move(host)), series_(std::move(series)) {}
  // From a scan accounting has filled (power and energy per process and unit). Keeps, across scans, what the
  // processes outside the top N used, so the `other` energy counters only grow.
  std::shared_ptr<const ProcessBoard> build(const ProcessSnapshot& snap);

  struct PidHash {
    size_t operator()(const ProcessId& id) const noexcept {
      return std::hash<int64_t>()(id.pid * 1000003 + id.start_time);
    }
  };
  // Energy per process and device at a scan; device keys: -1 the CPU, else the GPU index.
  using ProcessEnergies = std::unordered_map<ProcessId, std::vector<std::pair<int, double>>, PidHash>;
  // Energy per unit at a scan: the CPU's, every GPU's.
  using UnitEnergies = std::unordered_map<std::string, std::pair<double, double>>;

private:
  size_t cap_;
  std::string host_;
  ProcessSeries series_;
  std::map<int, double> series_other_energy_j_; // per device: exported processes' energy while outside the top N
  ProcessEnergies prev_;                        // at the previous scan
  std::map<int, double> other_energy_j_;        // per device: processes' energy while outside the top N
  // Units: device "cpu" (-1) and "gpu" (every GPU, 0).
  UnitEnergies prev_unit_;
  std::map<int, double> unit_other_energy_j_;
};

} // namespace wattscope
