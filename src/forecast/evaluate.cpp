#include "forecast/evaluate.hpp"

#include "forecast/series_model.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace wattscope::forecast {
namespace {

constexpr std::uintmax_t kMaxTraceBytes = 64u << 20;
constexpr std::size_t kMaxTraceRows = 1'000'000;
constexpr std::size_t kMaxTraceDevices = 256;
constexpr std::size_t kMaxTraceColumns = 64;
constexpr std::size_t kMaxTraceLineBytes = 64 << 10;
// Keep in step with bench/train_lstm.py's TRAIN.
constexpr std::string_view kTrainingTraces[] = {"h100_lm.csv", "cpu_mlp.csv"};
// One GPU run and one CPU run choose the default model; the others test it.
constexpr std::string_view kValidationTraces[] = {"h100_cnn.csv", "cpu_conv.csv"};

// Fields of one CSV line; a field in double quotes may hold commas and "" (what Python's csv writes for a phase name).
std::vector<std::string> split_csv(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(cur));
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(std::move(cur));
  return out;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v)
    s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

} // namespace

std::vector<TraceSeries> load_trace_csv(const std::string& path) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec) throw std::runtime_error(fmt::format("trace '{}': cannot read it ({})", path, ec.message()));
  if (bytes > kMaxTraceBytes)
    throw std::runtime_error(
        fmt::format("trace '{}': {} bytes, over the {} MiB a trace may have", path, bytes, kMaxTraceBytes >> 20));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("trace '{}': cannot open it", path));
  return parse_trace_csv(in, path);
}

std::vector<TraceSeries> parse_trace_csv(std::istream& in, const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  std::string line;
  std::uintmax_t total = 0;
  std::size_t lineno = 0;
  // One line, at most kMaxTraceLineBytes of it: a file without newlines must not become one huge string.
  auto next_line = [&]() -> bool {
    line.clear();
    int c = 0;
    bool any = false;
    while ((c = in.get()) != std::char_traits<char>::eof()) {
      any = true;
      if (++total > kMaxTraceBytes)
        throw std::runtime_error(
            fmt::format("trace '{}': over the {} MiB a trace may have", path, kMaxTraceBytes >> 20));
      if (c == '\n') break;
      if (line.size() >= kMaxTraceLineBytes)
        throw std::runtime_error(
            fmt::format("trace '{}' line {}: over {} bytes in one line", path, lineno + 1, kMaxTraceLineBytes));
      line.push_back(static_cast<char>(c));
    }
    if (any) ++lineno;
    return any;
  };
  if (!next_line()) throw std::runtime_error(fmt::format("trace '{}': empty, no header", path));
  const auto header = split_csv(line);
  if (header.size() > kMaxTraceColumns)
    throw std::runtime_error(fmt::format("trace '{}': {} columns in the header, over the {} a trace may have", path,
                                         header.size(), kMaxTraceColumns));
  auto find = [&](std::initializer_list<std::string_view> names) -> int {
    for (auto n : names)
      for (std::size_t i = 0; i < header.size(); ++i)
        if (header[i] == n) return static_cast<int>(i);
    return -1;
  };
  const int dev_col = find({"gpu", "device"});
  const int util_col = find({"util_gpu_pct", "util_pct"});
  const int power_col = find({"power_w"});
  if (find({"t_ms"}) < 0 || dev_col < 0)
    throw std::runtime_error(fmt::format("trace '{}': the header needs t_ms and gpu (or device) columns", path));
  if (util_col < 0 && power_col < 0)
    throw std::runtime_error(
        fmt::format("trace '{}': no metric column (util_gpu_pct, util_pct or power_w) in the header", path));
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by_device; // util, power
  std::vector<std::string> order;
  while (next_line()) {
    if (line.empty() || line == "\r") continue;
    if (lineno > kMaxTraceRows + 1)
      throw std::runtime_error(fmt::format("trace '{}': over {} rows", path, kMaxTraceRows));
    const auto f = split_csv(line);
    if (f.size() != header.size())
      throw std::runtime_error(
          fmt::format("trace '{}' line {}: {} fields where the header has {}", path, lineno, f.size(), header.size()));
    auto num = [&](int col) {
      if (col < 0) return std::numeric_limits<double>::quiet_NaN();
      const std::string& s = f[static_cast<std::size_t>(col)];
      if (s.empty()) return std::numeric_limits<double>::quiet_NaN(); // missing, not 0
      double v = 0;
      const auto [p, err] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (err != std::errc{} || p != s.data() + s.size() || !std::isfinite(v))
        throw std::runtime_error(fmt::format("trace '{}' line {}: '{}' in column {} is not a number", path, lineno,
                                             s.substr(0, 40), header[static_cast<std::size_t>(col)]));
      return v;
    };
    const std::string& dev = f[static_cast<std::size_t>(dev_col)];
    auto it = by_device.find(dev);
    if (it == by_device.end()) {
      if (by_device.size() >= kMaxTraceDevices)
        throw std::runtime_error(fmt::format("trace '{}': over {} devices", path, kMaxTraceDevices));
      it = by_device.emplace(dev, std::pair<std::vector<double>, std::vector<double>>{}).first;
      order.push_back(dev);
    }
    it->second.first.push_back(num(util_col));
    it->second.second.push_back(num(power_col));
  }
  std::vector<TraceSeries> out;
  for (const auto& dev : order) {
    auto& [util, power] = by_device[dev];
    if (util_col >= 0) out.push_back({name, dev, "util", std::move(util)});
    if (power_col >= 0) out.push_back({name, dev, "power", std::move(power)});
  }
  return out;
}

TraceRole trace_role(std::string_view file_name) {
  auto in = [&](const auto& list) { return std::find(std::begin(list), std::end(list), file_name) != std::end(list); };
  if (in(kTrainingTraces)) return TraceRole::Training;
  if (in(kValidationTraces)) return TraceRole::Validation;
  if (file_name.substr(0, 4) == "sim_") return TraceRole::Simulated;
  return TraceRole::Test;
}

bool is_training_trace(std::string_view file_name) {
  return trace_role(file_name) == TraceRole::Training;
}

std::vector<ModelScore> evaluate(std::span<const TraceSeries> series, std::string_view metric,
                                 std::span<const std::string> models, std::span<const std::size_t> horizons) {
  std::vector<ModelScore> out;
  for (const auto& model_name : models) {
    if (!make_series_model(model_name)) throw std::runtime_error(fmt::format("no series model named '{}'", model_name));
    out.push_back(evaluate_model(
        series, metric, model_name, [&] { return make_series_model(model_name); }, horizons));
  }
  return out;
}

ModelScore evaluate_model(std::span<const TraceSeries> series, std::string_view metric, std::string_view label,
                          const std::function<std::unique_ptr<SeriesModel>()>& make,
                          std::span<const std::size_t> horizons) {
  const std::size_t max_h = horizons.empty() ? 0 : *std::max_element(horizons.begin(), horizons.end());
  ModelScore score{std::string(label), {}, 0};
  // Per horizon: each series' mean error, then their mean.
  std::vector<std::vector<double>> mae_per_series(horizons.size()), peak_per_series(horizons.size());
  for (const auto& s : series) {
    if (s.metric != metric) continue;
    const auto& y = s.values;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (double v : y)
      if (!std::isnan(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    if (!(hi >= lo)) continue; // nothing but missing
    auto model = make();
    std::vector<double> err_sum(horizons.size(), 0), peak_sum(horizons.size(), 0);
    std::vector<std::size_t> err_n(horizons.size(), 0), peak_n(horizons.size(), 0);
    for (std::size_t t = 0; t + 1 < y.size(); ++t) {
      model->observe(y[t]);
      const auto f = model->forecast(max_h);
      if (f.size() < max_h) continue; // nothing to say yet: not scored, for any model
      for (std::size_t k = 0; k < horizons.size(); ++k) {
        const std::size_t h = horizons[k];
        if (t + h >= y.size()) continue;
        if (!std::isnan(y[t + h])) {
          err_sum[k] += std::abs(f[h - 1] - y[t + h]);
          ++err_n[k];
        }
        if (h < 2) continue;
        std::size_t ai = 0, fi = 0;
        double amax = -std::numeric_limits<double>::infinity(), amin = -amax, fmax = amax;
        for (std::size_t j = 0; j < h; ++j) {
          const double a = y[t + 1 + j];
          if (!std::isnan(a) && a > amax) amax = a, ai = j;
          if (!std::isnan(a)) amin = std::min(amin, a);
          if (f[j] > fmax) fmax = f[j], fi = j;
        }
        if (amax - amin < 0.1 * (hi - lo) || !(hi > lo)) continue;
        peak_sum[k] += std::abs(static_cast<double>(ai) - static_cast<double>(fi));
        ++peak_n[k];
      }
    }
    for (std::size_t k = 0; k < horizons.size(); ++k) {
      if (err_n[k]) mae_per_series[k].push_back(err_sum[k] / static_cast<double>(err_n[k]));
      if (peak_n[k]) peak_per_series[k].push_back(peak_sum[k] / static_cast<double>(peak_n[k]));
    }
  }
  for (std::size_t k = 0; k < horizons.size(); ++k) {
    HorizonScore hs;
    hs.horizon = horizons[k];
    hs.mae = mean_of(mae_per_series[k]);
    hs.n = mae_per_series[k].size();
    hs.peak_n = peak_per_series[k].size();
    hs.peak_error = hs.peak_n ? mean_of(peak_per_series[k]) : -1;
    score.mean_mae += hs.mae / static_cast<double>(horizons.size());
    score.by_horizon.push_back(hs);
  }
  return score;
}

std::vector<TraceSeries> load_traces(const std::string& dir, TraceRole role, std::vector<std::string>* names) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".csv") files.push_back(e.path().filename().string());
  if (ec) throw std::runtime_error(fmt::format("traces '{}': cannot list it ({})", dir, ec.message()));
  std::sort(files.begin(), files.end());
  std::vector<TraceSeries> out;
  for (const auto& f : files) {
    if (trace_role(f) != role) continue;
    if (names) names->push_back(f);
    for (auto& s : load_trace_csv((std::filesystem::path(dir) / f).string()))
      out.push_back(std::move(s));
  }
  return out;
}

Evaluation evaluate_held_out(const std::string& dir) {
  Evaluation ev;
  load_traces(dir, TraceRole::Training, &ev.training);
  const auto validation = load_traces(dir, TraceRole::Validation, &ev.validation);
  const auto test = load_traces(dir, TraceRole::Test, &ev.test);
  const auto simulated = load_traces(dir, TraceRole::Simulated, &ev.simulated);
  if (ev.validation.empty())
    throw std::runtime_error(fmt::format("traces '{}': no validation trace in it (src/forecast/evaluate.cpp)", dir));
  const auto names = series_model_names();
  ev.util = evaluate(validation, "util", names, kEvalHorizons);
  ev.power = evaluate(validation, "power", names, kEvalHorizons);
  if (!test.empty()) {
    ev.test_util = evaluate(test, "util", names, kEvalHorizons);
    ev.test_power = evaluate(test, "power", names, kEvalHorizons);
  }
  if (!simulated.empty()) ev.simulated_util = evaluate(simulated, "util", names, kEvalHorizons);
  // Ties go to the earlier name: series_model_names() lists the simpler models first.
  const auto best = std::min_element(ev.util.begin(), ev.util.end(),
                                     [](const ModelScore& a, const ModelScore& b) { return a.mean_mae < b.mean_mae; });
  ev.winner = best->model;
  for (size_t k = 0; k < std::size(kEvalHorizons); ++k) {
    const auto b = std::min_element(ev.util.begin(), ev.util.end(), [&](const ModelScore& x, const ModelScore& y) {
      return x.by_horizon[k].mae < y.by_horizon[k].mae;
    });
    ev.winner_by_horizon.push_back(b->model);
  }
  return ev;
}

} // namespace wattscope::forecast
