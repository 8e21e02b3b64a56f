#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace wattscope {

void init_logging(int verbosity) {
  spdlog::drop("wattscope");
  auto logger = spdlog::stderr_color_mt("wattscope");
  logger->set_pattern("wattscope: %^%l%$: %v");
  logger->set_level(verbosity < 0 ? spdlog::level::err : verbosity > 0 ? spdlog::level::debug : spdlog::level::info);
  spdlog::set_default_logger(logger);
}

} // namespace wattscope
