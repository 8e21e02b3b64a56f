// Remote-write's data model: the series `/metrics` exposes, each with its samples over a batch. The writer stamps
// serve's own exposition (LiveState::metrics_text) with the frame's time, so what a receiver stores is exactly what a
// scrape reads: the same names, labels and units, one registry behind both (STYLE 21).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace wattscope::remote_write {

// A series' labels, `__name__` among them, sorted by name (remote-write 1.0 requires it).
using Labels = std::vector<std::pair<std::string, std::string>>;

struct Series {
  Labels labels;
  std::vector<std::pair<int64_t, double>> samples; // (ms since 1970, value), oldest first
};

// Prometheus' staleness marker: a NaN with this exact bit pattern tells the receiver the series ended (a GPU lost, the
// run over), so a query stops showing its last value at once instead of for the 5-minute lookback.
inline constexpr uint64_t kStaleNaNBits = 0x7ff0000000000002ull;
bool is_stale_marker(double v);

// What one exposition may hold: our own text, bounded all the same (a process board can list many processes).
inline constexpr size_t kMaxSeriesPerExposition = 50000;
inline constexpr size_t kMaxLabelsPerSeries = 32;

// Gathers expositions into one batch: a series per label set, its samples in time order.
class BatchBuilder {
public:
  // external: added to every series that lacks the label (as Prometheus' external_labels: never overriding one the
  // series has). Names must be valid label names (validate_label_name).
  explicit BatchBuilder(Labels external = {});

  // Every sample of `exposition` (Prometheus text 0.0.4) at ts_ms. A series the previous add had and this one lacks
  // gets a staleness marker at ts_ms. Returns the samples added; lines that are not samples are skipped and counted.
  size_t add(std::string_view exposition, int64_t ts_ms);
  // A staleness marker at ts_ms for every series of the last add (the recording ended): dashboards drop them now.
  size_t end(int64_t ts_ms);

  size_t samples() const { return samples_; }
  size_t series() const { return batch_.size(); }
  size_t bad_lines() const { return bad_lines_; }
  // The batch so far, and a fresh one begun (the series known from the last add stay known, for staleness).
  std::vector<Series> take();

private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view v) const { return std::hash<std::string_view>{}(v); }
  };
  // A series known from the adds so far: the add that last had it (gen), its place in the batch being built.
  struct Known {
    uint64_t gen = 0;
    size_t pos = SIZE_MAX;
  };
  using KnownMap = std::unordered_map<std::string, Known, Hash, std::equal_to<>>;
  void append(KnownMap::value_type& k, int64_t ts_ms, double v);
  Labels external_;
  KnownMap known_; // key: the line up to its value (name and label set as written)
  uint64_t gen_ = 0;
  std::vector<Series> batch_;
  size_t samples_ = 0, bad_lines_ = 0;
};

// A label name as Prometheus takes it: [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved). Throws
// std::invalid_argument naming the problem.
void validate_label_name(std::string_view name);

// "NAME=VALUE" as --external-label takes it. Throws std::invalid_argument naming the problem.
std::pair<std::string, std::string> parse_external_label(std::string_view text);

} // namespace wattscope::remote_write
