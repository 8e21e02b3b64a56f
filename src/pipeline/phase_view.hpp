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
#include "sinks/sink.hpp"

namespace wattscope {

struct PhaseData {
  std::vector<PhaseRecord> phases; // in phase_id order
  std::vector<WorkRecord> work;    // in arrival order
  std::vector<Event> marks;        // point markers (events of kind "mark")
  nlohmann::json model;            // the latest "model" marker: {name, parameters, flops}; null when none
  std::map<std::string, double> work_totals() const; // unit -> amount over the run
  // unit -> amount reported while the phase (or a phase inside it) was the innermost open one.
  std::map<std::string, double> phase_work(int64_t phase_id) const;
};

PhaseData load_phase_data(StoreReader& store, const RunInfo& run);

// {"phases": [...], "work": {...}, "marks": [...], "model": ...}: merged into `show --json`.
nlohmann::json phase_json(const PhaseData& d, const RunInfo& run);
// The summary's phase table and work line; "" when the run has neither.
std::string phase_text(const PhaseData& d, const RunInfo& run, size_t max_rows = 40);
// A work unit's singular for "J/sample": samples -> sample, copies -> copy, batches -> batch; kept when not plural.
std::string unit_singular(const std::string& unit);

} // namespace wattscope
