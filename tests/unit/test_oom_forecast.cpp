// Out-of-memory forecast (issue 36): a GPU's memory growing per epoch, on synthetic series whose rate is known; the
// expected figures are worked out here from the series' values.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "advice/advice.hpp"
#include "core/time_util.hpp"

namespace unit_oom_forecast { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wattscope::advice;

namespace {

constexpr int64_t kT0 = 1'700'000'000'000;
constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kTotal = 80 * kGiB;

// A 2 h run sampled every 10 s; memory(t) in bytes, plus allocator noise of ±64 MiB.
GpuSeries run(const std::function<double(double)>& mem_at_s, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> noise(-64.0 * 1024 * 1024, 64.0 * 1024 * 1024);
  GpuSeries g;
  g.gpu_index = 2;
  g.name = "Test GPU";
  g.mem_total_bytes = static_cast<int64_t>(kTotal);
  g.power_limit_w = 700;
  for (int i = 0; i <= 720; ++i) {
    GpuPoint p;
    p.ts_ms = kT0 + 10'000LL * i;
    p.power_w = 600;
    p.energy_j = 600.0 * 10 * i;
    p.util_pct = 97;
    p.clock_sm_mhz = 1980;
    p.mem_used_bytes = static_cast<int64_t>(mem_at_s(10.0 * i) + noise(rng));
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

// A leak per epoch: 2.5 GiB more at every 6 min epoch from 20 GiB, i.e. 25 GiB/h; after 2 h, 70 GiB of 80 are used.
TEST(OomForecast, ALeakPerEpochIsForecastWithItsRateAndTime) {
  Input in;
  in.gpus.push_back(run([](double s) { return 20 * kGiB + 2.5 * kGiB * std::floor(s / 360); }));
  const auto items = advise(in);
  const auto found = of_kind(items, "oom_forecast");
  ASSERT_EQ(found.size(), 1u) << to_json(items).dump(2);
  const auto& ev = found[0]->evidence;
  EXPECT_EQ(ev["device"], "gpu2");
  const double rate = 2.5 * kGiB / 360; // bytes per second
  EXPECT_NEAR(ev["slope_bytes_per_s"].get<double>(), rate, 0.03 * rate);
  EXPECT_GT(ev["kendall_tau"].get<double>(), 0.9);
  // The staircase's centre line: 20 GiB − half a step + 25 GiB/h. At the last sample (7,200 s) it is at 68.75 GiB,
  // so the 80 GiB are reached 11.25 GiB / 25 GiB/h = 27 min later.
  const double now = 20 * kGiB - 1.25 * kGiB + rate * 7200;
  EXPECT_NEAR(ev["mem_used_bytes"].get<double>(), now, 0.5 * kGiB);
  EXPECT_NEAR(ev["seconds_to_full"].get<double>(), (kTotal - now) / rate, 180);
  EXPECT_EQ(ev["from"], iso_utc_ms(kT0 + 3600'000));
  EXPECT_EQ(ev["to"], iso_utc_ms(kT0 + 7200'000));
  EXPECT_FALSE(found[0]->saving_j.has_value());
  EXPECT_EQ(found[0]->severity, "high"); // within the hour
  EXPECT_NE(found[0]->text.find("At this rate GPU 2 runs out of memory in ~"), std::string::npos) << found[0]->text;
}

TEST(OomForecast, FlatStepSlowAndShrinkingMemoryAreNone) {
  const std::vector<std::pair<const char*, std::function<double(double)>>> cases = {
      // The warm-up's allocation, then a plateau (the simulated scenario's shape).
      {"plateau", [](double s) { return s < 60 ? 2 * kGiB + s / 60 * 60 * kGiB : 62 * kGiB; }},
      // One step in the window (a larger batch, a cache filled once): τ 0.5, slope 0.
      {"one step", [](double s) { return s < 5400 ? 40 * kGiB : 60 * kGiB; }},
      // Growing 1 GiB/h: full in ~58 h, past the horizon.
      {"slow", [](double s) { return 20 * kGiB + kGiB * s / 3600; }},
      // Shrinking.
      {"shrinking", [](double s) { return 70 * kGiB - 10 * kGiB * s / 7200; }},
  };
  for (const auto& [name, f] : cases) {
    Input in;
    in.gpus.push_back(run(f));
    const auto items = advise(in);
    EXPECT_TRUE(of_kind(items, "oom_forecast").empty()) << name << ": " << to_json(items).dump(2);
  }
}

// The line is fitted over the last hour, so it speaks for at most 4 h ahead: 12 GiB/h from 20 GiB is at 44 GiB after
// 2 h, full 36 / 12 = 3 h later (reported, medium: not within the hour); 6 GiB/h is at 32 GiB, full 8 h later (none).
TEST(OomForecast, NoFurtherThanFourWindowsAhead) {
  for (const auto& [gib_per_h, expect] : std::vector<std::pair<double, bool>>{{12, true}, {6, false}}) {
    Input in;
    in.gpus.push_back(run([g = gib_per_h](double s) { return 20 * kGiB + g * kGiB * s / 3600; }));
    const auto items = advise(in);
    const auto found = of_kind(items, "oom_forecast");
    ASSERT_EQ(found.size(), expect ? 1u : 0u) << gib_per_h << " GiB/h";
    if (expect) {
      EXPECT_EQ(found[0]->severity, "medium");
    }
  }
}

} // namespace unit_oom_forecast
