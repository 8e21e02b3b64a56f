// nvidia-smi CSV logs given to `wattscope import` (issue 15): files from anywhere.
#include <cmath>
#include <stdexcept>
#include <string>

#include "check.hpp"
#include "importers/nvidia_smi.hpp"

using namespace wattscope;

namespace {
void finite(const OptF& v) {
  if (v) FUZZ_CHECK(std::isfinite(*v));
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz_text(data, size);
  SmiOptions opts;
  opts.utc = true; // no dependence on the fuzzing machine's time zone
  int64_t last_line = 0;
  try {
    parse_nvidia_smi(text, opts, [&](const SmiRecord& r) {
      FUZZ_CHECK(r.line > last_line); // in file order, one record per line at most
      last_line = r.line;
      const GpuSample& s = r.sample;
      for (const OptF* v : {&s.power_w, &s.power_avg_w, &s.power_limit_w, &s.util_gpu_pct, &s.util_mem_pct,
                            &s.temp_gpu_c, &s.temp_mem_c, &s.fan_pct})
        finite(*v);
      if (r.index) FUZZ_CHECK(*r.index >= 0 && *r.index <= 1023);
      if (s.pstate) FUZZ_CHECK(*s.pstate >= 0 && *s.pstate <= 15);
      if (s.throttle_reasons) FUZZ_CHECK(*s.throttle_reasons >= 0);
    });
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    FUZZ_CHECK(!msg.empty());
  }
  return 0;
}
