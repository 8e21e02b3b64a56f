// Pod-level units (issue 18): the pod's uid from a cgroup path read inside a pod, its namespace and name from the
// kubelet's /pods (a fixture answer served over real HTTP by a local server: the kubelet is the outside system here),
// and the process tracker naming the pods of a procfs fixture tree.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "../support/fixture_http_server.hpp"
#include "../support/support.hpp"
#include "processes/kubelet.hpp"
#include "processes/procfs.hpp"
#include "processes/tracker.hpp"

namespace unit_kubelet { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using namespace std::chrono_literals;

namespace {

std::string fixture_pods() {
  return read_file(std::string(WATTSCOPE_SOURCE_DIR) + "/tests/fixtures/kubelet/pods.json");
}

constexpr const char* kTrainerUid = "1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718";

template <class F> bool eventually(F f, std::chrono::milliseconds limit = 5s) {
  for (auto until = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < until;) {
    if (f()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return f();
}

TEST(CgroupUnit, PodSeenFromInsideAnotherPodsCgroupNamespace) {
  // The DaemonSet's own cgroup namespace is rooted at its container: another pod's path starts with "..".
  const Unit u = parse_cgroup_unit("0::/../../../kubepods-besteffort.slice/kubepods-besteffort-pod"
                                   "0a1b2c3d_aaaa_bbbb_cccc_111122223333.slice/cri-containerd-"
                                   "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210.scope\n");
  EXPECT_EQ(u.kind, "k8s-pod");
  EXPECT_EQ(u.name, "pod 0a1b2c3d-aaaa-bbbb-cccc-111122223333");
  // A guaranteed pod sits right under kubepods.slice, the common ancestor that the relative path leaves out.
  EXPECT_EQ(parse_cgroup_unit("0::/../../kubepods-pod1f2e3d4c_5b6a_7980_a1b2_c3d4e5f60718.slice/x\n").name,
            std::string("pod ") + kTrainerUid);
  // A host service seen from the pod is still a service, not a pod.
  EXPECT_EQ(parse_cgroup_unit("0::/../../../../system.slice/kubelet.service\n").kind, "systemd-service");
}

TEST(KubeletPods, ParsesTheKubeletsPodList) {
  const auto pods = parse_kubelet_pods(fixture_pods());
  ASSERT_EQ(pods.size(), 3u) << "the item without a uid is skipped";
  EXPECT_EQ(pods.at(kTrainerUid).ns, "ml-team");
  EXPECT_EQ(pods.at(kTrainerUid).name, "trainer-0");
  // A static pod is listed under its config hash, which is what its cgroup directory is named after.
  EXPECT_EQ(pods.at("8b1f0a5c27c94f1e9d0e3a6b7c8d9e0f").name, "etcd-gpu-node-7");
  EXPECT_EQ(pods.at("0a1b2c3d-aaaa-bbbb-cccc-111122223333").ns, "kube-system");
}

TEST(KubeletPods, AnswersThatAreNoPodListAreErrorsThatSaySo) {
  auto message = [](const std::string& text) {
    try {
      parse_kubelet_pods(text);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("<html>401 Unauthorized</html>").find("not JSON"), std::string::npos);
  EXPECT_NE(message(R"({"kind":"Status","status":"Failure"})").find("no 'items' list (kind 'Status')"),
            std::string::npos);
  EXPECT_NE(message("[1,2]").find("no 'items'"), std::string::npos);
  EXPECT_TRUE(parse_kubelet_pods(R"({"items":[1,"x",{"metadata":[]},{"metadata":{"uid":7}}]})").empty());
}

TEST(KubeletPodNames, NamesComeFromTheKubeletWithoutEverBlockingTheCaller) {
  FixtureHttpServer kubelet;
  kubelet.answer(200, fixture_pods(), 1500ms); // a slow kubelet
  KubeletOptions o;
  o.url = kubelet.url();
  o.min_refresh = 60s;
  KubeletPodNames names(o);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(names.find(kTrainerUid)) << "not fetched yet";
  for (int i = 0; i < 100; ++i)
    names.find(kTrainerUid);
  // A generous bound that proves the property: 101 lookups while the only fetch takes 1.5 s.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
  ASSERT_TRUE(eventually([&] { return names.find(kTrainerUid).has_value(); }));
  EXPECT_EQ(names.find(kTrainerUid)->name, "trainer-0");
  EXPECT_EQ(names.find(kTrainerUid)->ns, "ml-team");
  EXPECT_EQ(kubelet.requests(), 1) << "one fetch for the 100 misses while it was under way";
  ASSERT_EQ(kubelet.request_lines().size(), 1u);
  EXPECT_EQ(kubelet.request_lines()[0], "GET /pods HTTP/1.1");
  // Known pods cost no fetch; an unknown uid asks again only after min_refresh.
  for (int i = 0; i < 50; ++i)
    EXPECT_TRUE(names.find("0a1b2c3d-aaaa-bbbb-cccc-111122223333"));
  EXPECT_FALSE(names.find("ffffffff-0000-0000-0000-000000000000"));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(kubelet.requests(), 1);
  EXPECT_EQ(names.stats().fetches_ok, 1u);
}

TEST(KubeletPodNames, AKubeletThatFailsLeavesUidsAndIsReportedOnce) {
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  auto logger = std::make_shared<spdlog::logger>("kubelet-test", ring);
  auto before = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  {
    FixtureHttpServer kubelet;
    kubelet.answer(403, R"({"kind":"Status","status":"Failure","reason":"Forbidden"})");
    KubeletOptions o;
    o.url = kubelet.url();
    o.min_refresh = 0ms; // every miss fetches again: the warning must still come once
    KubeletPodNames names(o);
    ASSERT_TRUE(eventually([&] {
      names.find(kTrainerUid);
      return names.stats().fetches_failed >= 3;
    }));
    EXPECT_FALSE(names.find(kTrainerUid));
    EXPECT_NE(names.stats().last_error.find("403"), std::string::npos) << names.stats().last_error;
    // Then the kubelet answers: the names come, and the log says so.
    kubelet.answer(200, fixture_pods());
    ASSERT_TRUE(eventually([&] { return names.find(kTrainerUid).has_value(); }));
  }
  {
    KubeletOptions o;
    o.url = "http://127.0.0.1:1/pods"; // nothing listens: connection refused
    KubeletPodNames names(o);
    names.find(kTrainerUid);
    ASSERT_TRUE(eventually([&] { return names.stats().fetches_failed == 1; }));
    EXPECT_FALSE(names.find(kTrainerUid));
  }
  spdlog::set_default_logger(before);
  int warnings = 0, recovered = 0;
  for (const auto& m : ring->last_formatted()) {
    if (m.find("no pod names from") != std::string::npos) ++warnings;
    if (m.find("answers again") != std::string::npos) ++recovered;
  }
  EXPECT_EQ(warnings, 2) << "once per kubelet object, not once per failed fetch";
  EXPECT_EQ(recovered, 1);
}

TEST(KubeletPodNames, TheEnvironmentChoosesTheUrlOrTurnsItOff) {
  ::setenv("WATTSCOPE_KUBELET_URL", "off", 1);
  EXPECT_FALSE(kubelet_options_from_env());
  ::setenv("WATTSCOPE_KUBELET_URL", "https://10.0.0.1:10250/pods", 1);
  ::setenv("WATTSCOPE_KUBELET_TOKEN_FILE", "/var/run/secrets/kubernetes.io/serviceaccount/token", 1);
  auto o = kubelet_options_from_env();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->url, "https://10.0.0.1:10250/pods");
  EXPECT_EQ(o->token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
  ::unsetenv("WATTSCOPE_KUBELET_URL");
  ::unsetenv("WATTSCOPE_KUBELET_TOKEN_FILE");
  EXPECT_EQ(kubelet_options_from_env()->url, "http://127.0.0.1:10255/pods");
}

// A fixture /proc with processes in two pods (one the kubelet lists, one it does not) and a host service.
void proc(const TempDir& d, int pid, const std::string& cgroup) {
  const std::string dir = d / ("proc/" + std::to_string(pid));
  write_file(dir + "/stat", std::to_string(pid) + " (worker) S 1 1 1 0 -1 0 0 0 0 0 50 0 0 0 20 0 1 0 " +
                                std::to_string(1000 + pid) + " 1000 10\n");
  write_file(dir + "/cgroup", cgroup);
  write_file(dir + "/cmdline", std::string("worker\0", 7));
}

TEST(ProcessTracker, NamesThePodsTheKubeletListsAndKeepsUidsForTheOthers) {
  TempDir d;
  write_file(d / "proc/stat", "cpu  1000 0 0 1000 0 0 0 0 0 0\n");
  proc(d, 10,
       "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e3d4c_5b6a_7980_a1b2_"
       "c3d4e5f60718.slice/cri-containerd-aa.scope\n");
  proc(d, 11,
       "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e3d4c_5b6a_7980_a1b2_"
       "c3d4e5f60718.slice/cri-containerd-bb.scope\n");
  proc(d, 12,
       "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod99999999_8888_7777_6666_"
       "555555555555.slice/cri-containerd-cc.scope\n");
  proc(d, 13, "0::/system.slice/kubelet.service\n");
  FixtureHttpServer kubelet;
  kubelet.answer(200, fixture_pods());
  KubeletOptions ko;
  ko.url = kubelet.url();
  TrackerOptions o;
  o.procfs_root = d / "proc";
  o.pod_names = std::make_shared<KubeletPodNames>(ko);
  ProcessTracker t(o, {});
  std::shared_ptr<ProcessSnapshot> s;
  ASSERT_TRUE(eventually([&] {
    s = t.scan();
    return !s->pods.empty();
  }));
  ASSERT_EQ(s->pods.size(), 1u) << "one entry per pod, and none for the pod the kubelet does not list";
  EXPECT_EQ(s->pods[0].first, std::string("pod ") + kTrainerUid);
  EXPECT_EQ(s->pods[0].second.ns, "ml-team");
  EXPECT_EQ(s->pods[0].second.name, "trainer-0");
  // The unknown pod asked for a fetch once; min_refresh (30 s) keeps the next scans from asking again.
  for (int i = 0; i < 5; ++i)
    t.scan();
  EXPECT_LE(kubelet.requests(), 2);
}

TEST(ProcessTracker, NoPodNoKubeletQuery) {
  TempDir d;
  write_file(d / "proc/stat", "cpu  1000 0 0 1000 0 0 0 0 0 0\n");
  proc(d, 13, "0::/system.slice/kubelet.service\n");
  FixtureHttpServer kubelet;
  kubelet.answer(200, fixture_pods());
  KubeletOptions ko;
  ko.url = kubelet.url();
  TrackerOptions o;
  o.procfs_root = d / "proc";
  o.pod_names = std::make_shared<KubeletPodNames>(ko);
  ProcessTracker t(o, {});
  t.scan();
  t.scan();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(kubelet.requests(), 0);
}

} // namespace
} // namespace unit_kubelet
