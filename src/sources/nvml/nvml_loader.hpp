// dlopen of libnvidia-ml at run time; never linked. A missing library or required symbol turns the backend off; a
// missing optional symbol leaves its pointer null and that metric off.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sources/nvml/nvml_api.hpp"

namespace wattscope::nvml {

class Library {
public:
  // explicit_path: WATTSCOPE_NVML_LIBRARY when set (then only that file is tried). On failure returns null and says
  // why in `why`.
  static std::unique_ptr<Library> load(const std::string& explicit_path, std::string& why);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<std::string>& missing_optional() const { return missing_optional_; }
  // A symbol outside the entry-point list (the simulated library's scenario hand-over, issue 19), or null.
  void* symbol(const char* name) const;

#define WATTSCOPE_NVML_MEMBER(member, need, params, args, ...) Return(*member) params = nullptr;
  WATTSCOPE_NVML_ENTRY_POINTS(WATTSCOPE_NVML_MEMBER, WATTSCOPE_NVML_MEMBER)
#undef WATTSCOPE_NVML_MEMBER

private:
  Library() = default;
  void* handle_ = nullptr;
  std::string path_;
  std::vector<std::string> missing_optional_;
};

// "NVML_ERROR_GPU_IS_LOST (15)": our own table, so messages work even without nvmlErrorString.
std::string error_name(Return rc);

} // namespace wattscope::nvml
