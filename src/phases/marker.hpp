// Markers: what a workload tells wattscope about itself (phases, points, work done, its model), one JSON object per
// line, over a Unix datagram socket. docs/markers.md is the protocol; this is its one parser and its one encoder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// kMaxMarkerLineBytes (a longer line is refused whole; a datagram may hold several lines, each checked),
// kMaxPhaseNameBytes, kMaxWorkUnitBytes, kMaxWindowIdBytes and kMaxMarkerAmount (the largest amount, total or flops),
// generated from python/wattscope/marker_limits.json, which the Python helper reads too.
#include "wattscope/marker_limits.hpp"

namespace wattscope {

struct Marker {
  enum class Kind { Begin, End, Point, Work, Model };
  Kind kind = Kind::Point;
  std::string name;                  // phase / point / model name; empty on an `end` that closes the innermost phase
  std::optional<int64_t> index;      // begin: e.g. the epoch number
  double amount = 0;                 // work
  std::string unit;                  // work: samples, tokens, images, steps, ...
  std::optional<double> total;       // work: the run's declared total of this unit, for time to finish
  std::optional<int64_t> parameters; // model
  std::optional<double> flops;       // model: per forward pass / sample, as the caller counts them
  // When the program marked it: CLOCK_MONOTONIC in ns (Python's time.monotonic_ns(), C++'s steady_clock on Linux),
  // the clock wattscope measures on. A marker waits in queues before it arrives; this is its own time. Missing from
  // older senders: then it is placed at its arrival.
  std::optional<int64_t> mono_ns;
  // A measured window (the Python helper's measure/begin_window/end_window): a begin and an end that carry the same
  // `window` id open and close exactly that phase, so windows may overlap; an end without one closes the phase it
  // names and every phase begun inside it.
  std::string window;
  // end: the sender waits for the phase's figures, sent back to the address the marker came from (reply_to).
  bool reply = false;
  // Not part of the line: the listener sets it to the sender's socket address (the kernel's, from recvfrom) when the
  // marker asks for a reply.
  std::string reply_to;
};

std::string_view kind_name(Marker::Kind k);

// One line (without its newline). Throws std::invalid_argument naming the problem: not JSON, not an object, an
// unknown kind, a missing or bad field, a name that is not printable UTF-8, a line over kMaxMarkerLineBytes.
// Unknown fields are ignored, so newer helpers can talk to older wattscopes.
Marker parse_marker(std::string_view line);

// The line a client sends (with its newline).
std::string encode_marker(const Marker& m);

} // namespace wattscope
