#include "recording/sources.hpp"

#include <algorithm>

#include "recording/session.hpp"
#include "simulation/simulate.hpp"
#include "sources/hwmon/hwmon_gpu_source.hpp"
#include "sources/procfs/cpu_source.hpp"
#include "sources/rapl/rapl_source.hpp"
#ifdef WATTSCOPE_HAVE_NVML
#include "sources/nvml/nvml_source.hpp"
#endif
#ifdef WATTSCOPE_HAVE_ROCM
#include "sources/rocm/rocm_smi_source.hpp"
#endif
#ifdef WATTSCOPE_HAVE_LEVEL_ZERO
#include "sources/levelzero/level_zero_source.hpp"
#endif

namespace wattscope {

namespace {
constexpr SourceEntry kSources[] = {
    {"procfs",
     [](const SessionOptions& o) -> std::unique_ptr<Source> {
       // Every 5 s, or the process-scan period where longer (never under the interval), for run as for record: run
       // scans its own processes every second, and per-core rows at that rate were 96 % of a 224-CPU node's rows.
       PerCoreStorage per_core = o.per_core;
       per_core.period = std::max({o.interval, o.process_interval, std::chrono::nanoseconds(kPerCorePeriod)});
       per_core.interval = o.interval;
       return std::make_unique<ProcfsCpuSource>(o.procfs_root, per_core);
     }},
    {"rapl",
     [](const SessionOptions& o) -> std::unique_ptr<Source> {
       // Read at least as often as a wrap needs whatever the interval in force: idle stretches (issue 18) included.
       return std::make_unique<RaplSource>(o.sysfs_root, std::max(o.interval, o.adaptive.idle_interval),
                                           o.cpu_tdp_w.has_value());
     }},
    // After procfs and RAPL: it reads the utilisation they filled, and steps aside where RAPL measured.
    {"cpu-estimate",
     [](const SessionOptions& o) -> std::unique_ptr<Source> {
       if (!o.cpu_tdp_w) return nullptr;
       return std::make_unique<CpuEstimateSource>(*o.cpu_tdp_w);
     }},
#ifdef WATTSCOPE_HAVE_NVML
    {"nvml",
     [](const SessionOptions& o) -> std::unique_ptr<Source> {
       // ---- simulate (issue 19): the embedded simulated library, not the system's; CUDA_VISIBLE_DEVICES names
       // real GPUs, so only --gpus selects among simulated ones.
       if (o.simulate) {
         NvmlSource::Options sim;
         sim.library_path = o.simulate->library_path();
         sim.selection = parse_gpu_selection(o.gpus.empty() ? "all" : o.gpus, std::nullopt);
         sim.simulated_scenario_json = o.simulate->scenario_json();
         sim.simulated_name = o.simulate->name();
         sim.slow_period = std::max<std::chrono::nanoseconds>(sim.slow_period, o.interval);
         return std::make_unique<NvmlSource>(std::move(sim));
       }
       // ---- end simulate
       auto opts = NvmlSource::Options::from_env(o.gpus);
       // PCIe throughput is read once a second, or once an interval where ticks are further apart: a reading nobody
       // takes is a wake-up without work (issue 12).
       opts.slow_period = std::max<std::chrono::nanoseconds>(opts.slow_period, o.interval);
       if (o.max_read_cost) opts.max_read_cost = *o.max_read_cost; // issue 33
       opts.interval = o.interval;
       return std::make_unique<NvmlSource>(std::move(opts));
     }},
#endif
#ifdef WATTSCOPE_HAVE_ROCM
    // AMD through ROCm SMI: before hwmon, which then leaves the cards claimed here (by PCI bus id) to it.
    {"rocm-smi",
     [](const SessionOptions& o) -> std::unique_ptr<Source> {
       if (o.simulate) return nullptr; // issue 19: --simulate replaces the machine's GPUs, not adds to them
       auto opts = RocmSmiSource::Options::from_env();
       opts.slow_period = std::max<std::chrono::nanoseconds>(opts.slow_period, o.interval);
       opts.sysfs_root = o.sysfs_root; // issue 30: loaded only where an AMD GPU is on the PCI bus
       if (o.max_read_cost) opts.cost.max_read_cost = *o.max_read_cost; // issue 33
       return std::make_unique<RocmSmiSource>(std::move(opts));
     },
     true},
#endif
#ifdef WATTSCOPE_HAVE_LEVEL_ZERO
    // Intel GPUs through Level Zero Sysman: before hwmon-gpu, which then leaves the cards it claims (by PCI bus id).
    {"level-zero",
     [](const SessionOptions& o) -> std::unique_ptr<Source> {
       if (o.simulate) return nullptr; // issue 19: --simulate replaces the machine's GPUs, not adds to them
       auto opts = LevelZeroSource::Options::from_env();
       opts.sysfs_root = o.sysfs_root; // issue 30: loaded only where an Intel GPU is on the PCI bus
       if (o.max_read_cost) opts.cost.max_read_cost = *o.max_read_cost; // issue 33
       return std::make_unique<LevelZeroSource>(std::move(opts));
     },
     true},
#endif
    // Last among GPU backends: the plainest view of a card, used only where no vendor library claimed it.
    {"hwmon-gpu",
     [](const SessionOptions& o) -> std::unique_ptr<Source> {
       if (o.simulate) return nullptr; // issue 19: --simulate replaces the machine's GPUs, not adds to them
       return std::make_unique<HwmonGpuSource>(o.sysfs_root);
     },
     true},
};
} // namespace

std::span<const SourceEntry> source_registry() {
  return kSources;
}

bool quiet_when_missing(std::string_view name) {
  for (const auto& e : kSources)
    if (e.name == name) return e.quiet_when_missing;
  return false;
}

std::vector<std::unique_ptr<Source>> make_sources(const SessionOptions& opts) {
  std::vector<std::unique_ptr<Source>> out;
  for (const auto& e : kSources)
    if (auto s = e.make(opts)) out.push_back(std::move(s));
  return out;
}

} // namespace wattscope
