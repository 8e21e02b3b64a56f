#include "pipeline/simulate.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "core/text.hpp"

// Embedded at build time (generated/simulate.S): the simulated libnvidia-ml and the built-in scenario.
extern "C" {
extern const char wattscope_sim_nvml_begin[];
extern const char wattscope_sim_nvml_end[];
extern const char wattscope_sim_training_begin[];
extern const char wattscope_sim_training_end[];
}

namespace wattscope {

namespace {

using json = nlohmann::json;

// Scenario files are small; a bigger one is a mistake (a log, a data set), said rather than read.
constexpr std::uintmax_t kMaxScenarioBytes = 4 << 20;
constexpr size_t kMaxSimulatedGpus = 64;

[[noreturn]] void scenario_error(const std::string& where, const std::string& what) {
  throw std::invalid_argument(fmt::format("{}: {}", where, what));
}

// A metric value the library understands (tests/fakes/fake_nvml.cpp): a number, a list of numbers, or one of the
// objects it knows. `labels`: the timeline's segment labels, so a misspelt one is caught here.
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
      const std::string w = where + "." + key + "." + label;
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

std::string read_scenario_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    throw std::invalid_argument(fmt::format("--simulate={}: no such scenario file (use --simulate alone for the "
                                            "built-in '{}' scenario)",
                                            path, kBuiltinScenario));
  if (!std::filesystem::is_regular_file(st))
    throw std::invalid_argument(fmt::format("--simulate={}: not a regular file", path));
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxScenarioBytes)
    throw std::invalid_argument(fmt::format("--simulate={}: {} bytes is too big for a scenario (at most {} bytes)",
                                            path, size, kMaxScenarioBytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("--simulate={}: cannot read it: {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The library's bytes in a file descriptor dlopen can read through /proc/self/fd: an anonymous memory file, or where
// memfd_create is refused (old kernels, some sandboxes) a private temporary file unlinked at once.
UniqueFd library_in_memory() {
  const char* begin = wattscope_sim_nvml_begin;
  const size_t size = static_cast<size_t>(wattscope_sim_nvml_end - wattscope_sim_nvml_begin);
  UniqueFd fd(::memfd_create("wattscope-simulated-nvml", MFD_CLOEXEC));
  std::string why_not_memfd = fd ? "" : std::strerror(errno);
  if (!fd) {
    const char* tmp = std::getenv("TMPDIR");
    std::string path = fmt::format("{}/wattscope-simulated-nvml-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    fd.reset(::mkostemp(path.data(), O_CLOEXEC));
    if (!fd)
      throw std::runtime_error(fmt::format("--simulate: cannot hold the simulated GPU library in memory "
                                           "(memfd_create: {}) nor in a temporary file in {} ({})",
                                           why_not_memfd, path, std::strerror(errno)));
    ::unlink(path.c_str());
  }
  for (size_t off = 0; off < size;) {
    const ssize_t n = ::write(fd.get(), begin + off, size - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error(
          fmt::format("--simulate: cannot write the simulated GPU library to memory: {}", std::strerror(errno)));
    off += static_cast<size_t>(n);
  }
  return fd;
}

} // namespace

void check_scenario(const json& sc) {
  if (!sc.is_object()) scenario_error("the scenario", "expected a JSON object with \"devices\"");
  std::set<std::string> labels;
  if (auto tl = sc.find("timeline"); tl != sc.end()) {
    if (!tl->is_object()) scenario_error("timeline", "expected an object with \"segments\"");
    auto segs = tl->find("segments");
    if (segs == tl->end() || !segs->is_array() || segs->empty())
      scenario_error("timeline.segments", "expected a non-empty list of {\"label\": NAME, \"s\": SECONDS}");
    for (size_t i = 0; i < segs->size(); ++i) {
      const json& s = (*segs)[i];
      const std::string w = fmt::format("timeline.segments[{}]", i);
      if (!s.is_object() || !s.contains("label") || !s["label"].is_string() || !s.contains("s") ||
          !s["s"].is_number() || !(s["s"].get<double>() > 0) || !(s["s"].get<double>() < 1e6))
        scenario_error(w, "expected {\"label\": NAME, \"s\": SECONDS > 0}");
      if (auto wk = s.find("work_per_s"); wk != s.end() && !(wk->is_number() && wk->get<double>() >= 0))
        scenario_error(w + ".work_per_s", "expected a number of work units per second, 0 or more");
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
    for (size_t i = 0; i < phases.size(); ++i) {
      const json& p = phases[i];
      const std::string w = fmt::format("timeline.phases[{}]", i);
      if (!p.is_object() || !p.contains("name") || !p["name"].is_string() || !p.contains("from_s") ||
          !p["from_s"].is_number() || !p.contains("to_s") || !p["to_s"].is_number() ||
          !(p["to_s"].get<double>() > p["from_s"].get<double>()) || p["from_s"].get<double>() < 0)
        scenario_error(w, "expected {\"name\": NAME, \"from_s\": S, \"to_s\": S later than from_s}");
      if (auto ix = p.find("index"); ix != p.end() && !ix->is_number_integer())
        scenario_error(w + ".index", "expected an integer");
      try {
        validate_printable_text("phase name", p["name"].get<std::string>(), kMaxPhaseNameBytes);
      } catch (const std::exception& e) {
        scenario_error(w + ".name", e.what());
      }
    }
  }
  auto devs = sc.find("devices");
  if (devs == sc.end() || !devs->is_array() || devs->empty())
    scenario_error("devices", "expected a non-empty list of simulated GPUs");
  if (devs->size() > kMaxSimulatedGpus)
    scenario_error("devices", fmt::format("at most {} simulated GPUs", kMaxSimulatedGpus));
  for (size_t i = 0; i < devs->size(); ++i) {
    const json& d = (*devs)[i];
    const std::string w = fmt::format("devices[{}]", i);
    if (!d.is_object()) scenario_error(w, "expected an object with \"name\", \"uuid\" and \"metrics\"");
    for (const char* key : {"name", "uuid", "pci_bus_id"})
      if (d.contains(key) && !d[key].is_string()) scenario_error(w + "." + key, "expected a string");
    if (!d.contains("name") || !d.contains("uuid"))
      scenario_error(w, "a simulated GPU needs a \"name\" and a \"uuid\"");
    auto metrics = d.find("metrics");
    if (metrics == d.end() || !metrics->is_object() || metrics->empty())
      scenario_error(w + ".metrics", "expected an object of metric -> value, e.g. {\"power_mw\": 250000}");
    for (const auto& [name, v] : metrics->items())
      check_value(v, w + ".metrics." + name, labels);
    for (const char* key : {"max_clock_sm_mhz", "max_clock_mem_mhz", "lost_at_tick"})
      if (d.contains(key) && !d[key].is_number_unsigned()) scenario_error(w + "." + key, "expected a whole number");
    const auto procs = d.value("processes", json::array());
    if (!procs.is_array()) scenario_error(w + ".processes", "expected a list");
    for (size_t k = 0; k < procs.size(); ++k) {
      const json& p = procs[k];
      const std::string pw = fmt::format("{}.processes[{}]", w, k);
      if (!p.is_object()) scenario_error(pw, "expected an object");
      auto pid = p.find("pid");
      if (pid == p.end() || !((pid->is_string() && *pid == "command") || pid->is_number_unsigned()))
        scenario_error(pw + ".pid", "expected \"command\" (the command `run` wraps) or a process id");
      if (auto t = p.find("type"); t != p.end() && !(t->is_string() && (*t == "compute" || *t == "graphics")))
        scenario_error(pw + ".type", "expected \"compute\" or \"graphics\"");
      for (const char* key : {"mem_bytes", "sm", "mem", "enc", "dec"})
        if (auto v = p.find(key); v != p.end()) check_value(*v, pw + "." + key, labels);
    }
  }
}

std::shared_ptr<const Simulation> Simulation::load(const std::string& spec) {
  std::shared_ptr<Simulation> sim(new Simulation());
  std::string text;
  if (spec.empty() || spec == kBuiltinScenario) {
    sim->name_ = fmt::format("{} (built-in)", kBuiltinScenario);
    text.assign(wattscope_sim_training_begin,
                static_cast<size_t>(wattscope_sim_training_end - wattscope_sim_training_begin));
  } else {
    sim->name_ = spec;
    text = read_scenario_file(spec);
  }
  json sc = json::parse(text, nullptr, false);
  if (sc.is_discarded()) {
    // Parse again for the parser's own message, which says where (byte offset) and what it expected.
    std::string where;
    try {
      [[maybe_unused]] const json again = json::parse(text);
    } catch (const json::parse_error& e) {
      where = e.what();
    }
    throw std::invalid_argument(fmt::format("--simulate={}: not valid JSON: {}", sim->name_, where));
  }
  try {
    check_scenario(sc);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("--simulate={}: {}", sim->name_, e.what()));
  }
  sim->gpu_count_ = static_cast<int>(sc["devices"].size());

  // "pid": "command" -> a pid file in a private directory, written once `run` has started its command.
  bool wants_pid = false;
  for (auto& d : sc["devices"])
    if (d.contains("processes"))
      for (auto& p : d["processes"])
        if (p["pid"].is_string()) wants_pid = true;
  if (wants_pid) {
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = fmt::format("{}/wattscope-sim-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (::mkdtemp(dir.data())) {
      sim->private_dir_ = dir;
      sim->pid_file_ = dir + "/command.pid";
    }
    for (auto& d : sc["devices"])
      if (d.contains("processes"))
        for (auto& p : d["processes"])
          if (p["pid"].is_string()) {
            p.erase("pid");
            // Without a private directory the entry names nothing and the GPU shows no process: said in the docs.
            p["pid_file"] = sim->pid_file_;
          }
  }
  sim->scenario_json_ = sc.dump();
  sim->library_fd_ = library_in_memory();
  sim->library_path_ = fmt::format("/proc/self/fd/{}", sim->library_fd_.get());

  // The timeline's markers: phases begin and end, work done every half second of a segment that does work.
  if (auto tl = sc.find("timeline"); tl != sc.end()) {
    const auto& segs = (*tl)["segments"];
    const std::string unit = tl->value("work_unit", std::string("samples"));
    const size_t loop_from = tl->value("loop_from", size_t{0});
    double t = 0, loop_start = 0;
    for (size_t i = 0; i < segs.size(); ++i) {
      if (i == loop_from) loop_start = t;
      const double len = segs[i]["s"].get<double>();
      const double rate = segs[i].value("work_per_s", 0.0);
      for (double at = 0; rate > 0 && at < len - 1e-9; at += 0.5) {
        Marker m;
        m.kind = Marker::Kind::Work;
        m.amount = rate * std::min(0.5, len - at);
        m.unit = unit;
        sim->first_.push_back({t + std::min(at + 0.5, len), std::move(m)});
      }
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
      sim->first_.push_back({p["from_s"].get<double>(), std::move(b)});
      sim->first_.push_back({p["to_s"].get<double>(), std::move(e)});
    }
    // In time order; at one instant, work and ends before begins, so consecutive phases do not nest.
    auto rank = [](const Timed& x) { return x.m.kind == Marker::Kind::Begin ? 1 : 0; };
    std::stable_sort(sim->first_.begin(), sim->first_.end(), [&](const Timed& a, const Timed& b) {
      return a.t_s != b.t_s ? a.t_s < b.t_s : rank(a) < rank(b);
    });
    if (tl->value("loop", true) && t > loop_start) {
      sim->loop_span_s_ = t - loop_start;
      for (const auto& x : sim->first_)
        if (x.t_s >= loop_start + 1e-9 || (x.t_s >= loop_start && x.m.kind == Marker::Kind::Begin))
          sim->repeated_.push_back(x);
      for (const auto& [name, step] : max_index)
        sim->index_step_.emplace_back(name, step);
    }
  }
  return sim;
}

Simulation::~Simulation() {
  if (!pid_file_.empty()) ::unlink(pid_file_.c_str());
  if (!private_dir_.empty()) ::rmdir(private_dir_.c_str());
}

void Simulation::command_started(pid_t pid) const noexcept {
  if (pid_file_.empty()) return;
  // Our own private directory (mode 0700, made by mkdtemp), never a path from outside.
  UniqueFd fd(::open(pid_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return;
  const std::string text = std::to_string(pid) + "\n";
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) return;
}

std::optional<std::pair<double, Marker>> Simulation::marker(size_t n) const {
  if (n < first_.size()) return std::make_pair(first_[n].t_s, first_[n].m);
  if (repeated_.empty() || loop_span_s_ <= 0) return std::nullopt;
  const size_t k = n - first_.size();
  const size_t wraps = k / repeated_.size() + 1;
  const Timed& x = repeated_[k % repeated_.size()];
  Marker m = x.m;
  if (m.index)
    for (const auto& [name, step] : index_step_)
      if (name == m.name) *m.index += static_cast<int64_t>(wraps) * step;
  return std::make_pair(x.t_s + static_cast<double>(wraps) * loop_span_s_, std::move(m));
}

} // namespace wattscope
