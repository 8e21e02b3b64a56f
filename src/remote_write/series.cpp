#include "remote_write/series.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "core/text.hpp"

namespace wattscope::remote_write {

namespace {

bool name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

// A sample line's series key (the metric name and its label set, as written) and its value text; false for a line
// that is no sample. A timestamp after the value is ignored: the batch stamps the frame's time.
bool split_line(std::string_view line, std::string_view& key, std::string_view& value) {
  size_t n = 0;
  while (n < line.size() && name_char(line[n], n == 0))
    ++n;
  if (n == 0) return false;
  if (n < line.size() && line[n] == '{') {
    bool quoted = false;
    for (++n; n < line.size(); ++n) {
      const char c = line[n];
      if (quoted && c == '\\') {
        ++n;
      } else if (c == '"') {
        quoted = !quoted;
      } else if (!quoted && c == '}') {
        break;
      }
    }
    if (n >= line.size()) return false;
    ++n;
  }
  key = line.substr(0, n);
  std::string_view rest = line.substr(n);
  if (rest.empty() || rest.front() != ' ') return false;
  while (!rest.empty() && rest.front() == ' ')
    rest.remove_prefix(1);
  value = rest.substr(0, rest.find(' '));
  return !value.empty();
}

bool parse_value(std::string_view v, double& out) {
  if (v == "NaN") return out = std::numeric_limits<double>::quiet_NaN(), true;
  if (v == "+Inf" || v == "Inf") return out = std::numeric_limits<double>::infinity(), true;
  if (v == "-Inf") return out = -std::numeric_limits<double>::infinity(), true;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc() && end == v.data() + v.size() && std::isfinite(out);
}

// The key's labels, `__name__` and the external labels the series lacks included, sorted by name. A label with an
// empty value is the same as none to Prometheus, and is left out.
bool parse_key(std::string_view key, const Labels& external, Labels& out) {
  out.clear();
  size_t n = 0;
  while (n < key.size() && name_char(key[n], n == 0))
    ++n;
  out.emplace_back("__name__", std::string(key.substr(0, n)));
  std::string_view rest = key.substr(n);
  if (!rest.empty()) {
    std::string why;
    if (!parse_label_set(rest, out, kMaxLabelsPerSeries + 1, why)) return false;
    // A label with an empty value is the same as none to Prometheus.
    std::erase_if(out, [](const auto& l) { return l.second.empty(); });
    for (size_t i = 1; i < out.size(); ++i) // Prometheus refuses the whole batch for a ':' in a label name
      if (out[i].first.find(':') != std::string::npos) return false;
  }
  for (const auto& ext : external)
    if (std::none_of(out.begin(), out.end(), [&](const auto& l) { return l.first == ext.first; })) out.push_back(ext);
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].first == out[i - 1].first) return false; // a label twice: no receiver takes it
  return true;
}

} // namespace

bool is_stale_marker(double v) {
  return std::bit_cast<uint64_t>(v) == kStaleNaNBits;
}

BatchBuilder::BatchBuilder(Labels external) : external_(std::move(external)) {
  for (const auto& [name, value] : external_)
    validate_label_name(name);
}

void BatchBuilder::append(KnownMap::value_type& k, int64_t ts_ms, double v) {
  if (k.second.pos == SIZE_MAX) {
    Series s;
    if (!parse_key(k.first, external_, s.labels)) {
      ++bad_lines_;
      return;
    }
    k.second.pos = batch_.size();
    batch_.push_back(std::move(s));
  }
  auto& samples = batch_[k.second.pos].samples;
  // One sample per series and time: a series written twice in one exposition keeps its first value.
  if (!samples.empty() && samples.back().first >= ts_ms) return;
  samples.emplace_back(ts_ms, v);
  ++samples_;
}

size_t BatchBuilder::add(std::string_view text, int64_t ts_ms) {
  const size_t before = samples_;
  const uint64_t gen = ++gen_;
  size_t lines = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    if (++lines > kMaxSeriesPerExposition) {
      ++bad_lines_;
      break;
    }
    std::string_view key, value;
    double v = 0;
    if (!split_line(line, key, value) || !parse_value(value, v)) {
      ++bad_lines_;
      continue;
    }
    auto it = known_.find(key);
    if (it == known_.end()) it = known_.emplace(std::string(key), Known{}).first;
    it->second.gen = gen;
    append(*it, ts_ms, v);
  }
  // A series the previous add had and this one lacks ended here.
  for (auto& k : known_)
    if (k.second.gen == gen - 1) append(k, ts_ms, std::bit_cast<double>(kStaleNaNBits));
  return samples_ - before;
}

size_t BatchBuilder::end(int64_t ts_ms) {
  const size_t before = samples_;
  for (auto& k : known_)
    if (k.second.gen == gen_) {
      append(k, ts_ms, std::bit_cast<double>(kStaleNaNBits));
      k.second.gen = 0;
    }
  return samples_ - before;
}

std::vector<Series> BatchBuilder::take() {
  std::vector<Series> out;
  out.swap(batch_);
  samples_ = 0;
  // Series the last add had stay known (for their staleness later); those that ended are forgotten.
  for (auto it = known_.begin(); it != known_.end();) {
    if (it->second.gen != gen_) {
      it = known_.erase(it);
    } else {
      it->second.pos = SIZE_MAX;
      ++it;
    }
  }
  return out;
}

void validate_label_name(std::string_view name) {
  if (name.empty()) throw std::invalid_argument("an empty label name");
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok)
      throw std::invalid_argument(fmt::format("label name '{}' has '{}' at position {}: a label name is letters, "
                                              "digits and '_', not starting with a digit",
                                              name, c, i + 1));
  }
  if (name.starts_with("__"))
    throw std::invalid_argument(fmt::format("label name '{}' starts with '__', which Prometheus reserves", name));
  if (name.size() > 128) throw std::invalid_argument("a label name longer than 128 characters");
}

std::pair<std::string, std::string> parse_external_label(std::string_view text) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos)
    throw std::invalid_argument(fmt::format("'{}' is not NAME=VALUE (for example cluster=a100-east)", text));
  std::string name(text.substr(0, eq)), value(text.substr(eq + 1));
  validate_label_name(name);
  if (value.empty()) throw std::invalid_argument(fmt::format("label '{}' has an empty value", name));
  if (value.size() > 1024) throw std::invalid_argument(fmt::format("label '{}' has a value over 1024 bytes", name));
  for (const unsigned char c : value)
    if (c < 0x20 || c == 0x7f)
      throw std::invalid_argument(fmt::format("label '{}' has a control character in its value", name));
  return {std::move(name), std::move(value)};
}

} // namespace wattscope::remote_write
