#include "server/live.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <span>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/json_opt.hpp"
#include "core/metrics.hpp"
#include "core/stored_json.hpp"
#include "core/tag_filter.hpp"
#include "core/time_util.hpp"
#include "processes/procfs.hpp"
#include "runs/run_view.hpp"
#include "server/static_files.hpp" // gzip_compress (issue 32)
#include "wattscope/version.hpp"

namespace wattscope {

namespace {

// ---- simulate (issue 19): the run's tags say whether its GPUs are simulated (--simulate), and by what scenario
std::string run_tag(const RunInfo& r, const char* key) {
  return json_string(run_tags_json(r), key);
}
// ---- end simulate

float f_or_nan(const OptF& v) {
  return v ? static_cast<float>(*v) : NAN;
}

// Families written once each, samples appended; a missing value writes nothing (absent, never 0).
class Exposition {
public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    current_ = name;
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(std::string_view labels, double v, std::string_view suffix = "") {
    if (!std::isfinite(v)) return;
    out_ += current_;
    out_ += suffix;
    if (!labels.empty()) out_ += "{" + std::string(labels) + "}";
    out_ += fmt::format(" {}\n", v); // fmt is locale-independent
  }
  void sample(std::string_view labels, const OptF& v, double scale = 1) {
    if (v) sample(labels, scaled(*v, scale));
  }
  void sample(std::string_view labels, const OptI& v, double scale = 1) {
    if (v) sample(labels, scaled(static_cast<double>(*v), scale));
  }
  // issue 32: 70 % x 0.01 is 0.7000000000000001, while 70 / 100 is the double nearest 0.7, which the shortest
  // round-trip format then writes as 0.7. A scale that is 1/N divides by N.
  static double scaled(double v, double scale) {
    if (scale > 0 && scale < 1) {
      const double n = std::round(1 / scale);
      if (std::abs(n * scale - 1) < 1e-12) return v / n;
    }
    return v * scale;
  }
  std::string take() { return std::move(out_); }

private:
  std::string out_;
  std::string current_;
};

template <class S> nlohmann::json metric_json(const MetricDef<S>& m, const S& s) {
  if (m.real) return opt(s.*m.real);
  return opt(s.*m.integer);
}

// A GPU in /api/v1/current and the event stream: identity, then every registry metric under its column name.
nlohmann::json gpu_json(const GpuSample& s, const GpuDevice* d) {
  nlohmann::json j = {{"index", s.gpu_index},
                      {"uuid", d ? d->uuid : ""},
                      {"name", d ? d->name : ""},
                      {"vendor", d ? d->vendor : ""},
                      {"energy_method", d ? d->energy_method : ""}};
  for (const auto& m : kGpuMetrics)
    j[std::string(m.info.column)] = metric_json(m, s);
  // issue 33: the values carried from an earlier read (a costly call read on a schedule), each with its age in ms
  nlohmann::json age = nlohmann::json::object();
  for (const auto& [i, ms] : s.age_ms)
    if (i < kGpuMetrics.size()) age[std::string(kGpuMetrics[i].info.column)] = ms;
  j["age_ms"] = std::move(age);
  return j;
}

// "power_w" -> "power_peak_w": the peak sits before the unit, as the column's unit stays last.
std::string peak_key(std::string_view column) {
  const auto us = column.rfind('_');
  if (us == std::string_view::npos) return std::string(column) + "_peak";
  return std::string(column.substr(0, us)) + "_peak" + std::string(column.substr(us));
}

// The metrics kept in the history ring, in ring order: CPU ones first, then per GPU.
template <class S> std::vector<const MetricDef<S>*> history_metrics(std::span<const MetricDef<S>> all) {
  std::vector<const MetricDef<S>*> out;
  for (const auto& m : all)
    if (m.info.flags & kHistory) out.push_back(&m);
  return out;
}
const std::vector<const MetricDef<CpuSample>*>& cpu_history() {
  static const auto v = history_metrics(kCpuMetrics);
  return v;
}
const std::vector<const MetricDef<GpuSample>*>& gpu_history() {
  static const auto v = history_metrics(kGpuMetrics);
  return v;
}

// The exported registry metrics grouped by Prometheus family, in the order each family first appears; each family's
// members in registry order. Made once.
template <class S> std::vector<std::vector<const MetricDef<S>*>> prom_families(std::span<const MetricDef<S>> all) {
  std::vector<std::vector<const MetricDef<S>*>> out;
  for (const auto& m : all) {
    if (m.info.prom_family.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const auto& fam) { return fam.front()->info.prom_family == m.info.prom_family; });
    if (it == out.end())
      out.push_back({&m});
    else
      it->push_back(&m);
  }
  return out;
}
const std::vector<std::vector<const MetricDef<GpuSample>*>>& gpu_families() {
  static const auto v = prom_families(kGpuMetrics);
  return v;
}
const std::vector<std::vector<const MetricDef<CpuSample>*>>& cpu_families() {
  static const auto v = prom_families(kCpuMetrics);
  return v;
}

// ---- issue 12: what the fine ring keeps for the live advice beyond the history: kAdvice floats (those not already
// history values) and kExact doubles.
template <class S> std::vector<const MetricDef<S>*> advice_metrics(std::span<const MetricDef<S>> all, bool exact) {
  std::vector<const MetricDef<S>*> out;
  for (const auto& m : all)
    if ((m.info.flags & kAdvice) && !(m.info.flags & kHistory) && ((m.info.flags & kExact) != 0) == exact)
      out.push_back(&m);
  return out;
}
const std::vector<const MetricDef<CpuSample>*>& cpu_advice() {
  static const auto v = advice_metrics(kCpuMetrics, false);
  return v;
}
const std::vector<const MetricDef<GpuSample>*>& gpu_advice() {
  static const auto v = advice_metrics(kGpuMetrics, false);
  return v;
}
const std::vector<const MetricDef<CpuSample>*>& cpu_exact() {
  static const auto v = advice_metrics(kCpuMetrics, true);
  return v;
}
const std::vector<const MetricDef<GpuSample>*>& gpu_exact() {
  static const auto v = advice_metrics(kGpuMetrics, true);
  return v;
}

// Where a metric sits in a fine-ring point: kHistory floats (CPU, then GPU groups), kAdvice floats (CPU, then GPU
// groups) or kExact doubles (CPU, then GPU groups); `index` within its group. Missing: not in the ring.
struct FineColumn {
  enum Kind { History, Advice, Exact, Missing } kind = Missing;
  size_t index = 0;
};
template <class S>
FineColumn fine_column(std::string_view column, const std::vector<const MetricDef<S>*>& history,
                       const std::vector<const MetricDef<S>*>& advice, const std::vector<const MetricDef<S>*>& exact) {
  for (const auto& [list, kind] : {std::pair{&history, FineColumn::History}, std::pair{&advice, FineColumn::Advice},
                                   std::pair{&exact, FineColumn::Exact}})
    for (size_t i = 0; i < list->size(); ++i)
      if ((*list)[i]->info.column == column) return {kind, i};
  return {};
}

// The advice's GpuPoint fields and the registry columns they are read from.
struct GpuPointField {
  std::string_view column;
  OptF advice::GpuPoint::*real;
  OptI advice::GpuPoint::*integer;
};
constexpr GpuPointField kGpuPointFields[] = {
    {"power_w", &advice::GpuPoint::power_w, nullptr},
    {"energy_j", &advice::GpuPoint::energy_j, nullptr},
    {"util_gpu_pct", &advice::GpuPoint::util_pct, nullptr},
    {"mem_used_bytes", nullptr, &advice::GpuPoint::mem_used_bytes},
    {"pcie_tx_bytes_per_s", nullptr, &advice::GpuPoint::pcie_tx_bytes_per_s},
    {"pcie_rx_bytes_per_s", nullptr, &advice::GpuPoint::pcie_rx_bytes_per_s},
    {"throttle_reasons", nullptr, &advice::GpuPoint::throttle_reasons},
    {"clock_sm_mhz", nullptr, &advice::GpuPoint::clock_sm_mhz},
    {"temp_gpu_c", &advice::GpuPoint::temp_c, nullptr},
    {"power_limit_w", &advice::GpuPoint::power_limit_w, nullptr},
};
// ---- end issue 12

// This process's start in seconds since 1970: /proc/self/stat's start (clock ticks after boot) plus /proc/stat's btime.
double process_start_seconds() {
  std::string self, stat;
  PidStat st;
  if (!read_small_file("/proc/self/stat", self) || !parse_pid_stat(self, st)) return 0;
  if (!read_small_file("/proc/stat", stat)) return 0;
  const size_t at = stat.find("\nbtime ");
  if (at == std::string::npos) return 0;
  const double btime = std::strtod(stat.c_str() + at + 7, nullptr);
  return btime + static_cast<double>(st.start_time) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// getrusage for CPU time and /proc/self/statm's resident pages, into a stack buffer: the per-frame path allocates
// nothing (tests/unit/test_live_alloc.cpp). A value that cannot be read stays -1 (not written).
ProcessSelf read_process_self() {
  ProcessSelf out;
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0)
    out.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buf[128];
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n > 0) {
      buf[n] = '\0';
      char* end = nullptr;
      std::strtoll(buf, &end, 10); // size
      const long long resident = std::strtoll(end, nullptr, 10);
      static const long page = ::sysconf(_SC_PAGESIZE);
      if (resident > 0) out.resident_bytes = static_cast<double>(resident) * static_cast<double>(page);
    }
  }
  return out;
}

} // namespace

LiveState::LiveState(std::chrono::nanoseconds retain, std::chrono::nanoseconds interval)
    : process_start_s_(process_start_seconds()) {
  using std::chrono::milliseconds;
  const auto step = std::max<std::chrono::nanoseconds>(
      {interval, retain / static_cast<int64_t>(kCoarsePoints), std::chrono::milliseconds(1)});
  coarse_step_ = std::chrono::ceil<milliseconds>(step);
  coarse_cap_ = static_cast<size_t>(retain / coarse_step_) + 1;
}

size_t LiveState::width() const { // under ring_mu_
  return cpu_history().size() + gpu_history().size() * ring_gpus_.size();
}
size_t LiveState::advice_width() const { // under ring_mu_
  return cpu_advice().size() + gpu_advice().size() * ring_gpus_.size();
}
size_t LiveState::exact_width() const { // under ring_mu_
  return cpu_exact().size() + gpu_exact().size() * ring_gpus_.size();
}

void LiveState::Ring::reset(size_t capacity, size_t w, bool coarse, size_t exact_w, size_t gpus) {
  cap = capacity;
  width = w;
  exact_width = exact_w;
  head = size = 0;
  ts.assign(cap, 0);
  mean.assign(cap * w, NAN);
  peak.assign(coarse ? cap * w : 0, NAN);
  n.assign(coarse ? cap : 0, 0);
  exact.assign(cap * exact_w, NAN);
  present.assign(cap * gpus, 0);
  // assign keeps an earlier run's larger buffers: give back what this one does not need.
  ts.shrink_to_fit();
  mean.shrink_to_fit();
  peak.shrink_to_fit();
  n.shrink_to_fit();
  exact.shrink_to_fit();
  present.shrink_to_fit();
}

size_t LiveState::Ring::add() {
  const size_t slot = head;
  head = (head + 1) % cap;
  size = std::min(size + 1, cap);
  return slot;
}

size_t LiveState::history_bytes() const {
  return history_bytes_.load(std::memory_order_relaxed);
}

size_t LiveState::ring_bytes() const { // under ring_mu_
  auto bytes = [](const Ring& r) {
    return r.ts.capacity() * sizeof(int64_t) + (r.mean.capacity() + r.peak.capacity()) * sizeof(float) +
           r.n.capacity() * sizeof(uint32_t) + r.exact.capacity() * sizeof(double) + r.present.capacity();
  };
  return bytes(fine_) + bytes(coarse_) + bucket_sum_.capacity() * sizeof(double) +
         bucket_n_.capacity() * sizeof(uint32_t) + bucket_peak_.capacity() * sizeof(float);
}

void LiveState::flush_bucket() {
  if (bucket_frames_ == 0) return;
  const size_t slot = coarse_.add();
  const size_t w = coarse_.width;
  coarse_.ts[slot] = bucket_ts_ms_;
  coarse_.n[slot] = bucket_frames_;
  for (size_t k = 0; k < w; ++k) {
    coarse_.mean[slot * w + k] = bucket_n_[k] ? static_cast<float>(bucket_sum_[k] / bucket_n_[k]) : NAN;
    coarse_.peak[slot * w + k] = bucket_n_[k] ? bucket_peak_[k] : NAN;
  }
  std::fill(bucket_sum_.begin(), bucket_sum_.end(), 0.0);
  std::fill(bucket_n_.begin(), bucket_n_.end(), 0);
  std::fill(bucket_peak_.begin(), bucket_peak_.end(), -INFINITY);
  bucket_frames_ = 0;
}

void LiveState::set_run(const RunInfo& run, std::vector<GpuDevice> devices) {
  {
    std::lock_guard ring(ring_mu_);
    ring_gpus_.clear();
    for (const auto& d : devices)
      ring_gpus_.push_back(d.gpu_index);
    const size_t w = width();
    // The fine ring also keeps what the live advice reads (issue 12); the coarse ring only the history.
    fine_.reset(kFinePoints, w + advice_width(), false, exact_width(), ring_gpus_.size());
    coarse_.reset(coarse_cap_, w, true);
    bucket_sum_.assign(w, 0.0);
    bucket_n_.assign(w, 0);
    bucket_peak_.assign(w, -INFINITY);
    bucket_frames_ = 0;
    history_bytes_.store(ring_bytes(), std::memory_order_relaxed);
  }
  board_builder_ = std::make_unique<ProcessBoardBuilder>(process_cap_, run.host, process_series_);
  std::lock_guard lock(mu_);
  run_ = run;
  devices_ = std::move(devices);
  board_.reset();
  gpu_energy_j_.clear(); // energies are since the run's start
  for (const auto& d : devices_)
    gpu_energy_j_[d.gpu_index] = std::nullopt;
  cpu_package_energy_j_.reset();
  cpu_dram_energy_j_.reset();
  cpu_power_method_.clear();
}

void LiveState::push(const std::shared_ptr<const Frame>& f) {
  // A process scan (at most once a second): its series are sorted and formatted here, under no lock.
  std::shared_ptr<const ProcessBoard> board;
  if (f->processes && !f->rows_only && board_builder_) board = board_builder_->build(*f->processes);
  const ProcessSelf self = read_process_self();
  {
    std::lock_guard lock(mu_);
    if (board) board_ = std::move(board);
    self_ = self;
    // Device facts settled on the first tick (energy method, power source) replace the enumerated ones.
    // Issue 31: a device not yet known is a GPU whose library became ready after the run began.
    for (const auto& d : f->device_rows) {
      auto mine = std::find_if(devices_.begin(), devices_.end(),
                               [&](const GpuDevice& known) { return known.gpu_index == d.gpu_index; });
      if (mine != devices_.end())
        *mine = d;
      else
        devices_.push_back(d);
    }
    latest_ = f;
    for (const auto& g : f->gpus)
      if (g.energy_j) gpu_energy_j_[g.gpu_index] = *g.energy_j;
    if (f->cpu.package_energy_j) {
      cpu_package_energy_j_ = f->cpu.package_energy_j;
      cpu_power_method_ = f->cpu.power_method ? f->cpu.power_method : "";
    }
    if (f->cpu.dram_energy_j) cpu_dram_energy_j_ = f->cpu.dram_energy_j;
    // Work reported (markers, --scrape): a counter per unit, at most kMaxWorkUnits units (a unit past them is
    // summed under "other", so a workload that invents units cannot grow the scrape).
    for (const auto& w : f->work) {
      auto it = work_total_.find(w.unit);
      if (it == work_total_.end() && work_total_.size() >= kMaxWorkUnits) it = work_total_.try_emplace("other").first;
      if (it == work_total_.end()) it = work_total_.try_emplace(w.unit).first;
      it->second += w.amount;
    }
    if (!work_total_.empty() && (work_marks_.empty() || f->ts_ms - work_marks_.back().ts_ms >= 1000)) {
      work_marks_.push_back({f->ts_ms, energy_so_far_locked(), work_total_});
      while (work_marks_.size() > static_cast<size_t>(kWorkWindowS) + 1)
        work_marks_.pop_front();
    }
    ++seq_;
    for (const auto& e : f->events) {
      if (e.kind == "xid" && e.source.starts_with("gpu")) // issue 32: counted per GPU for /metrics
        ++xid_errors_[std::atoi(e.source.c_str() + 3)];
      recent_events_.push_back(e);
      if (recent_events_.size() > 50) recent_events_.pop_front();
    }
  }
  cv_.notify_all();
  // The run's end (the last process rows, phases closed) carries no samples: no history point.
  if (f->rows_only || f->markers_only) return;
  std::lock_guard ring(ring_mu_);
  if (fine_.cap == 0) return;     // no run set yet
  const size_t w = coarse_.width; // the history values; the fine ring's point goes on with the advice's
  const size_t slot = fine_.add();
  fine_.ts[slot] = f->ts_ms;
  // Written in place: a push allocates nothing, for the history nor for the advice (issue 12).
  float* out = &fine_.mean[slot * fine_.width];
  double* exact = fine_.exact.data() + slot * fine_.exact_width;
  uint8_t* present = fine_.present.data() + slot * ring_gpus_.size();
  size_t k = 0, a = w, e = 0;
  for (const auto* m : cpu_history())
    out[k++] = f_or_nan(m->get(f->cpu));
  for (const auto* m : cpu_advice())
    out[a++] = f_or_nan(m->get(f->cpu));
  for (const auto* m : cpu_exact())
    exact[e++] = m->get(f->cpu).value_or(NAN);
  for (size_t g = 0; g < ring_gpus_.size(); ++g) {
    const GpuSample* s = nullptr;
    for (const auto& gs : f->gpus)
      if (gs.gpu_index == ring_gpus_[g]) s = &gs;
    present[g] = s != nullptr;
    for (const auto* m : gpu_history())
      out[k++] = s ? f_or_nan(m->get(*s)) : NAN;
    for (const auto* m : gpu_advice())
      out[a++] = s ? f_or_nan(m->get(*s)) : NAN;
    for (const auto* m : gpu_exact())
      exact[e++] = s ? m->get(*s).value_or(NAN) : NAN;
  }
  // The same values into the coarse bucket; a frame past the bucket's end closes it first.
  const int64_t step_ms = coarse_step_.count();
  if (bucket_frames_ > 0 && f->ts_ms >= bucket_start_ms_ + step_ms) flush_bucket();
  if (bucket_frames_ == 0) {
    bucket_start_ms_ = f->ts_ms - f->ts_ms % step_ms;
    bucket_ts_ms_ = f->ts_ms;
  }
  ++bucket_frames_;
  for (size_t i = 0; i < w; ++i) {
    if (std::isnan(out[i])) continue;
    bucket_sum_[i] += out[i];
    ++bucket_n_[i];
    bucket_peak_[i] = std::max(bucket_peak_[i], out[i]);
  }
}

void LiveState::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

bool LiveState::stopped() const {
  std::lock_guard lock(mu_);
  return stop_;
}

std::shared_ptr<const Frame> LiveState::latest() const {
  std::lock_guard lock(mu_);
  return latest_;
}

std::pair<std::shared_ptr<const Frame>, uint64_t> LiveState::wait_next(uint64_t after,
                                                                       std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return stop_ || seq_ > after; });
  return {seq_ > after ? latest_ : nullptr, seq_};
}

// Work reported since serve started, per unit, and the energy per unit over the last minute (the energy the devices
// used over the work reported since the oldest mark of the last minute); under mu_.
nlohmann::json LiveState::work_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [unit, total] : work_total_) {
    nlohmann::json u{{"total", total}, {"energy_per_unit_j", nullptr}, {"over_s", nullptr}};
    if (work_marks_.size() >= 2) {
      const WorkMark& a = work_marks_.front();
      const WorkMark& b = work_marks_.back();
      auto wa = a.work.find(unit), wb = b.work.find(unit);
      const double done = (wb == b.work.end() ? 0 : wb->second) - (wa == a.work.end() ? 0 : wa->second);
      if (done > 0 && b.energy_j > a.energy_j) {
        u["energy_per_unit_j"] = (b.energy_j - a.energy_j) / done;
        u["over_s"] = static_cast<double>(b.ts_ms - a.ts_ms) / 1000.0;
      }
    }
    out[unit] = std::move(u);
  }
  return out;
}

double LiveState::energy_so_far_locked() const {
  double total = 0;
  for (const auto& [index, j] : gpu_energy_j_)
    total += j.value_or(0);
  return total + cpu_package_energy_j_.value_or(0) + cpu_dram_energy_j_.value_or(0);
}

nlohmann::json LiveState::current_json() const {
  std::lock_guard lock(mu_);
  nlohmann::json gpus = nlohmann::json::array();
  nlohmann::json cpu = nlohmann::json::object();
  double total = 0;
  bool any_energy = false;
  if (latest_) {
    for (const auto& s : latest_->gpus) {
      const GpuDevice* d = nullptr;
      for (const auto& dev : devices_)
        if (dev.gpu_index == s.gpu_index) d = &dev;
      gpus.push_back(gpu_json(s, d));
    }
    const auto& c = latest_->cpu;
    for (const auto& m : kCpuMetrics)
      cpu[std::string(m.info.column)] = metric_json(m, c);
    cpu["power_method"] = c.power_method ? nlohmann::json(c.power_method) : nlohmann::json();
  }
  // The energy so far and how it was obtained, over the same devices: one method, or "mixed (counter: gpu0, gpu1;
  // estimated: cpu_package, cpu_dram)" (the dashboard's words).
  std::vector<std::pair<std::string, std::vector<std::string>>> methods;
  auto add_method = [&](std::string m, std::string device) {
    if (m.empty()) m = "unknown";
    auto it = std::find_if(methods.begin(), methods.end(), [&](const auto& e) { return e.first == m; });
    if (it == methods.end()) it = methods.insert(methods.end(), {m, {}});
    it->second.push_back(std::move(device));
  };
  for (const auto& [index, j] : gpu_energy_j_) {
    if (!j) continue;
    total += *j, any_energy = true;
    const int gpu = index; // a lambda may not capture a structured binding (clang 14)
    const auto d =
        std::find_if(devices_.begin(), devices_.end(), [&](const GpuDevice& x) { return x.gpu_index == gpu; });
    add_method(d != devices_.end() ? d->energy_method : "", fmt::format("gpu{}", gpu));
  }
  if (cpu_package_energy_j_) {
    total += *cpu_package_energy_j_ + cpu_dram_energy_j_.value_or(0);
    any_energy = true;
    add_method(cpu_power_method_, "cpu_package");
    if (cpu_dram_energy_j_) add_method(cpu_power_method_, "cpu_dram");
  }
  std::string energy_method = methods.empty() ? "" : methods.size() == 1 ? methods[0].first : "mixed (";
  if (methods.size() > 1)
    for (size_t i = 0; i < methods.size(); ++i)
      energy_method += fmt::format("{}{}: {}{}", i ? "; " : "", methods[i].first, fmt::join(methods[i].second, ", "),
                                   i + 1 == methods.size() ? ")" : "");
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : recent_events_)
    events.push_back({{"ts", iso_utc_ms(e.ts_ms)}, {"kind", e.kind}, {"source", e.source}, {"detail", e.detail}});
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : devices_)
    devices.push_back({{"index", d.gpu_index},
                       {"uuid", d.uuid},
                       {"name", d.name},
                       {"vendor", d.vendor},
                       {"energy_method", d.energy_method},
                       {"power_limit_w", opt(d.power_limit_w)},
                       {"mem_total_bytes", opt(d.mem_total_bytes)}});
  return {{"ts", latest_ ? nlohmann::json(iso_utc_ms(latest_->ts_ms)) : nlohmann::json()},
          {"ts_ms", latest_ ? nlohmann::json(latest_->ts_ms) : nlohmann::json()},
          {"tick", latest_ ? nlohmann::json(latest_->tick) : nlohmann::json()},
          {"run",
           {{"run_id", run_.run_id},
            {"task", run_.task},
            {"host", run_.host},
            {"start", iso_utc_ms(run_.start_ms)},
            {"simulated", simulated_run(run_)}, // issue 19
            {"simulate_scenario", run_tag(run_, "simulate_scenario")}}},
          {"interval_s", run_.interval_ms / 1000.0},
          {"devices", devices},
          {"gpus", gpus},
          {"cpu", cpu},
          {"work", work_json()},
          {"energy_j", any_energy ? nlohmann::json(total) : nlohmann::json()},
          {"energy_method", any_energy ? nlohmann::json(energy_method) : nlohmann::json()},
          {"events", events},
          {"anomalies", anomalies_ ? anomalies_->json()["anomalies"] : nlohmann::json::array()}, // issue 36
          {"processes", board_ ? board_->processes : nlohmann::json::array()},
          {"processes_other", board_ ? board_->processes_other : nlohmann::json()},
          {"units", board_ ? board_->units : nlohmann::json::array()},
          {"units_other", board_ ? board_->units_other : nlohmann::json()}};
}

nlohmann::json LiveState::history_json(std::chrono::nanoseconds range, std::chrono::nanoseconds step) const {
  int64_t now = 0;
  bool simulated = false;
  {
    std::lock_guard lock(mu_);
    now = latest_ ? latest_->ts_ms : wall_now_ms();
    simulated = simulated_run(run_); // issue 19
  }
  std::lock_guard ring(ring_mu_); // only the ring: scrapes and event streams go on meanwhile
  const int64_t from = now - std::chrono::duration_cast<std::chrono::milliseconds>(range).count();
  const int64_t step_ms = std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(step).count());
  const size_t w = width();
  struct Acc {
    double sum = 0;
    int n = 0;
    double peak = -INFINITY;
  };
  std::vector<int64_t> bucket_ts; // each bucket is stamped with its first point's time, never before any data
  std::vector<std::vector<Acc>> buckets;
  int64_t current = -1;
  // One point of either ring: its mean values weigh by the frames they average, peaks by their peak.
  auto add = [&](int64_t ts, const float* mean, const float* peak, uint32_t frames) {
    if (ts < from) return;
    const int64_t b = (ts - from) / step_ms;
    if (b != current) {
      current = b;
      bucket_ts.push_back(ts);
      buckets.emplace_back(w);
    }
    for (size_t k = 0; k < w; ++k) {
      const float v = mean[k];
      if (std::isnan(v)) continue;
      auto& a = buckets.back()[k];
      a.sum += static_cast<double>(v) * frames;
      a.n += static_cast<int>(frames);
      a.peak = std::max(a.peak, static_cast<double>(peak ? peak[k] : v));
    }
  };
  // Older than the fine ring: coarse points, then the bucket being filled; then every fine point. The one coarse
  // bucket that straddles the fine ring's start is counted whole, so a few of its frames weigh twice in one step:
  // a gap there would be worse.
  const int64_t fine_from = fine_.size ? fine_.ts[fine_.at(0)] : INT64_MAX;
  for (size_t i = 0; i < coarse_.size; ++i) {
    const size_t slot = coarse_.at(i);
    if (coarse_.ts[slot] >= fine_from) break;
    add(coarse_.ts[slot], &coarse_.mean[slot * w], &coarse_.peak[slot * w], coarse_.n[slot]);
  }
  if (bucket_frames_ > 0 && bucket_ts_ms_ < fine_from) {
    std::vector<float> mean(w), peak(bucket_peak_.begin(), bucket_peak_.end());
    for (size_t k = 0; k < w; ++k)
      mean[k] = bucket_n_[k] ? static_cast<float>(bucket_sum_[k] / bucket_n_[k]) : NAN;
    add(bucket_ts_ms_, mean.data(), peak.data(), bucket_frames_);
  }
  for (size_t i = 0; i < fine_.size; ++i) {
    const size_t slot = fine_.at(i);
    add(fine_.ts[slot], &fine_.mean[slot * fine_.width], nullptr, 1); // its first w values are the history's
  }
  auto column = [&](size_t k, bool peak) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& b : buckets)
      out.push_back(b[k].n ? nlohmann::json(peak ? b[k].peak : b[k].sum / b[k].n) : nlohmann::json());
    return out;
  };
  nlohmann::json gpus = nlohmann::json::array();
  const size_t ncpu = cpu_history().size(), ngpu = gpu_history().size();
  for (size_t g = 0; g < ring_gpus_.size(); ++g) {
    nlohmann::json one = {{"index", ring_gpus_[g]}};
    for (size_t k = 0; k < ngpu; ++k) {
      const auto& info = gpu_history()[k]->info;
      one[std::string(info.column)] = column(ncpu + g * ngpu + k, false);
      if (info.flags & kPeak) one[peak_key(info.column)] = column(ncpu + g * ngpu + k, true);
    }
    gpus.push_back(std::move(one));
  }
  nlohmann::json out = {{"from_ms", from}, {"step_s", static_cast<double>(step_ms) / 1000.0}, {"ts_ms", bucket_ts}};
  for (size_t k = 0; k < ncpu; ++k) {
    const auto& info = cpu_history()[k]->info;
    out["cpu_" + std::string(info.column)] = column(k, false);
    if (info.flags & kPeak) out["cpu_" + peak_key(info.column)] = column(k, true);
  }
  out["gpus"] = std::move(gpus);
  out["simulated"] = simulated; // issue 19: its GPU series are simulated
  return out;
}

advice::Input LiveState::advice_input() const {
  // Device facts first, under mu_ alone (the two locks are never held together).
  std::vector<advice::GpuSeries> facts;
  {
    std::lock_guard lock(mu_);
    for (const auto& d : devices_) {
      advice::GpuSeries g;
      g.gpu_index = d.gpu_index;
      g.name = d.name;
      g.mem_total_bytes = d.mem_total_bytes;
      g.power_limit_w = d.power_limit_w;
      g.clock_sm_max_mhz = d.clock_sm_max_mhz;
      facts.push_back(std::move(g));
    }
  }
  static const auto columns = [] {
    std::array<FineColumn, std::size(kGpuPointFields)> out{};
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = fine_column(kGpuPointFields[i].column, gpu_history(), gpu_advice(), gpu_exact());
    return out;
  }();
  static const FineColumn cpu_util = fine_column("util_pct", cpu_history(), cpu_advice(), cpu_exact());
  static const FineColumn cpu_package = fine_column("package_energy_j", cpu_history(), cpu_advice(), cpu_exact());
  static const FineColumn cpu_dram = fine_column("dram_energy_j", cpu_history(), cpu_advice(), cpu_exact());
  auto opt_f = [](double v) { return std::isnan(v) ? OptF() : OptF(v); };
  // The ring's floats of integer metrics hold integers (exactly up to 2^24, and every float above is one): no rounding.
  // An int64 near its limits comes back as ±2^63, one past them: clamped, as a cast of it is undefined.
  auto opt_i = [](double v) {
    if (std::isnan(v)) return OptI();
    if (v >= 0x1p63) return OptI(INT64_MAX);
    if (v < -0x1p63) return OptI(INT64_MIN);
    return OptI(static_cast<int64_t>(v));
  };

  advice::Input in;
  std::lock_guard ring(ring_mu_);
  const size_t w = coarse_.width, ngpus = ring_gpus_.size();
  // Where a value sits in a point, resolved once per copy: the CPU's (gpu == kCpu) or the g-th GPU's column.
  struct Source {
    bool exact = false, missing = true;
    size_t offset = 0; // into the point's floats (fine_.mean) or doubles (fine_.exact)
  };
  constexpr size_t kCpu = SIZE_MAX;
  auto source = [&](size_t g, const FineColumn& c) {
    const bool cpu = g == kCpu;
    switch (c.kind) {
    case FineColumn::History:
      return Source{false, false, cpu ? c.index : cpu_history().size() + g * gpu_history().size() + c.index};
    case FineColumn::Advice:
      return Source{false, false, w + (cpu ? c.index : cpu_advice().size() + g * gpu_advice().size() + c.index)};
    case FineColumn::Exact:
      return Source{true, false, cpu ? c.index : cpu_exact().size() + g * gpu_exact().size() + c.index};
    case FineColumn::Missing:
      break;
    }
    return Source{};
  };
  auto read = [&](size_t slot, const Source& src) -> double {
    if (src.missing) return NAN;
    return src.exact ? fine_.exact[slot * fine_.exact_width + src.offset] : fine_.mean[slot * fine_.width + src.offset];
  };
  // Reserved whole: the recomputation's copy is transient, and grows no vector twice its need.
  in.cpu.reserve(fine_.size);
  const Source util = source(kCpu, cpu_util), package = source(kCpu, cpu_package), dram = source(kCpu, cpu_dram);
  for (size_t i = 0; i < fine_.size; ++i) {
    const size_t slot = fine_.at(i);
    advice::CpuPoint c;
    c.ts_ms = fine_.ts[slot];
    c.util_pct = opt_f(read(slot, util));
    // As advice::cpu_point: package + DRAM where the package is measured.
    const double package_j = read(slot, package), dram_j = read(slot, dram);
    if (!std::isnan(package_j)) c.energy_j = package_j + (std::isnan(dram_j) ? 0 : dram_j);
    in.cpu.push_back(c);
  }
  for (size_t g = 0; g < ngpus; ++g) {
    advice::GpuSeries series;
    series.gpu_index = ring_gpus_[g];
    for (auto& f : facts)
      if (f.gpu_index == series.gpu_index) series = std::move(f);
    std::array<Source, std::size(kGpuPointFields)> sources;
    for (size_t k = 0; k < sources.size(); ++k)
      sources[k] = source(g, columns[k]);
    series.points.reserve(fine_.size);
    for (size_t i = 0; i < fine_.size; ++i) {
      const size_t slot = fine_.at(i);
      if (!fine_.present[slot * ngpus + g]) continue; // the GPU did not answer: no point (a gap), as in a store
      advice::GpuPoint p;
      p.ts_ms = fine_.ts[slot];
      for (size_t k = 0; k < sources.size(); ++k) {
        const double v = read(slot, sources[k]);
        if (kGpuPointFields[k].real)
          p.*kGpuPointFields[k].real = opt_f(v);
        else
          p.*kGpuPointFields[k].integer = opt_i(v);
      }
      series.points.push_back(p);
    }
    in.gpus.push_back(std::move(series));
  }
  std::stable_sort(in.gpus.begin(), in.gpus.end(),
                   [](const advice::GpuSeries& a, const advice::GpuSeries& b) { return a.gpu_index < b.gpu_index; });
  return in;
}

namespace {

// ---- /metrics, family by family. Each writer takes what it reads (the caller holds mu_) and appends its families.

using GpuSeries = std::vector<std::pair<const GpuSample*, std::string>>; // a GPU's sample and its label set

std::string gpu_labels(int index, const GpuDevice* d, std::string_view host) {
  // pci_bus_id joins a series to node exporters and DCGM's, which name GPUs by bus
  return fmt::format("gpu=\"{}\",uuid=\"{}\",name=\"{}\",host=\"{}\",pci_bus_id=\"{}\"{}", index,
                     prom_label_value(d ? d->uuid : ""), prom_label_value(d ? d->name : ""), host,
                     prom_label_value(d ? d->pci_bus_id : ""),
                     d && d->energy_method == "simulated" ? ",simulated=\"true\"" : "");
}

const GpuDevice* device_of(const std::vector<GpuDevice>& devices, int gpu_index) {
  const GpuDevice* d = nullptr;
  for (const auto& dev : devices)
    if (dev.gpu_index == gpu_index) d = &dev;
  return d;
}

// The exporter's own process, under the names every Prometheus client library uses for its process. Read once per
// frame (LiveState::push), not per scrape: a scrape of one frame gets the same body, whose gzip is kept.
void write_exporter_process(Exposition& x, const ProcessSelf& self, double start_time_s) {
  if (self.cpu_s >= 0) {
    x.family("process_cpu_seconds_total", "counter", "CPU time (user and system) this wattscope process has used.");
    x.sample("", self.cpu_s);
  }
  if (self.resident_bytes >= 0) {
    x.family("process_resident_memory_bytes", "gauge", "Resident memory of this wattscope process.");
    x.sample("", self.resident_bytes);
  }
  if (start_time_s > 0) {
    x.family("process_start_time_seconds", "gauge", "When this wattscope process started, in seconds since 1970.");
    x.sample("", start_time_s);
  }
}

void write_sampler(Exposition& x, const SamplerStats& s, double interval_ms, const std::string& host_label) {
  // The interval in force, which --idle-interval lengthens while the machine is idle.
  const int64_t in_force_ns = s.interval_ns.load();
  x.family("wattscope_sampler_interval_seconds", "gauge",
           "Interval full samples are taken at now: --interval, or --idle-interval while the machine is idle.");
  x.sample(host_label, in_force_ns > 0 ? static_cast<double>(in_force_ns) / 1e9 : interval_ms / 1000.0);
  x.family("wattscope_sampler_probe_ticks_total", "counter",
           "Ticks that only probed for activity while idle (adaptive sampling): not stored, not skipped.");
  x.sample(host_label, static_cast<double>(s.probe_ticks.load()));
  x.family("wattscope_sampler_tick_duration_seconds", "gauge", "CPU-side duration of the latest sampler tick.");
  x.sample(host_label, static_cast<double>(s.last_tick_ns.load()) / 1e9);
  x.family("wattscope_sampler_ticks_total", "counter", "Ticks taken since serve started.");
  x.sample(host_label, static_cast<double>(s.ticks.load()));
  x.family("wattscope_sampler_skipped_ticks_total", "counter", "Grid slots skipped because a tick overran.");
  x.sample(host_label, static_cast<double>(s.skipped.load()));
  x.family("wattscope_sampler_late_total", "counter",
           "Ticks a source that may block (a vendor library) missed its deadline; its devices were left out.");
  x.sample(host_label, static_cast<double>(s.late.load()));
}

// wattscope_gpu_up for every GPU of the run, then the registry's GPU families. Registry metrics sharing a family (the
// clocks, the ECC counters) are written as one block: HELP and TYPE once, then every member's samples with its
// constant labels. The members are gathered by family name, wherever the registry lists them (the video
// clock, appended at the end, once made a second `wattscope_gpu_clock_hertz` block, which the exposition format
// forbids). A family no GPU reports is left out (absent, never 0).
void write_gpu_registry(Exposition& x, const Frame& f, const std::vector<GpuDevice>& devices, const GpuSeries& gs,
                        std::string_view host) {
  x.family("wattscope_gpu_up", "gauge", "1 when the GPU answered the latest tick, 0 when it is lost.");
  for (const auto& d : devices) {
    bool up = false;
    for (const auto& s : f.gpus)
      up = up || s.gpu_index == d.gpu_index;
    x.sample(gpu_labels(d.gpu_index, &d, host), up ? 1.0 : 0.0);
  }
  for (const auto& members : gpu_families()) {
    const MetricInfo& info = members.front()->info;
    bool any = false;
    for (const auto* m : members)
      for (auto& [s, l] : gs)
        any = any || m->has(*s);
    if (!any) continue;
    x.family(info.prom_family, info.prom_kind == PromKind::Counter ? "counter" : "gauge", info.help);
    for (auto& [s, l] : gs) {
      for (const auto* m : members) {
        const MetricInfo& mk = m->info;
        std::string labels = l;
        if (!mk.prom_labels.empty()) labels += "," + std::string(mk.prom_labels);
        if (mk.flags & kMethodLabel) {
          const GpuDevice* d = device_of(devices, s->gpu_index);
          labels += fmt::format(",method=\"{}\"", prom_label_value(d ? d->energy_method : ""));
        }
        x.sample(labels, m->get(*s), mk.prom_scale);
      }
    }
  }
}

// The clock-event (throttle) mask one series per reason, so that no query decodes bits with
// floor(x/2^k)%2; and the Xid errors counted per GPU (where the driver delivers them).
void write_gpu_health(Exposition& x, const std::vector<GpuDevice>& devices, const GpuSeries& gs,
                      const std::map<int, int64_t>& xid_errors, std::string_view host) {
  static constexpr std::pair<int64_t, std::string_view> kReasons[] = {{0x1, "gpu_idle"},
                                                                      {0x2, "applications_clocks_setting"},
                                                                      {0x4, "sw_power_cap"},
                                                                      {0x8, "hw_slowdown"},
                                                                      {0x10, "sync_boost"},
                                                                      {0x20, "sw_thermal"},
                                                                      {0x40, "hw_thermal"},
                                                                      {0x80, "hw_power_brake"},
                                                                      {0x100, "display_clock_setting"}};
  if (std::any_of(gs.begin(), gs.end(), [](const auto& g) { return g.first->throttle_reasons.has_value(); })) {
    x.family("wattscope_gpu_throttle_active", "gauge",
             "1 while NVML reports this clock-event (throttle) reason for the GPU, else 0 (the bits of "
             "wattscope_gpu_throttle_reasons); the time spent held back is wattscope_gpu_throttle_seconds_total.");
    for (auto& [s, l] : gs)
      if (s->throttle_reasons)
        for (const auto& [bit, reason] : kReasons)
          x.sample(fmt::format("{},reason=\"{}\"", l, reason), (*s->throttle_reasons & bit) ? 1.0 : 0.0);
  }
  if (std::any_of(devices.begin(), devices.end(), [](const GpuDevice& d) { return d.xid_events; })) {
    x.family("wattscope_gpu_xid_errors_total", "counter",
             "Xid errors NVML reported for the GPU since serve started (the codes are in the events: "
             "/api/v1/current, the store). Exported for GPUs whose Xid events NVML delivers.");
    for (const auto& d : devices) {
      if (!d.xid_events) continue;
      auto it = xid_errors.find(d.gpu_index);
      x.sample(gpu_labels(d.gpu_index, &d, host), static_cast<double>(it != xid_errors.end() ? it->second : 0));
    }
  }
}

// MIG instances, one series per compute instance. Power and energy have none: NVML measures them per
// GPU, so they stay on the parent's series.
void write_migs(Exposition& x, const Frame& f, const std::vector<GpuDevice>& devices, std::string_view host) {
  if (f.migs.empty()) return;
  std::vector<std::pair<const MigSample*, std::string>> ms;
  for (const auto& m : f.migs) {
    const GpuDevice* d = device_of(devices, m.gpu_index);
    ms.emplace_back(&m, fmt::format("gpu=\"{}\",uuid=\"{}\",gpu_instance=\"{}\",compute_instance=\"{}\","
                                    "mig_uuid=\"{}\",host=\"{}\"",
                                    m.gpu_index, prom_label_value(d ? d->uuid : ""), m.gpu_instance, m.compute_instance,
                                    prom_label_value(m.uuid), host));
  }
  x.family("wattscope_gpu_mig_instance_info", "gauge",
           "A MIG compute instance of a GPU (selected=\"true\": the run's processes are this instance's). Its "
           "energy is not measured apart: NVML measures power per GPU.");
  for (auto& [m, l] : ms)
    x.sample(l + fmt::format(",selected=\"{}\"", m->selected ? "true" : "false"), 1.0);
  auto family = [&](const char* name, const char* help, OptI MigSample::*member) {
    bool any = false;
    for (auto& [m, l] : ms)
      any = any || (m->*member).has_value();
    if (!any) return; // absent, never 0
    x.family(name, "gauge", help);
    for (auto& [m, l] : ms)
      x.sample(l, m->*member);
  };
  family("wattscope_gpu_mig_memory_used_bytes", "Memory in use in a MIG instance's slice.", &MigSample::mem_used_bytes);
  family("wattscope_gpu_mig_memory_total_bytes", "Size of a MIG instance's memory slice.", &MigSample::mem_total_bytes);
  family("wattscope_gpu_mig_processes", "Compute processes running in a MIG instance.", &MigSample::processes);
}

void write_cpu(Exposition& x, const CpuSample& c, std::string_view host) {
  const std::string host_label = fmt::format("host=\"{}\"", host);
  for (const auto& members : cpu_families()) {
    auto shown = [&](const MetricDef<CpuSample>* m) {
      return m->has(c) && !((m->info.flags & kNoZones) && !c.zones.empty());
    };
    if (std::none_of(members.begin(), members.end(), shown)) continue;
    const MetricInfo& info = members.front()->info;
    x.family(info.prom_family, info.prom_kind == PromKind::Counter ? "counter" : "gauge", info.help);
    for (const auto* m : members) {
      if (!shown(m)) continue;
      std::string labels = host_label;
      if (!m->info.prom_labels.empty()) labels += "," + std::string(m->info.prom_labels);
      if (m->info.flags & kMethodLabel)
        labels += fmt::format(",method=\"{}\"", c.power_method ? prom_label_value(c.power_method) : "");
      x.sample(labels, m->get(c), m->info.prom_scale);
    }
  }
  if (!c.core_util_pct.empty()) { // issue 32: rate(wattscope_cpu_busy_seconds_total) over it is a busy share
    x.family("wattscope_cpu_logical_cpus", "gauge", "Logical CPUs the host's /proc/stat lists.");
    x.sample(host_label, static_cast<double>(c.core_util_pct.size()));
  }
  if (c.zones.empty()) return;
  auto zl = [&](const PowerZoneSample& z) {
    return fmt::format("host=\"{}\",zone=\"{}\",domain=\"{}\",socket=\"{}\"", host, prom_label_value(z.zone),
                       prom_label_value(z.domain), z.socket ? std::to_string(*z.socket) : "");
  };
  for (const auto& m : kZoneMetrics) {
    if (m.info.prom_family.empty()) continue;
    x.family(m.info.prom_family, m.info.prom_kind == PromKind::Counter ? "counter" : "gauge", m.info.help);
    for (const auto& z : c.zones)
      x.sample(zl(z), m.get(z), m.info.prom_scale);
  }
}

// Alerts: one series per firing rule and scope (the engine's copy: no evaluation here).
void write_alerts(std::string& out, const AlertEngine& alerts, const std::vector<GpuDevice>& devices,
                  std::string_view host) {
  out += "# HELP wattscope_alerts_firing Alerts firing now, one series per rule and scope (wattscope --alerts).\n"
         "# TYPE wattscope_alerts_firing gauge\n";
  for (const auto& a : alerts.firing()) {
    // A GPU's alert carries the gpu and uuid labels of its GPU series, so the two join ("gpu3" -> "3").
    std::string gpu, uuid;
    if (a.scope.size() > 3 && a.scope.starts_with("gpu") &&
        a.scope.find_first_not_of("0123456789", 3) == std::string::npos) {
      gpu = a.scope.substr(3);
      for (const auto& d : devices)
        if (std::to_string(d.gpu_index) == gpu) uuid = d.uuid;
    }
    out += fmt::format("wattscope_alerts_firing{{rule=\"{}\",severity=\"{}\",scope=\"{}\",host=\"{}\",gpu=\"{}\","
                       "uuid=\"{}\"}} 1\n",
                       prom_label_value(a.rule), prom_label_value(a.severity), prom_label_value(a.scope), host, gpu,
                       prom_label_value(uuid));
  }
}

// The counters whose count starts at a known instant: the run's start (serve records one run from its start). Their
// OpenMetrics `_created` sample says so; the others count since the driver loaded or the machine booted (NVML's ECC
// and NVLink counters, /proc/stat's busy time) or since a process or unit was first seen, and get none.
constexpr std::string_view kCountedFromRunStart[] = {"wattscope_gpu_energy_joules_total",
                                                     "wattscope_gpu_throttle_seconds_total",
                                                     "wattscope_cpu_energy_joules_total",
                                                     "wattscope_gpu_xid_errors_total",
                                                     "wattscope_sampler_probe_ticks_total",
                                                     "wattscope_sampler_ticks_total",
                                                     "wattscope_sampler_skipped_ticks_total",
                                                     "wattscope_sampler_late_total",
                                                     "wattscope_work_total",
                                                     "wattscope_carbon_grams_total",
                                                     "wattscope_energy_cost_total"};

} // namespace

std::string openmetrics_from_text(std::string_view text, std::span<const std::string_view> created_families,
                                  double created_s) {
  std::string out;
  out.reserve(text.size() + text.size() / 16 + 8);
  const std::string created = fmt::format("{:.3f}", created_s);
  std::string_view family, base; // the counter family being written (with _total) and its name without
  bool with_created = false;
  auto next_line = [&](size_t& at) {
    const size_t nl = text.find('\n', at);
    const std::string_view l = text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
    at = nl == std::string_view::npos ? text.size() : nl + 1;
    return l;
  };
  for (size_t at = 0; at < text.size();) {
    const std::string_view l = next_line(at);
    if (l.starts_with("# HELP ")) {
      // The TYPE line follows its HELP line in every family this file or the process board writes.
      size_t peek = at;
      const std::string_view t = next_line(peek);
      const std::string_view name = l.substr(7, l.find(' ', 7) - 7);
      const std::string_view help = l.substr(std::min(l.size(), 8 + name.size()));
      std::string_view type = t.starts_with("# TYPE ") ? t.substr(7 + name.size() + 1) : std::string_view();
      std::string_view out_name = name;
      family = {};
      with_created = false;
      if (type == "counter" && name.ends_with("_total")) {
        family = name;
        base = out_name = name.substr(0, name.size() - 6);
        with_created = std::find(created_families.begin(), created_families.end(), name) != created_families.end();
      } else if (type == "gauge" && name.ends_with("_info")) {
        type = "info"; // always 1, labels its information: OpenMetrics' info type, samples keep their name
        out_name = name.substr(0, name.size() - 5);
      }
      out += "# HELP ";
      out += out_name;
      out += ' ';
      for (const char c : help) { // OpenMetrics escapes double quotes in HELP too
        if (c == '"') out += '\\';
        out += c;
      }
      out += '\n';
      if (!type.empty()) {
        at = peek;
        out += fmt::format("# TYPE {} {}\n", out_name, type);
      }
      continue;
    }
    out += l;
    out += '\n';
    if (with_created && l.starts_with(family) && l.size() > family.size() &&
        (l[family.size()] == '{' || l[family.size()] == ' ')) {
      const size_t value_at = l.rfind(' ');
      out += base;
      out += "_created";
      out += l.substr(family.size(), value_at + 1 - family.size());
      out += created;
      out += '\n';
    }
  }
  out += "# EOF\n";
  return out;
}

namespace {
// Where each receiver stands, as Prometheus' own prometheus_remote_storage_* families say it of a Prometheus.
std::string remote_write_text(const remote_write::Writer& w, const std::string& host_label) {
  const auto stats = w.stats();
  Exposition x;
  auto each = [&](auto value) {
    for (const auto& s : stats)
      x.sample(fmt::format("{},url=\"{}\"", host_label, prom_label_value(s.url)), static_cast<double>(value(s)));
  };
  using S = remote_write::TargetStats;
  x.family("wattscope_remote_write_samples_sent_total", "counter", "Samples a remote-write receiver took.");
  each([](const S& s) { return s.sent; });
  x.family("wattscope_remote_write_samples_dropped_total", "counter",
           "Samples dropped: the oldest, from a queue past --remote-write-queue-max (reason=\"queue_full\"), or in "
           "batches the receiver refused for good, a 4xx (reason=\"refused\").");
  for (const auto& s : stats) {
    x.sample(fmt::format("{},url=\"{}\",reason=\"queue_full\"", host_label, prom_label_value(s.url)),
             static_cast<double>(s.dropped));
    x.sample(fmt::format("{},url=\"{}\",reason=\"refused\"", host_label, prom_label_value(s.url)),
             static_cast<double>(s.rejected));
  }
  x.family("wattscope_remote_write_failed_requests_total", "counter",
           "Pushes that got no answer, a 5xx or a 429, and were retried.");
  each([](const S& s) { return s.failures; });
  x.family("wattscope_remote_write_queued_samples", "gauge", "Samples waiting on disk for the receiver.");
  each([](const S& s) { return s.queued; });
  x.family("wattscope_remote_write_queue_bytes", "gauge", "Bytes waiting on disk for the receiver.");
  each([](const S& s) { return s.queued_bytes; });
  return x.take();
}
} // namespace

std::string LiveState::metrics_text(MetricsFormat format) const {
  std::lock_guard lock(mu_);
  Exposition x;
  const std::string host = prom_label_value(run_.host);
  const std::string host_label = fmt::format("host=\"{}\"", host);
  x.family("wattscope_build_info", "gauge", "wattscope build, as a label.");
  x.sample(fmt::format("version=\"{}\"", kVersion), 1.0);
  // simulated="true" on the run and on every series of a simulated GPU, so no dashboard or alert built on
  // them can take a simulated figure for a measurement.
  x.family("wattscope_run_info", "gauge",
           "The run this serve session records, as labels (simulated=\"true\": its GPUs are simulated, --simulate).");
  x.sample(fmt::format("run_id=\"{}\",task=\"{}\",host=\"{}\",simulated=\"{}\"", prom_label_value(run_.run_id),
                       prom_label_value(run_.task), host, simulated_run(run_) ? "true" : "false"),
           1.0);
  write_exporter_process(x, self_, process_start_s_);
  if (sampler_) write_sampler(x, *sampler_, run_.interval_ms, host_label);
  x.family("wattscope_history_bytes", "gauge",
           "Memory held by the in-memory history (fixed when the run starts; bounded by --retain).");
  x.sample(host_label, static_cast<double>(history_bytes()));
  std::string out;
  if (latest_) {
    const Frame& f = *latest_;
    GpuSeries gs;
    for (const auto& s : f.gpus)
      gs.emplace_back(&s, gpu_labels(s.gpu_index, device_of(devices_, s.gpu_index), host));
    write_gpu_registry(x, f, devices_, gs, host);
    write_gpu_health(x, devices_, gs, xid_errors_, host);
    write_migs(x, f, devices_, host);
    write_cpu(x, f.cpu, host);
    if (!work_total_.empty()) {
      // Energy per unit is a ratio of rates: rate(wattscope_gpu_energy_joules_total[5m]) / rate(this[5m])
      x.family("wattscope_work_total", "counter",
               "Work the workload reported since serve started (its markers, --scrape's token and request "
               "counters), by unit: output_tokens, prompt_tokens, requests, samples, ...");
      for (const auto& [unit, amount] : work_total_)
        x.sample(fmt::format("{},unit=\"{}\"", host_label, prom_label_value(unit)), amount);
    }
    if (!f.carbon_g.empty()) {
      // At the run's rates, sample by sample (docs/carbon.md): assumed="true" when no carbon source was given and the
      // world's yearly figure stands in.
      x.family("wattscope_carbon_grams_total", "counter",
               "Grams of CO2e charged for each device's energy since serve started, at --carbon-intensity, "
               "--carbon-region or --carbon-intensity-file (PUE included).");
      for (const auto& [device, g] : f.carbon_g)
        x.sample(fmt::format("{},device=\"{}\",assumed=\"{}\"", host_label, prom_label_value(device),
                             f.carbon_assumed ? "true" : "false"),
                 g);
    }
    if (!f.cost.empty()) {
      x.family("wattscope_energy_cost_total", "counter",
               "Cost of each device's energy since serve started, at --energy-price or --energy-price-file (PUE "
               "included), in the currency its label names.");
      for (const auto& [device, c] : f.cost)
        x.sample(fmt::format("{},device=\"{}\",currency=\"{}\"", host_label, prom_label_value(device),
                             prom_label_value(f.currency)),
                 c);
    }
    out = x.take();
    if (board_) out += board_->metrics_text; // prepared once per process scan
    if (alerts_) write_alerts(out, *alerts_, devices_, host);
  } else {
    out = x.take();
  }
  if (remote_write_) out += remote_write_text(*remote_write_, host_label);
  if (format == MetricsFormat::OpenMetrics)
    return openmetrics_from_text(out, kCountedFromRunStart, static_cast<double>(run_.start_ms) / 1000.0);
  return out;
}

std::string LiveState::metrics_gzip(MetricsFormat format) const {
  std::string text = metrics_text(format);
  std::lock_guard lock(gzip_mu_);
  GzipCache& c = gzip_[format == MetricsFormat::OpenMetrics ? 1 : 0];
  if (text != c.plain || c.body.empty()) {
    c.body = gzip_compress(text, kMetricsGzipLevel);
    c.plain = std::move(text);
  }
  return c.body;
}

nlohmann::json LiveState::alerts_json() const {
  if (!alerts_)
    return {{"rules", 0},
            {"firing", nlohmann::json::array()},
            {"recent", nlohmann::json::array()},
            {"notifiers", nlohmann::json::array()},
            {"frames_dropped", 0}};
  return alerts_->json();
}

nlohmann::json LiveState::forecast_json() const {
  if (!forecasts_)
    return {
        {"ts_ms", nullptr}, {"devices", nlohmann::json::array()}, {"finish", nlohmann::json::array()}, {"line", ""}};
  return forecasts_->as_json();
}

} // namespace wattscope
