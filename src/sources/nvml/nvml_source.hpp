// NVIDIA GPUs through NVML (dlopen'ed at run time). Devices are enumerated once; each tick makes one call per
// supported metric per device. A metric that answers NOT_SUPPORTED is switched off for that device on the spot
// (probed once, never retried); a device that answers GPU_IS_LOST or UNKNOWN is marked lost with an event and the
// others go on. Slow calls (PCIe throughput blocks ~20 ms) run on their own thread, never on the tick.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/instrumented.hpp"
#include "core/metrics.hpp"
#include "sources/counter_clock.hpp"
#include "sources/nvml/gpu_selection.hpp"
#include "sources/nvml/nvml_loader.hpp"
#include "sources/source.hpp"

namespace wattscope {

class NvmlSource final : public Source {
public:
  // Issue 31: how long nvmlInit may take in the probe child before NVML is judged hung and left off
  // (WATTSCOPE_NVML_PROBE overrides). Generous: without persistence mode a healthy nvmlInit takes seconds, and the
  // probe runs beside the command (recording/session.cpp), never before it.
  static constexpr std::chrono::milliseconds kInitProbeTimeout{60'000};
  struct Options {
    std::string library_path; // WATTSCOPE_NVML_LIBRARY, or empty for the system library
    GpuSelection selection;
    std::chrono::nanoseconds slow_period = std::chrono::seconds(1);
    // issue 17: how often the health counters (ECC, remapped rows, PCIe replays, violation time) are read; rows in
    // between carry the latest reading. Where ticks are further apart, every tick reads them.
    std::chrono::nanoseconds health_period = std::chrono::seconds(1);
    // issue 33: cost-aware reads. Each per-tick call's cost is the quickest of kTimedReads timed reads (again every
    // recheck_period); one costing more than max_read_cost is read at most once a costly_period (the energy counter:
    // once an energy_period where no instant power field shapes the energy between its reads), the ticks in between
    // carrying its last value with its age. Zero reads everything every tick. Measured on an H100 (driver 580,
    // docs/nvidia.md): the energy counter costs 2.8 ms of CPU and moves every 100 ms, the fan 136 us, everything else
    // 1-25 us; reading all of it every tick spent nearly all of a monitor's CPU in two calls.
    // (an instrumented build's budget is kInstrumentedCostFactor times this: core/instrumented.hpp)
    std::chrono::nanoseconds max_read_cost = std::chrono::microseconds(50 * kInstrumentedCostFactor);
    std::chrono::nanoseconds costly_period = std::chrono::seconds(1);
    std::chrono::nanoseconds energy_period = std::chrono::milliseconds(100);
    std::chrono::nanoseconds recheck_period = std::chrono::seconds(30);
    // issue 33: the sampler's interval (0: not told; the ticks' spacing then says): under 100 ms a counter exact at
    // every instant is not read at phase edges
    std::chrono::nanoseconds interval{0};
    // issue 17: how often the Xid event set is polled (nvmlEventSetWait with no wait, on a tick's own thread)
    std::chrono::milliseconds event_poll = std::chrono::milliseconds(250);
    // ---- simulate (issue 19): the simulated library (library_path) and its scenario, handed over in memory.
    // Its devices carry energy_method "simulated".
    std::string simulated_scenario_json;
    std::string simulated_name; // the scenario's name; empty for real NVML
    bool simulated() const { return !simulated_name.empty(); }
    // ---- end simulate
    // Reads WATTSCOPE_NVML_LIBRARY and CUDA_VISIBLE_DEVICES. Throws std::invalid_argument on a bad --gpus.
    static Options from_env(const std::string& gpus_flag);
  };

  // The per-tick NVML calls, each switched off per device once it answers NOT_SUPPORTED. The table in
  // nvml_source.cpp says which registry metrics each fills; the compiler checks that together they fill them all.
  enum Call : size_t {
    cFieldValues,
    cPowerUsage,
    cEnergy,
    cUtil,
    cMemory,
    cTempGpu,
    cClockSm,
    cClockGfx,
    cClockMem,
    cPcieWidth,
    cPcieWidthMax,
    cFan,
    cPstate,
    cPowerLimit,
    cClockEvents,
    cPcieThroughput,
    cEncoder,
    cDecoder,
    cClockVideo,
    // ---- issue 17: read once a slow period (health counters change slowly), carried forward between reads
    cMigMode, // read at open(); copied
    cEcc,
    cRemappedRows,
    cPcieReplay,
    cViolationPower,
    cViolationThermal,
    // ---- end issue 17
    kCallCount
  };
  static const char* call_name(Call c);
  // issue 33: the calls read on a schedule by their cost (the others are every tick, once, or on their own period).
  static bool scheduled(Call c);

  struct Slow { // written by the slow thread, read by the tick
    std::mutex mu;
    OptI tx, rx;
    SteadyClock::time_point at{};
    bool lost = false;           // mirror of Dev::lost for the slow thread
    bool off = false;            // the device answered NOT_SUPPORTED for PCIe throughput
    std::vector<MigSample> migs; // issue 17: the MIG instances' latest memory and process counts
  };
  // ---- issue 17: health counters as last read (once a slow period), and what rates and run-relative times need
  struct Health {
    OptI ecc_corrected, ecc_uncorrected, rows_correctable, rows_uncorrectable, remap_pending, remap_failed, replays;
    OptF throttle_power_s, throttle_thermal_s;
    std::array<std::optional<unsigned long long>, 2> violation_base_ns; // first reading: power, thermal
    // issue 30: read through field values (in the tick's one nvmlDeviceGetFieldValues call) until the driver says it
    // does not know the field; then the old call. field_rc: that call's answer for each this tick, -2 when not asked.
    std::array<bool, 2> violation_field{true, true};
    std::array<nvml::Return, 2> field_rc{-2, -2};
    std::array<unsigned long long, 2> field_ns{};
  };
  // issue 33: one call's measured cost and its schedule on one device.
  struct ReadCost {
    int timed = 0; // reads timed in the current round (kTimedReads make one)
    std::chrono::nanoseconds least = std::chrono::nanoseconds::max(); // the quickest of the round
    std::chrono::nanoseconds measured{-1};                            // the last round's; -1 before the first
    std::chrono::nanoseconds period{0};                               // 0: every tick; else at most once this often
    SteadyClock::time_point next{}, last{}, recheck{};
    // The first read cost over the budget: read at the costly period from then on, the round's other reads timed at
    // that rate (at 10 ms, five rounds of 8 counters every tick overran each tick they were made on).
    bool provisional = false;
    bool spread = false; // the next scheduled read gets this GPU's share of the period as an offset
  };
  struct NvlinkCounter { // previous reading of a cumulative KiB counter
    std::optional<unsigned long long> kib;
    long long at_us = 0;
  };
  struct MigInstance {
    nvml::Device handle = nullptr;
    MigSample info; // static part: ids, uuid, selected
  };
  // ---- end issue 17
  struct Dev {
    nvml::Device handle = nullptr;
    GpuDevice info;
    std::array<bool, kCallCount> on{};
    bool mem_v2 = true;
    std::vector<unsigned int> fields; // field ids still requested
    bool pcie_width_max_read = false; // static: read on the first tick only
    OptI pcie_width_max;
    bool lost = false;
    bool temp_v = true; // nvmlDeviceGetTemperatureV, until it answers that it does not know the struct
    // NVML_ERROR_UNKNOWN is not a lost GPU (issue 17): the device is skipped for a back-off that doubles with each
    // failure in a row, and lost only after kUnknownLimit of them.
    int unknown_failures = 0;
    SteadyClock::time_point retry_at{};
    std::array<int, 8> field_failures{}; // per entry of `fields`: errors in a row other than NOT_SUPPORTED
    // ---- issue 17
    Health health;
    SteadyClock::time_point health_next{}; // when the health counters are read next
    // issue 33: what each call costs and when it is read next (Options::max_read_cost)
    std::array<ReadCost, kCallCount> cost{};
    GpuSample held; // the last value every scheduled call read, carried over the ticks it is not read
    std::array<NvlinkCounter, 2> nvlink; // TX, RX
    nvml::Return mig_mode_rc = nvml::kErrorNotSupported;
    OptI mig_mode;
    std::vector<MigInstance> migs; // where MIG is on
    bool mig_scoped = false;       // a MIG instance of it was selected: its processes are that instance's only
    // ---- end issue 17
    std::unique_ptr<Slow> slow = std::make_unique<Slow>();
    // ---- issue 33: the energy counter's updates (worker thread: the off-grid readings only)
    CounterClock clock;
    struct EdgeRead { // a reading in progress, for an edge marked at `edge`
      // plain: one read now; learn: the clock's learning; scan: reads a little over a call apart across the
      // predicted update until the value changes; after: one read just after a trusted prediction
      enum class Step { plain, learn, scan, after };
      bool active = false;
      Step step = Step::plain;
      SteadyClock::time_point edge{}, due{}, update{};
      // The instant power from the edge on, every kEdgePowerStep while the reading waits (1-2 us a read on an H100):
      // the energy from the edge to the update the reading stands for is its integral.
      std::vector<std::pair<SteadyClock::time_point, double>> power;
      SteadyClock::time_point scan_end{}, prev_t0{};
      std::chrono::nanoseconds spacing{};
      int64_t prev_uj = 0;
      bool have_prev = false;
      int rescans = 0; // windows watched again after one where the value did not change
      int late = 0;    // reads made too late to tell which update their value stands for (then the next is waited for)
      std::optional<std::pair<SteadyClock::time_point, int64_t>> first_read; // learning: the one nearest the edge
    } edge;
  };
  // What the process calls (nvml_processes.cpp) learnt of one device; the process tracker's thread only.
  struct ProcState {
    bool list_v3 = true;   // the _v3/_v2 running-process calls still answer; else the v1 struct
    bool util_info = true; // nvmlDeviceGetProcessesUtilizationInfo still answers; else nvmlDeviceGetProcessUtilization
    bool util_off = false; // no per-process utilisation on this device
    bool off = false;      // no process list on this device
    unsigned long long last_seen_us = 0;
    size_t list_room = 16; // entries the running-process lists are asked with: a few more than the most seen
  };
  // A costly energy counter (2.8 ms of CPU on an H100) that the instant power field (1-2 us) shapes between reads is
  // read this often, whatever the interval: 8 GPUs at 1 s then cost 0.47x a loop making every call every tick, at
  // 100 ms about 0.11x.
  static constexpr std::chrono::nanoseconds kAnchorPeriod = std::chrono::seconds(5);
  static constexpr int kTimedReads = 5;        // reads of a call timed to tell whether it is costly (issue 33)
  static constexpr int kUnknownLimit = 5;      // failures in a row (back-offs of 1, 2, 4, 8 s between them)
  static constexpr int kFieldFailureLimit = 3; // a field failing this many ticks in a row is not asked for again

  explicit NvmlSource(Options opts);
  ~NvmlSource() override;
  std::string_view name() const override { return "nvml"; }
  bool open() override;
  void sample(Frame& frame) noexcept override;
  // Adaptive sampling (issue 18): one nvmlDeviceGetUtilizationRates per device instead of every per-tick call.
  void probe(Frame& frame) noexcept override;
  bool may_block() const override { return true; }   // a GPU falling off the bus can hang NVML for seconds
  bool opens_aside() const override { return true; } // issue 31: nvmlInit can take seconds, or hang
  bool wants_final_read() const override { return energy_scheduled_.load(std::memory_order_relaxed); } // issue 33
  // issue 33: nvmlDeviceGetTotalEnergyConsumption alone, for a phase's edge (worker thread, between ticks)
  bool reads_energy_counters() const override { return lib_ && lib_->device_total_energy != nullptr; }
  // Where the counter moves on a period (an H100's, every 100 ms: sources/counter_clock.hpp), the reading is made just
  // after the first update past the edge, in steps; else at once.
  std::optional<SteadyClock::time_point> read_energy_counters(std::vector<CounterReading>& out,
                                                              SteadyClock::time_point requested) noexcept override;
  SourceStatus status() const override;
  std::vector<std::string> doctor_lines() const override;
  std::vector<GpuDevice> devices() const override;
  void describe(RunInfo& run) const override;
  // What doctor prints: library, versions, devices and which metrics each supports.
  nlohmann::json report() const override;
  bool lists_gpu_processes() const override;
  void gpu_processes(std::vector<GpuProcessSample>& out, std::vector<int>& listed) noexcept override;
  // issue 17: whether Xid events are polled (an event set with at least one device registered)
  bool watches_xid() const { return events_on_; }
  // issue 30: the bytes per entry nvmlDevice{Compute,Graphics}RunningProcesses_v3 write: 32 on drivers 535.43.02 to
  // 535.98 (told by the version, e.g. "535.54.03", or where it is unknown by nvmlDeviceGetConfComputeMemSizeInfo
  // present and nvmlDeviceGetRunningProcessDetailList absent), else sizeof(nvml::ProcessInfo), 24.
  static size_t process_info_stride(const std::string& driver_version, bool has_conf_compute_mem,
                                    bool has_process_detail_list);

private:
  // Classifies a return code: true when the value may be used. Switches the metric off on NOT_SUPPORTED and
  // friends, marks the device lost on GPU_IS_LOST / RESET_REQUIRED, backs off on UNKNOWN.
  bool ok(Dev& d, Call c, nvml::Return rc, Frame& frame);
  void sample_device(Dev& d, Frame& frame);
  // ---- issue 33: cost-aware reads
  std::chrono::nanoseconds natural_period(const Dev& d, Call c) const; // how often a costly call is read
  // took: the read's wall time; cpu: its CPU time on this thread, where measured (a round's first read), else < 0.
  void time_read(Dev& d, Call c, std::chrono::nanoseconds took, std::chrono::nanoseconds cpu,
                 SteadyClock::time_point now);
  static void hold(Dev& d, GpuMetricSet fills, const GpuSample& s);
  static void carry(const Dev& d, GpuMetricSet fills, SteadyClock::time_point read_at, SteadyClock::time_point now,
                    GpuSample& s);
  // One step of an off-grid reading on `d` (its edge.due has come); false once the reading is done.
  bool edge_step(Dev& d, std::vector<CounterReading>& out);
  OptF instant_power_w(Dev& d); // the instant power field alone (1-2 us on an H100), or nothing
  // When a tick's counter value was the energy (GpuSample::energy_at, energy_stale): its read, or its update.
  void place_energy(const Dev& d, SteadyClock::time_point t0, SteadyClock::time_point t1, GpuSample& s) const;
  // How old a value read now may be where the updates' times are not used: a period, unless it moves at every read.
  static std::chrono::nanoseconds plain_stale(const Dev& d);
  void sample_edge_power(Dev& d);
  // Ticks under 100 ms apart that read a counter exact at every instant hold a phase's edge within a fraction of a
  // percent: no reading at edges (read on a schedule, shaped by the instant power between, they do not: it is read)
  bool ticks_hold_edges(const Dev& d) const { return short_ticks() && d.cost[cEnergy].period.count() == 0; }
  bool short_ticks() const {
    const auto gap = opts_.interval.count() > 0 ? opts_.interval : tick_gap_;
    return gap.count() > 0 && gap < kEdgeReadsFrom;
  }
  // Plans the reads around the first update past `after`.
  void plan_edge_reads(Dev& d, SteadyClock::time_point after);
  // The update a read made over [t0, t1] stands for: the last one predicted before it, where the read lies clear of
  // the predicted updates around it; nothing where it may have crossed one.
  static std::optional<SteadyClock::time_point> update_of_read(const Dev& d, SteadyClock::time_point t0,
                                                               SteadyClock::time_point t1);
  // ---- end issue 33
  // The slow thread. may_hand_over: where its first pass is quick it hands the reads to the ticks and returns.
  void slow_loop(bool may_hand_over);
  // One pass of the slow reads (PCIe throughput, MIG instances) over every device; the wall time it took.
  std::chrono::nanoseconds slow_pass();
  // ---- issue 17: MIG instances (open()), the slow thread's reads of them, and the Xid event thread
  void enumerate_migs(Dev& d);
  void read_migs(Dev& d);
  void start_events();
  void poll_events(Frame& frame);
  // ---- end issue 17
  // The selection's MIG-… entry naming one of this GPU's MIG instances, or "" (open(), before the sampler starts).
  std::string mig_of(nvml::Device gpu);
  // open(): GPU `index` as NVML numbers it, into devs_ where the selection takes it; its name into `models` either way.
  void open_gpu(unsigned int index, std::set<std::string>& models);

  Options opts_;
  std::unique_ptr<nvml::Library> lib_;
  bool initialised_ = false;
  SourceStatus status_;
  std::string driver_version_;
  std::string nvml_version_;
  int devices_found_ = 0;
  std::vector<Dev> devs_;
  std::thread slow_thread_;
  std::mutex slow_mu_;
  std::condition_variable slow_cv_;
  bool slow_stop_ = false;
  // Read by slow_pass between calls, without slow_mu_: a run that ends while a pass is under way (a real driver's
  // PCIe throughput waits 20 ms a call, 320 ms for 8 GPUs) waits for one call, not the pass.
  std::atomic<bool> slow_abort_{false};
  std::atomic<bool> slow_wanted_{false};
  // The slow reads are made on the tick (by sample(), at most once a slow period) while a pass takes under
  // kSlowInline: a thread hop costs more than the calls then (issue 12). The slow thread decides on its first pass
  // and hands over; sample() gives them back to a new slow thread when two passes in a row take longer than
  // kSlowTooLong.
  std::atomic<bool> slow_inline_{false};
  SteadyClock::time_point slow_last_{}; // sample() only: when it last made the pass
  int slow_too_long_ = 0;               // sample() only: passes in a row that took over kSlowTooLong

  // ---- issue 17: Xid errors from an NVML event set, polled by the ticks (no thread of their own: one waiting in
  // nvmlEventSetWait, which nothing can interrupt, had to wake 4 times a second to be stoppable)
  nvml::EventSet event_set_ = nullptr;
  bool events_on_ = false;
  SteadyClock::time_point events_next_{}; // when the set is polled next (Options::event_poll)
  int event_errors_ = 0;                  // poll errors in a row (other than NVML_ERROR_TIMEOUT)
  std::atomic<int64_t> xid_seen_{0};
  std::atomic<bool> energy_scheduled_{false};           // issue 33: some device's energy counter is read on a schedule
  std::optional<SteadyClock::time_point> edge_serving_; // issue 33: the edge the off-grid reading in steps is for
  // issue 33 (worker thread): the ticks' spacing; below kEdgeReadsFrom a continuous counter is not read at edges
  SteadyClock::time_point last_tick_mono_{};
  std::chrono::nanoseconds tick_gap_{0};
  static constexpr std::chrono::milliseconds kEdgeReadsFrom{100};
  // ---- end issue 17

  // Process calls (nvml_processes.cpp), made by the process tracker's thread only.
  std::mutex proc_mu_;
  std::vector<ProcState> proc_state_;
  size_t proc_stride_ = sizeof(nvml::ProcessInfo); // issue 30: set by open() from process_info_stride()
};

} // namespace wattscope
