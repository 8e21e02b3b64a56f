#include "top/render.hpp"

#include "runs/run_view.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace wattscope::top {

namespace {

size_t cols(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

// The first w columns of s (UTF-8 aware).
std::string cut(std::string_view s, size_t w) {
  size_t n = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (n == w) break;
      ++n;
    }
  }
  return std::string(s.substr(0, i));
}

std::string left(std::string_view s, size_t w) {
  std::string out = cut(s, w);
  out.append(w - cols(out), ' ');
  return out;
}
std::string right(std::string_view s, size_t w) {
  std::string out = cut(s, w);
  return std::string(w - cols(out), ' ') + out;
}

// Names from /proc and from the network are not ours: only printable ASCII reaches the terminal.
std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s)
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  return out;
}

class LineBuilder {
public:
  LineBuilder& add(std::string text, Tone tone = Tone::Normal) {
    line_.spans.push_back({std::move(text), tone});
    return *this;
  }
  Line take(size_t width, bool selected = false) {
    Line out;
    out.selected = selected;
    size_t used = 0;
    for (auto& s : line_.spans) {
      if (used >= width) break;
      const size_t c = cols(s.text);
      if (used + c > width) s.text = cut(s.text, width - used);
      used += cols(s.text);
      out.spans.push_back(std::move(s));
    }
    return out;
  }

private:
  Line line_;
};

std::string opt_num(const OptF& v, const char* spec) {
  return v ? fmt::format(fmt::runtime(spec), *v) : "-";
}

std::string bytes_text(const std::optional<int64_t>& b) {
  if (!b) return "-";
  const double v = static_cast<double>(*b);
  if (v >= 1024.0 * 1024 * 1024) return fmt::format("{:.1f}G", v / (1024.0 * 1024 * 1024));
  if (v >= 1024.0 * 1024) return fmt::format("{:.0f}M", v / (1024.0 * 1024));
  if (v >= 1024.0) return fmt::format("{:.0f}K", v / 1024.0);
  return fmt::format("{}B", *b);
}

std::string energy_text(const OptF& j) {
  if (!j) return "-";
  if (*j >= 3.6e6) return fmt::format("{:.2f} kWh", *j / 3.6e6);
  if (*j >= 1e3) return fmt::format("{:.2f} kJ", *j / 1e3);
  return fmt::format("{:.1f} J", *j);
}

// issue 29: the method of a host's energy figures, worded as `wattscope show` words a run's ("counter",
// "mixed (counter: gpu0; estimated: cpu_package)"), from the devices whose energy is shown.
EnergyMethod host_energy_method(const HostView& h) {
  EnergyMethod m;
  for (const auto& g : h.gpus)
    if (g.energy_j)
      m.devices.emplace_back(fmt::format("gpu{}", g.s.gpu_index),
                             g.energy_method.empty() ? "unknown" : g.energy_method);
  if (h.cpu_energy_j) m.devices.emplace_back("cpu_package", h.cpu.power_method ? h.cpu.power_method : "unknown");
  return m;
}

// " [counter]" after an energy figure; nothing where no energy is shown.
std::string method_tag(const std::string& label) {
  return label.empty() ? "" : " [" + label + "]";
}

std::string power_text(const OptF& w) {
  return w ? fmt::format("{:.1f} W", *w) : "-";
}

// How close a value is to its alert threshold: alert above it, warn from 85 % of it.
Tone level(const OptF& v, double threshold) {
  if (!v) return Tone::Dim;
  if (*v > threshold) return Tone::Alert;
  if (*v > 0.85 * threshold) return Tone::Warn;
  return Tone::Ok;
}

std::string bar(const OptF& pct, size_t w, bool unicode) {
  std::string out;
  const double f = pct ? std::clamp(*pct / 100.0, 0.0, 1.0) : 0.0;
  const size_t filled = pct ? static_cast<size_t>(std::lround(f * static_cast<double>(w))) : 0;
  for (size_t i = 0; i < w; ++i)
    out += i < filled ? (unicode ? "█" : "|") : (unicode ? "░" : ".");
  return out;
}

std::string sparkline(const std::deque<float>& hist, const OptF& limit_w, size_t w, bool unicode) {
  static const char* const kBlocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  static const char kAscii[] = "_.-:=+*#";
  double top = limit_w.value_or(0);
  for (float v : hist)
    if (std::isfinite(v)) top = std::max(top, static_cast<double>(v));
  std::string out;
  const size_t n = std::min(hist.size(), w);
  out.append(w - n, ' ');
  for (size_t i = hist.size() - n; i < hist.size(); ++i) {
    const float v = hist[i];
    if (!std::isfinite(v) || top <= 0) {
      out += ' ';
      continue;
    }
    const int k = std::clamp(static_cast<int>(std::lround(v / top * 7.0)), 0, 7);
    if (unicode)
      out += kBlocks[k];
    else
      out += kAscii[k];
  }
  return out;
}

OptF pct_of(const OptI& used, const OptI& total) {
  if (!used || !total || *total <= 0) return std::nullopt;
  return 100.0 * static_cast<double>(*used) / static_cast<double>(*total);
}
OptF pct_of(const OptF& v, const OptF& total) {
  if (!v || !total || *total <= 0) return std::nullopt;
  return 100.0 * *v / *total;
}

std::string age_text(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(s / 3600), std::fmod(s / 60, 60));
}

struct GpuCols {
  size_t bar, temp_bar, spark;
};
// Fixed text: index 3, util 6, mem 6, power 12, temp 6, energy 11, and a space between the seven fields.
constexpr size_t kGpuFixed = 3 + 6 + 6 + 12 + 6 + 11 + 6;
GpuCols gpu_cols(int width) {
  const size_t avail = width > static_cast<int>(kGpuFixed) ? static_cast<size_t>(width) - kGpuFixed : 0;
  GpuCols c;
  c.bar = std::max<size_t>(3, avail / 5);
  c.temp_bar = std::max<size_t>(2, c.bar * 2 / 3);
  const size_t used = 3 * c.bar + c.temp_bar;
  c.spark = avail > used + 4 ? std::min(avail - used, kSparkPoints) : 4;
  return c;
}

std::string mark(Tone t) {
  return t == Tone::Alert ? "!" : " ";
}

Line gpu_header(const GpuCols& c, size_t width) {
  LineBuilder b;
  b.add(left("GPU", 3) + " " + left("UTIL", c.bar + 6) + " " + left("MEM", c.bar + 6) + " " +
            left("POWER / LIMIT", c.bar + 12) + " " + left("TEMP", c.temp_bar + 6) + " " +
            left(c.spark >= 13 ? "POWER HISTORY" : "HISTORY", c.spark) + " " + right("ENERGY", 11),
        Tone::Title);
  return b.take(width);
}

Line gpu_row(const TopGpu& g, const GpuCols& c, const RenderOptions& o, bool selected) {
  const auto& s = g.s;
  const Thresholds& th = o.thresholds;
  LineBuilder b;
  b.add(right(fmt::format("{}", s.gpu_index), 2) + " ", g.answered ? Tone::Normal : Tone::Dim);
  if (!g.answered) {
    b.add("not answering (lost or late); last values:", Tone::Alert);
  }
  const Tone ut = level(s.util_gpu_pct, th.util_pct);
  b.add(bar(s.util_gpu_pct, c.bar, o.unicode), ut);
  b.add(right(opt_num(s.util_gpu_pct, "{:.0f}%"), 5) + mark(ut) + " ");
  const OptF mem_pct = pct_of(s.mem_used_bytes, s.mem_total_bytes);
  const Tone mt = level(mem_pct, th.vram_pct);
  b.add(bar(mem_pct, c.bar, o.unicode), mt);
  b.add(right(opt_num(mem_pct, "{:.0f}%"), 5) + mark(mt) + " ");
  const OptF pw_pct = pct_of(s.power_w, s.power_limit_w);
  const Tone pt = level(pw_pct, th.power_pct_of_limit);
  b.add(bar(pw_pct, c.bar, o.unicode), pt);
  b.add(right(opt_num(s.power_w, "{:.0f}"), 5) + "/" + left(opt_num(s.power_limit_w, "{:.0f}W"), 5) + mark(pt) + " ");
  // The temperature bar spans 0..100 °C.
  const Tone tt = level(s.temp_gpu_c, th.temp_c);
  b.add(bar(s.temp_gpu_c, c.temp_bar, o.unicode), tt);
  b.add(right(opt_num(s.temp_gpu_c, "{:.0f}C"), 5) + mark(tt) + " ");
  b.add(sparkline(g.power_hist_w, s.power_limit_w, c.spark, o.unicode), Tone::Ok);
  b.add(" " + right(energy_text(g.energy_j), 10));
  return b.take(static_cast<size_t>(o.width), selected);
}

Line cpu_row(const HostView& h, const GpuCols& c, const RenderOptions& o) {
  LineBuilder b;
  b.add("CPU ", Tone::Title);
  const Tone ut = level(h.cpu.util_pct, o.thresholds.util_pct);
  b.add(bar(h.cpu.util_pct, c.bar, o.unicode), ut);
  b.add(right(opt_num(h.cpu.util_pct, "{:.0f}%"), 5) + mark(ut) + " ");
  b.add("pkg " + power_text(h.cpu.package_power_w) + "  dram " + power_text(h.cpu.dram_power_w));
  if (h.cpu.power_method && std::string_view(h.cpu.power_method) == "estimated") b.add(" (est.)", Tone::Dim);
  b.add(fmt::format("  mem {}/{}", bytes_text(h.cpu.mem_used_bytes), bytes_text(h.cpu.mem_total_bytes)));
  b.add("  energy " + energy_text(h.cpu_energy_j));
  if (h.cpu_energy_j) b.add(method_tag(h.cpu.power_method ? h.cpu.power_method : "unknown"), Tone::Dim);
  return b.take(static_cast<size_t>(o.width));
}

Line host_row(const HostView& h, const RenderOptions& o, bool selected) {
  LineBuilder b;
  b.add(printable(h.name.empty() ? h.url : h.name), Tone::Title);
  if (h.simulated) b.add("  SIMULATED GPUs", Tone::Warn);
  if (!h.url.empty() && h.name != h.url) b.add(" (" + printable(h.url) + ")", Tone::Dim);
  const auto age = h.age_s(o.now);
  if (h.state == HostView::State::NotAnswering) {
    b.add("  NOT ANSWERING", Tone::Alert);
    b.add(age ? "  last data " + age_text(*age) + " ago" : "  no data yet", Tone::Alert);
    if (!h.problem.empty()) b.add(" (" + printable(h.problem) + ")", Tone::Dim);
  } else if (h.state == HostView::State::Waiting) {
    b.add("  connecting...", Tone::Warn);
  } else {
    b.add(fmt::format("  live, {} ago", age_text(age.value_or(0))), Tone::Ok);
  }
  b.add(fmt::format("  {} GPU{}  power {}  energy {}{}", h.gpus.size(), h.gpus.size() == 1 ? "" : "s",
                    power_text(h.power_w()), energy_text(h.energy_j()), method_tag(host_energy_method(h).label())));
  return b.take(static_cast<size_t>(o.width), selected);
}

OptF sort_value(const TopProcess& p, SortKey k) {
  switch (k) {
  case SortKey::Power:
    return p.power_w;
  case SortKey::Cpu:
    return p.cpu_pct;
  case SortKey::Mem:
    return p.rss_bytes ? OptF(static_cast<double>(*p.rss_bytes)) : std::nullopt;
  case SortKey::GpuMem:
    return p.gpu_mem_bytes ? OptF(static_cast<double>(*p.gpu_mem_bytes)) : std::nullopt;
  case SortKey::Sm:
    return p.sm_pct;
  case SortKey::Pid:
    return static_cast<double>(p.pid);
  }
  return std::nullopt;
}

struct ProcCols {
  size_t comm;
};
constexpr size_t kProcFixed = 7 + 1 + 1 + 6 + 1 + 7 + 1 + 7 + 1 + 5 + 1 + 8;

Line proc_header(SortKey sort, size_t comm_w, size_t width) {
  auto h = [&](const char* name, SortKey k, size_t w, bool r) {
    std::string t = std::string(name) + (k == sort ? "*" : "");
    return r ? right(t, w) : left(t, w);
  };
  LineBuilder b;
  b.add(h("PID", SortKey::Pid, 7, true) + " " + left("COMMAND", comm_w) + " " + h("CPU%", SortKey::Cpu, 6, true) + " " +
            h("MEM", SortKey::Mem, 7, true) + " " + h("GPUMEM", SortKey::GpuMem, 7, true) + " " +
            h("SM%", SortKey::Sm, 5, true) + " " + h("POWER W", SortKey::Power, 8, true),
        Tone::Title);
  return b.take(width);
}

Line proc_row(const TopProcess& p, size_t comm_w, size_t width, bool selected) {
  LineBuilder b;
  b.add(right(fmt::format("{}", p.pid), 7) + " " + left(printable(p.comm), comm_w) + " " +
        right(opt_num(p.cpu_pct, "{:.1f}"), 6) + " " + right(bytes_text(p.rss_bytes), 7) + " " +
        right(bytes_text(p.gpu_mem_bytes), 7) + " " + right(opt_num(p.sm_pct, "{:.0f}"), 5) + " " +
        right(opt_num(p.power_w, "{:.2f}"), 8));
  return b.take(width, selected);
}

const char* const kHelp[] = {
    "wattscope top: live power, energy and use of this machine's GPUs and CPU, or of several serve endpoints.",
    "",
    "  q, Ctrl-C   quit (the terminal is restored)",
    "  s           sort the process list: power, cpu, mem, gpumem, sm, pid",
    "  up/down     select a GPU or a process (the selected GPU's details show below the table)",
    "  left/right  move the selection between the GPUs and the processes (also Tab)",
    "  h           this help (h again to close)",
    "",
    "Bars turn yellow near and red (with !) above their alert thresholds: utilisation > 90 %,",
    "memory > 80 %, temperature > 85 C, power > 95 % of the limit. Energy counts from when top started.",
    "Process power is attributed: the process's share of CPU time and SM use (docs/attribution.md).",
};

// The selected GPU over every host's GPUs (the selection clamped to those there are) and its host; null: no GPU.
std::pair<size_t, const TopGpu*> select_gpu(const std::vector<HostView>& hosts, ViewState& view) {
  size_t gpu_count = 0;
  for (const auto& h : hosts)
    gpu_count += h.gpus.size();
  if (gpu_count == 0)
    view.gpu_sel = 0;
  else
    view.gpu_sel = std::min(view.gpu_sel, gpu_count - 1);
  size_t k = 0;
  for (size_t hi = 0; hi < hosts.size(); ++hi)
    for (const auto& g : hosts[hi].gpus)
      if (k++ == view.gpu_sel) return {hi, &g};
  return {0, nullptr};
}

// The hosts' totals: power of those answering, energy of all.
struct Fleet {
  OptF power, energy;
  size_t answering = 0;
  std::string method;
};

Fleet fleet_of(const std::vector<HostView>& hosts) {
  Fleet f;
  std::vector<std::string> host_methods;
  for (const auto& h : hosts)
    host_methods.push_back(host_energy_method(h).label());
  f.method = combine_method_labels(host_methods, "host");
  for (const auto& h : hosts) {
    if (h.state == HostView::State::Live) ++f.answering;
    if (const OptF p = h.power_w(); p && h.state == HostView::State::Live) f.power = f.power.value_or(0) + *p;
    if (const OptF e = h.energy_j()) f.energy = f.energy.value_or(0) + *e;
  }
  return f;
}

Line title_line(const std::vector<HostView>& hosts, const Fleet& fleet, const RenderOptions& o, size_t W) {
  LineBuilder b;
  b.add("wattscope top", Tone::Title);
  if (!o.fleet && !hosts.empty()) b.add("  " + printable(hosts.front().name));
  bool any_simulated = false;
  for (const auto& h : hosts)
    any_simulated = any_simulated || h.simulated;
  if (any_simulated) b.add("  SIMULATED GPUs, not measurements", Tone::Warn);
  const double iv = std::chrono::duration<double>(o.interval).count();
  b.add(iv < 1 ? fmt::format("  every {:.0f}ms", iv * 1000) : fmt::format("  every {}", age_text(iv)), Tone::Dim);
  b.add(fmt::format("  power {}  energy {}{} since {}", power_text(fleet.power), energy_text(fleet.energy),
                    method_tag(fleet.method), o.started));
  return b.take(W);
}

// The GPU table: per host (its row in a fleet), its GPUs and its CPU.
void gpu_table(Screen& body, const std::vector<HostView>& hosts, const ViewState& view, const RenderOptions& o,
               size_t W) {
  const GpuCols gc = gpu_cols(o.width);
  body.push_back(gpu_header(gc, W));
  size_t k = 0;
  for (const HostView& h : hosts) {
    if (o.fleet) body.push_back(host_row(h, o, false));
    if (h.gpus.empty()) {
      LineBuilder b;
      b.add("    no GPUs", Tone::Dim);
      body.push_back(b.take(W));
    }
    for (const auto& g : h.gpus) {
      body.push_back(gpu_row(g, gc, o, view.focus == ViewState::Focus::Gpus && k == view.gpu_sel));
      ++k;
    }
    body.push_back(cpu_row(h, gc, o));
  }
}

Line fleet_line(const std::vector<HostView>& hosts, const Fleet& fleet, const RenderOptions& o, size_t W) {
  LineBuilder b;
  b.add("FLEET", Tone::Title);
  b.add(fmt::format("  {} hosts, {} answering  power {}  energy {}{} since {}", hosts.size(), fleet.answering,
                    power_text(fleet.power), energy_text(fleet.energy), method_tag(fleet.method), o.started));
  if (fleet.answering < hosts.size()) b.add("  (power: answering hosts only)", Tone::Dim);
  return b.take(W);
}

Line gpu_detail_line(const TopGpu& gpu, const HostView& host, const RenderOptions& o, size_t W) {
  const auto& s = gpu.s;
  LineBuilder b;
  b.add(fmt::format("GPU {} {}", s.gpu_index, printable(gpu.name)), Tone::Title); // a simulated name says so
  if (o.fleet) b.add(" on " + printable(host.name), Tone::Dim);
  b.add(fmt::format(": util {}%  mem {}/{}  power {} of {}  temp {} C  {}", opt_num(s.util_gpu_pct, "{:.0f}"),
                    bytes_text(s.mem_used_bytes), bytes_text(s.mem_total_bytes), power_text(s.power_w),
                    opt_num(s.power_limit_w, "{:.0f} W"), opt_num(s.temp_gpu_c, "{:.0f}"),
                    energy_text(gpu.energy_j) +
                        (gpu.energy_j ? method_tag(gpu.energy_method.empty() ? "unknown" : gpu.energy_method) : "")));
  return b.take(W);
}

// The forecasts, one line per host that has any.
void forecast_lines(Screen& body, const std::vector<HostView>& hosts, const RenderOptions& o, size_t W) {
  for (const auto& h : hosts) {
    if (h.forecast.empty()) continue;
    LineBuilder b;
    b.add("FORECAST", Tone::Title);
    if (o.fleet) b.add(" " + printable(h.name), Tone::Dim);
    b.add(" " + printable(h.forecast));
    body.push_back(b.take(W));
  }
}

// Firing alerts, or that none fire where alerts are known.
Line alert_line(const std::vector<HostView>& hosts, size_t W) {
  std::vector<FiringAlert> firing;
  bool alerts_known = false;
  for (const auto& h : hosts) {
    alerts_known = alerts_known || h.alerts_supported;
    for (const auto& a : h.alerts)
      firing.push_back(a);
  }
  LineBuilder b;
  if (!firing.empty()) {
    b.add(fmt::format("ALERTS {}:", firing.size()), Tone::Alert);
    for (const auto& a : firing)
      b.add(fmt::format(" [{}] {} {}: {};", printable(a.severity), printable(a.rule), printable(a.scope),
                        printable(a.message)),
            Tone::Alert);
  } else if (alerts_known) {
    b.add("no alerts firing", Tone::Dim);
  }
  return b.take(W);
}

// Anomalies and stragglers holding now, only while there are some.
std::optional<Line> anomaly_line(const std::vector<HostView>& hosts, size_t W) {
  size_t n = 0;
  for (const auto& h : hosts)
    n += h.anomalies.size();
  if (n == 0) return std::nullopt;
  LineBuilder b;
  b.add(fmt::format("ANOMALIES {}:", n), Tone::Warn);
  for (const auto& h : hosts)
    for (const auto& a : h.anomalies)
      b.add(" " + printable(a) + ";", Tone::Warn);
  return b.take(W);
}

Line keys_line(const ViewState& view, size_t W) {
  LineBuilder b;
  b.add(fmt::format("q quit  s sort:{}  up/down select  left/right {}  h help", sort_name(view.sort),
                    view.focus == ViewState::Focus::Gpus ? "to processes" : "to GPUs"),
        Tone::Title);
  return b.take(W);
}

void help_lines(Screen& body, size_t rows, size_t W) {
  for (const char* l : kHelp) {
    if (rows == 0) break;
    LineBuilder b;
    b.add(l);
    body.push_back(b.take(W));
    --rows;
  }
}

// The host's processes, sorted, in `rows` lines (its header included), scrolled to show the selected one.
void process_lines(Screen& body, std::vector<TopProcess> procs, ViewState& view, size_t rows, size_t W) {
  sort_processes(procs, view.sort);
  const size_t comm_w = W > kProcFixed + 15 ? W - kProcFixed : 15;
  body.push_back(proc_header(view.sort, comm_w, W));
  --rows;
  if (procs.empty())
    view.proc_sel = 0;
  else
    view.proc_sel = std::min(view.proc_sel, procs.size() - 1);
  if (rows == 0) return;
  if (view.proc_sel < view.proc_top) view.proc_top = view.proc_sel;
  if (view.proc_sel >= view.proc_top + rows) view.proc_top = view.proc_sel + 1 - rows;
  view.proc_top = std::min(view.proc_top, procs.size() > rows ? procs.size() - rows : 0);
  for (size_t i = view.proc_top; i < procs.size() && rows > 0; ++i, --rows)
    body.push_back(proc_row(procs[i], comm_w, W, view.focus == ViewState::Focus::Processes && i == view.proc_sel));
}

} // namespace

const char* sort_name(SortKey k) {
  switch (k) {
  case SortKey::Power:
    return "power";
  case SortKey::Cpu:
    return "cpu";
  case SortKey::Mem:
    return "mem";
  case SortKey::GpuMem:
    return "gpumem";
  case SortKey::Sm:
    return "sm";
  case SortKey::Pid:
    return "pid";
  }
  return "?";
}

SortKey next_sort(SortKey k) {
  for (size_t i = 0; i < std::size(kSortKeys); ++i)
    if (kSortKeys[i] == k) return kSortKeys[(i + 1) % std::size(kSortKeys)];
  return SortKey::Power;
}

SortKey parse_sort(const std::string& name) {
  for (SortKey k : kSortKeys)
    if (name == sort_name(k)) return k;
  throw std::invalid_argument(
      fmt::format("'{}' is not a sort key: expected power, cpu, mem, gpumem, sm or pid", printable(name)));
}

void sort_processes(std::vector<TopProcess>& procs, SortKey key) {
  std::stable_sort(procs.begin(), procs.end(), [key](const TopProcess& a, const TopProcess& b) {
    const OptF va = sort_value(a, key), vb = sort_value(b, key);
    if (va.has_value() != vb.has_value()) return va.has_value();
    if (va && *va != *vb) return key == SortKey::Pid ? *va < *vb : *va > *vb;
    // Ties (no power known on a machine without GPU processes, say) go by CPU %, busiest first, then by pid.
    if (key != SortKey::Pid && key != SortKey::Cpu && a.cpu_pct != b.cpu_pct) {
      if (a.cpu_pct.has_value() != b.cpu_pct.has_value()) return a.cpu_pct.has_value();
      return *a.cpu_pct > *b.cpu_pct;
    }
    return a.pid < b.pid;
  });
}

Screen render(const std::vector<HostView>& hosts, ViewState& view, const RenderOptions& o) {
  const size_t W = static_cast<size_t>(std::max(o.width, 20));
  const size_t H = static_cast<size_t>(std::max(o.height, 5));
  Screen body;
  const auto [sel_host, sel_gpu] = select_gpu(hosts, view);
  const Fleet fleet = fleet_of(hosts);
  body.push_back(title_line(hosts, fleet, o, W));
  gpu_table(body, hosts, view, o, W);
  if (o.fleet) body.push_back(fleet_line(hosts, fleet, o, W));
  if (sel_gpu) body.push_back(gpu_detail_line(*sel_gpu, hosts[sel_host], o, W));
  forecast_lines(body, hosts, o, W);

  // The status lines at the bottom: anomalies (while there are some), firing alerts, then keys.
  std::optional<Line> anomalies = anomaly_line(hosts, W);
  Line alerts = alert_line(hosts, W);
  Line keys = keys_line(view, W);

  // Processes (or the help) fill what is left.
  const size_t reserved = anomalies ? 3 : 2;
  const size_t left_rows = H > body.size() + reserved ? H - body.size() - reserved : 0;
  if (view.help)
    help_lines(body, left_rows, W);
  else if (left_rows > 0 && !hosts.empty())
    process_lines(body, hosts[sel_host].procs, view, left_rows, W);
  if (body.size() > H - reserved) body.resize(H - reserved); // too small a terminal: the bottom lines stay
  while (body.size() < H - reserved)
    body.push_back({});
  if (anomalies) body.push_back(std::move(*anomalies));
  body.push_back(std::move(alerts));
  body.push_back(std::move(keys));
  return body;
}

std::string plain_text(const Screen& s) {
  std::string out;
  for (const auto& l : s) {
    std::string t;
    for (const auto& sp : l.spans)
      t += sp.text;
    while (!t.empty() && t.back() == ' ')
      t.pop_back();
    out += t;
    out += '\n';
  }
  return out;
}

} // namespace wattscope::top
