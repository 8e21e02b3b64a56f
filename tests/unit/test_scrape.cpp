// --scrape's pure part: the exposition format read within its bounds, the engines' counters turned into work between
// scrapes (a restart is a new baseline, never negative work), and the steady-state rule on the running gauge.
#include <gtest/gtest.h>

#include <string>

#include "phases/scrape.hpp"

namespace unit_scrape {

using namespace wattscope;

namespace {

std::string vllm(double out, double prompt, double running) {
  return "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
         "# TYPE vllm:generation_tokens_total counter\n"
         "vllm:generation_tokens_total{model_name=\"m\"} " +
         std::to_string(out) +
         "\n"
         "vllm:generation_tokens_created{model_name=\"m\"} 1.7e9\n"
         "vllm:prompt_tokens_total{model_name=\"m\"} " +
         std::to_string(prompt) +
         "\n"
         "vllm:request_success_total{finished_reason=\"stop\",model_name=\"m\"} 3\n"
         "vllm:request_success_total{finished_reason=\"length\",model_name=\"m\"} 1\n"
         "vllm:num_requests_running{model_name=\"m\"} " +
         std::to_string(running) + "\n";
}

ScrapeStep step(ScrapeState& s, const std::string& body, double t) {
  return s.observe(parse_exposition(body, s.wanted()), t);
}

} // namespace

TEST(Scrape, TheFormatIsReadWithLabelsEscapesTimestampsAndOpenMetricsEndings) {
  const std::string body = "# TYPE a counter\n"
                           "a_total{x=\"q\\\"uo\\\\te\",y=\"two\\nlines\"} 12.5 1700000000000\n"
                           "a_total 1e3\r\n"
                           "b{le=\"+Inf\"} +Inf\n"
                           "c NaN\n"
                           "# EOF\n";
  const auto p = parse_exposition(body, {"a_total", "b", "c"});
  EXPECT_EQ(p.bad_lines, 0u) << p.first_error;
  EXPECT_EQ(p.series, 4u);
  ASSERT_EQ(p.samples.size(), 2u); // +Inf and NaN are no work
  EXPECT_EQ(p.samples[0].labels[0].second, "q\"uo\\te");
  EXPECT_EQ(p.samples[0].labels[1].second, "two\nlines");
  EXPECT_DOUBLE_EQ(p.samples[0].value + p.samples[1].value, 1012.5);
}

TEST(Scrape, BadInputIsCountedAndBoundsHold) {
  EXPECT_EQ(parse_exposition("a_total{x=\"open 1\n", {"a_total"}).bad_lines, 1u);
  EXPECT_EQ(parse_exposition("a_total not-a-number\n", {"a_total"}).bad_lines, 1u);
  EXPECT_EQ(parse_exposition("{{{ garbage\n", {"a_total"}).bad_lines, 1u);
  ScrapeLimits small;
  small.max_series = 3;
  std::string many;
  for (int i = 0; i < 10; ++i)
    many += "s" + std::to_string(i) + " 1\n";
  const auto p = parse_exposition(many, {"s9"}, small);
  EXPECT_TRUE(p.cut);
  EXPECT_EQ(p.series, 3u);
  EXPECT_TRUE(p.samples.empty());
  small.max_body_bytes = 5;
  EXPECT_TRUE(parse_exposition(many, {"s9"}, small).cut);
}

TEST(Scrape, CountersBecomeWorkAfterABaselineAndARestartIsANewBaseline) {
  ScrapeState s(scrape_metrics({}), SteadyRule{});
  EXPECT_TRUE(step(s, vllm(1000, 250, 4), 0).work.empty()); // the engine's counters before the run are not the run's
  auto w = step(s, vllm(1400, 350, 4), 1);
  EXPECT_EQ(w.engine, "vllm");
  EXPECT_DOUBLE_EQ(w.work["output_tokens"], 400);
  EXPECT_DOUBLE_EQ(w.work["prompt_tokens"], 100);
  EXPECT_EQ(w.work.count("requests"), 0u); // summed over finish reasons, unchanged: no work
  auto r = step(s, vllm(30, 5, 4), 2);     // fell: a restart
  EXPECT_EQ(r.restarts, std::vector<std::string>{"vllm"});
  EXPECT_TRUE(r.work.empty());
  EXPECT_DOUBLE_EQ(step(s, vllm(130, 30, 4), 3).work["output_tokens"], 100);
}

TEST(Scrape, AUserMappingCountsAnyCounterAndABadOneIsRefused) {
  ScrapeState s(scrape_metrics({"myapp_images_total=images"}), SteadyRule{});
  step(s, "myapp_images_total{shard=\"a\"} 5\nmyapp_images_total{shard=\"b\"} 5\n", 0);
  EXPECT_DOUBLE_EQ(step(s, "myapp_images_total{shard=\"a\"} 7\nmyapp_images_total{shard=\"b\"} 9\n", 1).work["images"],
                   6);
  EXPECT_THROW(scrape_metrics({"no-equals"}), std::invalid_argument);
  EXPECT_THROW(scrape_metrics({"9bad=x"}), std::invalid_argument);
  EXPECT_THROW(scrape_metrics({"ok_total=bad\nunit"}), std::invalid_argument);
}

TEST(Scrape, ASteadyWindowBeginsAfterTheFullBatchHeldAndEndsWhenItDrops) {
  SteadyRule rule;
  rule.hold_s = 20;
  rule.max_batch = 8;
  ScrapeState s(scrape_metrics({}), rule);
  double out = 0;
  auto at = [&](double t, double running) {
    out += 100;
    return step(s, vllm(out, 0, running), t);
  };
  at(0, 8);                                  // baseline
  EXPECT_FALSE(at(1, 6).steady_begins);      // 6 < 0.85 x 8
  EXPECT_FALSE(at(2, 7).steady_begins);      // 7 >= 6.8: steady from here
  EXPECT_FALSE(at(21, 8).steady_begins);     // 19 s held
  EXPECT_EQ(at(22, 8).steady_begins, true);  // 20 s held: the window begins
  EXPECT_FALSE(at(30, 8).steady_begins);     // still in it
  EXPECT_EQ(at(31, 4).steady_begins, false); // the batch dropped: it ends
  EXPECT_FALSE(s.in_window());
}

} // namespace unit_scrape
