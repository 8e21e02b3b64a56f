// Intel GPUs through Level Zero Sysman (libze_loader.so.1, dlopen'ed at run time): energy from each power domain's
// counter, power from its deltas, engine utilisation from activity counters, memory, frequency, temperature and the
// processes on each GPU (docs/intel.md). Devices are enumerated once; a handle answering UNSUPPORTED_FEATURE (or no
// permission) is switched off for good and its metric stays missing; a device answering DEVICE_LOST is marked lost with
// an event and the others go on. No loader, or a loader with no GPU driver, is status Missing (the normal state of a
// machine without an Intel GPU, said at debug level only); a loader that is there but broken is status Error.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sources/levelzero/ze_loader.hpp"
#include "sources/read_cost.hpp"
#include "sources/source.hpp"

namespace wattscope {

// A Level Zero energy counter (µJ, 64 bits) turned into a run-long count. A reading below the previous one is a wrap
// where the difference modulo 2^64 (or, from a value under 2^32, modulo 2^32: a driver exposing a 32-bit hardware
// counter) is an energy the card could have drawn in the time between (kMaxPlausibleW); anything else is a reset
// (driver reload), counted from the new value on.
class EnergyCounter {
public:
  static constexpr double kMaxPlausibleW = 10'000; // no accelerator card draws this; a wrap's remainder is far below
  struct Step {
    uint64_t delta_uj = 0; // energy since the previous reading (0 on the first and on a reset)
    OptF power_w;          // delta over the counter's own timestamps; missing on the first reading and a reset
    bool wrapped = false;  // the counter wrapped between the two readings
    bool reset = false;    // the counter went back and was restarted from here
  };
  // ts_us: the reading's timestamp (µs); elapsed_s: steady-clock seconds since the previous reading, used where the
  // timestamps do not advance.
  Step add(uint64_t energy_uj, uint64_t ts_us, double elapsed_s);
  int64_t total_uj() const { return total_uj_; } // since the first reading
  bool seen() const { return seen_; }

private:
  bool seen_ = false;
  uint64_t last_uj_ = 0;
  uint64_t last_ts_us_ = 0;
  int64_t total_uj_ = 0;
};

class LevelZeroSource final : public Source {
public:
  struct Options {
    std::string library_path; // WATTSCOPE_LEVEL_ZERO_LIBRARY, or empty for the system loader
    // Issue 30: the system loader is loaded only where <sysfs_root>/bus/pci/devices has an Intel display controller
    // (or cannot be read); a loader named by WATTSCOPE_LEVEL_ZERO_LIBRARY is always loaded (the user asked for it).
    std::string sysfs_root = "/sys";
    // issue 33: cost-aware reads (sources/read_cost.hpp), per group of calls (every handle's call of one kind): a
    // group costing more than cost.max_read_cost a tick is read at most once a cost.costly_period, the ticks between
    // carrying its values with their age. The energy counters, whose differences are the power here (Level Zero has
    // no instant power reading), at most once an energy_period. No costs measured on an Intel driver are at hand:
    // the budget decides on what this machine's calls cost, timed at run time.
    ReadCostOptions cost = {};
    std::chrono::nanoseconds energy_period = std::chrono::milliseconds(100);
    static Options from_env();
  };
  // issue 33: the groups of per-tick calls, each timed and scheduled as one
  enum Group { gEnergy, gEngine, gMemory, gFrequency, gTemperature, kGroupCount };
  static const char* group_call(Group g);
  static GpuMetricSet fills(Group g);

  explicit LevelZeroSource(Options opts);
  ~LevelZeroSource() override;
  std::string_view name() const override { return "level-zero"; }
  bool open() override;
  void sample(Frame& frame) noexcept override;
  bool may_block() const override { return true; } // a driver call into a GPU falling off the bus can hang
  SourceStatus status() const override { return status_; }
  std::vector<std::string> doctor_lines() const override;
  std::vector<GpuDevice> devices() const override;
  void set_first_index(int first) override;
  size_t release_claimed(const std::vector<std::string>& bus_ids) override;
  nlohmann::json report() const override;
  bool lists_gpu_processes() const override;
  void gpu_processes(std::vector<GpuProcessSample>& out, std::vector<int>& listed) noexcept override;

  struct PowerDomain {
    ze::Power h = nullptr;
    uint32_t kind = ze::kPowerDomainUnknown; // card, package, stack (PowerExtProperties), or unknown
    bool on_subdevice = false;
    uint32_t subdevice = 0;
    bool on = true;
    EnergyCounter counter;
    std::optional<uint64_t> read_uj; // issue 30: the counter's latest value as read (doctor --json's energy_uj)
    SteadyClock::time_point last_read{};
    OptF power_w; // over the latest interval
  };
  struct EngineGroup {
    ze::Engine h = nullptr;
    uint32_t type = 0; // ze::EngineGroup
    bool on_subdevice = false;
    uint32_t subdevice = 0;
    bool on = true;
    bool seen = false;
    uint64_t last_active_us = 0, last_ts_us = 0;
  };
  template <class H> struct Handle {
    H h = nullptr;
    uint32_t type = 0; // frequency domain or temperature sensor type; memory: its location
    bool on_subdevice = false;
    uint32_t subdevice = 0;
    bool on = true;
  };
  struct Dev {
    ze::Device h = nullptr;
    GpuDevice info;
    std::vector<PowerDomain> domains;
    std::vector<size_t> energy_domains; // the domains whose sum is the device's energy (one, or every stack's)
    const char* power_source = nullptr;
    std::vector<EngineGroup> engines;
    std::vector<Handle<ze::Memory>> memory;
    std::vector<Handle<ze::Frequency>> frequency;
    std::vector<Handle<ze::Temperature>> temperature;
    std::atomic<bool> lost{false};
    bool processes_on = true; // process tracker's thread only
    // issue 33: what each group costs and when it is read next; the last values of every group, carried between reads
    std::array<ReadCost, kGroupCount> cost{};
    GpuSample held;
  };

private:
  void open_device(ze::Device h);
  void sample_device(Dev& d, Frame& frame);

  Options opts_;
  std::unique_ptr<ze::Library> lib_;
  SourceStatus status_;
  std::string init_call_;
  std::vector<std::unique_ptr<Dev>> devs_;
  std::mutex proc_mu_;
};

} // namespace wattscope
