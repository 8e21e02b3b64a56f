// issue 36: a declared total of work (`wattscope.work(n, unit, total=N)`, `wattscope mark work N --total T`) carried
// through the marker protocol, the phase tracker and the `work` table, so the time and energy to finish can be
// forecast from it.
#include <gtest/gtest.h>

#include <stdexcept>

#include "core/schema.hpp"
#include "phases/marker.hpp"
#include "phases/phase_tracker.hpp"
#include "runs/phase_view.hpp"

namespace unit_work_total { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;

namespace {
std::string error_of(std::string_view s) {
  try {
    parse_marker(s);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
} // namespace

TEST(WorkTotal, ParsedEncodedAndOptional) {
  const Marker m = parse_marker(R"({"kind":"work","amount":64,"unit":"samples","total":60000})");
  ASSERT_TRUE(m.total.has_value());
  EXPECT_EQ(*m.total, 60000.0);
  const std::string line = encode_marker(m);
  EXPECT_NE(line.find("\"total\":60000"), std::string::npos) << line;
  EXPECT_EQ(parse_marker(std::string_view(line).substr(0, line.size() - 1)).total, m.total);
  // An older sender's line has none: missing, never 0; and nothing is encoded for it.
  const Marker old = parse_marker(R"({"kind":"work","amount":64,"unit":"samples"})");
  EXPECT_FALSE(old.total.has_value());
  EXPECT_EQ(encode_marker(old).find("total"), std::string::npos);
  EXPECT_FALSE(parse_marker(R"({"kind":"work","amount":1,"unit":"samples","total":null})").total.has_value());
}

TEST(WorkTotal, BadTotalsAreRefusedWithTheirName) {
  for (const char* bad : {R"({"kind":"work","amount":1,"unit":"s","total":-1})",
                          R"({"kind":"work","amount":1,"unit":"s","total":"60000"})",
                          R"({"kind":"work","amount":1,"unit":"s","total":1e19})",
                          R"({"kind":"work","amount":1,"unit":"s","total":true})"})
    EXPECT_NE(error_of(bad).find("'total'"), std::string::npos) << bad << ": " << error_of(bad);
}

TEST(WorkTotal, TrackerStoresItOnTheWorkRowAndTheLatestDeclarationWins) {
  PhaseTracker t;
  const auto at = [](int64_t ms) { return SteadyClock::time_point(std::chrono::milliseconds(ms)); };
  Frame f0;
  f0.tick = 0;
  f0.ts_ms = 1000;
  f0.mono = at(1000);
  t.process(f0);
  Marker w;
  w.kind = Marker::Kind::Work;
  w.unit = "samples";
  w.amount = 64;
  w.total = 1000;
  t.push(w, 1100, at(1100));
  w.total.reset();
  t.push(w, 1200, at(1200));
  w.total = 2000;
  t.push(w, 1300, at(1300));
  Frame f1;
  f1.tick = 1;
  f1.ts_ms = 2000;
  f1.mono = at(2000);
  t.process(f1);
  ASSERT_EQ(f1.work.size(), 3u);
  EXPECT_EQ(f1.work[0].total, 1000.0);
  EXPECT_FALSE(f1.work[1].total.has_value());
  EXPECT_EQ(f1.work[2].total, 2000.0);

  // The `work` table's `total` column: the value, or NULL.
  RowBatch rows;
  append_frame_rows("run", f1, rows);
  const auto& cells = rows.tables[static_cast<size_t>(TableId::Work)];
  const size_t col = column_index(TableId::Work, "total");
  ASSERT_EQ(cells.rows(), 3u);
  EXPECT_EQ(value_real(cells.cells[0 * cells.columns() + col]), 1000.0);
  EXPECT_FALSE(value_real(cells.cells[1 * cells.columns() + col]).has_value());

  PhaseData d;
  d.work = f1.work;
  EXPECT_EQ(d.work_declared_totals(), (std::map<std::string, double>{{"samples", 2000.0}}));
  RunInfo run;
  run.start_ms = 1000;
  run.end_ms = 3000;
  const auto j = phase_json(d, run);
  EXPECT_EQ(j["work"]["total"]["samples"].get<double>(), 2000.0);
  EXPECT_EQ(j["work"]["amount"]["samples"].get<double>(), 192.0);
}

} // namespace unit_work_total
