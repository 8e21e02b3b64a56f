#include "sources/hwmon/hwmon_gpu_source.hpp"

#include "sources/sysfs_util.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace wattscope {

namespace fs = std::filesystem;

namespace {

std::string uevent_value(const fs::path& uevent, const std::string& key) {
  std::ifstream in(uevent);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
  return {};
}

UniqueFd open_if(const fs::path& p) {
  return UniqueFd(fs::exists(p) ? ::open(p.c_str(), O_RDONLY | O_CLOEXEC) : -1);
}

} // namespace

HwmonGpuSource::~HwmonGpuSource() = default; // each Card closes its own files

bool HwmonGpuSource::open() {
  const fs::path drm = fs::path(root_) / "class/drm";
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(drm, ec)) {
    const std::string n = e.path().filename().string();
    if (const auto num = sysfs::numbered(n, "card")) found.emplace_back(*num, n);
  }
  std::sort(found.begin(), found.end());
  for (const auto& [num, name] : found) {
    const fs::path dev = drm / name / "device";
    std::string driver = uevent_value(dev / "uevent", "DRIVER");
    if (driver.empty() && fs::is_symlink(dev / "driver", ec)) driver = fs::read_symlink(dev / "driver", ec).filename();
    Card c;
    c.card = name;
    if (driver == "amdgpu")
      c.info.vendor = "amd";
    else if (driver == "i915" || driver == "xe")
      c.info.vendor = "intel";
    else
      continue; // nvidia (NVML's), simpledrm, virtio, ...
    c.info.gpu_index = num;
    const std::string slot = uevent_value(dev / "uevent", "PCI_SLOT_NAME");
    c.info.pci_bus_id = slot;
    const std::string unique = sysfs::read_line(dev / "unique_id");
    c.info.uuid = !unique.empty() ? c.info.vendor + "-" + unique : (slot.empty() ? name : "PCI-" + slot);
    std::string product = sysfs::read_line(dev / "product_name");
    c.info.name = !product.empty() ? product
                                   : fmt::format("{} {} GPU {}", c.info.vendor == "amd" ? "AMD" : "Intel", driver,
                                                 sysfs::read_line(dev / "device"));
    // The card's hwmon directory: hwmon/hwmonN under the PCI device.
    fs::path hw;
    for (const auto& h : fs::directory_iterator(dev / "hwmon", ec)) {
      hw = h.path();
      break;
    }
    if (!hw.empty()) {
      c.power_input_uw = open_if(hw / "power1_input");
      c.power_average_uw = open_if(hw / "power1_average");
      c.energy_uj = open_if(hw / "energy1_input");
      c.power_cap_uw = open_if(hw / "power1_cap");
      // Temperatures by label: amdgpu has edge / junction / mem; Intel's first sensor is the package.
      for (int i = 1; i <= 8; ++i) {
        const fs::path input = hw / fmt::format("temp{}_input", i);
        if (!fs::exists(input)) continue;
        const std::string label = sysfs::read_line(hw / fmt::format("temp{}_label", i));
        if (label == "mem" && !c.temp_mem_mc)
          c.temp_mem_mc = open_if(input);
        else if ((label == "edge" || label.empty() || label == "pkg") && !c.temp_edge_mc) {
          c.temp_edge_mc = open_if(input);
          // The sensor's limits (millidegrees): amdgpu throttles from temp_crit and shuts down at temp_emergency.
          const auto limit = [&](const char* what) -> OptF {
            const std::string v = sysfs::read_line(hw / fmt::format("temp{}_{}", i, what));
            char* end = nullptr;
            const double mc = v.empty() ? 0 : std::strtod(v.c_str(), &end);
            if (v.empty() || *end || !(mc > 0 && mc < 200000)) return std::nullopt;
            return mc / 1000.0;
          };
          c.info.slowdown_temp_c = limit("crit");
          c.info.shutdown_temp_c = limit("emergency");
        }
      }
      for (int i = 1; i <= 4; ++i) {
        const std::string label = sysfs::read_line(hw / fmt::format("freq{}_label", i));
        if (label == "sclk")
          c.sclk_hz = open_if(hw / fmt::format("freq{}_input", i));
        else if (label == "mclk")
          c.mclk_hz = open_if(hw / fmt::format("freq{}_input", i));
      }
    }
    c.busy_pct = open_if(dev / "gpu_busy_percent");
    c.mem_busy_pct = open_if(dev / "mem_busy_percent");
    c.vram_used = open_if(dev / "mem_info_vram_used");
    c.vram_total = open_if(dev / "mem_info_vram_total");
    c.gt_cur_mhz = open_if(drm / name / "gt_cur_freq_mhz");
    if (auto t = sysfs::pread_i64(c.vram_total)) c.info.mem_total_bytes = *t;
    c.info.power_source = c.power_input_uw.valid()     ? "hwmon power1_input"
                          : c.power_average_uw.valid() ? "hwmon power1_average"
                                                       : "";
    cards_.push_back(std::move(c));
  }
  if (cards_.empty()) {
    status_ = SourceStatus::missing(fmt::format("no AMD or Intel GPU under {}", drm.string()),
                                    "none needed unless this machine has an AMD or Intel GPU; then load its kernel "
                                    "driver (amdgpu, i915 or xe)");
    return false;
  }
  std::string names;
  for (const auto& c : cards_)
    names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", c.card, c.info.vendor);
  bool power = false;
  for (const auto& c : cards_)
    power = power || !c.info.power_source.empty();
  status_ = SourceStatus::ok(fmt::format("{} GPU(s) via hwmon: {}", cards_.size(), names), power);
  return true;
}

void HwmonGpuSource::set_first_index(int first) {
  for (size_t i = 0; i < cards_.size(); ++i)
    cards_[i].info.gpu_index = first + static_cast<int>(i);
}

std::vector<GpuDevice> HwmonGpuSource::devices() const {
  std::vector<GpuDevice> out;
  for (const auto& c : cards_)
    out.push_back(c.info);
  return out;
}

void HwmonGpuSource::probe(Frame& frame) noexcept {
  try {
    // Adaptive sampling (issue 18): gpu_busy_percent only; a card without it (i915) answers with none, which the
    // activity rule takes for not idle.
    for (auto& c : cards_) {
      GpuSample s;
      s.gpu_index = c.info.gpu_index;
      if (auto b = sysfs::pread_i64(c.busy_pct)) s.util_gpu_pct = static_cast<double>(*b);
      frame.gpus.push_back(s);
    }
  } catch (...) {
    // allocation failure: the tick keeps what it has
  }
}

void HwmonGpuSource::sample(Frame& frame) noexcept {
  try {
    for (auto& c : cards_) {
      GpuSample s;
      s.gpu_index = c.info.gpu_index;
      const OptI pin = sysfs::pread_i64(c.power_input_uw), pavg = sysfs::pread_i64(c.power_average_uw);
      if (pin) s.power_w = static_cast<double>(*pin) / 1e6;
      if (pavg) s.power_avg_w = static_cast<double>(*pavg) / 1e6;
      if (!s.power_w && s.power_avg_w) s.power_w = s.power_avg_w; // amdgpu before RDNA3 only has the average
      if (s.power_w) s.power_source = pin ? "hwmon power1_input" : "hwmon power1_average";
      s.energy_counter_uj = sysfs::pread_i64(c.energy_uj);
      if (auto t = sysfs::pread_i64(c.temp_edge_mc)) s.temp_gpu_c = static_cast<double>(*t) / 1000.0;
      if (auto t = sysfs::pread_i64(c.temp_mem_mc)) s.temp_mem_c = static_cast<double>(*t) / 1000.0;
      if (auto f = sysfs::pread_i64(c.sclk_hz)) s.clock_sm_mhz = *f / 1'000'000;
      if (auto f = sysfs::pread_i64(c.mclk_hz)) s.clock_mem_mhz = *f / 1'000'000;
      if (auto f = sysfs::pread_i64(c.gt_cur_mhz)) s.clock_gfx_mhz = *f;
      if (auto b = sysfs::pread_i64(c.busy_pct)) s.util_gpu_pct = static_cast<double>(*b);
      if (auto b = sysfs::pread_i64(c.mem_busy_pct)) s.util_mem_pct = static_cast<double>(*b);
      s.mem_used_bytes = sysfs::pread_i64(c.vram_used);
      s.mem_total_bytes = sysfs::pread_i64(c.vram_total);
      if (auto cap = sysfs::pread_i64(c.power_cap_uw)) s.power_limit_w = static_cast<double>(*cap) / 1e6;
      frame.gpus.push_back(std::move(s));
    }
  } catch (...) {
  }
}

nlohmann::json HwmonGpuSource::report() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : cards_) {
    out.push_back({{"card", c.card},
                   {"index", c.info.gpu_index},
                   {"vendor", c.info.vendor},
                   {"name", c.info.name},
                   {"uuid", c.info.uuid},
                   {"metrics",
                    {{"power", c.power_input_uw.valid() || c.power_average_uw.valid()},
                     {"energy_counter", c.energy_uj.valid()},
                     {"temperature", c.temp_edge_mc.valid()},
                     {"busy", c.busy_pct.valid()},
                     {"vram", c.vram_used.valid()},
                     {"clocks", c.sclk_hz.valid() || c.gt_cur_mhz.valid()}}}});
  }
  return out;
}

size_t HwmonGpuSource::release_claimed(const std::vector<std::string>& bus_ids) {
  size_t dropped = 0;
  for (auto it = cards_.begin(); it != cards_.end();) {
    const std::string id = normalize_pci_bus_id(it->info.pci_bus_id);
    if (!id.empty() && std::find(bus_ids.begin(), bus_ids.end(), id) != bus_ids.end()) {
      it = cards_.erase(it); // closes its files
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

std::vector<std::string> HwmonGpuSource::doctor_lines() const {
  std::vector<std::string> out;
  for (const auto& c : cards_)
    out.push_back(fmt::format("{} {} ({})", c.card, c.info.name, c.info.vendor));
  return out;
}

} // namespace wattscope
