#include "core/time_util.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>

#include <fmt/format.h>

namespace wattscope {

double thread_cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

int64_t wall_now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

namespace {
std::tm utc_tm(int64_t ts_ms) {
  std::time_t secs = static_cast<std::time_t>(ts_ms >= 0 ? ts_ms / 1000 : (ts_ms - 999) / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return tm;
}
} // namespace

std::string iso_utc_ms(int64_t ts_ms) {
  std::tm tm = utc_tm(ts_ms);
  int ms = static_cast<int>(((ts_ms % 1000) + 1000) % 1000);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

std::string compact_utc(int64_t ts_ms) {
  std::tm tm = utc_tm(ts_ms);
  return fmt::format("{:04}{:02}{:02}T{:02}{:02}{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
}

bool parse_iso_utc_ms(const std::string& text, int64_t& ts_ms) {
  std::tm tm{};
  int ms = 0;
  char z = 0;
  int n = std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                      &tm.tm_min, &tm.tm_sec, &ms, &z);
  if (n < 6) return false;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  ts_ms = static_cast<int64_t>(timegm(&tm)) * 1000 + (n >= 7 ? ms : 0);
  return true;
}

int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

} // namespace wattscope
