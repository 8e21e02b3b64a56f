#include "sources/rocm/rocm_smi_loader.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include "sources/dl_open.hpp"

namespace wattscope::rocm {

std::vector<std::string> Library::default_candidates() {
  // The unversioned name first (a ROCm install's own link), then AMD's sonames newest first (.so.7 from ROCm 6.2,
  // .so.6, .so.5), then Debian's and Fedora's own (.so.1, the library of librocm-smi64-1); /opt/rocm last, for
  // installs that do not add their lib directory to the loader's path. Which struct layouts to use is decided by the
  // version the library reports, never by its file name.
  return {"librocm_smi64.so",   "librocm_smi64.so.7", "librocm_smi64.so.6",
          "librocm_smi64.so.5", "librocm_smi64.so.1", "/opt/rocm/lib/librocm_smi64.so"};
}

std::unique_ptr<Library> Library::load(const std::string& explicit_path, std::string& why) {
  std::unique_ptr<Library> lib(new Library());
  auto opened = dl_open_first(explicit_path, default_candidates());
  lib->handle_ = opened.handle;
  lib->path_ = opened.path;
  const std::string& errors = opened.errors;
  if (!lib->handle_) {
    why = explicit_path.empty() ? fmt::format("no ROCm SMI library (librocm_smi64.so) found: {}", errors)
                                : fmt::format("cannot load WATTSCOPE_ROCM_SMI_LIBRARY={}: {}", explicit_path, errors);
    return nullptr;
  }
  std::vector<std::string> missing_required;
#define WATTSCOPE_ROCM_RESOLVE(member, need, params, args, sym)                                                        \
  if (void* p = ::dlsym(lib->handle_, #sym))                                                                           \
    lib->member = reinterpret_cast<decltype(lib->member)>(p);                                                          \
  else                                                                                                                 \
    (Need::need == Need::Required ? missing_required : lib->missing_optional_).push_back(#sym);
  WATTSCOPE_ROCM_SMI_ENTRY_POINTS(WATTSCOPE_ROCM_RESOLVE)
#undef WATTSCOPE_ROCM_RESOLVE
  if (!missing_required.empty()) {
    std::string names;
    for (const auto& n : missing_required)
      names += (names.empty() ? "" : ", ") + n;
    why = fmt::format("{} lacks required ROCm SMI functions ({}); it is not a usable librocm_smi64", lib->path_, names);
    return nullptr;
  }
  return lib;
}

Library::~Library() {
  if (handle_) ::dlclose(handle_);
}

std::string status_name(Status rc) {
  static constexpr const char* kNames[] = {"RSMI_STATUS_SUCCESS",
                                           "RSMI_STATUS_INVALID_ARGS",
                                           "RSMI_STATUS_NOT_SUPPORTED",
                                           "RSMI_STATUS_FILE_ERROR",
                                           "RSMI_STATUS_PERMISSION",
                                           "RSMI_STATUS_OUT_OF_RESOURCES",
                                           "RSMI_STATUS_INTERNAL_EXCEPTION",
                                           "RSMI_STATUS_INPUT_OUT_OF_BOUNDS",
                                           "RSMI_STATUS_INIT_ERROR",
                                           "RSMI_STATUS_NOT_YET_IMPLEMENTED",
                                           "RSMI_STATUS_NOT_FOUND",
                                           "RSMI_STATUS_INSUFFICIENT_SIZE",
                                           "RSMI_STATUS_INTERRUPT",
                                           "RSMI_STATUS_UNEXPECTED_SIZE",
                                           "RSMI_STATUS_NO_DATA",
                                           "RSMI_STATUS_UNEXPECTED_DATA",
                                           "RSMI_STATUS_BUSY",
                                           "RSMI_STATUS_REFCOUNT_OVERFLOW"};
  const char* name = rc < std::size(kNames) ? kNames[rc] : rc == kUnknownError ? "RSMI_STATUS_UNKNOWN_ERROR" : "RSMI";
  return fmt::format("{} ({})", name, rc == kUnknownError ? std::string("0xFFFFFFFF") : std::to_string(rc));
}

} // namespace wattscope::rocm
