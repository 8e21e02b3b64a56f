#include "core/schema.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "core/time_util.hpp"

namespace wattscope {

namespace {
using C = Column;
constexpr ColType I = ColType::Int, R = ColType::Real, T = ColType::Text;

constexpr C kRunCols[] = {{"run_id", T},      {"task", T},
                          {"command", T},     {"host", T},
                          {"cpu_model", T},   {"start_ms", I},
                          {"end_ms", I},      {"duration_s", R},
                          {"exit_status", I}, {"interval_ms", R},
                          {"samples", I},     {"total_energy_j", R},
                          {"tags", T},        {"wattscope_version", T},
                          {"summary", T}};
constexpr std::string_view kRunKey[] = {"run_id"};
constexpr std::string_view kRunIndex[] = {"start_ms"};

constexpr C kDeviceCols[] = {{"run_id", T},
                             {"gpu_index", I},
                             {"vendor", T},
                             {"uuid", T},
                             {"name", T},
                             {"pci_bus_id", T},
                             {"mem_total_bytes", I},
                             {"power_limit_w", R},
                             {"clock_sm_max_mhz", I},
                             {"clock_mem_max_mhz", I},
                             {"energy_method", T},
                             {"power_source", T}};
constexpr std::string_view kDeviceKey[] = {"run_id", "gpu_index"};

// Sample tables: identity columns, then the registry's metrics in registry order (core/metrics.hpp).
#define WATTSCOPE_COLUMN(m, t, ...) C{#m, WATTSCOPE_METRIC_COLTYPE_##t},
constexpr C kCpuCols[] = {
    {"run_id", T}, {"tick", I}, {"ts_ms", I}, WATTSCOPE_CPU_METRICS(WATTSCOPE_COLUMN){"power_method", T}};
constexpr std::string_view kTickKey[] = {"run_id", "tick"};

constexpr C kCoreCols[] = {{"run_id", T}, {"tick", I}, {"ts_ms", I}, {"core", I}, {"util_pct", R}};
constexpr std::string_view kCoreKey[] = {"run_id", "tick", "core"};

constexpr C kZoneCols[] = {{"run_id", T},
                           {"tick", I},
                           {"ts_ms", I},
                           {"zone", T},
                           {"socket", I},
                           {"domain", T},
                           WATTSCOPE_ZONE_METRICS(WATTSCOPE_COLUMN)};
constexpr std::string_view kZoneKey[] = {"run_id", "tick", "domain"};

// A GPU's uuid, name and vendor are in gpu_devices (schema 6); its samples name it by (run_id, gpu_index) only.
constexpr C kGpuCols[] = {
    {"run_id", T}, {"tick", I}, {"ts_ms", I}, {"gpu_index", I}, WATTSCOPE_GPU_METRICS(WATTSCOPE_COLUMN)};
constexpr std::string_view kGpuKey[] = {"run_id", "tick", "gpu_index"};
// Schema 7: how the SQL stores keep them (gpu_sample_rows_table).
constexpr C kGpuRowCols[] = {
    {"run_key", I}, {"tick", I}, {"ts_ms", I}, {"gpu_index", I}, WATTSCOPE_GPU_METRICS(WATTSCOPE_COLUMN)};
constexpr std::string_view kGpuRowKey[] = {"run_key", "tick", "gpu_index"};
#undef WATTSCOPE_COLUMN

constexpr C kEventCols[] = {{"run_id", T}, {"seq", I}, {"ts_ms", I}, {"kind", T}, {"source", T}, {"detail", T}};
constexpr std::string_view kEventKey[] = {"run_id", "seq"};

// ---- attribution (issue 13): one row per process of a run, its samples, its use of each GPU ----
// A process is (pid, start_time): start_time in clock ticks after boot, so a reused pid is another process.
constexpr C kProcessCols[] = {{"run_id", T},    {"pid", I},        {"start_time", I}, {"ppid", I},
                              {"comm", T},      {"cmdline", T},    {"uid", I},        {"unit", T},
                              {"unit_kind", T}, {"first_tick", I}, {"last_tick", I}};
constexpr std::string_view kProcessKey[] = {"run_id", "pid", "start_time"};
constexpr C kProcessSampleCols[] = {{"run_id", T},
                                    {"tick", I},
                                    {"ts_ms", I},
                                    {"pid", I},
                                    {"start_time", I},
                                    {"cpu_pct", R},
                                    {"rss_bytes", I},
                                    {"pss_bytes", I},
                                    {"uss_bytes", I},
                                    {"read_bytes_per_s", R},
                                    {"write_bytes_per_s", R},
                                    {"cpu_energy_j", R}};
constexpr std::string_view kProcessSampleKey[] = {"run_id", "tick", "pid", "start_time"};
constexpr C kProcessGpuCols[] = {{"run_id", T},     {"tick", I},      {"ts_ms", I},          {"pid", I},
                                 {"start_time", I}, {"gpu_index", I}, {"mem_used_bytes", I}, {"sm_pct", R},
                                 {"mem_pct", R},    {"enc_pct", R},   {"dec_pct", R},        {"power_w", R},
                                 {"energy_j", R}};
constexpr std::string_view kProcessGpuKey[] = {"run_id", "tick", "pid", "start_time", "gpu_index"};
// ---- end attribution ----
// --- issue 15: phases and work. A phase's energy per device is the device's cumulative energy interpolated at its
// end minus at its begin (issue 29: linear between the ticks around each marker; start_tick: the tick at or before
// its begin, end_tick: the one at or after its end), kept as a JSON object {"gpu0": J, "cpu_package": J, ...} since
// the number of devices varies; energy_j is their sum.
// attributed_energy_j is filled by attribution (issue 13) where it runs; missing otherwise.
constexpr C kPhaseCols[] = {{"run_id", T},
                            {"phase_id", I},
                            {"name", T},
                            {"index", I},
                            {"parent", I},
                            {"start_ms", I},
                            {"end_ms", I},
                            {"start_tick", I},
                            {"end_tick", I},
                            {"energy_j", R},
                            {"energy_method", T},
                            {"device_energy_j", T},
                            {"attributed_energy_j", R},
                            {"closed_by_run_end", I},
                            {"start_edge", T},
                            {"end_edge", T},
                            {"energy_bound_j", R},
                            {"closed_by_repair", I},
                            {"gpu_temp_start_c", R},
                            {"gpu_temp_end_c", R}};
constexpr std::string_view kPhaseKey[] = {"run_id", "phase_id"};
// issue 36: total, the run's declared total of the unit (`work(n, unit, total=N)`); NULL when none was declared.
constexpr C kWorkCols[] = {{"run_id", T}, {"seq", I},      {"ts_ms", I}, {"amount", R},
                           {"unit", T},   {"phase_id", I}, {"total", R}};
constexpr std::string_view kWorkKey[] = {"run_id", "seq"};
// --- end issue 15

const Table kTables[] = {
    {"runs", kRunCols, kRunKey, kRunIndex},
    {"gpu_devices", kDeviceCols, kDeviceKey, {}},
    {"cpu_samples", kCpuCols, kTickKey, {}},
    {"cpu_core_samples", kCoreCols, kCoreKey, {}},
    {"cpu_power_samples", kZoneCols, kZoneKey, {}},
    {"gpu_samples", kGpuCols, kGpuKey, {}},
    {"events", kEventCols, kEventKey, {}},
    // attribution (issue 13)
    {"processes", kProcessCols, kProcessKey, {}},
    {"process_samples", kProcessSampleCols, kProcessSampleKey, {}},
    {"process_gpu_samples", kProcessGpuCols, kProcessGpuKey, {}},
    {"phases", kPhaseCols, kPhaseKey, {}},
    {"work", kWorkCols, kWorkKey, {}}, // issue 15
};
static_assert(std::size(kTables) == kTableCount, "one Table per TableId");

Value to_value(const OptF& v) {
  return v ? Value(*v) : Value();
}
Value to_value(const OptI& v) {
  return v ? Value(*v) : Value();
}
Value text_or_null(std::string_view s) {
  return s.empty() ? Value() : Value(std::string(s));
}
template <class S> Value metric_value(const MetricDef<S>& m, const S& s) {
  return m.real ? to_value(s.*m.real) : to_value(s.*m.integer);
}

// Reads a row by column name: a reader never counts positions.
struct RowView {
  TableId id;
  std::span<const Value> row;
  const Value& operator[](std::string_view name) const { return row[column_index(id, name)]; }
};
} // namespace

const Table& table(TableId id) {
  return kTables[static_cast<size_t>(id)];
}
std::span<const Table> all_tables() {
  return kTables;
}
int check_schema_version(const std::optional<std::string>& stored, std::string_view store) {
  if (!stored) return 0;
  int v = 0;
  const char* b = stored->data();
  const char* e = b + stored->size();
  auto [end, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || end != e || v < 0)
    throw std::runtime_error(fmt::format("{} has schema version '{}', which is not a version number; it was not "
                                         "written by wattscope or is damaged",
                                         store, *stored));
  if (v > kSchemaVersion)
    throw std::runtime_error(fmt::format("{} has schema version {}, newer than this wattscope's {}: upgrade wattscope "
                                         "to read or write it",
                                         store, v, kSchemaVersion));
  return v;
}

size_t column_index(TableId id, std::string_view name) {
  const auto& cols = table(id).columns;
  for (size_t i = 0; i < cols.size(); ++i)
    if (cols[i].name == name) return i;
  throw std::logic_error(fmt::format("table {} has no column {}", table(id).name, name));
}
std::optional<TableId> table_by_name(std::string_view name) {
  for (size_t i = 0; i < kTableCount; ++i)
    if (kTables[i].name == name) return static_cast<TableId>(i);
  return std::nullopt;
}

std::string_view value_text(const Value& v) {
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  if (auto* s = std::get_if<std::string_view>(&v)) return *s;
  return {};
}
std::optional<double> value_real(const Value& v) {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return std::nullopt;
}
std::optional<int64_t> value_int(const Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* d = std::get_if<double>(&v)) return static_cast<int64_t>(*d);
  return std::nullopt;
}

size_t TableRows::columns() const {
  return kTables[static_cast<size_t>(table)].columns.size();
}

RowBatch::RowBatch() {
  for (size_t i = 0; i < kTableCount; ++i)
    tables[i].table = static_cast<TableId>(i);
}
size_t RowBatch::sample_rows() const {
  size_t n = 0;
  for (const auto& t : tables)
    if (t.table != TableId::Runs && t.table != TableId::GpuDevices) n += t.rows();
  return n;
}
void RowBatch::clear() {
  for (auto& t : tables)
    t.cells.clear();
}

std::optional<double> RunInfo::duration_s() const {
  if (!end_ms) return std::nullopt;
  return static_cast<double>(*end_ms - start_ms) / 1000.0;
}

void append_run_row(const RunInfo& r, TableRows& out) {
  auto& c = out.cells;
  c.emplace_back(r.run_id);
  c.emplace_back(r.task);
  c.emplace_back(r.command);
  c.emplace_back(r.host);
  c.push_back(text_or_null(r.cpu_model));
  c.emplace_back(r.start_ms);
  c.push_back(to_value(r.end_ms));
  c.push_back(to_value(r.duration_s()));
  c.push_back(to_value(r.exit_status));
  c.emplace_back(r.interval_ms);
  c.emplace_back(r.samples);
  c.push_back(to_value(r.total_energy_j));
  c.emplace_back(r.tags);
  c.emplace_back(r.version);
  c.emplace_back(r.summary);
}

RunInfo run_from_row(std::span<const Value> row) {
  if (row.size() != table(TableId::Runs).columns.size())
    throw std::runtime_error("runs row has the wrong number of columns");
  const RowView r{TableId::Runs, row};
  RunInfo out;
  out.run_id = value_text(r["run_id"]);
  out.task = value_text(r["task"]);
  out.command = value_text(r["command"]);
  out.host = value_text(r["host"]);
  out.cpu_model = value_text(r["cpu_model"]);
  out.start_ms = value_int(r["start_ms"]).value_or(0);
  out.end_ms = value_int(r["end_ms"]);
  out.exit_status = value_int(r["exit_status"]);
  out.interval_ms = value_real(r["interval_ms"]).value_or(0);
  out.samples = value_int(r["samples"]).value_or(0);
  out.total_energy_j = value_real(r["total_energy_j"]);
  out.tags = is_null(r["tags"]) ? "{}" : std::string(value_text(r["tags"]));
  out.version = value_text(r["wattscope_version"]);
  out.summary = is_null(r["summary"]) ? "{}" : std::string(value_text(r["summary"]));
  return out;
}

void append_device_row(std::string_view run_id, const GpuDevice& d, TableRows& out) {
  auto& c = out.cells;
  c.emplace_back(std::string(run_id));
  c.emplace_back(int64_t{d.gpu_index});
  c.emplace_back(d.vendor);
  c.push_back(text_or_null(d.uuid));
  c.push_back(text_or_null(d.name));
  c.push_back(text_or_null(d.pci_bus_id));
  c.push_back(to_value(d.mem_total_bytes));
  c.push_back(to_value(d.power_limit_w));
  c.push_back(to_value(d.clock_sm_max_mhz));
  c.push_back(to_value(d.clock_mem_max_mhz));
  c.emplace_back(d.energy_method);
  c.push_back(text_or_null(d.power_source));
}

GpuDevice device_from_row(std::span<const Value> row) {
  const RowView r{TableId::GpuDevices, row};
  GpuDevice d;
  d.gpu_index = static_cast<int>(value_int(r["gpu_index"]).value_or(0));
  d.vendor = value_text(r["vendor"]);
  d.uuid = value_text(r["uuid"]);
  d.name = value_text(r["name"]);
  d.pci_bus_id = value_text(r["pci_bus_id"]);
  d.mem_total_bytes = value_int(r["mem_total_bytes"]);
  d.power_limit_w = value_real(r["power_limit_w"]);
  d.clock_sm_max_mhz = value_int(r["clock_sm_max_mhz"]);
  d.clock_mem_max_mhz = value_int(r["clock_mem_max_mhz"]);
  d.energy_method = value_text(r["energy_method"]);
  d.power_source = value_text(r["power_source"]);
  return d;
}

// --- issue 15: phases and work
static std::string device_energy_json(const std::vector<std::pair<std::string, double>>& energy) {
  // Keys are device names wattscope made ("gpu0", "cpu_package"), so no escaping is needed; values in the classic
  // locale, with full precision so a phase's figure reads back exactly.
  std::string out = "{";
  for (const auto& [device, joules] : energy)
    if (std::isfinite(joules)) out += fmt::format("{}\"{}\":{}", out.size() > 1 ? "," : "", device, joules);
  return out + "}";
}

static void append_marker_rows(std::string_view run_id, const Frame& f, RowBatch& out) {
  const Value rid(run_id);
  auto& p = out.tables[static_cast<size_t>(TableId::Phases)].cells;
  // A begun phase is stored at once as an open row (end, energy and method NULL), so that a recorder killed with it
  // open leaves it for `repair`; its closed row comes later under the same key (run_id, phase_id) and replaces it (SQL
  // stores: INSERT OR REPLACE / ON DUPLICATE KEY; CSV: the later row of a key wins, docs/storage.md). Open rows go
  // before the closed ones, and one closed in the same frame needs none.
  // One row per phase; an open one (begun, not yet closed) leaves what only its end knows NULL.
  const auto row = [&](const PhaseRecord& ph, bool open) {
    p.push_back(rid);
    p.emplace_back(ph.phase_id);
    p.emplace_back(ph.name);
    p.push_back(to_value(ph.index));
    p.push_back(to_value(ph.parent));
    p.emplace_back(ph.start_ms);
    p.push_back(open ? Value() : Value(ph.end_ms));
    p.emplace_back(ph.start_tick);
    p.push_back(open ? Value() : Value(ph.end_tick));
    p.push_back(open ? Value() : to_value(ph.energy_j));
    p.push_back(open ? Value() : text_or_null(ph.energy_method));
    p.push_back(open ? Value() : Value(device_energy_json(ph.device_energy_j)));
    p.emplace_back(); // attributed_energy_j: attribution (issue 13) fills it where it runs
    p.emplace_back(int64_t{ph.closed_by_run_end ? 1 : 0});
    p.push_back(text_or_null(ph.start_edge));
    p.push_back(text_or_null(ph.end_edge));
    p.push_back(to_value(ph.energy_bound_j));
    p.emplace_back(int64_t{ph.closed_by_repair ? 1 : 0});
    p.push_back(to_value(ph.gpu_temp_start_c));
    p.push_back(open ? Value() : to_value(ph.gpu_temp_end_c));
  };
  for (const auto& ph : f.phases_begun)
    if (std::none_of(f.phases.begin(), f.phases.end(), [&](const PhaseRecord& c) { return c.phase_id == ph.phase_id; }))
      row(ph, true);
  for (const auto& ph : f.phases)
    row(ph, false);
  auto& w = out.tables[static_cast<size_t>(TableId::Work)].cells;
  for (const auto& wr : f.work) {
    w.push_back(rid);
    w.emplace_back(wr.seq);
    w.emplace_back(wr.ts_ms);
    w.emplace_back(wr.amount);
    w.emplace_back(wr.unit);
    w.push_back(to_value(wr.phase_id));
    w.push_back(to_value(wr.total));
  }
}
// --- end issue 15

static void append_event_rows(std::string_view run_id, const Frame& f, RowBatch& out) {
  const Value rid(run_id);
  auto& e = out.tables[static_cast<size_t>(TableId::Events)].cells;
  for (const auto& ev : f.events) {
    e.push_back(rid);
    e.emplace_back(ev.seq);
    e.emplace_back(ev.ts_ms);
    e.emplace_back(ev.kind);
    e.push_back(text_or_null(ev.source));
    e.push_back(text_or_null(ev.detail));
  }
}

void append_frame_rows(std::string_view run_id, const Frame& f, RowBatch& out) {
  if (f.rows_only) return append_process_rows(run_id, f, out);
  const Value rid(run_id);
  if (f.markers_only) { // the run's end closing phases: no samples, only markers and events
    append_marker_rows(run_id, f, out);
    append_event_rows(run_id, f, out);
    return;
  }
  {
    auto& c = out.tables[static_cast<size_t>(TableId::CpuSamples)].cells;
    c.push_back(rid);
    c.emplace_back(f.tick);
    c.emplace_back(f.ts_ms);
    for (const auto& m : kCpuMetrics)
      c.push_back(metric_value(m, f.cpu));
    c.push_back(f.cpu.power_method ? Value(std::string_view(f.cpu.power_method)) : Value());
  }
  {
    auto& c = out.tables[static_cast<size_t>(TableId::CpuPowerSamples)].cells;
    for (const auto& z : f.cpu.zones) {
      c.push_back(rid);
      c.emplace_back(f.tick);
      c.emplace_back(f.ts_ms);
      c.emplace_back(z.zone);
      c.push_back(to_value(z.socket));
      c.emplace_back(z.domain);
      for (const auto& m : kZoneMetrics)
        c.push_back(metric_value(m, z));
    }
  }
  {
    auto& c = out.tables[static_cast<size_t>(TableId::CpuCoreSamples)].cells;
    for (size_t core = 0; f.cpu.core_rows && core < f.cpu.core_util_pct.size(); ++core) {
      c.push_back(rid);
      c.emplace_back(f.tick);
      c.emplace_back(f.ts_ms);
      c.emplace_back(static_cast<int64_t>(core));
      c.push_back(to_value(f.cpu.core_util_pct[core]));
    }
  }
  append_marker_rows(run_id, f, out);
  auto& g = out.tables[static_cast<size_t>(TableId::GpuSamples)].cells;
  for (const auto& s : f.gpus) {
    g.push_back(rid);
    g.emplace_back(f.tick);
    g.emplace_back(f.ts_ms);
    g.emplace_back(int64_t{s.gpu_index});
    for (const auto& m : kGpuMetrics)
      g.push_back(metric_value(m, s));
  }
  for (const auto& d : f.device_rows)
    append_device_row(run_id, d, out.tables[static_cast<size_t>(TableId::GpuDevices)]);
  append_process_rows(run_id, f, out);
  append_event_rows(run_id, f, out);
}

std::vector<std::string_view> gpu_samples_named_columns() {
  std::vector<std::string_view> out;
  for (const auto& c : kGpuCols) {
    out.push_back(c.name);
    if (c.name == "gpu_index") out.insert(out.end(), std::begin(kGpuIdentityColumns), std::end(kGpuIdentityColumns));
  }
  return out;
}

std::string gpu_samples_named_select(char quote) {
  auto q = [quote](std::string_view name) { return fmt::format("{0}{1}{0}", quote, name); };
  auto identity = [](std::string_view name) {
    return std::find(std::begin(kGpuIdentityColumns), std::end(kGpuIdentityColumns), name) !=
           std::end(kGpuIdentityColumns);
  };
  std::string cols;
  for (const auto& c : gpu_samples_named_columns())
    cols += fmt::format("{}{}.{}", cols.empty() ? "" : ", ", identity(c) ? "d" : "s", q(c));
  return fmt::format("SELECT {} FROM {} s LEFT JOIN {} d ON d.{} = s.{} AND d.{} = s.{}", cols, q("gpu_samples"),
                     q("gpu_devices"), q("run_id"), q("run_id"), q("gpu_index"), q("gpu_index"));
}

const Table& gpu_sample_rows_table() {
  static const Table t{kGpuSampleRowsTable, kGpuRowCols, kGpuRowKey, {}};
  return t;
}

std::string gpu_samples_view_select(char quote) {
  static_assert(std::size(kGpuRowCols) == std::size(kGpuCols));
  auto q = [quote](std::string_view name) { return fmt::format("{0}{1}{0}", quote, name); };
  std::string cols = fmt::format("k.{0} AS {0}", q("run_id"));
  for (size_t i = 1; i < std::size(kGpuCols); ++i)
    cols += fmt::format(", s.{0} AS {0}", q(kGpuCols[i].name));
  return fmt::format("SELECT {} FROM {} s JOIN {} k ON k.{} = s.{}", cols, q(kGpuSampleRowsTable), q(kRunKeysTable),
                     q("run_key"), q("run_key"));
}

std::vector<std::string> gpu_rows_keying_sql(std::string_view insert_ignore, char quote) {
  auto q = [quote](std::string_view name) { return fmt::format("{0}{1}{0}", quote, name); };
  const Table& rows = gpu_sample_rows_table();
  std::string into = q("run_key"), from = fmt::format("k.{}", q("run_key"));
  for (size_t i = 1; i < rows.columns.size(); ++i) {
    into += fmt::format(", {}", q(rows.columns[i].name));
    from += fmt::format(", s.{}", q(rows.columns[i].name));
  }
  return {fmt::format("{} INTO {} ({}) SELECT {} FROM {} ORDER BY {}, {}", insert_ignore, q(kRunKeysTable), q("run_id"),
                      q("run_id"), q("runs"), q("start_ms"), q("run_id")),
          fmt::format("{} INTO {} ({}) SELECT DISTINCT {} FROM {} ORDER BY {}", insert_ignore, q(kRunKeysTable),
                      q("run_id"), q("run_id"), q("gpu_samples"), q("run_id")),
          fmt::format("{} INTO {} ({}) SELECT {} FROM {} s JOIN {} k ON k.{} = s.{} ORDER BY k.{}, s.{}, s.{}",
                      insert_ignore, q(kGpuSampleRowsTable), into, from, q("gpu_samples"), q(kRunKeysTable),
                      q("run_id"), q("run_id"), q("run_key"), q("tick"), q("gpu_index"))};
}

// ---- attribution (issue 13) ----
void append_process_rows(std::string_view run_id, const Frame& f, RowBatch& out) {
  if (!f.processes) return;
  const Value rid(run_id);
  auto& pr = out.tables[static_cast<size_t>(TableId::Processes)].cells;
  for (const auto& r : f.processes->rows) {
    pr.push_back(rid);
    pr.emplace_back(r.id.pid);
    pr.emplace_back(r.id.start_time);
    pr.push_back(to_value(r.ppid));
    pr.push_back(text_or_null(r.comm));
    pr.push_back(text_or_null(r.cmdline));
    pr.push_back(to_value(r.uid));
    pr.push_back(text_or_null(r.unit));
    pr.push_back(text_or_null(r.unit_kind));
    pr.emplace_back(r.first_tick);
    pr.push_back(to_value(r.last_tick));
  }
  auto& ps = out.tables[static_cast<size_t>(TableId::ProcessSamples)].cells;
  for (const auto& p : f.processes->procs) {
    if (!p.sampled) continue;
    ps.push_back(rid);
    ps.emplace_back(f.tick);
    ps.emplace_back(f.ts_ms);
    ps.emplace_back(p.id.pid);
    ps.emplace_back(p.id.start_time);
    ps.push_back(to_value(p.cpu_pct));
    ps.push_back(to_value(p.rss_bytes));
    ps.push_back(to_value(p.pss_bytes));
    ps.push_back(to_value(p.uss_bytes));
    ps.push_back(to_value(p.read_bytes_per_s));
    ps.push_back(to_value(p.write_bytes_per_s));
    ps.push_back(to_value(p.cpu_energy_j));
  }
  auto& pg = out.tables[static_cast<size_t>(TableId::ProcessGpuSamples)].cells;
  for (const auto& g : f.processes->gpu_procs) {
    pg.push_back(rid);
    pg.emplace_back(f.tick);
    pg.emplace_back(f.ts_ms);
    pg.emplace_back(g.id.pid);
    pg.emplace_back(g.id.start_time);
    pg.emplace_back(int64_t{g.gpu_index});
    pg.push_back(to_value(g.mem_used_bytes));
    pg.push_back(to_value(g.sm_pct));
    pg.push_back(to_value(g.mem_pct));
    pg.push_back(to_value(g.enc_pct));
    pg.push_back(to_value(g.dec_pct));
    pg.push_back(to_value(g.power_w));
    pg.push_back(to_value(g.energy_j));
  }
}
// ---- end attribution ----

std::string new_run_id(int64_t start_ms) {
  std::random_device rd;
  uint32_t r = rd();
  std::string t = compact_utc(start_ms); // 20261121T120301Z
  return fmt::format("{}-{}-{:08x}", t.substr(0, 8), t.substr(9, 6), r);
}

} // namespace wattscope
