// The commands, one file each. The table in cli/commands.cpp lists them.
#pragma once

#include <memory>

#include "cli/command.hpp"

namespace wattscope {

std::unique_ptr<Command> make_run_command();
std::unique_ptr<Command> make_record_command();
std::unique_ptr<Command> make_list_command();
std::unique_ptr<Command> make_show_command();
std::unique_ptr<Command> make_report_command();
std::unique_ptr<Command> make_serve_command();
std::unique_ptr<Command> make_export_command();
std::unique_ptr<Command> make_doctor_command();
std::unique_ptr<Command> make_repair_command();
// issue 15
std::unique_ptr<Command> make_mark_command();
std::unique_ptr<Command> make_stats_command();
std::unique_ptr<Command> make_compare_command();
std::unique_ptr<Command> make_import_command();
// issue 16
std::unique_ptr<Command> make_top_command();
// ---- advice (issue 14) ----
std::unique_ptr<Command> make_advise_command();
// ---- end advice ----
std::unique_ptr<Command> make_alerts_command(); // issue 14
std::unique_ptr<Command> make_slurm_command();  // issue 18

} // namespace wattscope
