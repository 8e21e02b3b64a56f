// Work read from a workload's own Prometheus endpoint (`--scrape URL`): the token and request counters of LLM serving
// engines (vLLM, Text Generation Inference, SGLang, llama.cpp's server), and any counter mapped to a unit with
// `--scrape-unit METRIC=UNIT`, turned into work markers; their running-requests gauge into steady-state windows.
// docs/inference.md has the engines' table and the steady-state rule.
//
// This is the pure part (a bounded parser of the text exposition format and the state kept between scrapes); the
// HTTP side is recording/scraper.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wattscope {

// ---- the exposition format (Prometheus text 0.0.4 and OpenMetrics 1.0), bounded
struct ScrapeLimits {
  size_t max_body_bytes = 4u << 20; // a larger answer is refused whole
  size_t max_series = 20000;        // samples past it are not read (and the scrape is said to be cut)
  size_t max_line_bytes = 65536;
  size_t max_labels = 64;
};
struct ScrapeSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};
struct ScrapeParse {
  std::vector<ScrapeSample> samples; // only those `wanted` accepts
  size_t series = 0;                 // every sample line seen
  size_t bad_lines = 0;              // lines that are no sample, comment or blank
  bool cut = false;                  // past max_series
  std::string first_error;           // the first bad line's reason
};
// Reads `body`; keeps the samples whose name `wanted` accepts (a name match costs one lookup per line).
ScrapeParse parse_exposition(std::string_view body, const std::vector<std::string>& wanted,
                             const ScrapeLimits& limits = {});

// ---- what is read, per engine
enum class ScrapeRole { Work, Running };
struct ScrapeMetric {
  std::string engine; // vllm, tgi, sglang, llama.cpp, or "user" (--scrape-unit)
  std::string sample; // the sample's name as exposed (a histogram's _sum, a counter's _total)
  std::string label;  // "" or a label that must equal `value` (TGI's method="prefill")
  std::string value;
  ScrapeRole role = ScrapeRole::Work;
  std::string unit; // output_tokens, prompt_tokens, requests, prefill_seconds, decode_seconds, or the user's
};
// The engines' documented names (docs/inference.md), then the user's mappings. Throws std::invalid_argument for a
// mapping that is not METRIC=UNIT with a metric name and a unit the marker rules accept.
std::vector<ScrapeMetric> scrape_metrics(const std::vector<std::string>& unit_mappings);

// ---- between scrapes: counters to work, the running gauge to steady-state windows
// A steady-state window (docs/inference.md): the engine runs at least `fraction` of its largest batch and produces
// output tokens; the window's phase begins once that has held for `hold_s` (ML.ENERGY rejects windows under 20 s, so
// what the phase covers has been steady for that long) and ends at the first scrape where it no longer holds.
struct SteadyRule {
  double fraction = 0.85;          // of the largest batch
  double hold_s = 20;              // steady this long before the window's phase begins
  std::optional<double> max_batch; // --scrape-max-batch; else the largest running count seen so far
};
struct ScrapeStep {
  std::map<std::string, double> work; // unit -> amount since the last scrape (a counter that fell: a restart)
  std::vector<std::string> restarts;  // engines whose counters fell: no work, a new baseline, the window ended
  std::optional<bool> steady_begins;  // true: a steady window begins at this scrape; false: it ends
  std::string engine;                 // the engine recognised (the first whose names were found)
};
class ScrapeState {
public:
  ScrapeState(std::vector<ScrapeMetric> metrics, SteadyRule rule) : metrics_(std::move(metrics)), rule_(rule) {}
  const std::vector<std::string>& wanted() const;
  // One scrape's samples at `t_s` (seconds, any origin): the work since the previous one. The first scrape is the
  // baseline (the engine's counters before the run are not the run's).
  ScrapeStep observe(const ScrapeParse& parsed, double t_s);
  bool in_window() const { return window_open_; }
  // The endpoint stopped answering: a window ends, and steadiness is judged afresh (the counters are kept, so the
  // next good scrape counts what they moved meanwhile).
  void reset_window() {
    window_open_ = false;
    steady_since_.reset();
  }
  // The next scrape is a baseline again (after a long outage: what the counters moved across it had no span).
  void rebaseline() { first_ = true; }

private:
  std::vector<ScrapeMetric> metrics_;
  SteadyRule rule_;
  mutable std::vector<std::string> wanted_;
  std::map<std::string, double> last_; // sample key -> value at the last scrape
  bool first_ = true;
  double max_running_ = 0;
  std::optional<double> steady_since_; // the condition holds since then
  bool window_open_ = false;           // its phase has begun
};

} // namespace wattscope
