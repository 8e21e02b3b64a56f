#include "accounting/footprint.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <stdexcept>

#include <fmt/format.h>

#include "core/protected_file.hpp"
#include "core/text.hpp"
#include "core/time_util.hpp"

namespace wattscope {

namespace {

constexpr RegionIntensity kRegions[] = {
#include "accounting/carbon_regions.inc"
};

constexpr double kJoulesPerKwh = 3.6e6;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '"'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '"'))
    s.remove_suffix(1);
  return s;
}

bool digits(std::string_view s, size_t pos, size_t n, int& out) {
  if (pos + n > s.size()) return false;
  out = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

std::optional<double> number(std::string_view s) {
  double v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

} // namespace

std::optional<int64_t> parse_iso8601_ms(std::string_view t) {
  // YYYY-MM-DDTHH:MM[:SS[.fff]](Z|±HH:MM|±HHMM); a space for the T as many exports write it
  int y, mo, d, h, mi, s = 0;
  if (!digits(t, 0, 4, y) || t.size() < 16 || t[4] != '-' || !digits(t, 5, 2, mo) || t[7] != '-' ||
      !digits(t, 8, 2, d) || (t[10] != 'T' && t[10] != ' ') || !digits(t, 11, 2, h) || t[13] != ':' ||
      !digits(t, 14, 2, mi))
    return std::nullopt;
  size_t i = 16;
  int64_t ms = 0;
  if (i < t.size() && t[i] == ':') {
    if (!digits(t, i + 1, 2, s)) return std::nullopt;
    i += 3;
    if (i < t.size() && (t[i] == '.' || t[i] == ',')) {
      size_t n = 0;
      int64_t scale = 100;
      for (++i; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i, ++n) {
        ms += (t[i] - '0') * scale;
        scale /= 10;
      }
      if (n == 0) return std::nullopt;
    }
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return std::nullopt;
  int64_t offset_min = 0;
  if (i < t.size() && (t[i] == 'Z' || t[i] == 'z')) {
    ++i;
  } else if (i < t.size() && (t[i] == '+' || t[i] == '-')) {
    const int sign = t[i] == '-' ? -1 : 1;
    int oh, om;
    if (!digits(t, i + 1, 2, oh)) return std::nullopt;
    size_t j = i + 3;
    if (j < t.size() && t[j] == ':') ++j;
    if (!digits(t, j, 2, om) || oh > 23 || om > 59) return std::nullopt;
    offset_min = sign * (oh * 60 + om);
    i = j + 2;
  } else {
    return std::nullopt; // no zone: a local time would mean a different hour on every machine
  }
  if (i != t.size()) return std::nullopt;
  const int64_t days = days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  return ((days * 24 + h) * 60 + mi - offset_min) * 60'000 + int64_t{s} * 1000 + ms;
}

double StepSeries::at(int64_t ms) const {
  if (steps.empty()) return 0;
  auto it = std::upper_bound(steps.begin(), steps.end(), ms,
                             [](int64_t t, const std::pair<int64_t, double>& s) { return t < s.first; });
  return it == steps.begin() ? steps.front().second : std::prev(it)->second;
}

double StepSeries::mean_over(int64_t a, int64_t b) const {
  if (steps.empty()) return 0;
  if (b <= a) return at(a);
  auto it = std::upper_bound(steps.begin(), steps.end(), a,
                             [](int64_t t, const std::pair<int64_t, double>& s) { return t < s.first; });
  double sum = 0;
  int64_t from = a;
  double value = it == steps.begin() ? steps.front().second : std::prev(it)->second;
  for (; it != steps.end() && it->first < b; ++it) {
    sum += value * static_cast<double>(it->first - from);
    from = it->first;
    value = it->second;
  }
  sum += value * static_cast<double>(b - from);
  return sum / static_cast<double>(b - a);
}

StepSeries parse_step_csv(std::string_view text, std::string_view column, const std::string& file) {
  StepSeries out;
  size_t line_no = 0;
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("{}, line {}: {}", excerpt(file, 200), line_no, why));
  };
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    const size_t comma = line.find(',');
    if (comma == std::string_view::npos)
      fail(fmt::format("expected 'timestamp,{}', got '{}'", column, excerpt(std::string(line), 80)));
    const std::string_view ts = trim(line.substr(0, comma));
    std::string_view value = trim(line.substr(comma + 1));
    if (const size_t extra = value.find(','); extra != std::string_view::npos) value = trim(value.substr(0, extra));
    const auto ms = parse_iso8601_ms(ts);
    if (!ms) {
      if (out.steps.empty() && line_no == 1 && !number(value)) continue; // the header
      fail(fmt::format("'{}' is no ISO 8601 time with a zone (e.g. 2026-11-29T14:00:00Z or 2026-11-29T15:00+01:00)",
                       excerpt(std::string(ts), 60)));
    }
    const auto v = number(value);
    if (!v || *v < 0) fail(fmt::format("{} '{}' is not a number >= 0", column, excerpt(std::string(value), 40)));
    if (out.steps.size() >= kMaxSeriesSteps)
      fail(fmt::format("more than {} rows (a year of 5-minute figures): give the months the runs need",
                       kMaxSeriesSteps));
    out.steps.emplace_back(*ms, *v);
  }
  if (out.steps.empty())
    throw std::invalid_argument(fmt::format("{}: no 'timestamp,{}' rows", excerpt(file, 200), column));
  std::stable_sort(out.steps.begin(), out.steps.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < out.steps.size(); ++i)
    if (out.steps[i].first == out.steps[i - 1].first)
      throw std::invalid_argument(
          fmt::format("{}: two rows for {}: which one holds?", excerpt(file, 200), iso_utc_ms(out.steps[i].first)));
  return out;
}

StepSeries load_step_csv(const std::string& path, std::string_view column) {
  return parse_step_csv(read_protected_file(path, fmt::format("{} file", column), kMaxSeriesFileBytes), column, path);
}

std::span<const RegionIntensity> carbon_regions() {
  return kRegions;
}

std::optional<RegionIntensity> find_carbon_region(std::string_view q) {
  if (iequals(q, "WORLD")) q = "WRL";
  if (iequals(q, "EU")) q = "EU27";
  for (const auto& r : kRegions)
    if (iequals(r.code, q) || iequals(r.name, q)) return r;
  return std::nullopt;
}

void FootprintOptions::fill_from(const FootprintOptions& o) {
  // One carbon source: the flags' replaces the file's altogether (a region given on the command line must not meet a
  // constant from the configuration and be refused as two).
  if (!carbon_intensity && carbon_region.empty() && carbon_intensity_file.empty()) {
    carbon_intensity = o.carbon_intensity;
    carbon_region = o.carbon_region;
    carbon_intensity_file = o.carbon_intensity_file;
  }
  if (!energy_price && energy_price_file.empty()) {
    energy_price = o.energy_price;
    energy_price_file = o.energy_price_file;
  }
  if (!pue) pue = o.pue;
  if (currency.empty()) currency = o.currency;
}

bool FootprintOptions::any() const {
  return carbon_intensity || !carbon_region.empty() || !carbon_intensity_file.empty() || pue || energy_price ||
         !currency.empty() || !energy_price_file.empty();
}

namespace {

std::string nearest_codes(std::string_view q) {
  std::vector<std::string> hits;
  for (const auto& r : kRegions)
    if (!q.empty() &&
        (std::tolower(static_cast<unsigned char>(r.code[0])) == std::tolower(static_cast<unsigned char>(q[0])) ||
         r.name.find(q) != std::string_view::npos)) {
      if (hits.size() == 8) break;
      hits.push_back(fmt::format("{} ({})", r.code, r.name));
    }
  return hits.empty() ? "" : fmt::format(" (e.g. {})", fmt::join(hits, ", "));
}

std::string file_source(const std::string& path, const StepSeries& s) {
  return fmt::format("file {} ({} step{}, {} to {})", excerpt(path, 200), s.steps.size(),
                     s.steps.size() == 1 ? "" : "s", iso_utc_ms(s.steps.front().first),
                     iso_utc_ms(s.steps.back().first));
}

} // namespace

Footprint resolve_footprint(const FootprintOptions& o) {
  Footprint f;
  const int carbon_sources =
      (o.carbon_intensity ? 1 : 0) + (o.carbon_region.empty() ? 0 : 1) + (o.carbon_intensity_file.empty() ? 0 : 1);
  if (carbon_sources > 1)
    throw std::invalid_argument(
        "give one of --carbon-intensity, --carbon-region and --carbon-intensity-file: they are each a whole source");
  if (o.carbon_intensity) {
    if (!std::isfinite(*o.carbon_intensity) || *o.carbon_intensity < 0 || *o.carbon_intensity > 5000)
      throw std::invalid_argument(
          fmt::format("--carbon-intensity {}: expected g CO2e per kWh between 0 and 5000 (a coal plant is about 1000)",
                      *o.carbon_intensity));
    f.carbon.series.steps = {{0, *o.carbon_intensity}};
    f.carbon.source = fmt::format("constant {:g} g/kWh (--carbon-intensity)", *o.carbon_intensity);
  } else if (!o.carbon_region.empty()) {
    const auto r = find_carbon_region(o.carbon_region);
    if (!r)
      throw std::invalid_argument(fmt::format("--carbon-region '{}': no such country in wattscope's table; give its "
                                              "ISO 3166-1 alpha-3 code{}, WORLD or EU (docs/carbon.md lists them)",
                                              excerpt(o.carbon_region, 60), nearest_codes(o.carbon_region)));
    f.carbon.series.steps = {{0, r->g_per_kwh}};
    f.carbon.region = std::string(r->code);
    f.carbon.source = fmt::format("{} {} yearly average ({}; {})", r->name, r->year, r->code, kCarbonTableCredit);
  } else if (!o.carbon_intensity_file.empty()) {
    f.carbon.series = load_step_csv(o.carbon_intensity_file, "g_per_kwh");
    for (const auto& [t, v] : f.carbon.series.steps)
      if (v > 5000)
        throw std::invalid_argument(fmt::format("{}: {:g} g/kWh at {} is above 5000: is it g per MWh?",
                                                o.carbon_intensity_file, v, iso_utc_ms(t)));
    f.carbon.source = file_source(o.carbon_intensity_file, f.carbon.series);
  } else {
    const auto world = find_carbon_region("WRL");
    f.carbon.series.steps = {{0, world->g_per_kwh}};
    f.carbon.region = "WRL";
    f.carbon.assumed = true;
    f.carbon.source = fmt::format("assumed: world {} yearly average ({}); set --carbon-region or "
                                  "--carbon-intensity-file for the grid this ran on",
                                  world->year, kCarbonTableCredit);
  }
  if (o.pue) {
    if (!std::isfinite(*o.pue) || *o.pue < 1 || *o.pue > 5)
      throw std::invalid_argument(fmt::format("--pue {}: expected the data centre's power usage effectiveness, "
                                              "between 1 (none) and 5 (typical: 1.1 to 1.6)",
                                              *o.pue));
    f.pue = *o.pue;
  }
  if (o.energy_price && !o.energy_price_file.empty())
    throw std::invalid_argument("give --energy-price or --energy-price-file, not both");
  if (o.energy_price) {
    if (!std::isfinite(*o.energy_price) || *o.energy_price < 0 || *o.energy_price > 100)
      throw std::invalid_argument(
          fmt::format("--energy-price {}: expected a price per kWh between 0 and 100", *o.energy_price));
    f.price = Rate{
        {{{0, *o.energy_price}}}, fmt::format("constant {:g} per kWh (--energy-price)", *o.energy_price), {}, false};
  } else if (!o.energy_price_file.empty()) {
    Rate r;
    r.series = load_step_csv(o.energy_price_file, "price_per_kwh");
    r.source = file_source(o.energy_price_file, r.series);
    f.price = std::move(r);
  }
  if (!o.currency.empty()) {
    const bool ok = o.currency.size() <= 8 && std::all_of(o.currency.begin(), o.currency.end(), [](char c) {
                      return std::isalpha(static_cast<unsigned char>(c));
                    });
    if (!ok)
      throw std::invalid_argument(
          fmt::format("--currency '{}': expected a code of letters such as EUR or USD", excerpt(o.currency, 40)));
    f.currency = o.currency;
  }
  return f;
}

FootprintOverride resolve_override(const FootprintOptions& o) {
  const Footprint f = resolve_footprint(o);
  FootprintOverride out;
  if (!f.carbon.assumed) out.carbon = f.carbon;
  if (f.price) {
    out.price = f.price;
    out.currency = f.currency;
  }
  if (o.pue) out.pue = f.pue;
  return out;
}

void FootprintLedger::add(const std::string& device, int64_t from_ms, int64_t to_ms, double joules) {
  if (!std::isfinite(joules) || joules <= 0) return;
  device_j_[device] += joules;
  device_g_[device] += grams(joules, from_ms, to_ms);
  if (const auto c = cost(joules, from_ms, to_ms)) device_cost_[device] += *c;
}

double grams_at(const Footprint& f, double joules, int64_t from_ms, int64_t to_ms) {
  return joules / kJoulesPerKwh * f.pue * f.carbon.series.mean_over(from_ms, to_ms);
}

std::optional<double> cost_at(const Footprint& f, double joules, int64_t from_ms, int64_t to_ms) {
  if (!f.price) return std::nullopt;
  return joules / kJoulesPerKwh * f.pue * f.price->series.mean_over(from_ms, to_ms);
}

namespace {

// The steps a run spanned: the one in force at its start and every change up to its end, thinned evenly past `cap`.
nlohmann::json spanned_steps(const StepSeries& s, int64_t a, int64_t b) {
  std::vector<std::pair<int64_t, double>> in{{a, s.at(a)}};
  for (const auto& st : s.steps)
    if (st.first > a && st.first <= b) in.push_back(st);
  nlohmann::json out = nlohmann::json::array();
  const size_t stride = in.size() <= kMaxSummarySteps ? 1 : (in.size() + kMaxSummarySteps - 1) / kMaxSummarySteps;
  for (size_t i = 0; i < in.size(); i += stride)
    out.push_back({in[i].first, in[i].second});
  return out;
}

nlohmann::json devices_json(const std::map<std::string, double>& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [d, v] : m)
    j[d] = v;
  return j;
}

} // namespace

nlohmann::json FootprintLedger::summary_json(int64_t start_ms, int64_t end_ms) const {
  double joules = 0, g = 0;
  for (const auto& [d, j] : device_j_)
    joules += j;
  for (const auto& [d, v] : device_g_)
    g += v;
  const double kwh = joules / kJoulesPerKwh * f_.pue; // at the meter, PUE included
  nlohmann::json carbon = {{"grams", g},
                           {"g_per_kwh", kwh > 0 ? g / kwh : f_.carbon.series.mean_over(start_ms, end_ms)},
                           {"source", f_.carbon.source},
                           {"region", f_.carbon.region.empty() ? nlohmann::json() : nlohmann::json(f_.carbon.region)},
                           {"assumed", f_.carbon.assumed},
                           {"pue", f_.pue},
                           {"energy_kwh", kwh},
                           {"devices", devices_json(device_g_)},
                           {"steps", spanned_steps(f_.carbon.series, start_ms, end_ms)}};
  nlohmann::json cost;
  if (f_.price) {
    double amount = 0;
    for (const auto& [d, v] : device_cost_)
      amount += v;
    cost = {{"amount", amount},
            {"price_per_kwh", kwh > 0 ? amount / kwh : f_.price->series.mean_over(start_ms, end_ms)},
            {"currency", f_.currency},
            {"source", f_.price->source},
            {"pue", f_.pue},
            {"devices", devices_json(device_cost_)},
            {"steps", spanned_steps(f_.price->series, start_ms, end_ms)}};
  }
  return {{"carbon", carbon}, {"cost", cost}};
}

} // namespace wattscope
