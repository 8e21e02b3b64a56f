#include "phases/scrape.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <unordered_set>

#include <fmt/format.h>

#include "core/text.hpp"
#include "wattscope/marker_limits.hpp"

namespace wattscope {

namespace {

bool name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

// A sample's value: a float as the format writes it (NaN, +Inf, -Inf included; they are not work).
std::optional<double> parse_value(std::string_view v) {
  if (v == "NaN" || v == "+Inf" || v == "-Inf" || v == "Inf") return std::nullopt;
  double d = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  if (ec != std::errc() || end != v.data() + v.size() || !std::isfinite(d)) return std::nullopt;
  return d;
}

} // namespace

ScrapeParse parse_exposition(std::string_view body, const std::vector<std::string>& wanted,
                             const ScrapeLimits& limits) {
  ScrapeParse out;
  if (body.size() > limits.max_body_bytes) {
    out.first_error = fmt::format("an answer of {} bytes (at most {})", body.size(), limits.max_body_bytes);
    out.cut = true;
    return out;
  }
  const std::unordered_set<std::string_view> want(wanted.begin(), wanted.end());
  const auto bad = [&](std::string why) {
    if (out.bad_lines++ == 0) out.first_error = std::move(why);
  };
  while (!body.empty()) {
    const size_t nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    if (line.size() > limits.max_line_bytes) {
      bad(fmt::format("a line of {} bytes", line.size()));
      continue;
    }
    if (out.series >= limits.max_series) {
      out.cut = true;
      break;
    }
    ++out.series;
    size_t n = 0;
    while (n < line.size() && name_char(line[n], n == 0))
      ++n;
    if (n == 0) {
      bad(fmt::format("not a sample: '{}'", excerpt(line, 60)));
      continue;
    }
    const std::string_view name = line.substr(0, n);
    if (!want.count(name)) continue; // most of an engine's series are not read at all
    std::string_view rest = line.substr(n);
    ScrapeSample s;
    s.name = std::string(name);
    if (!rest.empty() && rest.front() == '{') {
      std::string why;
      if (!parse_label_set(rest, s.labels, limits.max_labels, why)) {
        bad(fmt::format("{}: '{}'", why, excerpt(line, 60)));
        continue;
      }
    }
    while (!rest.empty() && rest.front() == ' ')
      rest.remove_prefix(1);
    const std::string_view value = rest.substr(0, rest.find(' ')); // a timestamp may follow
    auto v = parse_value(value);
    if (!v) {
      if (value != "NaN" && value != "+Inf" && value != "-Inf")
        bad(fmt::format("a bad value: '{}'", excerpt(line, 60)));
      continue;
    }
    s.value = *v;
    out.samples.push_back(std::move(s));
  }
  return out;
}

std::vector<ScrapeMetric> scrape_metrics(const std::vector<std::string>& unit_mappings) {
  using R = ScrapeRole;
  std::vector<ScrapeMetric> m = {
      // vLLM (docs.vllm.ai, Production Metrics; V0 and V1 engines)
      {"vllm", "vllm:generation_tokens_total", "", "", R::Work, "output_tokens"},
      {"vllm", "vllm:prompt_tokens_total", "", "", R::Work, "prompt_tokens"},
      {"vllm", "vllm:request_success_total", "", "", R::Work, "requests"},
      {"vllm", "vllm:request_prefill_time_seconds_sum", "", "", R::Work, "prefill_seconds"},
      {"vllm", "vllm:request_decode_time_seconds_sum", "", "", R::Work, "decode_seconds"},
      {"vllm", "vllm:num_requests_running", "", "", R::Running, ""},
      // Text Generation Inference (huggingface.co/docs/text-generation-inference, reference/metrics)
      {"tgi", "tgi_request_generated_tokens_sum", "", "", R::Work, "output_tokens"},
      {"tgi", "tgi_request_input_length_sum", "", "", R::Work, "prompt_tokens"},
      {"tgi", "tgi_request_success", "", "", R::Work, "requests"},
      {"tgi", "tgi_batch_forward_duration_sum", "method", "prefill", R::Work, "prefill_seconds"},
      {"tgi", "tgi_batch_forward_duration_sum", "method", "decode", R::Work, "decode_seconds"},
      {"tgi", "tgi_batch_current_size", "", "", R::Running, ""},
      // SGLang (docs.sglang.io, production metrics; --enable-metrics)
      {"sglang", "sglang:generation_tokens_total", "", "", R::Work, "output_tokens"},
      {"sglang", "sglang:prompt_tokens_total", "", "", R::Work, "prompt_tokens"},
      {"sglang", "sglang:num_requests_total", "", "", R::Work, "requests"},
      {"sglang", "sglang:num_running_reqs", "", "", R::Running, ""},
      // llama.cpp's llama-server (--metrics; tools/server README)
      {"llama.cpp", "llamacpp:tokens_predicted_total", "", "", R::Work, "output_tokens"},
      {"llama.cpp", "llamacpp:prompt_tokens_total", "", "", R::Work, "prompt_tokens"},
      {"llama.cpp", "llamacpp:prompt_seconds_total", "", "", R::Work, "prefill_seconds"},
      {"llama.cpp", "llamacpp:tokens_predicted_seconds_total", "", "", R::Work, "decode_seconds"},
      {"llama.cpp", "llamacpp:requests_processing", "", "", R::Running, ""},
  };
  for (const auto& map : unit_mappings) {
    const size_t eq = map.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == map.size())
      throw std::invalid_argument(fmt::format("'{}' is not METRIC=UNIT (e.g. my_app_items_total=items)", excerpt(map)));
    std::string metric = map.substr(0, eq), unit = map.substr(eq + 1);
    for (size_t i = 0; i < metric.size(); ++i)
      if (!name_char(metric[i], i == 0))
        throw std::invalid_argument(fmt::format("'{}' is not a Prometheus metric name", excerpt(metric)));
    validate_printable_text("the unit", unit, kMaxWorkUnitBytes);
    m.push_back({"user", std::move(metric), "", "", R::Work, std::move(unit)});
  }
  return m;
}

const std::vector<std::string>& ScrapeState::wanted() const {
  if (wanted_.empty())
    for (const auto& m : metrics_)
      if (std::find(wanted_.begin(), wanted_.end(), m.sample) == wanted_.end()) wanted_.push_back(m.sample);
  return wanted_;
}

ScrapeStep ScrapeState::observe(const ScrapeParse& parsed, double t_s) {
  ScrapeStep step;
  // Each metric's value: summed over its label sets (a counter per finish reason, per model), the label filter
  // applied.
  std::map<std::string, double> now;
  std::optional<double> running;
  for (const auto& m : metrics_) {
    std::optional<double> sum;
    for (const auto& s : parsed.samples) {
      if (s.name != m.sample) continue;
      if (!m.label.empty()) {
        auto it = std::find_if(s.labels.begin(), s.labels.end(), [&](const auto& l) { return l.first == m.label; });
        if (it == s.labels.end() || it->second != m.value) continue;
      }
      sum = sum.value_or(0) + s.value;
    }
    if (!sum) continue;
    if (step.engine.empty()) step.engine = m.engine;
    if (m.role == ScrapeRole::Running) {
      running = running.value_or(0) + *sum;
      continue;
    }
    now[m.sample + '\x1f' + m.label + '\x1f' + m.value + '\x1f' + m.unit] = *sum;
  }
  bool output = false;
  for (const auto& m : metrics_) {
    if (m.role != ScrapeRole::Work) continue;
    const std::string key = m.sample + '\x1f' + m.label + '\x1f' + m.value + '\x1f' + m.unit;
    auto cur = now.find(key);
    if (cur == now.end()) continue;
    auto prev = last_.find(key);
    if (!first_ && prev != last_.end()) {
      const double delta = cur->second - prev->second;
      if (delta < 0) { // a counter that fell: the engine restarted and counts from 0 again
        if (std::find(step.restarts.begin(), step.restarts.end(), m.engine) == step.restarts.end())
          step.restarts.push_back(m.engine);
      } else if (delta > 0) {
        step.work[m.unit] += delta;
        output = output || m.unit == "output_tokens";
      }
    }
    last_[key] = cur->second;
  }
  first_ = false;
  if (!step.restarts.empty()) {
    // What the engine did between the last scrape and its restart is unknowable, and what it did since is mixed
    // with the time before: this scrape is a new baseline, never negative work nor a guess (the caller ends its
    // spans at the last scrape and begins them again here).
    step.work.clear();
    reset_window();
    return step;
  }
  if (running) {
    max_running_ = std::max(max_running_, *running);
    const double full = rule_.max_batch.value_or(max_running_);
    const bool steady = full > 0 && *running >= rule_.fraction * full && output;
    if (!steady) {
      steady_since_.reset();
      if (window_open_) {
        window_open_ = false;
        step.steady_begins = false;
      }
    } else {
      if (!steady_since_) steady_since_ = t_s;
      if (!window_open_ && t_s - *steady_since_ >= rule_.hold_s) {
        window_open_ = true;
        step.steady_begins = true;
      }
    }
  }
  return step;
}

} // namespace wattscope
