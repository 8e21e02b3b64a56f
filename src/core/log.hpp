#pragma once

namespace wattscope {
// stderr logger: "wattscope: message" at info, with the level name for warnings and errors.
// verbosity: -1 quiet (errors only), 0 normal, 1 debug.
void init_logging(int verbosity);
} // namespace wattscope
