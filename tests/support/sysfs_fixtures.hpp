// sysfs fixture trees for RAPL (powercap) and DRM/hwmon GPUs, laid out as the kernel does.
#pragma once

#include <cstdint>
#include <string>

#include "support.hpp"

namespace wstest {

struct RaplZoneSpec {
  std::string domain; // intel-rapl:0, intel-rapl:0:2
  std::string name;   // package-0, core, dram, psys
  int64_t energy_uj = 0;
  int64_t max_range_uj = 262143328850;
  int64_t max_power_uw = 0; // 0: no constraint file
};

inline std::string rapl_dir(const std::string& root, const std::string& domain) {
  return root + "/class/powercap/" + domain;
}

inline void write_rapl_zone(const std::string& root, const RaplZoneSpec& z) {
  const std::string d = rapl_dir(root, z.domain);
  write_file(d + "/name", z.name + "\n");
  write_file(d + "/energy_uj", std::to_string(z.energy_uj) + "\n");
  write_file(d + "/max_energy_range_uj", std::to_string(z.max_range_uj) + "\n");
  if (z.max_power_uw) write_file(d + "/constraint_0_max_power_uw", std::to_string(z.max_power_uw) + "\n");
}

// Writes a counter in place (the source keeps the file open, so it must be the same inode).
inline void set_energy(const std::string& root, const std::string& domain, int64_t uj) {
  write_file(rapl_dir(root, domain) + "/energy_uj", std::to_string(uj) + "\n");
}

// Two sockets: package, core and dram on each, and psys.
inline void two_socket_rapl(const std::string& root) {
  write_rapl_zone(root, {"intel-rapl:0", "package-0", 1'000'000, 262143328850, 0});
  write_rapl_zone(root, {"intel-rapl:0:0", "core", 500'000, 262143328850, 0});
  write_rapl_zone(root, {"intel-rapl:0:1", "dram", 200'000, 65712999613, 0});
  write_rapl_zone(root, {"intel-rapl:1", "package-1", 3'000'000, 262143328850, 0});
  write_rapl_zone(root, {"intel-rapl:1:0", "dram", 400'000, 65712999613, 0});
  write_rapl_zone(root, {"intel-rapl:2", "psys", 9'000'000, 262143328850, 0});
}

// amdgpu as card0 (with a connector entry beside it), i915 as card1, an NVIDIA card2 that NVML owns.
inline void amd_and_intel_gpus(const std::string& root) {
  const std::string amd = root + "/class/drm/card0/device";
  write_file(amd + "/uevent", "DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_SLOT_NAME=0000:03:00.0\n");
  write_file(amd + "/vendor", "0x1002\n");
  write_file(amd + "/device", "0x744c\n");
  write_file(amd + "/product_name", "AMD Radeon RX 7900 XTX\n");
  write_file(amd + "/unique_id", "6a2c3e1f0b9d8e7c\n");
  write_file(amd + "/gpu_busy_percent", "45\n");
  write_file(amd + "/mem_busy_percent", "12\n");
  write_file(amd + "/mem_info_vram_used", "4294967296\n");
  write_file(amd + "/mem_info_vram_total", "25753026560\n");
  const std::string ah = amd + "/hwmon/hwmon3";
  write_file(ah + "/name", "amdgpu\n");
  write_file(ah + "/power1_average", "123450000\n");
  write_file(ah + "/power1_cap", "327000000\n");
  write_file(ah + "/temp1_input", "55000\n");
  write_file(ah + "/temp1_label", "edge\n");
  write_file(ah + "/temp1_crit", "100000\n"); // amdgpu: where it throttles, and where it shuts down
  write_file(ah + "/temp1_emergency", "105000\n");
  write_file(ah + "/temp2_input", "61000\n");
  write_file(ah + "/temp2_label", "junction\n");
  write_file(ah + "/temp3_input", "70000\n");
  write_file(ah + "/temp3_label", "mem\n");
  write_file(ah + "/freq1_input", "2100000000\n");
  write_file(ah + "/freq1_label", "sclk\n");
  write_file(ah + "/freq2_input", "1250000000\n");
  write_file(ah + "/freq2_label", "mclk\n");
  write_file(root + "/class/drm/card0-DP-1/status", "connected\n");

  const std::string intel = root + "/class/drm/card1/device";
  write_file(intel + "/uevent", "DRIVER=i915\nPCI_SLOT_NAME=0000:00:02.0\n");
  write_file(intel + "/vendor", "0x8086\n");
  write_file(intel + "/device", "0x56a0\n");
  write_file(intel + "/hwmon/hwmon5/name", "i915\n");
  write_file(intel + "/hwmon/hwmon5/energy1_input", "5000000\n");
  write_file(intel + "/hwmon/hwmon5/power1_input", "31000000\n");
  write_file(root + "/class/drm/card1/gt_cur_freq_mhz", "1300\n");

  write_file(root + "/class/drm/card2/device/uevent", "DRIVER=nvidia\nPCI_SLOT_NAME=0000:18:00.0\n");
}

} // namespace wstest
