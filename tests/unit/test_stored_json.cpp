// core/stored_json: the caps on JSON read back from a store, checked before nlohmann parses; the typed reads of its
// members; how often a refused cell is named; and the views that read runs through it (run_json, run_text, the job
// view, phase data) on rows a hostile node could write.
#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "core/stored_json.hpp"
#include "core/tag_filter.hpp"
#include "runs/run_tags.hpp"
#include "runs/run_view.hpp"
#include "sinks/runs_query.hpp"

namespace unit_stored_json { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using json = nlohmann::json;

namespace {

std::string nested(size_t levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}

// spdlog's default logger replaced by one writing to a string for the test's life.
class CapturedLog {
public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("captured", sink);
    logger->set_pattern("%l: %v");
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

RunInfo run_with(const std::string& id, const std::string& tags, const std::string& summary) {
  RunInfo r;
  r.run_id = id;
  r.task = "t";
  r.host = "h";
  r.start_ms = 1'700'000'000'000;
  r.end_ms = r.start_ms + 1000;
  r.total_energy_j = 5;
  r.tags = tags;
  r.summary = summary;
  return r;
}

} // namespace

TEST(StoredJsonReader, DepthIsCountedOutsideStringsOnly) {
  EXPECT_EQ(json_nesting_depth("", 64), 0u);
  EXPECT_EQ(json_nesting_depth("1", 64), 0u);
  EXPECT_EQ(json_nesting_depth(R"({"a":[1,{"b":[]}]})", 64), 4u);
  EXPECT_EQ(json_nesting_depth(R"(["[[[[", "\"[[[", {}])", 64), 2u);
  EXPECT_EQ(json_nesting_depth(nested(64), 64), 64u);
  EXPECT_EQ(json_nesting_depth(nested(65), 64), 65u);
  // It stops once past the limit: 200,000 levels say limit + 1.
  EXPECT_EQ(json_nesting_depth(std::string(200'000, '['), 64), 65u);
  // Closing brackets with none open do not wrap the count.
  EXPECT_EQ(json_nesting_depth("]]]]}}[[", 64), 2u);
}

TEST(StoredJsonReader, CapsAreCheckedBeforeParsing) {
  EXPECT_TRUE(parse_bounded_json(nested(kStoredJsonMaxDepth)).ok());
  const BoundedJson deep = parse_bounded_json("{\"a\":" + nested(200'000) + "}");
  EXPECT_EQ(deep.refusal, JsonRefusal::TooDeep);
  EXPECT_TRUE(deep.value.is_discarded());
  EXPECT_NE(deep.why.find("nested deeper than 64 levels"), std::string::npos) << deep.why;

  std::string big = "\"" + std::string(kStoredJsonMaxBytes, 'x') + "\"";
  const BoundedJson large = parse_bounded_json(big);
  EXPECT_EQ(large.refusal, JsonRefusal::TooLarge);
  EXPECT_NE(large.why.find("1.0 MiB, over the 1.0 MiB cap"), std::string::npos) << large.why;
  big.resize(kStoredJsonMaxBytes - 1);
  big.back() = '"';
  EXPECT_TRUE(parse_bounded_json(big).ok());

  EXPECT_EQ(parse_bounded_json("{\"a\":").refusal, JsonRefusal::NotJson);
  EXPECT_EQ(parse_bounded_json("\"\xff\"").refusal, JsonRefusal::NotJson); // invalid UTF-8
  // Other caps for other inputs (top --connect's events).
  EXPECT_EQ(parse_bounded_json("[1,2,3]", 4).refusal, JsonRefusal::TooLarge);
  EXPECT_EQ(parse_bounded_json("[[1]]", 100, 1).refusal, JsonRefusal::TooDeep);
}

TEST(StoredJsonReader, TypedReadsNeverThrow) {
  const json j = json::parse(R"({"n":1.5,"i":7,"big":1e300,"neg":-9223372036854775808,"u":18446744073709551615,
                                 "s":"x","b":true,"o":{"k":1}})");
  EXPECT_EQ(json_number(j, "n"), 1.5);
  EXPECT_EQ(json_number(j, "s", -1), -1);
  EXPECT_EQ(json_number(json::array({1}), "n", -2), -2);
  EXPECT_EQ(json_int(j, "i", 0), 7);
  EXPECT_EQ(json_int(j, "n", 0), 0);   // not whole
  EXPECT_EQ(json_int(j, "big", 0), 0); // past int64_t
  EXPECT_EQ(json_int(j, "neg", 0), INT64_MIN);
  EXPECT_EQ(json_int(j, "u", 0), 0);
  EXPECT_EQ(json_int(json(9.0e18)), int64_t{9'000'000'000'000'000'000});
  EXPECT_EQ(json_int(json(9.3e18)), std::nullopt);
  EXPECT_EQ(json_string(j, "s"), "x");
  EXPECT_EQ(json_string(j, "i", "?"), "?");
  EXPECT_TRUE(json_bool(j, "b", false));
  EXPECT_TRUE(json_bool(j, "s", true));
  EXPECT_TRUE(json_member(j, "missing").is_null());
  EXPECT_TRUE(json_member(json("text"), "o").is_null());
  EXPECT_EQ(json_member(j, "o")["k"], 1);
}

TEST(StoredJsonReader, ARefusedCellIsNamedAndReadAsMissing) {
  CapturedLog log;
  EXPECT_EQ(read_stored_object("{\"a\":" + nested(1000) + "}", "run-deep", "runs.tags"), json::object());
  EXPECT_EQ(read_stored_object("[1]", "run-array", "runs.summary"), json::object());
  EXPECT_EQ(read_stored_object("", "run-empty", "runs.summary"), json::object()); // missing: no warning
  EXPECT_EQ(read_stored_object(R"({"k":"v"})", "run-good", "runs.tags"), json::parse(R"({"k":"v"})"));
  EXPECT_FALSE(read_stored_json("nope", "run-text", "events.detail"));
  const std::string text = log.text();
  EXPECT_NE(text.find("warning: run 'run-deep': stored runs.tags refused (nested deeper than 64 levels"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("run 'run-array': stored runs.summary refused (a JSON array, not an object)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("run 'run-text': stored events.detail refused (not JSON)"), std::string::npos) << text;
  EXPECT_EQ(text.find("run-empty"), std::string::npos) << text;
  EXPECT_EQ(text.find("run-good"), std::string::npos) << text;
}

TEST(StoredJsonReader, WarningsAreNamedOncePerWindowAndCapped) {
  StoredJsonWarnings w(3, std::chrono::seconds(60));
  const auto t0 = StoredJsonWarnings::Clock::time_point{} + std::chrono::hours(1);
  size_t lines = 0;
  auto note = [&](const std::string& key, auto at) {
    const auto out = w.note(key, "bad " + key, at);
    lines += out.size();
    return out;
  };
  EXPECT_EQ(note("a", t0).size(), 1u);
  EXPECT_EQ(note("a", t0).size(), 0u); // the same cell met again: once is enough
  EXPECT_EQ(note("b", t0).size(), 1u);
  EXPECT_EQ(note("c", t0).size(), 1u);
  const auto past = note("d", t0);
  ASSERT_EQ(past.size(), 1u);
  EXPECT_NE(past[0].find("more stored JSON refused"), std::string::npos) << past[0];
  for (int i = 0; i < 100'000; ++i)
    note("run" + std::to_string(i), t0 + std::chrono::seconds(30));
  EXPECT_EQ(lines, 4u); // 100,000 bad rows: the same four lines
  // The next window says how many went unnamed, then names again.
  const auto next = note("e", t0 + std::chrono::seconds(61));
  ASSERT_EQ(next.size(), 2u);
  EXPECT_NE(next[0].find("100001 more reads of refused stored JSON went unnamed"), std::string::npos) << next[0];
  EXPECT_EQ(next[1], "bad e");
}

// What a hostile node could write into a run's summary: the wrong types where figures are read. Every view reads it
// without throwing, the figures it can read shown, the rest missing.
TEST(StoredJsonReader, RunViewsReadSummariesOfTheWrongShape) {
  CapturedLog log;
  const std::vector<std::string> summaries = {
      R"({"skipped_ticks":"many","events":[],"rebuilt_from_samples":1,"sampling":{"idle_stretches":"x","adaptive":3}})",
      R"({"cpu":5,"gpus":{"index":0},"attribution":{"devices":[1,2]}})",
      R"({"cpu":{"energy_j":1,"package_energy_j":1,"energy_method":7,"zones":[{"zone":"package"},3,{"socket":1e300,"zone":"package"}]}})",
      R"({"gpus":[{"index":1e300,"energy_j":1},{"index":"0","energy_j":1},5,{"index":2,"energy_j":3,"name":7,"lost":"yes"}]})",
      R"({"attribution":{"devices":{"x":{"measured_j":10,"attributed_j":"a","method":1},"gpu":{"measured_j":1}}}})",
      R"({"rebuilt_from_samples":true,"last_sample_ms":1e300,"last_event":{"a":1}})",
      R"({"markers":{"dropped":"lots"}})",
      "[]",
      "null",
  };
  for (const auto& s : summaries) {
    SCOPED_TRACE(s);
    RunInfo r = run_with("r1", R"({"mig":5,"simulated":true,"slurm_node":3})", s);
    r.end_ms.reset(); // an unfinished run reads last_sample_ms too
    EXPECT_NO_THROW({
      const json j = run_json(r);
      EXPECT_EQ(j["run_id"], "r1");
      (void)j.dump();
    });
    EXPECT_NO_THROW((void)run_text(r));
    EXPECT_NO_THROW((void)runs_table({r}));
    EXPECT_NO_THROW((void)runs_total_text({r, run_with("r2", "{}", s)}, {}));
    EXPECT_NO_THROW((void)run_tag_rows(r));
  }
  // The GPU whose index is a whole number is counted; the others are not.
  const RunInfo r = run_with("r3", "{}", summaries[3]);
  EXPECT_EQ(run_energy_method(r).devices, (std::vector<std::pair<std::string, std::string>>{{"gpu2", "unknown"}}));
}

} // namespace unit_stored_json
