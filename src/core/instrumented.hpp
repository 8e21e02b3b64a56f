// Whether this build is instrumented by a sanitizer, and how much costlier that makes a call of wattscope's own code
// (issue 33's read costs are timed around a vendor call and wattscope's handling of it: under AddressSanitizer that
// handling costs tens of microseconds where a release build spends one or two).
#pragma once

namespace wattscope {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kInstrumented = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kInstrumented = true;
#else
inline constexpr bool kInstrumented = false;
#endif
#else
inline constexpr bool kInstrumented = false;
#endif

// Read-cost budgets are multiplied by this, so an instrumented build reads on the schedule a release build keeps
// (measured: a 1-2 us NVML stand-in call timed at 50-92 us under ASan, over the 50 us budget).
inline constexpr int kInstrumentedCostFactor = kInstrumented ? 10 : 1;

} // namespace wattscope
