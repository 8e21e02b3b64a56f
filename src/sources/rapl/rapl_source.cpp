#include "sources/rapl/rapl_source.hpp"

#include "core/thread_name.hpp"
#include "sources/sysfs_util.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace wattscope {

namespace fs = std::filesystem;

namespace {

// Assumed worst case when a zone does not publish its maximum power: generous for any single socket or DIMM set.
constexpr double kAssumedMaxPowerW = 1000.0;

} // namespace

std::string rapl_permission_fix(const std::string& sysfs_root) {
  const std::string base = sysfs_root + "/class/powercap";
  return fmt::format(
      "RAPL energy counters are readable by root only on most kernels (since the 2020 PLATYPUS fix). "
      "To let wattscope read them without root: until the next reboot, "
      "'sudo chmod a+r {0}/intel-rapl:*/energy_uj {0}/intel-rapl:*/intel-rapl:*/energy_uj'; "
      "at every boot, add the tmpfiles lines 'z {0}/intel-rapl:*/energy_uj 0444 - - -' and "
      "'z {0}/intel-rapl:*/intel-rapl:*/energy_uj 0444 - - -' to /etc/tmpfiles.d/wattscope-rapl.conf "
      "(or mode 0440 with a group of trusted users in place of '-', to keep the side channel closed to others)",
      base);
}

RaplSource::RaplSource(std::string sysfs_root, std::chrono::nanoseconds interval, bool estimate_asked)
    : root_(std::move(sysfs_root)), interval_(interval), estimate_asked_(estimate_asked) {}

RaplSource::~RaplSource() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (keeper_.joinable()) keeper_.join();
} // each zone closes its own file

bool RaplSource::open() {
  const fs::path base = fs::path(root_) / "class/powercap";
  std::error_code ec;
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(base, ec)) {
    const std::string n = e.path().filename().string();
    if (sysfs::rapl_zone_dir(n)) dirs.push_back(n);
  }
  // Also the sub-zones that are only nested inside their package directory (sysfs lists them flat under the class
  // directory too, but a copied tree may not).
  for (const auto& d : std::vector<std::string>(dirs))
    for (const auto& e : fs::directory_iterator(base / d, ec)) {
      const std::string n = e.path().filename().string();
      if (sysfs::rapl_zone_dir(n) && std::find(dirs.begin(), dirs.end(), n) == dirs.end()) dirs.push_back(n);
    }
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty()) {
    status_ = SourceStatus::missing(
        fmt::format("no RAPL zones under {} (not an Intel/AMD CPU with powercap, or a virtual machine); {}",
                    base.string(),
                    estimate_asked_ ? "CPU power is estimated from --cpu-tdp instead (TDP x utilisation, labelled "
                                      "estimated)"
                                    : "CPU power is not recorded unless --cpu-tdp WATTS asks for an estimate"),
        estimate_asked_ ? "" // nothing to fix: the estimate asked for stands in
                        : "RAPL is absent on this CPU or hidden by the hypervisor; 'wattscope run --cpu-tdp WATTS' "
                          "records a utilisation-based estimate, labelled as such");
    return false;
  }
  for (const auto& d : dirs) {
    Zone z;
    z.domain = d;
    const auto [pkg, subzone] = *sysfs::rapl_zone_dir(d);
    const bool sub = subzone >= 0;
    z.path =
        (sub && !fs::exists(base / d)) ? (base / fmt::format("intel-rapl:{}", pkg) / d).string() : (base / d).string();
    z.raw_name = sysfs::read_line(z.path + "/name");
    if (z.raw_name.empty()) z.raw_name = d;
    if (z.raw_name.rfind("package", 0) == 0) {
      z.zone = "package";
      // "package-1" (and "package-0-die-1" on multi-die parts): the number after "package-" is the socket.
      std::string digits;
      for (char c : z.raw_name.substr(8)) {
        if (c < '0' || c > '9') break;
        digits.push_back(c);
      }
      if (auto v = sysfs::parse_i64(digits)) z.socket = *v;
    } else {
      z.zone = z.raw_name; // core, uncore, dram, psys
    }
    if (auto v = sysfs::parse_i64(sysfs::read_line(z.path + "/max_energy_range_uj"))) z.max_range_uj = *v;
    for (int c = 0; c < 4; ++c) {
      auto v = sysfs::parse_i64(sysfs::read_line(fmt::format("{}/constraint_{}_max_power_uw", z.path, c)));
      if (v && *v > 0) z.max_power_w = std::max(z.max_power_w, static_cast<double>(*v) / 1e6);
    }
    z.fd.reset(::open((z.path + "/energy_uj").c_str(), O_RDONLY | O_CLOEXEC));
    std::optional<int64_t> raw;
    if (!z.fd) {
      z.problem = errno == EACCES || errno == EPERM ? "no permission" : std::string("missing: ") + std::strerror(errno);
    } else if (!(raw = sysfs::pread_i64(z.fd))) {
      z.problem = errno == EACCES || errno == EPERM ? "no permission" : "unreadable energy_uj";
      z.fd.reset();
    } else {
      z.last_raw = *raw;
    }
    zones_.push_back(std::move(z));
  }
  // Sub-zones inherit their package's socket.
  for (auto& z : zones_) {
    if (z.socket || std::count(z.domain.begin(), z.domain.end(), ':') != 2) continue;
    const std::string parent = z.domain.substr(0, z.domain.rfind(':'));
    for (const auto& p : zones_)
      if (p.domain == parent) z.socket = p.socket;
  }
  size_t readable = 0, denied = 0;
  for (const auto& z : zones_) {
    readable += z.problem.empty();
    denied += z.problem == "no permission";
  }
  if (readable == 0) {
    status_ = denied ? SourceStatus::no_permission(
                           fmt::format("{} RAPL zones found but energy_uj is not readable", zones_.size()),
                           rapl_permission_fix(root_))
                     : SourceStatus::missing(fmt::format("{} RAPL zones found, none readable", zones_.size()),
                                             "check the powercap files under the --sysfs-root given");
    return false;
  }
  // Two wraps between reads would be invisible: read at least four times per wrap period at maximum power.
  std::chrono::nanoseconds safe = std::chrono::hours(24);
  for (const auto& z : zones_) {
    if (!z.problem.empty() || z.max_range_uj <= 0) continue;
    const double p = z.max_power_w > 0 ? z.max_power_w : kAssumedMaxPowerW;
    const double wrap_s = static_cast<double>(z.max_range_uj) / 1e6 / p;
    safe = std::min(safe, std::chrono::nanoseconds(static_cast<int64_t>(wrap_s / 4 * 1e9)));
  }
  safe = std::max<std::chrono::nanoseconds>(safe, std::chrono::milliseconds(10));
  if (interval_ > safe) {
    keeper_period_ = safe;
    keeper_ = std::thread([this] {
      name_this_thread("ws-rapl-keeper");
      keeper_loop();
    });
  }
  status_ = SourceStatus::ok(fmt::format("{} of {} RAPL zones readable", readable, zones_.size()), true);
  if (denied) {
    status_.detail += fmt::format(" ({} not readable)", denied);
    status_.fix = rapl_permission_fix(root_);
  }
  if (keeper_period_.count())
    status_.detail += fmt::format("; counters also read every {} ms so no wrap is missed",
                                  std::chrono::duration_cast<std::chrono::milliseconds>(keeper_period_).count());
  return true;
}

void RaplSource::poll_locked() {
  for (auto& z : zones_) {
    const auto read = sysfs::pread_i64(z.fd);
    if (!read) continue;
    const int64_t raw = *read;
    int64_t delta = raw - z.last_raw;
    if (delta < 0) {
      // The counter wrapped at max_energy_range_uj (or, without a range, restarted): count what it ran past.
      delta = z.max_range_uj > 0 ? delta + z.max_range_uj : raw;
      ++z.wraps;
    }
    z.total_uj += delta;
    z.last_raw = raw;
  }
}

void RaplSource::keeper_loop() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, keeper_period_, [this] { return stop_; }))
    poll_locked();
}

void RaplSource::sample(Frame& frame) noexcept {
  try {
    std::lock_guard lock(mu_);
    poll_locked();
    double pkg_w = 0, dram_w = 0, pkg_j = 0, dram_j = 0;
    bool any_pkg = false, any_dram = false, pkg_w_ok = true, dram_w_ok = true;
    frame.cpu.zones.reserve(zones_.size());
    for (auto& z : zones_) {
      if (!z.fd) continue;
      PowerZoneSample s;
      s.zone = z.zone;
      s.domain = z.domain;
      s.socket = z.socket;
      s.energy_j = static_cast<double>(z.total_uj) / 1e6;
      if (z.prev_tick_uj >= 0) {
        const double dt = std::chrono::duration<double>(frame.mono - z.prev_tick).count();
        if (dt > 0) s.power_w = static_cast<double>(z.total_uj - z.prev_tick_uj) / 1e6 / dt;
      }
      z.prev_tick_uj = z.total_uj;
      z.prev_tick = frame.mono;
      if (z.zone == "package") {
        any_pkg = true;
        pkg_j += *s.energy_j;
        if (s.power_w)
          pkg_w += *s.power_w;
        else
          pkg_w_ok = false;
      } else if (z.zone == "dram") {
        any_dram = true;
        dram_j += *s.energy_j;
        if (s.power_w)
          dram_w += *s.power_w;
        else
          dram_w_ok = false;
      }
      frame.cpu.zones.push_back(s);
    }
    if (any_pkg) {
      frame.cpu.package_energy_j = pkg_j;
      if (pkg_w_ok) frame.cpu.package_power_w = pkg_w;
      frame.cpu.power_method = "counter";
    }
    if (any_dram) {
      frame.cpu.dram_energy_j = dram_j;
      if (dram_w_ok) frame.cpu.dram_power_w = dram_w;
    }
  } catch (...) {
  }
}

nlohmann::json RaplSource::report() const {
  nlohmann::json zs = nlohmann::json::array();
  for (const auto& z : zones_)
    zs.push_back({{"domain", z.domain},
                  {"zone", z.zone},
                  {"name", z.raw_name},
                  {"socket", z.socket ? nlohmann::json(*z.socket) : nlohmann::json()},
                  {"readable", z.problem.empty()},
                  {"status", z.problem.empty() ? "ok" : z.problem},
                  {"max_energy_range_uj", z.max_range_uj}});
  return zs;
}

std::vector<std::string> RaplSource::doctor_lines() const {
  std::vector<std::string> out;
  for (const auto& z : zones_)
    out.push_back(fmt::format("{} {}{} · {}", z.domain, z.raw_name,
                              z.socket ? fmt::format(" (socket {})", *z.socket) : "",
                              z.problem.empty() ? "ok" : z.problem));
  return out;
}

void CpuEstimateSource::sample(Frame& f) noexcept {
  if (f.cpu.package_power_w || f.cpu.package_energy_j || !f.cpu.util_pct) return; // measured wins; no util, no guess
  const double w = tdp_w_ * *f.cpu.util_pct / 100.0;
  energy_j_ += w * std::max(0.0, std::chrono::duration<double>(f.mono - last_).count());
  last_ = f.mono;
  f.cpu.package_power_w = w;
  f.cpu.package_energy_j = energy_j_;
  f.cpu.power_method = "estimated";
}

SourceStatus CpuEstimateSource::status() const {
  // An estimate is not a measurement: measures_power stays false.
  return SourceStatus::ok(
      fmt::format("estimated: CPU package power = {} W TDP x utilisation, used only where RAPL measures nothing",
                  tdp_w_),
      false);
}

} // namespace wattscope
