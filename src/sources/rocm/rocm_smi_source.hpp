// AMD GPUs through ROCm SMI (librocm_smi64, dlopen'ed at run time): energy from the hardware counter, power, busy %,
// VRAM, temperatures, clocks, PCIe and the processes on each GPU. Devices are enumerated once; each tick makes one
// call per supported metric per device. A call that answers NOT_SUPPORTED (or an unreadable sysfs file before it ever
// answered) is switched off for that device; a device whose calls all fail as a vanished GPU's do for kLostLimit ticks
// in a row is marked lost with an event, and the others go on. PCIe throughput (the library samples it for a whole
// second) runs on its own thread, never on the tick. docs/amd.md lists each reading, its call and its unit.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sources/read_cost.hpp"
#include "sources/rocm/rocm_smi_loader.hpp"
#include "sources/source.hpp"

namespace wattscope {

class RocmSmiSource final : public Source {
public:
  struct Options {
    std::string library_path; // WATTSCOPE_ROCM_SMI_LIBRARY, or empty for the system library
    std::chrono::nanoseconds slow_period = std::chrono::seconds(1);
    // Issue 30: the system library is loaded only where <sysfs_root>/bus/pci/devices has an AMD GPU (or cannot be
    // read); a library named by WATTSCOPE_ROCM_SMI_LIBRARY is always loaded (the user asked for it).
    std::string sysfs_root = "/sys";
    // issue 33: cost-aware reads (sources/read_cost.hpp): a call over cost.max_read_cost is read at most once a
    // cost.costly_period; the energy counter, where no instant power reading shapes the energy between its reads,
    // once an energy_period. No per-call costs measured on an AMD driver are at hand: the budget decides on what this
    // machine's calls cost, timed at run time.
    ReadCostOptions cost = {};
    std::chrono::nanoseconds energy_period = std::chrono::milliseconds(100);
    static Options from_env();
  };

  // The per-tick calls, each switched off per device once it answers that it cannot.
  enum Call : size_t {
    cEnergy,
    cSocketPower,
    cPowerAve,
    cPowerCap,
    cBusy,
    cMemBusy,
    cVramUsed,
    cVramTotal,
    cTempEdge,
    cTempJunction,
    cTempMemory,
    cClockSys,
    cClockMem,
    cFan,
    cPcieWidth,
    cPcieThroughput,
    kCallCount
  };
  static const char* call_name(Call c);
  static constexpr int kLostLimit = 3; // ticks in a row on which every call failed as a vanished GPU's do

  struct Slow { // written by the PCIe thread, read by the tick
    std::mutex mu;
    OptI tx, rx;
    SteadyClock::time_point at{};
    bool lost = false;
    bool off = false;
  };
  struct Dev {
    uint32_t dv = 0; // ROCm SMI's device index
    GpuDevice info;
    std::array<bool, kCallCount> on{};
    std::array<bool, kCallCount> answered{}; // has answered once: a later file error means the GPU went away
    bool lost = false;
    int failures = 0; // ticks in a row with no answer and a vanished-GPU error
    // Energy counter: raw count and resolution as the library gives them; counts summed since open, 32-bit wraps
    // corrected (see docs/amd.md).
    bool have_count = false;
    uint64_t last_count = 0;
    uint64_t total_counts = 0;
    double resolution_uj = 0;
    OptI fan_max;
    // issue 33: what each call costs and when it is read next; the last value of every call, carried between reads
    std::array<ReadCost, kCallCount> cost{};
    GpuSample held;
    std::unique_ptr<Slow> slow = std::make_unique<Slow>();
  };

  explicit RocmSmiSource(Options opts);
  ~RocmSmiSource() override;
  std::string_view name() const override { return "rocm-smi"; }
  bool open() override;
  void sample(Frame& frame) noexcept override;
  bool may_block() const override { return true; } // a driver call on a GPU falling off the bus can hang
  SourceStatus status() const override;
  std::vector<std::string> doctor_lines() const override;
  std::vector<GpuDevice> devices() const override;
  void set_first_index(int first) override;
  void describe(RunInfo& run) const override;
  nlohmann::json report() const override;
  bool lists_gpu_processes() const override;
  void gpu_processes(std::vector<GpuProcessSample>& out, std::vector<int>& listed) noexcept override;

  // Counts the energy counter's step from `last` to `now`: a 32-bit wrap where the old value fit in 32 bits (the
  // firmware accumulator of several boards is that wide), else a restart from 0 (driver reload, GPU reset).
  static uint64_t counter_step(uint64_t last, uint64_t now);
  // issue 33: the calls read on a schedule by their cost (PCIe throughput has its own thread) and what each fills.
  static bool scheduled(Call c) { return c != cPcieThroughput; }
  static GpuMetricSet fills(Call c);

private:
  rocm::Status read(Call c, Dev& d, GpuSample& s, SteadyClock::time_point mono);
  void sample_device(Dev& d, Frame& frame);
  std::chrono::nanoseconds natural_period(const Dev& d, Call c) const; // issue 33: how often a costly call is read
  void slow_loop();
  bool v6_layout() const { return lib_major_ >= 6; }

  Options opts_;
  std::unique_ptr<rocm::Library> lib_;
  bool initialised_ = false;
  SourceStatus status_;
  std::string lib_version_;
  std::string driver_version_;
  uint32_t lib_major_ = 0; // 0: unknown, and the frequency structs' layout with it
  int devices_found_ = 0;
  std::vector<Dev> devs_;
  std::thread slow_thread_;
  std::mutex slow_mu_;
  std::condition_variable slow_cv_;
  bool slow_stop_ = false;
  std::mutex proc_mu_; // the process calls, made by the process tracker's thread
};

} // namespace wattscope
