#include "runs/run_model.hpp"

#include <fmt/format.h>

#include "advice/advice_input.hpp"
#include "core/json_opt.hpp"
#include "core/stored_json.hpp"
#include "runs/repair.hpp"

namespace wattscope {

bool RunQuality::warming_up(const OptF& duration_s) const {
  if (!warmup_s) return false;
  return !settled || (duration_s && *duration_s > 0 && *warmup_s > kWarmupShare * *duration_s);
}

nlohmann::json RunQuality::json() const {
  return {{"unfinished", unfinished},
          {"markers_dropped", markers_dropped},
          {"phases_open", phases_open},
          {"phases_uncertain", phases_uncertain},
          {"phases_coarse", phases_coarse},
          {"phases_closed_by_repair", phases_closed_by_repair},
          {"gpu_temp_start_c", opt(gpu_temp_start_c)},
          {"gpu_temp_end_c", opt(gpu_temp_end_c)},
          {"warmup_s", opt(warmup_s)},
          {"settled", settled}};
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
  const nlohmann::json meas = json_member(run_summary_json(m.run), "measurement");
  const auto num = [&](const char* k) {
    return json_has_number(meas, k) ? OptF(json_number(meas, k, 0)) : std::nullopt;
  };
  q.gpu_temp_start_c = num("gpu_temp_start_c");
  q.gpu_temp_end_c = num("gpu_temp_end_c");
  q.warmup_s = num("warmup_s");
  q.settled = json_bool(meas, "settled", true);
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
  if (input) {
    const advice::Input in = std::move(*input).finish();
    m.advice_step_ms = in.step_ms;
    m.advice = advice::advise(in);
  }
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
  m.footprint = run_footprint(m.run, wants.footprint);
  read_samples(store, wants, m);
  return m;
}

nlohmann::json RunModel::summary_json() const {
  nlohmann::json j = run_json(run);
  j["quality"] = quality.json();
  j["carbon"] = footprint.carbon_json();
  j["cost"] = footprint.cost_json();
  return j;
}

nlohmann::json RunModel::json() const {
  nlohmann::json j = summary_json();
  j.update(phase_json(phases, run, units, &footprint));
  if (advice) {
    j["advice"] = advice::to_json(*advice);
    j["advice_step_s"] = advice_step_json();
  }
  return j;
}

nlohmann::json RunModel::advice_step_json() const {
  return advice_step_ms > 0 ? nlohmann::json(static_cast<double>(advice_step_ms) / 1000) : nlohmann::json();
}

std::string RunModel::advice_step_text() const {
  if (advice_step_ms <= 0) return "";
  const double s = static_cast<double>(advice_step_ms) / 1000;
  return fmt::format(
      "  advice    read in steps of {} (a device had over {} samples): each step's mean, and its "
      "highest memory and temperature\n",
      s < 120 ? fmt::format("{:.3g} s", s) : fmt::format("{:.3g} min", s / 60),
      fmt::format("{},{:03}", advice::InputBuilder::kMaxPoints / 1000, advice::InputBuilder::kMaxPoints % 1000));
}

std::string RunModel::text() const {
  return run_text(run) + footprint.text() + quality_text() + phase_text(phases, run, units, &footprint);
}

} // namespace wattscope

namespace wattscope {

// How the run was measured, where it matters for comparing it: temperatures and warm-up.
std::string RunModel::quality_text() const {
  const RunQuality& q = quality;
  if (!q.gpu_temp_start_c && !(q.warmup_s && (*q.warmup_s > 0 || !q.settled))) return "";
  std::string out = "  measured ";
  if (q.gpu_temp_start_c && q.gpu_temp_end_c)
    out += fmt::format(" GPU {:.0f} °C at start, {:.0f} °C at end", *q.gpu_temp_start_c, *q.gpu_temp_end_c);
  if (q.warmup_s && (*q.warmup_s > 0 || !q.settled)) { // settled from the first sample: nothing to say
    if (q.gpu_temp_start_c) out += " ·";
    out += !q.settled ? fmt::format(" power never settled ({:.1f} s): still warming up when it ended", *q.warmup_s)
                      : fmt::format(" warm-up {:.1f} s before power settled", *q.warmup_s);
    if (q.settled && q.warming_up(run.duration_s()))
      out += fmt::format(" (over {:.0f} % of the run)", 100 * kWarmupShare);
  }
  return out + "\n";
}

} // namespace wattscope
