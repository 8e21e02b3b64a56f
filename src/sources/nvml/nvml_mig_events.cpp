// Issue 17: MIG instances and Xid errors (docs/nvidia.md).
//
// MIG: a GPU with MIG on is partitioned into GPU instances, each holding compute instances; NVML gives each compute
// instance a device handle of its own (nvmlDeviceGetMigDeviceHandleByIndex) with its ids, memory slice and processes.
// Power and energy stay the parent GPU's: NVML measures them per GPU. The instances are listed once at open(); their
// memory and process counts are read on the slow thread (once a slow period), never on the tick. Where the run's
// selection names an instance (CUDA_VISIBLE_DEVICES=MIG-…), the parent GPU is recorded and its processes are listed
// from that instance's handle only, so attribution counts the instance's processes and no one else's.
//
// Xid errors: an NVML event set with nvmlEventTypeXidCriticalError registered for every recorded GPU that supports
// it, polled by the ticks at most once an event_poll (250 ms) without waiting; each error becomes an `events` row
// of kind "xid" of that tick. (It had a thread of its own waiting with a timeout, which woke 4 times a second to be
// stoppable: 410 us of CPU a second with 8 fake GPUs, a quarter of what record cost at 1 s.)
#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sources/nvml/nvml_source.hpp"

namespace wattscope {

using namespace nvml;

namespace {
std::string cstr(const char* buf, size_t n) {
  return std::string(buf, strnlen(buf, n));
}
constexpr unsigned int kMaxMigSlots = 64; // nvmlDeviceGetMaxMigDeviceCount answers 7 on an A100/H100
constexpr int kEventErrorLimit = 10;      // poll errors in a row (other than a timeout) before polling stops
constexpr int kEventsPerPoll = 64;        // events taken in one poll at most; the rest at the next
} // namespace

void NvmlSource::enumerate_migs(Dev& d) {
  if (!lib_->device_max_mig_count || !lib_->device_mig_by_index) return;
  unsigned int n = 0;
  if (lib_->device_max_mig_count(d.handle, &n) != kSuccess) return;
  const bool whole = opts_.selection.selects(d.info.gpu_index, d.info.uuid);
  char buf[kStringBuffer] = {};
  for (unsigned int k = 0; k < n && k < kMaxMigSlots; ++k) {
    MigInstance m;
    if (lib_->device_mig_by_index(d.handle, k, &m.handle) != kSuccess) continue; // a slot with no instance
    m.info.gpu_index = d.info.gpu_index;
    unsigned int id = 0;
    if (lib_->device_gpu_instance_id && lib_->device_gpu_instance_id(m.handle, &id) == kSuccess)
      m.info.gpu_instance = id;
    if (lib_->device_compute_instance_id && lib_->device_compute_instance_id(m.handle, &id) == kSuccess)
      m.info.compute_instance = id;
    if (lib_->device_uuid && lib_->device_uuid(m.handle, buf, sizeof buf) == kSuccess)
      m.info.uuid = cstr(buf, sizeof buf);
    m.info.selected = !whole && !m.info.uuid.empty() && !opts_.selection.mig_match({m.info.uuid}).empty();
    d.mig_scoped = d.mig_scoped || m.info.selected;
    d.migs.push_back(std::move(m));
  }
  spdlog::info("GPU {} ({}) has MIG on: {} instance(s){}; its power and energy are the whole GPU's", d.info.gpu_index,
               d.info.uuid, d.migs.size(),
               d.mig_scoped ? "; process attribution is scoped to the selected instance" : "");
}

// Slow thread: each instance's memory slice and process count. A call that fails leaves that figure missing.
void NvmlSource::read_migs(Dev& d) {
  if (d.migs.empty()) return;
  std::vector<MigSample> out;
  out.reserve(d.migs.size());
  for (const auto& m : d.migs) {
    MigSample s = m.info;
    MemoryV2 v2{};
    v2.version = kMemoryV2Version;
    Memory v1{};
    if (lib_->device_memory_v2 && lib_->device_memory_v2(m.handle, &v2) == kSuccess) {
      s.mem_used_bytes = static_cast<int64_t>(v2.used);
      s.mem_total_bytes = static_cast<int64_t>(v2.total);
    } else if (lib_->device_memory && lib_->device_memory(m.handle, &v1) == kSuccess) {
      s.mem_used_bytes = static_cast<int64_t>(v1.used);
      s.mem_total_bytes = static_cast<int64_t>(v1.total);
    }
    // The count alone: a call without room answers how many there are.
    unsigned int count = 0;
    Return rc = kErrorFunctionNotFound;
    if (lib_->device_compute_processes)
      rc = lib_->device_compute_processes(m.handle, &count, nullptr);
    else if (lib_->device_compute_processes_v1)
      rc = lib_->device_compute_processes_v1(m.handle, &count, nullptr);
    if (rc == kSuccess || rc == kErrorInsufficientSize) s.processes = count;
    out.push_back(std::move(s));
  }
  std::lock_guard lock(d.slow->mu);
  d.slow->migs = std::move(out);
}

void NvmlSource::start_events() {
  if (!lib_->event_set_create || !lib_->device_register_events || !lib_->event_set_wait || !lib_->event_set_free)
    return;
  if (lib_->event_set_create(&event_set_) != kSuccess || !event_set_) {
    event_set_ = nullptr;
    return;
  }
  int registered = 0;
  for (auto& d : devs_) {
    const Return rc = lib_->device_register_events(d.handle, kEventTypeXidCriticalError, event_set_);
    d.info.xid_events = rc == kSuccess; // issue 32: serve's Xid counter is exported for this GPU
    if (rc == kSuccess)
      ++registered;
    else
      spdlog::debug("GPU {}: no Xid events ({})", d.info.gpu_index, error_name(rc));
  }
  events_on_ = registered > 0; // else the set is freed with the source
}

// Takes the Xid events that arrived since the last poll, at most once an event_poll: nvmlEventSetWait with no
// wait returns at once, with an event or NVML_ERROR_TIMEOUT ("if some events are ready to be delivered at the time
// of the call, function returns immediately"). Called by the ticks (full or probe) on the source's thread.
void NvmlSource::poll_events(Frame& frame) {
  if (!events_on_ || frame.mono < events_next_) return;
  events_next_ = frame.mono + opts_.event_poll;
  for (int n = 0; n < kEventsPerPoll; ++n) {
    EventData e{};
    e.gpuInstanceId = e.computeInstanceId = kNoInstance; // the older wait leaves them unwritten
    const Return rc = lib_->event_set_wait(event_set_, &e, 0);
    if (rc == kErrorTimeout) {
      event_errors_ = 0;
      return;
    }
    if (rc != kSuccess) {
      // GPU_IS_LOST and friends: tried again at the next poll, and given up after a run of them.
      if (++event_errors_ >= kEventErrorLimit) {
        spdlog::warn("nvml: polling Xid events failed {} times in a row ({}); Xid errors are no longer recorded",
                     event_errors_, error_name(rc));
        events_on_ = false;
      }
      return;
    }
    event_errors_ = 0;
    if (!(e.eventType & kEventTypeXidCriticalError)) continue;
    const Dev* dev = nullptr;
    for (const auto& d : devs_)
      if (d.handle == e.device) dev = &d;
    const int index = dev ? dev->info.gpu_index : -1;
    std::string where;
    if (e.gpuInstanceId != kNoInstance) {
      where = fmt::format(", MIG GPU instance {}", e.gpuInstanceId);
      if (e.computeInstanceId != kNoInstance) where += fmt::format(" compute instance {}", e.computeInstanceId);
    }
    Event ev;
    ev.ts_ms = frame.ts_ms;
    ev.kind = "xid";
    ev.source = index >= 0 ? fmt::format("gpu{}", index) : "nvml";
    ev.detail = fmt::format("Xid {} on NVIDIA GPU {} ({}){}{}", e.eventData, index, dev ? dev->info.uuid : "?", where,
                            e.eventData == 999 ? " (the driver did not name it)" : "");
    spdlog::warn("{}", ev.detail);
    xid_seen_.fetch_add(1, std::memory_order_relaxed);
    frame.events.push_back(std::move(ev));
  }
}

} // namespace wattscope
