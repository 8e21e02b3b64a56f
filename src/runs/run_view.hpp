// How a run is shown: the printed summary and the JSON of `show --json` / `list --json`.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schema.hpp"

namespace wattscope {

nlohmann::json run_json(const RunInfo& run);
std::string run_text(const RunInfo& run, const std::vector<std::string>& stores = {});
std::string runs_table(const std::vector<RunInfo>& runs);
// A run recorded with --simulate (its tag simulated=true).
bool simulated_run(const RunInfo& run);

// How a run's energy figure was obtained (issue 29): per device that measured energy, its method, read from the
// run's summary (gpus[].energy_method: counter | integrated | simulated; cpu.energy_method: counter | estimated).
// Every view of a run's energy (show, list, stats, compare, the report) takes its label from here, so one run never
// shows two different words.
struct EnergyMethod {
  // device -> method, GPUs by index (gpu0, gpu1, ...), then cpu_package, cpu_dram; only devices with energy.
  std::vector<std::pair<std::string, std::string>> devices;
  // "counter" when every device has that method; "mixed (counter: gpu0, gpu1; estimated: cpu_package)" when they
  // differ; "unknown" for a run with energy but no per-device summary (written by an old version); "" when nothing
  // measured energy.
  std::string label() const;
  // The names of the measured devices: "2 GPUs + CPU package + DRAM", "CPU package", "GPU 0".
  std::string devices_text() const;
  bool operator==(const EnergyMethod&) const = default;
};
EnergyMethod run_energy_method(const RunInfo& run);
// The energy of the run's own processes (its command's process tree; in record and serve, every process tracked):
// the sum over the devices attribution split of their `attributed` part. `method` is "attributed (" + the run's
// energy method + ")": "attributed (counter)", "attributed (estimated)", "attributed (mixed)" (the total's label
// says which device had which; the Python reader spells it the same). `measured_j` is those devices' energy, the figure
// it is a part of. None when no process was tracked or no device with energy was split.
struct AttributedEnergy {
  double joules = 0;
  double measured_j = 0;
  std::string method;
};
std::optional<AttributedEnergy> run_attributed_energy(const RunInfo& run);
// One label for several labels (a figure over runs, a sum over devices): the common one when all agree, else
// "mixed (counter: 3 runs; estimated: 1 run)" style, counting how many of `labels` had each (empty ones skipped).
std::string combine_method_labels(const std::vector<std::string>& labels, const std::string& what = "run");

} // namespace wattscope
