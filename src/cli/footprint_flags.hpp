// Carbon and cost options (accounting/footprint.hpp): on the commands that record (run, record, serve) every source,
// files included, and a configuration file; on those that read a stored run (show, stats, compare, report) the
// constant ones, which replace the rates the run was recorded with.
#pragma once

#include <optional>
#include <string>

#include "accounting/footprint.hpp"

namespace CLI {
class App;
}

namespace wattscope {

struct FootprintFlags {
  FootprintOptions options;
  std::string config; // --config FILE ("" the default file when one exists)
};

// run, record, serve: --carbon-intensity, --carbon-region, --carbon-intensity-file, --pue, --energy-price,
// --energy-price-file, --currency, --config.
void add_footprint_record_options(CLI::App& sub, FootprintFlags& f);
// show, stats, compare, report: --carbon-intensity, --carbon-region, --pue, --energy-price, --currency.
void add_footprint_read_options(CLI::App& sub, FootprintOptions& f);

// The rates for a recording: the flags over the configuration file (--config, else the first of
// $XDG_CONFIG_HOME/wattscope/wattscope.toml or ~/.config/wattscope/wattscope.toml, then /etc/wattscope/wattscope.toml).
// Throws UsageError naming the flag or the file's line.
Footprint footprint_for_recording(const FootprintFlags& f);
// What a read command replaces of a run's rates (nothing when it gave none). Throws UsageError.
FootprintOverride footprint_for_reading(const FootprintOptions& f);
// The configuration file's [carbon] and [cost] tables. Throws std::invalid_argument "<file>, line N: ...".
FootprintOptions load_footprint_config(const std::string& path);
std::string default_footprint_config_path();

} // namespace wattscope
