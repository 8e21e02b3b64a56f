#include "core/lazy/lazy_lib.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

namespace wattscope::lazy {

Library::Library(std::initializer_list<const char*> sonames, const char* package) : package_(package) {
  size_t i = 0;
  for (const char* s : sonames)
    if (i < std::size(names_)) names_[i++] = s;
}

void Library::open() {
  std::string tried;
  for (const char* name : names_) {
    if (!name) break;
    // RTLD_LOCAL: its symbols stay out of the global namespace, so they never stand in for wattscope's own.
    if ((handle_ = dlopen(name, RTLD_NOW | RTLD_LOCAL))) return;
    const char* why = dlerror();
    tried += fmt::format("{}{}", tried.empty() ? "" : "; ", why ? why : name);
  }
  std::lock_guard lock(mu_);
  error_ = fmt::format("{} could not be loaded ({}); install the Debian package {}", names_[0], tried, package_);
}

void* Library::symbol(const char* name) {
  std::call_once(once_, [this] { open(); });
  if (!handle_) return nullptr;
  void* p = dlsym(handle_, name);
  if (!p) {
    std::lock_guard lock(mu_);
    if (error_.empty()) error_ = fmt::format("{} lacks {} (too old?); install a current {}", names_[0], name, package_);
  }
  return p;
}

bool Library::available() {
  std::call_once(once_, [this] { open(); });
  return handle_ != nullptr;
}

std::string Library::error() {
  std::call_once(once_, [this] { open(); });
  std::lock_guard lock(mu_);
  return error_;
}

Library& curl() {
  // Debian's libcurl4 (OpenSSL) first, then libcurl3-gnutls: the same ABI under two names.
  static Library lib({"libcurl.so.4", "libcurl-gnutls.so.4"}, "libcurl4");
  return lib;
}

Library& mariadb() {
  static Library lib({"libmariadb.so.3"}, "libmariadb3");
  return lib;
}

Library& snappy() {
  static Library lib({"libsnappy.so.1"}, "libsnappy1v5");
  return lib;
}

} // namespace wattscope::lazy
