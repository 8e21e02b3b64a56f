// Parsers of outside input: one test per defect the fuzz targets in fuzz/ found, and the rules for --gpus,
// CUDA_VISIBLE_DEVICES and --token-file.
#include <gtest/gtest.h>

#include <stdio.h> // fmemopen
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <future>
#include <string>
#include <vector>

#include "../support/support.hpp"
#include "core/duration.hpp"
#include "core/text.hpp"
#include "server/token.hpp"
#include "sinks/csv/csv_reader.hpp"
#include "sinks/store.hpp"
#include "sources/nvml/gpu_selection.hpp"
#ifdef WATTSCOPE_HAVE_MYSQL
#include "sinks/mysql/mysql_store.hpp"

namespace unit_parsers { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)
#endif

using namespace wattscope;
using namespace std::chrono_literals;

namespace {

// The message of the std::invalid_argument that fn throws; fails the test when it throws nothing.
template <class Fn> std::string invalid(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no std::invalid_argument";
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

} // namespace

// Fuzzing found "0.4ns": greater than zero, so accepted, but it rounded to a zero-length interval.
TEST(Parsers, DurationBelowOneNanosecondIsRefused) {
  EXPECT_TRUE(contains(invalid([] { parse_duration("0.4ns"); }), "1ns"));
  EXPECT_THROW(parse_duration(".4ns"), std::invalid_argument);
  EXPECT_THROW(parse_duration("0.0000001us"), std::invalid_argument);
  EXPECT_EQ(parse_duration("0.6ns"), 1ns);
  EXPECT_EQ(parse_duration("1ns"), 1ns);
}

TEST(Parsers, DurationMessagesQuoteControlCharactersEscaped) {
  const std::string msg = invalid([] { parse_duration("5\x1b[2Jms"); });
  EXPECT_FALSE(contains(msg, "\x1b")) << msg;
  EXPECT_TRUE(contains(msg, "\\x1b")) << msg;
}

// Fuzzing found "csv:" and "sqlite:" accepted with an empty location.
TEST(Parsers, StoreWithoutLocationIsRefused) {
  EXPECT_TRUE(contains(invalid([] { parse_store("csv:"); }), "csv:DIR"));
  EXPECT_TRUE(contains(invalid([] { parse_store("sqlite:"); }), "sqlite:PATH"));
  EXPECT_EQ(parse_store("csv:.").location, ".");
}

#ifdef WATTSCOPE_HAVE_MYSQL
TEST(Parsers, MariadbUrlWithPasswordIsRefusedWithoutShowingIt) {
  const std::string msg = invalid([] { parse_mysql_url("mariadb://alice:hunter22@db/lab"); });
  EXPECT_FALSE(contains(msg, "hunter22")) << msg;
  EXPECT_TRUE(contains(msg, "'mariadb://alice...'")) << msg; // the user is named in full, the scheme not cut
  EXPECT_FALSE(contains(invalid([] { parse_mysql_url("mysql://bob:pw1234@db/lab"); }), "pw1234"));
}
#endif

// Fuzzing found overlong forms, surrogates and code points above U+10FFFF accepted as UTF-8.
TEST(Parsers, TaskNamesMustBeWellFormedUtf8) {
  for (const char* bad : {"a\xc0\xab", "\xc1\xbf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf0\x80\x80\xaf",
                          "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\x80", "\xe2\x82"})
    EXPECT_THROW(validate_task_name(bad), std::invalid_argument) << bad;
  for (const char* good : {"r\xc3\xa9sum\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf",
                           "\xed\x9f\xbf", "\xee\x80\x80", "train-llama 7b"})
    EXPECT_NO_THROW(validate_task_name(good)) << good;
}

TEST(Parsers, Tags) {
  EXPECT_EQ(parse_tag("owner=alice"), std::make_pair(std::string("owner"), std::string("alice")));
  EXPECT_EQ(parse_tag("note=a=b"), std::make_pair(std::string("note"), std::string("a=b")));
  EXPECT_EQ(parse_tag("empty="), std::make_pair(std::string("empty"), std::string("")));
  EXPECT_TRUE(contains(invalid([] { parse_tag("=x"); }), "KEY=VALUE"));
  EXPECT_TRUE(contains(invalid([] { parse_tag("novalue"); }), "KEY=VALUE"));
  EXPECT_TRUE(contains(invalid([] { parse_tag("a b=c"); }), "key"));
  EXPECT_TRUE(contains(invalid([] { parse_tag("k=\xff"); }), "UTF-8"));
  EXPECT_TRUE(contains(invalid([] { parse_tag("k=line\nbreak"); }), "control character"));
  EXPECT_THROW(parse_tag(std::string(kMaxTagKeyBytes + 1, 'k') + "=v"), std::invalid_argument);
  EXPECT_THROW(parse_tag("k=" + std::string(kMaxTagValueBytes + 1, 'v')), std::invalid_argument);
}

TEST(Parsers, ExcerptEscapesAndCuts) {
  EXPECT_EQ(excerpt("plain"), "plain");
  EXPECT_EQ(excerpt("a\tb\x7f"), "a\\x09b\\x7f");
  EXPECT_EQ(excerpt(std::string(100, 'x'), 10), std::string(10, 'x') + "...");
  // Never cut inside a UTF-8 sequence: "é" is two bytes.
  EXPECT_EQ(excerpt("abcd\xc3\xa9z", 5), "abcd...");
}

// `--gpus 2147483648` used to pass the check and end the run with "error: stoi" before the job started.
TEST(Parsers, GpusFlagIndexOutOfRangeIsAUsageError) {
  for (const char* flag : {"2147483648", "99999999999", "0,4294967296", "1024"}) {
    const std::string msg = invalid([&] { parse_gpu_selection(flag, std::nullopt); });
    EXPECT_TRUE(contains(msg, "out of range")) << msg;
    EXPECT_TRUE(contains(msg, "0 to 1023")) << msg;
  }
  auto sel = parse_gpu_selection("1023,0007", std::nullopt);
  EXPECT_TRUE(sel.selects(1023, ""));
  EXPECT_TRUE(sel.selects(7, ""));
  EXPECT_FALSE(sel.selects(INT_MAX, ""));
  // A bare UUID prefix would match every GPU.
  EXPECT_THROW(parse_gpu_selection("GPU-", std::nullopt), std::invalid_argument);
  EXPECT_THROW(parse_gpu_selection("MIG-", std::nullopt), std::invalid_argument);
}

// The same number from the environment (which the user may not have set) records every GPU, with a warning.
TEST(Parsers, CudaVisibleDevicesOutOfRangeRecordsAllGpusWithAWarning) {
  for (const char* env : {"99999999999", "2147483648", "0,99999999999"}) {
    auto sel = parse_gpu_selection("", std::string(env));
    EXPECT_TRUE(sel.all) << env;
    EXPECT_TRUE(sel.selects(0, "") && sel.selects(5, "GPU-x")) << env;
    EXPECT_TRUE(contains(sel.warning, "CUDA_VISIBLE_DEVICES")) << sel.warning;
    EXPECT_TRUE(contains(sel.warning, "all GPUs")) << sel.warning;
  }
  // What CUDA itself treats as "no devices" still selects none, without a warning.
  for (const char* env : {"", "-1", "GPU-", "abc"}) {
    auto sel = parse_gpu_selection("", std::string(env));
    EXPECT_FALSE(sel.selects(0, "GPU-1234")) << env;
    EXPECT_TRUE(sel.warning.empty()) << env;
  }
  EXPECT_TRUE(parse_gpu_selection("", std::string("1")).warning.empty());
  // --gpus wins, and an out-of-range variable is then irrelevant.
  auto flag = parse_gpu_selection("1", std::string("99999999999"));
  EXPECT_TRUE(flag.warning.empty());
  EXPECT_FALSE(flag.selects(0, ""));
}

namespace {
// Reads CSV text as a cpu_core_samples file, from memory; returns each row's run_id.
std::vector<std::string> run_ids(std::string text) {
  std::vector<std::string> out;
  CsvReader in(::fmemopen(text.data(), text.size(), "r"), "mem.csv");
  read_table_csv(in, TableId::CpuCoreSamples,
                 [&](std::span<const Value> row) { out.emplace_back(value_text(row[0])); });
  return out;
}
} // namespace

// Fuzzing (write a row, read it back) found a CR at the end of a quoted last field dropped as if it were a line end.
TEST(Parsers, CsvCarriageReturnInsideQuotesIsData) {
  EXPECT_EQ(run_ids("tick,ts_ms,core,util_pct,run_id\n0,1,0,5,\"id\r\"\n0,1,0,5,\"a\r\"\n"),
            (std::vector<std::string>{"id\r", "a\r"}));
}

// A file saved with CRLF line ends (a spreadsheet) failed on every quoted last field: "text after a closing quote".
TEST(Parsers, CsvCrlfAfterQuotedField) {
  EXPECT_EQ(run_ids("run_id,tick,ts_ms,core,\"util_pct\"\r\n\"x,y\",0,1,0,\"5\"\r\nz,0,1,0,6\r\n"),
            (std::vector<std::string>{"x,y", "z"}));
  EXPECT_EQ(run_ids("run_id,tick,ts_ms,core,util_pct\r\nmid\rcr,0,1,0,5\r\n"), (std::vector<std::string>{"mid\rcr"}));
}

TEST(Parsers, CsvRecordLengthIsCapped) {
  std::string text = "run_id,tick,ts_ms,core,util_pct\n" + std::string(kMaxCsvRecordBytes + 10, 'x') + ",0,1,0,5\n";
  try {
    run_ids(std::move(text));
    ADD_FAILURE() << "a 16 MiB record was read";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "mem.csv:2: a record longer than 16 MiB")) << e.what();
  }
}

TEST(Parsers, CsvErrorQuotesTheCellShortAndEscaped) {
  std::string text = "run_id,tick,ts_ms,core,util_pct\nr,0,1,0,\x1b[31m" + std::string(1000, '9') + "\n";
  try {
    run_ids(text);
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_FALSE(contains(msg, "\x1b")) << msg;
    EXPECT_LT(msg.size(), 200u) << msg;
  }
}

// --- the token file -------------------------------------------------------------------------------------------

namespace {
const std::string kToken = "3f9a1c2b4d5e6f708192a3b4c5d6e7f8";

std::string token_file(const wstest::TempDir& dir, const std::string& contents, mode_t mode = 0600) {
  const std::string path = dir / "token";
  wstest::write_file(path, contents);
  EXPECT_EQ(::chmod(path.c_str(), mode), 0);
  return path;
}
std::string refusal(const std::string& path) {
  return invalid([&] { read_token_file(path); });
}
} // namespace

TEST(TokenFile, ReadsOneLine) {
  wstest::TempDir dir;
  EXPECT_EQ(read_token_file(token_file(dir, kToken + "\n")), kToken);
  EXPECT_EQ(read_token_file(token_file(dir, kToken + "\r\n")), kToken);
  EXPECT_EQ(read_token_file(token_file(dir, kToken)), kToken);
  EXPECT_EQ(read_token_file(token_file(dir, kToken, 0400)), kToken);
}

TEST(TokenFile, ContentsMustBeOneLineOfVisibleAscii) {
  wstest::TempDir dir;
  const std::string tabs = refusal(token_file(dir, std::string(16, '\t') + "\n"));
  EXPECT_TRUE(contains(tabs, "byte 0x09 at position 0")) << tabs;
  EXPECT_TRUE(contains(tabs, dir / "token")) << tabs;
  EXPECT_TRUE(contains(refusal(token_file(dir, kToken + " \n")), "0x20"));
  EXPECT_TRUE(contains(refusal(token_file(dir, "short-token\n")), "at least 16"));
  EXPECT_TRUE(contains(refusal(token_file(dir, "\n")), "empty"));
  EXPECT_TRUE(contains(refusal(token_file(dir, kToken + "\n" + kToken + "\n")), "more than one line"));
  EXPECT_TRUE(contains(refusal(token_file(dir, "caf\xc3\xa9" + kToken)), "0xc3"));
  EXPECT_TRUE(contains(refusal(token_file(dir, kToken + std::string(1, '\0'))), "0x00"));
}

TEST(TokenFile, SizeIsCappedAndOnlyRegularFilesAreRead) {
  wstest::TempDir dir;
  EXPECT_TRUE(contains(refusal(token_file(dir, std::string(kMaxTokenFileBytes + 1, 'a'))), "4096 bytes"));
  EXPECT_EQ(read_token_file(token_file(dir, std::string(kMaxTokenFileBytes, 'a'))).size(), kMaxTokenFileBytes);
  // /dev/zero is only opened for reading; it used to be read until memory ran out.
  EXPECT_TRUE(contains(refusal("/dev/zero"), "not a regular file"));
  EXPECT_TRUE(contains(refusal(dir.path()), "not a regular file"));
  EXPECT_TRUE(contains(refusal(dir / "missing"), "cannot open it"));
  // A FIFO with no writer: refused at once rather than waiting for one.
  const std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto answer = std::async(std::launch::async, [&] { return refusal(fifo); });
  ASSERT_EQ(answer.wait_for(10s), std::future_status::ready) << "reading a FIFO blocked";
  EXPECT_TRUE(contains(answer.get(), "not a regular file"));
}

TEST(TokenFile, RefusedWhenOthersCouldChangeIt) {
  wstest::TempDir dir;
  EXPECT_TRUE(contains(refusal(token_file(dir, kToken, 0620)), "group-writable"));
  EXPECT_TRUE(contains(refusal(token_file(dir, kToken, 0602)), "world-writable"));
  EXPECT_EQ(read_token_file(token_file(dir, kToken, 0644)), kToken);

  // The directory: writable by others without the sticky bit lets them replace the file.
  const std::string sub = dir / "sub";
  ASSERT_EQ(::mkdir(sub.c_str(), 0700), 0);
  wstest::write_file(sub + "/token", kToken);
  ASSERT_EQ(::chmod((sub + "/token").c_str(), 0600), 0);
  ASSERT_EQ(::chmod(sub.c_str(), 0777), 0);
  std::string msg = refusal(sub + "/token");
  EXPECT_TRUE(contains(msg, "its directory '" + sub + "'") && contains(msg, "world-writable")) << msg;
  ASSERT_EQ(::chmod(sub.c_str(), 0770), 0);
  EXPECT_TRUE(contains(refusal(sub + "/token"), "group-writable"));
  ASSERT_EQ(::chmod(sub.c_str(), 01777), 0); // sticky, as /tmp
  EXPECT_EQ(read_token_file(sub + "/token"), kToken);
  // Reached through a symlink, the directory that holds the file itself is the one checked.
  ASSERT_EQ(::chmod(sub.c_str(), 0777), 0);
  ASSERT_EQ(::symlink((sub + "/token").c_str(), (dir / "link").c_str()), 0);
  EXPECT_TRUE(contains(refusal(dir / "link"), "its directory '" + sub + "'"));
  ASSERT_EQ(::chmod(sub.c_str(), 0700), 0);
  EXPECT_EQ(read_token_file(dir / "link"), kToken);
}

TEST(TokenFile, RefusedWhenOwnedBySomeoneElse) {
  if (::geteuid() != 0) GTEST_SKIP() << "changing a file's owner needs root";
  wstest::TempDir dir;
  const std::string path = token_file(dir, kToken);
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  EXPECT_TRUE(contains(refusal(path), "owned by uid 65534"));
}

TEST(TokenFile, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal(kToken, kToken));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal(kToken, kToken.substr(0, 31)));
  EXPECT_FALSE(constant_time_equal(kToken.substr(0, 31), kToken));
  EXPECT_FALSE(constant_time_equal(kToken, ""));
  std::string last = kToken;
  last.back() = 'x';
  EXPECT_FALSE(constant_time_equal(kToken, last));
  // A longer string that starts with the other, with NULs after: the lengths alone tell them apart.
  EXPECT_FALSE(constant_time_equal(std::string("ab\0", 3), "ab"));
}
} // namespace unit_parsers
