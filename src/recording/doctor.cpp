#include "recording/doctor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/lazy/lazy_lib.hpp"
#include "recording/session.hpp"
#include "recording/sources.hpp"

namespace wattscope {

DoctorReport doctor_report(const SessionOptions& opts) {
  auto all = make_sources(opts);
  std::vector<bool> opened;
  std::vector<size_t> released(all.size(), 0);
  std::vector<std::string> claimed; // as a session does: a GPU a richer backend opened first is not listed again
  for (size_t i = 0; i < all.size(); ++i) {
    opened.push_back(all[i]->open());
    if (!opened.back()) continue;
    released[i] = all[i]->release_claimed(claimed);
    for (const auto& d : all[i]->devices())
      if (!d.pci_bus_id.empty()) claimed.push_back(normalize_pci_bus_id(d.pci_bus_id));
  }
  // One tick: NVML probes each call (NOT_SUPPORTED switches it off), RAPL and hwmon read their files. Whether a
  // source measures power is asked after it.
  Frame f;
  f.mono = SteadyClock::now();
  for (size_t i = 0; i < all.size(); ++i)
    if (opened[i]) all[i]->sample(f);
  // issue 33: doctor -v prints what each call costs here, timed over a source's first five reads: four more ticks.
  for (int k = 1; k < 5 && spdlog::should_log(spdlog::level::debug); ++k) {
    Frame more;
    more.tick = k;
    more.mono = SteadyClock::now();
    for (size_t i = 0; i < all.size(); ++i)
      if (opened[i]) all[i]->sample(more);
  }

  DoctorReport r;
  nlohmann::json sources = nlohmann::json::array();
  std::vector<std::string> measuring;
  std::string text = "wattscope doctor: what this machine can measure\n\n";
  for (size_t i = 0; i < all.size(); ++i) {
    const Source& s = *all[i];
    const SourceStatus st = s.status();
    const std::string name(s.name());
    sources.push_back(
        {{"name", name}, {"status", st.state_name()}, {"detail", st.detail}, {"fix", st.fix}, {"details", s.report()}});
    // A source whose every GPU a richer backend records measures nothing of its own here.
    const bool all_released = released[i] > 0 && s.devices().empty();
    if (opened[i] && st.is_ok() && st.measures_power && !all_released) measuring.push_back(name);
    text += fmt::format("  {:<10} {:<14} {}\n", name, st.state_name(), st.detail);
    if (released[i])
      text += fmt::format("  {:<10} {:<14} {} GPU(s) left to the backend above that records them (same PCI bus id)\n",
                          "", "", released[i]);
    if (opened[i])
      for (const auto& line : s.doctor_lines())
        text += fmt::format("  {:<10} {:<14} {}\n", "", "", line);
    if (!st.fix.empty()) text += fmt::format("  {:<10} {:<14} fix: {}\n", "", "", st.fix);
  }
  std::string which;
  for (const auto& n : measuring)
    which += (which.empty() ? "" : ", ") + n;
  text += !measuring.empty()
              ? fmt::format("\npower: measurable here ({})\n", which)
              : "\npower: nothing here measures power; runs record utilisation and memory only (see the fixes above)\n";
  // Libraries only some features need, opened on first use rather than at start (core/lazy/lazy_lib.hpp).
  struct Lib {
    const char* name;
    lazy::Library& lib;
    const char* used_by;
  };
  std::vector<Lib> libs{
      {"libcurl", lazy::curl(), "alerts (webhook, e-mail, Alertmanager), top --connect, pod names from the kubelet"}};
#ifdef WATTSCOPE_HAVE_MYSQL
  libs.push_back({"libmariadb", lazy::mariadb(), "the MySQL/MariaDB store (--db mysql://...)"});
#endif
  nlohmann::json libraries = nlohmann::json::array();
  text += "\nlibraries opened only when a feature needs them:\n";
  for (const auto& l : libs) {
    const bool ok = l.lib.available();
    libraries.push_back({{"name", l.name}, {"available", ok}, {"used_by", l.used_by}, {"fix", l.lib.error()}});
    text += fmt::format("  {:<10} {:<14} {}\n", l.name, ok ? "ok" : "missing", l.used_by);
    if (!ok) text += fmt::format("  {:<10} {:<14} fix: {}\n", "", "", l.lib.error());
  }
  r.json = {{"sources", sources},
            {"power_measurable", !measuring.empty()},
            {"power_sources", measuring},
            {"libraries", libraries}};
  r.text = std::move(text);
  return r;
}

} // namespace wattscope
