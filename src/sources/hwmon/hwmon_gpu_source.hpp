// AMD (amdgpu) and Intel (i915, xe) GPUs through DRM sysfs and their hwmon directory: power, energy counter where the
// driver has one, temperatures, busy %, VRAM, clocks. NVIDIA cards are left to NVML.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sources/source.hpp"

namespace wattscope {

class HwmonGpuSource final : public Source {
public:
  explicit HwmonGpuSource(std::string sysfs_root) : root_(std::move(sysfs_root)) {}
  ~HwmonGpuSource() override;
  std::string_view name() const override { return "hwmon-gpu"; }
  bool open() override;
  void sample(Frame& frame) noexcept override;
  SourceStatus status() const override { return status_; }
  std::vector<std::string> doctor_lines() const override;
  std::vector<GpuDevice> devices() const override;
  // gpu_index of the first card: the session numbers these after the NVIDIA GPUs so indices never collide.
  void set_first_index(int first) override;
  size_t release_claimed(const std::vector<std::string>& bus_ids) override;
  nlohmann::json report() const override;

private:
  struct Card {
    GpuDevice info;
    std::string card; // card0
    // Open files, -1 when the driver has no such file. Units as the kernel exports them.
    int power_input_uw = -1, power_average_uw = -1, energy_uj = -1, temp_edge_mc = -1, temp_mem_mc = -1;
    int sclk_hz = -1, mclk_hz = -1, busy_pct = -1, mem_busy_pct = -1, vram_used = -1, vram_total = -1;
    int gt_cur_mhz = -1, power_cap_uw = -1;
  };
  std::string root_;
  SourceStatus status_;
  std::vector<Card> cards_;
};

} // namespace wattscope
