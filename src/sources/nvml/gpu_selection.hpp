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
  // Whether a device with this index and uuid is selected.
  bool selects(int index, const std::string& uuid) const;
};

// flag: --gpus value ("" when not given); cuda_visible: CUDA_VISIBLE_DEVICES (nullopt when unset).
// Throws std::invalid_argument naming the entry on a malformed --gpus (typed by the user). CUDA_VISIBLE_DEVICES,
// set by a scheduler or a script the user may not know of, never stops a run: an index out of range selects all
// GPUs and says why in `warning`.
GpuSelection parse_gpu_selection(const std::string& flag, const std::optional<std::string>& cuda_visible);

} // namespace wattscope
