#include "pipeline/run_view.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/duration.hpp"
#include "core/text.hpp"
#include "core/time_util.hpp"

namespace wattscope {

namespace {
nlohmann::json parse_or_empty(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  return j.is_discarded() || !j.is_object() ? nlohmann::json::object() : j;
}
double num(const nlohmann::json& j, const char* key, double fallback = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}
bool has_num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number();
}
// ---- simulate (issue 19)
std::string scenario_of(const RunInfo& r) {
  const nlohmann::json tags = parse_or_empty(r.tags);
  auto it = tags.find("simulate_scenario");
  return it != tags.end() && it->is_string() ? it->get<std::string>() : std::string("?");
}
// ---- end simulate
} // namespace

bool simulated_run(const RunInfo& r) {
  const nlohmann::json tags = parse_or_empty(r.tags);
  auto it = tags.find("simulated");
  return it != tags.end() && it->is_string() && *it == "true";
}

namespace {
// From a summary parsed once: run_json and run_text take several figures from one parse (a runs page shows 50 runs).
EnergyMethod energy_method_of(const RunInfo& r, const nlohmann::json& s) {
  EnergyMethod m;
  auto method_of = [](const nlohmann::json& part) {
    auto it = part.find("energy_method");
    return it != part.end() && it->is_string() && !it->get<std::string>().empty() ? it->get<std::string>()
                                                                                  : std::string("unknown");
  };
  if (auto g = s.find("gpus"); g != s.end() && g->is_array())
    for (const auto& gpu : *g)
      if (gpu.is_object() && has_num(gpu, "energy_j") && has_num(gpu, "index"))
        m.devices.emplace_back(fmt::format("gpu{}", gpu["index"].get<int64_t>()), method_of(gpu));
  if (auto c = s.find("cpu"); c != s.end() && c->is_object()) {
    if (has_num(*c, "package_energy_j")) m.devices.emplace_back("cpu_package", method_of(*c));
    if (has_num(*c, "dram_energy_j")) m.devices.emplace_back("cpu_dram", method_of(*c));
  }
  // A run stored by a version without per-device summaries still has its total: its method is not known.
  if (m.devices.empty() && r.total_energy_j) m.devices.emplace_back("total", "unknown");
  return m;
}

std::optional<AttributedEnergy> attributed_energy_of(const nlohmann::json& s, const EnergyMethod& total) {
  auto a = s.find("attribution");
  if (a == s.end() || !a->is_object()) return std::nullopt;
  auto devices = a->find("devices");
  if (devices == a->end() || !devices->is_object()) return std::nullopt;
  AttributedEnergy out;
  bool any = false;
  for (const auto& [name, d] : devices->items()) {
    if (!d.is_object() || !has_num(d, "attributed_j")) continue;
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
  return energy_method_of(r, parse_or_empty(r.summary));
}

std::optional<AttributedEnergy> run_attributed_energy(const RunInfo& r) {
  const nlohmann::json s = parse_or_empty(r.summary);
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
  const nlohmann::json s = parse_or_empty(r.summary);
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
  j["skipped_ticks"] = s.value("skipped_ticks", 0);
  j["sampling"] = s.value("sampling", nlohmann::json()); // issue 18: null unless --idle-interval was given
  j["finished"] = r.end_ms.has_value();
  if (s.value("rebuilt_from_samples", false)) {
    // An unfinished run, or one `wattscope repair` finalised: its figures come from its stored samples.
    j["rebuilt_from_samples"] = true;
    if (!r.end_ms && has_num(s, "last_sample_ms")) {
      j["last_sample"] = iso_utc_ms(static_cast<int64_t>(num(s, "last_sample_ms")));
      j["duration_s"] = (num(s, "last_sample_ms") - static_cast<double>(r.start_ms)) / 1000.0;
    }
    if (s.contains("last_event")) j["last_event"] = s["last_event"];
  }
  j["cpu"] = s.value("cpu", nlohmann::json::object());
  j["gpus"] = s.value("gpus", nlohmann::json::array());
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
  j["events"] = s.value("events", 0);
  j["attribution"] = s.value("attribution", nlohmann::json()); // issue 13: null when no process was tracked
  j["tags"] = parse_or_empty(r.tags);
  j["simulated"] = simulated_run(r); // issue 19: true when its GPUs were simulated (--simulate)
  j["wattscope_version"] = r.version;
  return j;
}

std::string run_text(const RunInfo& r, const std::vector<std::string>& stores) {
  const nlohmann::json s = parse_or_empty(r.summary);
  std::string out = fmt::format("run {}  task {}", r.run_id, r.task);
  const bool rebuilt = s.value("rebuilt_from_samples", false);
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
  if (const auto tags = parse_or_empty(r.tags); tags.contains("mig") && tags["mig"].is_string())
    out += fmt::format("  MIG       {}\n            energy and power are per GPU: shared by all its MIG instances, "
                       "not measured per instance\n",
                       tags["mig"].get<std::string>());
  if (rebuilt && s.contains("last_event") && s["last_event"].is_string())
    out += fmt::format("  last event {}\n", s["last_event"].get<std::string>());
  if (!r.command.empty()) out += fmt::format("  command   {}\n", r.command);
  out += fmt::format("  host      {}{}\n", r.host, r.cpu_model.empty() ? "" : " · " + r.cpu_model);
  out += fmt::format("  started   {}\n", iso_utc_ms(r.start_ms));
  const int64_t skipped = s.value("skipped_ticks", int64_t{0});
  std::string duration = r.duration_s() ? fmt::format("{:.2f} s", *r.duration_s()) : "?";
  if (!r.end_ms && has_num(s, "last_sample_ms"))
    duration = fmt::format("at least {:.2f} s", (num(s, "last_sample_ms") - static_cast<double>(r.start_ms)) / 1000.0);
  out += fmt::format("  duration  {} · {} samples every {}{}\n", duration, r.samples,
                     format_duration(std::chrono::nanoseconds(static_cast<int64_t>(r.interval_ms * 1e6))),
                     skipped ? fmt::format(" ({} late ticks skipped)", skipped) : "");
  // ---- adaptive sampling (issue 18) ----
  const nlohmann::json sampling = s.value("sampling", nlohmann::json());
  const bool idle_stretches = sampling.is_object() && sampling.value("idle_stretches", int64_t{0}) > 0;
  if (idle_stretches)
    out += fmt::format("  sampling  {} idle stretch{} ({:.0f} s in all) sampled at {:g} s instead of {:g} s "
                       "(--idle-interval; a probe kept every {:g} s); energy counters span them\n",
                       sampling.value("idle_stretches", int64_t{0}),
                       sampling.value("idle_stretches", int64_t{0}) == 1 ? "" : "es", num(sampling, "idle_s"),
                       num(sampling, "idle_interval_s"), num(sampling, "interval_s"), num(sampling, "interval_s"));
  else if (sampling.is_object() && sampling.value("adaptive", false))
    out += fmt::format("  sampling  never idle for {:g} s: every sample at {:g} s (--idle-interval {:g} s unused)\n",
                       num(sampling, "idle_after_s"), num(sampling, "interval_s"), num(sampling, "idle_interval_s"));
  // ---- end adaptive sampling
  const auto cpu = s.value("cpu", nlohmann::json::object());
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
    line += fmt::format(" [{}]", cpu.value("energy_method", std::string()));
    if (has_num(cpu, "avg_package_power_w"))
      line += fmt::format(" · package avg {} peak {}", format_si(num(cpu, "avg_package_power_w"), "W"),
                          format_si(num(cpu, "peak_package_power_w"), "W"));
    out += line + "\n";
    std::string sockets;
    for (const auto& z : cpu.value("zones", nlohmann::json::array()))
      if (z.value("zone", std::string()) == "package" && z["socket"].is_number())
        sockets += fmt::format("{}socket {} {}", sockets.empty() ? "" : " · ", z["socket"].get<int>(),
                               format_si(num(z, "energy_j"), "J"));
    if (sockets.find(" · ") != std::string::npos) out += "            " + sockets + "\n";
  }
  for (const auto& g : s.value("gpus", nlohmann::json::array())) {
    std::string line = fmt::format("  GPU {:<5} {}", g.value("index", 0), g.value("name", std::string("?")));
    if (has_num(g, "energy_j"))
      line +=
          fmt::format(" · {} [{}{}]", format_energy(num(g, "energy_j")), g.value("energy_method", std::string()),
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
    if (g.value("lost", false)) line += " · LOST during the run";
    out += line + "\n";
  }
  // ---- attribution (issue 13) ----
  if (auto a = s.find("attribution"); a != s.end() && a->is_object() && a->contains("devices")) {
    for (const auto& [name, d] : (*a)["devices"].items()) {
      const double total = num(d, "measured_j");
      if (!(total > 0)) continue;
      const std::string dev = name == "cpu" ? "the CPU" : "GPU " + name.substr(3);
      const bool run_mode = !r.command.empty();
      // issue 29: energy no process took is `unattributed`; only the part the device's utilisation called idle is
      // `idle` (idle_j, a part of unattributed_j; stores from before it have none).
      const double idle = std::min(num(d, "idle_j"), num(d, "unattributed_j"));
      out += fmt::format(
          "  {:<9} {}: {} of {}'s {}, {:.1f} %; other processes {:.1f} %; unattributed {:.1f} %{} [{}]\n",
          name == "cpu" ? "CPU" : "GPU " + name.substr(3), run_mode ? "your processes" : "processes",
          format_energy(num(d, "attributed_j")), dev, format_energy(total), 100 * num(d, "attributed_j") / total,
          100 * num(d, "other_j") / total, 100 * (num(d, "unattributed_j") - idle) / total,
          idle > 0 ? fmt::format("; idle {:.1f} %", 100 * idle / total) : "", d.value("method", std::string()));
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
