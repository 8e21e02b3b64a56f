#include "runs/run_model.hpp"

#include "advice/advice_input.hpp"
#include "runs/repair.hpp"

namespace wattscope {

nlohmann::json RunQuality::json() const {
  return {{"unfinished", unfinished},       {"markers_dropped", markers_dropped},
          {"phases_open", phases_open},     {"phases_uncertain", phases_uncertain},
          {"phases_coarse", phases_coarse}, {"phases_closed_by_repair", phases_closed_by_repair}};
}

namespace {

RunQuality quality_of(const RunModel& m) {
  RunQuality q;
  q.unfinished = unfinished(m.run);
  q.markers_dropped = markers_dropped(m.run);
  for (const auto& p : m.phases.phases) {
    if (phase_open(p)) {
      ++q.phases_open;
      continue;
    }
    if (phase_bound_pct(p).value_or(0) > kPhaseBoundFlagPct) ++q.phases_uncertain;
    if (phase_coarse(p, m.run)) ++q.phases_coarse;
    if (p.closed_by_repair) ++q.phases_closed_by_repair;
  }
  return q;
}

// The one pass over the sample tables: the advice's input and the view's own series from the same rows.
void read_samples(StoreReader& store, const RunModelWants& wants, RunModel& m) {
  if (!wants.advice && !wants.gpu_sample && !wants.cpu_sample) return;
  std::optional<advice::InputBuilder> input;
  if (wants.advice) {
    input.emplace(m.run);
    store.scan(TableId::GpuDevices, m.run, [&](std::span<const Value> row) { input->device(row); });
  }
  if (wants.advice || wants.gpu_sample)
    store.scan(TableId::GpuSamples, m.run, [&](std::span<const Value> row) {
      if (input) input->gpu(row);
      if (wants.gpu_sample) wants.gpu_sample(row);
    });
  if (wants.advice || wants.cpu_sample)
    store.scan(TableId::CpuSamples, m.run, [&](std::span<const Value> row) {
      if (input) input->cpu(row);
      if (wants.cpu_sample) wants.cpu_sample(row);
    });
  if (input) m.advice = advice::advise(std::move(*input).finish());
}

} // namespace

RunModel load_run_model(StoreReader& store, const RunInfo& stored, const RunModelWants& wants) {
  RunModel m;
  m.run = as_shown(store, stored);
  m.phases = load_phase_data(store, m.run, wants.events ? &m.events : nullptr);
  m.units = unit_figures(m.phases, m.run);
  m.energy_method = run_energy_method(m.run);
  m.attributed = run_attributed_energy(m.run);
  m.quality = quality_of(m);
  read_samples(store, wants, m);
  return m;
}

nlohmann::json RunModel::summary_json() const {
  nlohmann::json j = run_json(run);
  j["quality"] = quality.json();
  return j;
}

nlohmann::json RunModel::json() const {
  nlohmann::json j = summary_json();
  j.update(phase_json(phases, run, units));
  if (advice) j["advice"] = advice::to_json(*advice);
  return j;
}

std::string RunModel::text() const {
  return run_text(run) + phase_text(phases, run, units);
}

} // namespace wattscope
