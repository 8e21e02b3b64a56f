// A workload's Prometheus endpoint (--scrape): whatever the server at the URL answers. The parser must stay within
// its bounds, and the state between scrapes must never count negative or non-finite work, whatever two answers say.
#include <cmath>
#include <string>

#include "check.hpp"
#include "phases/scrape.hpp"

using namespace wattscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body = fuzz_text(data, size);
  static const std::vector<ScrapeMetric> metrics = scrape_metrics({"x_total=items"});
  ScrapeLimits limits;
  limits.max_series = 64;
  limits.max_labels = 4;
  ScrapeState state(metrics, SteadyRule{0.85, 0, std::nullopt});
  // The input twice, then its second half: two scrapes that agree, then one that may fall (a restart).
  for (const std::string_view part : {body, body, body.substr(size / 2)}) {
    const ScrapeParse p = parse_exposition(part, state.wanted(), limits);
    FUZZ_CHECK(p.series <= limits.max_series);
    FUZZ_CHECK(p.samples.size() <= p.series);
    for (const auto& s : p.samples) {
      FUZZ_CHECK(std::isfinite(s.value));
      FUZZ_CHECK(s.labels.size() <= limits.max_labels);
    }
    const ScrapeStep step = state.observe(p, 0);
    for (const auto& [unit, amount] : step.work)
      FUZZ_CHECK(std::isfinite(amount) && amount > 0);
  }
  return 0;
}
