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
// it, waited on by a thread of its own with a timeout (event_wait) so that stopping is bounded; each error becomes an
// `events` row of kind "xid" on the next tick.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/thread_name.hpp"
#include "sources/nvml/nvml_source.hpp"

namespace wattscope {

using namespace nvml;

namespace {
std::string cstr(const char* buf, size_t n) {
  return std::string(buf, strnlen(buf, n));
}
constexpr unsigned int kMaxMigSlots = 64; // nvmlDeviceGetMaxMigDeviceCount answers 7 on an A100/H100
constexpr int kEventErrorLimit = 10;      // wait errors in a row (other than a timeout) before the thread gives up
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
  for (const auto& d : devs_) {
    const Return rc = lib_->device_register_events(d.handle, kEventTypeXidCriticalError, event_set_);
    if (rc == kSuccess)
      ++registered;
    else
      spdlog::debug("GPU {}: no Xid events ({})", d.info.gpu_index, error_name(rc));
  }
  if (registered == 0) return; // the set is freed with the source
  event_thread_ = std::thread([this] {
    name_this_thread("ws-nvml-xid");
    event_loop();
  });
}

void NvmlSource::event_loop() {
  int errors = 0;
  const auto wait_ms = static_cast<unsigned int>(std::max<int64_t>(1, opts_.event_wait.count()));
  while (!event_stop_.load(std::memory_order_relaxed)) {
    EventData e{};
    e.gpuInstanceId = e.computeInstanceId = kNoInstance; // the older wait leaves them unwritten
    const Return rc = lib_->event_set_wait(event_set_, &e, wait_ms);
    if (rc == kErrorTimeout) {
      errors = 0;
      continue;
    }
    if (rc != kSuccess) {
      // GPU_IS_LOST and friends answer at once: pause one wait rather than spin, and give up after a run of them.
      if (++errors >= kEventErrorLimit) {
        spdlog::warn("nvml: the Xid event wait failed {} times in a row ({}); Xid errors are no longer recorded",
                     errors, error_name(rc));
        return;
      }
      for (unsigned int slept = 0; slept < wait_ms && !event_stop_.load(std::memory_order_relaxed); slept += 10)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    errors = 0;
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
    ev.ts_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    ev.kind = "xid";
    ev.source = index >= 0 ? fmt::format("gpu{}", index) : "nvml";
    ev.detail = fmt::format("Xid {} on NVIDIA GPU {} ({}){}{}", e.eventData, index, dev ? dev->info.uuid : "?", where,
                            e.eventData == 999 ? " (the driver did not name it)" : "");
    spdlog::warn("{}", ev.detail);
    xid_seen_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(event_mu_);
    pending_events_.push_back(std::move(ev));
    events_pending_.store(true, std::memory_order_release);
  }
}

} // namespace wattscope
