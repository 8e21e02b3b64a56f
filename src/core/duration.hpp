#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

namespace wattscope {

// Parses "1s", "250ms", "10ms", "500us", "1.5s", "2m", "1h". Throws std::invalid_argument with a message
// naming the text and the accepted forms. Zero and negative durations are rejected.
std::chrono::nanoseconds parse_duration(std::string_view text);
std::string format_duration(std::chrono::nanoseconds d);

// --commit-every: a row count ("1000") or a duration ("5s").
struct CommitPolicy {
  int64_t rows = 0;                     // 0: not by rows
  std::chrono::nanoseconds interval{0}; // 0: not by time
};
CommitPolicy parse_commit_every(std::string_view text);

} // namespace wattscope
