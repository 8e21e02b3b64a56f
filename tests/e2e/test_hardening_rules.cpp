// Issue 31, end to end with the real binary: a hostile rules file gets an error that names the problem (never a
// crash, never ten thousand threads), and `alerts check` reads a notifier's credentials and header files as delivery
// will.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "../support/support.hpp"

namespace e2e_hardening_rules { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope

namespace {

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i)
    out += s;
  return out;
}

// A HOME of the test's own, so no rules file of the machine's is read (and the test's one is, where it puts it).
std::map<std::string, std::string> home_env(const TempDir& dir) {
  return {{"HOME", dir.path()}, {"XDG_CONFIG_HOME", "\x01"}, {"WATTSCOPE_CGROUP_ROOT", "none"}};
}

TEST(HardeningRules, ADeepDottedKeyIsAnErrorForAlertsCheckAndForEveryRun) {
  TempDir dir;
  const std::string deep = "a" + repeat(".a", 40'000) + " = 1\n"; // 80 KB: exit 139 before issue 31
  write_file(dir / "deep.toml", deep);
  auto r = run({wattscope(), "alerts", "check", dir / "deep.toml"}, home_env(dir));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("deep.toml:1: keys and tables nested deeper than 32 levels"), std::string::npos) << r.err;
  // At the default place, every run reads it.
  std::filesystem::create_directories(dir / ".config/wattscope");
  write_file(dir / ".config/wattscope/alerts.toml", deep);
  r = run({wattscope(), "run", "--simulate", "--db", dir / "w.db", "--", "true"}, home_env(dir));
  EXPECT_EQ(r.exit_code, 125) << r.err;
  EXPECT_NE(r.err.find("alerts.toml:1: keys and tables nested deeper than 32 levels"), std::string::npos) << r.err;
}

TEST(HardeningRules, TenThousandWebhooksAreRefusedNotStarted) {
  TempDir dir;
  std::string hooks;
  for (int i = 0; i < 10'000; ++i)
    hooks += "[[webhook]]\nurl = \"http://127.0.0.1:9/\"\n";
  write_file(dir / "hooks.toml", hooks);
  const auto r = run({wattscope(), "alerts", "check", dir / "hooks.toml"}, home_env(dir));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("hooks.toml:33: 10000 notifiers"), std::string::npos) << r.err;
}

TEST(HardeningRules, AlertsCheckReadsCredentialAndHeaderFilesAsDeliveryDoes) {
  TempDir dir;
  write_file(dir / "creds", "user\npassword\n");
  ::chmod((dir / "creds").c_str(), 0600);
  write_file(dir / "open", "user\npassword\n");
  ::chmod((dir / "open").c_str(), 0644);
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  std::filesystem::create_directory(dir / "dir");
  ::chmod((dir / "dir").c_str(), 0700);
  auto check = [&](const std::string& notifier) {
    write_file(dir / "rules.toml", notifier);
    return run({wattscope(), "alerts", "check", dir / "rules.toml"}, home_env(dir));
  };
  auto email = [&](const std::string& file) {
    return check(fmt::format("[[email]]\nurl = \"smtp://127.0.0.1:9\"\nfrom = \"a@b.c\"\nto = \"d@e.f\"\n"
                             "credentials_file = \"{}\"\n",
                             file));
  };
  auto webhook = [&](const std::string& file) {
    return check(fmt::format("[[webhook]]\nurl = \"http://127.0.0.1:9/\"\nheader_file = \"{}\"\n", file));
  };
  EXPECT_EQ(email(dir / "creds").exit_code, 0) << email(dir / "creds").err;
  EXPECT_EQ(webhook(dir / "creds").exit_code, 0) << webhook(dir / "creds").err;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {dir / "open", "readable by others; chmod 600 it"},
      {dir / "missing", "cannot read it"},
      {"/dev/zero", "not a regular file"},
      {dir / "fifo", "not a regular file"}, // a FIFO would hang the delivery thread's read
      {dir / "dir", "not a regular file"},
  };
  for (const auto& [file, why] : bad) {
    auto r = email(file);
    EXPECT_EQ(r.exit_code, 1) << file << ": " << r.out;
    EXPECT_NE(r.err.find("rules.toml: email[0]: credentials_file " + file + ": " + why), std::string::npos) << r.err;
    r = webhook(file);
    EXPECT_EQ(r.exit_code, 1) << file << ": " << r.out;
    EXPECT_NE(r.err.find("rules.toml: webhook[0]: header_file " + file + ": "), std::string::npos) << r.err;
  }
}

} // namespace
} // namespace e2e_hardening_rules
