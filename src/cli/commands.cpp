#include "cli/commands/commands.hpp"
#include "cli/command.hpp"

namespace wattscope {

namespace {
constexpr CommandEntry kCommands[] = {
    {"run", "Run a command and record the machine while it runs", make_run_command},
    {"record", "Record the machine until stopped (Ctrl-C / SIGTERM) or for --duration", make_record_command},
    {"list", "List the runs in a store", make_list_command},
    {"show", "Show one run's summary (the latest when RUN is omitted)", make_show_command},
    {"report", "Write a self-contained interactive HTML report of runs (several: compared)", make_report_command},
    {"serve", "Sample continuously; serve Prometheus /metrics, a live dashboard and a JSON API", make_serve_command},
    {"repair", "Finalise a run that never finished (wattscope killed, a full disk) from its stored samples",
     make_repair_command},
    {"export", "Copy runs between stores (SQLite, CSV, MySQL); also replays spill files", make_export_command},
    {"doctor", "Check what this machine can measure, and how to fix what it cannot", make_doctor_command},
    // issue 15
    {"mark", "Send a marker (phase begin/end, point, work done) to the wattscope running this command",
     make_mark_command},
    {"stats", "Mean, spread and 95 % confidence interval of a task's repeated runs (--task T [--last N]) or of runs",
     make_stats_command},
    {"compare", "Whether two runs or tasks differ in energy by more than run-to-run noise (Welch's t-test)",
     make_compare_command},
    {"import", "Turn a log you already have (nvidia-smi --query-gpu CSV) into a run", make_import_command},
    // issue 16
    {"top", "A live terminal view of this machine, or of several serve endpoints (--connect URL)", make_top_command},
    // ---- advice (issue 14) ----
    {"advise", "What a run wasted and what to change, with evidence and an estimated saving (default: latest run)",
     make_advise_command},
    // ---- end advice ----
    // ---- alerts (issue 14) ----
    {"alerts", "Check a rules file (alerts check FILE) or list the rules in effect (alerts list)", make_alerts_command},
    // issue 18
    {"slurm", "Record Slurm jobs: 'slurm prolog' / 'slurm epilog', run by slurmd (docs/slurm.md)", make_slurm_command},
};
} // namespace

std::span<const CommandEntry> command_table() {
  return kCommands;
}

std::string command_names() {
  std::string out;
  for (const auto& c : kCommands)
    out += (out.empty() ? "" : ", ") + std::string(c.name);
  return out;
}

} // namespace wattscope
