#include "sources/levelzero/ze_loader.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include "sources/dl_open.hpp"

namespace wattscope::ze {

std::unique_ptr<Library> Library::load(const std::string& explicit_path, std::string& why, bool& not_found) {
  not_found = false;
  std::unique_ptr<Library> lib(new Library());
  auto opened = dl_open_first(explicit_path, {"libze_loader.so.1", "libze_loader.so"});
  lib->handle_ = opened.handle;
  lib->path_ = opened.path;
  const std::string& errors = opened.errors;
  if (!lib->handle_) {
    not_found = explicit_path.empty();
    why = explicit_path.empty() ? fmt::format("no Level Zero loader (libze_loader.so.1) found: {}", errors)
                                : fmt::format("cannot load WATTSCOPE_LEVEL_ZERO_LIBRARY={}: {}", explicit_path, errors);
    return nullptr;
  }
#define WATTSCOPE_ZE_RESOLVE(member, params, args, sym)                                                                \
  if (void* p = ::dlsym(lib->handle_, #sym))                                                                           \
    lib->member = reinterpret_cast<decltype(lib->member)>(p);                                                          \
  else                                                                                                                 \
    lib->missing_.push_back(#sym);
  WATTSCOPE_ZE_ENTRY_POINTS(WATTSCOPE_ZE_RESOLVE)
#undef WATTSCOPE_ZE_RESOLVE
  const bool core = lib->core_init && lib->core_driver_get && lib->core_device_get;
  if (!lib->has_sysman_init() && !core) {
    why = fmt::format("{} has neither zesInit/zesDriverGet/zesDeviceGet nor zeInit/zeDriverGet/zeDeviceGet; it is not "
                      "a Level Zero loader wattscope can use",
                      lib->path_);
    return nullptr;
  }
  return lib;
}

Library::~Library() {
  if (handle_) ::dlclose(handle_);
}

std::string error_name(Result rc) {
  const char* name = "ZE_RESULT_ERROR";
  switch (rc) {
  case kSuccess:
    name = "ZE_RESULT_SUCCESS";
    break;
  case kErrorDeviceLost:
    name = "ZE_RESULT_ERROR_DEVICE_LOST";
    break;
  case kErrorDeviceRequiresReset:
    name = "ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET";
    break;
  case kErrorDeviceInLowPowerState:
    name = "ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE";
    break;
  case kErrorInsufficientPermissions:
    name = "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS";
    break;
  case kErrorNotAvailable:
    name = "ZE_RESULT_ERROR_NOT_AVAILABLE";
    break;
  case kErrorDependencyUnavailable:
    name = "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE";
    break;
  case kErrorUninitialized:
    name = "ZE_RESULT_ERROR_UNINITIALIZED";
    break;
  case kErrorUnsupportedVersion:
    name = "ZE_RESULT_ERROR_UNSUPPORTED_VERSION";
    break;
  case kErrorUnsupportedFeature:
    name = "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE";
    break;
  case kErrorInvalidArgument:
    name = "ZE_RESULT_ERROR_INVALID_ARGUMENT";
    break;
  case kErrorInvalidNullHandle:
    name = "ZE_RESULT_ERROR_INVALID_NULL_HANDLE";
    break;
  case kErrorInvalidNullPointer:
    name = "ZE_RESULT_ERROR_INVALID_NULL_POINTER";
    break;
  case kErrorInvalidSize:
    name = "ZE_RESULT_ERROR_INVALID_SIZE";
    break;
  case kErrorInvalidEnumeration:
    name = "ZE_RESULT_ERROR_INVALID_ENUMERATION";
    break;
  case kErrorUnsupportedEnumeration:
    name = "ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION";
    break;
  case kErrorUnknown:
    name = "ZE_RESULT_ERROR_UNKNOWN";
    break;
  default:
    break;
  }
  return fmt::format("{} ({:#x})", name, rc);
}

} // namespace wattscope::ze
