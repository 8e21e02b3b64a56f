#include "sources/dl_open.hpp"

#include <dlfcn.h>

namespace wattscope {

DlOpened dl_open_first(const std::string& explicit_path, const std::vector<std::string>& defaults) {
  DlOpened out;
  const std::vector<std::string> candidates =
      explicit_path.empty() ? defaults : std::vector<std::string>{explicit_path};
  for (const auto& c : candidates) {
    out.handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (out.handle) {
      out.path = c;
      return out;
    }
    const char* e = ::dlerror();
    if (!out.errors.empty()) out.errors += "; ";
    out.errors += e ? e : c;
  }
  return out;
}

} // namespace wattscope
