// wattscope compare A B: are the differences between two runs, or two tasks' repeated runs, larger than run-to-run
// noise? Welch's t-test (unequal variances) on each figure both sides have: energy, duration, each phase kind (per
// instance) and J per unit of each kind of work, said in words and in --json. Energies measured by different
// methods, or on different devices, are not compared unless --force (issue 29).
#include <cmath>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "runs/run_stats.hpp"
#include "runs/run_tags.hpp"
#include "runs/run_view.hpp"

namespace wattscope {

namespace {

constexpr double kAlpha = 0.05;

struct Side {
  std::string label; // "task bert (5 runs)" / "run 2026..."
  std::string name;
  bool is_task = false;
  std::vector<RunInfo> runs;
  std::vector<Figures> figs;
  std::vector<FigureNotes> notes;
  std::vector<MetricStats> stats;
  std::vector<MeasuredRun> measured; // temperatures and warm-up, for the warnings
  const MetricStats* find(const std::string& figure) const {
    for (const auto& m : stats)
      if (m.name == figure) return &m;
    return nullptr;
  }
  std::vector<double> values(const std::string& figure) const {
    const MetricStats* m = find(figure);
    return m ? m->values : std::vector<double>();
  }
  // The energy methods of its runs that measured energy: "counter on gpu0, gpu1", one entry per distinct one.
  std::vector<std::string> methods() const {
    std::vector<std::string> out;
    for (const auto& n : notes) {
      if (n.run_energy.devices.empty()) continue;
      std::string devices;
      for (const auto& [device, method] : n.run_energy.devices)
        devices += (devices.empty() ? "" : ", ") + device;
      std::string one = fmt::format("{} on {}", n.run_method, devices);
      if (std::find(out.begin(), out.end(), one) == out.end()) out.push_back(std::move(one));
    }
    return out;
  }
};

// The figures a comparison tests: the run's energy and duration first, then per phase kind and per kind of work, in
// A's order. Device figures and counts are left to `stats`.
bool tested(const std::string& name) {
  if (name == "energy_j" || name == "duration_s" || name == "carbon_g" || name == "cost") return true;
  if (name.starts_with("phase."))
    return (name.ends_with(".energy_j") || name.ends_with(".duration_s")) && !name.ends_with("run_total_energy_j") &&
           !name.ends_with("run_total_duration_s");
  return name.starts_with("work.") && (name.ends_with("energy_per_unit_j") || name.ends_with("throughput_per_s"));
}

// "counter" when both sides say so, else "simulated vs estimated" (first side's first).
std::string both_methods(const std::string& first, const std::string& second) {
  return first == second ? first : first + " vs " + second;
}

std::string joined(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v)
    out += (out.empty() ? "" : sep) + s;
  return out;
}

struct Verdict {
  SampleSummary sa, sb;
  std::optional<WelchTest> welch;
  double diff = 0, pct = 0;
  std::string method_a, method_b;
  std::optional<bool> significant;
  std::string sentence;
};

struct FigureTest {
  std::string figure;
  const MetricStats *a, *b;
  std::optional<WelchTest> welch;
  std::optional<bool> significant;
};

struct Groups {
  std::vector<std::string> larger, within, untold, left_out;
};

// The energy verdict: B against A, per run, with the test that decides whether it is more than noise.
Verdict energy_verdict_of(const Side& a, const Side& b, const std::vector<double>& ea, const std::vector<double>& eb,
                          const std::vector<std::string>& ma, const std::vector<std::string>& mb, bool differ) {
  Verdict v;
  v.sa = summarize_nonnegative(ea);
  v.sb = summarize_nonnegative(eb);
  const SampleSummary &sa = v.sa, &sb = v.sb;
  v.welch = welch_t_test(ea, eb);
  const auto& welch = v.welch;
  v.diff = sb.mean - sa.mean;
  const double diff = v.diff;
  v.pct = sa.mean != 0 ? 100.0 * diff / sa.mean : 0;
  const double pct = v.pct;
  v.method_a = a.find("energy_j")->method;
  v.method_b = b.find("energy_j")->method;
  const std::string &method_a = v.method_a, &method_b = v.method_b;
  std::string verdict;
  std::optional<bool>& significant = v.significant;
  if (welch) {
    significant = welch->p < kAlpha;
    verdict = *significant
                  ? fmt::format("the difference is larger than run-to-run noise (Welch's t = {:.3g}, df = {:.3g}, "
                                "p = {:.3g} < {})",
                                welch->t, welch->df, welch->p, kAlpha)
                  : fmt::format("the difference is within run-to-run noise (Welch's t = {:.3g}, df = {:.3g}, "
                                "p = {:.3g} >= {}): more runs may tell them apart",
                                welch->t, welch->df, welch->p, kAlpha);
  } else {
    verdict = fmt::format("cannot tell whether it is larger than run-to-run noise: each side needs at least 2 runs "
                          "with energy ({} has {}, {} has {})",
                          a.name, ea.size(), b.name, eb.size());
  }
  const std::string direction =
      diff == 0 ? "the same energy as"
                : fmt::format("{:.3g} % {} energy than", std::fabs(pct), diff > 0 ? "more" : "less");
  auto left = [](const Side& s, const std::vector<double>& e) {
    std::vector<std::string> why;
    for (const auto& [reason, count] : s.find("energy_j")->left_out)
      why.push_back(reason);
    return e.size() == s.runs.size() ? std::string()
                                     : fmt::format("; {} of the {} runs of {} left out: {}", s.runs.size() - e.size(),
                                                   s.runs.size(), s.name, joined(why, ", "));
  };
  std::string& sentence = v.sentence;
  sentence = fmt::format("{} uses {} {} ({:.6g} J vs {:.6g} J per run [{}], over {} and {} run{}{}{}); {}.", b.label,
                         direction, a.label, sb.mean, sa.mean, both_methods(method_b, method_a), eb.size(), ea.size(),
                         ea.size() == 1 ? "" : "s", left(b, eb), left(a, ea), verdict);
  if (differ)
    sentence += fmt::format(" Forced: the two sides' energies were measured differently ({} vs {}).", joined(mb, " / "),
                            joined(ma, " / "));

  return v;
}

// Every figure both sides have, each tested on its own.
std::vector<FigureTest> figure_tests(const Side& a, const Side& b) {
  // Every figure both sides have.
  std::vector<FigureTest> tests;
  for (const auto& m : a.stats) {
    if (!tested(m.name)) continue;
    const MetricStats* other = b.find(m.name);
    if (!other) continue;
    FigureTest t{m.name, &m, other, welch_t_test(m.values, other->values), std::nullopt};
    if (t.welch) t.significant = t.welch->p < kAlpha;
    tests.push_back(std::move(t));
  }
  return tests;
}

// The tested figures by what the test said, and the figures runs lacked.
Groups groups_of(const std::vector<FigureTest>& tests, const Side& a, const Side& b) {
  Groups g;
  for (const auto& t : tests)
    (t.significant ? (*t.significant ? g.larger : g.within) : g.untold).push_back(t.figure);
  for (const Side* s : {&a, &b})
    for (const auto& m : s->stats)
      if (tested(m.name) && !m.left_out.empty())
        g.left_out.push_back(fmt::format("{} {}: {} ({})", s == &a ? "A" : "B", s->name, m.name, left_out_text(m)));

  return g;
}

nlohmann::json comparison_json(const Side& a, const Side& b, const std::vector<double>& ea,
                               const std::vector<double>& eb, const Verdict& v, const std::vector<FigureTest>& tests,
                               const Groups& g, bool differ, bool force) {
  const SampleSummary &sa = v.sa, &sb = v.sb;
  const auto& welch = v.welch;
  auto opt = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  auto welch_json = [&](const std::optional<WelchTest>& w) {
    return w ? nlohmann::json{{"t", opt(w->t)}, {"df", w->df}, {"p", w->p}} : nlohmann::json();
  };
  auto side_json = [&](const Side& s, const SampleSummary& sum, const std::vector<double>& energy) {
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& r : s.runs)
      runs.push_back(r.run_id);
    nlohmann::json j{{"name", s.name},
                     {"kind", s.is_task ? "task" : "run"},
                     {"runs", runs},
                     {"runs_with_energy", energy.size()},
                     {"energy_method", s.find("energy_j")->method},
                     {"energy_methods", s.methods()},
                     {"energy_j", summary_json(sum)},
                     {"energy_j_values", energy},
                     {"duration_s", summary_json(summarize_nonnegative(s.values("duration_s")))}};
    j["energy_j"]["left_out_why"] = metric_json(*s.find("energy_j"))["left_out_why"];
    return j;
  };
  nlohmann::json tj = nlohmann::json::array();
  for (const auto& t : tests) {
    const double d = t.b->summary.mean - t.a->summary.mean;
    tj.push_back(
        {{"figure", t.figure},
         {"energy_method", t.a->method.empty() && t.b->method.empty()
                               ? nlohmann::json()
                               : nlohmann::json(both_methods(t.a->method, t.b->method))},
         {"a", metric_json(*t.a)},
         {"b", metric_json(*t.b)},
         {"difference", d},
         {"difference_pct", t.a->summary.mean != 0 ? nlohmann::json(100 * d / t.a->summary.mean) : nlohmann::json()},
         {"welch", welch_json(t.welch)},
         {"significant", t.significant ? nlohmann::json(*t.significant) : nlohmann::json()}});
  }
  nlohmann::json j = {{"a", side_json(a, sa, ea)},
                      {"b", side_json(b, sb, eb)},
                      {"metric", "energy_j"},
                      {"energy_method", both_methods(v.method_a, v.method_b)},
                      {"methods_differ", differ},
                      {"forced", differ && force},
                      {"difference_j", v.diff},
                      {"difference_pct", sa.mean != 0 ? nlohmann::json(v.pct) : nlohmann::json()},
                      {"alpha", kAlpha},
                      {"significant", v.significant ? nlohmann::json(*v.significant) : nlohmann::json()},
                      {"verdict", v.sentence},
                      {"tests", tj},
                      {"larger_than_noise", g.larger},
                      {"within_noise", g.within},
                      {"too_few_runs", g.untold}};
  j["welch"] = welch_json(welch);
  j["warnings"] = measurement_warnings(a.measured, b.measured);
  return j;
}

void print_comparison(const Verdict& v, const std::vector<FigureTest>& tests, const Groups& g, const Side& a,
                      const Side& b) {
  std::cout << v.sentence << "\n";
  for (const auto& w : measurement_warnings(a.measured, b.measured))
    std::cout << "WARNING: " << w["text"].get<std::string>() << ".\n";
  std::cout << fmt::format("{:<36} {:>20} {:>20} {:>10} {:>9}  {}\n", "FIGURE", "A MEAN (N)", "B MEAN (N)", "B VS A",
                           "P", "VERDICT");
  for (const auto& t : tests) {
    const std::string name = t.figure.size() > 36 ? t.figure.substr(0, 35) + "…" : t.figure;
    const double d = t.b->summary.mean - t.a->summary.mean;
    const std::string rel =
        t.a->summary.mean != 0 ? fmt::format("{:+.3g} %", 100 * d / t.a->summary.mean) : fmt::format("{:+.4g}", d);
    const std::string method = both_methods(t.a->method, t.b->method);
    std::cout << fmt::format("{:<36} {:>20} {:>20} {:>10} {:>9}  {}{}\n", name,
                             fmt::format("{:.5g} ({})", t.a->summary.mean, t.a->summary.n),
                             fmt::format("{:.5g} ({})", t.b->summary.mean, t.b->summary.n), rel,
                             t.welch ? fmt::format("{:.3g}", t.welch->p) : "-",
                             !t.significant   ? "needs 2 runs a side"
                             : *t.significant ? "LARGER than noise"
                                              : "within noise",
                             method.empty() ? "" : " [" + method + "]");
  }
  std::cout << fmt::format("Larger than run-to-run noise (Welch's t-test, p < {}): {}.\n", kAlpha,
                           g.larger.empty() ? "none" : joined(g.larger, ", "));
  if (!g.within.empty()) std::cout << "Within noise: " << joined(g.within, ", ") << ".\n";
  if (!g.untold.empty()) std::cout << "Too few runs to tell: " << joined(g.untold, ", ") << ".\n";
  if (!g.left_out.empty()) std::cout << "Left out (runs without the figure): " << joined(g.left_out, "; ") << ".\n";
}

class CompareCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    add_read_options(sub, flags_);
    add_footprint_read_options(sub, footprint_);
    sub.add_option("a", a_, "A task name (its finished runs) or a run id")->required();
    sub.add_option("b", b_, "A task name (its finished runs) or a run id")->required();
    sub.add_option("--last,-n", last_, "Only the latest N runs of each task");
    sub.add_option("--tag", tags_, "Only the runs of each task with this tag, KEY=VALUE (repeatable)");
    sub.add_flag("--force", force_,
                 "Compare even when the two sides' energies were measured by different methods (counter, integrated, "
                 "estimated, simulated) or on different devices");
    sub.footer("Examples:\n  wattscope compare bert-lr3e-4 bert-lr1e-3 --last 5\n  wattscope compare 20261121-1203 "
               "20261121-1210\nA name that is a task compares its runs; otherwise it is a run id (or prefix). Each "
               "side needs\nat least 2 runs for the test; with fewer, the difference is shown without a verdict. "
               "Each figure counts\nonly the runs that have it. Runs whose energy was measured differently (a "
               "simulated GPU against a\nCPU estimate, 2 GPUs against 1) are refused, exit status 2, unless --force.");
  }

  int run(CLI::App& sub, const CliContext&) override {
    if (sub.count("--last") && last_ == 0) throw UsageError("--last must be at least 1");
    const auto filters = flag_value("", [&] { return parse_tag_filters(tags_); });
    rates_ = footprint_for_reading(footprint_);
    auto store = reader_for(flags_);
    const auto last = sub.count("--last") ? std::optional<size_t>(last_) : std::nullopt;
    Side a = side(*store, a_, filters, last), b = side(*store, b_, filters, last);
    const auto ea = a.values("energy_j"), eb = b.values("energy_j");
    if (ea.empty() || eb.empty())
      throw std::runtime_error(
          fmt::format("{} has no energy figure to compare (nothing measured energy)", ea.empty() ? a.label : b.label));

    // issue 29: a difference between a simulated GPU and a CPU estimate is one of method, not of the work.
    const auto ma = a.methods(), mb = b.methods();
    const bool differ = ma.size() > 1 || mb.size() > 1 || ma != mb;
    if (differ && !force_) {
      std::fprintf(stderr,
                   "wattscope: error: will not compare energies measured differently: %s: %s; %s: %s. A difference "
                   "between them would be one of method or devices, not of the work. Compare runs measured the same "
                   "way, or give --force to compare them anyway.\n",
                   a.label.c_str(), joined(ma, " / ").c_str(), b.label.c_str(), joined(mb, " / ").c_str());
      return kUsageError;
    }

    const Verdict v = energy_verdict_of(a, b, ea, eb, ma, mb, differ);
    const std::vector<FigureTest> tests = figure_tests(a, b);
    const Groups g = groups_of(tests, a, b);
    if (flags_.json)
      std::cout << comparison_json(a, b, ea, eb, v, tests, g, differ, force_).dump(2) << "\n";
    else
      print_comparison(v, tests, g, a, b);
    return 0;
  }

private:
  Side side(StoreReader& store, const std::string& name, const std::vector<TagFilter>& filters,
            std::optional<size_t> last) {
    Side s;
    s.name = name;
    bool task = false;
    for (const auto& r : store.runs())
      if (r.task == name) task = true;
    if (task) {
      s.is_task = true;
      s.runs = selected_runs(store, RunSelection{name, filters}, last);
      s.label = fmt::format("task {} ({} run{})", name, s.runs.size(), s.runs.size() == 1 ? "" : "s");
    } else {
      s.runs = {resolve_run(store, name)};
      s.label = "run " + s.runs[0].run_id;
    }
    s.notes.resize(s.runs.size());
    for (size_t i = 0; i < s.runs.size(); ++i) {
      RunQuality q;
      s.figs.push_back(run_figures(store, s.runs[i], &s.notes[i], &q, rates_));
      s.measured.push_back({s.runs[i].run_id, q, s.runs[i].duration_s()});
    }
    s.stats = figure_stats(s.figs, s.notes);
    return s;
  }

  ReadFlags flags_;
  std::string a_, b_;
  size_t last_ = 0;
  std::vector<std::string> tags_;
  bool force_ = false;
  FootprintOptions footprint_;
  FootprintOverride rates_;
};

} // namespace

std::unique_ptr<Command> make_compare_command() {
  return std::make_unique<CompareCommand>();
}

} // namespace wattscope
