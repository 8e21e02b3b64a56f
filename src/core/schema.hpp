// The one schema every store shares. SQLite, CSV and MySQL derive their tables, column names and column order from
// these definitions, so the stores cannot drift apart (the original design's rule: CSV and SQL aligned).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/frame.hpp"
#include "core/metrics.hpp"

namespace wattscope {

// 2: cpu_samples power columns, cpu_power_samples, gpu_samples.vendor. 3: gpu_samples.util_enc_pct, util_dec_pct.
// Older stores are migrated forward (a column this version has and the store lacks is added); a store written by a
// newer version is refused.
// 4: processes, process_samples, process_gpu_samples (issue 13: attribution); phases, work (issue 15: markers).
// 5: work.total (issue 36: a declared total of work, for the time and energy to finish).
// 6: gpu_samples without uuid, name and vendor: gpu_devices holds them once per (run_id, gpu_index), and the view
// gpu_samples_named joins them back. A GPU row took 88 of its ~255 bytes repeating them. The writer of an older store
// moves them into gpu_devices and rebuilds gpu_samples without them (the one migration that removes columns).
// 7: SQL stores keep a GPU row's run as a small integer: the table gpu_sample_rows has run_key where gpu_samples had
// the run's 24-character id (25 of a row's ~125 bytes), run_keys maps each run_id to its key, and gpu_samples is a
// view of the two with version 6's columns, so that reading it (WHERE run_id = ?, joins on run_id) is unchanged. CSV
// files, one set per run, leave run_id out of gpu_samples. A writer of an older store copies its table once.
inline constexpr int kSchemaVersion = 7;
// The columns version 6 took out of gpu_samples, and the view that shows them beside every sample again.
inline constexpr std::string_view kGpuIdentityColumns[] = {"uuid", "name", "vendor"};
inline constexpr std::string_view kGpuSamplesNamedView = "gpu_samples_named";
// Version 7's stored GPU rows and the run keys they name (the SQL stores; gpu_samples is the view of the two).
inline constexpr std::string_view kGpuSampleRowsTable = "gpu_sample_rows";
inline constexpr std::string_view kRunKeysTable = "run_keys";

struct Column {
  std::string_view name;
  ColType type;
};

struct Table {
  std::string_view name;
  std::span<const Column> columns;
  std::span<const std::string_view> primary_key;
  std::span<const std::string_view> index; // extra "samples of a run in time order" index; may be empty
};

enum class TableId : size_t {
  Runs,
  GpuDevices,
  CpuSamples,
  CpuCoreSamples,
  CpuPowerSamples,
  GpuSamples,
  Events,
  // ---- attribution (issue 13): processes of a run and their samples ----
  Processes,
  ProcessSamples,
  ProcessGpuSamples,
  // ---- end attribution ----
  // --- issue 15: phases and work (markers)
  Phases,
  Work,
  // --- end issue 15
  Count
};
inline constexpr size_t kTableCount = static_cast<size_t>(TableId::Count);

// Tables added after the first stores were written (issue 15: phases, work): an older store that lacks one reads
// as having no rows in it, rather than as damaged.
inline bool table_may_be_absent(TableId id) {
  return id == TableId::Phases || id == TableId::Work;
}

// The schema_version a store holds (its text; nullopt when the store has none yet, which reads as 0). Throws
// std::runtime_error naming `store` when it is not a number, or newer than this wattscope's (kSchemaVersion): such
// a store is refused rather than misread.
int check_schema_version(const std::optional<std::string>& stored, std::string_view store);

const Table& table(TableId id);
// The position of a column in its table's rows, by name. Throws std::logic_error for a name the table lacks: reading
// code names columns, never counts them.
size_t column_index(TableId id, std::string_view name);
std::span<const Table> all_tables();
std::optional<TableId> table_by_name(std::string_view name);

// A cell. string_view cells point at strings that outlive the batch (run id, device names); owned text uses string.
using Value = std::variant<std::monostate, int64_t, double, std::string_view, std::string>;

inline bool is_null(const Value& v) {
  return std::holds_alternative<std::monostate>(v);
}
std::string_view value_text(const Value& v); // for Text cells; "" otherwise
std::optional<double> value_real(const Value& v);
std::optional<int64_t> value_int(const Value& v);

// Rows of one table, stored flat: cells.size() == rows * columns.
struct TableRows {
  TableId table = TableId::Runs;
  std::vector<Value> cells;
  size_t columns() const;
  size_t rows() const { return columns() ? cells.size() / columns() : 0; }
};

// Sample rows of every table for one commit.
struct RowBatch {
  std::array<TableRows, kTableCount> tables;
  RowBatch();
  size_t sample_rows() const; // rows of the *_samples tables and events
  void clear();
  bool empty() const { return sample_rows() == 0; }
};

struct RunInfo {
  std::string run_id;
  std::string task;
  std::string command;
  std::string host;
  std::string cpu_model;
  int64_t start_ms = 0;
  std::optional<int64_t> end_ms;
  std::optional<int64_t> exit_status;
  double interval_ms = 0;
  int64_t samples = 0;
  std::optional<double> total_energy_j;
  std::string tags = "{}"; // JSON object
  std::string version;
  std::string summary = "{}"; // JSON object, see accounting::RunSummary::to_json
  std::optional<double> duration_s() const;
};

void append_run_row(const RunInfo& run, TableRows& out);
RunInfo run_from_row(std::span<const Value> row);
void append_device_row(std::string_view run_id, const GpuDevice& dev, TableRows& out);
GpuDevice device_from_row(std::span<const Value> row);

// Appends every row a frame produces. A GPU's uuid, name and vendor are in its gpu_devices row (frame.device_rows, in
// the frame of its first sample), not in its samples.
void append_frame_rows(std::string_view run_id, const Frame& frame, RowBatch& out);
// The SELECT of the view kGpuSamplesNamedView, `quote` quoting an identifier: gpu_samples' columns in the order of
// schema 5 (uuid, name and vendor after gpu_index, from gpu_devices), so that queries written for it still run.
std::string gpu_samples_named_select(char quote);
// That view's columns, in order: a writer makes the view again only where the stored one's differ.
std::vector<std::string_view> gpu_samples_named_columns();
// The SQL stores' table kGpuSampleRowsTable: gpu_samples' columns with run_key (an integer from kRunKeysTable) first
// in place of run_id, keyed (run_key, tick, gpu_index) so that a run's rows stay together in tick order.
const Table& gpu_sample_rows_table();
// The SELECT of the view gpu_samples: kGpuSampleRowsTable's rows with their run_id from kRunKeysTable, in
// gpu_samples' columns.
std::string gpu_samples_view_select(char quote);
// The statements that bring a version-6 gpu_samples table forward: keys for the stored runs (in start order, then any
// run with GPU rows and no runs row), then its rows copied under their keys into kGpuSampleRowsTable, in key order.
// `insert_ignore` is the dialect's "INSERT OR IGNORE" or "INSERT IGNORE", `quote` its identifier quote.
std::vector<std::string> gpu_rows_keying_sql(std::string_view insert_ignore, char quote);

// ---- attribution (issue 13) ----
// The rows of frame.processes (processes, process_samples, process_gpu_samples); append_frame_rows calls it.
void append_process_rows(std::string_view run_id, const Frame& frame, RowBatch& out);
// ---- end attribution ----

// A fresh run id: start time plus 32 random bits, e.g. 20261121-120301-3f9a1c2b. Unique across hosts in practice.
std::string new_run_id(int64_t start_ms);

} // namespace wattscope
