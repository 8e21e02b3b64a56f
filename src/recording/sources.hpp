// The source registry: every backend this build knows, in the order they are opened. Richer backends come first:
// a GPU they claim (by PCI bus id) is dropped by the ones after them, so no device is recorded twice. Adding a
// backend is its folder, one line in sources.cpp and its CMake lines.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "sources/source.hpp"

namespace wattscope {

struct SessionOptions;

struct SourceEntry {
  std::string_view name;
  // Null when this backend has nothing to do with these options (the TDP estimate without --cpu-tdp).
  std::unique_ptr<Source> (*make)(const SessionOptions& opts);
  // Absent is the normal case (most machines have no AMD or Intel GPU): a run says so at debug level only and stores
  // no source-missing event, unless the source found the hardware but may not read it (no permission), or failed in
  // a way the user must hear of (an error, or SourceStatus::said: a library named by its variable that cannot be
  // loaded, issue 30).
  bool quiet_when_missing = false;
};
std::span<const SourceEntry> source_registry();
// The registry's quiet_when_missing for the source of that name (false for a name it does not know).
bool quiet_when_missing(std::string_view name);

// Every source the registry makes for these options, unopened, in registry order.
std::vector<std::unique_ptr<Source>> make_sources(const SessionOptions& opts);

} // namespace wattscope
