// A --simulate scenario (issue 19; bounded in issue 31): the JSON text read with a depth limit, the checks it goes
// through, and the markers its timeline sends. Kept apart from simulate.cpp (which embeds and loads the simulated
// library) so that fuzz/fuzz_scenario.cpp can drive exactly this code.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "phases/marker.hpp"

namespace wattscope {

// Scenario files are small; a bigger one is a mistake (a log, a data set), said rather than read.
inline constexpr size_t kMaxScenarioBytes = 4 << 20;
// The deepest a scenario goes is a value object inside a metric inside a device (about 6 levels); the cap keeps the
// checks and the simulated library, which walk the document recursively, far from the end of their stack.
inline constexpr size_t kMaxScenarioDepth = 32;
inline constexpr size_t kMaxSimulatedGpus = 64;
// Each segment and phase is a few markers per pass; these are far above any hand-written timeline and keep the
// per-marker lookups and the library's per-call segment search cheap.
inline constexpr size_t kMaxScenarioSegments = 10'000;
inline constexpr size_t kMaxScenarioPhases = 10'000;

// The scenario text as JSON. Throws std::invalid_argument: "not valid JSON: <the parser's message>", or nesting
// deeper than kMaxScenarioDepth (refused while parsing, before any of it is walked).
nlohmann::json parse_scenario_json(std::string_view text);

// The checks Simulation::load makes, on a parsed scenario: throws std::invalid_argument naming the field (as a JSON
// path, e.g. devices[1].metrics.power_mw) and what is wrong with it.
void check_scenario(const nlohmann::json& scenario);

// The markers a checked scenario's timeline sends (phases begin/end, work done every half second of a segment that
// does work), as an endless sequence when it loops. Computed on demand from the segments and phases: a timeline of
// many days costs the same memory as one of seconds.
class ScenarioTimeline {
public:
  ScenarioTimeline() = default; // no timeline: no markers
  explicit ScenarioTimeline(const nlohmann::json& checked_scenario);
  // The n-th marker and its time in seconds since the scenario began; none past the end when it does not loop.
  std::optional<std::pair<double, Marker>> marker(size_t n) const;

private:
  struct Timed {
    double t_s;
    Marker m;
  };
  struct Segment {
    double start_s;
    double len_s;
    double rate;       // work units per second
    size_t first_work; // index of its first work marker among all segments' work markers
  };
  // One pass of the timeline: the work markers [work_begin, work_end) merged with these phase markers by time.
  struct Pass {
    size_t work_begin = 0, work_end = 0;
    std::vector<Timed> phases; // in order: time, then ends before begins, then the file's order
    size_t size() const { return work_end - work_begin + phases.size(); }
  };
  double work_time(size_t w) const;
  Marker work_marker(size_t w) const;
  size_t works_until(double t_s) const;  // work markers at or before t_s
  size_t works_before(double t_s) const; // work markers strictly before t_s
  std::optional<std::pair<double, Marker>> in_pass(const Pass& p, size_t n) const;

  std::vector<Segment> segments_;
  size_t works_ = 0; // work markers in one pass, all segments
  std::string unit_;
  Pass first_;
  Pass repeated_;                                           // the part a loop repeats (from "loop_from" on)
  double loop_span_s_ = 0;                                  // its length; 0 when the timeline does not loop
  std::vector<std::pair<std::string, int64_t>> index_step_; // per phase name: how far its index moves per loop
};

} // namespace wattscope
