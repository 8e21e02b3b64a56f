#include "sources/nvml/nvml_loader.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include "sources/dl_open.hpp"

namespace wattscope::nvml {

namespace {
template <typename Fn> bool resolve(void* handle, Fn& out, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (void* p = ::dlsym(handle, n)) {
      out = reinterpret_cast<Fn>(p);
      return true;
    }
  }
  return false;
}
} // namespace

std::unique_ptr<Library> Library::load(const std::string& explicit_path, std::string& why) {
  std::unique_ptr<Library> lib(new Library());
  auto opened = dl_open_first(explicit_path, {"libnvidia-ml.so.1", "libnvidia-ml.so"});
  lib->handle_ = opened.handle;
  lib->path_ = opened.path;
  const std::string& errors = opened.errors;
  if (!lib->handle_) {
    why = explicit_path.empty() ? fmt::format("no NVIDIA driver library (libnvidia-ml.so.1) found: {}", errors)
                                : fmt::format("cannot load WATTSCOPE_NVML_LIBRARY={}: {}", explicit_path, errors);
    return nullptr;
  }
  std::vector<std::string> missing_required;
#define WATTSCOPE_NVML_X1(member, need, params, args, sym)                                                             \
  if (!resolve(lib->handle_, lib->member, {#sym})) {                                                                   \
    (Need::need == Need::Required ? missing_required : lib->missing_optional_).push_back(#sym);                        \
  }
#define WATTSCOPE_NVML_X2(member, need, params, args, newest, older)                                                   \
  if (!resolve(lib->handle_, lib->member, {#newest, #older})) {                                                        \
    (Need::need == Need::Required ? missing_required : lib->missing_optional_).push_back(#newest);                     \
  }
  WATTSCOPE_NVML_ENTRY_POINTS(WATTSCOPE_NVML_X1, WATTSCOPE_NVML_X2)
#undef WATTSCOPE_NVML_X1
#undef WATTSCOPE_NVML_X2
  if (!missing_required.empty()) {
    std::string names;
    for (const auto& n : missing_required)
      names += (names.empty() ? "" : ", ") + n;
    why = fmt::format("{} lacks required NVML functions ({}); the driver may be too old", lib->path_, names);
    return nullptr;
  }
  return lib;
}

void* Library::symbol(const char* name) const {
  return handle_ ? ::dlsym(handle_, name) : nullptr;
}

// The library stays mapped until the process exits (no dlclose): since issue 31 nvmlInit runs on a thread of its
// own, so the library's thread-local blocks live in threads other than the one that would unload it, and a thread
// that called into NVML may still hold them. Unloading buys a process about to exit nothing; a dlopen of the same
// path later (doctor, a retry) just takes the mapped copy again. LeakSanitizer's tracer crashed on the stale DTLS
// entry an unloaded library left (Phases.RecordListensOnTheSocketItIsGiven and others under ASan).
Library::~Library() = default;

std::string error_name(Return rc) {
  const char* name = "NVML_ERROR";
  switch (rc) {
  case kSuccess:
    name = "NVML_SUCCESS";
    break;
  case kErrorUninitialized:
    name = "NVML_ERROR_UNINITIALIZED";
    break;
  case kErrorInvalidArgument:
    name = "NVML_ERROR_INVALID_ARGUMENT";
    break;
  case kErrorNotSupported:
    name = "NVML_ERROR_NOT_SUPPORTED";
    break;
  case kErrorNoPermission:
    name = "NVML_ERROR_NO_PERMISSION";
    break;
  case kErrorNotFound:
    name = "NVML_ERROR_NOT_FOUND";
    break;
  case kErrorInsufficientSize:
    name = "NVML_ERROR_INSUFFICIENT_SIZE";
    break;
  case kErrorDriverNotLoaded:
    name = "NVML_ERROR_DRIVER_NOT_LOADED";
    break;
  case kErrorTimeout:
    name = "NVML_ERROR_TIMEOUT";
    break;
  case kErrorLibraryNotFound:
    name = "NVML_ERROR_LIBRARY_NOT_FOUND";
    break;
  case kErrorFunctionNotFound:
    name = "NVML_ERROR_FUNCTION_NOT_FOUND";
    break;
  case kErrorGpuIsLost:
    name = "NVML_ERROR_GPU_IS_LOST";
    break;
  case kErrorResetRequired:
    name = "NVML_ERROR_RESET_REQUIRED";
    break;
  case kErrorOperatingSystem:
    name = "NVML_ERROR_OPERATING_SYSTEM";
    break;
  case kErrorLibRmVersionMismatch:
    name = "NVML_ERROR_LIB_RM_VERSION_MISMATCH";
    break;
  case kErrorArgumentVersionMismatch:
    name = "NVML_ERROR_ARGUMENT_VERSION_MISMATCH";
    break;
  case kErrorUnknown:
    name = "NVML_ERROR_UNKNOWN";
    break;
  default:
    break;
  }
  return fmt::format("{} ({})", name, rc);
}

} // namespace wattscope::nvml
