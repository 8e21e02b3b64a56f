// --gpus (typed by the user: malformed is an error) and CUDA_VISIBLE_DEVICES (set by a scheduler or a script: never
// an error). The first byte picks which; the rest is the value.
#include <algorithm>
#include <climits>
#include <optional>
#include <stdexcept>
#include <string>

#include "check.hpp"
#include "sources/nvml/gpu_selection.hpp"

using namespace wattscope;

namespace {
void exercise(const GpuSelection& sel) {
  for (int index : {0, 1, 7, 99, INT_MAX})
    for (const char* uuid : {"", "GPU-8f2c1234-aaaa-bbbb-cccc-0123456789ab", "MIG-1234"})
      (void)sel.selects(index, uuid);
  if (sel.all) FUZZ_CHECK(sel.selects(3, "GPU-x") && sel.tokens.empty());
  // Every entry kept is an index in range or a UUID with something after its prefix.
  for (const auto& t : sel.tokens) {
    const bool digits = !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
    if (digits) {
      const std::string significant = t.substr(std::min(t.find_first_not_of('0'), t.size()));
      FUZZ_CHECK(significant.size() <= 4 && (significant.empty() || std::stoi(significant) <= kMaxGpuIndex));
    } else {
      FUZZ_CHECK(t.size() > 4 && (t.starts_with("GPU-") || t.starts_with("MIG-")));
    }
  }
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string value(fuzz_text(data + 1, size - 1));
  if (data[0] & 1) {
    try {
      const GpuSelection sel = parse_gpu_selection(value, std::nullopt);
      FUZZ_CHECK(sel.origin == "--gpus" || value.empty());
      exercise(sel);
    } catch (const std::invalid_argument&) {
      FUZZ_CHECK(!value.empty());
    }
  } else {
    // Whatever the environment holds, the job runs: no exception at all.
    const GpuSelection sel = parse_gpu_selection("", value);
    FUZZ_CHECK(sel.origin == "CUDA_VISIBLE_DEVICES");
    FUZZ_CHECK(sel.warning.empty() || sel.all);
    exercise(sel);
  }
  return 0;
}
