#include "cli/doctor.hpp"

#include <fmt/format.h>

#include "cli/session.hpp"
#include "sources/rapl/rapl_source.hpp"

namespace wattscope {

namespace {

std::string fix_for(std::string_view source, const std::string& state, const std::string& detail,
                    const SessionOptions& opts) {
  if (state == "ok") return {};
  if (source == "procfs") return "point --procfs-root at the host's /proc (in a container: mount it read-only)";
  if (source == "rapl") {
    if (state == "no permission") return rapl_permission_fix(opts.sysfs_root);
    return "RAPL is absent on this CPU or hidden by the hypervisor; 'wattscope run --cpu-tdp WATTS' records a "
           "utilisation-based estimate, labelled as such";
  }
  if (source == "nvml") {
    if (detail.find("DRIVER_NOT_LOADED") != std::string::npos)
      return "load the NVIDIA kernel driver ('sudo modprobe nvidia', or reboot after installing it)";
    if (detail.find("lacks required") != std::string::npos)
      return "update the NVIDIA driver; this libnvidia-ml is older than wattscope supports";
    if (detail.find("selected") != std::string::npos) return "check CUDA_VISIBLE_DEVICES or pass --gpus all";
    if (detail.find("found no NVIDIA GPU") != std::string::npos) return "none needed unless this machine has one";
    return "on a machine with an NVIDIA GPU, install its driver (Debian: nvidia-driver, which provides "
           "libnvidia-ml.so.1) or set WATTSCOPE_NVML_LIBRARY to the library's path";
  }
  if (source == "hwmon-gpu")
    return "none needed unless this machine has an AMD or Intel GPU; then load its kernel driver (amdgpu, i915 or xe)";
  return {};
}

} // namespace

nlohmann::json doctor_report(const SessionOptions& opts) {
  nlohmann::json sources = nlohmann::json::array();
  bool measurable = false;
  std::vector<std::string> measuring;
  auto all = make_sources(opts);
  std::vector<Source*> opened;
  std::vector<std::pair<Source*, nlohmann::json*>> entries;
  for (auto& s : all) {
    const bool ok = s->open();
    const std::string status = s->status();
    const auto colon = status.find(':');
    std::string state = ok ? "ok" : (colon == std::string::npos ? "missing" : status.substr(0, colon));
    if (state != "ok" && state != "missing" && state != "no permission") state = ok ? "ok" : "missing";
    std::string detail = colon == std::string::npos ? status : status.substr(colon + 1);
    while (!detail.empty() && detail.front() == ' ')
      detail.erase(detail.begin());
    if (state == "no permission" && detail.find(". RAPL energy") != std::string::npos)
      detail = detail.substr(0, detail.find(". RAPL energy")); // the fix has its own field
    sources.push_back(
        {{"name", s->name()}, {"status", state}, {"detail", detail}, {"fix", fix_for(s->name(), state, status, opts)}});
    if (ok) opened.push_back(s.get());
  }
  // One tick: NVML probes each metric (NOT_SUPPORTED switches it off), RAPL and hwmon read their files.
  Frame f;
  f.mono = SteadyClock::now();
  for (auto* s : opened)
    s->sample(f);
  for (size_t i = 0; i < all.size(); ++i) {
    auto& entry = sources[i];
    entry["details"] = all[i]->report();
    if (entry["status"] != "ok") continue;
    const std::string name(all[i]->name());
    bool power = false;
    if (name == "rapl") power = true;
    if (name == "nvml" || name == "hwmon-gpu") {
      for (const auto& g : f.gpus)
        power = power || g.power_w.has_value();
    }
    if (power) {
      measurable = true;
      measuring.push_back(name);
    }
  }
  return {{"sources", sources}, {"power_measurable", measurable}, {"power_sources", measuring}};
}

std::string doctor_text(const nlohmann::json& r) {
  std::string out = "wattscope doctor: what this machine can measure\n\n";
  for (const auto& s : r["sources"]) {
    out += fmt::format("  {:<10} {:<14} {}\n", s["name"].get<std::string>(), s["status"].get<std::string>(),
                       s["detail"].get<std::string>());
    const auto& d = s["details"];
    if (s["name"] == "nvml" && d.is_object() && s["status"] == "ok") {
      out +=
          fmt::format("  {:<10} {:<14} library {} · driver {} · NVML {}\n", "", "", d.value("library", std::string()),
                      d.value("driver_version", std::string()), d.value("nvml_version", std::string()));
      for (const auto& g : d.value("devices", nlohmann::json::array())) {
        std::string off;
        for (const auto& [metric, on] : g["metrics"].items())
          if (!on.get<bool>()) off += (off.empty() ? "" : ", ") + metric;
        out += fmt::format("  {:<10} {:<14} GPU {} {} {} · not supported: {}\n", "", "", g["index"].get<int>(),
                           g["name"].get<std::string>(), g["uuid"].get<std::string>(), off.empty() ? "none" : off);
      }
    } else if (s["name"] == "rapl" && d.is_array()) {
      for (const auto& z : d)
        out += fmt::format("  {:<10} {:<14} {} {}{} · {}\n", "", "", z["domain"].get<std::string>(),
                           z["name"].get<std::string>(),
                           z["socket"].is_null() ? "" : fmt::format(" (socket {})", z["socket"].get<int>()),
                           z["status"].get<std::string>());
    } else if (s["name"] == "hwmon-gpu" && d.is_array()) {
      for (const auto& g : d)
        out += fmt::format("  {:<10} {:<14} {} {} ({})\n", "", "", g["card"].get<std::string>(),
                           g["name"].get<std::string>(), g["vendor"].get<std::string>());
    }
    if (!s["fix"].get<std::string>().empty())
      out += fmt::format("  {:<10} {:<14} fix: {}\n", "", "", s["fix"].get<std::string>());
  }
  std::string which;
  for (const auto& n : r["power_sources"])
    which += (which.empty() ? "" : ", ") + n.get<std::string>();
  out += r["power_measurable"].get<bool>()
             ? fmt::format("\npower: measurable here ({})\n", which)
             : "\npower: nothing here measures power; runs record utilisation and memory only (see the fixes above)\n";
  return out;
}

} // namespace wattscope
