// The bearer token check of `serve`, made before any other work on a request.
#pragma once

#include <string_view>

namespace wattscope {

// a == b in a time that depends on the lengths only, never on where the first difference is (a token compared with
// == leaks its prefix through timing).
bool constant_time_equal(std::string_view a, std::string_view b);

// The Authorization header value carries `token` ("Bearer TOKEN"; the scheme is case-insensitive, RFC 9110 11.1).
bool bearer_matches(std::string_view authorization, std::string_view token);

} // namespace wattscope
