// Issue 35: the comparison's verdict in words and the compare view's query string. The verdict's figures are checked
// against values worked out by hand from the formulas (Welch's t, Welch–Satterthwaite df, Student's t quantile).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "runs/comparison.hpp"
#include "server/compare_query.hpp"

namespace unit_compare_view {

using namespace wattscope;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const std::vector<std::string> kCounter = {"counter on gpu0"};

// a = 10, 12, 14 and b = 20, 22, 24: means 12 and 22, sd 2 each; se = √(4/3 + 4/3) = 1.63299; t = 10 / se = 6.12372;
// df = (8/3)² / (2 · (4/3)² / 2) = 4; t(0.975, 4) = 2.776445; half width 4.53385 J = 37.782 % of A's mean.
TEST(CompareVerdict, DifferenceAndItsIntervalInPercentOfTheFirst) {
  const EnergyVerdict v = energy_verdict("task a", {10, 12, 14}, kCounter, "task b", {20, 22, 24}, kCounter);
  EXPECT_DOUBLE_EQ(v.mean_a, 12);
  EXPECT_DOUBLE_EQ(v.mean_b, 22);
  ASSERT_TRUE(v.difference_pct && v.interval_pct && v.t && v.df && v.significant);
  EXPECT_NEAR(*v.difference_pct, 1000.0 / 12.0, 1e-12);
  EXPECT_NEAR(*v.t, 10 / std::sqrt(8.0 / 3.0), 1e-9);
  EXPECT_NEAR(*v.df, 4, 1e-9);
  EXPECT_NEAR(*v.interval_pct, 100 * 2.7764451051977987 * std::sqrt(8.0 / 3.0) / 12, 1e-6);
  EXPECT_TRUE(*v.significant);
  EXPECT_FALSE(v.refused);
  EXPECT_TRUE(has(v.words, "task b uses 83.3 % ± 38 % more energy per run than task a [counter]; significant at 95 %"))
      << v.words;
  EXPECT_EQ(v.to_json()["significant"], true);
}

// Means 20 and 21 with sd 10 each: t = 1 / √(200/3) = 0.1225, p ≈ 0.91: not told apart, and the interval holds 0.
TEST(CompareVerdict, WithinNoiseIsNotDistinguishable) {
  const EnergyVerdict v = energy_verdict("task a", {10, 20, 30}, kCounter, "task b", {11, 21, 31}, kCounter);
  ASSERT_TRUE(v.significant && v.p && v.interval_pct);
  EXPECT_FALSE(*v.significant);
  EXPECT_GT(*v.p, 0.9);
  EXPECT_GT(*v.interval_pct, *v.difference_pct);
  EXPECT_TRUE(has(v.words, "task b uses 5 % ± ")) << v.words;
  EXPECT_TRUE(has(v.words, "not distinguishable at 95 %")) << v.words;
}

TEST(CompareVerdict, LessEnergyIsSaidAsLess) {
  const EnergyVerdict v = energy_verdict("task a", {20, 22, 24}, kCounter, "task b", {10, 12, 14}, kCounter);
  EXPECT_TRUE(has(v.words, "task b uses 45.5 % ± ")) << v.words;
  EXPECT_TRUE(has(v.words, "less energy per run than task a")) << v.words;
}

TEST(CompareVerdict, OneRunASideCannotBeTested) {
  const EnergyVerdict v = energy_verdict("task a", {10}, kCounter, "task b", {20, 22}, kCounter);
  EXPECT_FALSE(v.significant.has_value());
  EXPECT_FALSE(v.interval_pct.has_value());
  EXPECT_TRUE(has(v.words, "cannot tell at 95 %: each side needs at least 2 runs with energy (task a has 1"))
      << v.words;
  EXPECT_TRUE(v.to_json()["significant"].is_null());
}

// issue 29: energies measured differently are not compared; the verdict says why instead of a percentage.
TEST(CompareVerdict, DifferentMethodsAreRefusedAndSaid) {
  const EnergyVerdict v =
      energy_verdict("task a", {10, 12}, {"estimated on cpu_package"}, "task b", {20, 22}, {"simulated on gpu0"});
  EXPECT_TRUE(v.refused);
  EXPECT_FALSE(v.significant.has_value());
  EXPECT_FALSE(v.difference_pct.has_value());
  EXPECT_TRUE(has(v.words, "not compared")) << v.words;
  EXPECT_TRUE(has(v.words, "estimated on cpu_package; simulated on gpu0")) << v.words;
  // Two methods within one side are refused too.
  EXPECT_TRUE(
      energy_verdict("a", {1, 2}, {"counter on gpu0", "integrated on gpu0"}, "b", {1, 2}, {"counter on gpu0"}).refused);
}

TEST(CompareVerdict, NoEnergyIsSaid) {
  const EnergyVerdict v = energy_verdict("task a", {}, {}, "task b", {20, 22}, kCounter);
  EXPECT_TRUE(has(v.words, "task a has no energy figure")) << v.words;
}

query::CompareQuery ok(std::string_view raw) {
  auto r = query::parse_compare(raw);
  if (auto* e = std::get_if<query::Error>(&r)) ADD_FAILURE() << raw << ": " << e->message;
  return std::holds_alternative<query::CompareQuery>(r) ? std::get<query::CompareQuery>(r) : query::CompareQuery{};
}
std::string bad(std::string_view raw) {
  auto r = query::parse_compare(raw);
  if (!std::holds_alternative<query::Error>(r)) {
    ADD_FAILURE() << raw << " was accepted";
    return "";
  }
  return std::get<query::Error>(r).message;
}

TEST(CompareQuery, RunsOrTasksWithFilters) {
  const auto q = ok("tasks=bert,gpt%202&host=node-1&from=2026-11-20&to=2026-11-27T12:00:00Z");
  EXPECT_EQ(q.tasks, (std::vector<std::string>{"bert", "gpt 2"}));
  EXPECT_TRUE(q.runs.empty());
  EXPECT_EQ(q.host, "node-1");
  ASSERT_TRUE(q.from_ms && q.to_ms);
  EXPECT_EQ(*q.from_ms, 1795132800000); // 2026-11-20T00:00:00Z
  EXPECT_EQ(*q.to_ms - *q.from_ms, (7 * 24 + 12) * 3600000LL);
  // One order of parameters for the cache and the link, names encoded; parsing it again gives the same query.
  EXPECT_EQ(q.canonical(),
            "tasks=bert,gpt%202&from=2026-11-20T00%3A00%3A00.000Z&to=2026-11-27T12%3A00%3A00.000Z&host=node-1");
  EXPECT_EQ(ok(q.canonical()).canonical(), q.canonical());
  EXPECT_EQ(ok("runs=20261126-1203-a,20261126-1203-a,b.1").runs, (std::vector<std::string>{"20261126-1203-a", "b.1"}));
}

TEST(CompareQuery, StrictWithCapsAndNames) {
  EXPECT_TRUE(has(bad(""), "compare needs runs=ID,ID,... or tasks=NAME,NAME,..."));
  EXPECT_TRUE(has(bad("runs=a&tasks=b"), "not both"));
  EXPECT_TRUE(has(bad("tasks=a&tasks=b"), "'tasks' is given twice"));
  EXPECT_TRUE(has(bad("tasks=a&sort=start"), "unknown query parameter 'sort'"));
  EXPECT_TRUE(has(bad("tasks=a,,b"), "an empty name in 'a,,b'"));
  EXPECT_TRUE(has(bad("tasks="), "an empty name"));
  EXPECT_TRUE(has(bad("runs=a/../b"), "'a/../b' is not a run id"));
  EXPECT_TRUE(has(bad("tasks=a&from=yesterday"), "'from': 'yesterday' is not a UTC date or time"));
  EXPECT_TRUE(has(bad("tasks=a&from=2026-11-27&to=2026-11-20"), "'to' is not after 'from'"));
  EXPECT_TRUE(has(bad("tasks=a&host="), "'host'"));
  std::string runs = "runs=r0";
  for (size_t i = 1; i < query::kMaxCompareRuns; ++i)
    runs += ",r" + std::to_string(i);
  EXPECT_EQ(ok(runs).runs.size(), query::kMaxCompareRuns);
  EXPECT_TRUE(has(bad(runs + ",one-more"), "more than 100 runs; compare at most 100 at once"));
  EXPECT_TRUE(has(bad("tasks=" + std::string(201, 'x')), "longer than 200 bytes"));
  // A control byte is shown escaped, never sent back raw.
  const std::string m = bad("tasks=a&from=%01%0a");
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_TRUE(has(m, "\\x01")) << m;
}

} // namespace unit_compare_view
