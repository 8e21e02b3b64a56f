// AMD (amdgpu) and Intel (i915, xe) GPUs through DRM sysfs and their hwmon directory: power, energy counter where the
// driver has one, temperatures, busy %, VRAM, clocks. NVIDIA cards are left to NVML.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fd.hpp"
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
  void probe(Frame& frame) noexcept override; // adaptive sampling (issue 18): utilisation only
  void set_first_index(int first) override;
  size_t release_claimed(const std::vector<std::string>& bus_ids) override;
  nlohmann::json report() const override;

private:
  struct Card {
    GpuDevice info;
    std::string card; // card0
    // Open files, empty when the driver has no such file. Units as the kernel exports them. Move-only: a card is
    // closed once, by whoever holds it last.
    UniqueFd power_input_uw, power_average_uw, energy_uj, temp_edge_mc, temp_mem_mc;
    UniqueFd sclk_hz, mclk_hz, busy_pct, mem_busy_pct, vram_used, vram_total;
    UniqueFd gt_cur_mhz, power_cap_uw;
  };
  std::string root_;
  SourceStatus status_;
  std::vector<Card> cards_;
};

} // namespace wattscope
