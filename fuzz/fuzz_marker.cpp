// Marker lines from the socket a run listens on (issue 15): anything a process of the same user sends.
#include <cmath>
#include <stdexcept>
#include <string>

#include "check.hpp"
#include "phases/marker.hpp"

using namespace wattscope;

namespace {
bool printable(std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line = fuzz_text(data, size);
  Marker m;
  try {
    m = parse_marker(line);
  } catch (const std::invalid_argument&) {
    return 0; // refused with a reason: fine. Anything else thrown escapes and is a finding.
  }
  FUZZ_CHECK(line.size() <= kMaxMarkerLineBytes);
  FUZZ_CHECK(m.name.size() <= kMaxPhaseNameBytes && printable(m.name));
  FUZZ_CHECK(m.unit.size() <= kMaxWorkUnitBytes && printable(m.unit));
  if (m.kind == Marker::Kind::Begin || m.kind == Marker::Kind::Point) FUZZ_CHECK(!m.name.empty());
  if (m.kind == Marker::Kind::Work) FUZZ_CHECK(std::isfinite(m.amount) && m.amount >= 0 && !m.unit.empty());
  if (m.total) FUZZ_CHECK(m.kind == Marker::Kind::Work && std::isfinite(*m.total) && *m.total >= 0);
  if (m.index) FUZZ_CHECK(*m.index >= 0);
  if (m.parameters) FUZZ_CHECK(*m.parameters >= 0);
  if (m.flops) FUZZ_CHECK(std::isfinite(*m.flops) && *m.flops >= 0);
  // What a client encodes from an accepted marker is accepted again and means the same.
  const std::string again = encode_marker(m);
  FUZZ_CHECK(!again.empty() && again.back() == '\n');
  const Marker back = parse_marker(std::string_view(again).substr(0, again.size() - 1));
  FUZZ_CHECK(back.kind == m.kind && back.name == m.name && back.index == m.index && back.unit == m.unit);
  FUZZ_CHECK(back.amount == m.amount && back.parameters == m.parameters && back.flops == m.flops);
  FUZZ_CHECK(back.total == m.total);
  return 0;
}
