// A source knows one kind of hardware. It is opened once, then fills its part of every frame on the sampler thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/frame.hpp"

namespace wattscope {

struct RunInfo;

// What a source found, as a value (STYLE 22): never a prefixed string a caller has to parse.
struct SourceStatus {
  enum class State { Ok, Missing, NoPermission, Error };
  State state = State::Missing;
  std::string detail;          // what was found, or why nothing was
  std::string fix;             // what to do about it, in words; empty when nothing needs doing
  bool measures_power = false; // whether this source yields a power figure here
  // Issue 30: a failure the user is told of (once, with a source-missing event) even from a backend that is quiet
  // when its hardware is simply absent (SourceEntry::quiet_when_missing).
  bool said = false;

  static SourceStatus ok(std::string detail, bool power) { return {State::Ok, std::move(detail), {}, power, false}; }
  static SourceStatus missing(std::string detail, std::string fix = {}) {
    return {State::Missing, std::move(detail), std::move(fix), false, false};
  }
  static SourceStatus no_permission(std::string detail, std::string fix) {
    return {State::NoPermission, std::move(detail), std::move(fix), false, false};
  }
  // Issue 30: the one rule for a vendor library (NVML, ROCm SMI, Level Zero) that cannot be loaded. It is missing,
  // whichever the backend. Where the user named it by its environment variable (WATTSCOPE_*_LIBRARY) or the library
  // found is not usable (it lacks required functions), that is said, with an event; where none of the usual names is
  // installed it is the backend's ordinary absence, quiet where the registry says so.
  static SourceStatus not_loaded(std::string detail, std::string fix, bool named_or_unusable) {
    SourceStatus st = missing(std::move(detail), std::move(fix));
    st.said = named_or_unusable;
    return st;
  }
  bool is_ok() const { return state == State::Ok; }
  // "ok", "missing", "no permission", "error": the words doctor --json prints.
  std::string_view state_name() const;
  // One line for a log: the detail, then the fix.
  std::string line() const;
};

// "00000000:3B:00.0" (NVML), "0000:3b:00.0" (sysfs) -> "0000:3b:00.0": one spelling to compare claims by.
std::string normalize_pci_bus_id(std::string_view id);

class Source {
public:
  virtual ~Source() = default;
  virtual std::string_view name() const = 0;
  // Probes the hardware. false: this source has nothing here; status() says why, in words a user can act on.
  virtual bool open() = 0;
  // Fills this source's part of the frame. Never throws and never blocks on anything but the device itself.
  virtual void sample(Frame& frame) noexcept = 0;
  // true for a vendor library that can block inside the driver: sampled on its own thread against a deadline, and then
  // it writes only frame.gpus and frame.events.
  virtual bool may_block() const { return false; }
  // Issue 31: open() may run on a thread of its own, beside the command, and finish late (a vendor library whose init
  // can hang for seconds). Not for a library whose open() redirects the process's stderr (ROCm SMI, Level Zero): a
  // hang there would swallow wattscope's own messages for as long as it lasts.
  virtual bool opens_aside() const { return false; }
  // issue 33: a value read on a schedule (a costly energy counter, read once a second) waits for the run's last
  // sample to be read again, so the run ends on a reading: the sampler then takes that sample even right after a tick.
  virtual bool wants_final_read() const { return false; }
  // issue 33: the source can read its GPUs' energy counters alone, off the tick's grid (a phase's edge). Called on the
  // thread that samples it, never during sample().
  // `requested`: when the edge was marked. The reading may take steps (a counter that moves on a period is read just
  // after its next update): the source returns when it wants to be called again for the same request, and nothing
  // once it is done. The steps are made between ticks too.
  virtual bool reads_energy_counters() const { return false; }
  virtual std::optional<SteadyClock::time_point> read_energy_counters(std::vector<CounterReading>& /*out*/,
                                                                      SteadyClock::time_point /*requested*/) noexcept {
    return std::nullopt;
  }
  // Adaptive sampling (issue 18, sampler/adaptive.hpp): the cheap reading taken on the ticks between full samples
  // while the machine is idle, enough to see activity: GPU utilisation only (one GpuSample per device with
  // util_gpu_pct), or the CPU's utilisation. Most sources have nothing to say about activity and do nothing. A
  // full sample() on the same tick (frame.tick) may follow: a source must then not count the interval twice.
  virtual void probe(Frame& /*frame*/) noexcept {}
  virtual SourceStatus status() const = 0;
  virtual std::vector<GpuDevice> devices() const { return {}; }
  virtual void describe(RunInfo& /*run*/) const {}
  // GPU backends other than NVML number their devices from here, so gpu_index never collides across vendors.
  virtual void set_first_index(int /*first*/) {}
  // Drops the devices a richer backend opened earlier already records (PCI bus ids as normalize_pci_bus_id writes
  // them), so no GPU is recorded twice. Returns how many were dropped.
  virtual size_t release_claimed(const std::vector<std::string>& /*bus_ids*/) { return 0; }
  // Details for `wattscope doctor`: devices or zones and what each supports (doctor --json's "details").
  virtual nlohmann::json report() const { return nullptr; }
  // The same details as lines of text for `wattscope doctor` (each source renders its own section).
  virtual std::vector<std::string> doctor_lines() const { return {}; }
  // Per-process use of its GPUs (attribution): true when this source can list them. gpu_processes is called by the
  // process tracker's thread, never the sampler's, at most once a second; it appends one sample per (process, GPU)
  // with pid set and start_time 0 (the tracker resolves it), and the GPUs whose lists answered.
  virtual bool lists_gpu_processes() const { return false; }
  virtual void gpu_processes(std::vector<GpuProcessSample>& /*out*/, std::vector<int>& /*listed*/) noexcept {}
};

} // namespace wattscope
