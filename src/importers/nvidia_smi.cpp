#include "importers/nvidia_smi.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/text.hpp"

namespace wattscope {

namespace {

enum class Field {
  Ignored,
  Timestamp,
  Index,
  Name,
  Uuid,
  PciBusId,
  Power,
  PowerAvg,
  PowerLimit,
  UtilGpu,
  UtilMem,
  UtilEnc,
  UtilDec,
  MemUsed,
  MemTotal,
  TempGpu,
  TempMem,
  ClockSm,
  ClockGfx,
  ClockMem,
  ClockSmMax,
  ClockMemMax,
  Fan,
  Pstate,
  PcieWidth,
  PcieWidthMax,
  Throttle,
};

// nvidia-smi --help-query-gpu names (and their aliases) for what wattscope stores.
struct Known {
  std::string_view name;
  Field field;
};
constexpr Known kKnown[] = {
    {"timestamp", Field::Timestamp},
    {"index", Field::Index},
    {"name", Field::Name},
    {"gpu_name", Field::Name},
    {"uuid", Field::Uuid},
    {"gpu_uuid", Field::Uuid},
    {"pci.bus_id", Field::PciBusId},
    {"gpu_bus_id", Field::PciBusId},
    {"power.draw", Field::Power},
    {"power.draw.instant", Field::Power},
    {"power.draw.average", Field::PowerAvg},
    {"power.limit", Field::PowerLimit},
    {"enforced.power.limit", Field::PowerLimit},
    {"utilization.gpu", Field::UtilGpu},
    {"utilization.memory", Field::UtilMem},
    {"utilization.encoder", Field::UtilEnc},
    {"utilization.decoder", Field::UtilDec},
    {"memory.used", Field::MemUsed},
    {"memory.total", Field::MemTotal},
    {"temperature.gpu", Field::TempGpu},
    {"temperature.memory", Field::TempMem},
    {"clocks.sm", Field::ClockSm},
    {"clocks.current.sm", Field::ClockSm},
    {"clocks.gr", Field::ClockGfx},
    {"clocks.current.graphics", Field::ClockGfx},
    {"clocks.mem", Field::ClockMem},
    {"clocks.current.memory", Field::ClockMem},
    {"clocks.max.sm", Field::ClockSmMax},
    {"clocks.max.memory", Field::ClockMemMax},
    {"clocks.max.mem", Field::ClockMemMax},
    {"fan.speed", Field::Fan},
    {"pstate", Field::Pstate},
    {"pcie.link.width.current", Field::PcieWidth},
    {"pcie.link.width.max", Field::PcieWidthMax},
    {"clocks_throttle_reasons.active", Field::Throttle},
    {"clocks_event_reasons.active", Field::Throttle},
};

struct SmiColumn {
  std::string header; // as written, for messages
  Field field = Field::Ignored;
  std::string unit; // from "[W]" in the header; "" when none
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    out.push_back(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

SmiColumn column_of(std::string_view text) {
  SmiColumn c;
  c.header = text;
  std::string_view name = text;
  if (const size_t br = text.find('['); br != std::string_view::npos) {
    const size_t close = text.find(']', br);
    c.unit = trim(text.substr(br + 1, close == std::string_view::npos ? std::string_view::npos : close - br - 1));
    name = trim(text.substr(0, br));
  }
  const std::string key = lower(name);
  for (const auto& k : kKnown)
    if (k.name == key) c.field = k.field;
  return c;
}

bool missing(std::string_view v) {
  // nvidia-smi's words for "no value": [N/A], [Not Supported], [Unknown Error], [Insufficient Permissions], ...
  return v.empty() || v.front() == '[' || v == "N/A" || v == "Not Supported";
}

[[noreturn]] void fail(int64_t line, std::string_view what) {
  throw std::invalid_argument(fmt::format("line {}: {}", line, what));
}

// A number followed by an optional unit word, scaled to the column's stored unit: `scale_of(unit)` says what one
// of that unit is in the stored unit (nullopt: not a unit of this column).
template <class ScaleOf> double number(std::string_view v, const SmiColumn& c, int64_t line, ScaleOf scale_of) {
  double d = 0;
  const char* b = v.data();
  const char* e = v.data() + v.size();
  auto [end, ec] = std::from_chars(b, e, d);
  if (ec != std::errc() || !std::isfinite(d))
    fail(line, fmt::format("column '{}': '{}' is not a number", excerpt(c.header), excerpt(v)));
  std::string_view unit = trim(std::string_view(end, static_cast<size_t>(e - end)));
  if (unit.empty()) unit = c.unit;
  const std::optional<double> scale = scale_of(unit);
  if (!scale)
    fail(line, fmt::format("column '{}': '{}' has a unit wattscope does not know here", excerpt(c.header), excerpt(v)));
  // Far beyond any reading, and within what an integer column and an energy sum can hold.
  const double scaled = d * *scale;
  if (!std::isfinite(scaled) || std::fabs(scaled) > 1e15)
    fail(line, fmt::format("column '{}': '{}' is out of range", excerpt(c.header), excerpt(v)));
  return scaled;
}

double power_value(std::string_view v, const SmiColumn& c, int64_t line,
                   std::optional<double> (*scale_of)(std::string_view)) {
  const double w = number(v, c, line, scale_of);
  if (w < 0 || w > kMaxSmiPowerW)
    fail(line, fmt::format("column '{}': '{}' is not a GPU's power (0 to {:.0f} W)", excerpt(c.header), excerpt(v),
                           kMaxSmiPowerW));
  return w;
}

// Names come from a file: control characters (an escape sequence for the terminal `show` prints on) become '?'.
std::string printable_field(std::string_view v) {
  std::string out(v);
  for (size_t i = 0; i < out.size(); ++i) {
    const auto c = static_cast<unsigned char>(out[i]);
    if (c < 0x20 || c == 0x7f) out[i] = '?';
    // C1 controls in UTF-8 (U+0080..U+009F: \xc2\x80..\xc2\x9f), which some terminals obey as CSI and the like
    if (c == 0xc2 && i + 1 < out.size() && static_cast<unsigned char>(out[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(out[i + 1]) <= 0x9f) {
      out[i] = '?';
      out.erase(i + 1, 1);
    }
  }
  return out;
}

std::optional<double> watts(std::string_view u) {
  if (u.empty() || u == "W") return 1.0;
  if (u == "mW") return 1e-3;
  if (u == "kW") return 1e3;
  return std::nullopt;
}
std::optional<double> percent(std::string_view u) {
  return u.empty() || u == "%" ? std::optional<double>(1.0) : std::nullopt;
}
std::optional<double> mebibytes_to_bytes(std::string_view u) {
  // nvidia-smi reports memory in MiB, with or without the unit written.
  if (u.empty() || u == "MiB" || u == "MB") return 1048576.0;
  if (u == "GiB" || u == "GB") return 1073741824.0;
  if (u == "KiB" || u == "KB") return 1024.0;
  if (u == "B") return 1.0;
  return std::nullopt;
}
std::optional<double> megahertz(std::string_view u) {
  if (u.empty() || u == "MHz") return 1.0;
  if (u == "GHz") return 1e3;
  return std::nullopt;
}
std::optional<double> celsius(std::string_view u) {
  return u.empty() || u == "C" || u == "°C" ? std::optional<double>(1.0) : std::nullopt;
}
std::optional<double> plain(std::string_view u) {
  return u.empty() ? std::optional<double>(1.0) : std::nullopt;
}

// A timestamp as UTC milliseconds: `earlier`, and `later` when the local time occurs twice (the hour repeated at the
// end of daylight saving time; else the same).
struct Stamp {
  int64_t earlier = 0;
  int64_t later = 0;
};

Stamp parse_timestamp(std::string_view v, bool utc, int64_t line) {
  // nvidia-smi: "2024/01/15 10:23:45.123"; also ISO 8601 "2024-01-15T10:23:45.123Z" from other tools' rewrites.
  auto bad = [&] {
    fail(line,
         fmt::format("timestamp '{}' is not a date and time (nvidia-smi writes 2024/01/15 10:23:45.123)", excerpt(v)));
  };
  bool zulu = false;
  if (!v.empty() && (v.back() == 'Z' || v.back() == 'z')) {
    zulu = true;
    v.remove_suffix(1);
  }
  int f[6] = {};
  const char* p = v.data();
  const char* e = v.data() + v.size();
  const char seps[] = {'/', '/', ' ', ':', ':'};
  for (int i = 0; i < 6; ++i) {
    auto [next, ec] = std::from_chars(p, e, f[i]);
    if (ec != std::errc() || next == p) bad();
    p = next;
    if (i < 5) {
      if (p == e) bad();
      const char s = *p;
      const bool ok = s == seps[i] || (i < 2 && s == '-') || (i == 2 && s == 'T');
      if (!ok) bad();
      ++p;
    }
  }
  int ms = 0;
  if (p != e && *p == '.') {
    ++p;
    int digits = 0;
    while (p != e && std::isdigit(static_cast<unsigned char>(*p))) {
      if (digits < 3) ms = ms * 10 + (*p - '0');
      ++digits;
      ++p;
    }
    if (digits == 0) bad();
    for (int d = digits; d < 3; ++d)
      ms *= 10;
  }
  if (p != e) bad();
  if (f[0] < 1970 || f[0] > 9999 || f[1] < 1 || f[1] > 12 || f[2] < 1 || f[2] > 31 || f[3] > 23 || f[4] > 59 ||
      f[5] > 60)
    bad();
  std::tm tm{};
  tm.tm_year = f[0] - 1900;
  tm.tm_mon = f[1] - 1;
  tm.tm_mday = f[2];
  tm.tm_hour = f[3];
  tm.tm_min = f[4];
  tm.tm_sec = f[5];
  tm.tm_isdst = -1;
  if (utc || zulu) {
    const time_t t = timegm(&tm);
    if (t == static_cast<time_t>(-1)) bad();
    return {static_cast<int64_t>(t) * 1000 + ms, static_cast<int64_t>(t) * 1000 + ms};
  }
  // Local time: mktime with tm_isdst = -1 picks one reading of a time that occurs twice, whichever glibc guesses.
  // Both readings are tried; one is valid when it gives back the wall clock time written.
  std::optional<time_t> found[2];
  for (int dst = 0; dst < 2; ++dst) {
    std::tm t = tm;
    t.tm_isdst = dst;
    const time_t x = mktime(&t);
    std::tm back{};
    if (x == static_cast<time_t>(-1) || !localtime_r(&x, &back)) continue;
    if (back.tm_year == tm.tm_year && back.tm_mon == tm.tm_mon && back.tm_mday == tm.tm_mday &&
        back.tm_hour == tm.tm_hour && back.tm_min == tm.tm_min && back.tm_sec == tm.tm_sec && back.tm_isdst == dst)
      found[dst] = x;
  }
  if (!found[0] && !found[1]) { // a time skipped when the clocks went forward: mktime's normalised reading
    std::tm t = tm;
    const time_t x = mktime(&t);
    if (x == static_cast<time_t>(-1)) bad();
    found[0] = x;
  }
  const time_t a = found[0] && found[1] ? std::min(*found[0], *found[1]) : found[0] ? *found[0] : *found[1];
  const time_t b = found[0] && found[1] ? std::max(*found[0], *found[1]) : a;
  return {static_cast<int64_t>(a) * 1000 + ms, static_cast<int64_t>(b) * 1000 + ms};
}

std::string utc_text(int64_t ms) {
  const time_t t = static_cast<time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03} UTC", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

// "P0" .. "P15"
int pstate_of(std::string_view v, int64_t line_no) {
  int p = -1;
  if (v.size() >= 2 && (v[0] == 'P' || v[0] == 'p')) {
    auto [end, ec] = std::from_chars(v.data() + 1, v.data() + v.size(), p);
    if (ec != std::errc() || end != v.data() + v.size()) p = -1;
  }
  if (p < 0 || p > 15) fail(line_no, fmt::format("pstate '{}' is not P0 to P15", excerpt(v)));
  return p;
}

// "0x0000000000000004"
int64_t throttle_bits(std::string_view v, const SmiColumn& c, int64_t line_no) {
  uint64_t bits = 0;
  std::string_view hex = v;
  if (hex.size() > 2 && hex[0] == '0' && (hex[1] == 'x' || hex[1] == 'X')) hex.remove_prefix(2);
  auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), bits, 16);
  if (ec != std::errc() || end != hex.data() + hex.size() || bits > static_cast<uint64_t>(INT64_MAX))
    fail(line_no, fmt::format("column '{}': '{}' is not a hexadecimal bit mask", excerpt(c.header), excerpt(v)));
  return static_cast<int64_t>(bits);
}

// A value `v` (present, not the timestamp) of column `c` into the row's record, in the unit wattscope stores.
void set_field(SmiRecord& r, const SmiColumn& c, std::string_view v, int64_t line_no) {
  GpuSample& s = r.sample;
  auto real = [&](auto scale) { return OptF(number(v, c, line_no, scale)); };
  auto whole = [&](auto scale) { return OptI(static_cast<int64_t>(std::llround(number(v, c, line_no, scale)))); };
  switch (c.field) {
  case Field::Index: {
    const double d = number(v, c, line_no, plain);
    if (d < 0 || d > 1023 || d != std::floor(d))
      fail(line_no, fmt::format("index '{}' is not a GPU index", excerpt(v)));
    r.index = static_cast<int>(d);
    break;
  }
  case Field::Name:
    r.name = printable_field(v);
    break;
  case Field::Uuid:
    r.uuid = printable_field(v);
    break;
  case Field::PciBusId:
    r.pci_bus_id = printable_field(v);
    break;
  case Field::Power:
    s.power_w = power_value(v, c, line_no, watts);
    break;
  case Field::PowerAvg:
    s.power_avg_w = power_value(v, c, line_no, watts);
    break;
  case Field::PowerLimit:
    s.power_limit_w = power_value(v, c, line_no, watts);
    break;
  case Field::UtilGpu:
    s.util_gpu_pct = real(percent);
    break;
  case Field::UtilMem:
    s.util_mem_pct = real(percent);
    break;
  case Field::UtilEnc:
    s.util_enc_pct = real(percent);
    break;
  case Field::UtilDec:
    s.util_dec_pct = real(percent);
    break;
  case Field::MemUsed:
    s.mem_used_bytes = whole(mebibytes_to_bytes);
    break;
  case Field::MemTotal:
    s.mem_total_bytes = whole(mebibytes_to_bytes);
    break;
  case Field::TempGpu:
    s.temp_gpu_c = real(celsius);
    break;
  case Field::TempMem:
    s.temp_mem_c = real(celsius);
    break;
  case Field::ClockSm:
    s.clock_sm_mhz = whole(megahertz);
    break;
  case Field::ClockGfx:
    s.clock_gfx_mhz = whole(megahertz);
    break;
  case Field::ClockMem:
    s.clock_mem_mhz = whole(megahertz);
    break;
  case Field::ClockSmMax:
    r.clock_sm_max_mhz = whole(megahertz);
    break;
  case Field::ClockMemMax:
    r.clock_mem_max_mhz = whole(megahertz);
    break;
  case Field::Fan:
    s.fan_pct = real(percent);
    break;
  case Field::Pstate:
    s.pstate = pstate_of(v, line_no);
    break;
  case Field::PcieWidth:
    s.pcie_link_width = whole(plain);
    break;
  case Field::PcieWidthMax:
    s.pcie_link_width_max = whole(plain);
    break;
  case Field::Throttle:
    s.throttle_reasons = throttle_bits(v, c, line_no);
    break;
  default:
    break;
  }
}

// The columns of a log, from its header or --columns, and where its timestamp is.
struct SmiHeader {
  std::vector<SmiColumn> cols;
  std::string line; // as written, to skip repeats of it
  int timestamp_col = -1;
};
// Finds the timestamp column (refusing a log without one) and names the ignored columns in `ignored`.
void settle_columns(SmiHeader& h, int64_t line, std::vector<std::string>* ignored) {
  for (size_t i = 0; i < h.cols.size(); ++i) {
    if (h.cols[i].field == Field::Timestamp) h.timestamp_col = static_cast<int>(i);
    if (h.cols[i].field == Field::Ignored && ignored) ignored->push_back(h.cols[i].header);
  }
  if (h.timestamp_col < 0)
    fail(line, "no 'timestamp' column: log with nvidia-smi --query-gpu=timestamp,... (or name the columns of a "
               "noheader file with --columns)");
}

// The times of the rows before: the last one, and its line.
struct SmiClock {
  std::optional<int64_t> prev_ms;
  int64_t prev_line = 0;
};

// The row's time from its timestamp `v`. The hour repeated when daylight saving time ended: the reading nearer the
// row above, which is the first pass until the log's clock goes back, the second after. A log that starts inside that
// hour is read as the first pass.
void place_timestamp(SmiRecord& r, std::string_view v, bool utc, const SmiClock& clock, SmiTimeNotes& notes,
                     int64_t line_no) {
  const Stamp st = parse_timestamp(v, utc, line_no);
  r.ts_ms = st.earlier;
  if (st.later == st.earlier) return;
  if (notes.ambiguous_rows++ == 0) notes.first_ambiguous_line = line_no;
  if (clock.prev_ms && std::llabs(st.later - *clock.prev_ms) < std::llabs(st.earlier - *clock.prev_ms)) {
    r.ts_ms = st.later;
    ++notes.second_pass_rows;
  }
}

// One data row (its fields split, as many as the header's) as a record, its time placed and checked against the rows
// before.
SmiRecord read_row(const SmiHeader& h, const std::vector<std::string_view>& fields, int64_t line_no,
                   const SmiOptions& opts, SmiClock& clock, SmiTimeNotes& notes) {
  SmiRecord r;
  r.line = line_no;
  r.sample.power_source = "nvidia-smi";
  for (size_t i = 0; i < h.cols.size(); ++i) {
    const SmiColumn& c = h.cols[i];
    const std::string_view v = fields[i];
    if (c.field == Field::Timestamp) {
      if (!missing(v)) place_timestamp(r, v, opts.utc, clock, notes, line_no); // missing: refused below
      continue;
    }
    if (c.field == Field::Ignored || missing(v)) continue;
    set_field(r, c, v, line_no);
  }
  if (missing(fields[static_cast<size_t>(h.timestamp_col)])) fail(line_no, "the timestamp is missing");
  if (clock.prev_ms && r.ts_ms < *clock.prev_ms)
    fail(line_no,
         fmt::format("the time goes back {:.3f} s, to {} after {} on line {}: the rows are out of order, "
                     "two logs are mixed, or the clock was set back; a log's energy is integrated over its "
                     "time, so sort the rows or import each log on its own{}",
                     static_cast<double>(*clock.prev_ms - r.ts_ms) / 1000, utc_text(r.ts_ms), utc_text(*clock.prev_ms),
                     clock.prev_line, opts.utc ? "" : " (a log in UTC needs --utc)"));
  clock.prev_ms = r.ts_ms;
  clock.prev_line = line_no;
  r.key = r.index ? std::to_string(*r.index) : !r.uuid.empty() ? r.uuid : r.pci_bus_id;
  return r;
}

} // namespace

void parse_nvidia_smi(std::string_view text, const SmiOptions& opts, const std::function<void(const SmiRecord&)>& fn,
                      std::vector<std::string>* ignored, SmiTimeNotes* notes) {
  SmiTimeNotes local_notes;
  if (!notes) notes = &local_notes;
  SmiClock clock;
  SmiHeader header;
  int64_t data_rows = 0;
  for (const auto& c : opts.columns)
    header.cols.push_back(column_of(trim(c)));
  if (!header.cols.empty()) settle_columns(header, 0, ignored);

  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.size() > 65536) fail(line_no, fmt::format("a line of {} bytes; not an nvidia-smi log", line.size()));
    line = trim(line);
    if (line.empty()) continue;
    if (line_no == 1 && line.size() >= 3 && line.substr(0, 3) == "\xef\xbb\xbf") line.remove_prefix(3); // BOM
    if (header.cols.empty()) {
      for (auto f : split(line))
        header.cols.push_back(column_of(f));
      header.line = line;
      settle_columns(header, line_no, ignored);
      continue;
    }
    if (line == header.line || (!header.line.empty() && lower(line.substr(0, 9)) == "timestamp")) continue;
    const auto fields = split(line);
    if (fields.size() != header.cols.size())
      fail(line_no, fmt::format("{} fields where the header has {}; is the file cut short or two logs mixed?",
                                fields.size(), header.cols.size()));
    const SmiRecord r = read_row(header, fields, line_no, opts, clock, *notes);
    ++data_rows;
    fn(r);
  }
  if (header.cols.empty()) throw std::invalid_argument("the file is empty; expected nvidia-smi --format=csv output");
  if (data_rows == 0) throw std::invalid_argument("the file has a header but no samples");
}

} // namespace wattscope
