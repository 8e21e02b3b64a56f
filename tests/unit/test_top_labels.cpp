// Issue 29: top's energy figures carry their method: the host's total, the CPU's and the selected GPU's, as serve's
// JSON or the local devices say it (counter, integrated, estimated, simulated, or mixed with the parts).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "top/model.hpp"
#include "top/render.hpp"

namespace unit_top_labels { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wattscope::top;
using json = nlohmann::json;

json current(const char* gpu_method, const char* cpu_method) {
  return {
      {"run", {{"run_id", "r1"}, {"host", "node7"}}},
      {"interval_s", 1},
      {"tick", 3},
      {"devices", {{{"index", 0}, {"name", "NVIDIA H100"}, {"energy_method", gpu_method}}}},
      {"gpus", {{{"index", 0}, {"name", "NVIDIA H100"}, {"power_w", 300.0}, {"energy_j", 1000.0}}}},
      {"cpu", {{"util_pct", 20}, {"package_power_w", 50}, {"package_energy_j", 100.0}, {"power_method", cpu_method}}}};
}

std::string screen_of(const HostView& h, bool fleet) {
  ViewState v;
  RenderOptions o;
  o.width = 300;
  o.height = 40;
  o.fleet = fleet;
  return plain_text(render({h}, v, o));
}

TEST(TopLabels, EveryEnergyFigureCarriesItsMethod) {
  HostView h;
  apply_current_json(h, current("counter", "estimated"), std::chrono::steady_clock::now());
  std::string s = screen_of(h, false);
  EXPECT_NE(s.find("energy 0.0 J [mixed (counter: gpu0; estimated: cpu_package)] since"), std::string::npos) << s;
  EXPECT_NE(s.find("energy 0.0 J [estimated]"), std::string::npos) << s; // the CPU line
  EXPECT_NE(s.find("GPU 0 NVIDIA H100: "), std::string::npos) << s;
  EXPECT_NE(s.find("0.0 J [counter]"), std::string::npos) << s; // the selected GPU's line
  s = screen_of(h, true);
  EXPECT_NE(s.find("1 GPU  power 350.0 W  energy 0.0 J [mixed (counter: gpu0; estimated: cpu_package)]"),
            std::string::npos)
      << s;

  HostView sim;
  apply_current_json(sim, current("simulated", "counter"), std::chrono::steady_clock::now());
  s = screen_of(sim, false);
  EXPECT_NE(s.find("[mixed (simulated: gpu0; counter: cpu_package)]"), std::string::npos) << s;
}

// The local view (top without --connect) learns a GPU's method from accounting's device rows on the first tick, and
// keeps it on the ticks after, whose device list (the sources') has none: a real H100 showed "[unknown]".
TEST(TopLabels, LocalFramesKeepTheMethodAccountingSettled) {
  HostView h;
  GpuDevice src;
  src.gpu_index = 0;
  src.name = "NVIDIA H100";
  const std::vector<GpuDevice> sources{src};
  for (int tick = 0; tick < 3; ++tick) {
    Frame f;
    f.tick = tick;
    GpuSample g;
    g.gpu_index = 0;
    g.power_w = 300.0;
    g.energy_j = 300.0 * tick;
    f.gpus.push_back(g);
    if (tick == 0) {
      GpuDevice settled = src;
      settled.energy_method = "counter";
      f.device_rows.push_back(settled);
    }
    apply_frame(h, f, sources);
  }
  const std::string s = screen_of(h, false);
  EXPECT_EQ(s.find("unknown"), std::string::npos) << s;
  EXPECT_NE(s.find("J [counter]"), std::string::npos) << s;
}

} // namespace unit_top_labels
