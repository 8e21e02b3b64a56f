#include "simulation/scenario.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "core/text.hpp"

namespace wattscope {

namespace scenario_detail { // named: the core is compiled in batches, and simulate.cpp has helpers of its own

using json = nlohmann::json;

[[noreturn]] void scenario_error(const std::string& where, const std::string& what) {
  throw std::invalid_argument(fmt::format("{}: {}", where, what));
}

struct TooDeep {};

// A metric value the library understands (tests/fakes/fake_nvml.cpp): a number, a list of numbers, or one of the
// objects it knows. `labels`: the timeline's segment labels, so a misspelt one is caught here. Recursion (through
// "max") is bounded by parse_scenario_json's depth limit.
void check_value(const json& v, const std::string& where, const std::set<std::string>& labels) {
  if (v.is_number()) return;
  if (v.is_array()) {
    for (const auto& x : v)
      if (!x.is_number()) scenario_error(where, "a list of values must hold numbers only");
    return;
  }
  if (!v.is_object())
    scenario_error(where, "expected a number, a list of numbers or an object such as {\"timeline\": {...}}");
  static const std::set<std::string> forms = {"timeline", "timeline_integral", "linear", "sine", "sine_integral"};
  int n = 0;
  for (const auto& [k, x] : v.items()) {
    if (forms.count(k))
      ++n;
    else if (k != "noise" && k != "max")
      scenario_error(
          where, fmt::format("unknown key '{}' (a value is a number, a list, or one of: timeline, timeline_integral, "
                             "linear, sine, sine_integral; with noise and max)",
                             excerpt(k)));
  }
  if (n != 1)
    scenario_error(where,
                   "a value object needs exactly one of: timeline, timeline_integral, linear, sine, sine_integral");
  for (const char* key : {"timeline", "timeline_integral"}) {
    auto t = v.find(key);
    if (t == v.end()) continue;
    if (!t->is_object()) scenario_error(where + "." + key, "expected an object of segment label -> value");
    if (labels.empty()) scenario_error(where + "." + key, "the scenario has no \"timeline\" with segments to follow");
    for (const auto& [label, x] : t->items()) {
      const std::string w = where + "." + key + "." + excerpt(label);
      if (label != "default" && !labels.count(label))
        scenario_error(w, "no segment of the timeline has this label (labels are set in timeline.segments[].label)");
      if (x.is_number()) continue;
      if (x.is_array() && x.size() == 2 && x[0].is_number() && x[1].is_number()) continue;
      scenario_error(w, "expected a number, or [from, to] for a ramp across the segment");
    }
  }
  if (auto noise = v.find("noise"); noise != v.end()) {
    const bool ok = noise->is_number() ||
                    (noise->is_array() && noise->size() == 2 && (*noise)[0].is_number() && (*noise)[1].is_number());
    if (!ok) scenario_error(where + ".noise", "expected a number (the amplitude) or [amplitude, seed]");
  }
  if (auto cap = v.find("max"); cap != v.end()) check_value(*cap, where + ".max", labels);
  if (auto l = v.find("linear");
      l != v.end() && !(l->is_array() && l->size() == 2 && (*l)[0].is_number() && (*l)[1].is_number()))
    scenario_error(where + ".linear", "expected [a, b] (a + b x call count)");
  for (const char* key : {"sine", "sine_integral"}) {
    auto s = v.find(key);
    if (s == v.end()) continue;
    if (!s->is_object() || !s->contains("base") || !s->contains("amp") || !s->contains("period_s") ||
        !(*s)["base"].is_number() || !(*s)["amp"].is_number() || !(*s)["period_s"].is_number() ||
        !((*s)["period_s"].get<double>() > 0))
      scenario_error(where + "." + key, "expected {\"base\": N, \"amp\": N, \"period_s\": N > 0}");
  }
}

// A device's name, UUID or PCI bus id: printable, and short enough for NVML's buffers (96, 96 and 32 bytes with
// their terminating zero), so that it reaches the stores and terminals as the scenario wrote it.
void check_text(const json& d, const char* key, size_t max_bytes, const std::string& where) {
  auto it = d.find(key);
  if (it == d.end()) return;
  if (!it->is_string()) scenario_error(where + "." + key, "expected a string");
  try {
    validate_printable_text(key, it->get_ref<const std::string&>(), max_bytes);
  } catch (const std::invalid_argument& e) {
    scenario_error(where + "." + key, e.what());
  }
}

// The simulated library's other knobs (tests/fakes/fake_nvml.cpp's header): it reads them as it needs them, where a
// wrong type throws inside NVML's calls (a crash) and an unbounded hang or cost stalls the run. Checked here once.
bool is_int(const json& v) {
  return v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
}
bool is_uint(const json& v) {
  return v.is_number_unsigned() && v.get<uint64_t>() <= UINT32_MAX;
}

void check_hang(const json& h, const std::string& where) {
  const bool list = h.is_array();
  if (list && h.size() > 1000) scenario_error(where, "at most 1000 hangs");
  for (size_t i = 0; i < (list ? h.size() : 1); ++i) {
    const json& e = list ? h[i] : h;
    const std::string w = list ? fmt::format("{}[{}]", where, i) : where;
    // A minute at most: a hung driver call holds its sampling thread, and a run's end waits for it.
    if (!e.is_object() || !e.contains("at_tick") || !is_int(e["at_tick"]) ||
        (e.contains("ms") && !(e["ms"].is_number_unsigned() && e["ms"].get<uint64_t>() <= 60'000)))
      scenario_error(w, "expected {\"at_tick\": N, \"ms\": 0 to 60000}");
  }
}

void check_cost(const json& c, const std::string& where) {
  auto us = [](const json& v) { return v.is_number() && v.get<double>() >= 0 && v.get<double>() <= 1e6; };
  if (us(c)) return;
  bool ok = c.is_object();
  if (ok)
    for (const auto& [k, v] : c.items())
      ok = ok && ((k == "cpu" || k == "sleep") ? us(v) : k == "from_s" && v.is_number() && v.get<double>() >= 0);
  if (!ok) scenario_error(where, "expected microseconds, 0 to 1e6, or {\"cpu\": US, \"sleep\": US, \"from_s\": S}");
}

void check_strings(const json& v, const std::string& where) {
  if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); }))
    scenario_error(where, "expected a list of names");
}

void check_processes(const json& d, const std::string& w, const std::set<std::string>& labels) {
  auto procs = d.find("processes");
  if (procs == d.end()) return;
  if (!procs->is_array() || procs->size() > 1000) scenario_error(w + ".processes", "expected a list of at most 1000");
  for (size_t k = 0; k < procs->size(); ++k) {
    const json& p = (*procs)[k];
    const std::string pw = fmt::format("{}.processes[{}]", w, k);
    if (!p.is_object()) scenario_error(pw, "expected an object");
    // A pid file is wattscope's own (for "pid": "command"), in a private directory: one named in a scenario could
    // be a FIFO the library would block on.
    if (p.contains("pid_file")) scenario_error(pw + ".pid_file", "not for a scenario; use \"pid\"");
    auto pid = p.find("pid");
    if (pid == p.end() || !((pid->is_string() && *pid == "command") || is_uint(*pid)))
      scenario_error(pw + ".pid", "expected \"command\" (the command `run` wraps) or a process id");
    if (auto t = p.find("type"); t != p.end() && !(t->is_string() && (*t == "compute" || *t == "graphics")))
      scenario_error(pw + ".type", "expected \"compute\" or \"graphics\"");
    for (const char* key : {"mem_bytes", "sm", "mem", "enc", "dec"})
      if (auto v = p.find(key); v != p.end()) check_value(*v, pw + "." + key, labels);
  }
}

void check_device_knobs(const json& d, const std::string& w, const std::set<std::string>& labels) {
  for (const char* key : {"max_clock_sm_mhz", "max_clock_mem_mhz", "max_clock_gfx_mhz", "mig_mode"})
    if (d.contains(key) && !is_uint(d[key])) scenario_error(w + "." + key, "expected a whole number");
  if (d.contains("lost_at_tick") && !(d["lost_at_tick"].is_number_unsigned() && is_int(d["lost_at_tick"])))
    scenario_error(w + ".lost_at_tick", "expected a whole number");
  if (d.contains("unsupported")) check_strings(d["unsupported"], w + ".unsupported");
  if (d.contains("process_utilization") && !d["process_utilization"].is_boolean())
    scenario_error(w + ".process_utilization", "expected true or false");
  if (d.contains("hang")) check_hang(d["hang"], w + ".hang");
  if (auto errs = d.find("errors"); errs != d.end()) {
    if (!errs->is_object()) scenario_error(w + ".errors", "expected an object of metric -> {\"code\", \"ticks\"}");
    for (const auto& [metric, e] : errs->items()) {
      const std::string ew = w + ".errors." + excerpt(metric);
      bool ok = e.is_object() && (!e.contains("code") || is_int(e["code"])) &&
                (!e.contains("from_tick") || is_int(e["from_tick"]));
      if (ok && e.contains("ticks"))
        ok = e["ticks"].is_array() && std::all_of(e["ticks"].begin(), e["ticks"].end(), is_int);
      if (!ok) scenario_error(ew, "expected {\"code\": N, \"ticks\": [N, ...], \"from_tick\": N}");
    }
  }
  if (auto xid = d.find("xid"); xid != d.end()) {
    if (!xid->is_array()) scenario_error(w + ".xid", "expected a list of {\"after_s\", \"xid\"}");
    for (size_t i = 0; i < xid->size(); ++i) {
      const json& x = (*xid)[i];
      bool ok = x.is_object() && (!x.contains("after_s") || (x["after_s"].is_number() && x["after_s"] >= 0));
      for (const char* key : {"xid", "gpu_instance", "compute_instance"})
        ok = ok && (!x.contains(key) || is_uint(x[key]));
      if (!ok)
        scenario_error(fmt::format("{}.xid[{}]", w, i),
                       "expected {\"after_s\": S, \"xid\": N, \"gpu_instance\": N, \"compute_instance\": N}");
    }
  }
  if (auto mig = d.find("mig"); mig != d.end()) {
    if (!mig->is_array() || mig->size() > 7) scenario_error(w + ".mig", "expected a list of at most 7 MIG instances");
    for (size_t i = 0; i < mig->size(); ++i) {
      const json& m = (*mig)[i];
      const std::string mw = fmt::format("{}.mig[{}]", w, i);
      if (m.is_string()) {
        check_text(json{{"uuid", m}}, "uuid", 95, mw);
        continue;
      }
      if (!m.is_object() || !m.contains("uuid")) scenario_error(mw, "expected a UUID or {\"uuid\": \"MIG-...\", ...}");
      check_text(m, "uuid", 95, mw);
      for (const char* key : {"gpu_instance", "compute_instance"})
        if (m.contains(key) && !is_uint(m[key])) scenario_error(mw + "." + key, "expected a whole number");
      if (auto metrics = m.find("metrics"); metrics != m.end()) {
        if (!metrics->is_object()) scenario_error(mw + ".metrics", "expected an object of metric -> value");
        for (const auto& [name, v] : metrics->items())
          check_value(v, mw + ".metrics." + excerpt(name), labels);
      }
      check_processes(m, mw, labels);
    }
  }
}

} // namespace scenario_detail

nlohmann::json parse_scenario_json(std::string_view text) {
  using namespace scenario_detail;
  using json = nlohmann::json;
  if (text.size() > kMaxScenarioBytes)
    throw std::invalid_argument(
        fmt::format("{} bytes is too big for a scenario (at most {} bytes)", text.size(), kMaxScenarioBytes));
  // The parser builds its document without recursion, but everything after it (the checks, dump(), the library's
  // evaluator, the destructor) walks it recursively: a deep document is refused as it is read.
  const json::parser_callback_t limit = [](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        static_cast<size_t>(depth) >= kMaxScenarioDepth)
      throw TooDeep{};
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limit);
  } catch (const json::exception& e) { // a syntax error, or a number past a double's range (out_of_range)
    throw std::invalid_argument(fmt::format("not valid JSON: {}", e.what()));
  } catch (const TooDeep&) {
    throw std::invalid_argument(
        fmt::format("objects and lists nested deeper than {} levels; a scenario needs about 6", kMaxScenarioDepth));
  }
}

void check_scenario(const nlohmann::json& sc) {
  using namespace scenario_detail;
  using json = nlohmann::json;
  if (!sc.is_object()) scenario_error("the scenario", "expected a JSON object with \"devices\"");
  std::set<std::string> labels;
  if (auto tl = sc.find("timeline"); tl != sc.end()) {
    if (!tl->is_object()) scenario_error("timeline", "expected an object with \"segments\"");
    auto segs = tl->find("segments");
    if (segs == tl->end() || !segs->is_array() || segs->empty())
      scenario_error("timeline.segments", "expected a non-empty list of {\"label\": NAME, \"s\": SECONDS}");
    if (segs->size() > kMaxScenarioSegments)
      scenario_error("timeline.segments", fmt::format("{} segments; at most {}", segs->size(), kMaxScenarioSegments));
    for (size_t i = 0; i < segs->size(); ++i) {
      const json& s = (*segs)[i];
      const std::string w = fmt::format("timeline.segments[{}]", i);
      if (!s.is_object() || !s.contains("label") || !s["label"].is_string() || !s.contains("s") ||
          !s["s"].is_number() || !(s["s"].get<double>() > 0) || !(s["s"].get<double>() < 1e6))
        scenario_error(w, "expected {\"label\": NAME, \"s\": SECONDS > 0}");
      // A rate past 1e12 units a second is no workload; the cap keeps every sum of work finite.
      if (auto wk = s.find("work_per_s");
          wk != s.end() && !(wk->is_number() && wk->get<double>() >= 0 && wk->get<double>() <= 1e12))
        scenario_error(w + ".work_per_s", "expected a number of work units per second, 0 to 1e12");
      labels.insert(s["label"].get<std::string>());
    }
    if (auto lf = tl->find("loop_from");
        lf != tl->end() && !(lf->is_number_integer() && lf->get<int64_t>() >= 0 && lf->get<size_t>() < segs->size()))
      scenario_error("timeline.loop_from", fmt::format("expected the index of a segment, 0 to {}", segs->size() - 1));
    if (auto l = tl->find("loop"); l != tl->end() && !l->is_boolean())
      scenario_error("timeline.loop", "expected true or false");
    if (auto u = tl->find("work_unit"); u != tl->end()) {
      if (!u->is_string()) scenario_error("timeline.work_unit", "expected a unit name such as samples or tokens");
      try {
        validate_printable_text("work unit", u->get<std::string>(), kMaxWorkUnitBytes);
      } catch (const std::exception& e) {
        scenario_error("timeline.work_unit", e.what());
      }
    }
    const auto phases = tl->value("phases", json::array());
    if (!phases.is_array()) scenario_error("timeline.phases", "expected a list of {\"name\", \"from_s\", \"to_s\"}");
    if (phases.size() > kMaxScenarioPhases)
      scenario_error("timeline.phases", fmt::format("{} phases; at most {}", phases.size(), kMaxScenarioPhases));
    for (size_t i = 0; i < phases.size(); ++i) {
      const json& p = phases[i];
      const std::string w = fmt::format("timeline.phases[{}]", i);
      if (!p.is_object() || !p.contains("name") || !p["name"].is_string() || !p.contains("from_s") ||
          !p["from_s"].is_number() || !p.contains("to_s") || !p["to_s"].is_number() ||
          !(p["to_s"].get<double>() > p["from_s"].get<double>()) || p["from_s"].get<double>() < 0 ||
          !(p["to_s"].get<double>() < 1e12))
        scenario_error(w, "expected {\"name\": NAME, \"from_s\": S, \"to_s\": S later than from_s}");
      if (auto ix = p.find("index"); ix != p.end() && !(ix->is_number_integer() && ix->get<int64_t>() >= 0 &&
                                                        ix->get<int64_t>() < (int64_t{1} << 40)))
        scenario_error(w + ".index", "expected an integer, 0 to 2^40");
      try {
        validate_printable_text("phase name", p["name"].get<std::string>(), kMaxPhaseNameBytes);
      } catch (const std::exception& e) {
        scenario_error(w + ".name", e.what());
      }
    }
  }
  for (auto [key, max_bytes] :
       {std::pair{"description", 4096}, std::pair{"driver_version", 79}, std::pair{"nvml_version", 79}})
    if (auto v = sc.find(key); v != sc.end()) {
      if (!v->is_string()) scenario_error(key, "expected a string");
      try {
        validate_printable_text(key, v->get_ref<const std::string&>(), static_cast<size_t>(max_bytes));
      } catch (const std::invalid_argument& e) {
        scenario_error(key, e.what());
      }
    }
  for (const char* key : {"init_error", "event_wait_error"})
    if (sc.contains(key) && !is_int(sc[key])) scenario_error(key, "expected an NVML return code (a whole number)");
  if (sc.contains("reject_versions")) check_strings(sc["reject_versions"], "reject_versions");
  if (sc.contains("hang")) check_hang(sc["hang"], "hang");
  if (auto cost = sc.find("call_cost_us"); cost != sc.end()) {
    if (cost->is_object() && !cost->contains("cpu") && !cost->contains("sleep") && !cost->contains("from_s")) {
      for (const auto& [symbol, c] : cost->items())
        check_cost(c, "call_cost_us." + excerpt(symbol));
    } else {
      check_cost(*cost, "call_cost_us");
    }
  }
  auto devs = sc.find("devices");
  if (devs == sc.end() || !devs->is_array() || devs->empty())
    scenario_error("devices", "expected a non-empty list of simulated GPUs");
  if (devs->size() > kMaxSimulatedGpus)
    scenario_error("devices", fmt::format("at most {} simulated GPUs", kMaxSimulatedGpus));
  // NVML names a GPU by its UUID and wattscope claims it by PCI bus id: two devices with one of them would be
  // recorded as one GPU (their samples mixed, their energy counted twice).
  std::map<std::string, size_t> uuids, bus_ids;
  for (size_t i = 0; i < devs->size(); ++i) {
    const json& d = (*devs)[i];
    const std::string w = fmt::format("devices[{}]", i);
    if (!d.is_object()) scenario_error(w, "expected an object with \"name\", \"uuid\" and \"metrics\"");
    check_text(d, "name", 95, w);
    check_text(d, "uuid", 95, w);
    check_text(d, "pci_bus_id", 31, w);
    if (!d.contains("name") || !d.contains("uuid"))
      scenario_error(w, "a simulated GPU needs a \"name\" and a \"uuid\"");
    auto metrics = d.find("metrics");
    if (metrics == d.end() || !metrics->is_object() || metrics->empty())
      scenario_error(w + ".metrics", "expected an object of metric -> value, e.g. {\"power_mw\": 250000}");
    for (const auto& [name, v] : metrics->items())
      check_value(v, w + ".metrics." + excerpt(name), labels);
    check_processes(d, w, labels);
    check_device_knobs(d, w, labels);
    for (auto [key, seen] : {std::pair{"uuid", &uuids}, std::pair{"pci_bus_id", &bus_ids}}) {
      if (!d.contains(key)) continue;
      const auto& value = d[key].get_ref<const std::string&>();
      if (auto [at, fresh] = seen->emplace(value, i); !fresh)
        scenario_error(w + "." + key, fmt::format("'{}' is also devices[{}].{}; each simulated GPU needs its own",
                                                  excerpt(value), at->second, key));
    }
  }
}

ScenarioTimeline::ScenarioTimeline(const nlohmann::json& sc) {
  using json = nlohmann::json;
  auto tl = sc.find("timeline");
  if (tl == sc.end()) return;
  const auto& segs = (*tl)["segments"];
  unit_ = tl->value("work_unit", std::string("samples"));
  const size_t loop_from = tl->value("loop_from", size_t{0});
  double t = 0, loop_start = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    if (i == loop_from) loop_start = t;
    const double len = segs[i]["s"].get<double>();
    const double rate = segs[i].value("work_per_s", 0.0);
    segments_.push_back({t, len, rate, works_});
    // A work marker every half second of the segment (the last one for what is left): at 0, 0.5, ... < len.
    if (rate > 0 && len - 1e-9 > 0) works_ += static_cast<size_t>(std::ceil(2 * (len - 1e-9)));
    t += len;
  }
  std::map<std::string, int64_t> max_index;
  for (const auto& p : tl->value("phases", json::array())) {
    Marker b;
    b.kind = Marker::Kind::Begin;
    b.name = p["name"].get<std::string>();
    if (p.contains("index")) b.index = p["index"].get<int64_t>();
    if (b.index && p["from_s"].get<double>() >= loop_start) max_index[b.name] = std::max(max_index[b.name], *b.index);
    Marker e;
    e.kind = Marker::Kind::End;
    e.name = b.name;
    first_.phases.push_back({p["from_s"].get<double>(), std::move(b)});
    first_.phases.push_back({p["to_s"].get<double>(), std::move(e)});
  }
  // In time order; at one instant, work and ends before begins, so consecutive phases do not nest (the work markers
  // at an instant come first: see in_pass).
  auto rank = [](const Timed& x) { return x.m.kind == Marker::Kind::Begin ? 1 : 0; };
  std::stable_sort(first_.phases.begin(), first_.phases.end(),
                   [&](const Timed& a, const Timed& b) { return a.t_s != b.t_s ? a.t_s < b.t_s : rank(a) < rank(b); });
  first_.work_end = works_;
  if (tl->value("loop", true) && t > loop_start) {
    loop_span_s_ = t - loop_start;
    // What repeats: everything from the loop's start on, and a phase that begins exactly there.
    auto repeats = [&](const Timed& x) {
      return x.t_s >= loop_start + 1e-9 || (x.t_s >= loop_start && x.m.kind == Marker::Kind::Begin);
    };
    for (const auto& x : first_.phases)
      if (repeats(x)) repeated_.phases.push_back(x);
    repeated_.work_begin = works_before(loop_start + 1e-9);
    repeated_.work_end = works_;
    for (const auto& [name, step] : max_index)
      index_step_.emplace_back(name, step);
    if (repeated_.size() == 0) loop_span_s_ = 0;
  }
}

double ScenarioTimeline::work_time(size_t w) const {
  const auto s = std::prev(std::upper_bound(segments_.begin(), segments_.end(), w,
                                            [](size_t x, const Segment& g) { return x < g.first_work; }));
  const double at = 0.5 * static_cast<double>(w - s->first_work);
  return s->start_s + std::min(at + 0.5, s->len_s);
}

Marker ScenarioTimeline::work_marker(size_t w) const {
  const auto s = std::prev(std::upper_bound(segments_.begin(), segments_.end(), w,
                                            [](size_t x, const Segment& g) { return x < g.first_work; }));
  const double at = 0.5 * static_cast<double>(w - s->first_work);
  Marker m;
  m.kind = Marker::Kind::Work;
  m.amount = s->rate * std::min(0.5, s->len_s - at);
  m.unit = unit_;
  return m;
}

// Work markers' times never go back (segments follow one another), so a count is a binary search.
size_t ScenarioTimeline::works_until(double t_s) const {
  size_t lo = 0, hi = works_;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (work_time(mid) <= t_s)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

size_t ScenarioTimeline::works_before(double t_s) const {
  size_t lo = 0, hi = works_;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (work_time(mid) < t_s)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

std::optional<std::pair<double, Marker>> ScenarioTimeline::in_pass(const Pass& p, size_t n) const {
  // The pass in order is its phase markers with its work markers merged in, work first at one instant: phase
  // marker j stands at j + (work markers at or before its time). The first one at or past n says what n is.
  auto position = [&](size_t j) {
    const size_t w = std::clamp(works_until(p.phases[j].t_s), p.work_begin, p.work_end);
    return j + (w - p.work_begin);
  };
  size_t lo = 0, hi = p.phases.size();
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (position(mid) < n)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < p.phases.size() && position(lo) == n) return std::make_pair(p.phases[lo].t_s, p.phases[lo].m);
  const size_t w = p.work_begin + (n - lo);
  return std::make_pair(work_time(w), work_marker(w));
}

std::optional<std::pair<double, Marker>> ScenarioTimeline::marker(size_t n) const {
  if (n < first_.size()) return in_pass(first_, n);
  if (loop_span_s_ <= 0) return std::nullopt;
  const size_t k = n - first_.size();
  const size_t wraps = k / repeated_.size() + 1;
  auto x = in_pass(repeated_, k % repeated_.size());
  Marker& m = x->second;
  if (m.index)
    for (const auto& [name, step] : index_step_)
      if (name == m.name) *m.index += static_cast<int64_t>(wraps) * step;
  x->first += static_cast<double>(wraps) * loop_span_s_;
  return x;
}

} // namespace wattscope
