// Logs people already have (issue 15): `nvidia-smi --query-gpu=... --format=csv[,nounits][,noheader] -l N` output,
// any subset and order of columns, units in the header ("power.draw [W]") or in the values ("61.35 W") or nowhere,
// "[N/A]" and "[Not Supported]" as missing. The parser only reads; `wattscope import` turns its records into a run.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/frame.hpp"

namespace wattscope {

struct SmiOptions {
  bool utc = false;                 // timestamps are UTC (nvidia-smi writes local time without a zone)
  std::vector<std::string> columns; // the query's fields, for a file written with noheader
};

// One data row: one GPU at one time.
struct SmiRecord {
  int64_t line = 0; // 1-based, for messages
  int64_t ts_ms = 0;
  std::string key; // what tells GPUs apart: index, else uuid, else pci.bus_id ("" when the file has none)
  std::optional<int> index;
  std::string name, uuid, pci_bus_id;
  OptI clock_sm_max_mhz, clock_mem_max_mhz;
  GpuSample sample; // gpu_index left 0: the importer numbers devices
};

// What the parser did with the times of a local-time log (issue 31): at the end of daylight saving time an hour of
// local times occurs twice; each such row is placed in the first or the second pass by the row before it (the one
// nearer in time), and counted here.
struct SmiTimeNotes {
  int64_t ambiguous_rows = 0;   // rows whose local time occurs twice
  int64_t second_pass_rows = 0; // of those, placed in the repeated hour (after the clocks went back)
  int64_t first_ambiguous_line = 0;
};

// What one row may say: power beyond this is no GPU's (1e308 W used to be stored as inf J).
inline constexpr double kMaxSmiPowerW = 100000;

// Calls `fn` for every data row, in file order. Throws std::invalid_argument naming the line and the problem: a row
// with a different number of fields than the header, a value that is not a number of its column's unit, a
// timestamp that is not a date, no timestamp column, an empty file, a time earlier than the row above's (rows out of
// order, or a clock set back: integrating over it would give negative energy), a value out of any GPU's range (power
// negative or above kMaxSmiPowerW, any value that overflows its unit). Blank lines and repeated header lines (an
// appended second log) are skipped. Columns wattscope does not store are ignored; `ignored` (optional) gets their
// names. Control characters in a GPU's name, uuid or bus id become '?'.
void parse_nvidia_smi(std::string_view text, const SmiOptions& opts, const std::function<void(const SmiRecord&)>& fn,
                      std::vector<std::string>* ignored = nullptr, SmiTimeNotes* notes = nullptr);

} // namespace wattscope
