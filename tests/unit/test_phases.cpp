// Markers (issue 15): the protocol parser, the socket, and phase accounting on synthetic frames (issue 29: each
// marker's energy interpolated at its own time; tests/unit/test_phase_energy.cpp checks it against analytic truth).
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "../support/support.hpp"
#include "core/fd.hpp"
#include "phases/marker.hpp"
#include "phases/marker_socket.hpp"
#include "phases/phase_tracker.hpp"
#include "phases/stats.hpp"
#include "runs/phase_view.hpp"

namespace unit_phases { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;

namespace {

Marker parse(std::string_view s) {
  return parse_marker(s);
}

std::string error_of(std::string_view s) {
  try {
    parse_marker(s);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(MarkerParser, ReadsEveryKind) {
  Marker b = parse(R"({"kind":"begin","name":"epoch","index":3})");
  EXPECT_EQ(b.kind, Marker::Kind::Begin);
  EXPECT_EQ(b.name, "epoch");
  EXPECT_EQ(b.index, 3);
  EXPECT_EQ(parse(R"({"kind":"end"})").kind, Marker::Kind::End);
  EXPECT_EQ(parse(R"({"kind":"end","name":"epoch"})").name, "epoch");
  EXPECT_EQ(parse(R"({"kind":"mark","name":"ckpt"})").kind, Marker::Kind::Point);
  EXPECT_EQ(parse(R"({"kind":"point","name":"ckpt"})").kind, Marker::Kind::Point);
  Marker w = parse(R"( {"kind":"work","amount":64.5,"unit":"tokens","extra":[1,2]} )");
  EXPECT_EQ(w.kind, Marker::Kind::Work);
  EXPECT_DOUBLE_EQ(w.amount, 64.5);
  EXPECT_EQ(w.unit, "tokens");
  Marker m = parse(R"({"kind":"model","name":"TinyNet","parameters":101770,"flops":2e5})");
  EXPECT_EQ(m.parameters, 101770);
  EXPECT_DOUBLE_EQ(*m.flops, 2e5);
  EXPECT_EQ(parse("{\"kind\":\"begin\",\"name\":\"\\u00e9poque\"}\r").name, "\xc3\xa9poque");
}

TEST(MarkerParser, RefusesBadInputWithAReason) {
  EXPECT_NE(error_of("{bad").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of("[1,2]").find("one JSON object"), std::string::npos);
  EXPECT_NE(error_of(std::string(100000, '[')).find("limit"), std::string::npos);
  EXPECT_NE(error_of("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[").find("one JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"explode"})").find("unknown kind"), std::string::npos);
  EXPECT_NE(error_of(R"({"name":"x"})").find("'kind' is missing"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"begin"})").find("'name' is missing"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"begin","name":""})").find("empty"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"begin","name":"a\u001b[31mred"})").find("control character"), std::string::npos);
  EXPECT_NE(error_of("{\"kind\":\"begin\",\"name\":\"\xff\xfe\"}").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"begin","name":")" + std::string(200, 'x') + "\"}").find("limit"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"begin","name":"e","index":-1})").find("negative"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"begin","name":"e","index":1.5})").find("whole number"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"begin","name":"e","index":1e300})").find("whole number"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"work","amount":-3,"unit":"samples"})").find("from 0"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"work","amount":"3","unit":"samples"})").find("number"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"work","amount":3})").find("'unit' is missing"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"work","amount":3,"unit":7})").find("string"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"model","name":"m"})").find("'parameters' or 'flops'"), std::string::npos);
  EXPECT_NE(error_of(R"({"kind":"model","parameters":18446744073709551615})").find("too large"), std::string::npos);
}

TEST(MarkerParser, EncodeThenParseGivesTheMarkerBack) {
  Marker m;
  m.kind = Marker::Kind::Begin;
  m.name = "epoch \"quoted\" ünïcode";
  m.index = 7;
  const std::string line = encode_marker(m);
  ASSERT_EQ(line.back(), '\n');
  Marker back = parse(std::string_view(line).substr(0, line.size() - 1));
  EXPECT_EQ(back.name, m.name);
  EXPECT_EQ(back.index, 7);
}

namespace {

// Synthetic time: a steady-clock instant `ms` milliseconds from its epoch, the wall clock equal to it.
SteadyClock::time_point at(int64_t ms) {
  return SteadyClock::time_point(std::chrono::milliseconds(ms));
}

// A frame at `ts_ms` where GPU 0's energy since run start is `gpu0_j` (and GPU 1's, when given).
Frame frame(int64_t tick, int64_t ts_ms, std::optional<double> gpu0_j, std::optional<double> gpu1_j = std::nullopt) {
  Frame f;
  f.tick = tick;
  f.ts_ms = ts_ms;
  f.mono = at(ts_ms);
  if (gpu0_j) {
    GpuSample s;
    s.gpu_index = 0;
    s.energy_j = gpu0_j;
    f.gpus.push_back(s);
  }
  if (gpu1_j) {
    GpuSample s;
    s.gpu_index = 1;
    s.energy_j = gpu1_j;
    f.gpus.push_back(s);
  }
  return f;
}

Marker begin(std::string name, std::optional<int64_t> index = std::nullopt) {
  Marker m;
  m.kind = Marker::Kind::Begin;
  m.name = std::move(name);
  m.index = index;
  return m;
}
Marker end(std::string name = "") {
  Marker m;
  m.kind = Marker::Kind::End;
  m.name = std::move(name);
  return m;
}
Marker work(double amount, std::string unit = "samples") {
  Marker m;
  m.kind = Marker::Kind::Work;
  m.amount = amount;
  m.unit = std::move(unit);
  return m;
}

double device_j(const PhaseRecord& p, const std::string& device) {
  for (const auto& [d, j] : p.device_energy_j)
    if (d == device) return j;
  ADD_FAILURE() << "no " << device << " in phase " << p.name;
  return -1;
}

} // namespace

// issue 29: the phase's energy is the difference of each device's counter interpolated at its begin and at its end
// (between the ticks around each), per device, whichever frame the markers are settled in; start_tick and end_tick
// are the ticks the two were interpolated from.
TEST(PhaseTracker, EnergyIsTheCounterInterpolatedAtEachMarker) {
  PhaseTracker t;
  std::vector<Frame> frames;
  const double e0[] = {0, 10, 25, 45, 70, 100};
  const double e1[] = {0, 1, 2, 4, 8, 16};
  auto tick = [&](int k) {
    Frame f = frame(k, 1000 + 1000 * k, e0[k], e1[k]);
    t.process(f);
    frames.push_back(std::move(f));
  };
  tick(0);
  t.push(begin("epoch", 0), 1500, at(1500)); // between tick 0 (1000) and tick 1 (2000): start tick 0
  tick(1);
  tick(2);
  // Stamped in tick 2's millisecond, but it arrived after tick 2 began: tick 3 brackets it.
  t.push(end("epoch"), 3000, at(3000) + std::chrono::microseconds(1));
  tick(3);
  ASSERT_EQ(frames[3].phases.size(), 1u);
  const PhaseRecord& p = frames[3].phases[0];
  EXPECT_EQ(p.name, "epoch");
  EXPECT_EQ(p.index, 0);
  EXPECT_EQ(p.start_ms, 1500);
  EXPECT_EQ(p.end_ms, 3000);
  EXPECT_EQ(p.start_tick, 0);
  EXPECT_EQ(p.end_tick, 3);
  // begin half-way from tick 0 to tick 1; end 1 us after tick 2 (of a 1 s interval to tick 3)
  EXPECT_NEAR(device_j(p, "gpu0"), (25 + 20 * 1e-6) - (0 + 10 * 0.5), 1e-9);
  EXPECT_NEAR(device_j(p, "gpu1"), (2 + 2 * 1e-6) - (0 + 1 * 0.5), 1e-9);
  EXPECT_DOUBLE_EQ(*p.energy_j, device_j(p, "gpu0") + device_j(p, "gpu1"));
  EXPECT_FALSE(p.closed_by_run_end);
}

TEST(PhaseTracker, AnEndArrivingAfterATickWaitsForTheNextOne) {
  PhaseTracker t;
  Frame f0 = frame(0, 1000, 0.0);
  t.process(f0);
  t.push(begin("a"), 1200, at(1200));
  t.push(end("a"), 2500, at(2500)); // after tick 1 (2000): only tick 2 (3000) brackets it
  Frame f1 = frame(1, 2000, 5.0);
  t.process(f1);
  EXPECT_TRUE(f1.phases.empty());
  Frame f2 = frame(2, 3000, 12.0);
  t.process(f2);
  ASSERT_EQ(f2.phases.size(), 1u);
  EXPECT_EQ(f2.phases[0].start_tick, 0);
  EXPECT_EQ(f2.phases[0].end_tick, 2);
  EXPECT_DOUBLE_EQ(*f2.phases[0].energy_j, (5 + 7 * 0.5) - (0 + 5 * 0.2)); // interpolated at 2.5 s and at 1.2 s
}

// A marker stamped with its own time may arrive seconds later (it waited in a queue on a loaded machine; a scrape's
// end is sent when the scraper stops): the ticks around its time are still there, at a short interval and a long one.
TEST(PhaseTracker, AMarkerArrivingSecondsAfterItsTimeFindsTheTicksAroundIt) {
  for (const int64_t interval_ms : {10, 100, 1000}) {
    SCOPED_TRACE(interval_ms);
    PhaseTracker t;
    std::vector<Frame> frames;
    // a counter at exactly 250 W: E(t) = 0.25 J per ms from 0
    const auto tick_at = [&](int64_t ms) {
      Frame f = frame(ms / interval_ms, ms, 0.25 * static_cast<double>(ms));
      t.process(f);
      frames.push_back(std::move(f));
    };
    int64_t now = 0;
    for (; now <= 5000; now += interval_ms)
      tick_at(now);
    // both stamped long before they arrive, within the markers' age
    t.push(begin("late"), 1234, at(1234), at(now - 5));
    t.push(end("late"), 2567, at(2567), at(now - 2));
    for (const int64_t stop = now + 3000; now <= stop; now += interval_ms)
      tick_at(now);
    std::vector<PhaseRecord> got;
    for (const auto& f : frames)
      got.insert(got.end(), f.phases.begin(), f.phases.end());
    ASSERT_EQ(got.size(), 1u);
    EXPECT_NEAR(*got[0].energy_j, 0.25 * (2567 - 1234), 1e-6);
    EXPECT_EQ(got[0].start_ms, 1234);
    EXPECT_EQ(got[0].end_ms, 2567);
  }
}

TEST(PhaseTracker, NestingParentsAndEndByName) {
  PhaseTracker t;
  Frame f0 = frame(0, 1000, 0.0);
  t.process(f0);
  t.push(begin("train"), 1100, at(1100));
  t.push(begin("epoch", 0), 1200, at(1200));
  t.push(begin("step"), 1300, at(1300));
  t.push(work(32), 1400, at(1400));
  t.push(end("epoch"), 1500, at(1500)); // ends step (inside it) and epoch; train stays open
  t.push(work(8, "tokens"), 1600, at(1600));
  t.push(end("nonexistent"), 1700, at(1700));
  Frame f1 = frame(1, 2000, 4.0);
  t.process(f1);
  ASSERT_EQ(f1.phases.size(), 2u);
  EXPECT_EQ(f1.phases[0].name, "step");
  EXPECT_EQ(f1.phases[0].parent, 1);
  EXPECT_EQ(f1.phases[1].name, "epoch");
  EXPECT_EQ(f1.phases[1].parent, 0);
  ASSERT_EQ(f1.work.size(), 2u);
  EXPECT_EQ(f1.work[0].phase_id, 2); // innermost open: step
  EXPECT_EQ(f1.work[1].phase_id, 0); // train
  EXPECT_EQ(f1.work[1].unit, "tokens");
  EXPECT_EQ(t.unmatched_ends(), 1);
  Frame closing = t.finish(2600);
  ASSERT_EQ(closing.phases.size(), 1u);
  EXPECT_TRUE(closing.markers_only);
  EXPECT_EQ(closing.phases[0].name, "train");
  EXPECT_TRUE(closing.phases[0].closed_by_run_end);
  EXPECT_EQ(closing.phases[0].end_ms, 2600);
  EXPECT_EQ(closing.phases[0].end_tick, 1);
  EXPECT_DOUBLE_EQ(*closing.phases[0].energy_j, 4.0 - 0.4); // from 1.1 s to the last tick (the run's end is after it)
}

TEST(PhaseTracker, AMissingDeviceKeepsItsLastCounterAndNoEnergyIsMissingNotZero) {
  PhaseTracker t;
  Frame f0 = frame(0, 1000, 3.0);
  t.process(f0);
  t.push(begin("a"), 1100, at(1100));
  Frame f1 = frame(1, 2000, std::nullopt); // GPU 0 late this tick
  t.process(f1);
  t.push(end("a"), 2100, at(2100));
  Frame f2 = frame(2, 3000, std::nullopt);
  t.process(f2);
  EXPECT_TRUE(f2.phases.empty()); // the end waits for the device's next value (PhaseTracker::kMaxEdgeWait at most)
  Frame f3 = frame(3, 4000, 6.0);
  t.process(f3);
  ASSERT_EQ(f3.phases.size(), 1u);
  // Interpolated across its gap: 1 J a second from 1.0 s (3 J) to 4.0 s (6 J), not its last value held
  EXPECT_NEAR(*f3.phases[0].energy_j, 1.0, 1e-9);
  EXPECT_EQ(f3.phases[0].end_edge, "interpolated");
  // One that never answers again: at the run's end its last value is held, and the edge says it has none
  t.push(begin("c"), 4100, at(4100));
  Frame f4 = frame(4, 5000, std::nullopt);
  t.process(f4);
  t.push(end("c"), 5100, at(5100));
  Frame last = t.finish(5200);
  ASSERT_EQ(last.phases.size(), 1u);
  EXPECT_EQ(last.phases[0].end_edge, "none");
  // No device measuring energy at all: the phase has no energy figure, not 0.
  PhaseTracker t2;
  Frame g0 = frame(0, 1000, std::nullopt);
  t2.process(g0);
  t2.push(begin("b"), 1100, at(1100));
  t2.push(end("b"), 1200, at(1200));
  Frame g1 = frame(1, 2000, std::nullopt);
  t2.process(g1);
  ASSERT_EQ(g1.phases.size(), 1u);
  EXPECT_FALSE(g1.phases[0].energy_j.has_value());
}

// The wall clock steps back an hour (NTP) between two ticks: markers are settled by the steady clock, at the next
// tick, not an hour later; their stored times are the wall clock's.
TEST(PhaseTracker, AWallClockStepNeitherHoldsBackNorReordersMarkers) {
  PhaseTracker t;
  Frame f0 = frame(0, 10'000'000, 0.0);
  f0.mono = at(1000);
  t.process(f0);
  t.push(begin("a"), 10'000'500, at(1500));
  t.push(end("a"), 6'400'600, at(1600)); // the clock stepped back by an hour in between
  Frame f1 = frame(1, 6'401'000, 7.0);
  f1.mono = at(2000);
  t.process(f1);
  ASSERT_EQ(f1.phases.size(), 1u);
  EXPECT_EQ(f1.phases[0].start_tick, 0);
  EXPECT_EQ(f1.phases[0].end_tick, 1);
  EXPECT_DOUBLE_EQ(*f1.phases[0].energy_j, 7.0 * 0.6 - 7.0 * 0.5); // at the steady 1.5 s and 1.6 s
  EXPECT_GE(f1.phases[0].end_ms, f1.phases[0].start_ms);           // never a negative duration
}

TEST(PhaseTracker, AFloodIsBoundedAndDropped) {
  PhaseTracker t;
  for (size_t i = 0; i < PhaseTracker::kMaxPending + 500; ++i)
    t.push(work(1), 1500, at(1500));
  // issue 31: work stops kReservedForPhases short of the cap, leaving room for begin/end
  const size_t kept = PhaseTracker::kMaxPending - PhaseTracker::kReservedForPhases;
  EXPECT_EQ(t.dropped(), static_cast<int64_t>(PhaseTracker::kMaxPending + 500 - kept));
  Frame f = frame(0, 2000, 1.0);
  t.process(f);
  EXPECT_EQ(f.work.size(), kept);
}

namespace {

struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Marker> markers;
  void add(Marker m) {
    std::lock_guard l(mu);
    markers.push_back(std::move(m));
    cv.notify_all();
  }
  bool wait_for(size_t n) {
    std::unique_lock l(mu);
    return cv.wait_for(l, std::chrono::seconds(5), [&] { return markers.size() >= n; });
  }
};

bool send_raw(const std::string& path, const std::string& data) {
  return send_marker(path, data);
}

} // namespace

TEST(MarkerSocket, HostileInputIsCountedAndTheGoodMarkersStillArrive) {
  wstest::TempDir dir;
  Collected got;
  auto l = MarkerListener::at_path(dir / "m.sock", [&](Marker m, int64_t) { got.add(std::move(m)); });
  struct stat st {};
  ASSERT_EQ(::lstat(l.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  l.start();
  EXPECT_TRUE(send_raw(l.path(), "{bad json\n"));
  EXPECT_TRUE(send_raw(l.path(), R"({"kind":"explode"})"));
  EXPECT_TRUE(send_raw(l.path(), std::string(kMaxMarkerLineBytes + 10, 'x')));
  EXPECT_TRUE(send_raw(l.path(), std::string("\0\0\0\xff", 4)));
  // Several lines in one datagram: the bad one is skipped, the good ones are read.
  EXPECT_TRUE(send_raw(
      l.path(), "{\"kind\":\"mark\",\"name\":\"a\"}\n[1]\n{\"kind\":\"work\",\"amount\":2,\"unit\":\"steps\"}\n"));
  ASSERT_TRUE(got.wait_for(2));
  l.stop();
  EXPECT_EQ(got.markers[0].name, "a");
  EXPECT_EQ(got.markers[1].unit, "steps");
  EXPECT_EQ(l.stats().accepted.load(), 2);
  EXPECT_EQ(l.stats().rejected.load(), 5);
}

TEST(MarkerSocket, AnOversizedDatagramIsRefusedWhole) {
  wstest::TempDir dir;
  Collected got;
  auto l = MarkerListener::at_path(dir / "m.sock", [&](Marker m, int64_t) { got.add(std::move(m)); });
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM, 0));
  int big = 1 << 20;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  l.start();
  std::string huge = "{\"kind\":\"mark\",\"name\":\"x\"}\n" + std::string(kMaxMarkerDatagramBytes + 100, ' ');
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", l.path().c_str());
  const ssize_t n = ::sendto(fd.get(), huge.data(), huge.size(), 0, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  if (n < 0) GTEST_SKIP() << "this kernel's datagram limit is below " << huge.size() << " bytes";
  EXPECT_TRUE(send_raw(l.path(), "{\"kind\":\"mark\",\"name\":\"after\"}"));
  ASSERT_TRUE(got.wait_for(1));
  l.stop();
  ASSERT_EQ(got.markers.size(), 1u);
  EXPECT_EQ(got.markers[0].name, "after"); // the marker inside the huge datagram was not taken
  EXPECT_EQ(l.stats().rejected.load(), 1);
}

TEST(MarkerSocket, APathInUseOrNotASocketIsRefusedAndAStaleSocketReplaced) {
  wstest::TempDir dir;
  wstest::write_file(dir / "file", "keep me");
  EXPECT_THROW(MarkerListener::at_path(dir / "file", [](Marker, int64_t) {}), std::runtime_error);
  EXPECT_EQ(wstest::read_file(dir / "file"), "keep me");
  {
    auto live = MarkerListener::at_path(dir / "s.sock", [](Marker, int64_t) {});
    EXPECT_THROW(MarkerListener::at_path(dir / "s.sock", [](Marker, int64_t) {}), std::runtime_error);
  }
  // A socket file left by a killed wattscope: nobody answers, so it is replaced.
  {
    UniqueFd stale(::socket(AF_UNIX, SOCK_DGRAM, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", (dir / "stale.sock").c_str());
    ASSERT_EQ(::bind(stale.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  }
  EXPECT_NO_THROW(MarkerListener::at_path(dir / "stale.sock", [](Marker, int64_t) {}));
}

TEST(MarkerSocket, APrivateDirectoryOnlyItsOwnerCanEnterAndItIsRemoved) {
  wstest::TempDir dir;
  ::setenv("TMPDIR", dir.path().c_str(), 1);
  std::string path, parent;
  {
    auto l = MarkerListener::in_private_dir([](Marker, int64_t) {});
    ::unsetenv("TMPDIR");
    path = l.path();
    parent = path.substr(0, path.rfind('/'));
    struct stat st {};
    ASSERT_EQ(::stat(parent.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_EQ(parent.rfind(dir.path(), 0), 0u);
  }
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  EXPECT_NE(::access(parent.c_str(), F_OK), 0);
}

TEST(MarkerSocket, SendingWithNobodyListeningDropsAtOnce) {
  wstest::TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(send_marker(dir / "nobody.sock", "{\"kind\":\"mark\",\"name\":\"x\"}\n"));
  EXPECT_FALSE(send_marker(std::string(200, 'x'), "{}"));
  EXPECT_FALSE(send_marker("", "{}"));
  // A listener that never reads: the queue fills and sends fail rather than wait.
  auto l = MarkerListener::at_path(dir / "full.sock", [](Marker, int64_t) {});
  int sent = 0, dropped = 0;
  for (int i = 0; i < 20000 && dropped == 0; ++i)
    (send_marker(l.path(), "{\"kind\":\"mark\",\"name\":\"x\"}\n") ? sent : dropped)++;
  EXPECT_GT(sent, 0);
  EXPECT_GT(dropped, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)); // generous: no send waited
}

// --- statistics over repeated runs: checked against published tables and against a computation written apart.

namespace {
// Student's t density, integrated numerically (Simpson's rule on a fine grid): a second opinion on the CDF that
// shares nothing with the incomplete-beta code under test.
double t_pdf(double x, double df) {
  return std::exp(std::lgamma((df + 1) / 2) - std::lgamma(df / 2)) / std::sqrt(df * M_PI) *
         std::pow(1 + x * x / df, -(df + 1) / 2);
}
double two_sided_p_by_integration(double t, double df) {
  // P(|T| > |t|) = 1 - 2 * integral_0^|t| pdf
  const int n = 200000;
  const double h = std::fabs(t) / n;
  double s = t_pdf(0, df) + t_pdf(std::fabs(t), df);
  for (int i = 1; i < n; ++i)
    s += (i % 2 ? 4 : 2) * t_pdf(i * h, df);
  return 1 - 2 * s * h / 3;
}
} // namespace

TEST(Stats, StudentTQuantilesMatchTheTables) {
  // t(0.975, df), from any table of Student's t (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2).
  const std::pair<double, double> table[] = {{1, 12.706}, {2, 4.303},  {3, 3.182},  {4, 2.776},
                                             {9, 2.262},  {10, 2.228}, {30, 2.042}, {100, 1.984}};
  for (const auto& [df, t] : table)
    EXPECT_NEAR(student_t_quantile(0.975, df), t, 1.5e-3) << "df " << df;
  EXPECT_NEAR(student_t_quantile(0.95, 5), 2.015, 1.5e-3);
  EXPECT_DOUBLE_EQ(student_t_cdf(0, 7), 0.5);
  EXPECT_NEAR(student_t_cdf(student_t_quantile(0.975, 6.3), 6.3), 0.975, 1e-12);
  EXPECT_NEAR(student_t_quantile(0.025, 4), -student_t_quantile(0.975, 4), 1e-12);
}

TEST(Stats, SummaryIsMeanSampleSdAndTheTInterval) {
  const std::vector<double> xs = {101.5, 98.25, 103.0, 99.75, 100.5};
  const SampleSummary s = summarize(xs);
  EXPECT_EQ(s.n, 5u);
  EXPECT_NEAR(s.mean, 503.0 / 5, 1e-12);
  // Squared deviations from 100.6: 0.81 + 5.5225 + 5.76 + 0.7225 + 0.01 = 12.825 (Python: statistics.variance)
  EXPECT_NEAR(*s.sd, std::sqrt(12.825 / 4), 1e-12);
  const double half = 2.776445105 * *s.sd / std::sqrt(5.0);
  EXPECT_NEAR(*s.ci_low, s.mean - half, 1e-6);
  EXPECT_NEAR(*s.ci_high, s.mean + half, 1e-6);
  const SampleSummary one = summarize({42});
  EXPECT_EQ(one.mean, 42);
  EXPECT_FALSE(one.sd.has_value());
  EXPECT_FALSE(one.ci_low.has_value());
  EXPECT_EQ(summarize({}).n, 0u);
}

TEST(Stats, WelchTestAgreesWithAnIndependentComputation) {
  const std::vector<double> a = {1210, 1195, 1230, 1202, 1221};
  const std::vector<double> b = {1150, 1188, 1131, 1176};
  const auto w = welch_t_test(a, b);
  ASSERT_TRUE(w.has_value());
  // Python's statistics module: means 1211.6 and 1161.25, sample variances 199.3 and 658.25.
  const double va = 199.3 / 5, vb = 658.25 / 4;
  EXPECT_NEAR(w->t, (1161.25 - 1211.6) / std::sqrt(va + vb), 1e-9);
  EXPECT_NEAR(w->df, (va + vb) * (va + vb) / (va * va / 4 + vb * vb / 3), 1e-9);
  EXPECT_NEAR(w->p, two_sided_p_by_integration(w->t, w->df), 1e-7);
  EXPECT_LT(w->p, 0.05);
  // Overlapping samples: no evidence of a difference.
  const auto same = welch_t_test({10, 12, 11, 13}, {11, 12, 10, 13});
  EXPECT_NEAR(same->p, two_sided_p_by_integration(same->t, same->df), 1e-7);
  EXPECT_GT(same->p, 0.5);
  EXPECT_FALSE(welch_t_test({1}, {1, 2}).has_value());
  EXPECT_EQ(welch_t_test({5, 5}, {5, 5})->p, 1);
  EXPECT_EQ(welch_t_test({5, 5}, {6, 6})->p, 0);
}

// "J/copy", not "J/copie": the summary's per-unit figure names one unit (seen on a real run's "copies").
TEST(PhaseView, UnitSingular) {
  EXPECT_EQ(unit_singular("samples"), "sample");
  EXPECT_EQ(unit_singular("tokens"), "token");
  EXPECT_EQ(unit_singular("copies"), "copy");
  EXPECT_EQ(unit_singular("batches"), "batch");
  EXPECT_EQ(unit_singular("boxes"), "box");
  EXPECT_EQ(unit_singular("passes"), "pass");
  EXPECT_EQ(unit_singular("loss"), "loss");
  EXPECT_EQ(unit_singular("s"), "s");
  EXPECT_EQ(unit_singular("kWh"), "kWh");
}
} // namespace unit_phases
