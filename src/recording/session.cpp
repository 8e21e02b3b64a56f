#include "recording/session.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/text.hpp"
#include "core/thread_name.hpp"
#include "core/time_util.hpp"
#include "processes/kubelet.hpp"
#include "recording/sources.hpp"
#include "wattscope/version.hpp"

namespace wattscope {

// ---- issue 31: a vendor library's init (nvmlInit: Source::opens_aside) runs on a thread of its own, so the command
// starts on time whatever it does. open() waits kOpenGrace for them (a healthy init is done well within it, and the
// run then looks exactly as if they had opened in line); one still initialising is taken into the run when it is
// ready, its GPUs recorded from then on, or said to be still hung when the run ends. Not a deadline that drops it:
// without persistence mode a healthy nvmlInit takes seconds. The wait is the longest deadline a late source gets on
// a regular tick (docs/sampling: three quarters of the interval, at most 1 s): at 250 ms a loaded machine (the ASan
// suite beside other builds) took the fork of the probe and the init past it, and a run of a few seconds lost its
// GPUs entirely; a second more before a command that runs for minutes or hours costs nothing measurable.
namespace {
constexpr std::chrono::milliseconds kOpenGrace{1000};
}

struct Session::Opened {
  std::shared_ptr<Source> source;
  bool async = false;
  bool done = false; // open() returned (under Opening::mu)
  bool opened = false;
  bool taken = false; // adopted into the run, or reported
  SteadyClock::time_point done_at{};
};

struct Session::Opening {
  std::mutex mu;
  std::condition_variable cv;
  Session* session = nullptr; // null once the session finished or is gone: what opens later is dropped
  bool started = false;       // the session samples: late sources are joined at once
  SteadyClock::time_point t0{};
  std::vector<std::shared_ptr<Opened>> pending; // async, not yet taken at open()'s end
};

Session::Session(SessionOptions opts) : opts_(std::move(opts)) {}

Session::~Session() {
  if (opening_) {
    std::lock_guard lock(opening_->mu);
    opening_->session = nullptr;
  }
  if (!finished_ && sampler_) finish(std::nullopt);
}

std::vector<GpuDevice> Session::devices() const {
  std::vector<GpuDevice> out = devices_ ? *devices_ : std::vector<GpuDevice>{};
  if (opening_) {
    std::lock_guard lock(opening_->mu);
    out.insert(out.end(), late_devices_.begin(), late_devices_.end());
  }
  return out;
}

std::optional<std::vector<GpuDevice>> Session::adopt_source(const std::shared_ptr<Source>& s, bool opened,
                                                            std::vector<Event>& notices, bool late) {
  const SourceStatus st = s->status();
  if (!opened) {
    // Said once, in words a user can act on. No AMD/Intel GPU (no hwmon card, no ROCm SMI) is the normal case and
    // only shown with -v.
    // The event says the state in words first ("no permission: ...", "missing: ..."), as doctor does.
    const std::string said = fmt::format("{}: {}", st.state_name(), st.line());
    // No AMD/Intel card, no ROCm SMI or Level Zero library or GPU: the normal state of most machines. Issue 30: one
    // rule for every backend: an error, or a library the user named that cannot be loaded, is always said.
    const bool quiet = quiet_when_missing(s->name()) && st.state == SourceStatus::State::Missing && !st.said;
    // An error is logged at warning level in its own words: "warning: error: ..." said two things at once.
    if (st.state == SourceStatus::State::NoPermission)
      spdlog::warn("{}", said);
    else if (st.state == SourceStatus::State::Error)
      spdlog::warn("{}", st.line());
    else if (quiet)
      spdlog::debug("{}", said);
    else
      spdlog::info("{}", st.line());
    if (!quiet) notices.push_back({0, 0, "source-missing", std::string(s->name()), said});
    return std::nullopt;
  }
  if (const size_t n = s->release_claimed(claimed_)) {
    spdlog::debug("{}: {} GPU(s) left to the backend that already records them", s->name(), n);
    if (s->devices().empty()) return std::nullopt; // every device it found is recorded by a richer backend
  }
  spdlog::debug("{}: {}", s->name(), st.line());
  std::vector<GpuDevice> known = *devices_;
  known.insert(known.end(), late_devices_.begin(), late_devices_.end());
  int next_index = 0;
  for (const auto& d : known)
    next_index = std::max(next_index, d.gpu_index + 1);
  s->set_first_index(next_index);
  std::vector<GpuDevice> added = s->devices();
  if (late) {
    // NVML keeps its own indices: where a backend that opened first took them, the later one cannot be recorded.
    for (const auto& d : added)
      for (const auto& k : known)
        if (d.gpu_index == k.gpu_index) {
          const std::string said = fmt::format("{} became ready after GPU index {} was given to another backend's "
                                               "device; its GPUs are not recorded in this run",
                                               s->name(), d.gpu_index);
          spdlog::warn("{}", said);
          notices.push_back({0, 0, "source-missing", std::string(s->name()), said});
          return std::nullopt;
        }
  } else {
    s->describe(run_);
  }
  for (const auto& d : added)
    if (!d.pci_bus_id.empty()) claimed_.push_back(normalize_pci_bus_id(d.pci_bus_id));
  return added;
}

void Session::join_late(Opened& e) {
  e.taken = true;
  std::vector<Event> notices;
  auto added = adopt_source(e.source, e.opened, notices, /*late=*/true).value_or(std::vector<GpuDevice>{});
  const double after_s = std::chrono::duration<double>(e.done_at - opening_->t0).count();
  if (e.opened && !added.empty()) {
    const std::string said = fmt::format("{} ready after {:.1f} s: {} GPU(s) recorded from the next sample on, not "
                                         "before",
                                         e.source->name(), after_s, added.size());
    spdlog::info("{}", said);
    notices.push_back({0, 0, "source-ready", std::string(e.source->name()), said});
    late_devices_.insert(late_devices_.end(), added.begin(), added.end());
    acc_->add_devices(std::move(added));
    if (tracker_ && e.source->lists_gpu_processes()) tracker_->add_gpu_source(e.source);
    sampler_->adopt(e.source);
  } else if (e.opened) {
    spdlog::debug("{} ready after {:.1f} s with no GPU to record", e.source->name(), after_s);
  }
  for (auto& n : notices)
    acc_->add_event(std::move(n));
}
// ---- end issue 31

void Session::open() {
  open_run();
  std::vector<Event> notices;
  open_sources(notices);
  open_accounting();
  open_process_tracker();
  for (auto& n : notices)
    acc_->add_event(std::move(n));
  open_monitors();
  open_markers();
  open_stores();
}

// The run's row: its id, command, interval and tags (scheduler and device context, --tag, --simulate).
void Session::open_run() {
  run_.start_ms = wall_now_ms();
  run_.run_id = new_run_id(run_.start_ms);
  run_.task = opts_.task;
  run_.command = shell_join(opts_.command);
  run_.interval_ms = std::chrono::duration<double, std::milli>(opts_.interval).count();
  run_.version = kVersion;
  nlohmann::json tags = nlohmann::json::object();
  // Scheduler and device context, so a run can be matched to its job later.
  for (const char* var : {"SLURM_JOB_ID", "SLURM_ARRAY_TASK_ID", "PBS_JOBID", "CUDA_VISIBLE_DEVICES", "HOSTNAME"})
    if (const char* v = std::getenv(var)) tags[var] = v;
  for (const auto& [k, v] : opts_.tags)
    tags[k] = v;
  if (opts_.simulate) { // issue 19: a run with simulated GPUs says so wherever it is read
    tags["simulated"] = "true";
    tags["simulate_scenario"] = opts_.simulate->name();
  }
  // Environment values are not ours: bytes that are not UTF-8 become U+FFFD rather than stopping the run.
  run_.tags = tags.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Every source, vendor libraries initialised aside (a hung init does not hold the run): what they found goes to
// devices_ and sources_, what went wrong to `notices`.
void Session::open_sources(std::vector<Event>& notices) {
  devices_ = std::make_shared<std::vector<GpuDevice>>();
  // Issue 31: vendor libraries start initialising first, each on a thread of its own; the sources that read files
  // open meanwhile; then every source is taken in registry order (so claims go as before) if it is ready.
  opening_ = std::make_shared<Opening>();
  opening_->session = this;
  opening_->t0 = SteadyClock::now();
  std::vector<std::shared_ptr<Opened>> order;
  for (auto& made : make_sources(opts_)) {
    auto e = std::make_shared<Opened>();
    e->source = std::move(made);
    // --simulate's library is our own code, loaded from memory: nothing to wait for.
    e->async = e->source->opens_aside() && !opts_.simulate;
    if (e->async)
      std::thread([op = opening_, e] {
        name_this_thread("ws-open-" + std::string(e->source->name()));
        const bool ok = e->source->open();
        std::lock_guard lock(op->mu);
        e->opened = ok;
        e->done = true;
        e->done_at = SteadyClock::now();
        op->cv.notify_all();
        if (op->session && op->started && !e->taken) op->session->join_late(*e);
      }).detach(); // it may stay inside a hung init for ever; it holds what it uses
    order.push_back(std::move(e));
  }
  for (auto& e : order)
    if (!e->async) {
      e->opened = e->source->open();
      e->done = true;
    }
  {
    std::unique_lock lock(opening_->mu);
    opening_->cv.wait_until(lock, opening_->t0 + kOpenGrace, [&] {
      return std::all_of(order.begin(), order.end(), [](const auto& e) { return e->done; });
    });
    for (auto& e : order) {
      if (!e->done) {
        spdlog::info("{}: still initialising after {} ms; the run starts without its GPUs, which are recorded from "
                     "when it is ready",
                     e->source->name(), kOpenGrace.count());
        opening_->pending.push_back(e);
        continue;
      }
      e->taken = true;
      auto added = adopt_source(e->source, e->opened, notices, /*late=*/false);
      if (!added) continue;
      for (auto& d : *added)
        devices_->push_back(std::move(d));
      sources_.push_back(std::move(e->source));
    }
  }
  sim_t0_ = SteadyClock::now(); // issue 19: the simulated library's clock started at its nvmlInit, just above
  if (opts_.simulate)
    spdlog::info("recording {} SIMULATED GPUs (--simulate, scenario {}): no GPU figure of this run is a measurement",
                 devices_->size(), opts_.simulate->name());
}

void Session::open_accounting() {
  acc_ = std::make_unique<Accounting>(*devices_);
  // Every run is charged: at the rates given, else at the world's yearly figure, which says it was assumed.
  footprint_ = opts_.footprint ? *opts_.footprint : resolve_footprint({});
  acc_->set_footprint(*footprint_);
  if (opts_.adaptive.enabled()) { // issue 18: the idle interval as in force, a whole number of grid slots
    const IdleSchedule schedule(opts_.adaptive, opts_.interval);
    SamplingSummary sampling;
    sampling.adaptive = true;
    sampling.interval_s = std::chrono::duration<double>(opts_.interval).count();
    sampling.idle_interval_s =
        std::chrono::duration<double>(opts_.interval * schedule.slots_per_full_while_idle()).count();
    sampling.idle_after_s = std::chrono::duration<double>(opts_.adaptive.idle_after).count();
    acc_->set_sampling(sampling);
  }
}

void Session::open_process_tracker() {
  if (opts_.track_processes) {
    std::vector<std::shared_ptr<Source>> gpu;
    for (const auto& s : sources_)
      if (s->lists_gpu_processes()) gpu.push_back(s);
    TrackerOptions t;
    t.procfs_root = opts_.procfs_root;
    t.period = std::max({opts_.interval, opts_.process_interval, std::chrono::nanoseconds(std::chrono::seconds(1))});
    t.top_processes = opts_.top_processes;
    t.only_units = opts_.only_units; // issue 18
    t.only_env = opts_.only_env;
    if (const long hz = ::sysconf(_SC_CLK_TCK); hz > 0) t.clock_ticks_per_s = hz;
    // issue 18: pod names from the kubelet (WATTSCOPE_KUBELET_URL; "off" disables). Nothing is fetched, and no
    // thread started, until a process in a pod's cgroup is seen.
    if (auto k = kubelet_options_from_env()) t.pod_names = std::make_shared<KubeletPodNames>(std::move(*k));
    tracker_ = std::make_unique<ProcessTracker>(t, std::move(gpu));
  }
}

// Alerts, anomalies and stragglers, watched live.
void Session::open_monitors() {
  // ---- alerts (issue 14) ----
  if (opts_.alerts && !opts_.alerts->rules.empty())
    alerts_ = std::make_unique<AlertEngine>(*opts_.alerts,
                                            AlertContext{run_.host, run_.run_id, run_.task, !opts_.command.empty()},
                                            [acc = acc_.get()](Event ev) { acc->add_event(std::move(ev)); });
  // ---- end alerts
  // issue 36: anomalies and stragglers live, on every GPU the session records; metrics named by `anomaly = true`
  // rules are watched too.
  if (devices_ && !devices_->empty()) {
    AnomalyMonitorOptions ao;
    ao.interval_ms = run_.interval_ms;
    if (const char* v = std::getenv("WATTSCOPE_ANOMALY_SECOND_MS"); v && *v) { // tests: the detectors' second, shorter
      int64_t ms = 0;
      const auto [end, ec] = std::from_chars(v, v + std::strlen(v), ms);
      if (ec == std::errc() && *end == '\0' && ms >= 1 && ms <= 1000)
        ao.second_ms = ms;
      else
        spdlog::warn("WATTSCOPE_ANOMALY_SECOND_MS='{}' is not a whole number of ms from 1 to 1000: ignored", v);
    }
    if (opts_.alerts)
      for (const auto& r : opts_.alerts->rules)
        if (r.kind == AlertKind::Anomaly &&
            std::find(ao.metrics.begin(), ao.metrics.end(), r.metric) == ao.metrics.end())
          ao.metrics.push_back(r.metric);
    anomalies_ = std::make_unique<AnomalyMonitor>(std::move(ao),
                                                  [acc = acc_.get()](Event ev) { acc->add_event(std::move(ev)); });
  }
}

void Session::open_markers() {
  // --- issue 15: markers. Begin/end/work settle on the sampler thread (PhaseTracker); points and model
  // descriptions are events.
  phases_ = std::make_unique<PhaseTracker>();
  // issue 33: a phase's begin or end asks the GPUs for their energy counters at once (set on below once the sampler
  // exists, where the interval is long enough for it to matter)
  phases_->set_edge_hook([this](SteadyClock::time_point at) {
    Sampler* s = edge_sampler_.load(std::memory_order_acquire);
    return s && s->request_counter_reading(at);
  });
  phases_->set_readings_served([this] {
    Sampler* s = edge_sampler_.load(std::memory_order_acquire);
    return s ? s->counter_readings_served() : SteadyClock::time_point::max();
  });
  phases_->set_prompt_hook([this] {
    if (Sampler* s = edge_sampler_.load(std::memory_order_acquire)) s->hand_over_readings_soon();
  });
  phases_->set_on_window([this](const PhaseTracker::WindowReply& w) { answer_window(w); });
  on_marker_ = [this](Marker m, int64_t ts_ms) { on_marker(std::move(m), ts_ms); };
  // issue 29: `run --simulate` keeps the scenario's phases and work apart until the command shows whether it sends
  // its own (simulate_loop, hold_simulated, finish).
  if (opts_.simulate && !opts_.command.empty()) sim_phases_ = std::make_unique<PhaseTracker>();
  if (opts_.private_marker_socket || !opts_.marker_socket_path.empty()) {
    auto handler = [this](Marker m, int64_t ts_ms) {
      const bool phase_or_work =
          m.kind == Marker::Kind::Begin || m.kind == Marker::Kind::End || m.kind == Marker::Kind::Work;
      if (phase_or_work && !command_marked_.exchange(true) && opts_.simulate)
        spdlog::info("the {} sends phase and work markers of its own: the simulation's are left out of the run",
                     opts_.command.empty() ? "socket" : "command");
      on_marker_(std::move(m), ts_ms);
    };
    if (!opts_.marker_socket_path.empty()) {
      markers_ = std::make_unique<MarkerListener>(opts_.marker_socket_path == default_marker_socket_path()
                                                      ? MarkerListener::at_default_path(handler)
                                                      : MarkerListener::at_path(opts_.marker_socket_path, handler));
    } else {
      // `run` works without markers when its private socket cannot be made (a TMPDIR too long for a socket path).
      try {
        markers_ = std::make_unique<MarkerListener>(MarkerListener::in_private_dir(handler));
      } catch (const std::exception& e) {
        spdlog::warn("{}; markers from the command will be dropped", e.what());
      }
    }
  }
  // --- end issue 15
  if (!opts_.scrape.urls.empty()) {
    ScrapeOptions so = opts_.scrape;
    so.period = opts_.interval;
    scraper_ = std::make_unique<Scraper>(std::move(so), [this](Marker m) { on_marker_(std::move(m), wall_now_ms()); });
  }
}

// Sampler thread: the counters read at phase edges, as energy_j by the ticks' rule (before the next tick moves it on).
void Session::add_edge_readings(const std::vector<CounterReading>& readings) {
  for (const auto& r : readings)
    if (auto e = acc_->counter_energy_j(r.gpu_index, r.counter_uj)) {
      phases_->add_gpu_reading(r.gpu_index, r.at, *e, -1, r.stale);
      // a counter that moves on a period: the reading followed the edge's next update; the energy at the edge is the
      // reading less the power's integral back to it (CounterReading), off by at most its error
      if (r.edge_at && *r.edge_at < r.at)
        phases_->add_gpu_reading(r.gpu_index, *r.edge_at, *e - static_cast<double>(r.edge_back_uj) / 1e6,
                                 static_cast<double>(r.edge_err_uj) / 1e6);
    }
}

// Sampler thread: a measured window's figures, back to the program that waits for them (python/wattscope's
// end_window). The same figures as the phase row stored with the next tick.
void Session::answer_window(const PhaseTracker::WindowReply& w) {
  if (!markers_) return;
  nlohmann::json j{{"kind", "window"}, {"run_id", run_.run_id}, {"window", w.window}, {"name", w.name}};
  if (!w.phase) {
    j["error"] = w.window.empty() ? "no such phase is open" : "no such window is open";
  } else {
    const PhaseRecord& p = *w.phase;
    j["phase_id"] = p.phase_id;
    j["name"] = p.name;
    j["start_ms"] = p.start_ms;
    j["end_ms"] = p.end_ms;
    j["duration_s"] = w.duration_s;
    j["energy_j"] = p.energy_j ? nlohmann::json(*p.energy_j) : nlohmann::json();
    j["method"] = p.energy_j ? nlohmann::json(p.energy_method) : nlohmann::json();
    auto devices = nlohmann::json::object();
    for (const auto& [device, e] : p.device_energy_j)
      devices[device] = e;
    j["devices"] = std::move(devices);
    j["device_methods"] = w.methods;
    j["energy_bound_j"] = p.energy_bound_j ? nlohmann::json(*p.energy_bound_j) : nlohmann::json();
    j["start_edge"] = p.start_edge;
    j["end_edge"] = p.end_edge;
    j["closed_by_run_end"] = p.closed_by_run_end;
    // Carbon and cost at the run's rates over the window's own stretch (its energy spread evenly over it).
    if (p.energy_j && footprint_) {
      j["carbon_g"] = grams_at(*footprint_, *p.energy_j, p.start_ms, p.end_ms);
      j["carbon_source"] = footprint_->carbon.source;
      const auto c = cost_at(*footprint_, *p.energy_j, p.start_ms, p.end_ms);
      j["cost"] = c ? nlohmann::json(*c) : nlohmann::json();
      if (c) j["currency"] = footprint_->currency;
    }
  }
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (!markers_->reply(w.to, text) && windows_unanswered_++ == 0)
    spdlog::debug("a window's figures could not be sent back (its program is gone, or its queue is full)");
}

void Session::on_marker(Marker m, int64_t ts_ms) {
  // The marker's own time, where it carries one that can be this machine's monotonic clock (not after its arrival,
  // not older than a marker can wait in a queue): a marker late in the queue keeps its edge. Else its arrival.
  const SteadyClock::time_point arrived = SteadyClock::now();
  SteadyClock::time_point at = arrived;
  if (m.mono_ns) {
    const SteadyClock::time_point own{
        std::chrono::duration_cast<SteadyClock::duration>(std::chrono::nanoseconds(*m.mono_ns))};
    if (own <= arrived + kMarkerClockSlack && arrived - own <= kMaxMarkerDelay) {
      at = std::min(own, arrived);
      ts_ms -= std::chrono::duration_cast<std::chrono::milliseconds>(arrived - at).count();
    } else if (markers_clock_refused_++ == 0) {
      spdlog::warn("a marker's own time is {:.1f} s from its arrival: not this machine's monotonic clock (another "
                   "machine or time namespace?); such markers are placed at their arrival",
                   std::chrono::duration<double>(own - arrived).count());
    }
  }
  if (!m.mono_ns || at == arrived) phases_->count_at_arrival();
  // issue 31: points and model descriptions share the per-tick budget of the markers the tracker queues
  if ((m.kind == Marker::Kind::Point || m.kind == Marker::Kind::Model) && !phases_->admit_event_marker()) return;
  if (m.kind == Marker::Kind::Point) {
    acc_->add_event({0, ts_ms, "mark", m.name, ""});
  } else if (m.kind == Marker::Kind::Model) {
    nlohmann::json d = nlohmann::json::object();
    if (m.parameters) d["parameters"] = *m.parameters;
    if (m.flops) d["flops"] = *m.flops;
    acc_->add_event({0, ts_ms, "model", m.name, d.dump()});
  } else {
    phases_->push(std::move(m), ts_ms, at, arrived);
  }
}

void Session::open_stores() {
  for (const auto& spec : opts_.stores) {
    auto sink = open_sink(spec);
    sink->begin_run(run_); // throws with the store's own fix-it message
    writers_.push_back(std::make_unique<SinkWriter>(std::move(sink), opts_.commit, run_.run_id));
  }
}

void Session::start() {
  { // Forecast history: a point a tick (at most a second apart), and at least 10 s of it before a forecast, whatever
    // the interval (seconds, not samples); the label the finish forecast's energy carries.
    forecast::LiveForecaster::Options fo;
    const auto tick_ms = static_cast<int64_t>(std::max(1.0, run_.interval_ms));
    fo.min_spacing_ms = std::min<int64_t>(tick_ms, 1000);
    fo.min_span_ms = forecast::kForecastMinHistoryMs;
    forecaster_ = std::make_unique<forecast::LiveForecaster>(fo);
    std::string method;
    for (const auto& d : *devices_)
      method = method.empty() || method == d.energy_method ? d.energy_method : "mixed";
    forecaster_->set_energy_method(method);
    for (const auto& d : *devices_)
      if (d.slowdown_temp_c) forecaster_->set_throttle_temp(d.gpu_index, *d.slowdown_temp_c);
  }
  for (auto& w : writers_)
    w->start();
  if (alerts_) alerts_->start(); // alerts (issue 14)
  sampler_ = std::make_unique<Sampler>(
      sources_, opts_.interval,
      [this](Frame& f) {
        if (tracker_) f.processes = tracker_->take();
        if (f.processes && f.processes->run_mode && f.processes->window_s > 0) { // issue 33: `run`'s activity
          double busy_s = 0;
          for (const auto& p : f.processes->procs)
            if (p.in_run) busy_s += p.cpu_time_s;
          run_busy_cores_ = busy_s / f.processes->window_s;
        }
        add_edge_readings(f.counter_readings);
        acc_->process(f);
        phases_->process(f);
        if (sim_phases_) hold_simulated(f); // issue 29
        // issue 36: a phase begun or ended in either tracker is a boundary
        if (anomalies_) anomalies_->process(f, phases_->boundaries() + (sim_phases_ ? sim_phases_->boundaries() : 0));
        feed_forecast(f); // issue 36
        auto shared = std::make_shared<const Frame>(std::move(f));
        for (auto& w : writers_)
          w->push(shared);
        if (opts_.on_frame) opts_.on_frame(shared);
        if (alerts_) alerts_->offer(shared); // alerts (issue 14): queued, evaluated on the engine's thread
      },
      opts_.adaptive, devices_->size());
  // issue 18: a marker that arrives while idle is settled on the next --interval tick, not an idle interval later.
  if (opts_.adaptive.enabled()) sampler_->set_activity_hint([this] { return phases_ && phases_->has_pending(); });
  // issue 33: `run` is idle when its command is, whatever other users run on the machine.
  if (opts_.adaptive.enabled() && tracker_ && !opts_.command.empty())
    sampler_->set_cpu_scope([this] { return run_busy_cores_; });
  {
    // Issue 31: a vendor library ready since open() joins at the first tick; later ones as they become ready.
    std::lock_guard lock(opening_->mu);
    opening_->started = true;
    for (auto& e : opening_->pending)
      if (e->done && !e->taken) join_late(*e);
  }
  // Readings at phase edges, so that an edge between two ticks does not cost a phase its truth (docs/markers.md, "How
  // true a phase is"). Markers within 5 ms of a reading share it; the budget (8 back to back, then one per 200 ms)
  // bounds a phase-per-step loop. Below 100 ms NVML reads only a counter that moves on a period (ticks that close hold
  // an edge on a continuous counter); one that moves every 100 ms is read just after its first update past the edge
  // (sources/counter_clock.hpp). Each marker waits for its reading and for every device's next counter value past it
  // (PhaseTracker::kMaxEdgeWait at most).
  phases_->set_edge_budget(kEdgeReadingPeriod, kEdgeReadingBurst);
  // A measured window's sender waits for its figures: its edge readings are handed over as they are taken, and the
  // window is closed between ticks (PhaseTracker::place_windows).
  sampler_->set_readings_handler([this](std::vector<CounterReading>& readings) {
    add_edge_readings(readings);
    phases_->place_windows(SteadyClock::now());
  });
  edge_sampler_.store(sampler_.get(), std::memory_order_release);
  sampler_->start();
  if (tracker_ && opts_.command.empty()) tracker_->start_machine();
  if (markers_) markers_->start();
  if (scraper_) scraper_->start();
  if (opts_.simulate) // issue 19
    sim_thread_ = std::thread([this] {
      name_this_thread("ws-simulate");
      simulate_loop();
    });
}

// ---- forecasts (issue 36): fed every frame (work, the epoch in progress, the samples); the forecast itself is made
// at most once a second (its cost is a few thousand slopes per device), and a forecast that first comes within the
// warning horizon is an event of kind `forecast`, settled with the next frame.
void Session::feed_forecast(const Frame& f) {
  if (f.markers_only || !forecaster_) return;
  for (const auto& w : f.work)
    forecaster_->observe_work(w);
  if (auto e = phases_->open_indexed_phase()) {
    const std::pair<int64_t, int64_t> key{e->index, e->start_ms};
    if (forecast_epoch_ != key) forecaster_->observe_phase_begin(e->name, e->index, e->start_ms);
    forecast_epoch_ = key;
  }
  forecaster_->observe(f);
  if (f.ts_ms - forecast_last_ms_ < 1000) return;
  forecast_last_ms_ = f.ts_ms;
  const forecast::Snapshot snap = forecaster_->forecast(f.ts_ms);
  for (auto& ev : forecaster_->crossings(snap))
    acc_->add_event(std::move(ev));
  forecast_board_.publish(snap);
}

// ---- simulate (issue 19): the scenario's markers, each at its time on the timeline, through the same handler as
// markers from the socket. Sleeps until the next one (no timer wake-ups in between).
// issue 29: the command's phases and work are stored exactly as it sent them, never mixed with the scenario's:
// - `run`: the scenario's markers go to a phase tracker of their own (sim_phases_), whose rows are held apart; at the
//   run's end they become the run's only if the command sent no begin/end/work marker (`run --simulate -- sleep 20`
//   still shows the scenario's phases); once it sends one, they are dropped and no more are sent.
// - `record`/`serve` with --socket: whoever sends to the socket marks the run; the scenario sends nothing. Without a
//   socket (and in `top`) nothing else can mark the run, and the scenario's markers are its phases and work.
void Session::simulate_loop() {
  if (!opts_.marker_socket_path.empty()) return;
  std::unique_lock lock(sim_mu_);
  for (size_t n = 0;; ++n) {
    auto next = opts_.simulate->marker(n);
    if (!next) return;
    const auto due =
        sim_t0_ + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(next->first));
    if (sim_cv_.wait_until(lock, due, [this] { return sim_stop_; })) return;
    if (!sim_phases_) {
      on_marker_(std::move(next->second), wall_now_ms());
    } else {
      if (command_marked_.load()) return;
      sim_phases_->push(std::move(next->second), wall_now_ms());
    }
  }
}

// Sampler thread, after the run's own phase tracker: the scenario's tracker settles its markers on the same tick (so
// its phases' energy is what they would have had), and its rows are moved aside, the command's left in the frame.
void Session::hold_simulated(Frame& f) {
  if (command_marked_.load()) {
    if (!sim_held_phases_.empty() || !sim_held_work_.empty()) {
      std::vector<PhaseRecord>().swap(sim_held_phases_);
      std::vector<WorkRecord>().swap(sim_held_work_);
    }
    return;
  }
  // Bounds for a `run` of days: a scenario loop of ~20 s has a handful of phases; work (every half second) is summed
  // into the previous row of the same phase and unit past kCoalesceWorkFrom rows, so no amount is lost.
  constexpr size_t kMaxHeldPhases = 100000, kCoalesceWorkFrom = 10000;
  std::vector<PhaseRecord> own_phases, own_begun;
  std::vector<WorkRecord> own_work;
  own_phases.swap(f.phases);
  own_begun.swap(f.phases_begun);
  own_work.swap(f.work);
  sim_phases_->process(f);
  // The scenario's begun phases are no rows of the run's: its phases are stored, closed, at the run's end (their ids
  // would collide with the command's own open rows)
  f.phases_begun.swap(own_begun);
  for (auto& p : f.phases) {
    if (sim_held_phases_.size() < kMaxHeldPhases)
      sim_held_phases_.push_back(std::move(p));
    else
      ++sim_held_dropped_;
  }
  for (auto& w : f.work) {
    if (sim_held_work_.size() >= kCoalesceWorkFrom && sim_held_work_.back().unit == w.unit &&
        sim_held_work_.back().phase_id == w.phase_id) {
      sim_held_work_.back().amount += w.amount;
      sim_held_work_.back().ts_ms = w.ts_ms;
    } else {
      sim_held_work_.push_back(std::move(w));
    }
  }
  f.phases = std::move(own_phases);
  f.work = std::move(own_work);
}
// ---- end simulate

RunCgroup Session::make_cgroup() {
  if (!tracker_) return {};
  // WATTSCOPE_CGROUP_ROOT: where the cgroup2 hierarchy is (default: under --sysfs-root), or `none` to make no cgroup
  // (the test suite: a run's cgroup is a directory outside its temporary directory).
  const char* env_root = std::getenv("WATTSCOPE_CGROUP_ROOT");
  const std::string cgroup_root = env_root && *env_root ? env_root : opts_.sysfs_root + "/fs/cgroup";
  RunCgroup cg;
  if (cgroup_root == "none")
    cg.why_not = "WATTSCOPE_CGROUP_ROOT=none";
  else
    cg = make_run_cgroup(opts_.procfs_root, cgroup_root, "wattscope-" + run_.run_id);
  if (cg.dir.empty())
    spdlog::info("the run's processes are followed by parent pid only ({}): descendants that daemonise may be "
                 "missed",
                 cg.why_not);
  return cg;
}

void Session::follow(pid_t child, const RunCgroup& cgroup) {
  if (opts_.simulate) opts_.simulate->command_started(child); // issue 19: the simulated GPUs list its processes
  if (tracker_) tracker_->follow(child, cgroup.dir);
}

RunInfo Session::finish(std::optional<int64_t> exit_status) {
  if (finished_) return run_;
  finished_ = true;
  if (opening_) { // issue 31: what is still initialising is not waited for, and said
    std::lock_guard lock(opening_->mu);
    opening_->session = nullptr;
    const double waited_s = std::chrono::duration<double>(SteadyClock::now() - opening_->t0).count();
    for (auto& e : opening_->pending)
      if (!e->done && acc_) {
        const std::string said =
            fmt::format("{} init still hung after {:.1f} s: its GPUs were not recorded", e->source->name(), waited_s);
        spdlog::warn("{}", said);
        acc_->add_event({0, 0, "source-missing", std::string(e->source->name()), said});
      }
  }
  if (tracker_) tracker_->stop(); // its last scan goes out with the sampler's last tick
  // issue 18: the Slurm steps seen (e.g. "0,1,batch") and the array ids the prolog could not know
  if (tracker_ && tracker_->options().filtered()) {
    std::string steps;
    for (const auto& st : tracker_->slurm_steps())
      steps += (steps.empty() ? "" : ",") + st;
    auto tags = nlohmann::json::parse(run_.tags, nullptr, false);
    if (tags.is_object()) {
      if (!steps.empty()) tags["slurm_steps"] = steps;
      for (const auto& [k, v] : tracker_->slurm_array()) // what the prolog could not know
        if (!tags.contains(k)) tags[k] = v;
      run_.tags = tags.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  if (scraper_) scraper_->stop(); // an open steady-state window ends here
  if (markers_) markers_->stop(); // what arrived before now is settled below
  if (sim_thread_.joinable()) {   // issue 19
    {
      std::lock_guard lock(sim_mu_);
      sim_stop_ = true;
    }
    sim_cv_.notify_all();
    sim_thread_.join();
  }
  edge_sampler_.store(nullptr, std::memory_order_release);
  if (sampler_) sampler_->stop();
  if (tracker_) {
    // The final `processes` rows: every process still known, with the tick it was last seen at; and the rows of a
    // scan no tick took.
    auto end = std::make_shared<Frame>();
    end->rows_only = true;
    end->tick = acc_->last_tick();
    end->processes = std::make_shared<ProcessSnapshot>();
    if (auto left = tracker_->take()) end->processes->rows = std::move(left->rows);
    for (auto& r : tracker_->final_rows())
      end->processes->rows.push_back(std::move(r));
    acc_->resolve_process_rows(end->processes->rows, end->tick);
    if (!end->processes->rows.empty()) {
      std::shared_ptr<const Frame> shared = std::move(end);
      for (auto& w : writers_)
        w->push(shared);
    }
  }
  // ---- alerts (issue 14) ----: every frame evaluated, then a bounded wait for deliveries; their events (and those
  // of the last transitions) go out with the closing frame below.
  if (alerts_)
    alerts_->stop(SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(opts_.alert_delivery_timeout));
  // ---- end alerts
  run_.end_ms = wall_now_ms();
  PhaseTracker::Dropped markers_dropped;
  if (phases_ && acc_) {
    // Phases still open end with the run; markers after the last tick settle at it.
    Frame closing = phases_->finish(*run_.end_ms);
    if (sim_phases_) { // issue 29: the scenario's phases and work are the run's only if the command sent none
      if (!command_marked_.load()) {
        Frame sim = sim_phases_->finish(*run_.end_ms);
        closing.phases.insert(closing.phases.end(), std::make_move_iterator(sim_held_phases_.begin()),
                              std::make_move_iterator(sim_held_phases_.end()));
        closing.phases.insert(closing.phases.end(), std::make_move_iterator(sim.phases.begin()),
                              std::make_move_iterator(sim.phases.end()));
        closing.work.insert(closing.work.end(), std::make_move_iterator(sim_held_work_.begin()),
                            std::make_move_iterator(sim_held_work_.end()));
        closing.work.insert(closing.work.end(), std::make_move_iterator(sim.work.begin()),
                            std::make_move_iterator(sim.work.end()));
        if (sim_held_dropped_ > 0)
          acc_->add_event({0, *run_.end_ms, "markers-ignored", "simulate",
                           fmt::format("{} of the simulation's phases past the first {} were not kept",
                                       sim_held_dropped_, sim_held_phases_.size())});
      } else {
        acc_->add_event({0, *run_.end_ms, "simulate-markers", "simulate",
                         "the command sent phase and work markers of its own: the run's phases and work are "
                         "exactly those; the simulation's were left out (docs/simulate.md)"});
      }
    }
    // Markers that were not taken are said once, with the run, so a figure per phase is never silently partial.
    const int64_t rejected = markers_ ? markers_->stats().rejected.load() : 0;
    markers_dropped = phases_->dropped_counts();
    if (rejected > 0 || markers_dropped.total() > 0 || phases_->unmatched_ends() > 0)
      acc_->add_event({0, *run_.end_ms, "markers-ignored", "markers",
                       fmt::format("{} marker lines rejected (not markers: see the warnings), {} dropped (more than {} "
                                   "waiting for one tick, or {} phases open), {} 'end' without an open phase",
                                   rejected, markers_dropped.total(), PhaseTracker::kMaxPending,
                                   PhaseTracker::kMaxOpenPhases, phases_->unmatched_ends())});
    acc_->settle_events(closing);
    if (!closing.phases.empty() || !closing.work.empty() || !closing.events.empty()) {
      auto shared = std::make_shared<const Frame>(std::move(closing));
      for (auto& w : writers_)
        w->push(shared);
    }
  }
  run_.exit_status = exit_status;
  RunSummary s = acc_->summary();
  run_.samples = s.samples;
  run_.total_energy_j = s.total_energy_j();
  nlohmann::json summary = s.to_json();
  // issue 29/31: markers dropped by wattscope's caps make the run's work and phases incomplete; said wherever they
  // are read (runs/phase_view.cpp)
  if (markers_dropped.total() > 0)
    summary["markers"] = {{"dropped", markers_dropped.total()},
                          {"dropped_work", markers_dropped.work},
                          {"dropped_phase", markers_dropped.phase + markers_dropped.open_phases},
                          {"dropped_points", markers_dropped.points}};
  // Markers placed at their arrival (an older helper, or a time refused): their edges are up to a queue's delay late
  if (phases_ && phases_->at_arrival() > 0) summary["markers"]["at_arrival"] = phases_->at_arrival();
  run_.summary = summary.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // Every store drains side by side under one deadline; past it, rows go to a spill file (MySQL) and the run ends.
  const auto drain_deadline = SteadyClock::now() + opts_.drain_timeout;
  for (auto& w : writers_)
    w->begin_finish(run_);
  for (auto& w : writers_)
    all_stored_ = w->finish(run_, drain_deadline) && all_stored_;
  return run_;
}

std::vector<std::string> Session::store_names() const {
  std::vector<std::string> out;
  for (const auto& w : writers_)
    out.push_back(w->stored_text());
  return out;
}

} // namespace wattscope
