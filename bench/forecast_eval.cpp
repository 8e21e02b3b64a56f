// bench/forecast_eval (issue 36): every series model on the held-out traces of tests/fixtures/traces/, MAE and
// peak-timing error per horizon, the winner (what default_series_model() must return: a unit test checks it), and
// what forecasting costs per device per tick, against `record`'s own CPU per tick measured in the same run.
//
//   forecast_eval [--traces DIR] [--record PATH/TO/wattscope] [--seconds N]
//
// --record: runs `wattscope record --simulate` (4 simulated GPUs, no store) for N seconds (default 20) at 1 s and at
// 100 ms and reads its CPU time (user + system, from wait4) to get record's CPU per tick.
#include "forecast/evaluate.hpp"
#include "forecast/models.hpp"
#include "forecast/series_model.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

using namespace wattscope::forecast;

namespace {

void print_table(const char* title, const char* unit, const std::vector<ModelScore>& scores) {
  fmt::print("\n{} — MAE ({}) at h steps ahead | peak-timing error (steps) in an h-step window\n", title, unit);
  fmt::print("{:<16}", "model");
  for (auto h : kEvalHorizons)
    fmt::print(" {:>9}", fmt::format("MAE@{}", h));
  for (auto h : kEvalHorizons)
    if (h > 1) fmt::print(" {:>8}", fmt::format("peak@{}", h));
  fmt::print(" {:>9}\n", "mean MAE");
  for (const auto& s : scores) {
    fmt::print("{:<16}", s.model);
    for (const auto& h : s.by_horizon)
      fmt::print(" {:>9.2f}", h.mae);
    for (const auto& h : s.by_horizon)
      if (h.horizon > 1) fmt::print(" {:>8}", h.peak_n ? fmt::format("{:.1f}", h.peak_error) : std::string("-"));
    fmt::print(" {:>9.2f}\n", s.mean_mae);
  }
}

// ns of CPU per tick for one device: observe one value, forecast 60 steps (what a live per-device forecast does).
double cost_ns(const std::string& model_name) {
  auto m = make_series_model(model_name);
  constexpr int kWarm = 2000, kTicks = 20000;
  double sink = 0;
  auto value = [](int i) { return 50 + 40 * std::sin(i * 0.07) + (i % 7); };
  for (int i = 0; i < kWarm; ++i)
    m->observe(value(i));
  timespec a{}, b{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  for (int i = kWarm; i < kWarm + kTicks; ++i) {
    m->observe(value(i));
    sink += m->forecast(60)[59];
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  if (sink == 1234.5) std::puts(""); // keeps the loop from being optimised away
  return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / kTicks;
}

// record's CPU (user + system) per tick: -1 when it could not be run.
double record_ns_per_tick(const std::string& bin, const std::string& interval, double interval_s, int seconds) {
  // --no-db needs somewhere to write: CSV files in a directory of our own, removed afterwards.
  char tmpl[] = "/tmp/forecast_eval_XXXXXX";
  if (!mkdtemp(tmpl)) return -1;
  const std::string csv_dir = tmpl;
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const std::string dur = fmt::format("{}s", seconds);
    execl(bin.c_str(), bin.c_str(), "-q", "record", "--simulate", "--no-db", "--interval", interval.c_str(),
          "--duration", dur.c_str(), "--csv", csv_dir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  rusage ru{};
  const bool ok = wait4(pid, &status, 0, &ru) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::error_code ec;
  std::filesystem::remove_all(csv_dir, ec);
  if (!ok) return -1;
  const double cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  return cpu_s * 1e9 / (seconds / interval_s);
}

// Holt-Winters' parameters by grid search on the TRAINING traces' utilisation (mean MAE over the horizons): what
// models.hpp's HoltWintersParams defaults are set from (docs/forecasts.md). A trend weight of 0 (no trend: the level
// and the season only) is in the grid: utilisation has no trend to follow (a leak is the OOM forecast's, not this).
int tune_hw(const std::string& traces) {
  const auto train = load_traces(traces, TraceRole::Training);
  double best = 1e300;
  HoltWintersParams best_p;
  for (double a : {0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9})
    for (double b : {0.0, 0.005, 0.01, 0.02, 0.05, 0.1})
      for (double g : {0.05, 0.1, 0.2, 0.3, 0.5, 0.8}) {
        const HoltWintersParams p{a, b, g};
        const auto sc = evaluate_model(
            train, "util", "holt_winters", [&] { return make_holt_winters(p); }, kEvalHorizons);
        if (sc.mean_mae < best) best = sc.mean_mae, best_p = p;
      }
  fmt::print("holt_winters on the training traces: best alpha {} beta {} gamma {} (mean util MAE {:.3f})\n",
             best_p.alpha, best_p.beta, best_p.gamma, best);
  return 0;
}
} // namespace

int main(int argc, char** argv) {
  std::string traces = WATTSCOPE_TRACES_DIR, record_bin;
  int seconds = 20;
  bool tune = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--traces" && i + 1 < argc)
      traces = argv[++i];
    else if (a == "--record" && i + 1 < argc)
      record_bin = argv[++i];
    else if (a == "--tune-hw")
      tune = true;
    else if (a == "--seconds" && i + 1 < argc)
      seconds = std::max(2, std::atoi(argv[++i]));
    else {
      fmt::print(stderr,
                 "usage: forecast_eval [--traces DIR] [--tune-hw] [--record PATH/TO/wattscope] [--seconds N]\n");
      return 2;
    }
  }
  if (tune) return tune_hw(traces);
  Evaluation ev;
  try {
    ev = evaluate_held_out(traces);
  } catch (const std::exception& e) {
    fmt::print(stderr, "forecast_eval: {}\n", e.what());
    return 1;
  }
  fmt::print("training (LSTM weights, Holt-Winters parameters): {}\nvalidation (chooses the default): {}\ntest (scored "
             "once, never chooses): {}\nsimulated (apart): {}\n",
             fmt::join(ev.training, ", "), fmt::join(ev.validation, ", "), fmt::join(ev.test, ", "),
             fmt::join(ev.simulated, ", "));
  print_table("Validation, utilisation", "percentage points", ev.util);
  print_table("Validation, power", "W", ev.power);
  if (!ev.test_util.empty()) {
    print_table("Test, utilisation", "percentage points", ev.test_util);
    print_table("Test, power", "W", ev.test_power);
  }
  if (!ev.simulated_util.empty())
    print_table("Simulated (not used to choose), utilisation", "percentage points", ev.simulated_util);
  fmt::print("\nbest per horizon on validation (utilisation):");
  for (size_t k = 0; k < ev.winner_by_horizon.size(); ++k)
    fmt::print(" h={}: {}", kEvalHorizons[k], ev.winner_by_horizon[k]);
  fmt::print("\nwinner (lowest mean utilisation MAE on the validation traces): {}; default_series_model(): {}{}\n",
             ev.winner, default_series_model(),
             ev.winner == default_series_model() ? "" : "  <-- STALE: make default_series_model() the winner");

  fmt::print("\nCost per device per tick (observe + forecast 60 steps), thread CPU time:\n");
  std::vector<std::pair<std::string, double>> costs;
  for (const auto& m : series_model_names()) {
    costs.emplace_back(m, cost_ns(m));
    fmt::print("  {:<16} {:>9.0f} ns\n", m, costs.back().second);
  }
  if (!record_bin.empty()) {
    constexpr int kDevices = 4; // the simulated scenario's GPUs
    for (auto [label, secs] : {std::pair<const char*, double>{"1s", 1.0}, {"100ms", 0.1}}) {
      const double rec = record_ns_per_tick(record_bin, label, secs, seconds);
      if (rec < 0) {
        fmt::print("  record at {}: could not run '{}'\n", label, record_bin);
        continue;
      }
      fmt::print("\nrecord --simulate ({} GPUs) at {}: {:.0f} us of CPU per tick ({} s)\n", kDevices, label, rec / 1e3,
                 seconds);
      for (const auto& [m, ns] : costs)
        fmt::print("  {:<16} adds {:6.2f} % ({} devices x {:.0f} ns)\n", m, 100.0 * kDevices * ns / rec, kDevices, ns);
    }
  }
  return ev.winner == default_series_model() ? 0 : 3;
}
