#include "runs_generator.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace wstest {

using wattscope::RunInfo;

RunInfo generated_run(int64_t i) {
  RunInfo r;
  const int64_t job = i / 3;
  r.run_id = fmt::format("gen-{:06}", i);
  r.task = fmt::format("task{:02}", job % 20);
  r.host = fmt::format("node{}", i % 3);
  r.command = i == 7 ? "echo 100% done_x" : fmt::format("python train.py --seed {}", i % 5);
  r.cpu_model = "Generated CPU";
  r.start_ms = kGenBaseMs + i * 60'000;
  if (i % 97 != 96) {
    r.end_ms = r.start_ms + ((37 * i) % 600 + 1) * 1000;
    r.exit_status = i % 10 == 9 ? 1 : 0;
  }
  r.interval_ms = 100;
  r.samples = 10;
  nlohmann::json tags = {{"slurm_job_id", std::to_string(5000 + job)},
                         {"slurm_node", r.host},
                         {"slurm_user", fmt::format("user{}", job % 7)},
                         {"slurm_partition", job % 4 == 0 ? "debug" : "gpu"},
                         {"seed", i % 5}};
  r.tags = tags.dump();
  nlohmann::json summary = nlohmann::json::object();
  if (i % 25 != 24) {
    const double e = 100 + static_cast<double>((7919 * i) % 10000) / 10.0;
    r.total_energy_j = e;
    auto gpu = [&](double j, const char* m) {
      return nlohmann::json::array({{{"index", 0}, {"energy_j", j}, {"energy_method", m}}});
    };
    // As a recorded run's summary has it: the CPU's energy_j (package + DRAM; here the package alone) beside it.
    auto cpu = [&](double j, const char* m) {
      return nlohmann::json{{"energy_j", j}, {"package_energy_j", j}, {"energy_method", m}};
    };
    switch (i % 4) {
    case 0:
      summary["gpus"] = gpu(e * 0.75, "counter");
      summary["cpu"] = cpu(e * 0.25, "counter");
      break;
    case 1:
      summary["gpus"] = gpu(e, "integrated");
      break;
    case 2:
      summary["gpus"] = gpu(e * 0.5, "counter");
      summary["cpu"] = cpu(e * 0.5, "estimated");
      break;
    default:
      summary["cpu"] = cpu(e, "estimated");
    }
  }
  r.summary = summary.dump();
  r.version = "generated";
  return r;
}

namespace {

void add_work(const wattscope::RunInfo& r, int64_t i, wattscope::RowBatch& rows) {
  using namespace wattscope;
  auto& work = rows.tables[static_cast<size_t>(TableId::Work)];
  auto add = [&](int64_t seq, double amount, const char* unit) {
    for (Value v : {Value(std::string(r.run_id)), Value(seq), Value(r.start_ms + seq), Value(amount),
                    Value(std::string(unit)), Value()})
      work.cells.push_back(std::move(v));
  };
  if (i % 3 == 0) {
    add(0, 100.0 * static_cast<double>(i % 7 + 1), "samples");
    add(1, 50, "samples");
  } else if (i % 6 == 1) {
    add(0, 10, "samples");
    add(1, 20, "tokens");
  }
}

} // namespace

void generate_runs(const wattscope::StoreSpec& spec, int64_t n, int64_t first, int64_t batch) {
  using namespace wattscope;
  if (spec.kind == StoreSpec::Kind::Csv) {
    // CSV keeps a run's rows in its own files: one sink per run.
    for (int64_t i = first; i < first + n; ++i) {
      auto sink = open_sink(spec, false);
      const RunInfo r = generated_run(i);
      sink->begin_run(r);
      RowBatch rows;
      add_work(r, i, rows);
      if (!rows.tables[static_cast<size_t>(TableId::Work)].cells.empty()) sink->write(rows);
      sink->end_run(r);
    }
    return;
  }
  auto sink = open_sink(spec, false);
  // begin_run creates (or migrates) the schema; the runs themselves go in as rows of a batch.
  RunInfo seed = generated_run(first);
  sink->begin_run(seed);
  for (int64_t b = first; b < first + n; b += batch) {
    RowBatch rows;
    for (int64_t i = b; i < std::min(first + n, b + batch); ++i) {
      const RunInfo r = generated_run(i);
      if (i != first) append_run_row(r, rows.tables[static_cast<size_t>(TableId::Runs)]);
      add_work(r, i, rows);
    }
    sink->write(rows);
  }
  sink->end_run(seed);
}

} // namespace wstest
