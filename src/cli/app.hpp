#pragma once

namespace wattscope {
// The whole command line; returns the process exit status.
int run_app(int argc, char** argv);
} // namespace wattscope
