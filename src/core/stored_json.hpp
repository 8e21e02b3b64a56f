// JSON read back from a store (runs.tags, runs.summary, phases.device_energy_j, events.detail), bounded before it is
// parsed. A store is shared: every node of a cluster writes the same MariaDB, so any one of them can plant a row that
// every reader then meets. nlohmann's DOM is built and copied recursively, and holds several times the text's size:
// 200,000 levels of '[' overflow the stack, a 50 MB cell costs hundreds of MB. So the size and the nesting are
// checked first, by a linear scan; only a cell within both reaches the parser. A refused cell is read as missing,
// the rest of the run and the other runs as they are, and a warning names the run and the column.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace wattscope {

// A run's summary is a few KiB (8 GPUs with attribution: ~10 KiB), its tags less, and neither is more than about 6
// levels deep: 1 MiB and 64 levels leave room for every real row and keep the parser's memory and depth small.
inline constexpr size_t kStoredJsonMaxBytes = size_t{1} << 20;
inline constexpr size_t kStoredJsonMaxDepth = 64;

enum class JsonRefusal { None, TooLarge, TooDeep, NotJson };

struct BoundedJson {
  nlohmann::json value = nlohmann::json(nlohmann::json::value_t::discarded); // the value when refusal is None
  JsonRefusal refusal = JsonRefusal::None;
  std::string why; // "2.0 MiB, over the 1.0 MiB cap", "nested deeper than 64 levels", "not JSON"
  bool ok() const { return refusal == JsonRefusal::None; }
};

// How deeply arrays and objects nest in `text`, brackets inside strings not counted; the scan stops at limit + 1,
// so text nested deeper says limit + 1. Linear, no recursion, no allocation: safe on any input.
size_t json_nesting_depth(std::string_view text, size_t limit);

// `text` parsed when it holds at most max_bytes and nests at most max_depth levels; otherwise why not. Never throws
// for any text (std::bad_alloc aside).
BoundedJson parse_bounded_json(std::string_view text, size_t max_bytes = kStoredJsonMaxBytes,
                               size_t max_depth = kStoredJsonMaxDepth);

// A JSON cell of a stored row (`column` as "runs.tags"), within the caps above: the value, or nothing when the cell
// is empty (missing) or refused. A refused cell is reported through spdlog as a warning naming the run and the
// column (StoredJsonWarnings' rate), never thrown.
std::optional<nlohmann::json> read_stored_json(std::string_view text, std::string_view run_id, std::string_view column);
// The same for a column that holds an object (tags, summary, device_energy_j, an event's detail): {} for a missing or
// refused cell, and for one that is JSON but not an object (reported too).
nlohmann::json read_stored_object(std::string_view text, std::string_view run_id, std::string_view column);

// Members of a stored object read by type: the member when it is there with that type, else the fallback. A stored
// row may hold any JSON, and nlohmann's own accessors throw on a type they do not expect (value()), or are undefined
// (operator[] on a const object without the key; get<int64_t>() of a double out of its range).
const nlohmann::json& json_member(const nlohmann::json& j, std::string_view key); // null when absent
bool json_has_number(const nlohmann::json& j, std::string_view key);
double json_number(const nlohmann::json& j, std::string_view key, double fallback = 0);
// A number that is a whole number within int64_t's range (1e300 and 1.5 are not).
std::optional<int64_t> json_int(const nlohmann::json& v);
int64_t json_int(const nlohmann::json& j, std::string_view key, int64_t fallback);
std::string json_string(const nlohmann::json& j, std::string_view key, std::string fallback = {});
bool json_bool(const nlohmann::json& j, std::string_view key, bool fallback);

struct RunInfo;
// The run's summary (runs.summary) as an object, as read_stored_object reads it. Its tags: run_tags_json
// (core/tag_filter.hpp).
nlohmann::json run_summary_json(const RunInfo& run);

// Which refusals are named. One bad cell is met many times (a runs page reads each run's summary for several
// figures, serve reads them again on every page), and a store may hold 100,000 bad rows: each (run, column) is named
// once per window, at most `per_window` of them; past those, one line says more were refused, and the next window's
// first line says how many went unnamed.
class StoredJsonWarnings {
public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kNamedPerWindow = 10;
  static constexpr std::chrono::seconds kWindow{60};

  explicit StoredJsonWarnings(size_t per_window = kNamedPerWindow, Clock::duration window = kWindow)
      : per_window_(per_window), window_(window) {}
  // The lines to log for one refusal of `key` at `now` (none, one, or two).
  std::vector<std::string> note(const std::string& key, const std::string& message, Clock::time_point now);

private:
  size_t per_window_;
  Clock::duration window_;
  std::optional<Clock::time_point> window_start_;
  std::set<std::string> named_; // this window's, at most per_window_
  size_t unnamed_ = 0;          // this window's refusals past the named ones
};

} // namespace wattscope
