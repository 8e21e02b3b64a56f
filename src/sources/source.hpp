// A source knows one kind of hardware. It is opened once, then fills its part of every frame on the sampler thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/frame.hpp"

namespace wattscope {

struct RunInfo;

class Source {
public:
  virtual ~Source() = default;
  virtual std::string_view name() const = 0;
  // Probes the hardware. false: this source has nothing here; status() says why, in words a user can act on.
  virtual bool open() = 0;
  // Fills this source's part of the frame. Never throws and never blocks on anything but the device itself.
  virtual void sample(Frame& frame) noexcept = 0;
  // true for a vendor library that can block inside the driver: sampled on its own thread against a deadline, and then
  // it writes only frame.gpus and frame.events.
  virtual bool may_block() const { return false; }
  virtual std::string status() const = 0;
  virtual std::vector<GpuDevice> devices() const { return {}; }
  virtual void describe(RunInfo& /*run*/) const {}
  // GPU backends other than NVML number their devices from here, so gpu_index never collides across vendors.
  virtual void set_first_index(int /*first*/) {}
  // Details for `wattscope doctor`: devices or zones and what each supports.
  virtual nlohmann::json report() const { return nullptr; }
};

} // namespace wattscope
