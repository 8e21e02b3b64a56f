// Which processes use each GPU, and how much (attribution, docs/attribution.md). The process tracker's thread makes
// these calls, at most once a second; the sampling tick never does. On an H100 (driver 580) the lists cost ~13 us and
// the per-process utilisation samples 1.5-2.7 ms of CPU, found or not, so those are asked only of a GPU that lists a
// process (bench/nvml_call_cost.py).
//
// Running processes: nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3 (or _v2, the same struct), else the
// unversioned call with the older two-field struct. Drivers 535.43.02-535.98 fill a 32-byte struct from _v3 (issue 30;
// process_info_stride() in nvml_source.cpp tells them): entries are read at the stride the driver writes, and every
// buffer has room for the largest struct any driver writes, so a driver can never write past it. Utilisation:
// nvmlDeviceGetProcessesUtilizationInfo where the driver has it, else nvmlDeviceGetProcessUtilization; both return the
// samples newer than the last timestamp seen, which are averaged per pid.
#include <algorithm>
#include <cstring>
#include <map>
#include <span>

#include <spdlog/spdlog.h>

#include "sources/nvml/nvml_source.hpp"

namespace wattscope {

using namespace nvml;

namespace {

// NVML's list functions: asked with room for `room` entries (a count-only call first costs more than the list
// itself: 84 us against 13 us on an H100, bench/nvml_call_cost.py), and again with room for a few more than the
// count the driver answered where that was too little (a process may start in between). Fn(count*, T*) -> Return.
// room 0: the two-call idiom, asked first with no buffer for the count.
template <class T, class Fn> Return list(Fn&& fn, std::vector<T>& out, size_t room = 0) {
  out.resize(room);
  for (int attempt = 0; attempt < 3; ++attempt) {
    unsigned int count = static_cast<unsigned int>(out.size());
    const Return rc = fn(&count, out.empty() ? nullptr : out.data());
    if (rc == kSuccess) {
      out.resize(std::min<size_t>(count, out.size()));
      return rc;
    }
    if (rc != kErrorInsufficientSize) return rc;
    out.resize(count + 8);
  }
  return kErrorInsufficientSize;
}

// A running-process list: (pid, memory held) per entry of `stride` bytes, asked with room for `room` entries and again
// with room for a few more than the count the driver answered where that was too little. Whatever the stride, the
// buffer holds kProcessInfoMaxBytes per entry the driver is told of, and the count it answers is capped, so neither a
// larger struct than expected nor a wild count makes it write (or us allocate) without bound.
constexpr size_t kMaxListedProcesses = 4096;
struct Listed {
  unsigned int pid;
  unsigned long long used;
};
template <class Fn> Return list_processes(Fn&& fn, size_t stride, size_t room, std::vector<Listed>& out) {
  out.clear();
  std::vector<unsigned char> buf;
  size_t entries = std::min(room, kMaxListedProcesses);
  for (int attempt = 0; attempt < 3; ++attempt) {
    buf.assign(std::max<size_t>(entries, 1) * kProcessInfoMaxBytes, 0);
    unsigned int count = static_cast<unsigned int>(entries);
    const Return rc = fn(&count, entries == 0 ? nullptr : buf.data());
    if (rc == kSuccess) {
      const size_t n = std::min<size_t>(count, entries);
      for (size_t i = 0; i < n; ++i) {
        Listed l{};
        std::memcpy(&l.pid, buf.data() + i * stride, sizeof l.pid);
        std::memcpy(&l.used, buf.data() + i * stride + offsetof(ProcessInfo, usedGpuMemory), sizeof l.used);
        out.push_back(l);
      }
      return rc;
    }
    if (rc != kErrorInsufficientSize) return rc;
    entries = std::min<size_t>(static_cast<size_t>(count) + 8, kMaxListedProcesses);
  }
  return kErrorInsufficientSize;
}

struct Util {
  double sm = 0, mem = 0, enc = 0, dec = 0;
  int n = 0;
};

bool property_error(Return rc) { // a property of the device or driver, not of the moment
  return rc == kErrorNotSupported || rc == kErrorFunctionNotFound || rc == kErrorNoPermission ||
         rc == kErrorInvalidArgument;
}

// pid -> memory held (bytes; missing where the driver cannot tell)
using HeldMemory = std::map<unsigned int, OptI>;
void take(HeldMemory& mem, unsigned int pid, unsigned long long used) {
  OptI bytes;
  if (used != kValueNotAvailable) bytes = static_cast<int64_t>(used);
  auto [it, fresh] = mem.emplace(pid, bytes);
  // A process can be both a compute and a graphics client: its memory is the same allocation, listed twice.
  if (!fresh && bytes && (!it->second || *bytes > *it->second)) it->second = bytes;
}

// One running-process list of handle `h` (v3: the _v3/_v2 call, v1: the unversioned one) into `mem`; whether it
// answered.
template <class V3, class V1>
bool read_one_list(const Library& lib, Device h, V3 v3, V1 v1, size_t stride, NvmlSource::ProcState& ps,
                   HeldMemory& mem) {
  std::vector<Listed> infos;
  if (ps.list_v3 && lib.*v3) {
    const Return rc = list_processes(
        [&](unsigned int* n, unsigned char* p) { return (lib.*v3)(h, n, reinterpret_cast<ProcessInfo*>(p)); }, stride,
        ps.list_room, infos);
    ps.list_room = std::max<size_t>(ps.list_room, infos.size() + 8);
    if (rc == kSuccess) {
      for (const auto& p : infos)
        take(mem, p.pid, p.used);
      return true;
    }
    if (!property_error(rc)) return false;
    ps.list_v3 = false; // the v2 struct is not understood here: the older call from now on
  }
  if (!(lib.*v1)) return false;
  const Return rc = list_processes(
      [&](unsigned int* n, unsigned char* p) { return (lib.*v1)(h, n, reinterpret_cast<ProcessInfoV1*>(p)); },
      sizeof(ProcessInfoV1), ps.list_room, infos);
  ps.list_room = std::max<size_t>(ps.list_room, infos.size() + 8);
  if (rc != kSuccess) return false;
  for (const auto& p : infos)
    take(mem, p.pid, p.used);
  return true;
}

// The compute and graphics processes listed on `handles` into `mem`; whether any list answered.
bool list_device_processes(const Library& lib, std::span<const Device> handles, size_t stride,
                           NvmlSource::ProcState& ps, HeldMemory& mem) {
  bool any_list = false;
  for (Device h : handles)
    any_list |= read_one_list(lib, h, &Library::device_compute_processes, &Library::device_compute_processes_v1, stride,
                              ps, mem);
  for (Device h : handles)
    any_list |= read_one_list(lib, h, &Library::device_graphics_processes, &Library::device_graphics_processes_v1,
                              stride, ps, mem);
  return any_list;
}

// Per-process utilisation of `h` since the last samples seen, averaged per pid into `util`; whether it is known.
// NOT_FOUND: no process ran a kernel since then (0 %).
bool read_process_utilisation(const Library& lib, Device h, int gpu_index, NvmlSource::ProcState& ps,
                              std::map<unsigned int, Util>& util) {
  bool util_known = false;
  unsigned long long newest = ps.last_seen_us;
  // Both utilisation calls answer with structs whose fields share these names.
  auto add_samples = [&](const auto& buf) {
    for (const auto& u : buf) {
      auto& a = util[u.pid];
      a.sm += u.smUtil, a.mem += u.memUtil, a.enc += u.encUtil, a.dec += u.decUtil, a.n++;
      newest = std::max(newest, u.timeStamp);
    }
  };
  if (!ps.util_off && ps.util_info && lib.device_processes_utilization_info) {
    std::vector<ProcessUtilizationInfoV1> buf;
    ProcessesUtilizationInfo info{};
    const Return rc = list<ProcessUtilizationInfoV1>(
        [&](unsigned int* n, ProcessUtilizationInfoV1* p) {
          info = {};
          info.version = kProcessesUtilizationInfoVersion;
          info.processSamplesCount = *n;
          info.lastSeenTimeStamp = ps.last_seen_us;
          info.procUtilArray = p;
          const Return r = lib.device_processes_utilization_info(h, &info);
          *n = info.processSamplesCount;
          return r;
        },
        buf);
    if (rc == kSuccess || rc == kErrorNotFound) {
      util_known = true;
      add_samples(buf);
    } else if (property_error(rc)) {
      ps.util_info = false;
    }
  } else {
    ps.util_info = false;
  }
  if (!util_known && !ps.util_off && !ps.util_info) {
    if (!lib.device_process_utilization) {
      ps.util_off = true;
    } else {
      std::vector<ProcessUtilizationSample> buf;
      const Return rc = list<ProcessUtilizationSample>(
          [&](unsigned int* n, ProcessUtilizationSample* p) {
            return lib.device_process_utilization(h, p, n, ps.last_seen_us);
          },
          buf);
      if (rc == kSuccess || rc == kErrorNotFound) {
        util_known = true;
        add_samples(buf);
      } else if (property_error(rc)) {
        ps.util_off = true;
        spdlog::debug("GPU {}: no per-process utilisation ({}); its energy is split by memory held", gpu_index,
                      error_name(rc));
      }
    }
  }
  ps.last_seen_us = newest;
  return util_known;
}

// A sample per process of one GPU: the memory it holds and, where utilisation is known, its average shares (0 for a
// process with no samples since the last scan).
void append_samples(const HeldMemory& mem, const std::map<unsigned int, Util>& util, bool util_known, int gpu_index,
                    std::vector<GpuProcessSample>& out) {
  for (const auto& [pid, bytes] : mem) {
    GpuProcessSample g;
    g.id.pid = pid;
    g.gpu_index = gpu_index;
    g.mem_used_bytes = bytes;
    if (util_known) {
      g.sm_pct = g.mem_pct = g.enc_pct = g.dec_pct = 0.0;
      if (auto it = util.find(pid); it != util.end() && it->second.n > 0) {
        const double n = it->second.n;
        g.sm_pct = it->second.sm / n, g.mem_pct = it->second.mem / n;
        g.enc_pct = it->second.enc / n, g.dec_pct = it->second.dec / n;
      }
    }
    out.push_back(g);
  }
}

} // namespace

bool NvmlSource::lists_gpu_processes() const {
  return lib_ && (lib_->device_compute_processes || lib_->device_compute_processes_v1 ||
                  lib_->device_graphics_processes || lib_->device_graphics_processes_v1);
}

void NvmlSource::gpu_processes(std::vector<GpuProcessSample>& out, std::vector<int>& listed) noexcept {
  try {
    std::lock_guard lock(proc_mu_);
    if (!lib_) return;
    proc_state_.resize(devs_.size());
    for (size_t i = 0; i < devs_.size(); ++i) {
      Dev& d = devs_[i];
      ProcState& ps = proc_state_[i];
      {
        std::lock_guard l(d.slow->mu); // the tick's lost flag is the sampler's; this is its mirror
        if (d.slow->lost) continue;
      }
      if (ps.off) continue;
      // Issue 17: where the selection named a MIG instance of this GPU, its processes are that instance's (listed
      // from the instance's own handle): the parent's other instances belong to other people.
      std::vector<Device> handles;
      for (const auto& m : d.migs)
        if (m.info.selected) handles.push_back(m.handle);
      if (handles.empty()) handles.push_back(d.handle);
      HeldMemory mem;
      if (!list_device_processes(*lib_, handles, proc_stride_, ps, mem)) {
        if (!lib_->device_compute_processes && !lib_->device_compute_processes_v1) ps.off = true;
        continue;
      }
      // No process on this GPU: nothing to split, so its utilisation samples are not asked for. On an H100 (driver
      // 580) that call costs 2.7 ms of CPU even when it finds none, every scan, per GPU (bench/nvml_call_cost.py):
      // most of what the machine-wide scan cost there.
      if (mem.empty()) {
        listed.push_back(d.info.gpu_index);
        continue;
      }
      std::map<unsigned int, Util> util;
      const bool util_known = read_process_utilisation(*lib_, d.handle, d.info.gpu_index, ps, util);
      listed.push_back(d.info.gpu_index);
      append_samples(mem, util, util_known, d.info.gpu_index, out);
    }
  } catch (...) {
    // allocation failure: this scan keeps what it has
  }
}

} // namespace wattscope
