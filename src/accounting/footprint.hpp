// Carbon and cost of a run's energy, each with its source: a constant, a yearly country figure from the table shipped
// with wattscope, or a time series from a file (a grid operator's hourly intensity, a time-of-use tariff) applied
// sample by sample, so that a run's grams follow the hours it ran in. The data centre's overhead (PUE) scales both.
// The recorder keeps the ledger (per device, per sample); every view reads the result from the run's summary.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace wattscope {

// A value over time in steps: each holds from its time until the next; before the first, the first holds.
struct StepSeries {
  std::vector<std::pair<int64_t, double>> steps; // (from_ms, value), ascending times, at least one
  double at(int64_t ms) const;
  // The value spread evenly over [a_ms, b_ms] (time-weighted mean of the steps); at(a) when b <= a.
  double mean_over(int64_t a_ms, int64_t b_ms) const;
};

// The most steps a file may hold (a year of 5-minute figures), and the largest file read.
inline constexpr size_t kMaxSeriesSteps = 120'000;
inline constexpr size_t kMaxSeriesFileBytes = 8u << 20;

// A CSV of `timestamp,VALUE` rows: an optional header, timestamps in ISO 8601 with a zone (2026-11-29T14:00:00Z,
// 2026-11-29T15:00+01:00; seconds and fractions optional), in any order (sorted here; a repeated time is an error).
// `column` names the value in messages ("g_per_kwh", "price_per_kwh"). Throws std::invalid_argument naming the file,
// the line and what is wrong: a bad time, a value that is not a finite number >= 0, too many rows, no rows.
StepSeries parse_step_csv(std::string_view text, std::string_view column, const std::string& file);
// Reads it as root would read any file that decides a figure (core/protected_file.hpp), then parses it.
StepSeries load_step_csv(const std::string& path, std::string_view column);
// "2026-11-29T15:00:00+01:00" -> ms since the epoch (UTC); nullopt when it is no ISO 8601 time with a zone.
std::optional<int64_t> parse_iso8601_ms(std::string_view text);

// One country's (or aggregate's) yearly carbon intensity of electricity from the table shipped with wattscope
// (scripts/carbon_regions.py regenerates it from Our World in Data's energy dataset).
struct RegionIntensity {
  std::string_view code; // ISO 3166-1 alpha-3 ("FRA"); WRL for the world, EU27 for the European Union
  std::string_view name;
  int year;
  double g_per_kwh;
};
std::span<const RegionIntensity> carbon_regions();
// By code (case-insensitive; "WORLD" and "EU" too) or by exact name (case-insensitive). nullopt when unknown.
std::optional<RegionIntensity> find_carbon_region(std::string_view code_or_name);
inline constexpr std::string_view kCarbonTableCredit =
    "Ember and Energy Institute, with processing by Our World in Data (CC BY 4.0)";

// What the flags and the configuration file said (the flags win).
struct FootprintOptions {
  std::optional<double> carbon_intensity; // --carbon-intensity G (g CO2e per kWh)
  std::string carbon_region;              // --carbon-region CODE
  std::string carbon_intensity_file;      // --carbon-intensity-file FILE
  std::optional<double> pue;              // --pue X (>= 1)
  std::optional<double> energy_price;     // --energy-price P (per kWh)
  std::string currency;                   // --currency (default USD)
  std::string energy_price_file;          // --energy-price-file FILE
  // Fills what this one leaves unset from `other` (the configuration file under the flags).
  void fill_from(const FootprintOptions& other);
  bool any() const;
};

// One rate, resolved: its series and where it came from.
struct Rate {
  StepSeries series;
  std::string source;   // "constant (--carbon-intensity)", "region FRA: France 2024 (…)", "file grid.csv (24 steps)"
  std::string region;   // the table's code, for a region
  bool assumed = false; // nothing was given: the world's yearly figure stands in (and says so)
};

struct Footprint {
  Rate carbon; // always: the world's yearly figure when nothing was given
  std::optional<Rate> price;
  std::string currency = "USD";
  double pue = 1;
};
// Throws std::invalid_argument naming the option and what is expected (two carbon sources at once, a PUE below 1, an
// unknown region with the nearest codes, a file's first fault).
Footprint resolve_footprint(const FootprintOptions& o);

// A stretch's grams or cost at these rates (a window's answer): its energy spread evenly over it, PUE included.
double grams_at(const Footprint& f, double joules, int64_t from_ms, int64_t to_ms);
std::optional<double> cost_at(const Footprint& f, double joules, int64_t from_ms, int64_t to_ms);

// What a command that reads a stored run replaces of the rates it was recorded with: only what it was given (a
// price alone keeps the run's carbon source). Constant rates only: a file's steps need the samples as they come.
struct FootprintOverride {
  std::optional<Rate> carbon;
  std::optional<Rate> price;
  std::string currency; // with the price
  std::optional<double> pue;
  bool any() const { return carbon || price || pue; }
};
// Throws std::invalid_argument as resolve_footprint.
FootprintOverride resolve_override(const FootprintOptions& o);

// The run's grams and cost, per device, sample by sample: energy over [from, to] is charged at the rates spread over
// that stretch (a step change inside it splits it by time). Not thread-safe: the sampler thread owns it.
class FootprintLedger {
public:
  explicit FootprintLedger(Footprint f) : f_(std::move(f)) {}
  void add(const std::string& device, int64_t from_ms, int64_t to_ms, double joules);
  const Footprint& footprint() const { return f_; }
  const std::map<std::string, double>& device_grams() const { return device_g_; }
  const std::map<std::string, double>& device_cost() const { return device_cost_; }
  // {"carbon": {grams, g_per_kwh, source, region, pue, energy_kwh, devices, steps}, "cost": {... or null}}. The
  // steps are those the run spanned (at most kMaxSummarySteps, evenly thinned past that), so that a view can charge a
  // phase at the rates of its own hours.
  nlohmann::json summary_json(int64_t run_start_ms, int64_t run_end_ms) const;
  double grams(double joules, int64_t from_ms, int64_t to_ms) const { return grams_at(f_, joules, from_ms, to_ms); }
  std::optional<double> cost(double joules, int64_t from_ms, int64_t to_ms) const {
    return cost_at(f_, joules, from_ms, to_ms);
  }

private:
  Footprint f_;
  std::map<std::string, double> device_g_;
  std::map<std::string, double> device_cost_;
  std::map<std::string, double> device_j_;
};
inline constexpr size_t kMaxSummarySteps = 2000;

} // namespace wattscope
