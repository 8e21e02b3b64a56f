// Task names, command lines and file names: user text that becomes data, never SQL or a path unchecked.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wattscope {

inline constexpr size_t kMaxTaskNameBytes = 128;
inline constexpr size_t kMaxTagKeyBytes = 64;
inline constexpr size_t kMaxTagValueBytes = 1024;

// Throws std::invalid_argument naming the problem: empty, too long, control characters, invalid UTF-8.
void validate_task_name(std::string_view task);
// Printable UTF-8 of at most max_bytes (phase names, units from markers); `what` names it in the message. Throws
// std::invalid_argument naming the problem.
void validate_printable_text(std::string_view what, std::string_view text, size_t max_bytes);
// --tag KEY=VALUE: a key of letters, digits, '_', '-' and '.' (it becomes a JSON key and may become a label), a
// value of printable UTF-8. Throws std::invalid_argument naming the problem.
std::pair<std::string, std::string> parse_tag(std::string_view text);
// Outside text quoted in an error message: control characters as \xNN, cut to about max_bytes with "...", so a
// binary file or a megabyte-long cell cannot flood or drive the terminal.
std::string excerpt(std::string_view text, size_t max_bytes = 40);
// Text read from a store, for a terminal: every control character but line feed and tab (ESC, CSI and the other C1
// controls, DEL) becomes '?', so a GPU name or a tag carrying an escape sequence cannot drive the terminal; the rest,
// UTF-8 included, is kept.
std::string terminal_safe(std::string_view text);
// A task name made safe for a file name: anything outside [A-Za-z0-9._-] becomes '_'.
std::string file_safe(std::string_view text);
// The command as a user could paste it back into a shell.
std::string shell_join(const std::vector<std::string>& argv);
std::string format_bytes(double bytes);
// A figure with at least `digits` significant digits and an SI prefix from n to P: format_si(0.0164, "J/sample") is
// "16.4 mJ/sample", format_si(56324, "") "56.3 k", format_si(2030, "J") "2.03 kJ". NaN is "-".
std::string format_si(double value, std::string_view unit, int digits = 3);
// A count of things: "56.3 k parameters", "1.20 G FLOPs"; a whole number under 1,000 as it is ("64 samples").
std::string format_count(double value, std::string_view noun);
std::string format_energy(double joules);
// A Prometheus text label set, `{a="x",b="y"}`, at the front of `rest` (consumed), values unescaped; false with `why`
// on a malformed one or past max_labels. --scrape's answers and remote-write's expositions.
bool parse_label_set(std::string_view& rest, std::vector<std::pair<std::string, std::string>>& out, size_t max_labels,
                     std::string& why); // "2.03 kJ (564 mWh)": format_si in J, and in Wh (kWh from 1 kWh)

} // namespace wattscope
