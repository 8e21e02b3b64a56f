#include "runs/run_view.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/duration.hpp"
#include "core/stored_json.hpp"
#include "core/tag_filter.hpp"
#include "core/text.hpp"
#include "core/time_util.hpp"

namespace wattscope {

namespace {
// The run's tags and summary come from a store: read through core/stored_json, whose caps and typed reads keep a
// hostile row from crashing a view or throwing from it.
double num(const nlohmann::json& j, const char* key, double fallback = 0) {
  return json_number(j, key, fallback);
}
bool has_num(const nlohmann::json& j, const char* key) {
  return json_has_number(j, key);
}
// ---- simulate (issue 19)
std::string scenario_of(const RunInfo& r) {
  return json_string(run_tags_json(r), "simulate_scenario", "?");
}
// ---- end simulate
} // namespace

bool simulated_run(const RunInfo& r) {
  return json_string(run_tags_json(r), "simulated") == "true";
}

namespace {
// From a summary parsed once: run_json and run_text take several figures from one parse (a runs page shows 50 runs).
EnergyMethod energy_method_of(const RunInfo& r, const nlohmann::json& s) {
  EnergyMethod m;
  auto method_of = [](const nlohmann::json& part) {
    std::string m = json_string(part, "energy_method");
    return m.empty() ? std::string("unknown") : m;
  };
  if (const auto& g = json_member(s, "gpus"); g.is_array())
    for (const auto& gpu : g)
      if (const auto index = json_int(json_member(gpu, "index")); index && has_num(gpu, "energy_j"))
        m.devices.emplace_back(fmt::format("gpu{}", *index), method_of(gpu));
  if (const auto& c = json_member(s, "cpu"); c.is_object()) {
    if (has_num(c, "package_energy_j")) m.devices.emplace_back("cpu_package", method_of(c));
    if (has_num(c, "dram_energy_j")) m.devices.emplace_back("cpu_dram", method_of(c));
  }
  // A run stored by a version without per-device summaries still has its total: its method is not known.
  if (m.devices.empty() && r.total_energy_j) m.devices.emplace_back("total", "unknown");
  return m;
}

std::optional<AttributedEnergy> attributed_energy_of(const nlohmann::json& s, const EnergyMethod& total) {
  const auto& devices = json_member(json_member(s, "attribution"), "devices");
  if (!devices.is_object()) return std::nullopt;
  AttributedEnergy out;
  bool any = false;
  for (const auto& [name, d] : devices.items()) {
    if (!has_num(d, "attributed_j")) continue;
    out.joules += num(d, "attributed_j");
    out.measured_j += num(d, "measured_j");
    any = true;
  }
  if (!any) return std::nullopt;
  // Which devices had which method is the total's label to say; this one names the kind: "attributed (mixed)".
  std::string base = total.label();
  if (base.starts_with("mixed")) base = "mixed";
  out.method = base.empty() ? "attributed" : "attributed (" + base + ")";
  return out;
}
} // namespace

EnergyMethod run_energy_method(const RunInfo& r) {
  return energy_method_of(r, run_summary_json(r));
}

std::optional<AttributedEnergy> run_attributed_energy(const RunInfo& r) {
  const nlohmann::json s = run_summary_json(r);
  return attributed_energy_of(s, energy_method_of(r, s));
}

std::string EnergyMethod::label() const {
  std::vector<std::pair<std::string, std::string>> by_method; // method -> "gpu0, gpu1", in first-seen order
  for (const auto& part : devices) {
    auto it = std::find_if(by_method.begin(), by_method.end(), [&](const auto& p) { return p.first == part.second; });
    if (it == by_method.end())
      by_method.emplace_back(part.second, part.first);
    else
      it->second += ", " + part.first;
  }
  if (by_method.empty()) return "";
  if (by_method.size() == 1) return by_method.front().first;
  std::string out = "mixed (";
  for (size_t i = 0; i < by_method.size(); ++i)
    out += fmt::format("{}{}: {}", i ? "; " : "", by_method[i].first, by_method[i].second);
  return out + ")";
}

std::string EnergyMethod::devices_text() const {
  size_t gpus = 0;
  std::string one_gpu, rest;
  for (const auto& [device, method] : devices) {
    if (device.starts_with("gpu")) {
      ++gpus;
      one_gpu = "GPU " + device.substr(3);
    } else if (device == "cpu_package") {
      rest += " + CPU package";
    } else if (device == "cpu_dram") {
      rest += " + DRAM";
    } else {
      rest += " + devices not recorded";
    }
  }
  std::string out = gpus == 1 ? one_gpu : gpus > 1 ? fmt::format("{} GPUs", gpus) : "";
  if (out.empty() && !rest.empty()) return rest.substr(3);
  return out + rest;
}

std::string combine_method_labels(const std::vector<std::string>& labels, const std::string& what) {
  std::vector<std::pair<std::string, size_t>> counts;
  for (const auto& l : labels) {
    if (l.empty()) continue;
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& p) { return p.first == l; });
    if (it == counts.end())
      counts.emplace_back(l, 1);
    else
      ++it->second;
  }
  if (counts.empty()) return "";
  if (counts.size() == 1) return counts.front().first;
  std::string out = "mixed (";
  for (size_t i = 0; i < counts.size(); ++i)
    out += fmt::format("{}{}: {} {}{}", i ? "; " : "", counts[i].first, counts[i].second, what,
                       counts[i].second == 1 ? "" : "s");
  return out + ")";
}

nlohmann::json run_json(const RunInfo& r) {
  const nlohmann::json s = run_summary_json(r);
  nlohmann::json j;
  j["run_id"] = r.run_id;
  j["task"] = r.task;
  j["command"] = r.command;
  j["host"] = r.host;
  j["cpu_model"] = r.cpu_model;
  j["start"] = iso_utc_ms(r.start_ms);
  j["end"] = r.end_ms ? nlohmann::json(iso_utc_ms(*r.end_ms)) : nlohmann::json();
  j["duration_s"] = r.duration_s() ? nlohmann::json(*r.duration_s()) : nlohmann::json();
  j["exit_status"] = r.exit_status ? nlohmann::json(*r.exit_status) : nlohmann::json();
  j["samples"] = r.samples;
  j["interval_s"] = r.interval_ms / 1000.0;
  j["skipped_ticks"] = json_int(s, "skipped_ticks", 0);
  j["sampling"] = json_member(s, "sampling"); // issue 18: null unless --idle-interval was given
  j["finished"] = r.end_ms.has_value();
  if (json_bool(s, "rebuilt_from_samples", false)) {
    // An unfinished run, or one `wattscope repair` finalised: its figures come from its stored samples.
    j["rebuilt_from_samples"] = true;
    if (const auto last = json_int(json_member(s, "last_sample_ms")); !r.end_ms && last) {
      j["last_sample"] = iso_utc_ms(*last);
      j["duration_s"] = (static_cast<double>(*last) - static_cast<double>(r.start_ms)) / 1000.0;
    }
    if (s.contains("last_event")) j["last_event"] = s["last_event"];
  }
  const auto& cpu = json_member(s, "cpu");
  j["cpu"] = cpu.is_object() ? cpu : nlohmann::json::object();
  const auto& gpus = json_member(s, "gpus");
  j["gpus"] = gpus.is_array() ? gpus : nlohmann::json::array();
  j["total_energy_j"] = r.total_energy_j ? nlohmann::json(*r.total_energy_j) : nlohmann::json();
  { // issue 29: the total's method, and what it is the total of
    const EnergyMethod m = energy_method_of(r, s);
    j["energy_method"] = m.devices.empty() ? nlohmann::json() : nlohmann::json(m.label());
    nlohmann::json parts = nlohmann::json::object();
    for (const auto& [device, method] : m.devices)
      parts[device] = method;
    j["energy_devices"] = std::move(parts);
    // the run's own processes' share of that energy, beside it: null when no process was tracked
    const auto a = attributed_energy_of(s, m);
    j["attributed_energy_j"] = a ? nlohmann::json(a->joules) : nlohmann::json();
    j["attributed_energy_method"] = a ? nlohmann::json(a->method) : nlohmann::json();
  }
  j["events"] = json_int(s, "events", 0);
  j["attribution"] = json_member(s, "attribution"); // issue 13: null when no process was tracked
  j["tags"] = run_tags_json(r);
  j["simulated"] = simulated_run(r); // issue 19: true when its GPUs were simulated (--simulate)
  j["wattscope_version"] = r.version;
  return j;
}

std::string run_text(const RunInfo& r, const std::vector<std::string>& stores) {
  const nlohmann::json s = run_summary_json(r);
  std::string out = fmt::format("run {}  task {}", r.run_id, r.task);
  const bool rebuilt = json_bool(s, "rebuilt_from_samples", false);
  if (r.exit_status)
    out += fmt::format("  exit {}", *r.exit_status);
  else if (!r.end_ms)
    out += "  (not finished: still running, or wattscope was killed)";
  out += "\n";
  if (rebuilt && !r.end_ms) {
    out += fmt::format("  status    not finished: still recording, or wattscope was stopped before it could finalise "
                       "the run; the figures below are rebuilt from its {} stored samples. If it is not running, "
                       "'wattscope repair {}' finalises it.\n",
                       r.samples, r.run_id);
  } else if (rebuilt) {
    out += "  status    finalised by 'wattscope repair' from its stored samples (exit status unknown)\n";
  }
  if (simulated_run(r)) // issue 19
    out += fmt::format("  SIMULATED the GPUs of this run are simulated (--simulate, scenario {}): their figures, and "
                       "totals that include them, are not measurements\n",
                       scenario_of(r));
  // issue 17: where MIG was on, the GPU figures are the whole GPU's (NVML measures power per GPU, not per instance)
  const nlohmann::json tags = run_tags_json(r);
  if (const auto& mig = json_member(tags, "mig"); mig.is_string())
    out += fmt::format("  MIG       {}\n            energy and power are per GPU: shared by all its MIG instances, "
                       "not measured per instance\n",
                       mig.get<std::string>());
  if (const auto& last_event = json_member(s, "last_event"); rebuilt && last_event.is_string())
    out += fmt::format("  last event {}\n", last_event.get<std::string>());
  if (!r.command.empty()) out += fmt::format("  command   {}\n", r.command);
  out += fmt::format("  host      {}{}\n", r.host, r.cpu_model.empty() ? "" : " · " + r.cpu_model);
  out += fmt::format("  started   {}\n", iso_utc_ms(r.start_ms));
  const int64_t skipped = json_int(s, "skipped_ticks", 0);
  // Seconds as measured, and a long run's length as a person reads it ("86390.00 s (23 h 59 min 50 s)").
  auto seconds = [](double sec) {
    // A stored duration is any number: only a real run's length (under ~30,000 years) is cut into hours.
    if (!(sec >= 120 && sec < 1e12)) return fmt::format("{:.2f} s", sec);
    const auto whole = static_cast<int64_t>(sec);
    const int64_t h = whole / 3600, m = whole / 60 % 60, rest = whole % 60;
    return fmt::format("{:.2f} s ({})", sec,
                       h ? fmt::format("{} h {:02} min {:02} s", h, m, rest) : fmt::format("{} min {:02} s", m, rest));
  };
  std::string duration = r.duration_s() ? seconds(*r.duration_s()) : "?";
  if (!r.end_ms && has_num(s, "last_sample_ms"))
    duration = "at least " + seconds((num(s, "last_sample_ms") - static_cast<double>(r.start_ms)) / 1000.0);
  out += fmt::format("  duration  {} · {} samples every {}{}\n", duration, r.samples,
                     format_duration(std::chrono::nanoseconds(static_cast<int64_t>(r.interval_ms * 1e6))),
                     skipped ? fmt::format(" ({} late ticks skipped)", skipped) : "");
  // ---- adaptive sampling (issue 18) ----
  const nlohmann::json& sampling = json_member(s, "sampling");
  const int64_t stretches = json_int(sampling, "idle_stretches", 0);
  const bool idle_stretches = stretches > 0;
  if (idle_stretches)
    out += fmt::format("  sampling  {} idle stretch{} ({:.0f} s in all) sampled at {:g} s instead of {:g} s "
                       "(--idle-interval; a probe kept every {:g} s); energy counters span them\n",
                       stretches, stretches == 1 ? "" : "es", num(sampling, "idle_s"), num(sampling, "idle_interval_s"),
                       num(sampling, "interval_s"), num(sampling, "interval_s"));
  else if (json_bool(sampling, "adaptive", false))
    out += fmt::format("  sampling  never idle for {:g} s: every sample at {:g} s (--idle-interval {:g} s unused)\n",
                       num(sampling, "idle_after_s"), num(sampling, "interval_s"), num(sampling, "idle_interval_s"));
  // ---- end adaptive sampling
  const nlohmann::json& cpu = json_member(s, "cpu");
  std::string cpu_line = "  CPU      ";
  cpu_line += has_num(cpu, "avg_util_pct") ? fmt::format(" util avg {:.1f} % · peak {:.1f} %", num(cpu, "avg_util_pct"),
                                                         num(cpu, "peak_util_pct"))
                                           : " util not measured";
  if (has_num(cpu, "peak_mem_used_bytes"))
    cpu_line += fmt::format(" · memory peak {} of {}", format_bytes(num(cpu, "peak_mem_used_bytes")),
                            format_bytes(num(cpu, "mem_total_bytes")));
  out += cpu_line + "\n";
  if (has_num(cpu, "energy_j")) {
    std::string line = fmt::format("  CPU power package {}", format_energy(num(cpu, "package_energy_j")));
    if (has_num(cpu, "dram_energy_j")) line += fmt::format(" · DRAM {}", format_energy(num(cpu, "dram_energy_j")));
    line += fmt::format(" [{}]", json_string(cpu, "energy_method"));
    if (has_num(cpu, "avg_package_power_w"))
      line += fmt::format(" · package avg {} peak {}", format_si(num(cpu, "avg_package_power_w"), "W"),
                          format_si(num(cpu, "peak_package_power_w"), "W"));
    out += line + "\n";
    std::string sockets;
    if (const auto& zones = json_member(cpu, "zones"); zones.is_array())
      for (const auto& z : zones)
        if (const auto socket = json_int(json_member(z, "socket")); socket && json_string(z, "zone") == "package")
          sockets +=
              fmt::format("{}socket {} {}", sockets.empty() ? "" : " · ", *socket, format_si(num(z, "energy_j"), "J"));
    if (sockets.find(" · ") != std::string::npos) out += "            " + sockets + "\n";
  }
  const auto& gpus = json_member(s, "gpus");
  for (const auto& g : gpus.is_array() ? gpus : nlohmann::json::array()) {
    std::string line = fmt::format("  GPU {:<5} {}", json_int(g, "index", 0), json_string(g, "name", "?"));
    if (has_num(g, "energy_j"))
      line +=
          fmt::format(" · {} [{}{}]", format_energy(num(g, "energy_j")), json_string(g, "energy_method"),
                      // issue 18: an integral over idle stretches is coarser, and says so
                      idle_stretches && has_num(g, "max_integration_step_s")
                          ? fmt::format(", steps up to {:.0f} s in idle stretches", num(g, "max_integration_step_s"))
                          : std::string());
    else
      line += " · energy not measured";
    if (has_num(g, "avg_power_w"))
      line += fmt::format(" · power avg {} peak {}", format_si(num(g, "avg_power_w"), "W"),
                          format_si(num(g, "peak_power_w"), "W"));
    if (has_num(g, "avg_util_pct")) line += fmt::format(" · util {:.1f} %", num(g, "avg_util_pct"));
    if (has_num(g, "peak_mem_used_bytes"))
      line += fmt::format(" · mem peak {}", format_bytes(num(g, "peak_mem_used_bytes")));
    if (json_bool(g, "lost", false)) line += " · LOST during the run";
    out += line + "\n";
  }
  // ---- attribution (issue 13) ----
  if (const auto& devices = json_member(json_member(s, "attribution"), "devices"); devices.is_object()) {
    for (const auto& [name, d] : devices.items()) {
      const double total = num(d, "measured_j");
      if (!(total > 0)) continue;
      // "gpu0" is GPU 0; a name the store made up is shown as it is
      const std::string gpu = name.starts_with("gpu") ? "GPU " + name.substr(3) : name;
      const std::string dev = name == "cpu" ? "the CPU" : gpu;
      const bool run_mode = !r.command.empty();
      // issue 29: energy no process took is `unattributed`; only the part the device's utilisation called idle is
      // `idle` (idle_j, a part of unattributed_j; stores from before it have none).
      const double idle = std::min(num(d, "idle_j"), num(d, "unattributed_j"));
      out += fmt::format(
          "  {:<9} {}: {} of {}'s {}, {:.1f} %; other processes {:.1f} %; unattributed {:.1f} %{} [{}]\n",
          name == "cpu" ? "CPU" : gpu, run_mode ? "your processes" : "processes", format_energy(num(d, "attributed_j")),
          dev, format_energy(total), 100 * num(d, "attributed_j") / total, 100 * num(d, "other_j") / total,
          100 * (num(d, "unattributed_j") - idle) / total,
          idle > 0 ? fmt::format("; idle {:.1f} %", 100 * idle / total) : "", json_string(d, "method"));
    }
  }
  // ---- end attribution ----
  if (r.total_energy_j) {
    // issue 29: the total names the devices that measured it, and how, never the ones that did not
    const EnergyMethod m = energy_method_of(r, s);
    out +=
        fmt::format("  energy    {} total ({}) [{}]\n", format_energy(*r.total_energy_j), m.devices_text(), m.label());
    if (const auto a = attributed_energy_of(s, m); a && a->measured_j > 0)
      out += fmt::format("            {}: {} of those devices' {}, {:.1f} % [{}]\n",
                         r.command.empty() ? "tracked processes" : "your processes", format_energy(a->joules),
                         format_si(a->measured_j, "J"), 100 * a->joules / a->measured_j, a->method);
  } else
    out += "  energy    not measured (no GPU or power counter found; 'wattscope doctor' says why)\n";
  if (!stores.empty()) {
    std::string joined;
    for (const auto& st : stores)
      joined += (joined.empty() ? "" : " · ") + st;
    out += fmt::format("  stored    {}\n", joined);
  }
  return out;
}

std::string runs_table(const std::vector<RunInfo>& runs) {
  std::string out = fmt::format("{:<26} {:<24} {:<20} {:>10} {:>8} {:>5} {:>12}  {}\n", "RUN", "TASK", "START (UTC)",
                                "DURATION", "SAMPLES", "EXIT", "ENERGY", "METHOD");
  for (const auto& r : runs) {
    std::string task = r.task.size() > 24 ? r.task.substr(0, 23) + "…" : r.task;
    std::string start = iso_utc_ms(r.start_ms).substr(0, 19);
    start[10] = ' ';
    // issue 29: never a bare energy: its method (which says "simulated" for --simulate's GPUs) beside it
    const std::string method = r.total_energy_j ? run_energy_method(r).label() : "-";
    out += fmt::format("{:<26} {:<24} {:<20} {:>10} {:>8} {:>5} {:>12}  {}\n", r.run_id, task, start,
                       r.duration_s() ? fmt::format("{:.1f} s", *r.duration_s()) : "running?", r.samples,
                       r.exit_status ? std::to_string(*r.exit_status) : "-",
                       r.total_energy_j ? format_si(*r.total_energy_j, "J") : "-", method);
  }
  return out;
}

} // namespace wattscope
