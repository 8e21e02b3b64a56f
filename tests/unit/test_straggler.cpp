// Stragglers (issue 36): a GPU that ran behind its siblings, on synthetic series whose slow stretch is known. Each
// expected figure is worked out here from the series' values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "advice/advice.hpp"
#include "core/time_util.hpp"

namespace unit_straggler { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wattscope::advice;

namespace {

constexpr int64_t kT0 = 1'700'000'000'000;
constexpr double kIdleW = 70;

// What a GPU does over [from_s, to_s): its clock, utilisation, power and clock-event reasons.
struct Episode {
  int from_s = 0, to_s = 0;
  int64_t clock = 1980;
  double util = 97, power = 600;
  int64_t reasons = 0;
};

// n samples 1 s apart: idle for the first `idle_s` (so its idle power is known), then training at 1,980 MHz, 97 %,
// 600 W, with noise a healthy GPU shows: the clock in its 15 MHz bins, utilisation ±3 points, power ±4 %; the
// episodes override the training values in their range.
GpuSeries gpu(int index, int n, uint32_t seed, const std::vector<Episode>& episodes = {}, int idle_s = 60) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> bin(-1, 1);
  std::uniform_real_distribution<double> unit(-1, 1);
  GpuSeries g;
  g.gpu_index = index;
  g.name = "Test GPU";
  g.mem_total_bytes = 80LL << 30;
  g.power_limit_w = 700;
  g.clock_sm_max_mhz = 1980;
  double energy = 0;
  for (int i = 0; i < n; ++i) {
    Episode e{0, 0, 1980, 97, 600, 0};
    if (i < idle_s) e = {0, 0, 345, 0, kIdleW, 0};
    for (const auto& ep : episodes)
      if (i >= ep.from_s && i < ep.to_s) e = ep;
    GpuPoint p;
    p.ts_ms = kT0 + 1000LL * i;
    const bool idle = i < idle_s;
    p.power_w = idle ? kIdleW : e.power * (1 + 0.04 * unit(rng));
    energy += *p.power_w; // the counter's 1 s step ends at this sample: the interval's power is the sample's
    p.energy_j = energy;
    p.util_pct = idle ? 0 : std::clamp(e.util + 3 * unit(rng), 0.0, 100.0);
    p.clock_sm_mhz = idle ? e.clock : e.clock + 15 * bin(rng);
    p.throttle_reasons = e.reasons;
    p.mem_used_bytes = 70LL << 30;
    p.temp_c = 60;
    g.points.push_back(p);
  }
  return g;
}

std::vector<const Item*> of_kind(const std::vector<Item>& items, const std::string& kind) {
  std::vector<const Item*> out;
  for (const auto& i : items)
    if (i.kind == kind) out.push_back(&i);
  return out;
}

} // namespace

TEST(Straggler, SteadyIdenticalGpusWithNoiseAreNone) {
  Input in;
  for (int g = 0; g < 8; ++g)
    in.gpus.push_back(gpu(g, 2000, 100 + static_cast<uint32_t>(g)));
  const auto items = advise(in);
  EXPECT_TRUE(of_kind(items, "straggler").empty()) << to_json(items).dump(2);
}

// GPU 3 of eight at 1,410 MHz for 22 min (HW thermal slowdown, drawing less), the others at 1,980 MHz.
TEST(Straggler, OneThrottledAmongEightIsFoundWithItsFigures) {
  constexpr int kFrom = 400, kTo = kFrom + 22 * 60, kN = 2000;
  Input in;
  for (int g = 0; g < 8; ++g)
    in.gpus.push_back(gpu(g, kN, 200 + static_cast<uint32_t>(g),
                          g == 3 ? std::vector<Episode>{{kFrom, kTo, 1410, 99, 520, 0x40}} : std::vector<Episode>{}));
  const auto items = advise(in);
  const auto found = of_kind(items, "straggler");
  ASSERT_EQ(found.size(), 1u) << to_json(items).dump(2);
  const Item& it = *found[0];
  const auto& ev = it.evidence;
  EXPECT_EQ(ev["device"], "gpu3");
  EXPECT_EQ(ev["metric"], "clock_sm");
  EXPECT_EQ(ev["siblings"], 7);
  // The intervals ending at samples kFrom … kTo−1 are the slow ones: 1,320 s, give or take the stretch's ends.
  EXPECT_NEAR(ev["seconds"].get<double>(), kTo - kFrom, 2);
  EXPECT_EQ(ev["from"], iso_utc_ms(kT0 + 1000LL * (kFrom - 1)));
  EXPECT_EQ(ev["to"], iso_utc_ms(kT0 + 1000LL * (kTo - 1)));
  EXPECT_NEAR(ev["share_pct"].get<double>(), 100.0 * (kTo - kFrom) / (kN - 1), 0.2);
  EXPECT_NEAR(ev["clock_sm_mhz"].get<double>(), 1410, 15);
  EXPECT_NEAR(ev["siblings_clock_sm_mhz"].get<double>(), 1980, 15);
  EXPECT_EQ(ev["reasons"], "HW thermal slowdown");
  // The siblings' wait: Σ dt·(1 − c/c_siblings) with c ≈ 1410 and c_siblings ≈ 1980 (the noise averages out).
  const double waited = (kTo - kFrom) * (1 - 1410.0 / 1980);
  EXPECT_NEAR(ev["waited_s"].get<double>(), waited, 0.02 * waited);
  // Seven siblings, each waiting at its 70 W idle power (the median of its idle samples).
  EXPECT_DOUBLE_EQ(ev["siblings_idle_power_w"].get<double>(), 7 * kIdleW);
  ASSERT_TRUE(it.saving_j.has_value());
  EXPECT_NEAR(*it.saving_j, ev["waited_s"].get<double>() * 7 * kIdleW, 1e-6);
  EXPECT_EQ(ev["estimate"], "modelled");
  EXPECT_EQ(ev["stretches"], 1);
  for (const char* want :
       {"GPU 3 (Test GPU) ran behind its siblings: at 1,410 MHz for 22 min",
        "while its 7 siblings ran at 1,980 MHz; its throttle reasons: HW thermal slowdown", "modelled"})
    EXPECT_NE(it.text.find(want), std::string::npos) << want << " not in: " << it.text;
}

// Two GPUs: in lockstep the fast one waits for the slow one, so its utilisation falls while its clock stays high; the
// slow one is the straggler, not the one that waited.
TEST(Straggler, OfTwoOnlyTheSlowerOneAndOnlyWhenFarApart) {
  {
    Input in;
    in.gpus.push_back(gpu(0, 1000, 1, {{300, 700, 1500, 99, 560, 0x20}}));
    in.gpus.push_back(gpu(1, 1000, 2, {{300, 700, 1980, 72, 480, 0}}));
    const auto items = advise(in);
    const auto found = of_kind(items, "straggler");
    ASSERT_EQ(found.size(), 1u) << to_json(items).dump(2);
    EXPECT_EQ(found[0]->evidence["device"], "gpu0");
    EXPECT_EQ(found[0]->evidence["siblings"], 1);
    EXPECT_NEAR(found[0]->evidence["seconds"].get<double>(), 400, 2);
    EXPECT_NE(found[0]->text.find("its 1 sibling ran"), std::string::npos) << found[0]->text;
  }
  {
    // 5 % slower (one GPU boosting a little less than the other): the spread of healthy GPUs, no straggler.
    Input in;
    in.gpus.push_back(gpu(0, 1000, 3, {{60, 1000, 1880, 97, 580, 0}}));
    in.gpus.push_back(gpu(1, 1000, 4));
    const auto items = advise(in);
    EXPECT_TRUE(of_kind(items, "straggler").empty()) << to_json(items).dump(2);
  }
}

// A GPU that computes less of the time than its siblings (its input is slower): a utilisation straggler, its wait
// modelled from its utilisation's share of theirs.
TEST(Straggler, UtilisationStragglerAmongFour) {
  Input in;
  for (int g = 0; g < 4; ++g)
    in.gpus.push_back(gpu(g, 1000, 300 + static_cast<uint32_t>(g),
                          g == 2 ? std::vector<Episode>{{500, 800, 1980, 50, 400, 0}} : std::vector<Episode>{}));
  const auto items = advise(in);
  const auto found = of_kind(items, "straggler");
  ASSERT_EQ(found.size(), 1u) << to_json(items).dump(2);
  const auto& ev = found[0]->evidence;
  EXPECT_EQ(ev["device"], "gpu2");
  EXPECT_EQ(ev["metric"], "util");
  EXPECT_NEAR(ev["seconds"].get<double>(), 300, 2);
  EXPECT_NEAR(ev["util_pct"].get<double>(), 50, 1.5);
  EXPECT_NEAR(ev["siblings_util_pct"].get<double>(), 97, 1.5);
  EXPECT_NEAR(ev["waited_s"].get<double>(), 300 * (1 - 50.0 / 97), 0.03 * 300 * (1 - 50.0 / 97));
  EXPECT_NE(found[0]->text.find("50 % utilisation"), std::string::npos) << found[0]->text;
}

// A power-capped GPU whose power stays down a while after its clock is back (an edge interval that straddles the cap's
// end, a late tick, a slow controller): apart by power longer than by its clock, it is still named by its clock, the
// cause, and its wait is the clock's.
TEST(Straggler, AClockStragglerWhosePowerLagsItsClockIsNamedByItsClock) {
  constexpr int kFrom = 100, kClockTo = 200, kPowerTo = 215;
  Input in;
  for (int g = 0; g < 3; ++g)
    in.gpus.push_back(
        gpu(g, 400, 450 + static_cast<uint32_t>(g),
            g == 1 ? std::vector<Episode>{{kFrom, kClockTo, 1410, 97, 450, 0x4}, {kClockTo, kPowerTo, 1980, 97, 450, 0}}
                   : std::vector<Episode>{}));
  const auto items = advise(in);
  const auto found = of_kind(items, "straggler");
  ASSERT_EQ(found.size(), 1u) << to_json(items).dump(2);
  const auto& ev = found[0]->evidence;
  EXPECT_EQ(ev["device"], "gpu1");
  EXPECT_NEAR(ev["seconds"].get<double>(), kPowerTo - kFrom, 2); // the stretch is the power's
  EXPECT_EQ(ev["metric"], "clock_sm");                           // its name the clock's
  EXPECT_NEAR(ev["clock_sm_mhz"].get<double>(), 1410, 15);
  // Waited: the clock's 100 s at 1,410 of 1,980 MHz; the 15 s at full clock waited nothing.
  const double waited = (kClockTo - kFrom) * (1 - 1410.0 / 1980);
  EXPECT_NEAR(ev["waited_s"].get<double>(), waited, 0.03 * waited);
  EXPECT_NE(found[0]->text.find("at 1,410 MHz for "), std::string::npos) << found[0]->text;
}

// Power alone: a GPU that works as much but draws a quarter less (capped), its clock not reported.
TEST(Straggler, PowerStragglerWithoutAClockIsFoundButItsWaitNotEstimated) {
  Input in;
  for (int g = 0; g < 3; ++g) {
    in.gpus.push_back(gpu(g, 600, 400 + static_cast<uint32_t>(g),
                          g == 1 ? std::vector<Episode>{{100, 300, 1980, 97, 420, 0x4}} : std::vector<Episode>{}));
    for (auto& p : in.gpus.back().points)
      p.clock_sm_mhz.reset();
  }
  const auto items = advise(in);
  const auto found = of_kind(items, "straggler");
  ASSERT_EQ(found.size(), 1u) << to_json(items).dump(2);
  const auto& ev = found[0]->evidence;
  EXPECT_EQ(ev["device"], "gpu1");
  EXPECT_EQ(ev["metric"], "power");
  EXPECT_EQ(ev["reasons"], "SW power cap");
  EXPECT_TRUE(ev["waited_s"].is_null());
  EXPECT_TRUE(ev["clock_sm_mhz"].is_null());
  EXPECT_FALSE(found[0]->saving_j.has_value());
  EXPECT_EQ(ev["estimate"], "not estimated");
}

// Below the minimum duration: dips of two samples (blips), however many, and a stretch of 8 % of the run.
TEST(Straggler, BlipsAndShortStretchesAreNone) {
  std::vector<Episode> blips;
  for (int s = 100; s < 1000; s += 10)
    blips.push_back({s, s + 2, 1410, 99, 520, 0x40}); // 20 % of the run slow, never 3 samples in a row
  for (const auto& slow : {blips, std::vector<Episode>{{400, 480, 1410, 99, 520, 0x40}}}) {
    Input in;
    for (int g = 0; g < 4; ++g)
      in.gpus.push_back(gpu(g, 1000, 500 + static_cast<uint32_t>(g), g == 1 ? slow : std::vector<Episode>{}));
    const auto items = advise(in);
    EXPECT_TRUE(of_kind(items, "straggler").empty()) << to_json(items).dump(2);
  }
}

// A GPU idle through the run is no sibling (the idle_gpu item's case): not a straggler, and not a voice in the
// median; with one working GPU left there is no one to compare with.
TEST(Straggler, AnIdleGpuIsNoSibling) {
  Input in;
  in.gpus.push_back(gpu(0, 600, 600));
  in.gpus.push_back(gpu(1, 600, 601, {}, 600)); // idle from start to end
  const auto items = advise(in);
  EXPECT_TRUE(of_kind(items, "straggler").empty()) << to_json(items).dump(2);
  EXPECT_FALSE(of_kind(items, "idle_gpu").empty());
  // Two working, one idle: the idle one's 345 MHz does not drag the median of GPU 0's siblings down to nothing.
  in.gpus.push_back(gpu(2, 600, 602, {{100, 400, 1410, 99, 520, 0x40}}));
  const auto with_slow = advise(in);
  const auto found = of_kind(with_slow, "straggler");
  ASSERT_EQ(found.size(), 1u) << to_json(with_slow).dump(2);
  EXPECT_EQ(found[0]->evidence["device"], "gpu2");
  EXPECT_EQ(found[0]->evidence["siblings"], 1);
}

} // namespace unit_straggler
