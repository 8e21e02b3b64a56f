// What a marker costs the program that sends it (issue 15: goal < 50 µs, never blocking), and what the listening
// side spends per marker. Run: build/bench/wattscope_bench_markers  (the Python helper: bench/marker_cost.py).
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "phases/marker.hpp"
#include "phases/marker_socket.hpp"
#include "phases/phase_tracker.hpp"

using namespace wattscope;

namespace {

std::string temp_dir() {
  std::string t = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/wattscope-bench-XXXXXX";
  if (!::mkdtemp(t.data())) std::abort();
  return t;
}

const std::string kWork = R"({"kind":"work","amount":64,"unit":"samples"})"
                          "\n";

// The client side with wattscope listening: one non-blocking sendto per marker, the listener thread parsing it and
// queueing it for the tracker, as in a run.
void BM_SendMarkerListening(benchmark::State& state) {
  const std::string dir = temp_dir();
  PhaseTracker tracker;
  auto l = MarkerListener::at_path(dir + "/m.sock", [&](Marker m, int64_t ts) { tracker.push(std::move(m), ts); });
  l.start();
  int64_t dropped = 0;
  for (auto _ : state) {
    if (!send_marker(l.path(), kWork)) ++dropped;
    // Drain the tracker now and then as the sampler would, so its queue bound does not turn sends into drops here.
    if ((state.iterations() & 1023) == 0) {
      Frame f;
      f.ts_ms = INT64_MAX;
      tracker.process(f);
    }
  }
  l.stop();
  state.counters["dropped"] = static_cast<double>(dropped);
  ::rmdir(dir.c_str());
}
BENCHMARK(BM_SendMarkerListening)->Unit(benchmark::kMicrosecond);

// wattscope gone: the socket path names nothing; the marker is dropped at once.
void BM_SendMarkerNobodyListening(benchmark::State& state) {
  const std::string path = "/nonexistent-wattscope-dir/markers.sock";
  for (auto _ : state)
    benchmark::DoNotOptimize(send_marker(path, kWork));
}
BENCHMARK(BM_SendMarkerNobodyListening)->Unit(benchmark::kMicrosecond);

void BM_ParseMarker(benchmark::State& state) {
  const std::string_view line(kWork.data(), kWork.size() - 1);
  for (auto _ : state)
    benchmark::DoNotOptimize(parse_marker(line));
}
BENCHMARK(BM_ParseMarker)->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
