#pragma once

#include <cstdint>
#include <string>

namespace wattscope {

int64_t wall_now_ms();
// CPU time this thread has spent, user and system (what a call costs, unlike the wall time it took on a busy machine).
double thread_cpu_s();
// 2026-11-21T12:03:01.250Z
std::string iso_utc_ms(int64_t ts_ms);
// 20261121T120301Z: for file names.
std::string compact_utc(int64_t ts_ms);
// Parses what iso_utc_ms writes (milliseconds optional). Returns false on anything else.
bool parse_iso_utc_ms(const std::string& text, int64_t& ts_ms);
// Days since 1970-01-01 of a date in the proleptic Gregorian calendar (H. Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d);

} // namespace wattscope
