#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "core/duration.hpp"
#include "core/lazy/lazy_lib.hpp"
#include "core/text.hpp"
#include "core/time_util.hpp"
#include "sources/nvml/gpu_selection.hpp"

#include "../support/support.hpp"

namespace unit_core { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;
using namespace std::chrono_literals;

TEST(Duration, AcceptsUnits) {
  EXPECT_EQ(parse_duration("1s"), 1s);
  EXPECT_EQ(parse_duration("250ms"), 250ms);
  EXPECT_EQ(parse_duration("10ms"), 10ms);
  EXPECT_EQ(parse_duration("500us"), 500us);
  EXPECT_EQ(parse_duration("1.5s"), 1500ms);
  EXPECT_EQ(parse_duration("2m"), 120s);
  EXPECT_EQ(parse_duration("1h"), 3600s);
}

TEST(Duration, RejectsBadInputWithTheTextInTheMessage) {
  for (const char* bad : {"0", "0s", "-5ms", "abc", "", "5", "10 ms", "1x", "ms", "nan", "1e400s", "--1s"}) {
    try {
      parse_duration(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(Duration, FormatsRoundTrip) {
  for (std::chrono::nanoseconds d :
       {std::chrono::nanoseconds(1s), std::chrono::nanoseconds(250ms), std::chrono::nanoseconds(10ms),
        std::chrono::nanoseconds(500us), std::chrono::nanoseconds(120s)})
    EXPECT_EQ(parse_duration(format_duration(d)), d);
}

TEST(CommitEvery, RowsOrDuration) {
  EXPECT_EQ(parse_commit_every("1000").rows, 1000);
  EXPECT_EQ(parse_commit_every("5s").interval, 5s);
  EXPECT_THROW(parse_commit_every("0"), std::invalid_argument);
  EXPECT_THROW(parse_commit_every("often"), std::invalid_argument);
}

TEST(TaskName, Validation) {
  EXPECT_NO_THROW(validate_task_name("bert-lr3e-4"));
  EXPECT_NO_THROW(validate_task_name("résumé ü 'quoted' \"x\"; DROP TABLE runs; --"));
  EXPECT_THROW(validate_task_name(""), std::invalid_argument);
  EXPECT_THROW(validate_task_name(std::string(129, 'a')), std::invalid_argument);
  EXPECT_NO_THROW(validate_task_name(std::string(128, 'a')));
  EXPECT_THROW(validate_task_name("a\nb"), std::invalid_argument);
  EXPECT_THROW(validate_task_name("a\x7f"), std::invalid_argument);
  EXPECT_THROW(validate_task_name("\xff\xfe"), std::invalid_argument);
}

TEST(TaskName, FileSafe) {
  EXPECT_EQ(file_safe("bert-lr3e-4"), "bert-lr3e-4");
  EXPECT_EQ(file_safe("../etc/passwd"), "_.._etc_passwd");
  EXPECT_EQ(file_safe("a b/c"), "a_b_c");
  EXPECT_EQ(file_safe(""), "_");
}

TEST(FormatSi, KeepsThreeSignificantDigitsWithAPrefix) {
  // Two epochs of 20.9 and 17.0 mJ per sample stay apart (a fixed two decimals made both "0.02 J").
  EXPECT_EQ(format_si(0.0209, "J/sample"), "20.9 mJ/sample");
  EXPECT_EQ(format_si(0.017, "J/sample"), "17.0 mJ/sample");
  EXPECT_EQ(format_si(0.0164, "J"), "16.4 mJ");
  EXPECT_EQ(format_si(2030, "J"), "2.03 kJ");
  EXPECT_EQ(format_si(728.4, "J"), "728 J");
  EXPECT_EQ(format_si(1.5, "J"), "1.50 J");
  EXPECT_EQ(format_si(3e-4, ""), "300 µ");
  EXPECT_EQ(format_si(-0.0164, "J"), "-16.4 mJ");
  EXPECT_EQ(format_si(0, "J"), "0 J");
  EXPECT_EQ(format_si(std::nan(""), "J"), "-");
  // Rounding that carries into the next prefix reads as 1.00 of it, not 1000 of the last.
  EXPECT_EQ(format_si(999.96, "J"), "1.00 kJ");
  EXPECT_EQ(format_si(0.99996, "J"), "1.00 J");
  EXPECT_EQ(format_si(1234567, "J", 5), "1.2346 MJ");
  EXPECT_EQ(format_si(4.2e18, "J"), "4200 PJ"); // beyond the prefixes the mantissa grows
}

TEST(FormatSi, CountsAndEnergies) {
  EXPECT_EQ(format_count(56324, "parameters"), "56.3 k parameters");
  EXPECT_EQ(format_count(64, "samples"), "64 samples");
  EXPECT_EQ(format_count(1.2e9, "FLOPs"), "1.20 G FLOPs");
  EXPECT_EQ(format_count(2.5, "samples"), "2.50 samples");
  EXPECT_EQ(format_energy(2030), "2.03 kJ (564 mWh)");
  EXPECT_EQ(format_energy(0.0164), "16.4 mJ (4.56 µWh)");
  EXPECT_EQ(format_energy(7.2e6), "7.20 MJ (2.00 kWh)");
}

TEST(ShellJoin, QuotesWhatAShellWouldSplit) {
  EXPECT_EQ(shell_join({"python", "train.py", "--lr", "3e-4"}), "python train.py --lr 3e-4");
  EXPECT_EQ(shell_join({"sh", "-c", "exit 3"}), "sh -c 'exit 3'");
  EXPECT_EQ(shell_join({"echo", "it's"}), "echo 'it'\\''s'");
}

TEST(Time, IsoRoundTrip) {
  const int64_t ms = 1795262609833;
  EXPECT_EQ(iso_utc_ms(ms), "2026-11-21T12:03:29.833Z");
  int64_t back = 0;
  ASSERT_TRUE(parse_iso_utc_ms(iso_utc_ms(ms), back));
  EXPECT_EQ(back, ms);
  EXPECT_EQ(compact_utc(ms), "20261121T120329Z");
}

TEST(GpuSelection, CudaVisibleDevicesByDefault) {
  auto all = parse_gpu_selection("", std::nullopt);
  EXPECT_TRUE(all.selects(5, "GPU-x"));
  auto cvd = parse_gpu_selection("", std::string("2,0"));
  EXPECT_TRUE(cvd.selects(0, "GPU-a"));
  EXPECT_TRUE(cvd.selects(2, "GPU-c"));
  EXPECT_FALSE(cvd.selects(1, "GPU-b"));
  auto uuid = parse_gpu_selection("", std::string("GPU-8f2c"));
  EXPECT_TRUE(uuid.selects(3, "GPU-8f2c1234-aaaa"));
  EXPECT_FALSE(uuid.selects(0, "GPU-1111"));
  // CUDA hides everything from the first invalid entry on, and "" or -1 hides every device.
  EXPECT_FALSE(parse_gpu_selection("", std::string("")).selects(0, "GPU-a"));
  EXPECT_FALSE(parse_gpu_selection("", std::string("-1")).selects(0, "GPU-a"));
  auto partial = parse_gpu_selection("", std::string("1,-1,0"));
  EXPECT_TRUE(partial.selects(1, ""));
  EXPECT_FALSE(partial.selects(0, ""));
}

TEST(GpuSelection, FlagOverrides) {
  EXPECT_TRUE(parse_gpu_selection("all", std::string("0")).selects(3, ""));
  auto two = parse_gpu_selection("0,2", std::string("1"));
  EXPECT_TRUE(two.selects(2, ""));
  EXPECT_FALSE(two.selects(1, ""));
  EXPECT_THROW(parse_gpu_selection("zero", std::nullopt), std::invalid_argument);
  EXPECT_THROW(parse_gpu_selection("0,,1", std::nullopt), std::invalid_argument);
}
// libcurl and libmariadb are opened on first use (core/lazy/lazy_lib.hpp), never linked: linked, they cost every run
// 8 MiB of RSS and ~7 ms at start whether alerts or MySQL were used or not.
TEST(LazyLibraries, TheBinaryDoesNotLoadCurlOrMariadbAtStart) {
  FILE* p = ::popen(("readelf -d '" + wstest::wattscope() + "' 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  ASSERT_NE(out.find("(NEEDED)"), std::string::npos) << out;
  EXPECT_NE(out.find("libsqlite3"), std::string::npos) << out; // what is linked is listed
  EXPECT_EQ(out.find("libcurl"), std::string::npos) << out;
  EXPECT_EQ(out.find("libmariadb"), std::string::npos) << out;
}

TEST(LazyLibraries, AMissingLibraryNamesItselfAndThePackage) {
  wattscope::lazy::Library lib({"libwattscope-absent.so.9"}, "wattscope-absent-pkg");
  EXPECT_EQ(lib.symbol("anything"), nullptr);
  EXPECT_FALSE(lib.available());
  const std::string e = lib.error();
  EXPECT_NE(e.find("libwattscope-absent.so.9"), std::string::npos) << e;
  EXPECT_NE(e.find("install the Debian package wattscope-absent-pkg"), std::string::npos) << e;
}

TEST(LazyLibraries, OpensTheFirstThatLoadsAndFindsItsSymbols) {
  wattscope::lazy::Library lib({"libwattscope-absent.so.9", "libcurl.so.4"}, "libcurl4");
  ASSERT_TRUE(lib.available()) << lib.error();
  EXPECT_NE(lib.symbol("curl_easy_init"), nullptr);
  EXPECT_EQ(lib.error(), "");
  EXPECT_EQ(lib.symbol("curl_no_such_function"), nullptr);
  EXPECT_NE(lib.error().find("lacks curl_no_such_function"), std::string::npos) << lib.error();
}
} // namespace unit_core
