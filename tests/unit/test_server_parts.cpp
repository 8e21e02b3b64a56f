// The pieces of serve's HTTP side that take client bytes: query strings, the bearer token, Accept-Encoding and
// If-None-Match. Free functions, tested here on their edge cases (a fuzz target can call the same functions).
#include <gtest/gtest.h>

#include <variant>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "server/auth.hpp"
#include "server/live.hpp"
#include "server/query.hpp"
#include "server/static_files.hpp"
#include "web/csp.hpp"

namespace unit_server_parts { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace std::chrono_literals;

namespace {
std::string error_of(std::string_view raw) {
  auto r = query::parse_history(raw);
  return std::holds_alternative<query::Error>(r) ? std::get<query::Error>(r).message : "";
}
} // namespace

TEST(Query, SplitsAndDecodes) {
  auto r = query::parse("range=1h&step=30s&x=a%20b+c&flag&&");
  ASSERT_TRUE(std::holds_alternative<std::vector<query::Param>>(r));
  const auto& p = std::get<std::vector<query::Param>>(r);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].name, "range");
  EXPECT_EQ(p[0].value, "1h");
  EXPECT_EQ(p[2].value, "a b c");
  EXPECT_EQ(p[3].name, "flag");
  EXPECT_EQ(p[3].value, "");
  EXPECT_TRUE(std::get<std::vector<query::Param>>(query::parse("")).empty());
  EXPECT_EQ(std::get<std::vector<query::Param>>(query::parse("a=%41%4a%6b")).at(0).value, "AJk");
}

TEST(Query, BadEscapesAndTooManyParametersAreErrors) {
  for (const char* bad : {"range=%", "range=%4", "range=%zz", "ra%g1nge=1h"})
    EXPECT_TRUE(std::holds_alternative<query::Error>(query::parse(bad))) << bad;
  std::string many;
  for (int i = 0; i < 17; ++i)
    many += "a" + std::to_string(i) + "=1&";
  EXPECT_TRUE(std::holds_alternative<query::Error>(query::parse(many)));
}

TEST(Query, HistoryDefaultsAndLimits) {
  auto ok = std::get<query::HistoryQuery>(query::parse_history(""));
  EXPECT_EQ(ok.range, 1h);
  EXPECT_EQ(ok.step, 12s); // 1 h / 300
  ok = std::get<query::HistoryQuery>(query::parse_history("range=10m&step=1s"));
  EXPECT_EQ(ok.range, 10min);
  EXPECT_EQ(ok.step, 1s);
  EXPECT_EQ(std::get<query::HistoryQuery>(query::parse_history("range=100ms")).step, 1ms);
  EXPECT_NE(error_of("range=745h").find("31 days"), std::string::npos);
  EXPECT_NE(error_of("range=1h&step=2h").find("'step'"), std::string::npos);
  EXPECT_NE(error_of("range=24h&step=1ms").find("10000"), std::string::npos);
  EXPECT_NE(error_of("when=now").find("unknown query parameter 'when'"), std::string::npos);
  EXPECT_NE(error_of("range=1h&range=2h").find("twice"), std::string::npos);
}

TEST(Query, ErrorsNameTheParameterAndShowTheValuePrintable) {
  // Issue 10: range=%00 used to answer with the message "'" (the NUL ended the C string).
  const std::string nul = error_of("range=%00");
  EXPECT_NE(nul.find("'range'"), std::string::npos) << nul;
  EXPECT_NE(nul.find("'\\x00'"), std::string::npos) << nul;
  const std::string zero = error_of("step=0s");
  EXPECT_NE(zero.find("'step'"), std::string::npos) << zero;
  EXPECT_NE(zero.find("greater than zero"), std::string::npos) << zero;
  const std::string quote = error_of("range=1h%27%22%5C%0a");
  EXPECT_NE(quote.find("1h\\'\\\"\\\\\\x0a"), std::string::npos) << quote;
  // A long value is cut: the answer stays short.
  const std::string longv = error_of("range=" + std::string(10000, '9') + "x");
  EXPECT_LT(longv.size(), 300u) << longv;
  EXPECT_NE(longv.find("..."), std::string::npos);
  const std::string name = error_of("%ff%01=1");
  EXPECT_NE(name.find("'\\xff\\x01'"), std::string::npos) << name;
}

TEST(Auth, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_TRUE(constant_time_equal("abcdef", "abcdef"));
  EXPECT_FALSE(constant_time_equal("abcdef", "abcdeg"));
  EXPECT_FALSE(constant_time_equal("abcdef", "abcde"));
  EXPECT_FALSE(constant_time_equal(std::string_view("abc\0", 4), "abc"));
  EXPECT_FALSE(constant_time_equal("", "a"));
}

TEST(Auth, BearerHeader) {
  const std::string t = "s3cret-token-0123456789";
  EXPECT_TRUE(bearer_matches("Bearer " + t, t));
  EXPECT_TRUE(bearer_matches("bearer " + t, t));
  EXPECT_TRUE(bearer_matches("BEARER " + t + " ", t));
  EXPECT_FALSE(bearer_matches("Bearer " + t + "x", t));
  EXPECT_FALSE(bearer_matches("Basic " + t, t));
  EXPECT_FALSE(bearer_matches(t, t));
  EXPECT_FALSE(bearer_matches("", t));
  EXPECT_FALSE(bearer_matches("Bearer ", "")); // no token configured never matches
}

TEST(StaticFiles, AcceptEncoding) {
  EXPECT_TRUE(accepts_gzip("gzip, deflate, br"));
  EXPECT_TRUE(accepts_gzip("br;q=1.0, GZIP;q=0.5"));
  EXPECT_TRUE(accepts_gzip("x-gzip"));
  EXPECT_TRUE(accepts_gzip("*"));
  EXPECT_FALSE(accepts_gzip(""));
  EXPECT_FALSE(accepts_gzip("br"));
  EXPECT_FALSE(accepts_gzip("identity"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("gzip; q=0.000, br"));
  EXPECT_FALSE(accepts_gzip("*, gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("*;q=0"));
  EXPECT_TRUE(accepts_gzip("gzip;q=0.001"));
  EXPECT_FALSE(accepts_gzip("gzipx, xgzip"));
}

TEST(StaticFiles, IfNoneMatch) {
  EXPECT_TRUE(etag_listed("\"abc\"", "\"abc\""));
  EXPECT_TRUE(etag_listed("\"x\", W/\"abc\"", "\"abc\""));
  EXPECT_TRUE(etag_listed("*", "\"abc\""));
  EXPECT_FALSE(etag_listed("\"abcd\"", "\"abc\""));
  EXPECT_FALSE(etag_listed("abc", "\"abc\""));
  EXPECT_FALSE(etag_listed("", "\"abc\""));
}

TEST(StaticFiles, TableServesTheDashboardWithAVersionedPlotlyUrl) {
  StaticFiles files;
  const StaticFile* dash = files.find("/");
  ASSERT_NE(dash, nullptr);
  EXPECT_NE(dash->identity.find(files.plotly_url()), std::string_view::npos);
  EXPECT_EQ(dash->identity.find("{{"), std::string_view::npos);
  EXPECT_EQ(dash->cache_control, "no-cache");
  EXPECT_EQ(dash->gzip.substr(0, 2), "\x1f\x8b");
  const StaticFile* js = files.find(files.plotly_url());
  ASSERT_NE(js, nullptr);
  EXPECT_NE(js->cache_control.find("immutable"), std::string::npos);
  EXPECT_EQ(js->gzip.substr(0, 2), "\x1f\x8b");
  EXPECT_LT(js->gzip.size(), js->identity.size() / 2);
  EXPECT_NE(js->etag, js->etag_gzip);
  EXPECT_EQ(files.find("/assets/nothing.js"), nullptr);
}

// A history request aggregates the whole ring (milliseconds over a day at 1 s with 8 GPUs); a scrape must not wait
// for it. Compared with the duration of one aggregation measured in the same run, so a slow machine does not fail it.
TEST(LiveState, AScrapeDoesNotWaitForAHistoryAggregation) {
  using namespace std::chrono;
  wattscope::LiveState live(seconds(200'000), seconds(1));
  std::vector<wattscope::GpuDevice> devs(8);
  for (int i = 0; i < 8; ++i)
    devs[static_cast<size_t>(i)].gpu_index = i;
  live.set_run(wattscope::RunInfo{}, devs);
  for (int64_t t = 0; t < 200'000; ++t) {
    auto f = std::make_shared<wattscope::Frame>();
    f->tick = t;
    f->ts_ms = 1'000'000 + t * 1000;
    f->cpu.util_pct = 50;
    for (int g = 0; g < 8; ++g) {
      wattscope::GpuSample s;
      s.gpu_index = g;
      s.power_w = 300.0 + static_cast<double>(t % 7);
      s.util_gpu_pct = 90;
      f->gpus.push_back(s);
    }
    live.push(f);
  }
  auto t0 = steady_clock::now();
  (void)live.history_json(hours(55), seconds(60));
  const auto one = steady_clock::now() - t0;
  const double first_ms = duration<double, std::milli>(one).count();
  if (first_ms < 4) GTEST_SKIP() << "one aggregation took " << first_ms << " ms: too fast here to compare";
  std::atomic<bool> stop{false};
  std::thread history([&] {
    while (!stop)
      (void)live.history_json(hours(55), seconds(60));
  });
  std::vector<double> waits;
  for (int i = 0; i < 60; ++i) {
    std::this_thread::sleep_for(milliseconds(3));
    t0 = steady_clock::now();
    (void)live.metrics_text();
    waits.push_back(duration<double, std::milli>(steady_clock::now() - t0).count());
  }
  stop = true;
  history.join();
  std::nth_element(waits.begin(), waits.begin() + 30, waits.end());
  // Sharing one lock, a scrape arriving at a random moment waits half an aggregation on average.
  const double one_ms = duration<double, std::milli>(one).count();
  EXPECT_LT(waits[30], one_ms / 4) << "median scrape " << waits[30] << " ms while one aggregation takes " << one_ms
                                   << " ms";
}

namespace {
std::shared_ptr<Frame> frame_at(int64_t t, int gpus) {
  auto f = std::make_shared<Frame>();
  f->tick = t;
  f->ts_ms = 1'000'000'000 + t * 1000;
  f->cpu.util_pct = 50;
  for (int g = 0; g < gpus; ++g) {
    GpuSample s;
    s.gpu_index = g;
    s.power_w = 300.0 + static_cast<double>(t % 60) + g; // a saw-tooth: known mean and peak per minute
    s.util_gpu_pct = 90;
    f->gpus.push_back(s);
  }
  return f;
}
} // namespace

// Issue 12: serve's history is bounded whatever the uptime. A day, and then a second day, at 1 s with 8 GPUs: the rings
// hold the same bytes after both, under 4 MiB (the old ring kept every frame: 86,400 x the width, ~27 MB), and
// history older than --retain is gone.
TEST(LiveState, HistoryMemoryIsFlatOverDays) {
  LiveState live(24h, 1s);
  std::vector<GpuDevice> devs(8);
  for (int i = 0; i < 8; ++i)
    devs[static_cast<size_t>(i)].gpu_index = i;
  live.set_run(RunInfo{}, devs);
  const size_t allocated = live.history_bytes();
  EXPECT_LT(allocated, 4u << 20);
  int64_t t = 0;
  for (; t < 86'400; ++t)
    live.push(frame_at(t, 8));
  EXPECT_EQ(live.history_bytes(), allocated);
  for (; t < 2 * 86'400; ++t)
    live.push(frame_at(t, 8));
  EXPECT_EQ(live.history_bytes(), allocated);
  const auto h = live.history_json(48h, 1h);
  ASSERT_FALSE(h["ts_ms"].empty());
  const int64_t now_ms = 1'000'000'000 + (t - 1) * 1000;
  EXPECT_GE(h["ts_ms"][0].get<int64_t>(), now_ms - 24 * 3'600'000 - 2 * live.coarse_step().count());
}

// Averages and peaks come out right from both rings: an hour-wide step over the coarse past, and a minute-wide step
// over the last hour (fine), against the saw-tooth's mean 329.5 + g and peak 359 + g, computed here.
TEST(LiveState, HistoryAveragesAndPeaksFromBothRings) {
  LiveState live(24h, 1s);
  std::vector<GpuDevice> devs(2);
  devs[1].gpu_index = 1;
  live.set_run(RunInfo{}, devs);
  const int64_t n = 12 * 3600;
  for (int64_t t = 0; t < n; ++t)
    live.push(frame_at(t, 2));
  for (const auto& [range, step] :
       {std::pair{12h, std::chrono::nanoseconds(1h)}, std::pair{1h, std::chrono::nanoseconds(1min)}}) {
    const auto h = live.history_json(range, step);
    const auto& g1 = h["gpus"][1];
    ASSERT_GE(g1["power_w"].size(), 3u);
    // Whole buckets only (the first and last may be partial): each holds whole minutes of the saw-tooth.
    for (size_t b = 1; b + 1 < g1["power_w"].size(); ++b) {
      EXPECT_NEAR(g1["power_w"][b].get<double>(), 330.5, 0.01) << "bucket " << b;
      EXPECT_DOUBLE_EQ(g1["power_peak_w"][b].get<double>(), 360.0) << "bucket " << b;
    }
  }
}
} // namespace unit_server_parts

namespace unit_server_parts {

TEST(Query, ControlCharactersAreRefusedInEveryNameAndValue) {
  for (const char* bad : {"q=%00zzzz", "q=a%0ab", "task=%09", "x=%7f", "%01=1", "a=1&b=%1f"}) {
    auto r = query::parse(bad);
    ASSERT_TRUE(std::holds_alternative<query::Error>(r)) << bad;
    EXPECT_NE(std::get<query::Error>(r).message.find("control character"), std::string::npos) << bad;
  }
  // The runs search, which once stopped at the NUL and matched every run, refuses it before any store is asked.
  auto runs = query::parse_runs_list("q=%00zzzz");
  ASSERT_TRUE(std::holds_alternative<query::Error>(runs));
  EXPECT_NE(std::get<query::Error>(runs).message.find("'q'"), std::string::npos);
  EXPECT_TRUE(std::holds_alternative<std::vector<query::Param>>(query::parse("q=caf%C3%A9+bar")));
}

TEST(Query, AnEndpointWithoutParametersRefusesOne) {
  EXPECT_FALSE(query::parse_none("", "/api/v1/forecast"));
  const auto e = query::parse_none("horizon=1h", "/api/v1/forecast");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "unknown query parameter 'horizon' (/api/v1/forecast takes no parameters)");
}

TEST(StaticFiles, AcceptOpenMetrics) {
  EXPECT_TRUE(accepts_openmetrics("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                                  "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"));
  EXPECT_TRUE(accepts_openmetrics("Application/OpenMetrics-Text"));
  EXPECT_FALSE(accepts_openmetrics(""));
  EXPECT_FALSE(accepts_openmetrics("text/plain;version=0.0.4"));
  EXPECT_FALSE(accepts_openmetrics("*/*"));
  EXPECT_FALSE(accepts_openmetrics("application/openmetrics-text;version=0.0.1"));
  EXPECT_FALSE(accepts_openmetrics("application/openmetrics-text; q=0, text/plain"));
}

TEST(OpenMetrics, CountersLoseTotalInTheirNamesGainCreatedAndTheTextEnds) {
  const std::string text = "# HELP wattscope_build_info wattscope build, as a label.\n"
                           "# TYPE wattscope_build_info gauge\n"
                           "wattscope_build_info{version=\"1\"} 1\n"
                           "# HELP wattscope_gpu_energy_joules_total Energy (method=\"counter\").\n"
                           "# TYPE wattscope_gpu_energy_joules_total counter\n"
                           "wattscope_gpu_energy_joules_total{gpu=\"0\"} 12.5\n"
                           "wattscope_gpu_energy_joules_total{gpu=\"1\"} 3\n"
                           "# HELP wattscope_gpu_ecc_errors_total ECC errors.\n"
                           "# TYPE wattscope_gpu_ecc_errors_total counter\n"
                           "wattscope_gpu_ecc_errors_total{gpu=\"0\"} 5\n"
                           "# HELP wattscope_sampler_ticks_total Ticks.\n"
                           "# TYPE wattscope_sampler_ticks_total counter\n"
                           "wattscope_sampler_ticks_total 7\n";
  constexpr std::string_view created[] = {"wattscope_gpu_energy_joules_total", "wattscope_sampler_ticks_total"};
  EXPECT_EQ(openmetrics_from_text(text, created, 1700000000.25),
            "# HELP wattscope_build wattscope build, as a label.\n"
            "# TYPE wattscope_build info\n"
            "wattscope_build_info{version=\"1\"} 1\n"
            "# HELP wattscope_gpu_energy_joules Energy (method=\\\"counter\\\").\n"
            "# TYPE wattscope_gpu_energy_joules counter\n"
            "wattscope_gpu_energy_joules_total{gpu=\"0\"} 12.5\n"
            "wattscope_gpu_energy_joules_created{gpu=\"0\"} 1700000000.250\n"
            "wattscope_gpu_energy_joules_total{gpu=\"1\"} 3\n"
            "wattscope_gpu_energy_joules_created{gpu=\"1\"} 1700000000.250\n"
            "# HELP wattscope_gpu_ecc_errors ECC errors.\n"
            "# TYPE wattscope_gpu_ecc_errors counter\n"
            "wattscope_gpu_ecc_errors_total{gpu=\"0\"} 5\n"
            "# HELP wattscope_sampler_ticks Ticks.\n"
            "# TYPE wattscope_sampler_ticks counter\n"
            "wattscope_sampler_ticks_total 7\n"
            "wattscope_sampler_ticks_created 1700000000.250\n"
            "# EOF\n");
}

TEST(Csp, Sha256KnownAnswers) {
  // FIPS 180-4's examples and the padding edges (55 bytes: one block; 56 and 64: two).
  EXPECT_EQ(sha256_base64(""), "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
  EXPECT_EQ(sha256_base64("abc"), "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=");
  EXPECT_EQ(sha256_base64("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "JI1qYdIGOLjlwCaTDD5gOaM85Flk/yFn9uzt1BnbBsE=");
  EXPECT_EQ(sha256_base64(std::string(55, 'x')), "1eKFaDzU78AtAhpcYgFGlJWJAQBdb3HongmJ+sd+QHI=");
  EXPECT_EQ(sha256_base64(std::string(64, 'x')), "fOEAlx9k5wAej+WlGXPs3+HO1Cvv5+6NX9YhlQa1OTw=");
  EXPECT_EQ(sha256_base64(std::string(1000000, 'a')), "zcduXJkU+5KBocfihNc+Z/GAmkiklyAOBG05zMcRLNA=");
}

TEST(Csp, ThePolicyHashesEachInlineScriptAndAllowsScriptsOnlyFromServe) {
  const std::string page = "<html><head><script src=\"/assets/plotly-1.min.js\"></script>\n"
                           "<SCRIPT>let a = 1;</SCRIPT><script type=\"application/json\">{\"x\":1}</script>"
                           "</head><body><script>\nrun();\n</script></body></html>";
  const std::string csp = content_security_policy(page);
  for (const char* inline_text : {"let a = 1;", "{\"x\":1}", "\nrun();\n"})
    EXPECT_NE(csp.find("'sha256-" + sha256_base64(inline_text) + "'"), std::string::npos) << inline_text;
  EXPECT_EQ(csp.find("sha256-" + sha256_base64("")), std::string::npos) << "the src script has no body to hash";
  EXPECT_TRUE(csp.starts_with("default-src 'none'; script-src 'self' 'sha256-")) << csp;
  for (const char* unsafe : {"'unsafe-eval'", "script-src 'self' 'unsafe-inline'", "*"})
    EXPECT_EQ(csp.find(unsafe), std::string::npos) << unsafe;
}

} // namespace unit_server_parts

namespace unit_server_parts {

// The dashboard links to the runs pages where serve keeps a store; without one there are none to link to.
TEST(StaticFiles, TheDashboardLinksToTheRunsPagesWhereThereAreAny) {
  auto page = [](bool runs) { return std::string(StaticFiles(runs).find("/")->identity); };
  EXPECT_NE(page(true).find("<a id=\"runs-link\" href=\"/runs\" >"), std::string::npos);
  EXPECT_NE(page(false).find("<a id=\"runs-link\" href=\"/runs\" hidden>"), std::string::npos);
  EXPECT_EQ(page(true).find("{{"), std::string::npos) << "a placeholder left in the page";
}

} // namespace unit_server_parts
