// `run --gpus free:N`: py3nvml's grab_gpus, done safely. N GPUs with no compute process and little memory in use
// are chosen, handed to the command by UUID in CUDA_VISIBLE_DEVICES, and held for the whole run with an flock per GPU
// in a lock directory, so two runs started at the same moment never get the same GPU (py3nvml checks, then the
// framework allocates: two jobs in that window take the same card).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/fd.hpp"

namespace wattscope {

// One GPU as NVML saw it at the start of the run.
struct GpuState {
  int index = 0;
  std::string uuid;
  std::string name;
  std::optional<int64_t> mem_used_bytes;
  std::optional<int64_t> mem_total_bytes;
  std::optional<int> compute_processes; // missing: the driver would not list them (then the GPU is not taken)
  std::optional<double> temp_c;         // the GPU's temperature (run --cooldown-until waits on it)
};

// "free:N" -> N (1 to 64); nullopt when the flag is not a free: request. Throws std::invalid_argument naming the
// problem for "free:", "free:0", "free:x".
std::optional<int> parse_free_gpus(const std::string& gpus_flag);
// "5%" or "5" -> 5.0 (percent of the GPU's memory, 0 to 100). Throws std::invalid_argument.
double parse_mem_pct(const std::string& value);

// Every GPU's state through NVML (its own nvmlInit / nvmlShutdown, before the recording opens it). library_path:
// WATTSCOPE_NVML_LIBRARY, or "" for the usual search. Throws std::runtime_error when NVML cannot be used.
std::vector<GpuState> probe_gpus(const std::string& library_path);

// Where the per-GPU lock files live: $WATTSCOPE_LOCK_DIR; /run/wattscope/locks as root; else
// $XDG_RUNTIME_DIR/wattscope; else /tmp/wattscope-locks-UID.
std::string default_lock_dir();

struct GpuGrab {
  std::vector<GpuState> gpus;  // the GPUs taken, in NVML order
  std::vector<UniqueFd> locks; // one flock'ed lock file per GPU: keep them open for the whole run
  std::string cuda_visible;    // their UUIDs, comma-separated, for the command's CUDA_VISIBLE_DEVICES
};

struct GrabRequest {
  int count = 1;
  double mem_max_pct = 5;                  // a GPU is free below this share of its memory in use
  std::string lock_dir;                    // made if missing (0755 as root, else 0700)
  std::optional<std::string> cuda_visible; // the caller's CUDA_VISIBLE_DEVICES: GPUs are taken only among those
};

// Takes `count` free GPUs, locking each. Throws std::runtime_error saying how many are free, and why each other GPU
// is not, when fewer than `count` can be taken (the locks taken so far are released).
GpuGrab grab_free_gpus(const std::vector<GpuState>& gpus, const GrabRequest& req);

} // namespace wattscope
