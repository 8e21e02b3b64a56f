// Runs that never finished (wattscope killed with -9, a machine that lost power, a store that filled): their runs
// row still says what it said at the start. Their figures are rebuilt from the samples they did store.
#pragma once

#include <string>
#include <vector>

#include "core/schema.hpp"
#include "sinks/sink.hpp"

namespace wattscope {

// True when the run has no end: it is still recording, or was never finalised.
inline bool unfinished(const RunInfo& run) {
  return !run.end_ms.has_value();
}

// The run with samples, energy and summary computed from its stored rows: end_ms is the last sample's time,
// exit_status stays unknown, and the summary says "rebuilt_from_samples" and, when an event tells, why it stopped
// ("last_event"). The store is only read.
RunInfo rebuild_from_samples(StoreReader& store, const RunInfo& run);

// The phases a run left open (its recorder died with them open, or before their closed row was stored), closed as the
// tracker would have closed them had the run ended at its last stored sample: end_ms that sample's time, each
// device's energy its stored cumulative energy_j there less the same interpolated (by ts_ms) at the phase's start,
// energy_method from the devices' methods, closed_by_repair set and end_edge "none" (the real end is unknown: the
// figure is the energy up to the last sample, and the phase may have used more after it). Parents are kept. Empty when
// no phase is open. The store is only read.
std::vector<PhaseRecord> close_open_phases(StoreReader& store, const RunInfo& run);

// For show/list/report: an unfinished run is shown with figures rebuilt from its samples (the runs row is left as it
// is); a finished one is returned as stored.
RunInfo as_shown(StoreReader& store, const RunInfo& run);

} // namespace wattscope
