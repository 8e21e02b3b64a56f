// The bearer token of `wattscope serve --token-file FILE`: read with the care ssh takes with authorized_keys, since
// whoever can change the file can read every node's data.
#pragma once

#include "server/auth.hpp" // constant_time_equal, for comparing a token read here

#include <cstddef>
#include <string>
#include <string_view>

namespace wattscope {

inline constexpr size_t kMinTokenChars = 16;
inline constexpr size_t kMaxTokenFileBytes = 4096;

// The token in `path`. Refused, with std::invalid_argument naming the path and the problem: anything but a regular
// file (a FIFO, /dev/zero, a directory), a file larger than kMaxTokenFileBytes (only that much is ever read), a file
// or any directory above it that another user could change (group- or world-writable, a directory without the sticky
// bit; owned by someone other than root or this user), and contents parse_token refuses.
std::string read_token_file(const std::string& path);

// A token file's contents: one line of visible ASCII (0x21-0x7e), at least kMinTokenChars long; one trailing "\n" or
// "\r\n" is dropped. Throws std::invalid_argument naming the problem and its byte position.
std::string parse_token(std::string_view contents);

} // namespace wattscope
