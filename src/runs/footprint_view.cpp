#include "runs/footprint_view.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/stored_json.hpp"
#include "core/text.hpp"

namespace wattscope {

namespace {

constexpr double kJoulesPerKwh = 3.6e6;

// Device energy from the summary, as the run's total counts it (GPUs, CPU package, DRAM).
std::map<std::string, double> device_energy(const nlohmann::json& s) {
  std::map<std::string, double> out;
  if (const auto& g = json_member(s, "gpus"); g.is_array())
    for (const auto& gpu : g)
      if (const auto index = json_int(json_member(gpu, "index")); index && json_has_number(gpu, "energy_j"))
        out[fmt::format("gpu{}", *index)] = json_number(gpu, "energy_j", 0);
  const auto& c = json_member(s, "cpu");
  if (json_has_number(c, "package_energy_j")) out["cpu_package"] = json_number(c, "package_energy_j", 0);
  if (json_has_number(c, "dram_energy_j")) out["cpu_dram"] = json_number(c, "dram_energy_j", 0);
  return out;
}

StepSeries steps_of(const nlohmann::json& j) {
  StepSeries s;
  if (const auto& a = json_member(j, "steps"); a.is_array())
    for (const auto& st : a)
      if (st.is_array() && st.size() == 2 && st[0].is_number_integer() && st[1].is_number() &&
          s.steps.size() < kMaxSummarySteps) {
        const double v = st[1].get<double>();
        if (std::isfinite(v) && v >= 0) s.steps.emplace_back(st[0].get<int64_t>(), v);
      }
  // A stored row is anyone's: steps out of order are no series to search.
  if (!std::is_sorted(s.steps.begin(), s.steps.end(), [](auto& x, auto& y) { return x.first < y.first; }))
    s.steps.clear();
  return s;
}

std::map<std::string, double> devices_of(const nlohmann::json& j) {
  std::map<std::string, double> out;
  if (const auto& d = json_member(j, "devices"); d.is_object())
    for (const auto& [k, v] : d.items())
      if (v.is_number() && out.size() < 1024) out[excerpt(k, 64)] = v.get<double>();
  return out;
}

// At a constant (or stepwise) rate with the energy spread evenly over the run: a read command's rate, or a run
// recorded before wattscope charged carbon.
RateFigure at_rate(const Rate& r, double pue, const std::map<std::string, double>& energy, int64_t a, int64_t b) {
  RateFigure f;
  f.per_kwh = r.series.mean_over(a, b);
  f.source = r.source;
  f.region = r.region;
  f.assumed = r.assumed;
  f.pue = pue;
  f.steps = r.series;
  for (const auto& [d, j] : energy) {
    f.devices[d] = j / kJoulesPerKwh * pue * f.per_kwh;
    f.value += f.devices[d];
  }
  return f;
}

RateFigure stored(const nlohmann::json& j, const char* value_key, const char* rate_key) {
  RateFigure f;
  f.value = json_number(j, value_key, 0);
  f.per_kwh = json_number(j, rate_key, 0);
  f.source = excerpt(json_string(j, "source"), 400);
  f.region = excerpt(json_string(j, "region"), 16);
  f.currency = excerpt(json_string(j, "currency"), 8);
  f.assumed = json_bool(j, "assumed", false);
  f.pue = json_number(j, "pue", 1);
  if (!(f.pue >= 1 && f.pue <= 5)) f.pue = 1; // as --pue allows: a stored row is anyone's
  f.devices = devices_of(j);
  f.steps = steps_of(j);
  if (f.steps.steps.empty()) f.steps.steps = {{0, f.per_kwh}};
  return f;
}

} // namespace

RunFootprint run_footprint(const RunInfo& run, const FootprintOverride& o) {
  RunFootprint out;
  const nlohmann::json s = run_summary_json(run);
  const auto energy = device_energy(s);
  if (energy.empty()) return out;
  const int64_t a = run.start_ms, b = run.end_ms.value_or(run.start_ms);
  const auto& carbon = json_member(s, "carbon");
  const auto& cost = json_member(s, "cost");
  const double stored_pue = carbon.is_object() ? json_number(carbon, "pue", 1) : 1.0;
  const double pue = o.pue.value_or(stored_pue);
  if (o.carbon) {
    out.carbon = at_rate(*o.carbon, pue, energy, a, b);
  } else if (carbon.is_object() && json_has_number(carbon, "grams")) {
    out.carbon = stored(carbon, "grams", "g_per_kwh");
    if (o.pue) { // the same grid, another overhead: the charge scales with it
      const double k = pue / out.carbon->pue;
      out.carbon->value *= k;
      for (auto& [d, g] : out.carbon->devices)
        g *= k;
      out.carbon->pue = pue;
    }
  } else {
    Footprint world = resolve_footprint({});
    world.carbon.source = "assumed: " + std::string(find_carbon_region("WRL")->name) + " " +
                          std::to_string(find_carbon_region("WRL")->year) +
                          " yearly average (no carbon stored with the run: recorded before wattscope charged carbon, "
                          "or not finished; give --carbon-region or --carbon-intensity to replace it)";
    out.carbon = at_rate(world.carbon, pue, energy, a, b);
  }
  if (o.price) {
    out.cost = at_rate(*o.price, pue, energy, a, b);
    out.cost->currency = o.currency.empty() ? "USD" : o.currency;
  } else if (cost.is_object() && json_has_number(cost, "amount")) {
    out.cost = stored(cost, "amount", "price_per_kwh");
    if (o.pue) {
      const double k = pue / out.cost->pue;
      out.cost->value *= k;
      for (auto& [d, c] : out.cost->devices)
        c *= k;
      out.cost->pue = pue;
    }
  }
  return out;
}

OptF RunFootprint::grams(const OptF& joules, int64_t from_ms, int64_t to_ms) const {
  if (!carbon || !joules) return std::nullopt;
  return *joules / kJoulesPerKwh * carbon->pue * carbon->steps.mean_over(from_ms, to_ms);
}

OptF RunFootprint::cost_of(const OptF& joules, int64_t from_ms, int64_t to_ms) const {
  if (!cost || !joules) return std::nullopt;
  return *joules / kJoulesPerKwh * cost->pue * cost->steps.mean_over(from_ms, to_ms);
}

nlohmann::json RunFootprint::carbon_json() const {
  if (!carbon) return nullptr;
  return {{"grams", carbon->value},
          {"g_per_kwh", carbon->per_kwh},
          {"source", carbon->source},
          {"region", carbon->region.empty() ? nlohmann::json() : nlohmann::json(carbon->region)},
          {"assumed", carbon->assumed},
          {"pue", carbon->pue},
          {"devices", carbon->devices}};
}

nlohmann::json RunFootprint::cost_json() const {
  if (!cost) return nullptr;
  return {{"amount", cost->value},      {"price_per_kwh", cost->per_kwh},
          {"currency", cost->currency}, {"source", cost->source},
          {"pue", cost->pue},           {"devices", cost->devices}};
}

std::string format_grams(double g) {
  if (g >= 1e6) return fmt::format("{:.3g} t", g / 1e6);
  if (g >= 1e3) return fmt::format("{:.3g} kg", g / 1e3);
  if (g >= 0.1 || g == 0) return fmt::format("{:.3g} g", g);
  return fmt::format("{:.3g} mg", g * 1e3);
}

std::string RunFootprint::text() const {
  std::string out;
  if (carbon)
    out += fmt::format("  carbon    {} CO2e · {:.4g} g/kWh{} · {}\n", format_grams(carbon->value), carbon->per_kwh,
                       carbon->pue != 1 ? fmt::format(" · PUE {:g}", carbon->pue) : "", carbon->source);
  if (cost)
    out += fmt::format("  cost      {:.4g} {} · {:.4g} per kWh{} · {}\n", cost->value, cost->currency, cost->per_kwh,
                       cost->pue != 1 ? fmt::format(" · PUE {:g}", cost->pue) : "", cost->source);
  return out;
}

} // namespace wattscope
