// Carbon and cost: the time format of the providers' files, stepwise rates against hand computations, the ledger's
// per-device charges across a change of intensity, the shipped table, and the warnings a comparison gives.
#include <gtest/gtest.h>

#include <stdexcept>

#include "accounting/accounting.hpp"
#include "accounting/footprint.hpp"
#include "runs/run_stats.hpp"

namespace wattscope {
namespace {

constexpr int64_t kHour = 3'600'000;

TEST(Footprint, Iso8601TimesWithAZoneAreUtcMilliseconds) {
  EXPECT_EQ(parse_iso8601_ms("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(parse_iso8601_ms("1970-01-01T01:00:00+01:00"), 0);
  EXPECT_EQ(parse_iso8601_ms("1969-12-31T19:00-0500"), 0);
  EXPECT_EQ(parse_iso8601_ms("2026-11-29T14:00:00.250Z"), 1'795'960'800'250);
  EXPECT_EQ(parse_iso8601_ms("2026-11-29 14:00Z"), 1'795'960'800'000);
  // No zone: a local time means another hour on every machine. Refused, as are impossible fields.
  EXPECT_FALSE(parse_iso8601_ms("2026-11-29T14:00:00"));
  EXPECT_FALSE(parse_iso8601_ms("2026-13-01T00:00Z"));
  EXPECT_FALSE(parse_iso8601_ms("2026-11-29T24:00Z"));
  EXPECT_FALSE(parse_iso8601_ms("2026-11-29T14:00Zjunk"));
  EXPECT_FALSE(parse_iso8601_ms("yesterday"));
}

TEST(Footprint, AStepwiseRateIsSpreadByTime) {
  StepSeries s{{{0, 100}, {kHour, 400}}};
  EXPECT_DOUBLE_EQ(s.at(-5), 100); // before the first step, the first holds
  EXPECT_DOUBLE_EQ(s.at(kHour - 1), 100);
  EXPECT_DOUBLE_EQ(s.at(kHour), 400);
  // a quarter of the stretch at 100, three quarters at 400
  EXPECT_DOUBLE_EQ(s.mean_over(kHour - kHour / 4, kHour + 3 * kHour / 4), 0.25 * 100 + 0.75 * 400);
  EXPECT_DOUBLE_EQ(s.mean_over(2 * kHour, 3 * kHour), 400);
  EXPECT_DOUBLE_EQ(s.mean_over(10, 10), 100); // an instant: the rate at it
}

TEST(Footprint, AProvidersCsvIsReadOrRefusedWithItsLine) {
  const StepSeries s = parse_step_csv("timestamp,g_per_kwh\n2026-11-29T15:00:00Z,80\n# a comment\n"
                                      "2026-11-29T14:00:00Z,120.5,extra\n",
                                      "g_per_kwh", "grid.csv");
  ASSERT_EQ(s.steps.size(), 2u); // sorted
  EXPECT_DOUBLE_EQ(s.steps[0].second, 120.5);
  EXPECT_EQ(s.steps[1].first - s.steps[0].first, kHour);
  const auto error = [](std::string_view text) {
    try {
      parse_step_csv(text, "g_per_kwh", "grid.csv");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error("2026-11-29T14:00:00Z,-3\n"), "grid.csv, line 1: g_per_kwh '-3' is not a number >= 0");
  EXPECT_NE(error("t,v\n2026-11-29T14:00:00,3\n").find("line 2: '2026-11-29T14:00:00' is no ISO 8601 time with a zone"),
            std::string::npos);
  EXPECT_NE(error("2026-11-29T14:00Z,1\n2026-11-29T14:00:00Z,2\n").find("two rows for 2026-11-29T14:00:00.000Z"),
            std::string::npos);
  EXPECT_EQ(error("timestamp,g_per_kwh\n"), "grid.csv: no 'timestamp,g_per_kwh' rows");
  EXPECT_NE(error("2026-11-29T14:00Z;5\n").find("expected 'timestamp,g_per_kwh'"), std::string::npos);
}

TEST(Footprint, TheShippedTableKnowsCountriesByCodeAndName) {
  ASSERT_GT(carbon_regions().size(), 200u);
  const auto fr = find_carbon_region("fra");
  ASSERT_TRUE(fr);
  EXPECT_EQ(fr->name, "France");
  EXPECT_EQ(find_carbon_region("France")->code, "FRA");
  EXPECT_EQ(find_carbon_region("WORLD")->code, "WRL");
  EXPECT_EQ(find_carbon_region("eu")->code, "EU27");
  EXPECT_FALSE(find_carbon_region("Atlantis"));
  for (const auto& r : carbon_regions()) {
    EXPECT_GE(r.g_per_kwh, 0) << r.code;
    EXPECT_LE(r.g_per_kwh, 2000) << r.code;
    EXPECT_GE(r.year, 2000) << r.code;
  }
}

TEST(Footprint, SourcesAreResolvedOrRefusedByName) {
  FootprintOptions o;
  const Footprint none = resolve_footprint(o);
  EXPECT_TRUE(none.carbon.assumed);
  EXPECT_EQ(none.carbon.region, "WRL");
  EXPECT_NE(none.carbon.source.find("assumed"), std::string::npos);
  EXPECT_FALSE(none.price);
  o.carbon_region = "DEU";
  o.pue = 1.3;
  o.energy_price = 0.3;
  o.currency = "EUR";
  const Footprint de = resolve_footprint(o);
  EXPECT_FALSE(de.carbon.assumed);
  EXPECT_DOUBLE_EQ(de.carbon.series.at(0), find_carbon_region("DEU")->g_per_kwh);
  EXPECT_NE(de.carbon.source.find("Germany"), std::string::npos);
  EXPECT_DOUBLE_EQ(de.pue, 1.3);
  EXPECT_EQ(de.currency, "EUR");
  const auto refused = [](FootprintOptions bad) {
    try {
      resolve_footprint(bad);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  FootprintOptions two;
  two.carbon_intensity = 50;
  two.carbon_region = "FRA";
  EXPECT_NE(refused(two).find("give one of --carbon-intensity, --carbon-region"), std::string::npos);
  FootprintOptions pue;
  pue.pue = 0.9;
  EXPECT_NE(refused(pue).find("--pue 0.9"), std::string::npos);
  FootprintOptions region;
  region.carbon_region = "Frnce";
  EXPECT_NE(refused(region).find("FRA (France)"), std::string::npos); // the nearest codes, to pick from
  FootprintOptions money;
  money.energy_price = 0.2;
  money.currency = "€";
  EXPECT_NE(refused(money).find("--currency"), std::string::npos);
  // The flags' carbon source replaces the configuration file's whole: no conflict between the two.
  FootprintOptions flags, file;
  flags.carbon_region = "FRA";
  file.carbon_intensity = 300;
  file.pue = 1.4;
  flags.fill_from(file);
  EXPECT_FALSE(flags.carbon_intensity);
  EXPECT_EQ(flags.pue, 1.4);
}

TEST(Footprint, TheLedgerChargesEachSampleAtTheRatesOfItsOwnStretch) {
  Footprint f;
  f.carbon.series = StepSeries{{{0, 100}, {kHour, 400}}};
  f.price = Rate{StepSeries{{{0, 0.2}}}, "constant", "", false};
  f.pue = 1.5;
  FootprintLedger ledger(f);
  // 3.6 MJ (1 kWh) on gpu0 spread over an hour that straddles the change half and half; 1 kWh on the CPU after it.
  ledger.add("gpu0", kHour / 2, kHour + kHour / 2, 3.6e6);
  ledger.add("cpu_package", 2 * kHour, 3 * kHour, 3.6e6);
  const auto j = ledger.summary_json(kHour / 2, 3 * kHour);
  const double gpu_g = 1.5 * (0.5 * 100 + 0.5 * 400), cpu_g = 1.5 * 400;
  EXPECT_DOUBLE_EQ(j["carbon"]["devices"]["gpu0"].get<double>(), gpu_g);
  EXPECT_DOUBLE_EQ(j["carbon"]["devices"]["cpu_package"].get<double>(), cpu_g);
  EXPECT_DOUBLE_EQ(j["carbon"]["grams"].get<double>(), gpu_g + cpu_g);
  EXPECT_DOUBLE_EQ(j["carbon"]["energy_kwh"].get<double>(), 3.0); // at the meter: 2 kWh x PUE 1.5
  EXPECT_DOUBLE_EQ(j["carbon"]["g_per_kwh"].get<double>(), (gpu_g + cpu_g) / 3.0);
  EXPECT_DOUBLE_EQ(j["cost"]["amount"].get<double>(), 2 * 1.5 * 0.2);
  // the steps the run spanned, for its phases: the one in force at its start and the change
  EXPECT_EQ(j["carbon"]["steps"].size(), 2u);
  EXPECT_DOUBLE_EQ(ledger.grams(3.6e6, 0, kHour), 150);
}

// Frames at 1 s: power rises over the first 10 s from 50 W to 400 W, then holds; the GPU starts at 35 C and ends hot.
TEST(Footprint, TheRunSaysWhenPowerSettledAndHowHotItsGpuWas) {
  GpuDevice dev;
  dev.gpu_index = 0;
  Accounting acc({dev});
  acc.set_footprint(resolve_footprint({}));
  double e = 0;
  for (int i = 0; i <= 60; ++i) {
    Frame f;
    f.tick = i;
    f.ts_ms = 1'000'000 + i * 1000;
    f.mono = SteadyClock::time_point(std::chrono::seconds(i));
    GpuSample s;
    s.gpu_index = 0;
    s.power_w = i < 10 ? 50 + 35.0 * i : 400;
    s.temp_gpu_c = 35 + 0.5 * i;
    e += *s.power_w;
    s.energy_counter_uj = static_cast<int64_t>(e * 1e6);
    f.gpus.push_back(s);
    acc.process(f);
  }
  const RunSummary sum = acc.summary();
  ASSERT_TRUE(sum.warmup_s);
  // 90 % of 400 W (360 W) is first reached as a mean of three points at 8 s: 330, 365 and 400 W average 365 W
  EXPECT_NEAR(*sum.warmup_s, 8, 1);
  EXPECT_TRUE(sum.settled);
  EXPECT_DOUBLE_EQ(*sum.gpu_temp_start_c, 35);
  EXPECT_DOUBLE_EQ(*sum.gpu_temp_end_c, 65);
  EXPECT_GT(sum.footprint["carbon"]["grams"].get<double>(), 0);
}

TEST(Footprint, AComparisonSaysWhichWayStartTemperaturesBiasIt) {
  const auto run = [](std::string id, double start_c, double warmup_s = 1, bool settled = true) {
    MeasuredRun r{std::move(id), {}, 100.0};
    r.quality.gpu_temp_start_c = start_c;
    r.quality.warmup_s = warmup_s;
    r.quality.settled = settled;
    return r;
  };
  // B started 12 C hotter on average: its energy reads high, the difference B - A upwards.
  auto w = measurement_warnings({run("a1", 40), run("a2", 42)}, {run("b1", 53), run("b2", 53)});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0]["kind"], "temperature");
  EXPECT_EQ(w[0]["biased"], "b_up");
  EXPECT_DOUBLE_EQ(w[0]["spread_c"].get<double>(), 13);
  // Within 5 C: nothing to say. A run still warming up is named, with its side.
  w = measurement_warnings({run("a1", 40)}, {run("b1", 44, 60)});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0]["kind"], "warmup");
  EXPECT_EQ(w[0]["run_id"], "b1");
  EXPECT_EQ(w[0]["side"], "B");
  w = measurement_warnings({run("a1", 40, 100, false)});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0]["text"].get<std::string>().find("still warming up"), std::string::npos);
}

} // namespace
} // namespace wattscope
