// Issue 31, item 5: what one `serve` endpoint may declare to `top --connect` is capped (GPUs, processes), applying a
// document is linear in its size, and the UI thread's snapshot never waits on an endpoint's document. The hostile
// endpoint is a fixture HTTP server sending one event stream document with 30,000 GPU indices (it froze top for 41 s).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/fixture_http_server.hpp"
#include "top/model.hpp"
#include "top/remote.hpp"

namespace unit_top_caps {

using namespace wattscope;
using namespace wattscope::top;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// A /api/v1/current document declaring `gpus` GPUs (indices 0..gpus-1, listed from the highest down so that each new
// one lands in front: the old sorted insert's worst case) and `procs` processes.
json hostile(int gpus, int procs) {
  json devices = json::array(), samples = json::array(), processes = json::array();
  for (int i = gpus - 1; i >= 0; --i) {
    devices.push_back({{"index", i}, {"name", "G"}, {"power_limit_w", 700}});
    samples.push_back({{"index", i}, {"power_w", 100.0 + i}, {"energy_j", 1000.0}});
  }
  for (int p = 0; p < procs; ++p) {
    json uses = json::array();
    uses.push_back(json{{"index", 0}, {"sm_pct", 1}});
    processes.push_back(json{{"pid", p + 1}, {"comm", "x"}, {"gpus", uses}});
  }
  return {{"run", {{"run_id", "r1"}, {"host", "evil"}}},
          {"interval_s", 1},
          {"tick", 1},
          {"devices", devices},
          {"gpus", samples},
          {"processes", processes}};
}

} // namespace

TEST(TopCaps, OneDocumentDeclaresAtMostTheCapsAndIsAppliedInLinearTime) {
  HostView h;
  const json doc = hostile(30000, 5000);
  const auto t0 = std::chrono::steady_clock::now();
  apply_current_json(h, doc, t0);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 2s) << "applying one document of 30,000 GPUs";
  ASSERT_EQ(h.gpus.size(), kMaxHostGpus);
  // Kept in index order, whatever order they came in; the ones kept are the first declared.
  for (size_t i = 1; i < h.gpus.size(); ++i)
    EXPECT_LT(h.gpus[i - 1].s.gpu_index, h.gpus[i].s.gpu_index);
  EXPECT_EQ(h.gpus.front().s.gpu_index, 30000 - static_cast<int>(kMaxHostGpus));
  EXPECT_DOUBLE_EQ(*h.gpus.front().s.power_w, 100.0 + 30000 - kMaxHostGpus);
  EXPECT_EQ(h.procs.size(), kMaxHostProcesses);
  EXPECT_EQ(h.dropped_processes, 5000 - kMaxHostProcesses);
  EXPECT_GT(h.dropped_gpus, kMaxHostGpus);
  EXPECT_NE(h.problem.find("left out"), std::string::npos) << h.problem;
  EXPECT_EQ(h.state, HostView::State::Live);

  // Indices that are not GPU indices (negative: -1 is the CPU's energy key; past kMaxGpuIndex) are left out.
  HostView g;
  json odd = hostile(0, 0);
  odd["gpus"] = json::array();
  for (int64_t index : {int64_t{-1}, int64_t{1} << 32, int64_t{3}})
    odd["gpus"].push_back(json{{"index", index}, {"energy_j", 5.0}});
  apply_current_json(g, odd, t0);
  ASSERT_EQ(g.gpus.size(), 1u);
  EXPECT_EQ(g.gpus[0].s.gpu_index, 3);
  EXPECT_EQ(g.dropped_gpus, 2u);
  // A well-behaved document afterwards clears the counts.
  apply_current_json(g, hostile(2, 1), t0);
  EXPECT_EQ(g.dropped_gpus, 0u);
  EXPECT_EQ(g.problem, "");
}

TEST(TopCaps, AHostileEndpointNeitherFreezesNorBlocksTheUiThread) {
  json doc = hostile(30000, 0);
  wstest::FixtureHttpServer server;
  server.answer(200, "data: " + doc.dump() + "\n\n");
  RemoteOptions o;
  o.url = normalize_url("http://127.0.0.1:" + std::to_string(server.port()));
  RemoteHost host(o);
  host.start();
  // What the UI thread does: a snapshot per frame. None may wait on the endpoint's document.
  auto worst = std::chrono::steady_clock::duration::zero();
  const auto t0 = std::chrono::steady_clock::now();
  HostView v;
  while (std::chrono::steady_clock::now() - t0 < 20s) {
    const auto a = std::chrono::steady_clock::now();
    v = host.snapshot(a);
    worst = std::max(worst, std::chrono::steady_clock::now() - a);
    if (!v.gpus.empty()) break;
    std::this_thread::sleep_for(5ms);
  }
  const auto seen = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(v.gpus.size(), kMaxHostGpus) << "no data after 20 s";
  EXPECT_LT(seen, 5s) << "the document took this long to show";
  EXPECT_LT(worst, 250ms) << "a snapshot waited this long on the stream thread";
  EXPECT_EQ(v.name, "evil");
}

} // namespace unit_top_caps
