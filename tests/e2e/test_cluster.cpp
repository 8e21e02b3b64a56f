// serve on a Kubernetes node (issue 18): the TDP estimate where RAPL is absent or unreadable, the node's name as the
// host label, and pod units named through the kubelet (a fixture /pods answer served by a local HTTP server) over a
// procfs fixture tree.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/fixture_http_server.hpp"
#include "../support/support.hpp"
#include "http_client.hpp"

namespace e2e_cluster { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

const std::map<std::string, std::string> kNoNvml = {{"WATTSCOPE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}};

struct Served {
  int pid = -1;
  int port = 0;
  ~Served() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      wait_exit(pid);
    }
  }
};

// /metrics until `want` appears in it (serve's first frames need a tick or two), or the last answer.
std::string metrics_with(int port, const std::string& want, std::chrono::seconds limit = 10s) {
  std::string body;
  for (auto until = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < until;) {
    auto r = wstest::http::get(port, "/metrics", {}, 5s);
    body = r.body;
    if (body.find(want) != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  return body;
}

TEST(ServeCluster, CpuTdpEstimatesWhereRaplMeasuresNothing) {
  TempDir dir;
  TempDir empty; // a node whose RAPL files are absent (or root-only)
  Served s;
  s.pid = start({wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "100ms", "--cpu-tdp", "200",
                 "--sysfs-root", empty.path()},
                kNoNvml, dir.path(), dir / "out", dir / "err");
  s.port = wait_for_serve_port(dir / "err", 100);
  const std::string m = metrics_with(s.port, "wattscope_cpu_package_power_watts{");
  EXPECT_NE(m.find("method=\"estimated\""), std::string::npos) << m.substr(0, 4000);
  // Nonsense is a usage error that names the flag.
  auto bad = run({wattscope(), "serve", "--cpu-tdp", "-3"}, kNoNvml, dir.path());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--cpu-tdp"), std::string::npos) << bad.err;
}

void proc(const TempDir& d, int pid, uint64_t utime, const std::string& cgroup) {
  const std::string dir = d / ("proc/" + std::to_string(pid));
  write_file(dir + "/stat", std::to_string(pid) + " (python3) S 1 1 1 0 -1 0 0 0 0 0 " + std::to_string(utime) +
                                " 0 0 0 20 0 1 0 " + std::to_string(1000 + pid) + " 1000 10\n");
  write_file(dir + "/cgroup", cgroup);
  write_file(dir + "/cmdline", std::string("python3\0train.py\0", 17));
}

TEST(ServeCluster, PodUnitsCarryNamespaceAndNameFromTheKubeletAndTheNodeIsTheHost) {
  TempDir dir;
  FixtureHttpServer kubelet;
  kubelet.answer(200, read_file(std::string(WATTSCOPE_SOURCE_DIR) + "/tests/fixtures/kubelet/pods.json"));
  write_file(dir / "sys/.keep", "");
  write_file(dir / "proc/stat", "cpu  100 0 100 1000 0 0 0 0 0 0\ncpu0 100 0 100 1000 0 0 0 0 0 0\n");
  write_file(dir / "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\n");
  // As seen from inside the DaemonSet's pod: paths relative to its own cgroup namespace.
  proc(dir, 4100, 500,
       "0::/../../../kubepods-burstable.slice/kubepods-burstable-pod1f2e3d4c_5b6a_7980_a1b2_c3d4e5f60718.slice/"
       "cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n");
  proc(dir, 4200, 300,
       "0::/../../../kubepods-besteffort.slice/kubepods-besteffort-pod99999999_8888_7777_6666_555555555555.slice/"
       "cri-containerd-fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210.scope\n");
  auto env = kNoNvml;
  env["WATTSCOPE_KUBELET_URL"] = kubelet.url();
  env["WATTSCOPE_HOST"] = "gpu-node-7";
  Served s;
  s.pid = start({wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "200ms", "--process-interval", "1s",
                 "--cpu-tdp", "100", "--procfs-root", dir / "proc", "--sysfs-root", dir / "sys"},
                env, dir.path(), dir / "out", dir / "err");
  s.port = wait_for_serve_port(dir / "err", 100);
  const std::string m = metrics_with(s.port, "pod=\"trainer-0\"", 15s);
  EXPECT_NE(m.find("wattscope_unit_power_watts{unit=\"pod 1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718\",unit_kind=\"k8s-pod\","
                   "namespace=\"ml-team\",pod=\"trainer-0\",device=\"cpu\",host=\"gpu-node-7\"}"),
            std::string::npos)
      << m.substr(m.find("wattscope_unit_power_watts") == std::string::npos ? 0 : m.find("wattscope_unit_power_watts"),
                  3000)
      << read_file(dir / "err");
  // The pod the kubelet does not list keeps its uid, with empty names (every series has the same labels).
  EXPECT_NE(m.find("unit=\"pod 99999999-8888-7777-6666-555555555555\",unit_kind=\"k8s-pod\",namespace=\"\",pod=\"\""),
            std::string::npos);
  // The JSON API shows the same.
  auto cur = json::parse(wstest::http::get(s.port, "/api/v1/current", {}, 5s).body);
  bool named = false;
  for (const auto& u : cur["units"]) {
    if (u["unit"] == "pod 1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718") {
      named = u["namespace"] == "ml-team" && u["pod"] == "trainer-0";
    } else if (u["unit_kind"] == "k8s-pod") {
      EXPECT_TRUE(u["pod"].is_null()) << u.dump();
    }
  }
  EXPECT_TRUE(named) << cur["units"].dump();
  EXPECT_GE(kubelet.requests(), 1);
  EXPECT_LE(kubelet.requests(), 2) << "fetched on a miss, at most once per 30 s";
}

} // namespace
} // namespace e2e_cluster
