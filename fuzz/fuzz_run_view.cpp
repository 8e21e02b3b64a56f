// A run as a hostile node could store it: its tags, summary, a phase's device_energy_j and a model event's detail
// (the input's four parts, split at NUL bytes), turned into every figure the views show (run_json, run_text, the
// runs table, the job view, the runs pages' tag rows and filters, phase data). Nothing may throw or crash: a view of
// a bad row shows what it can read and the rest as missing.
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "check.hpp"
#include "runs/footprint_view.hpp"
#include "runs/phase_view.hpp"
#include "runs/run_tags.hpp"
#include "runs/run_view.hpp"
#include "sinks/runs_query.hpp"
#include "sinks/sink.hpp"

using namespace wattscope;
using json = nlohmann::json;

namespace {

// One run's phases and events rows, as a store hands them back.
class OneRunStore final : public StoreReader {
public:
  OneRunStore(RunInfo run, std::string device_energy_j, std::string detail)
      : run_(std::move(run)), device_energy_j_(std::move(device_energy_j)), detail_(std::move(detail)) {}
  std::string describe() const override { return "fuzz"; }
  std::vector<RunInfo> runs() override { return {run_}; }
  void scan(TableId t, const RunInfo& run, const RowFn& fn) override {
    std::vector<Value> row(table(t).columns.size());
    auto set = [&](std::string_view col, Value v) { row[column_index(t, col)] = std::move(v); };
    set("run_id", run.run_id);
    if (t == TableId::Phases) {
      set("phase_id", int64_t{1});
      set("name", std::string("epoch"));
      set("start_ms", run.start_ms);
      set("end_ms", run.start_ms + 1000);
      set("energy_j", 2.0);
      set("device_energy_j", std::string_view(device_energy_j_));
      fn(row);
    } else if (t == TableId::Events) {
      set("seq", int64_t{0});
      set("ts_ms", run.start_ms);
      set("kind", std::string("model"));
      set("source", std::string("bert"));
      set("detail", std::string_view(detail_));
      fn(row);
    }
  }

private:
  RunInfo run_;
  std::string device_energy_j_, detail_;
};

std::vector<std::string> split(std::string_view text, size_t parts) {
  std::vector<std::string> out;
  while (out.size() + 1 < parts) {
    const size_t at = text.find('\0');
    if (at == std::string_view::npos) break;
    out.emplace_back(text.substr(0, at));
    text.remove_prefix(at + 1);
  }
  out.emplace_back(text);
  out.resize(parts);
  return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  const auto parts = split(fuzz_text(data, size), 4);
  RunInfo r;
  r.run_id = "fuzz-run";
  r.task = "t";
  r.host = "h";
  r.command = "cmd";
  r.start_ms = 1'700'000'000'000;
  r.interval_ms = 100;
  r.samples = 3;
  r.tags = parts[0];
  r.summary = parts[1];
  r.total_energy_j = 7;
  RunInfo finished = r;
  finished.end_ms = r.start_ms + 2000;
  finished.exit_status = 0;
  for (const RunInfo& run : {r, finished}) {
    const json j = run_json(run);
    FUZZ_CHECK(j["run_id"] == "fuzz-run" && j["tags"].is_object());
    (void)j.dump(-1, ' ', false, json::error_handler_t::replace);
    (void)run_text(run, {"fuzz"});
    (void)runs_table({run});
    (void)run_energy_method(run).label();
    (void)run_attributed_energy(run);
    (void)simulated_run(run);
    const json job = runs_total_json({run, run}, {TagFilter{"slurm_job_id", "1"}});
    FUZZ_CHECK(job["runs"].size() == 2);
    (void)runs_total_text({run}, {});
    (void)run_tag_rows(run);
    (void)run_method_word(run);
    RunsFilter f;
    f.user = "u";
    f.tags = {{"k", "v"}};
    f.q = "x";
    (void)run_passes(run, f);
    (void)run_matches(run, {TagFilter{"k", "1"}});
    OneRunStore store(run, parts[2], parts[3]);
    const PhaseData d = load_phase_data(store, run);
    FUZZ_CHECK(d.phases.size() == 1 && d.model.is_object());
    (void)phase_json(d, run).dump(-1, ' ', false, json::error_handler_t::replace);
    (void)phase_text(d, run, 10);
    (void)markers_dropped(run);
    // Carbon and cost as stored (a hostile summary's "carbon"/"cost"), and at a read command's rates: finite
    // figures or none, never a throw.
    for (const FootprintOverride& o : {FootprintOverride{}, FootprintOverride{std::nullopt, std::nullopt, "", 2.0}}) {
      const RunFootprint fp = run_footprint(run, o);
      (void)fp.carbon_json().dump(-1, ' ', false, json::error_handler_t::replace);
      (void)fp.cost_json().dump(-1, ' ', false, json::error_handler_t::replace);
      (void)fp.text();
      (void)fp.grams(2.0, run.start_ms, run.start_ms + 1000);
      (void)phase_json(d, run, unit_figures(d, run), &fp).dump(-1, ' ', false, json::error_handler_t::replace);
    }
  }
  return 0;
}
