// Which GPUs a run records. On a shared server a task's energy must not include other people's GPUs, so the default
// is the task's CUDA_VISIBLE_DEVICES; --gpus overrides.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace wattscope {

struct GpuSelection {
  bool all = true;
  std::vector<std::string> tokens; // indices ("0") or UUID prefixes ("GPU-8f2c…")
  std::string origin;              // "--gpus", "CUDA_VISIBLE_DEVICES" or "default"
  // Whether a device with this index and uuid is selected.
  bool selects(int index, const std::string& uuid) const;
};

// flag: --gpus value ("" when not given); cuda_visible: CUDA_VISIBLE_DEVICES (nullopt when unset).
// Throws std::invalid_argument on a malformed --gpus.
GpuSelection parse_gpu_selection(const std::string& flag, const std::optional<std::string>& cuda_visible);

} // namespace wattscope
