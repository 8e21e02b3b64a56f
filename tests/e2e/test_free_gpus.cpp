// `run --gpus free:N` (issue 13) end to end, and how CUDA_VISIBLE_DEVICES is read: MIG entries and CUDA_DEVICE_ORDER.
// The fake NVML lists a test process as a GPU's compute process; the lock directory is the test's own.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"

namespace e2e_free_gpus { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

json device(int i, const std::string& name, json processes, long long mem_used = 1LL << 30) {
  return {{"name", name},
          {"uuid", "GPU-free-" + std::to_string(i)},
          {"pci_bus_id", "00000000:" + std::to_string(30 + i) + ":00.0"},
          {"metrics",
           {{"power_mw", 100000},
            {"energy_mj", {{"linear", {1000, 10000}}}},
            {"mem_used_bytes", mem_used},
            {"mem_total_bytes", 80LL << 30}}},
          {"processes", processes}};
}

std::map<std::string, std::string> env(const TempDir& dir) {
  return {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
          {"WATTSCOPE_FAKE_NVML_SCENARIO", dir / "scenario.json"},
          {"WATTSCOPE_LOCK_DIR", dir / "locks"},
          {"CUDA_VISIBLE_DEVICES", "\x01"},
          {"CUDA_DEVICE_ORDER", "\x01"}};
}

bool wait_for_file(const std::string& path, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (std::filesystem::exists(path) && !read_file(path).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

TEST(FreeGpus, ConcurrentRunsNeverShareAGpuAndABusyOneIsNotTaken) {
  TempDir dir;
  // GPU 0 runs someone's job; GPUs 1 and 2 are idle.
  const int busy = start({"/bin/sleep", "60"}, {}, dir.path(), dir / "b.out", dir / "b.err");
  write_file(dir / "b.pid", std::to_string(busy));
  json scen = {{"devices",
                {device(0, "NVIDIA H100", {{{"pid_file", dir / "b.pid"}, {"sm", 90}, {"mem_bytes", 1LL << 30}}}),
                 device(1, "NVIDIA H100", json::array()), device(2, "NVIDIA H100", json::array())}}};
  write_file(dir / "scenario.json", scen.dump());
  // Two runs started together, each holding its GPU until the third run below has tried.
  auto cmd = [&](int k) {
    return std::vector<std::string>{wattscope(),
                                    "run",
                                    "--gpus",
                                    "free:1",
                                    "--interval",
                                    "200ms",
                                    "--db",
                                    dir / ("r" + std::to_string(k) + ".db"),
                                    "--",
                                    "/bin/sh",
                                    "-c",
                                    "echo $CUDA_VISIBLE_DEVICES > got" + std::to_string(k) + ".tmp && mv got" +
                                        std::to_string(k) + ".tmp got" + std::to_string(k) +
                                        "; while [ ! -e release ]; do sleep 0.05; done"};
  };
  const int a = start(cmd(1), env(dir), dir.path(), dir / "a.out", dir / "a.err");
  const int b = start(cmd(2), env(dir), dir.path(), dir / "b2.out", dir / "b2.err");
  const bool both =
      wait_for_file(dir / "got1", std::chrono::seconds(30)) && wait_for_file(dir / "got2", std::chrono::seconds(30));
  // A third while both hold theirs: nothing is free, and it says why for each GPU. (Its command does not wait: were
  // it wrongly given a GPU, the test fails rather than hangs.)
  auto third_cmd = cmd(3);
  third_cmd.back() = "echo $CUDA_VISIBLE_DEVICES > got3";
  Result third = run(third_cmd, env(dir), dir.path());
  write_file(dir / "release", "");
  const int rc_a = wait_exit(a), rc_b = wait_exit(b);
  ::kill(busy, SIGTERM);
  wait_exit(busy);
  ASSERT_TRUE(both) << read_file(dir / "a.err") << read_file(dir / "b2.err");
  EXPECT_EQ(rc_a, 0) << read_file(dir / "a.err");
  EXPECT_EQ(rc_b, 0) << read_file(dir / "b2.err");
  const std::string got1 = trim(read_file(dir / "got1")), got2 = trim(read_file(dir / "got2"));
  EXPECT_NE(got1, got2) << "two concurrent runs got the same GPU";
  for (const auto& got : {got1, got2})
    EXPECT_TRUE(got == "GPU-free-1" || got == "GPU-free-2") << got << ": the busy GPU 0 was taken";
  EXPECT_EQ(third.exit_code, 125) << third.err;
  EXPECT_NE(third.err.find("--gpus free:1: 0 of 3 GPUs free, 1 needed:"), std::string::npos) << third.err;
  EXPECT_NE(third.err.find("GPU 0: 1 compute process"), std::string::npos) << third.err;
  EXPECT_NE(third.err.find("taken by another wattscope run"), std::string::npos) << third.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "got3")) << "the command must not start without its GPU";
  // Each run recorded only the GPU it was given.
  for (auto [db, got] : {std::pair{dir / "r1.db", got1}, std::pair{dir / "r2.db", got2}}) {
    auto rows = query(db, "SELECT uuid FROM gpu_devices");
    ASSERT_EQ(rows.size(), 1u) << db;
    EXPECT_EQ(rows[0][0].value_or(""), got);
  }
}

TEST(FreeGpus, MemoryInUseKeepsAGpuOutUnlessAllowed) {
  TempDir dir;
  json scen = {{"devices", {device(0, "NVIDIA H100", json::array(), 32LL << 30)}}}; // 40 % in use, no process
  write_file(dir / "scenario.json", scen.dump());
  const std::vector<std::string> cmd = {"--db", dir / "w.db", "--", "/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"};
  auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = {wattscope(), "run", "--gpus", "free:1"};
    v.insert(v.end(), extra.begin(), extra.end());
    v.insert(v.end(), cmd.begin(), cmd.end());
    return v;
  };
  Result no = run(args({}), env(dir), dir.path());
  EXPECT_EQ(no.exit_code, 125);
  EXPECT_NE(no.err.find("--gpus free:1: 0 of 1 GPU free, 1 needed:"), std::string::npos) << no.err;
  EXPECT_NE(no.err.find("40.0 % of its memory in use (--free-mem-max 5 %)"), std::string::npos) << no.err;
  Result yes = run(args({"--free-mem-max", "50%"}), env(dir), dir.path());
  EXPECT_EQ(yes.exit_code, 0) << yes.err;
  EXPECT_EQ(trim(yes.out), "GPU-free-0");
  // CUDA_VISIBLE_DEVICES set by a scheduler: only its GPUs may be taken.
  auto hidden = env(dir);
  hidden["CUDA_VISIBLE_DEVICES"] = "GPU-other";
  Result none = run(args({"--free-mem-max", "50%"}), hidden, dir.path());
  EXPECT_EQ(none.exit_code, 125);
  EXPECT_NE(none.err.find("0 of 0 GPUs in CUDA_VISIBLE_DEVICES free"), std::string::npos) << none.err;
}

TEST(FreeGpus, BadRequestsAreUsageErrors) {
  TempDir dir;
  write_file(dir / "scenario.json", json{{"devices", {device(0, "NVIDIA H100", json::array())}}}.dump());
  for (const char* bad : {"free:0", "free:", "free:x", "free:65", "freeish"}) {
    Result r = run({wattscope(), "run", "--gpus", bad, "--db", dir / "w.db", "--", "/bin/true"}, env(dir), dir.path());
    EXPECT_EQ(r.exit_code, 125) << bad;
    EXPECT_NE(r.err.find("expected free:N"), std::string::npos) << bad << ": " << r.err;
  }
  Result mem =
      run({wattscope(), "run", "--gpus", "free:1", "--free-mem-max", "150", "--db", dir / "w.db", "--", "/bin/true"},
          env(dir), dir.path());
  EXPECT_EQ(mem.exit_code, 125);
  EXPECT_NE(mem.err.find("--free-mem-max '150'"), std::string::npos) << mem.err;
  Result rec =
      run({wattscope(), "record", "--gpus", "free:1", "--duration", "1s", "--db", dir / "w.db"}, env(dir), dir.path());
  EXPECT_NE(rec.exit_code, 0);
  EXPECT_NE(rec.err.find("for `wattscope run` only"), std::string::npos) << rec.err;
}

TEST(CudaVisibleDevices, MigEntrySelectsItsParentGpuAndIndicesWarnUnderFastestFirst) {
  TempDir dir;
  json d1 = device(1, "NVIDIA A100", json::array());
  d1["mig"] = {"MIG-aaaa-1111", "MIG-bbbb-2222"};
  json scen = {{"devices", {device(0, "NVIDIA H100", json::array()), d1}}};
  write_file(dir / "scenario.json", scen.dump());
  auto e = env(dir);
  e["CUDA_VISIBLE_DEVICES"] = "MIG-bbbb-2222";
  Result mig = run({wattscope(), "run", "--db", dir / "m.db", "--", "/bin/true"}, e, dir.path());
  ASSERT_EQ(mig.exit_code, 0) << mig.err;
  EXPECT_NE(mig.err.find("names MIG instance MIG-bbbb-2222: recording its GPU 1"), std::string::npos) << mig.err;
  EXPECT_NE(mig.err.find("shared by all its MIG instances"), std::string::npos) << mig.err;
  auto rows = query(dir / "m.db", "SELECT uuid FROM gpu_devices");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0][0].value_or(""), "GPU-free-1");

  // Indices under CUDA's default order, on unlike GPUs: a warning; with PCI_BUS_ID, none.
  e["CUDA_VISIBLE_DEVICES"] = "1";
  Result idx = run({wattscope(), "run", "--db", dir / "i.db", "--", "/bin/true"}, e, dir.path());
  ASSERT_EQ(idx.exit_code, 0) << idx.err;
  EXPECT_NE(idx.err.find("CUDA_DEVICE_ORDER is not PCI_BUS_ID"), std::string::npos) << idx.err;
  e["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  Result pci = run({wattscope(), "run", "--db", dir / "p.db", "--", "/bin/true"}, e, dir.path());
  ASSERT_EQ(pci.exit_code, 0) << pci.err;
  EXPECT_EQ(pci.err.find("CUDA_DEVICE_ORDER"), std::string::npos) << pci.err;
}

} // namespace
} // namespace e2e_free_gpus
