// The trace CSV reader (issue 36): traces are files anyone may drop into tests/fixtures/traces/ or pass to
// bench/forecast_eval --traces. Any input is either a clear error or series that fit the caps.
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "check.hpp"
#include "forecast/evaluate.hpp"

using namespace wattscope::forecast;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const auto series = parse_trace_csv(in, "fuzz.csv");
    FUZZ_CHECK(series.size() <= 2 * 256); // two metrics per device at most
    for (const auto& s : series) {
      FUZZ_CHECK(s.metric == "util" || s.metric == "power");
      FUZZ_CHECK(s.values.size() <= size); // a value per row, a row per line
      for (double v : s.values)
        FUZZ_CHECK(std::isnan(v) || std::isfinite(v));
    }
  } catch (const std::runtime_error& e) {
    FUZZ_CHECK(std::string_view(e.what()).find("fuzz.csv") != std::string_view::npos);
    FUZZ_CHECK(std::string_view(e.what()).size() < 1024);
  }
  return 0;
}
