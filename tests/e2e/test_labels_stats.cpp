// Issue 29: every energy figure carries its method in show, list, stats and compare; compare refuses energies
// measured differently; stats gives per-instance phase figures, counts the runs it leaves out and has intervals that
// never go below 0; compare tests each figure with the right run counts; --task and --tag choose runs everywhere.
// Runs are made by the real binary: a CPU estimate (--cpu-tdp, no RAPL under an empty --sysfs-root), simulated GPUs
// (--simulate) and the fake NVML library (counters).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"

namespace e2e_labels_stats { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

// A machine with no GPU library and no RAPL: only what a flag asks for is measured.
struct Lab {
  TempDir dir;
  std::map<std::string, std::string> env = {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                                            {"WATTSCOPE_FAKE_NVML_SCENARIO", "\x01"},
                                            {"CUDA_VISIBLE_DEVICES", "\x01"},
                                            {"WATTSCOPE_SOCKET", "\x01"}};
  Lab() { std::filesystem::create_directory(dir / "sys"); }
  std::string db() const { return dir / "wattscope.db"; }
  // `wattscope run` with the given flags before "--" and a child command.
  Result record(const std::vector<std::string>& flags, const std::string& sh) {
    std::vector<std::string> argv = {wattscope(), "run", "--interval", "50ms", "--sysfs-root", dir / "sys"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const char* w : {"--", "sh", "-c"})
      argv.emplace_back(w);
    argv.push_back(sh);
    return run(argv, env, dir.path());
  }
  Result ws(std::vector<std::string> args) {
    args.insert(args.begin(), wattscope());
    return run(args, {}, dir.path());
  }
};

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

// A child that marks `count` phases called `name` of `seconds` each, with `units` samples of work in each.
std::string phases(const std::string& name, int count, const std::string& seconds, int units = 0) {
  const std::string w = quoted(wattscope());
  std::string sh;
  for (int i = 0; i < count; ++i) {
    sh += (sh.empty() ? "" : " && ") + w + " mark begin " + name;
    if (units) sh += " && " + w + " mark work " + std::to_string(units) + " samples";
    sh += " && sleep " + seconds + " && " + w + " mark end " + name;
  }
  return sh;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v)
    s += x;
  return s / static_cast<double>(v.size());
}
double sample_var(const std::vector<double>& v) {
  const double m = mean(v);
  double ss = 0;
  for (double x : v)
    ss += (x - m) * (x - m);
  return ss / static_cast<double>(v.size() - 1);
}
std::vector<double> column(const std::string& db, const std::string& sql) {
  std::vector<double> out;
  for (const auto& r : query(db, sql))
    out.push_back(std::stod(*r[0]));
  return out;
}

} // namespace

// --- labels (Deliver 6)

TEST(Labels, ShowAndListNameTheMethodAndOnlyTheDevicesMeasured) {
  Lab lab;
  ASSERT_EQ(lab.record({"--task", "est", "--cpu-tdp", "100"}, "sleep 0.4").exit_code, 0);
  Result show = lab.ws({"show"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  // Only the CPU package was estimated: no GPU, no DRAM in the headline, and the word.
  EXPECT_NE(show.out.find("total (CPU package) [estimated]"), std::string::npos) << show.out;
  EXPECT_EQ(show.out.find("GPUs"), std::string::npos) << show.out;
  const json j = json::parse(lab.ws({"show", "--json"}).out);
  EXPECT_EQ(j["energy_method"], "estimated");
  EXPECT_EQ(j["energy_devices"], json({{"cpu_package", "estimated"}}));
  // list: the method beside the energy, in text and JSON.
  Result list = lab.ws({"list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("METHOD"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("estimated"), std::string::npos) << list.out;
  EXPECT_EQ(json::parse(lab.ws({"list", "--json"}).out)[0]["energy_method"], "estimated");
  // A run that measured nothing has no method, and says so: null, not a word.
  ASSERT_EQ(lab.record({"--task", "none"}, "true").exit_code, 0);
  const json none = json::parse(lab.ws({"show", "--json"}).out);
  EXPECT_TRUE(none["energy_method"].is_null());
  EXPECT_TRUE(none["energy_devices"].empty());
}

TEST(Labels, SimulatedGpusAreLabelledAndAMixedRunNamesItsParts) {
  Lab lab;
  ASSERT_EQ(lab.record({"--task", "sim", "--simulate"}, "sleep 0.3").exit_code, 0);
  json j = json::parse(lab.ws({"show", "--json"}).out);
  EXPECT_EQ(j["energy_method"], "simulated");
  EXPECT_NE(lab.ws({"show"}).out.find("total (4 GPUs) [simulated]"), std::string::npos);
  // Simulated GPUs and an estimated CPU: mixed, with the devices of each part.
  ASSERT_EQ(lab.record({"--task", "both", "--simulate", "--cpu-tdp", "50"}, "sleep 0.3").exit_code, 0);
  j = json::parse(lab.ws({"show", "--json"}).out);
  EXPECT_EQ(j["energy_method"], "mixed (simulated: gpu0, gpu1, gpu2, gpu3; estimated: cpu_package)");
  EXPECT_NE(lab.ws({"show"}).out.find("total (4 GPUs + CPU package) [mixed (simulated: gpu0, gpu1, gpu2, gpu3; "
                                      "estimated: cpu_package)]"),
            std::string::npos);
}

TEST(Labels, StatsAndCompareCarryTheMethodAndCompareRefusesDifferentMethods) {
  Lab lab;
  for (const char* s : {"0.3", "0.4"}) {
    ASSERT_EQ(lab.record({"--task", "sim", "--simulate"}, std::string("sleep ") + s).exit_code, 0);
    ASSERT_EQ(lab.record({"--task", "est", "--cpu-tdp", "100"}, std::string("sleep ") + s).exit_code, 0);
  }
  Result stats = lab.ws({"stats", "--task", "est", "--json"});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  json j = json::parse(stats.out);
  EXPECT_EQ(j["energy_method"], "estimated");
  EXPECT_EQ(j["metrics"]["energy_j"]["energy_method"], "estimated");
  EXPECT_EQ(j["metrics"]["cpu.energy_j"]["energy_method"], "estimated");
  EXPECT_TRUE(j["metrics"]["duration_s"]["energy_method"].is_null());
  Result text = lab.ws({"stats", "--task", "sim"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  // The energy line ends with its method.
  const auto line = text.out.substr(text.out.find("\nenergy_j "));
  EXPECT_NE(line.substr(0, line.find('\n', 1)).find("simulated"), std::string::npos) << text.out;

  // Simulated H100s against a CPU estimate: refused, exit 2, saying why and how to override.
  Result refused = lab.ws({"compare", "est", "sim"});
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.err.find("measured differently"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("estimated on cpu_package"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("simulated on gpu0, gpu1, gpu2, gpu3"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--force"), std::string::npos) << refused.err;
  EXPECT_EQ(refused.out, "");
  Result forced = lab.ws({"compare", "est", "sim", "--force", "--json"});
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  j = json::parse(forced.out);
  EXPECT_EQ(j["a"]["energy_method"], "estimated");
  EXPECT_EQ(j["b"]["energy_method"], "simulated");
  EXPECT_EQ(j["energy_method"], "estimated vs simulated");
  EXPECT_TRUE(j["methods_differ"].get<bool>());
  EXPECT_TRUE(j["forced"].get<bool>());
  EXPECT_NE(j["verdict"].get<std::string>().find("Forced"), std::string::npos);
  // Two runs of one method: compared, and the method said.
  Result same = lab.ws({"compare", "est", "est", "--json"});
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(json::parse(same.out)["energy_method"], "estimated");
  EXPECT_FALSE(json::parse(same.out)["methods_differ"].get<bool>());
}

TEST(Labels, CompareRefusesTheSameMethodOnDifferentDevices) {
  // Two fake NVML GPUs with counters against one of them alone (CUDA_VISIBLE_DEVICES=0): both "counter", but a
  // difference between them would be a GPU's worth of energy.
  Lab lab;
  json scen = {{"devices", json::array()}};
  for (int i = 0; i < 2; ++i) {
    json metrics = json::object();
    metrics["power_mw"] = 100000;
    metrics["energy_mj"] = {{"linear", {1000, 5}}};
    json dev = json::object();
    dev["name"] = "Fake GPU";
    dev["uuid"] = "GPU-fake-" + std::to_string(i);
    dev["pci_bus_id"] = "00000000:" + std::to_string(30 + i) + ":00.0";
    dev["metrics"] = metrics;
    scen["devices"].push_back(dev);
  }
  write_file(lab.dir / "scenario.json", scen.dump());
  lab.env["WATTSCOPE_NVML_LIBRARY"] = fake_nvml();
  lab.env["WATTSCOPE_FAKE_NVML_SCENARIO"] = lab.dir / "scenario.json";
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(lab.record({"--task", "two"}, "sleep 0.3").exit_code, 0);
  lab.env["CUDA_VISIBLE_DEVICES"] = "0";
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(lab.record({"--task", "one"}, "sleep 0.3").exit_code, 0);
  EXPECT_EQ(json::parse(lab.ws({"show", "--json"}).out)["energy_devices"], json({{"gpu0", "counter"}}));
  Result refused = lab.ws({"compare", "two", "one"});
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.err.find("counter on gpu0, gpu1"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("counter on gpu0. "), std::string::npos) << refused.err;
  EXPECT_EQ(lab.ws({"compare", "two", "one", "--force"}).exit_code, 0);
}

// --- statistics (Deliver 7)

TEST(Stats, PhaseFiguresArePerInstanceWithTheRunTotalApart) {
  Lab lab;
  // Three epochs of 0.3 s in each of two runs: an epoch's figure is one epoch's, not three.
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(lab.record({"--task", "ep", "--cpu-tdp", "100"}, phases("epoch", 3, "0.3")).exit_code, 0);
  EXPECT_EQ(scalar(lab.db(), "SELECT count(*) FROM phases WHERE name = 'epoch'"), "6");
  Result r = lab.ws({"stats", "--task", "ep", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json m = json::parse(r.out)["metrics"];
  // The truth from the stored phases: per run the mean over its epochs, then the mean over runs.
  std::vector<double> per_instance_s, per_run_s, per_instance_j, per_run_j;
  for (const auto& row :
       query(lab.db(), "SELECT avg((p.end_ms - p.start_ms) / 1000.0), sum((p.end_ms - p.start_ms) / 1000.0), "
                       "avg(p.energy_j), sum(p.energy_j) FROM phases p JOIN runs r USING (run_id) WHERE p.name = "
                       "'epoch' GROUP BY run_id ORDER BY r.start_ms")) {
    per_instance_s.push_back(std::stod(*row[0]));
    per_run_s.push_back(std::stod(*row[1]));
    per_instance_j.push_back(std::stod(*row[2]));
    per_run_j.push_back(std::stod(*row[3]));
  }
  ASSERT_EQ(per_instance_s.size(), 2u);
  EXPECT_NEAR(m["phase.epoch.duration_s"]["mean"].get<double>(), mean(per_instance_s), 1e-9);
  EXPECT_NEAR(m["phase.epoch.run_total_duration_s"]["mean"].get<double>(), mean(per_run_s), 1e-9);
  EXPECT_NEAR(m["phase.epoch.energy_j"]["mean"].get<double>(), mean(per_instance_j), 1e-9);
  EXPECT_NEAR(m["phase.epoch.run_total_energy_j"]["mean"].get<double>(), mean(per_run_j), 1e-9);
  EXPECT_EQ(m["phase.epoch.instances"]["mean"].get<double>(), 3.0);
  // And it is the 0.3 s slept (plus a `wattscope mark` start-up of at most 0.15 s at each end).
  EXPECT_GE(m["phase.epoch.duration_s"]["mean"].get<double>(), 0.3);
  EXPECT_LT(m["phase.epoch.duration_s"]["mean"].get<double>(), 0.6);
  EXPECT_EQ(m["phase.epoch.energy_j"]["energy_method"], "estimated");
}

TEST(Stats, AnEnergyIntervalNeverGoesBelowZeroAndItsMethodIsSaid) {
  Lab lab;
  // A CPU estimated at 100 W, kept busy on one core for 0.25, 0.25 and 3 s: the estimate follows utilisation, so
  // the energies spread by the durations whatever else the machine runs (a `sleep` left them to the machine's own
  // load: on a quiet one all three came out near 0.47 J). Student's t interval of the mean of such values reaches
  // far below 0 (e.g. 12, 12, 150 J: mean 58, sd 80, t(0.975, 2) = 4.30: 58 - 198).
  for (const char* s : {"0.25", "0.25", "3"})
    ASSERT_EQ(lab.record({"--task", "wild", "--cpu-tdp", "100"},
                         std::string("python3 -c 'import time\nt = time.monotonic() + ") + s +
                             "\nwhile time.monotonic() < t: pass'")
                  .exit_code,
              0);
  const auto energy = column(lab.db(), "SELECT total_energy_j FROM runs ORDER BY start_ms");
  ASSERT_EQ(energy.size(), 3u);
  for (double e : energy)
    ASSERT_GT(e, 0) << "every run must have estimated some energy";
  ASSERT_GT(std::sqrt(sample_var(energy)), mean(energy) / 2) << "the inputs must vary a lot for this test";
  ASSERT_LT(mean(energy) - 4.302652729911275 * std::sqrt(sample_var(energy) / 3), 0)
      << "Student's t interval of these must go below 0, or this test proves nothing";
  Result r = lab.ws({"stats", "--task", "wild", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json e = json::parse(r.out)["metrics"]["energy_j"];
  EXPECT_EQ(e["ci95_method"], "lognormal-cox");
  EXPECT_GT(e["ci95"][0].get<double>(), 0);
  // The modified Cox interval, computed here from the stored energies.
  std::vector<double> logs;
  for (double x : energy)
    logs.push_back(std::log(x));
  const double s2 = sample_var(logs), t = 4.302652729911275; // t(0.975, 2) from the tables
  const double half = t * std::sqrt(s2 / 3 + s2 * s2 / 4);
  EXPECT_NEAR(e["ci95"][0].get<double>(), std::exp(mean(logs) + s2 / 2 - half), 1e-9 * e["ci95"][0].get<double>());
  EXPECT_NEAR(e["ci95"][1].get<double>(), std::exp(mean(logs) + s2 / 2 + half), 1e-9 * e["ci95"][1].get<double>());
  EXPECT_NE(lab.ws({"stats", "--task", "wild"}).out.find("Cox"), std::string::npos);
}

TEST(Stats, RunsWithoutAFigureAreLeftOutAndCounted) {
  Lab lab;
  ASSERT_EQ(lab.record({"--task", "t", "--cpu-tdp", "100"}, phases("eval", 1, "0.2")).exit_code, 0);
  ASSERT_EQ(lab.record({"--task", "t", "--cpu-tdp", "100"}, "sleep 0.2").exit_code, 0);
  ASSERT_EQ(lab.record({"--task", "t"}, "sleep 0.2").exit_code, 0); // no --cpu-tdp: no energy at all
  Result r = lab.ws({"stats", "--task", "t", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["n"], 3);
  const json& e = j["metrics"]["energy_j"];
  EXPECT_EQ(e["n"], 2);
  EXPECT_EQ(e["left_out"], 1);
  EXPECT_EQ(e["left_out_why"], json({{"no energy measured", 1}}));
  const auto ids = query(lab.db(), "SELECT run_id FROM runs ORDER BY start_ms");
  EXPECT_EQ(j["run_energy_methods"],
            json({{*ids[0][0], "estimated"}, {*ids[1][0], "estimated"}, {*ids[2][0], nullptr}}));
  const auto energy = column(lab.db(), "SELECT total_energy_j FROM runs WHERE total_energy_j IS NOT NULL");
  EXPECT_NEAR(e["mean"].get<double>(), mean(energy), 1e-9);
  EXPECT_EQ(j["metrics"]["phase.eval.duration_s"]["left_out_why"], json({{"no 'eval' phase", 2}}));
  EXPECT_EQ(j["metrics"]["duration_s"]["left_out"], 0);
  Result text = lab.ws({"stats", "--task", "t"});
  EXPECT_NE(text.out.find("energy_j: 1 run: no energy measured"), std::string::npos) << text.out;
}

TEST(Compare, TestsEachFigureWithTheRightRunCounts) {
  Lab lab;
  auto child = [](const std::string& s) { return phases("epoch", 2, s, 100); };
  for (const char* s : {"0.1", "0.12", "0.14"})
    ASSERT_EQ(lab.record({"--task", "A", "--cpu-tdp", "100"}, child(s)).exit_code, 0);
  ASSERT_EQ(lab.record({"--task", "A"}, child("0.1")).exit_code, 0); // no energy
  for (const char* s : {"0.5", "0.55", "0.6"})
    ASSERT_EQ(lab.record({"--task", "B", "--cpu-tdp", "100"}, child(s)).exit_code, 0);
  Result r = lab.ws({"compare", "A", "B", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["a"]["runs"].size(), 4u);
  EXPECT_EQ(j["a"]["runs_with_energy"], 3);
  EXPECT_EQ(j["a"]["energy_j_values"].size(), 3u);
  std::map<std::string, json> tests;
  for (const auto& t : j["tests"])
    tests[t["figure"].get<std::string>()] = t;
  for (const char* f : {"energy_j", "duration_s", "phase.epoch.energy_j", "phase.epoch.duration_s",
                        "work.samples.energy_per_unit_j", "work.samples.throughput_per_s"})
    EXPECT_TRUE(tests.contains(f)) << f << " is not tested: " << r.out;
  EXPECT_EQ(tests["energy_j"]["a"]["n"], 3);
  EXPECT_EQ(tests["duration_s"]["a"]["n"], 4);
  EXPECT_EQ(tests["energy_j"]["energy_method"], "estimated");
  // Welch's test on the per-instance epoch durations, recomputed here from the stored phases.
  auto per_run = [&](const std::string& task) {
    return column(lab.db(),
                  "SELECT avg((p.end_ms - p.start_ms) / 1000.0) FROM phases p JOIN runs r USING (run_id) WHERE "
                  "r.task = '" +
                      task + "' GROUP BY run_id ORDER BY r.start_ms");
  };
  const auto a = per_run("A"), b = per_run("B");
  ASSERT_EQ(a.size(), 4u);
  const double va = sample_var(a) / 4, vb = sample_var(b) / 3;
  const double t = (mean(b) - mean(a)) / std::sqrt(va + vb);
  EXPECT_NEAR(tests["phase.epoch.duration_s"]["welch"]["t"].get<double>(), t, 1e-9 * std::fabs(t));
  // The epochs of B are four times as long as A's, far beyond the noise: said in words.
  EXPECT_TRUE(tests["phase.epoch.duration_s"]["significant"].get<bool>());
  bool said = false;
  for (const auto& f : j["larger_than_noise"])
    said = said || f == "phase.epoch.duration_s";
  EXPECT_TRUE(said) << j["larger_than_noise"].dump();
  Result text = lab.ws({"compare", "A", "B"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("over 3 and 3 runs; 1 of the 4 runs of A left out: no energy measured"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("Larger than run-to-run noise"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("phase.epoch.duration_s"), std::string::npos) << text.out;
}

// --- choosing runs (Deliver 9)

TEST(Selection, TaskAndTagChooseRunsInListShowStatsAndReport) {
  Lab lab;
  ASSERT_EQ(lab.record({"--task", "a", "--tag", "lr=1", "--cpu-tdp", "100"}, "sleep 0.1").exit_code, 0);
  ASSERT_EQ(lab.record({"--task", "a", "--tag", "lr=2", "--cpu-tdp", "100"}, "sleep 0.1").exit_code, 0);
  ASSERT_EQ(lab.record({"--task", "a", "--tag", "lr=1", "--cpu-tdp", "100"}, "sleep 0.1").exit_code, 0);
  ASSERT_EQ(lab.record({"--task", "b", "--tag", "lr=1", "--cpu-tdp", "100"}, "sleep 0.1").exit_code, 0);
  const auto ids = query(lab.db(), "SELECT run_id, task, json_extract(tags, '$.lr') FROM runs ORDER BY start_ms");
  ASSERT_EQ(ids.size(), 4u);
  auto listed = [&](const std::vector<std::string>& args) {
    std::vector<std::string> all = {"list", "--json"};
    all.insert(all.end(), args.begin(), args.end());
    Result r = lab.ws(all);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string out;
    for (const auto& run : json::parse(r.out))
      out += run["task"].get<std::string>() + run["tags"]["lr"].get<std::string>() + " ";
    return out;
  };
  EXPECT_EQ(listed({"--task", "a"}), "a1 a2 a1 ");
  EXPECT_EQ(listed({"--task", "a", "--tag", "lr=1"}), "a1 a1 ");
  EXPECT_EQ(listed({"--tag", "lr=1"}), "a1 a1 b1 ");
  // show: the chosen runs as one, with the total of their energies
  Result show = lab.ws({"show", "--task", "a", "--tag", "lr=1", "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const json sj = json::parse(show.out);
  ASSERT_EQ(sj["runs"].size(), 2u);
  EXPECT_EQ(sj["runs"][0]["run_id"], *ids[0][0]);
  EXPECT_EQ(sj["runs"][1]["run_id"], *ids[2][0]);
  EXPECT_EQ(sj["energy_method"], "estimated");
  EXPECT_NE(lab.ws({"show", "--task", "a"}).out.find("3 runs of task a"), std::string::npos);
  // stats
  Result stats = lab.ws({"stats", "--task", "a", "--tag", "lr=1", "--json"});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(json::parse(stats.out)["runs"], json({*ids[0][0], *ids[2][0]}));
  stats = lab.ws({"stats", "--tag", "lr=1", "--last", "1", "--json"});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(json::parse(stats.out)["runs"], json({*ids[3][0]}));
  // report: the chosen runs compared in one file
  Result report = lab.ws({"report", "--task", "a", "--tag", "lr=2", "-o", lab.dir / "r.html"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const std::string html = read_file(lab.dir / "r.html");
  EXPECT_NE(html.find(*ids[1][0]), std::string::npos);
  EXPECT_EQ(html.find(*ids[0][0]), std::string::npos);
  // Mistakes: a clear error naming the flag, exit 2; a selection that matches nothing says so.
  for (const auto& cmd : {"list", "show", "stats", "report"}) {
    Result bad = lab.ws({cmd, "--tag", "lr", "-o", lab.dir / "x.html"});
    if (std::string(cmd) != "report") bad = lab.ws({cmd, "--tag", "lr"});
    EXPECT_EQ(bad.exit_code, 2) << cmd << ": " << bad.err;
    EXPECT_NE(bad.err.find("--tag 'lr': expected KEY=VALUE"), std::string::npos) << cmd << ": " << bad.err;
  }
  EXPECT_EQ(lab.ws({"stats", "--task", "a", *ids[0][0]}).exit_code, 2);
  EXPECT_EQ(lab.ws({"report", "--task", "a", *ids[0][0], "-o", lab.dir / "x.html"}).exit_code, 2);
  Result none = lab.ws({"report", "--task", "nope", "-o", lab.dir / "x.html"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no run of task nope"), std::string::npos) << none.err;
}

} // namespace e2e_labels_stats
