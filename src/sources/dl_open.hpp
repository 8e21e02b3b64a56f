// Opening a vendor library (NVML, ROCm SMI, Level Zero): the first of the candidate names dlopen accepts.
#pragma once

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

} // namespace wattscope
