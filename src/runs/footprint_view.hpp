// A stored run's carbon and cost as every view shows them (show, show --json, stats, compare, the report, serve's run
// API; the Python reader reads the same summary keys): charged sample by sample when it was recorded, or at the
// constant rates a read command gave instead, or, for a run recorded before wattscope charged carbon, at the world's
// yearly figure, marked as assumed. Always with its source.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "accounting/footprint.hpp"
#include "core/frame.hpp"
#include "core/schema.hpp"

namespace wattscope {

struct RateFigure {
  double value = 0;   // grams, or the cost in `currency`
  double per_kwh = 0; // the rate it came to over the run: g/kWh, or price per kWh
  std::string source;
  std::string region;   // carbon from the table: its code
  std::string currency; // cost
  bool assumed = false; // carbon: no source was given (the world's yearly figure)
  double pue = 1;
  std::map<std::string, double> devices; // gpu0, cpu_package, cpu_dram
  StepSeries steps;                      // the rates over the run, for its phases
};

struct RunFootprint {
  std::optional<RateFigure> carbon; // missing when the run measured no energy
  std::optional<RateFigure> cost;   // missing without a price
  // A stretch of the run (a phase): its energy at the rates over its own time, PUE included.
  OptF grams(const OptF& joules, int64_t from_ms, int64_t to_ms) const;
  OptF cost_of(const OptF& joules, int64_t from_ms, int64_t to_ms) const;
  // {"grams", "g_per_kwh", "source", "region", "assumed", "pue", "devices"} / {"amount", "price_per_kwh",
  // "currency", "source", "pue", "devices"}; null when missing.
  nlohmann::json carbon_json() const;
  nlohmann::json cost_json() const;
  // show's lines: "  carbon    84.2 g CO2e · 56 g/kWh × 1.50 kWh · PUE 1.2 · France 2024 ..." and the cost's.
  std::string text() const;
};

RunFootprint run_footprint(const RunInfo& run, const FootprintOverride& o = {});

// "84.2 g", "1.23 kg", "4.1 mg": grams at a readable scale.
std::string format_grams(double g);

} // namespace wattscope
