#include "cli/session.hpp"

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/text.hpp"
#include "core/time_util.hpp"
#include "sources/hwmon/hwmon_gpu_source.hpp"
#include "sources/procfs/cpu_source.hpp"
#include "sources/rapl/rapl_source.hpp"
#include "wattscope/version.hpp"
#ifdef WATTSCOPE_HAVE_NVML
#include "sources/nvml/nvml_source.hpp"
#endif

namespace wattscope {

std::vector<std::unique_ptr<Source>> make_sources(const SessionOptions& opts) {
  std::vector<std::unique_ptr<Source>> out;
  out.push_back(std::make_unique<ProcfsCpuSource>(opts.procfs_root));
  out.push_back(std::make_unique<RaplSource>(opts.sysfs_root, opts.interval));
  if (opts.cpu_tdp_w) out.push_back(std::make_unique<CpuEstimateSource>(*opts.cpu_tdp_w)); // after procfs and RAPL
#ifdef WATTSCOPE_HAVE_NVML
  out.push_back(std::make_unique<NvmlSource>(NvmlSource::Options::from_env(opts.gpus)));
#endif
  out.push_back(std::make_unique<HwmonGpuSource>(opts.sysfs_root));
  return out;
}

Session::Session(SessionOptions opts) : opts_(std::move(opts)) {}

Session::~Session() {
  if (!finished_ && sampler_) finish(std::nullopt);
}

void Session::open() {
  run_.start_ms = wall_now_ms();
  run_.run_id = new_run_id(run_.start_ms);
  run_.task = opts_.task;
  run_.command = shell_join(opts_.command);
  run_.interval_ms = std::chrono::duration<double, std::milli>(opts_.interval).count();
  run_.version = kVersion;
  nlohmann::json tags = nlohmann::json::object();
  // Scheduler and device context, so a run can be matched to its job later.
  for (const char* var : {"SLURM_JOB_ID", "SLURM_ARRAY_TASK_ID", "PBS_JOBID", "CUDA_VISIBLE_DEVICES", "HOSTNAME"})
    if (const char* v = std::getenv(var)) tags[var] = v;
  for (const auto& [k, v] : opts_.tags)
    tags[k] = v;
  run_.tags = tags.dump();

  devices_ = std::make_shared<std::vector<GpuDevice>>();
  std::vector<Event> notices;
  for (auto& s : make_sources(opts_)) {
    if (!s->open()) {
      // Said once, in words a user can act on. No AMD/Intel GPU is the normal case and only shown with -v.
      const std::string st = s->status();
      if (st.rfind("no permission", 0) == 0)
        spdlog::warn("{}", st);
      else if (s->name() == "hwmon-gpu")
        spdlog::debug("{}", st);
      else
        spdlog::info("{}", st.rfind("missing: ", 0) == 0 ? st.substr(9) : st);
      if (s->name() != "hwmon-gpu") notices.push_back({0, 0, "source-missing", std::string(s->name()), st});
      continue;
    }
    spdlog::debug("{}: {}", s->name(), s->status());
    s->describe(run_);
    int next_index = 0;
    for (const auto& d : *devices_)
      next_index = std::max(next_index, d.gpu_index + 1);
    s->set_first_index(next_index);
    for (auto& d : s->devices())
      devices_->push_back(std::move(d));
    sources_.push_back(std::move(s));
  }
  acc_ = std::make_unique<Accounting>(*devices_);
  for (auto& n : notices)
    acc_->add_event(std::move(n));

  for (const auto& spec : opts_.stores) {
    auto sink = open_sink(spec);
    sink->begin_run(run_); // throws with the store's own fix-it message
    writers_.push_back(std::make_unique<SinkWriter>(std::move(sink), opts_.commit, run_.run_id, devices_));
  }
}

void Session::start() {
  for (auto& w : writers_)
    w->start();
  sampler_ = std::make_unique<Sampler>(sources_, opts_.interval, [this](Frame& f) {
    acc_->process(f);
    auto shared = std::make_shared<const Frame>(std::move(f));
    for (auto& w : writers_)
      w->push(shared);
    if (opts_.on_frame) opts_.on_frame(shared);
  });
  sampler_->start();
}

RunInfo Session::finish(std::optional<int64_t> exit_status) {
  if (finished_) return run_;
  finished_ = true;
  if (sampler_) sampler_->stop();
  run_.end_ms = wall_now_ms();
  run_.exit_status = exit_status;
  RunSummary s = acc_->summary();
  run_.samples = s.samples;
  run_.total_energy_j = s.total_energy_j();
  run_.summary = s.to_json().dump();
  // Every store drains side by side under one deadline; past it, rows go to a spill file (MySQL) and the run ends.
  const auto drain_deadline = SteadyClock::now() + opts_.drain_timeout;
  for (auto& w : writers_)
    w->begin_finish(run_);
  for (auto& w : writers_)
    all_stored_ = w->finish(run_, drain_deadline) && all_stored_;
  return run_;
}

std::vector<std::string> Session::store_names() const {
  std::vector<std::string> out;
  for (const auto& w : writers_)
    out.push_back(w->describe());
  return out;
}

} // namespace wattscope
