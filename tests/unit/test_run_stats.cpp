// Issue 29: the interval of a non-negative quantity never goes below 0 (checked against the modified Cox formula and
// over many high-variance samples), and a run's energy method is derived once, from its summary.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "phases/stats.hpp"
#include "runs/run_stats.hpp"
#include "runs/run_view.hpp"

namespace unit_run_stats { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using json = nlohmann::json;

TEST(NonNegativeInterval, IsTheModifiedCoxIntervalWhereStudentsTGoesNegative) {
  const std::vector<double> xs = {5, 5, 200};
  const SampleSummary t = summarize(xs);
  ASSERT_TRUE(t.ci_low);
  EXPECT_LT(*t.ci_low, 0) << "the t interval of these goes negative: the case the log-scale one is for";
  const SampleSummary s = summarize_nonnegative(xs);
  EXPECT_STREQ(s.ci_method, kCiLogNormal);
  EXPECT_DOUBLE_EQ(s.mean, 70);
  EXPECT_DOUBLE_EQ(*s.sd, *t.sd);
  // By hand: y = ln x, ȳ = (2 ln 5 + ln 200)/3, s² their sample variance, t(0.975, 2) = 4.302652729911275.
  const double y1 = std::log(5.0), y3 = std::log(200.0), ybar = (2 * y1 + y3) / 3;
  const double s2 = (2 * (y1 - ybar) * (y1 - ybar) + (y3 - ybar) * (y3 - ybar)) / 2;
  const double half = 4.302652729911275 * std::sqrt(s2 / 3 + s2 * s2 / 4);
  EXPECT_NEAR(*s.ci_low, std::exp(ybar + s2 / 2 - half), 1e-9 * *s.ci_low);
  EXPECT_NEAR(*s.ci_high, std::exp(ybar + s2 / 2 + half), 1e-9 * *s.ci_high);
  EXPECT_GT(*s.ci_low, 0);
}

TEST(NonNegativeInterval, NeverGoesBelowZeroForHighVarianceSamples) {
  std::mt19937_64 rng(29);
  std::lognormal_distribution<double> wild(3.0, 2.5); // a coefficient of variation of about 20
  std::uniform_int_distribution<int> size(2, 12);
  std::bernoulli_distribution zero(0.1);
  int negative_t = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<double> xs(static_cast<size_t>(size(rng)));
    for (auto& x : xs)
      x = zero(rng) ? 0.0 : wild(rng);
    const SampleSummary s = summarize_nonnegative(xs);
    ASSERT_TRUE(s.ci_low && s.ci_high);
    EXPECT_GE(*s.ci_low, 0) << trial;
    EXPECT_LE(*s.ci_low, *s.ci_high) << trial;
    negative_t += *summarize(xs).ci_low < 0;
  }
  EXPECT_GT(negative_t, 500) << "the samples must be ones where Student's t interval goes negative";
}

TEST(NonNegativeInterval, AZeroValueCutsTheTIntervalAtZeroAndEqualValuesGiveAPoint) {
  const SampleSummary z = summarize_nonnegative({0, 0, 90});
  EXPECT_STREQ(z.ci_method, kCiStudentTCut);
  EXPECT_EQ(*z.ci_low, 0);
  EXPECT_DOUBLE_EQ(*z.ci_high, *summarize({0, 0, 90}).ci_high);
  const SampleSummary same = summarize_nonnegative({12.5, 12.5, 12.5});
  EXPECT_NEAR(*same.ci_low, 12.5, 1e-12);
  EXPECT_NEAR(*same.ci_high, 12.5, 1e-12);
  EXPECT_FALSE(summarize_nonnegative({3}).ci_low); // one value: no interval
}

RunInfo run_with(const json& summary, std::optional<double> total) {
  RunInfo r;
  r.summary = summary.dump();
  r.total_energy_j = total;
  return r;
}

TEST(EnergyMethod, OneLabelFromTheDevicesThatMeasured) {
  const json gpus = json::array({{{"index", 0}, {"energy_j", 10.0}, {"energy_method", "counter"}},
                                 {{"index", 1}, {"energy_j", 11.0}, {"energy_method", "counter"}},
                                 {{"index", 2}, {"energy_j", nullptr}, {"energy_method", "counter"}}});
  const json cpu = {{"energy_j", 5.0}, {"package_energy_j", 5.0}, {"energy_method", "estimated"}};
  EnergyMethod m = run_energy_method(run_with({{"gpus", gpus}, {"cpu", cpu}}, 26.0));
  EXPECT_EQ(m.label(), "mixed (counter: gpu0, gpu1; estimated: cpu_package)");
  EXPECT_EQ(m.devices_text(), "2 GPUs + CPU package"); // GPU 2 measured nothing: not named
  m = run_energy_method(run_with({{"gpus", gpus}}, 21.0));
  EXPECT_EQ(m.label(), "counter");
  m = run_energy_method(run_with(
      {{"cpu", {{"package_energy_j", 5.0}, {"dram_energy_j", 1.0}, {"energy_j", 6.0}, {"energy_method", "counter"}}}},
      6.0));
  EXPECT_EQ(m.label(), "counter");
  EXPECT_EQ(m.devices_text(), "CPU package + DRAM");
  // Nothing measured: no label; a total without a summary (an old store): "unknown", never a guess.
  EXPECT_EQ(run_energy_method(run_with(json::object(), std::nullopt)).label(), "");
  EXPECT_EQ(run_energy_method(run_with(json::object(), 7.0)).label(), "unknown");
}

TEST(EnergyMethod, LabelsOverRunsCombineWithCounts) {
  EXPECT_EQ(combine_method_labels({"counter", "counter", ""}), "counter");
  EXPECT_EQ(combine_method_labels({"counter", "estimated", "counter"}), "mixed (counter: 2 runs; estimated: 1 run)");
  EXPECT_EQ(combine_method_labels({}), "");
}

TEST(FigureStats, LeftOutRunsAreCountedWithTheirReason) {
  const std::vector<Figures> runs = {{{"duration_s", 1}, {"energy_j", 10}, {"phase.eval.duration_s", 0.5}},
                                     {{"duration_s", 2}},
                                     {{"duration_s", 3}, {"energy_j", 30}}};
  std::vector<FigureNotes> notes(3);
  notes[0].method["energy_j"] = notes[2].method["energy_j"] = "counter";
  notes[1].missing["energy_j"] = "no energy measured";
  const auto stats = figure_stats(runs, notes);
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[1].name, "energy_j");
  EXPECT_EQ(stats[1].summary.n, 2u);
  EXPECT_DOUBLE_EQ(stats[1].summary.mean, 20);
  EXPECT_EQ(stats[1].method, "counter");
  EXPECT_EQ(left_out_text(stats[1]), "1 run: no energy measured");
  EXPECT_EQ(left_out_text(stats[2]), "2 runs: no 'eval' phase");
  EXPECT_EQ(stats[0].left_out_count(), 0u);
}

} // namespace unit_run_stats
