// Which GPUs a run records. On a shared server a task's energy must not include other people's GPUs, so the default
// is the task's CUDA_VISIBLE_DEVICES; --gpus overrides.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace wattscope {

// Indices above this are refused: no machine has more GPUs, and a longer number is a typo (or would overflow).
inline constexpr int kMaxGpuIndex = 1023;

struct GpuSelection {
  bool all = true;
  std::vector<std::string> tokens; // indices ("0", at most kMaxGpuIndex) or UUID prefixes ("GPU-8f2c…")
  std::string origin;              // "--gpus", "CUDA_VISIBLE_DEVICES" or "default"
  std::string warning;             // why CUDA_VISIBLE_DEVICES was not followed; empty when it was (or not used)
  // CUDA_VISIBLE_DEVICES names GPUs by index while CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA then numbers them
  // fastest first, NVML by PCI bus, and the two differ where the GPUs are not all alike (the source checks).
  bool cuda_fastest_first = false;
  // Whether a device with this index and uuid is selected.
  bool selects(int index, const std::string& uuid) const;
  // The MIG entry (MIG-…) that names one of these MIG instances of a GPU, or "": the GPU is then selected as a whole.
  std::string mig_match(const std::vector<std::string>& mig_uuids) const;
  bool names_mig() const;
};

// flag: --gpus value ("" when not given); cuda_visible: CUDA_VISIBLE_DEVICES (nullopt when unset); cuda_order:
// CUDA_DEVICE_ORDER (nullopt when unset: CUDA's default, FASTEST_FIRST).
// Throws std::invalid_argument naming the entry on a malformed --gpus (typed by the user). CUDA_VISIBLE_DEVICES,
// set by a scheduler or a script the user may not know of, never stops a run: an index out of range selects all
// GPUs and says why in `warning`.
GpuSelection parse_gpu_selection(const std::string& flag, const std::optional<std::string>& cuda_visible,
                                 const std::optional<std::string>& cuda_order = std::nullopt);

} // namespace wattscope
