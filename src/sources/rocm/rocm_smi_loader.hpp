// dlopen of librocm_smi64 at run time; never linked. A missing library or required symbol turns the backend off; a
// missing optional symbol leaves its pointer null and that metric off.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sources/rocm/rocm_smi_api.hpp"

namespace wattscope::rocm {

class Library {
public:
  // explicit_path: WATTSCOPE_ROCM_SMI_LIBRARY when set (then only that file is tried). On failure returns null and
  // says why in `why`.
  static std::unique_ptr<Library> load(const std::string& explicit_path, std::string& why);
  // The names tried, in order, when no explicit path is given.
  static std::vector<std::string> default_candidates();
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<std::string>& missing_optional() const { return missing_optional_; }

#define WATTSCOPE_ROCM_MEMBER(member, need, params, args, sym) Status(*member) params = nullptr;
  WATTSCOPE_ROCM_SMI_ENTRY_POINTS(WATTSCOPE_ROCM_MEMBER)
#undef WATTSCOPE_ROCM_MEMBER

private:
  Library() = default;
  void* handle_ = nullptr;
  std::string path_;
  std::vector<std::string> missing_optional_;
};

// "RSMI_STATUS_NOT_SUPPORTED (2)": our own table, so messages work without rsmi_status_string.
std::string status_name(Status rc);

} // namespace wattscope::rocm
