// wattscope slurm prolog|epilog: run by slurmd as root (Prolog= and Epilog= in slurm.conf, docs/slurm.md) to record
// every job on every node it runs on. The work is in integrations/slurm_job; this file reads the environment and makes
// sure nothing ever fails a job: slurmd drains a node whose prolog or epilog fails, so both log and exit 0.
#include <unistd.h>

#include <climits>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands/commands.hpp"
#include "integrations/slurm_job.hpp"

namespace wattscope {

namespace {

std::string own_executable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find wattscope's own executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

class SlurmCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    sub.require_subcommand(1);
    prolog_ = sub.add_subcommand("prolog", "Start recording the job slurmd is starting (Prolog=, as root)");
    epilog_ = sub.add_subcommand("epilog", "Stop recording the job slurmd has ended, and finalise its run (Epilog=)");
    for (auto* s : {prolog_, epilog_})
      s->add_option("--config", config_,
                    "Configuration file (default: $WATTSCOPE_SLURM_CONFIG, else /etc/wattscope/slurm.conf)");
    sub.footer("Example, in slurm.conf (deploy/slurm/ has the scripts; docs/slurm.md the whole set-up):\n"
               "  Prolog=/etc/slurm/wattscope-prolog.sh\n"
               "  Epilog=/etc/slurm/wattscope-epilog.sh\n"
               "/etc/wattscope/slurm.conf (KEY=VALUE; the same variables in the environment win):\n"
               "  WATTSCOPE_SLURM_DB=mysql://wattscope@db.example.org/energy   # the store every node writes to\n"
               "  WATTSCOPE_MYSQL_PASSWORD=...                                  # keep the file 0600\n"
               "  WATTSCOPE_SLURM_STATE_DIR=/run/wattscope-slurm                # pid files and logs\n"
               "  WATTSCOPE_SLURM_RECORD_ARGS=--interval 1s --cpu-tdp 280       # more `record` flags\n"
               "  WATTSCOPE_SLURM_STOP_TIMEOUT=30s                              # the epilog's wait\n"
               "Then: wattscope show --db ... --tag slurm_job_id=4242   (the job's energy across its nodes)\n"
               "Always exits 0 (a failing prolog or epilog would drain the node); problems go to the log,\n"
               "<state dir>/slurm.log, and stderr.");
  }

  int run(CLI::App&, const CliContext&) override {
    const std::vector<std::string> environment = process_environment();
    const EnvLookup env = env_lookup(environment);
    SlurmConfig cfg; // the defaults, so that a broken configuration is still logged somewhere
    const bool prolog = prolog_->parsed();
    try {
      std::string path = config_;
      const bool given = !path.empty() || env("WATTSCOPE_SLURM_CONFIG").has_value();
      if (path.empty()) path = env("WATTSCOPE_SLURM_CONFIG").value_or(kDefaultSlurmConfig);
      cfg = load_slurm_config(path, given, env);
      for (const auto& p : cfg.problems)
        slurm_log(cfg, "configuration: " + p);
      SlurmJob job = slurm_job_from_env(env);
      // The task name and tags of an array's task need its ids now: a task may end before any process scan sees them.
      if (prolog && job.array_job_id.empty()) array_ids_from_scontrol(job);
      if (prolog && !cfg.problems.empty()) {
        slurm_log(cfg, fmt::format("job {}: not recorded until the configuration is mended", job.job_id));
      } else if (prolog) {
        const RecorderProcess p = start_recorder(own_executable(), job, cfg, environment);
        slurm_log(cfg, fmt::format("job {}: recording as pid {} into {} (GPUs: {})", job.job_id, p.pid, cfg.db,
                                   job.gpus.empty() ? "none" : job.gpus));
      } else {
        const StopResult r = stop_recorder(job, cfg);
        switch (r.kind) {
        case StopResult::Kind::NoRecorder:
          slurm_log(cfg, fmt::format("job {}: no recorder to stop (the prolog did not start one)", job.job_id));
          break;
        case StopResult::Kind::Stopped:
          slurm_log(cfg, fmt::format("job {}: recorder {} stopped, run finalised in {} ms", job.job_id, r.process.pid,
                                     r.waited.count()));
          break;
        case StopResult::Kind::AlreadyGone:
          slurm_log(cfg, fmt::format("job {}: recorder {} had already exited; its log: {}", job.job_id, r.process.pid,
                                     r.log_tail));
          break;
        case StopResult::Kind::Killed:
          slurm_log(cfg, fmt::format("job {}: recorder {} did not stop within {} ms and was killed: its run is "
                                     "unfinished ('wattscope repair' finalises it); its log: {}",
                                     job.job_id, r.process.pid, cfg.stop_timeout.count(), r.log_tail));
          break;
        }
      }
    } catch (const std::exception& e) {
      slurm_log(cfg, fmt::format("{}: {} (the job goes on unrecorded)", prolog ? "prolog" : "epilog", e.what()));
    }
    return 0;
  }
  int usage_status() const override { return 0; } // a typo in slurm.conf's Prolog= line must not drain the node
  int failure_status() const override { return 0; }

private:
  CLI::App* prolog_ = nullptr;
  CLI::App* epilog_ = nullptr;
  std::string config_;
};

} // namespace

std::unique_ptr<Command> make_slurm_command() {
  return std::make_unique<SlurmCommand>();
}

} // namespace wattscope
