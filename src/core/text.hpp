// Task names, command lines and file names: user text that becomes data, never SQL or a path unchecked.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace wattscope {

inline constexpr size_t kMaxTaskNameBytes = 128;

// Throws std::invalid_argument naming the problem: empty, too long, control characters, invalid UTF-8.
void validate_task_name(std::string_view task);
// A task name made safe for a file name: anything outside [A-Za-z0-9._-] becomes '_'.
std::string file_safe(std::string_view text);
// The command as a user could paste it back into a shell.
std::string shell_join(const std::vector<std::string>& argv);
std::string format_bytes(double bytes);
std::string format_energy(double joules); // "1234.5 J (0.343 Wh)"

} // namespace wattscope
