// Phases and work of a stored run (issue 15), read back from any store, and the figures derived from them: energy
// per unit of work (J/sample, J/token) and throughput, per phase and per run. `show`, `report` and `stats` use it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/frame.hpp"
#include "core/schema.hpp"
#include "runs/footprint_view.hpp"
#include "sinks/sink.hpp"

namespace wattscope {

struct PhaseData {
  std::vector<PhaseRecord> phases; // in phase_id order
  std::vector<WorkRecord> work;    // in arrival order
  std::vector<Event> marks;        // point markers (events of kind "mark")
  nlohmann::json model;            // the latest "model" marker: {name, parameters, flops}; null when none
  std::map<std::string, double> work_totals() const; // unit -> amount over the run
  // unit -> the total the workload declared for it (`work(n, unit, total=N)`, issue 36), the latest declaration.
  std::map<std::string, double> work_declared_totals() const;
  // unit -> amount reported while the phase (or a phase inside it) was the innermost open one.
  std::map<std::string, double> phase_work(int64_t phase_id) const;
};

// `events`, when given, also receives every event of the run in stored order (the same pass over the table).
PhaseData load_phase_data(StoreReader& store, const RunInfo& run, std::vector<Event>* events = nullptr);

// A phase whose end is not stored (yet): its run still records, or its recorder died and `repair` has not closed it.
// Stored with end_ms NULL and read with end_ms 0, as Frame::phases_begun holds it: it has no duration or energy.
inline bool phase_open(const PhaseRecord& p) {
  return p.end_ms == 0;
}

// Energy per unit of work over the stretch of the run where that unit's work was done (issue 29): the phases that
// hold work of the unit as their innermost phase, less those nested inside another of them (so they are disjoint),
// summed; work marked outside any phase makes it the whole run. One per unit, in unit order.
struct UnitFigure {
  std::string unit;
  double amount = 0;
  OptF energy_j;                  // over what it covers; missing when a covered phase (or the run) has no energy
  double duration_s = 0;          // likewise
  std::vector<int64_t> phase_ids; // the disjoint phases it covers; empty for the whole run
  std::string covers;             // "3 × eval", "2 × epoch + 1 × warmup", or "the whole run"
  std::string energy_method;      // the covered phases' (mixed where they differ); empty for the whole run
  // The run's own processes' energy over what it covers (run_attributed_energy), and its method: known for the whole
  // run only, where attribution exists.
  OptF attributed_energy_j;
  std::string attributed_method;
  bool coarse = false; // a covered phase is shorter than two sampling intervals: its energy rests on one tick
  OptF energy_per_unit_j() const;
  OptF attributed_energy_per_unit_j() const;
  OptF throughput_per_s() const;
};
std::vector<UnitFigure> unit_figures(const PhaseData& d, const RunInfo& run);

// Markers wattscope dropped in this run (its caps: docs/markers.md), from the run's summary; 0 when none. Any makes
// the run's work and phases incomplete.
int64_t markers_dropped(const RunInfo& run);
// A phase shorter than two sampling intervals is `coarse`: its energy rests on interpolation across one tick. The
// interval that would resolve it (half its duration), in ms; nullopt when it is not coarse (or nothing would).
bool phase_coarse(const PhaseRecord& p, const RunInfo& run);
// How far a phase's energy can be off (energy_bound_j, docs/markers.md "How true a phase is"), in % of its energy;
// nullopt where it is not stated (rows of older versions, no energy).
OptF phase_bound_pct(const PhaseRecord& p);
// `show` and the report flag a phase stated as uncertain beyond this; `stats` gives each phase name's largest bound as
// a figure of its own (phase.NAME.energy_bound_pct).
inline constexpr double kPhaseBoundFlagPct = 1;
OptF resolving_interval_ms(const PhaseRecord& p, const RunInfo& run);

// {"phases": [...], "work": {...}, "marks": [...], "model": ...}: merged into `show --json`.
// `units` are unit_figures(d, run), worked out once by the caller (the run model); the two-argument form works them
// out.
// `fp`, when given, adds each phase's carbon and cost at the run's rates over the phase's own time.
nlohmann::json phase_json(const PhaseData& d, const RunInfo& run, const std::vector<UnitFigure>& units,
                          const RunFootprint* fp = nullptr);
inline nlohmann::json phase_json(const PhaseData& d, const RunInfo& run) {
  return phase_json(d, run, unit_figures(d, run));
}
// The summary's phase table and work line; "" when the run has neither.
std::string phase_text(const PhaseData& d, const RunInfo& run, const std::vector<UnitFigure>& units,
                       const RunFootprint* fp = nullptr, size_t max_rows = 40);
inline std::string phase_text(const PhaseData& d, const RunInfo& run, size_t max_rows = 40) {
  return phase_text(d, run, unit_figures(d, run), nullptr, max_rows);
}
// A work unit's singular for "J/sample": samples -> sample, copies -> copy, batches -> batch; kept when not plural.
std::string unit_singular(const std::string& unit);

} // namespace wattscope
