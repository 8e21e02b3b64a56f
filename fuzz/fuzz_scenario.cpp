// --simulate=FILE scenarios (issue 19; bounded in issue 31): JSON anyone may hand to `run`. Parsed with its depth
// limit, checked, and its timeline asked for markers near and far, as the simulated run's marker thread does.
#include <cmath>
#include <stdexcept>

#include "check.hpp"
#include "simulation/scenario.hpp"

using namespace wattscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json sc;
  try {
    sc = parse_scenario_json(fuzz_text(data, size));
    check_scenario(sc);
  } catch (const std::invalid_argument&) {
    return 0; // refused with a reason: fine. Anything else thrown escapes and is a finding.
  }
  FUZZ_CHECK(sc.is_object() && sc["devices"].is_array() && sc["devices"].size() <= kMaxSimulatedGpus);
  (void)sc.dump(); // what the simulated library is handed
  const ScenarioTimeline tl(sc);
  double last = 0;
  for (size_t n = 0; n < 64; ++n) {
    const auto m = tl.marker(n);
    if (!m) break;
    FUZZ_CHECK(std::isfinite(m->first) && m->first >= 0);
    if (m->second.kind == Marker::Kind::Work) {
      FUZZ_CHECK(std::isfinite(m->second.amount) && m->second.amount >= 0 && !m->second.unit.empty());
      FUZZ_CHECK(m->first >= last); // a pass's work never goes back in time
      last = m->first;
    }
    if (m->second.kind == Marker::Kind::Begin) FUZZ_CHECK(!m->second.name.empty());
  }
  // Far into a long or looping timeline: as cheap as near (computed, never listed).
  for (size_t n : {size_t{1} << 20, size_t{1} << 40, size_t{1} << 62})
    if (const auto m = tl.marker(n)) FUZZ_CHECK(!std::isnan(m->first));
  return 0;
}
