// issue 35: a store of many runs, made fast (one transaction) and known exactly: run i's every field is a closed
// formula of i, so a test knows how many runs each filter must find without asking the code under test.
//   task      "task%02d" of (i/3) % 20          (runs 3k, 3k+1, 3k+2 are one Slurm job on node0..node2)
//   host      "node%d" of i % 3                 tags slurm_node (= host), slurm_job_id "5000 + i/3",
//   tags      slurm_user "user%d" of (i/3) % 7, slurm_partition "debug" when (i/3) % 4 == 0 else "gpu",
//             seed: i % 5 as a JSON number
//   start     kGenBaseMs + i minutes; end start + ((37 i) % 600 + 1) s, none when i % 97 == 96 (unfinished)
//   exit      1 when i % 10 == 9, else 0 (none when unfinished)
//   energy    none when i % 25 == 24, else 100 + ((7919 i) % 10000) / 10 J
//   method    by i % 4: counter (GPU and CPU), integrated (GPU), mixed (GPU counter, CPU estimated), estimated (CPU)
//   command   "python train.py --seed S", except run 7: "echo 100% done_x"
//   work      i % 3 == 0: samples 100 (i % 7 + 1) + 50 in two rows; i % 6 == 1: 10 samples and 20 tokens
#pragma once

#include <cstdint>
#include <string>

#include "sinks/store.hpp"

namespace wstest {

constexpr int64_t kGenBaseMs = 1'793'491'200'000; // 2026-11-01T00:00:00Z

wattscope::RunInfo generated_run(int64_t i);
// Writes runs [first, first + n) to the store in batches of `batch` runs (one transaction each).
void generate_runs(const wattscope::StoreSpec& spec, int64_t n, int64_t first = 0, int64_t batch = 5000);

} // namespace wstest
