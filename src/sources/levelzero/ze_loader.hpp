// dlopen of the Level Zero loader (libze_loader.so.1) at run time; never linked. A missing library, or one with neither
// way to start Sysman, turns the backend off; a missing optional symbol leaves its pointer null and that metric off.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sources/levelzero/ze_api.hpp"

namespace wattscope::ze {

class Library {
public:
  // explicit_path: WATTSCOPE_LEVEL_ZERO_LIBRARY when set (then only that file is tried). On failure returns null and
  // says why in `why`; `not_found` tells a machine without the loader (the usual case) from a broken one.
  static std::unique_ptr<Library> load(const std::string& explicit_path, std::string& why, bool& not_found);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<std::string>& missing() const { return missing_; }
  // zesInit, zesDriverGet and zesDeviceGet are all there (else Sysman comes up through zeInit).
  bool has_sysman_init() const { return ses_init && ses_driver_get && ses_device_get; }

#define WATTSCOPE_ZE_MEMBER(member, params, args, sym) Result(*member) params = nullptr;
  WATTSCOPE_ZE_ENTRY_POINTS(WATTSCOPE_ZE_MEMBER)
#undef WATTSCOPE_ZE_MEMBER

private:
  Library() = default;
  void* handle_ = nullptr;
  std::string path_;
  std::vector<std::string> missing_;
};

// "ZE_RESULT_ERROR_DEVICE_LOST (0x70000001)": our own table, as the loader has no error-string call.
std::string error_name(Result rc);

} // namespace wattscope::ze
