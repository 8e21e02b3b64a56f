#include "cli/footprint_flags.hpp"

#include <cstdlib>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <toml++/toml.h>

#include "cli/command.hpp"
#include "core/protected_file.hpp"
#include "core/text.hpp"

namespace wattscope {

namespace {

// A configuration of a few keys: a larger file is a mistake (and toml++ recurses per nesting level).
constexpr size_t kMaxConfigBytes = 4096;

void add_constant_options(CLI::App& sub, FootprintOptions& f) {
  sub.add_option_function<double>(
         "--carbon-intensity", [&f](double g) { f.carbon_intensity = g; },
         "Grid carbon intensity in g CO2e per kWh, constant (docs/carbon.md). Default: the world's yearly average, "
         "marked as assumed")
      ->type_name("G");
  sub.add_option("--carbon-region", f.carbon_region,
                 "Country whose yearly carbon intensity applies: ISO 3166-1 alpha-3 code (FRA, DEU, USA), WORLD or "
                 "EU; from the Ember / Our World in Data table shipped with wattscope")
      ->type_name("CODE");
  sub.add_option_function<double>(
         "--pue", [&f](double x) { f.pue = x; },
         "The data centre's power usage effectiveness (facility energy / IT energy, e.g. 1.2): scales carbon and cost")
      ->type_name("X");
  sub.add_option_function<double>(
         "--energy-price", [&f](double p) { f.energy_price = p; }, "Electricity price per kWh, constant")
      ->type_name("P");
  sub.add_option("--currency", f.currency, "Currency of the price, e.g. EUR (default USD)")->type_name("CODE");
}

std::optional<double> number_of(const toml::node* n, const std::string& file, std::string_view key) {
  if (!n) return std::nullopt;
  if (n->is_integer()) return static_cast<double>(n->as_integer()->get());
  if (n->is_floating_point()) return n->as_floating_point()->get();
  throw std::invalid_argument(fmt::format("{}, line {}: '{}' must be a number", file, n->source().begin.line, key));
}

std::string string_of(const toml::node* n, const std::string& file, std::string_view key) {
  if (!n) return {};
  if (!n->is_string())
    throw std::invalid_argument(fmt::format("{}, line {}: '{}' must be a string", file, n->source().begin.line, key));
  return n->as_string()->get();
}

void check_keys(const toml::table& t, std::initializer_list<std::string_view> known, const std::string& file,
                std::string_view where) {
  for (auto&& [k, v] : t)
    if (std::find(known.begin(), known.end(), k.str()) == known.end())
      throw std::invalid_argument(fmt::format("{}, line {}: unknown key '{}' in {} (known: {})", file,
                                              v.source().begin.line, excerpt(std::string(k.str()), 40), where,
                                              fmt::join(known, ", ")));
}

} // namespace

void add_footprint_record_options(CLI::App& sub, FootprintFlags& f) {
  add_constant_options(sub, f.options);
  sub.add_option("--carbon-intensity-file", f.options.carbon_intensity_file,
                 "CSV of timestamp,g_per_kwh (ISO 8601 with a zone) from your grid operator or any provider, applied "
                 "sample by sample (stepwise)")
      ->type_name("FILE");
  sub.add_option("--energy-price-file", f.options.energy_price_file,
                 "CSV of timestamp,price_per_kwh: a time-of-use tariff, applied sample by sample")
      ->type_name("FILE");
  sub.add_option("--config", f.config,
                 "TOML file with [carbon] intensity|region|intensity_file, pue and [cost] price|price_file, currency "
                 "(docs/carbon.md). Default: ~/.config/wattscope/wattscope.toml or /etc/wattscope/wattscope.toml when "
                 "present; flags win")
      ->type_name("FILE");
}

void add_footprint_read_options(CLI::App& sub, FootprintOptions& f) {
  add_constant_options(sub, f);
}

std::string default_footprint_config_path() {
  return default_config_path("wattscope.toml");
}

FootprintOptions load_footprint_config(const std::string& path) {
  const std::string text = read_protected_file(path, "configuration file", kMaxConfigBytes);
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw std::invalid_argument(
        fmt::format("{}, line {}: {}", path, e.source().begin.line, std::string(e.description())));
  }
  FootprintOptions o;
  for (auto&& [k, v] : root) {
    if ((k.str() != "carbon" && k.str() != "cost") || !v.is_table())
      throw std::invalid_argument(fmt::format("{}, line {}: expected the tables [carbon] and [cost], got '{}'", path,
                                              v.source().begin.line, excerpt(std::string(k.str()), 40)));
  }
  if (const toml::table* c = root["carbon"].as_table()) {
    check_keys(*c, {"intensity", "region", "intensity_file", "pue"}, path, "[carbon]");
    o.carbon_intensity = number_of(c->get("intensity"), path, "intensity");
    o.carbon_region = string_of(c->get("region"), path, "region");
    o.carbon_intensity_file = string_of(c->get("intensity_file"), path, "intensity_file");
    o.pue = number_of(c->get("pue"), path, "pue");
  }
  if (const toml::table* c = root["cost"].as_table()) {
    check_keys(*c, {"price", "price_file", "currency"}, path, "[cost]");
    o.energy_price = number_of(c->get("price"), path, "price");
    o.energy_price_file = string_of(c->get("price_file"), path, "price_file");
    o.currency = string_of(c->get("currency"), path, "currency");
  }
  return o;
}

Footprint footprint_for_recording(const FootprintFlags& f) {
  FootprintOptions o = f.options;
  const std::string path = f.config.empty() ? default_footprint_config_path() : f.config;
  if (!path.empty()) o.fill_from(flag_value("--config", [&] { return load_footprint_config(path); }));
  return flag_value("", [&] { return resolve_footprint(o); });
}

FootprintOverride footprint_for_reading(const FootprintOptions& f) {
  if (!f.any()) return {};
  if (!f.currency.empty() && !f.energy_price)
    throw UsageError("--currency names the currency of --energy-price: give both");
  return flag_value("", [&] { return resolve_override(f); });
}

} // namespace wattscope
