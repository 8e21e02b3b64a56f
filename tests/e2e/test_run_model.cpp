// One run, every view: `show --json`, `list --json`, `advise --json`, the report's data, `stats --json`,
// `compare --json`, serve's run API and the Python reader give the same figures for the same run, because each derives
// them from one model of the run (src/runs/run_model.hpp). A figure that one view works out on its own fails here.
#include <gtest/gtest.h>

#include <signal.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "http_client.hpp"

namespace e2e_run_model { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

// A machine without a GPU: the simulated GPUs (embedded) are the devices, and the command's processes are attributed.
std::map<std::string, std::string> sim_env() {
  return {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
          {"WATTSCOPE_FAKE_NVML_SCENARIO", "\x01"},
          {"CUDA_VISIBLE_DEVICES", "\x01"},
          {"WATTSCOPE_SOCKET", "\x01"}};
}

// Two simulated runs of one task: the first covers the scenario's warm-up and an epoch with work, its power-capped
// GPU and its idle GPU (advice); the second makes `stats` and `compare` figures over runs.
class OneRunEveryView : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    for (const char* secs : {"4", "2"}) {
      const Result r = run({wattscope(), "run", "--simulate", "--interval", "100ms", "--max-read-cost", "0", "--task",
                            "same", "--", "sleep", secs},
                           sim_env(), dir_->path());
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    const json runs = json::parse(ws({"list", "--json"}).out);
    ASSERT_EQ(runs.size(), 2u);
    run_id_ = new std::string(runs[0]["run_id"].get<std::string>()); // oldest first
    show_ = new json(json::parse(ws({"show", *run_id_, "--json"}).out));
  }
  static void TearDownTestSuite() {
    delete show_;
    delete run_id_;
    delete dir_;
  }
  static Result ws(std::vector<std::string> args) {
    args.insert(args.begin(), wattscope());
    return run(args, sim_env(), dir_->path());
  }
  static const json& show() { return *show_; }
  // The views, each against show --json
  static void has_every_kind_of_figure();
  static void list_serve_and_report();
  static void advise_stats_and_compare();
  static void python_reader();
  static const std::string& id() { return *run_id_; }
  static std::string db() { return *dir_ / "wattscope.db"; }

  static TempDir* dir_;
  static std::string* run_id_;
  static json* show_;
};
TempDir* OneRunEveryView::dir_ = nullptr;
std::string* OneRunEveryView::run_id_ = nullptr;
json* OneRunEveryView::show_ = nullptr;

// The run-level figures every JSON view of one run carries under the same keys.
const std::vector<std::string> kRunFigures = {
    "total_energy_j", "energy_method", "attributed_energy_j", "attributed_energy_method", "duration_s",
    "samples",        "finished",      "energy_devices"};

void expect_same_run_figures(const json& view, const json& truth, const std::string& which) {
  SCOPED_TRACE(which);
  for (const auto& key : kRunFigures)
    EXPECT_EQ(view[key], truth[key]) << key;
  ASSERT_EQ(view["gpus"].size(), truth["gpus"].size());
  for (size_t i = 0; i < truth["gpus"].size(); ++i) {
    EXPECT_EQ(view["gpus"][i]["energy_j"], truth["gpus"][i]["energy_j"]) << i;
    EXPECT_EQ(view["gpus"][i]["energy_method"], truth["gpus"][i]["energy_method"]) << i;
  }
  EXPECT_EQ(view["cpu"], truth["cpu"]);
}

// The report's data block of an HTML report.
json report_data(const std::string& html) {
  const std::string open = "<script id=\"ws-data\" type=\"application/json\">";
  const auto a = html.find(open);
  if (a == std::string::npos) return {};
  const auto b = html.find("</script", a + open.size());
  return json::parse(html.substr(a + open.size(), b - a - open.size()), nullptr, false);
}

std::vector<std::string> advice_texts(const json& advice) {
  std::vector<std::string> out;
  for (const auto& a : advice)
    out.push_back(a["kind"].get<std::string>() + ": " + a["text"].get<std::string>());
  return out;
}

} // namespace

// The figures the checks rest on are there at all: a run with energy, attribution, phases, work and advice.
void OneRunEveryView::has_every_kind_of_figure() {
  EXPECT_TRUE(show()["total_energy_j"].is_number());
  EXPECT_TRUE(show()["attributed_energy_j"].is_number());
  EXPECT_GE(show()["phases"].size(), 2u);
  EXPECT_TRUE(show()["work"]["energy_per_unit_j"]["samples"].is_number());
  EXPECT_FALSE(show()["advice"].empty());
  EXPECT_TRUE(show()["quality"].is_object());
  EXPECT_FALSE(show()["quality"]["unfinished"].get<bool>());
}

void OneRunEveryView::list_serve_and_report() {
  const json list = json::parse(ws({"list", "--json"}).out);
  expect_same_run_figures(list[0], show(), "list --json");

  ASSERT_EQ(ws({"report", id(), "-o", *dir_ / "r.html"}).exit_code, 0);
  const json data = report_data(read_file(*dir_ / "r.html"));
  ASSERT_TRUE(data.is_object());
  const json& r = data["runs"][0];
  expect_same_run_figures(r["summary"], show(), "report summary");
  EXPECT_EQ(r["summary"]["quality"], show()["quality"]);
  EXPECT_EQ(r["work"], show()["work"]);
  ASSERT_EQ(r["phases"].size(), show()["phases"].size());
  for (size_t i = 0; i < r["phases"].size(); ++i)
    for (const char* key : {"name", "energy_j", "devices", "energy_method", "energy_bound_j", "uncertain", "work"})
      EXPECT_EQ(r["phases"][i][key], show()["phases"][i][key]) << i << " " << key;
  EXPECT_EQ(advice_texts(r["advice"]), advice_texts(show()["advice"]));

  // serve's run API, from the same store
  const int pid = start({wattscope(), "serve", "--db", db(), "--listen", "127.0.0.1:0"}, sim_env(), dir_->path(),
                        *dir_ / "serve.out", *dir_ / "serve.err");
  const int port = wait_for_serve_port(*dir_ / "serve.err", 200);
  const auto reply = http::get(port, "/api/v1/runs/" + id(), {}, std::chrono::seconds(10));
  kill(pid, SIGTERM);
  wait_exit(pid);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json api = json::parse(reply.body);
  expect_same_run_figures(api, show(), "serve /api/v1/runs/ID");
  EXPECT_EQ(api["quality"], show()["quality"]);
  EXPECT_EQ(api["units"], show()["work"]);
}

void OneRunEveryView::advise_stats_and_compare() {
  const json advise = json::parse(ws({"advise", id(), "--json"}).out);
  EXPECT_EQ(advice_texts(advise["advice"]), advice_texts(show()["advice"]));

  const json stats = json::parse(ws({"stats", "--task", "same", "--json"}).out);
  ASSERT_EQ(stats["runs"][0], id());
  const json& m = stats["metrics"];
  EXPECT_EQ(m["energy_j"]["values"][0], show()["total_energy_j"]);
  EXPECT_EQ(m["energy_j"]["energy_method"], show()["energy_method"]);
  EXPECT_EQ(m["attributed_energy_j"]["values"][0], show()["attributed_energy_j"]);
  for (const auto& g : show()["gpus"])
    EXPECT_EQ(m["gpu" + std::to_string(g["index"].get<int>()) + ".energy_j"]["values"][0], g["energy_j"]);
  EXPECT_EQ(m["work.samples.energy_per_unit_j"]["values"][0], show()["work"]["energy_per_unit_j"]["samples"]);
  for (const auto& p : show()["phases"]) { // one instance of each in this run
    const std::string key = "phase." + p["name"].get<std::string>() + ".energy_j";
    EXPECT_DOUBLE_EQ(m[key]["values"][0].get<double>(), p["energy_j"].get<double>()) << key;
  }

  const json cmp = json::parse(ws({"compare", "same", "same", "--json"}).out);
  EXPECT_EQ(cmp["a"]["energy_j_values"][0], show()["total_energy_j"]);
  EXPECT_EQ(cmp["a"]["energy_method"], show()["energy_method"]);
}

void OneRunEveryView::python_reader() {
  const std::string program = "import json, wattscope\n"
                              "r = wattscope.open('" +
                              db() + "').run('" + id() +
                              "')\n"
                              "print(json.dumps({'run': r.as_dict(), 'phases': [\n"
                              "    {'name': p['name'], 'energy_j': p['energy_j']} for p in r.phases]}, default=str))\n";
  auto env = sim_env();
  env["PYTHONPATH"] = std::string(WATTSCOPE_SOURCE_DIR) + "/python";
  const Result py = run({"/usr/bin/python3", "-c", program}, env, dir_->path());
  ASSERT_EQ(py.exit_code, 0) << py.err;
  const json j = json::parse(py.out);
  const json& r = j["run"];
  EXPECT_DOUBLE_EQ(r["energy_j"].get<double>(), show()["total_energy_j"].get<double>());
  EXPECT_EQ(r["energy_method"], show()["energy_method"]);
  EXPECT_DOUBLE_EQ(r["attributed_energy_j"].get<double>(), show()["attributed_energy_j"].get<double>());
  EXPECT_EQ(r["attributed_energy_method"], show()["attributed_energy_method"]);
  for (const auto& g : show()["gpus"])
    EXPECT_DOUBLE_EQ(r["devices"]["gpu" + std::to_string(g["index"].get<int>())].get<double>(),
                     g["energy_j"].get<double>());
  ASSERT_EQ(j["phases"].size(), show()["phases"].size());
  for (size_t i = 0; i < j["phases"].size(); ++i) {
    EXPECT_EQ(j["phases"][i]["name"], show()["phases"][i]["name"]);
    EXPECT_DOUBLE_EQ(j["phases"][i]["energy_j"].get<double>(), show()["phases"][i]["energy_j"].get<double>());
  }
}

// One recording (two runs: ~7 s) for every view, in one test.
TEST_F(OneRunEveryView, EveryViewGivesTheSameFiguresAsShow) {
  {
    SCOPED_TRACE("the run has every kind of figure");
    has_every_kind_of_figure();
  }
  {
    SCOPED_TRACE("list, the report, serve's run API");
    list_serve_and_report();
  }
  {
    SCOPED_TRACE("advise, stats, compare");
    advise_stats_and_compare();
  }
  {
    SCOPED_TRACE("the Python reader");
    python_reader();
  }
}

} // namespace e2e_run_model
