#include <gtest/gtest.h>

#include "../support/support.hpp"
#include "core/schema.hpp"
#include "sources/procfs/cpu_source.hpp"

namespace unit_procfs { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;

namespace {
const char* kStat1 = "cpu  100 0 100 800 0 0 0 0 0 0\n"
                     "cpu0 50 0 50 400 0 0 0 0 0 0\n"
                     "cpu1 50 0 50 400 0 0 0 0 0 0\n"
                     "intr 12345\nctxt 999\n";
// +100 busy of +200 total overall; cpu0 fully busy (+100/+100), cpu1 idle (+0/+100).
const char* kStat2 = "cpu  150 0 150 900 0 0 0 0 0 0\n"
                     "cpu0 100 0 100 400 0 0 0 0 0 0\n"
                     "cpu1 50 0 50 500 0 0 0 0 0 0\n"
                     "intr 12345\n";
const char* kMeminfo =
    "MemTotal:       16384000 kB\nMemFree:         1000000 kB\nMemAvailable:    4096000 kB\nBuffers: 1 kB\n";
} // namespace

TEST(ProcStat, ParsesTotalsAndCores) {
  ProcStat st;
  ASSERT_TRUE(parse_proc_stat(kStat1, st));
  EXPECT_EQ(st.total.busy, 200u);
  EXPECT_EQ(st.total.total, 1000u);
  ASSERT_EQ(st.cores.size(), 2u);
  EXPECT_EQ(st.cores[1].total, 500u);
}

TEST(ProcStat, IowaitCountsAsIdleAndStealAsBusy) {
  ProcStat st;
  ASSERT_TRUE(parse_proc_stat("cpu  10 20 30 40 50 60 70 80 90 100\n", st));
  EXPECT_EQ(st.total.busy, 10u + 20 + 30 + 60 + 70 + 80); // guest is already inside user and nice
  EXPECT_EQ(st.total.total, st.total.busy + 40 + 50);
}

TEST(ProcStat, OldKernelsAndGarbage) {
  ProcStat st;
  EXPECT_TRUE(parse_proc_stat("cpu 1 2 3 4\n", st)); // four fields only
  EXPECT_FALSE(parse_proc_stat("", st));
  EXPECT_FALSE(parse_proc_stat("cpu x y z\n", st));
  EXPECT_FALSE(parse_proc_stat("intr 1 2 3\n", st));
}

TEST(ProcStat, UtilBetween) {
  EXPECT_DOUBLE_EQ(*util_between({100, 200}, {150, 300}), 50.0);
  EXPECT_FALSE(util_between({100, 200}, {100, 200}).has_value()); // no time passed: missing, not 0
  EXPECT_FALSE(util_between({100, 200}, {90, 300}).has_value());  // counter went back
}

TEST(Meminfo, UsedIsTotalMinusAvailable) {
  int64_t total = 0, avail = 0;
  ASSERT_TRUE(parse_meminfo(kMeminfo, total, avail));
  EXPECT_EQ(total, 16384000LL * 1024);
  EXPECT_EQ(avail, 4096000LL * 1024);
  // Before Linux 3.14 there is no MemAvailable: free + buffers + cached.
  ASSERT_TRUE(parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 40 kB\n", total, avail));
  EXPECT_EQ(avail, 150 * 1024);
  EXPECT_FALSE(parse_meminfo("nothing here\n", total, avail));
}

TEST(CpuModel, FromCpuinfo) {
  EXPECT_EQ(parse_cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n"),
            "AMD EPYC 9654 96-Core Processor");
  EXPECT_EQ(parse_cpu_model("processor : 0\nCPU part : 0xd0c\n"), "");
}

TEST(ProcfsCpuSource, SamplesFixtureTree) {
  wstest::TempDir root;
  wstest::write_file(root / "stat", kStat1);
  wstest::write_file(root / "meminfo", kMeminfo);
  wstest::write_file(root / "cpuinfo", "model name\t: Fixture CPU\n");
  wstest::write_file(root / "sys/kernel/hostname", "fixture-host\n");
  ProcfsCpuSource src(root.path());
  ASSERT_TRUE(src.open()) << src.status().line();
  RunInfo run;
  src.describe(run);
  EXPECT_EQ(run.cpu_model, "Fixture CPU");
  EXPECT_EQ(run.host, "fixture-host");

  wstest::write_file(root / "stat", kStat2);
  Frame f;
  src.sample(f);
  ASSERT_TRUE(f.cpu.util_pct);
  EXPECT_DOUBLE_EQ(*f.cpu.util_pct, 50.0);
  ASSERT_EQ(f.cpu.core_util_pct.size(), 2u);
  EXPECT_DOUBLE_EQ(*f.cpu.core_util_pct[0], 100.0);
  EXPECT_DOUBLE_EQ(*f.cpu.core_util_pct[1], 0.0);
  EXPECT_EQ(*f.cpu.mem_used_bytes, (16384000LL - 4096000) * 1024);

  Frame same; // nothing changed: utilisation is missing, memory still reads
  src.sample(same);
  EXPECT_FALSE(same.cpu.util_pct);
  EXPECT_TRUE(same.cpu.mem_total_bytes);
}

TEST(ProcfsCpuSource, MissingRootSaysSo) {
  ProcfsCpuSource src("/nonexistent/proc");
  EXPECT_FALSE(src.open());
  EXPECT_NE(src.status().line().find("--procfs-root"), std::string::npos);
}
} // namespace unit_procfs
