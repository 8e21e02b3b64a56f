// Names the calling thread, as `top -H`, `ps -L` and gdb show it: "ws-sampler", "ws-writer"... so an operator can
// tell what each of wattscope's few threads is for (issue 12: each exists because the design needs it).
#pragma once

#include <pthread.h>

#include <string>
#include <string_view>

namespace wattscope {

inline void name_this_thread(std::string_view name) {
  std::string n(name.substr(0, 15)); // the kernel keeps 15 characters
  pthread_setname_np(pthread_self(), n.c_str());
}

} // namespace wattscope
