// Opening a vendor library (NVML, ROCm SMI, Level Zero): the first of the candidate names dlopen accepts; whether the
// hardware it is for is on the PCI bus at all; and keeping what it prints while it starts off the user's terminal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wattscope {

struct DlOpened {
  void* handle = nullptr; // dlopen's handle (RTLD_NOW | RTLD_LOCAL); null when no candidate loaded
  std::string path;       // the candidate that loaded
  std::string errors;     // every candidate's dlerror(), "; "-separated, for the message when none loaded
};

// explicit_path (an environment variable's value) alone when given, else each of the defaults in turn.
DlOpened dl_open_first(const std::string& explicit_path, const std::vector<std::string>& defaults);

// Issue 30: whether <sysfs_root>/bus/pci/devices lists a device of this vendor (0x1002 AMD, 0x8086 Intel, 0x10de
// NVIDIA) whose class is a display controller (0x03xx) or, with `accelerators`, a processing accelerator (0x12xx, as
// AMD's Instinct MI300 presents itself). nullopt where the bus cannot be read at all (no sysfs here): then nobody can
// tell, and the library is asked. At most kMaxPciDevices entries are looked at.
inline constexpr size_t kMaxPciDevices = 4096;
std::optional<bool> pci_bus_has_gpu(const std::string& sysfs_root, uint16_t vendor, bool accelerators);

// Issue 30: while one lives, whatever is written to file descriptor 2 (a vendor library's own chatter as it starts:
// ROCm SMI's "Exception caught: rsmi_init.", a Level Zero driver's "Failed to open drm root directory") goes to an
// anonymous file instead of the terminal; at the end it is put back and each line (up to 64 KiB in all) is logged at
// debug level, prefixed with `who`. For start-up only: while it lives, nothing else of wattscope's reaches stderr.
class StderrToDebugLog {
public:
  explicit StderrToDebugLog(std::string who);
  ~StderrToDebugLog();
  StderrToDebugLog(const StderrToDebugLog&) = delete;
  StderrToDebugLog& operator=(const StderrToDebugLog&) = delete;
  // The lines caught so far (and stops catching): for tests, and for a caller that wants them in a message.
  std::vector<std::string> finish();

private:
  std::string who_;
  int saved_ = -1;   // the real stderr
  int capture_ = -1; // where fd 2 points meanwhile
  std::vector<std::string> lines_;
};

} // namespace wattscope
