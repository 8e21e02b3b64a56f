// Bad input end to end: the real binary either runs the job (input it cannot blame the user for) or stops with a
// usage error that names the problem; never "error: stoi", never a hang, never std::bad_alloc.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"

namespace e2e_bad_input { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
using json = nlohmann::json;

namespace {

json two_gpus() {
  json m = {{"power_instant_mw", 200000}, {"energy_mj", {{"linear", {1000000, 20000}}}}, {"util_gpu", 50}};
  return {{"devices",
           {{{"name", "NVIDIA H100"}, {"uuid", "GPU-0000"}, {"metrics", m}},
            {{"name", "NVIDIA H100"}, {"uuid", "GPU-1111"}, {"metrics", m}}}}};
}

struct Run {
  TempDir dir;
  Result result;
  bool job_ran() const { return read_file(dir / "job-ran") == "yes"; }
  std::string db() const { return dir / "wattscope.db"; }
};

// `wattscope run ARGS -- sh -c 'printf yes > job-ran'` with two fake GPUs and CUDA_VISIBLE_DEVICES as given.
std::unique_ptr<Run> run_job(std::vector<std::string> args, const std::string& cuda_visible) {
  auto r = std::make_unique<Run>();
  write_file(r->dir / "scenario.json", two_gpus().dump());
  args.insert(args.begin(), {wattscope(), "run", "--interval", "100ms"});
  for (const char* a : {"--", "sh", "-c", "printf yes > job-ran"})
    args.emplace_back(a);
  r->result = run(args,
                  {{"WATTSCOPE_NVML_LIBRARY", fake_nvml()},
                   {"WATTSCOPE_FAKE_NVML_SCENARIO", r->dir / "scenario.json"},
                   {"CUDA_VISIBLE_DEVICES", cuda_visible}},
                  r->dir.path());
  return r;
}

Result serve_with_token_file(const TempDir& dir, const std::string& token_file) {
  return run({wattscope(), "serve", "--token-file", token_file, "--db", dir / "serve.db"}, {}, dir.path());
}

} // namespace

// CUDA_VISIBLE_DEVICES comes from a scheduler or a script: an index out of range used to end the run with
// "error: stoi" before the job started. Now the job runs, every GPU is recorded, and a warning says why.
TEST(BadInput, CudaVisibleDevicesOutOfRangeStillRunsTheJob) {
  auto r = run_job({}, "99999999999");
  ASSERT_EQ(r->result.exit_code, 0) << r->result.err;
  EXPECT_TRUE(r->job_ran());
  EXPECT_NE(r->result.err.find("warning: CUDA_VISIBLE_DEVICES: GPU index '99999999999' is out of range"),
            std::string::npos)
      << r->result.err;
  EXPECT_EQ(scalar(r->db(), "SELECT count(DISTINCT gpu_index) FROM gpu_samples"), "2");
}

// --gpus is typed by the user: the same number is a usage error that names it, and the job does not start. (`run`
// exits 125 for its own errors, as env(1) does, so that the job's own codes stay the job's.)
TEST(BadInput, GpusFlagOutOfRangeIsAUsageError) {
  auto r = run_job({"--gpus", "2147483648"}, "\x01");
  EXPECT_EQ(r->result.exit_code, 125) << r->result.err;
  EXPECT_NE(r->result.err.find("Run 'wattscope run --help' for usage."), std::string::npos) << r->result.err;
  EXPECT_NE(r->result.err.find("GPU index '2147483648' is out of range; indices run from 0 to 1023"), std::string::npos)
      << r->result.err;
  EXPECT_EQ(r->result.err.find("stoi"), std::string::npos) << r->result.err;
  EXPECT_FALSE(r->job_ran());
}

// --token-file /dev/zero used to read until memory ran out; a token of tabs, or a file anyone may rewrite, was taken.
TEST(BadInput, TokenFileIsCheckedBeforeServing) {
  TempDir dir;
  auto expect_refused = [&](const std::string& file, const std::string& why) {
    const Result r = serve_with_token_file(dir, file);
    EXPECT_EQ(r.exit_code, 2) << file << ": " << r.err;
    EXPECT_NE(r.err.find("token file '" + file + "'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  };
  expect_refused("/dev/zero", "not a regular file");

  write_file(dir / "tabs", std::string(16, '\t') + "\n");
  ASSERT_EQ(chmod((dir / "tabs").c_str(), 0600), 0);
  expect_refused(dir / "tabs", "not a visible ASCII character");

  write_file(dir / "shared", "3f9a1c2b4d5e6f708192a3b4c5d6e7f8\n");
  ASSERT_EQ(chmod((dir / "shared").c_str(), 0666), 0);
  expect_refused(dir / "shared", "world-writable");

  write_file(dir / "big", std::string(1 << 20, 'a'));
  ASSERT_EQ(chmod((dir / "big").c_str(), 0600), 0);
  expect_refused(dir / "big", "at most 4096 bytes");
}

// serve --record stores what serve samples into --db: without one it says so before it starts.
TEST(BadInput, ServeRecordNeedsAStore) {
  TempDir dir;
  const Result r = run({wattscope(), "serve", "--record"}, {}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--record stores serve's samples into --db: add --db STORE"), std::string::npos) << r.err;
}
} // namespace e2e_bad_input
