// Issue 35: serve's compare view over a store, SQLite and MariaDB: its JSON and page give the figures and verdict of
// `wattscope compare --json` for the same runs, and they equal the runs' analytic energies. Each run is an imported
// nvidia-smi log of three samples one second apart at a constant power P, so its energy is 2 s × P (the trapezoid
// rule is exact on a constant).
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../e2e/http_client.hpp"
#include "../support/mariadb.hpp"
#include "../support/support.hpp"

namespace unit_compare_view_store {

using namespace wstest;
using wstest::wattscope;
using json = nlohmann::json;
using namespace std::chrono_literals;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Tasks a (100, 102, 98 W) and b (150, 149, 152 W): mean energies 200 J and 300.667 J per run.
void check_store(const std::string& store, const std::map<std::string, std::string>& env) {
  TempDir dir;
  const std::vector<std::pair<std::string, int>> runs = {{"a", 100}, {"a", 102}, {"a", 98},
                                                         {"b", 150}, {"b", 149}, {"b", 152}};
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string csv = dir / fmt::format("run{}.csv", i);
    std::string text = "timestamp, index, power.draw [W]\n";
    for (int s = 0; s < 3; ++s)
      text += fmt::format("2026/01/01 {:02}:00:{:02}.000, 0, {} W\n", 10 + i, s, runs[i].second);
    write_file(csv, text);
    Result r = run({wattscope(), "import", "nvidia-smi", csv, "--task", runs[i].first, "--utc", "--db", store}, env,
                   dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  Result cmp = run({wattscope(), "compare", "--db", store, "a", "b", "--json"}, env, dir.path());
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  const json c = json::parse(cmp.out);
  EXPECT_NEAR(c["a"]["energy_j"]["mean"].get<double>(), 200, 1e-9);
  EXPECT_NEAR(c["b"]["energy_j"]["mean"].get<double>(), 2.0 * 451 / 3, 1e-9);

  auto serve_env = env;
  serve_env["WATTSCOPE_NVML_LIBRARY"] = dir / "absent-nvml.so";
  const int pid = start({wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "500ms", "--db", store},
                        serve_env, dir.path(), dir / "out", dir / "err");
  const int port = wait_for_serve_port(dir / "err", 200);
  auto get = [&](const std::string& target) { return http::get(port, target, {}, 20s); };

  auto api = get("/api/v1/compare?tasks=a,b");
  ASSERT_EQ(api.status, 200) << api.body;
  const json j = json::parse(api.body);
  const json& t = j["comparison"]["tasks"];
  ASSERT_EQ(t.size(), 2u);
  EXPECT_DOUBLE_EQ(t[0]["figures"]["energy_j"]["mean"].get<double>(), c["a"]["energy_j"]["mean"].get<double>());
  EXPECT_DOUBLE_EQ(t[1]["figures"]["energy_j"]["mean"].get<double>(), c["b"]["energy_j"]["mean"].get<double>());
  EXPECT_EQ(t[0]["figures"]["energy_j"]["ci95"], c["a"]["energy_j"]["ci95"]);
  const json& v = j["comparison"]["verdicts"][0];
  EXPECT_EQ(v["significant"], c["significant"]);
  EXPECT_DOUBLE_EQ(v["difference_pct"].get<double>(), c["difference_pct"].get<double>());
  EXPECT_DOUBLE_EQ(v["welch"]["p"].get<double>(), c["welch"]["p"].get<double>());
  EXPECT_TRUE(has(v["words"].get<std::string>(), "task b uses 50.3 % ± ")) << v["words"];
  EXPECT_EQ(j["view"], "/runs/compare?tasks=a,b");

  // The page: the same comparison, drawn without plotly.js.
  auto page = get("/runs/compare?tasks=a,b");
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_TRUE(has(page.header("content-type"), "text/html"));
  EXPECT_TRUE(has(page.body, "task b uses 50.3 % \xc2\xb1 ")) << page.body.substr(0, 300);
  EXPECT_LT(page.body.size(), 200'000u) << "no plotly.js in a page without charts";
  // By run id, and the filters.
  const std::string a0 = t[0]["runs"][0], b0 = t[1]["runs"][0];
  auto two = get("/api/v1/compare?runs=" + a0 + "," + b0);
  ASSERT_EQ(two.status, 200) << two.body;
  EXPECT_EQ(json::parse(two.body)["comparison"]["runs"].size(), 2u);
  EXPECT_EQ(get("/api/v1/compare?tasks=a&to=2026-01-01T11:30:00Z").status, 200);
  EXPECT_EQ(json::parse(get("/api/v1/compare?tasks=a&to=2026-01-01T11:30:00Z").body)["comparison"]["runs"].size(), 2u);

  auto missing = get("/api/v1/compare?tasks=a,zzz");
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(has(missing.body, "no finished runs of task zzz")) << missing.body;
  EXPECT_EQ(get("/api/v1/compare?runs=nope-0000").status, 404);
  auto bad = get("/runs/compare?tasks=a&bogus=1");
  EXPECT_EQ(bad.status, 400);
  EXPECT_TRUE(has(bad.body, "unknown query parameter 'bogus'")) << bad.body;
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
}

TEST(CompareViewStore, SqliteGivesTheFiguresOfCompare) {
  TempDir dir;
  check_store(dir / "runs.db", {});
}

TEST(CompareViewStore, MariaDbGivesTheFiguresOfCompare) {
  MariaDb db;
  check_store(db.url(), {{"WATTSCOPE_MYSQL_PASSWORD", "secret"}});
}

} // namespace unit_compare_view_store
