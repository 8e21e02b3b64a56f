// wattscope doctor: what this machine can measure, and how to fix what it cannot.
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "recording/doctor.hpp"

namespace wattscope {

namespace {

class DoctorCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    sub.add_flag("--json", json_, "Print JSON instead of text");
    sub.add_option("--gpus", flags_.gpus, "GPUs to check (as for run)");
    sub.add_option("--procfs-root", flags_.procfs_root, "Where procfs is mounted")->capture_default_str();
    sub.add_option("--sysfs-root", flags_.sysfs_root, "Where sysfs is mounted")->capture_default_str();
    sub.footer("Examples:\n  wattscope doctor\n  wattscope doctor --json\n"
               "Exit status 0 when at least one source measures power here, 1 when none does.");
  }
  int run(CLI::App&, const CliContext&) override {
    SessionOptions o;
    o.procfs_root = flags_.procfs_root;
    o.sysfs_root = flags_.sysfs_root;
    o.gpus = flags_.gpus;
    check_gpus_flag(flags_.gpus);
    const DoctorReport report = doctor_report(o);
    if (json_)
      std::cout << report.json.dump(2) << "\n";
    else
      std::cout << report.text;
    return report.power_measurable() ? 0 : 1;
  }

private:
  RecordFlags flags_;
  bool json_ = false;
};

} // namespace

std::unique_ptr<Command> make_doctor_command() {
  return std::make_unique<DoctorCommand>();
}

} // namespace wattscope
