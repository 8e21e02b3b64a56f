// One stored run as every view sees it: loaded once per run from any store, its figures computed once. `show`,
// `show --json`, `advise`, `report`, `stats`, `compare` and serve's run API derive from it, so that a figure added
// here appears in each of them, and two views never work one figure out twice (and differently).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "advice/advice.hpp"
#include "core/frame.hpp"
#include "core/schema.hpp"
#include "runs/footprint_view.hpp"
#include "runs/phase_view.hpp"
#include "runs/run_view.hpp"
#include "sinks/sink.hpp"

namespace wattscope {

// What a view needs beyond the run's figures. The model reads each table at most once: rows the view wants to see
// (a report's charted series) are handed to it in the same pass that builds the advice's input.
struct RunModelWants {
  bool advice = false; // the advice: reads every GPU and CPU sample
  bool events = false; // every event row (the report's timeline); marks and the model marker are always kept
  std::function<void(std::span<const Value>)> gpu_sample{}; // each gpu_samples row, in stored (tick) order
  std::function<void(std::span<const Value>)> cpu_sample{}; // each cpu_samples row, likewise
  FootprintOverride footprint{}; // carbon and cost at a read command's rates instead of the recorded ones
};

// How far the run's figures can be trusted, said once for every view.
struct RunQuality {
  bool unfinished = false;     // no end stored: still recording, or its recorder died (figures rebuilt from samples)
  int64_t markers_dropped = 0; // markers over wattscope's caps: work and phases incomplete
  size_t phases_open = 0;      // no end stored yet (`repair` closes them once the run is over)
  size_t phases_uncertain = 0; // stated bound over kPhaseBoundFlagPct of their energy
  size_t phases_coarse = 0;    // shorter than two sampling intervals
  size_t phases_closed_by_repair = 0;
  // As measured: the hottest GPU's temperature at the run's first and last sample, and its warm-up (until the GPUs'
  // power first settled near the level it kept); missing for runs of older versions or without GPUs.
  OptF gpu_temp_start_c;
  OptF gpu_temp_end_c;
  OptF warmup_s;
  bool settled = true; // false: power never settled before the run ended
  // Still warming up: power never settled, or took more than a quarter of the run (kWarmupShare) to.
  bool warming_up(const OptF& duration_s) const;
  nlohmann::json json() const;
};

struct RunModel {
  RunInfo run;                   // as shown: an unfinished run carries figures rebuilt from its stored samples
  PhaseData phases;              // phases, work, marks and the model marker
  std::vector<UnitFigure> units; // energy per unit of work over what each unit covers
  EnergyMethod energy_method;    // per device, and the run's label
  std::optional<AttributedEnergy> attributed; // the run's own processes' energy, where attribution exists
  RunQuality quality;
  RunFootprint footprint;                          // carbon and cost, with their sources
  std::vector<Event> events;                       // when wanted (RunModelWants::events)
  std::optional<std::vector<advice::Item>> advice; // when wanted (RunModelWants::advice)
  int64_t advice_step_ms = 0;                      // advice::Input::step_ms: 0, read sample by sample

  // The run's own figures: run_json (energy per device and method, attributed energy, ...) and its quality. A report's
  // summary and serve's run API are this; `show --json` adds the phases, work and advice (json()).
  nlohmann::json summary_json() const;
  // `show --json`: summary_json, phase_json and, when loaded, the advice.
  nlohmann::json json() const;
  // `show`: the run's summary and its phase table.
  std::string text() const;
  std::string quality_text() const;
  // The advice's step in JSON (`advice_step_s`: null when it read every sample) and in words ("" when it did).
  nlohmann::json advice_step_json() const;
  std::string advice_step_text() const;
};

// Reads the run from the store once (only read). `stored` is the run's row as listed; an unfinished one is shown
// from its samples (repair.hpp, as_shown).
RunModel load_run_model(StoreReader& store, const RunInfo& stored, const RunModelWants& wants = {});

inline constexpr double kWarmupShare = 0.25;

} // namespace wattscope
