// --remote-write: an exposition whose label values carry whatever a task, a process or a unit is named, turned into
// series and encoded; and --external-label as typed. The series must keep Prometheus' rules (sorted, unique label
// names, __name__ first among them) and the encoder must write well-formed protobuf whatever the text holds.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "check.hpp"
#include "remote_write/series.hpp"
#include "remote_write/wire.hpp"

using namespace wattscope::remote_write;

namespace {

uint64_t varint(std::string_view& in) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    FUZZ_CHECK(!in.empty());
    const auto b = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  FUZZ_CHECK(false);
  return 0;
}

// Every field of a message: its number among `fields`, its wire type as the schema says; returns the count.
size_t walk(std::string_view msg, int depth) {
  size_t n = 0;
  while (!msg.empty()) {
    const uint64_t key = varint(msg);
    const uint64_t field = key >> 3, type = key & 7;
    ++n;
    if (depth == 2 && field == 1 && type == 1 && msg.size() >= 8) { // Sample.value
      msg.remove_prefix(8);
      continue;
    }
    if (depth == 2 && field == 2 && type == 0) { // Sample.timestamp
      varint(msg);
      continue;
    }
    FUZZ_CHECK(type == 2 && (field == 1 || field == 2));
    const uint64_t len = varint(msg);
    FUZZ_CHECK(len <= msg.size());
    if (depth < 2) walk(msg.substr(0, len), depth + 1);
    msg.remove_prefix(len);
  }
  return n;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz_text(data, size);
  try {
    (void)parse_external_label(text.substr(0, 200));
  } catch (const std::invalid_argument&) {
  }
  BatchBuilder b({{"cluster", "fuzz"}});
  const size_t first = b.add(text, 1000);
  b.add(text.substr(size / 2), 2000); // half of it: the other half's series end (staleness markers)
  b.end(3000);
  const size_t samples = b.samples();
  FUZZ_CHECK(first <= kMaxSeriesPerExposition);
  const auto series = b.take();
  size_t counted = 0;
  for (const auto& s : series) {
    FUZZ_CHECK(!s.labels.empty());
    FUZZ_CHECK(std::is_sorted(s.labels.begin(), s.labels.end()));
    for (size_t i = 1; i < s.labels.size(); ++i)
      FUZZ_CHECK(s.labels[i].first != s.labels[i - 1].first);
    FUZZ_CHECK(std::any_of(s.labels.begin(), s.labels.end(), [](const auto& l) { return l.first == "__name__"; }));
    for (size_t i = 1; i < s.samples.size(); ++i)
      FUZZ_CHECK(s.samples[i].first > s.samples[i - 1].first);
    counted += s.samples.size();
  }
  FUZZ_CHECK(counted == samples);
  const std::string wire = encode_write_request(series);
  FUZZ_CHECK(walk(wire, 0) == series.size());
  return 0;
}
