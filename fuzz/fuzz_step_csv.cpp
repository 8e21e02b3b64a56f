// A carbon intensity or price file (--carbon-intensity-file, --energy-price-file): a CSV from a grid operator or any
// provider. The parser must accept it or refuse it with std::invalid_argument, never hold more than its cap of steps,
// and what it accepts must be a series every charge can use: sorted, distinct times, finite values >= 0.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "accounting/footprint.hpp"
#include "check.hpp"

using namespace wattscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz_text(data, size);
  (void)parse_iso8601_ms(text.substr(0, 64));
  StepSeries s;
  try {
    s = parse_step_csv(text, "g_per_kwh", "fuzz.csv");
  } catch (const std::invalid_argument&) {
    return 0;
  }
  FUZZ_CHECK(!s.steps.empty() && s.steps.size() <= kMaxSeriesSteps);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    FUZZ_CHECK(std::isfinite(s.steps[i].second) && s.steps[i].second >= 0);
    if (i) FUZZ_CHECK(s.steps[i].first > s.steps[i - 1].first);
  }
  // A stretch over the whole series and beyond: a time-weighted mean within the values' range.
  const int64_t a = s.steps.front().first - 1000, b = s.steps.back().first + 1000;
  double lo = s.steps.front().second, hi = lo;
  for (const auto& [t, v] : s.steps) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const double m = s.mean_over(a, b);
  FUZZ_CHECK(std::isfinite(m) && m >= lo * (1 - 1e-9) - 1e-9 && m <= hi * (1 + 1e-9) + 1e-9);
  return 0;
}
