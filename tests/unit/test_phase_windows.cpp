// Measured windows (the Python helper's measure/begin_window/end_window): a window is a phase closed only by an end
// with its own id, so windows overlap and plain ends pass them by; its sender gets the figures back, between ticks
// once a device was read at the edge (the CPU, read at ticks only, carried on at its last rate within a bound).
// Checked against a GPU at a constant 300 W and a CPU at 50 W, whose energy over any window is known exactly.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "phases/phase_tracker.hpp"

namespace unit_phase_windows {

using namespace wattscope;

namespace {

constexpr double kGpuW = 300, kCpuW = 50;

SteadyClock::time_point at_ms(double ms) {
  return SteadyClock::time_point(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
}

Marker window_marker(Marker::Kind kind, std::string name, std::string id, bool reply = false) {
  Marker m;
  m.kind = kind;
  m.name = std::move(name);
  m.window = std::move(id);
  m.reply = reply;
  if (reply) m.reply_to = "sender";
  return m;
}

// A tick at `ms`: the GPU's counter and the CPU's energy as they stand then.
void tick(PhaseTracker& t, int64_t n, double ms, std::vector<PhaseRecord>& rows) {
  Frame f;
  f.tick = n;
  f.mono = at_ms(ms);
  f.ts_ms = static_cast<int64_t>(ms);
  GpuSample g;
  g.gpu_index = 0;
  g.energy_j = kGpuW * ms / 1000;
  g.energy_counter_uj = static_cast<uint64_t>(g.energy_j.value() * 1e6);
  g.counter_energy_j = g.energy_j;
  g.power_w = kGpuW;
  f.gpus.push_back(g);
  f.cpu.package_energy_j = kCpuW * ms / 1000;
  f.cpu.package_power_w = kCpuW;
  f.cpu.power_method = "counter";
  t.process(f);
  for (auto& p : f.phases)
    rows.push_back(p);
}

struct Replies {
  std::vector<PhaseTracker::WindowReply> got;
  const PhaseTracker::WindowReply* find(const std::string& id) const {
    for (const auto& r : got)
      if (r.window == id) return &r;
    return nullptr;
  }
};

void answer_to(PhaseTracker& t, Replies& replies) {
  t.set_on_window([&](const PhaseTracker::WindowReply& w) { replies.got.push_back(w); });
}

// A tracker whose answers are kept, with a first tick at 0.
struct World {
  Replies replies;
  PhaseTracker t;
  std::vector<PhaseRecord> rows;
  World() {
    answer_to(t, replies);
    tick(t, 0, 0, rows);
  }
};

double energy_of(const PhaseRecord& p, const std::string& device) {
  for (const auto& [d, e] : p.device_energy_j)
    if (d == device) return e;
  return -1;
}

} // namespace

TEST(PhaseWindows, OverlappingWindowsCloseOnlyThemselvesAndPlainEndsPassThemBy) {
  World world;
  auto& [replies, t, rows] = world;
  // a at 100-700 ms, b at 400-1300 ms (overlapping), a plain phase p at 200-900 ms around them, ended by a plain end
  t.push(window_marker(Marker::Kind::Begin, "a", "w1"), 100, at_ms(100));
  Marker p;
  p.kind = Marker::Kind::Begin;
  p.name = "p";
  t.push(p, 200, at_ms(200));
  t.push(window_marker(Marker::Kind::Begin, "b", "w2"), 400, at_ms(400));
  t.push(window_marker(Marker::Kind::End, "a", "w1", true), 700, at_ms(700));
  Marker pe;
  pe.kind = Marker::Kind::End; // no name: the innermost phase, which is p, not the window b begun inside it
  t.push(pe, 900, at_ms(900));
  t.push(window_marker(Marker::Kind::End, "b", "w2", true), 1300, at_ms(1300));
  for (int n = 1; n <= 3; ++n)
    tick(t, n, n * 1000.0, rows);
  ASSERT_EQ(rows.size(), 3u);
  const auto* a = replies.find("w1");
  const auto* b = replies.find("w2");
  ASSERT_TRUE(a && a->phase && b && b->phase);
  EXPECT_NEAR(energy_of(*a->phase, "gpu0"), kGpuW * 0.6, 1e-6);
  EXPECT_NEAR(energy_of(*b->phase, "gpu0"), kGpuW * 0.9, 1e-6);
  EXPECT_NEAR(energy_of(*b->phase, "cpu_package"), kCpuW * 0.9, 1e-6);
  EXPECT_NEAR(b->duration_s, 0.9, 1e-9);
  EXPECT_EQ(b->methods.at("cpu_package"), "counter"); // as the tick labelled it
  bool plain = false;
  for (const auto& r : rows)
    if (r.name == "p") {
      plain = true;
      EXPECT_NEAR(*r.energy_j, (kGpuW + kCpuW) * 0.7, 1e-6);
      EXPECT_FALSE(r.closed_by_run_end);
    }
  EXPECT_TRUE(plain);
}

TEST(PhaseWindows, AnEndForNoOpenWindowIsAnsweredAtOnce) {
  World world;
  auto& [replies, t, rows] = world;
  t.push(window_marker(Marker::Kind::End, "x", "nope", true), 100, at_ms(100));
  tick(t, 1, 1000, rows);
  ASSERT_EQ(replies.got.size(), 1u);
  EXPECT_FALSE(replies.got[0].phase);
  EXPECT_EQ(replies.got[0].to, "sender");
  EXPECT_TRUE(rows.empty());
}

TEST(PhaseWindows, AWindowReadAtItsEdgesIsAnsweredBetweenTicksWithTheCpuCarriedOnWithinItsBound) {
  World world;
  auto& [replies, t, rows] = world;
  tick(t, 1, 1000, rows); // the CPU's rate is known from two ticks
  t.push(window_marker(Marker::Kind::Begin, "w", "w1"), 1200, at_ms(1200), at_ms(1200));
  t.add_gpu_reading(0, at_ms(1201), kGpuW * 1.201);
  t.push(window_marker(Marker::Kind::End, "w", "w1", true), 1650, at_ms(1650), at_ms(1650));
  t.add_gpu_reading(0, at_ms(1651), kGpuW * 1.651);
  EXPECT_TRUE(t.place_windows(at_ms(1660)));
  ASSERT_EQ(replies.got.size(), 1u);
  const PhaseRecord& w = *replies.got[0].phase;
  EXPECT_NEAR(energy_of(w, "gpu0"), kGpuW * 0.45, 0.01);
  EXPECT_NEAR(energy_of(w, "cpu_package"), kCpuW * 0.45, 1e-6); // a constant rate carried on is exact
  ASSERT_TRUE(w.energy_bound_j);
  EXPECT_GE(*w.energy_bound_j, kCpuW * 0.45); // the CPU's share is not known past the last tick: said
  EXPECT_EQ(w.end_edge, "reading");
  // Its row is stored with the next tick, once, and stamped with it.
  tick(t, 2, 2000, rows);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].name, "w");
  EXPECT_EQ(rows[0].end_tick, 2);
  EXPECT_EQ(rows[0].start_tick, 1);
  EXPECT_EQ(replies.got.size(), 1u);
}

TEST(PhaseWindows, WithoutAReadingAtTheEdgeAWindowWaitsForTheNextTick) {
  World world;
  auto& [replies, t, rows] = world;
  t.push(window_marker(Marker::Kind::Begin, "w", "w1"), 200, at_ms(200), at_ms(200));
  t.push(window_marker(Marker::Kind::End, "w", "w1", true), 600, at_ms(600), at_ms(600));
  EXPECT_FALSE(t.place_windows(at_ms(610))); // nothing was read past the edge: no guess
  EXPECT_TRUE(replies.got.empty());
  tick(t, 1, 1000, rows);
  ASSERT_EQ(replies.got.size(), 1u);
  EXPECT_NEAR(*replies.got[0].phase->energy_j, (kGpuW + kCpuW) * 0.4, 1e-6);
  ASSERT_EQ(rows.size(), 1u);
}

} // namespace unit_phase_windows
