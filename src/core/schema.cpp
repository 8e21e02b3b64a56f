#include "core/schema.hpp"

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

constexpr C kCpuCols[] = {{"run_id", T},          {"tick", I},           {"ts_ms", I},
                          {"util_pct", R},        {"mem_used_bytes", I}, {"mem_total_bytes", I},
                          {"package_power_w", R}, {"dram_power_w", R},   {"package_energy_j", R},
                          {"dram_energy_j", R},   {"power_method", T}};
constexpr std::string_view kTickKey[] = {"run_id", "tick"};

constexpr C kCoreCols[] = {{"run_id", T}, {"tick", I}, {"ts_ms", I}, {"core", I}, {"util_pct", R}};
constexpr std::string_view kCoreKey[] = {"run_id", "tick", "core"};

constexpr C kZoneCols[] = {{"run_id", T}, {"tick", I},   {"ts_ms", I},   {"zone", T},
                           {"socket", I}, {"domain", T}, {"power_w", R}, {"energy_j", R}};
constexpr std::string_view kZoneKey[] = {"run_id", "tick", "domain"};

constexpr C kGpuCols[] = {{"run_id", T},
                          {"tick", I},
                          {"ts_ms", I},
                          {"gpu_index", I},
                          {"uuid", T},
                          {"name", T},
                          {"vendor", T},
                          {"power_w", R},
                          {"power_avg_w", R},
                          {"energy_j", R},
                          {"util_gpu_pct", R},
                          {"util_mem_pct", R},
                          {"mem_used_bytes", I},
                          {"mem_total_bytes", I},
                          {"temp_gpu_c", R},
                          {"temp_mem_c", R},
                          {"clock_sm_mhz", I},
                          {"clock_gfx_mhz", I},
                          {"clock_mem_mhz", I},
                          {"pcie_link_width", I},
                          {"pcie_link_width_max", I},
                          {"pcie_tx_bytes_per_s", I},
                          {"pcie_rx_bytes_per_s", I},
                          {"fan_pct", R},
                          {"pstate", I},
                          {"power_limit_w", R},
                          {"throttle_reasons", I}};
constexpr std::string_view kGpuKey[] = {"run_id", "tick", "gpu_index"};

constexpr C kEventCols[] = {{"run_id", T}, {"seq", I}, {"ts_ms", I}, {"kind", T}, {"source", T}, {"detail", T}};
constexpr std::string_view kEventKey[] = {"run_id", "seq"};

const Table kTables[] = {
    {"runs", kRunCols, kRunKey, kRunIndex},         {"gpu_devices", kDeviceCols, kDeviceKey, {}},
    {"cpu_samples", kCpuCols, kTickKey, {}},        {"cpu_core_samples", kCoreCols, kCoreKey, {}},
    {"cpu_power_samples", kZoneCols, kZoneKey, {}}, {"gpu_samples", kGpuCols, kGpuKey, {}},
    {"events", kEventCols, kEventKey, {}},
};
static_assert(std::size(kTables) == kTableCount, "one Table per TableId");

Value opt(const OptF& v) {
  return v ? Value(*v) : Value();
}
Value opt(const OptI& v) {
  return v ? Value(*v) : Value();
}
Value text_or_null(std::string_view s) {
  return s.empty() ? Value() : Value(std::string(s));
}
} // namespace

const Table& table(TableId id) {
  return kTables[static_cast<size_t>(id)];
}
std::span<const Table> all_tables() {
  return kTables;
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
  c.push_back(opt(r.end_ms));
  c.push_back(opt(r.duration_s()));
  c.push_back(opt(r.exit_status));
  c.emplace_back(r.interval_ms);
  c.emplace_back(r.samples);
  c.push_back(opt(r.total_energy_j));
  c.emplace_back(r.tags);
  c.emplace_back(r.version);
  c.emplace_back(r.summary);
}

RunInfo run_from_row(std::span<const Value> row) {
  if (row.size() != kTables[0].columns.size()) throw std::runtime_error("runs row has the wrong number of columns");
  RunInfo r;
  r.run_id = value_text(row[0]);
  r.task = value_text(row[1]);
  r.command = value_text(row[2]);
  r.host = value_text(row[3]);
  r.cpu_model = value_text(row[4]);
  r.start_ms = value_int(row[5]).value_or(0);
  r.end_ms = value_int(row[6]);
  r.exit_status = value_int(row[8]);
  r.interval_ms = value_real(row[9]).value_or(0);
  r.samples = value_int(row[10]).value_or(0);
  r.total_energy_j = value_real(row[11]);
  r.tags = is_null(row[12]) ? "{}" : std::string(value_text(row[12]));
  r.version = value_text(row[13]);
  r.summary = is_null(row[14]) ? "{}" : std::string(value_text(row[14]));
  return r;
}

void append_device_row(std::string_view run_id, const GpuDevice& d, TableRows& out) {
  auto& c = out.cells;
  c.emplace_back(std::string(run_id));
  c.emplace_back(int64_t{d.gpu_index});
  c.emplace_back(d.vendor);
  c.push_back(text_or_null(d.uuid));
  c.push_back(text_or_null(d.name));
  c.push_back(text_or_null(d.pci_bus_id));
  c.push_back(opt(d.mem_total_bytes));
  c.push_back(opt(d.power_limit_w));
  c.push_back(opt(d.clock_sm_max_mhz));
  c.push_back(opt(d.clock_mem_max_mhz));
  c.emplace_back(d.energy_method);
  c.push_back(text_or_null(d.power_source));
}

GpuDevice device_from_row(std::span<const Value> row) {
  GpuDevice d;
  d.gpu_index = static_cast<int>(value_int(row[1]).value_or(0));
  d.vendor = value_text(row[2]);
  d.uuid = value_text(row[3]);
  d.name = value_text(row[4]);
  d.pci_bus_id = value_text(row[5]);
  d.mem_total_bytes = value_int(row[6]);
  d.power_limit_w = value_real(row[7]);
  d.clock_sm_max_mhz = value_int(row[8]);
  d.clock_mem_max_mhz = value_int(row[9]);
  d.energy_method = value_text(row[10]);
  d.power_source = value_text(row[11]);
  return d;
}

void append_frame_rows(std::string_view run_id, const Frame& f, const std::vector<GpuDevice>& devices, RowBatch& out) {
  const Value rid(run_id);
  {
    auto& c = out.tables[static_cast<size_t>(TableId::CpuSamples)].cells;
    c.push_back(rid);
    c.emplace_back(f.tick);
    c.emplace_back(f.ts_ms);
    c.push_back(opt(f.cpu.util_pct));
    c.push_back(opt(f.cpu.mem_used_bytes));
    c.push_back(opt(f.cpu.mem_total_bytes));
    c.push_back(opt(f.cpu.package_power_w));
    c.push_back(opt(f.cpu.dram_power_w));
    c.push_back(opt(f.cpu.package_energy_j));
    c.push_back(opt(f.cpu.dram_energy_j));
    c.push_back(f.cpu.power_method ? Value(std::string_view(f.cpu.power_method)) : Value());
  }
  {
    auto& c = out.tables[static_cast<size_t>(TableId::CpuPowerSamples)].cells;
    for (const auto& z : f.cpu.zones) {
      c.push_back(rid);
      c.emplace_back(f.tick);
      c.emplace_back(f.ts_ms);
      c.emplace_back(z.zone);
      c.push_back(opt(z.socket));
      c.emplace_back(z.domain);
      c.push_back(opt(z.power_w));
      c.push_back(opt(z.energy_j));
    }
  }
  {
    auto& c = out.tables[static_cast<size_t>(TableId::CpuCoreSamples)].cells;
    for (size_t core = 0; core < f.cpu.core_util_pct.size(); ++core) {
      c.push_back(rid);
      c.emplace_back(f.tick);
      c.emplace_back(f.ts_ms);
      c.emplace_back(static_cast<int64_t>(core));
      c.push_back(opt(f.cpu.core_util_pct[core]));
    }
  }
  auto& g = out.tables[static_cast<size_t>(TableId::GpuSamples)].cells;
  for (const auto& s : f.gpus) {
    const GpuDevice* dev = nullptr;
    for (const auto& d : devices)
      if (d.gpu_index == s.gpu_index) dev = &d;
    g.push_back(rid);
    g.emplace_back(f.tick);
    g.emplace_back(f.ts_ms);
    g.emplace_back(int64_t{s.gpu_index});
    g.push_back(dev && !dev->uuid.empty() ? Value(std::string_view(dev->uuid)) : Value());
    g.push_back(dev && !dev->name.empty() ? Value(std::string_view(dev->name)) : Value());
    g.push_back(dev && !dev->vendor.empty() ? Value(std::string_view(dev->vendor)) : Value());
    g.push_back(opt(s.power_w));
    g.push_back(opt(s.power_avg_w));
    g.push_back(opt(s.energy_j));
    g.push_back(opt(s.util_gpu_pct));
    g.push_back(opt(s.util_mem_pct));
    g.push_back(opt(s.mem_used_bytes));
    g.push_back(opt(s.mem_total_bytes));
    g.push_back(opt(s.temp_gpu_c));
    g.push_back(opt(s.temp_mem_c));
    g.push_back(opt(s.clock_sm_mhz));
    g.push_back(opt(s.clock_gfx_mhz));
    g.push_back(opt(s.clock_mem_mhz));
    g.push_back(opt(s.pcie_link_width));
    g.push_back(opt(s.pcie_link_width_max));
    g.push_back(opt(s.pcie_tx_bytes_per_s));
    g.push_back(opt(s.pcie_rx_bytes_per_s));
    g.push_back(opt(s.fan_pct));
    g.push_back(opt(s.pstate));
    g.push_back(opt(s.power_limit_w));
    g.push_back(opt(s.throttle_reasons));
  }
  for (const auto& d : f.device_rows)
    append_device_row(run_id, d, out.tables[static_cast<size_t>(TableId::GpuDevices)]);
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

std::string new_run_id(int64_t start_ms) {
  std::random_device rd;
  uint32_t r = rd();
  std::string t = compact_utc(start_ms); // 20261121T120301Z
  return fmt::format("{}-{}-{:08x}", t.substr(0, 8), t.substr(9, 6), r);
}

} // namespace wattscope
