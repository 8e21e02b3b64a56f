#pragma once
// Shared libraries that only some commands need, opened on first use instead of at start.
//
// libcurl (alerts, top --connect, pod names from the kubelet) pulls in GnuTLS, p11-kit, OpenSSL, Kerberos and LDAP;
// libmariadb (--db mysql://) OpenSSL. Linked, they were loaded and initialised by every run whether used or not:
// 8 MiB of wattscope's RSS (of 18 for `record` with 8 GPUs) and ~7 ms of CPU at every start. So wattscope is not
// linked against them: lazy_curl.cpp and lazy_mariadb.cpp define the few entry points it calls, each of which opens
// the library the first time one is called and forwards to it. The callers are unchanged; a machine without the
// library runs every other command, and the one that needs it says which package to install.
#include <mutex>
#include <string>

namespace wattscope::lazy {

class Library {
public:
  // sonames: tried in order (e.g. the OpenSSL and GnuTLS builds of libcurl, which share one ABI); package: the
  // Debian package that provides it, for the error.
  Library(std::initializer_list<const char*> sonames, const char* package);
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  // The address of `name` in the library, opening it on the first call; nullptr when the library cannot be
  // opened or lacks the symbol (error() says which). Thread-safe.
  void* symbol(const char* name);
  bool available();
  // Why the library or a symbol could not be had, with what to install; empty when all went well.
  std::string error();

private:
  void open();
  const char* names_[4]{};
  const char* package_;
  std::once_flag once_;
  void* handle_ = nullptr;
  std::mutex mu_;
  std::string error_;
};

Library& curl();
Library& mariadb();
Library& snappy(); // remote-write's compression (remote_write/wire.hpp)

// The function `name` of `lib` as a pointer of type F, or nullptr.
template <class F> F* function(Library& lib, const char* name) {
  return reinterpret_cast<F*>(lib.symbol(name));
}

} // namespace wattscope::lazy
