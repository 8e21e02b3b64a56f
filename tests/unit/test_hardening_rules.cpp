// Issue 31: rules files bounded before they are parsed (nesting, size, counts), bit-mask thresholds that are masks,
// and bit-mask rules that ignore a value that is none.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "alerts/evaluator.hpp"
#include "alerts/rules.hpp"

namespace unit_hardening_rules { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wattscope;

namespace {

std::string error_of(const std::string& toml) {
  try {
    parse_alert_config(toml, "rules.toml");
  } catch (const AlertConfigError& e) {
    return e.what();
  }
  return "accepted";
}

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i)
    out += s;
  return out;
}

// ---- rules files

TEST(HardeningRules, ADottedKeyOfFortyThousandLevelsIsRefusedBeforeParsing) {
  // 80 KB: toml++ recursed once per level and overflowed the stack (exit 139).
  const std::string deep = "a" + repeat(".a", 40'000) + " = 1\n";
  EXPECT_EQ(error_of(deep), "rules.toml:1: keys and tables nested deeper than 32 levels (a rules file needs 3); "
                            "refused before parsing");
  // As a table header, in inline tables and in arrays, and on a later line: the line is named.
  EXPECT_EQ(error_of("builtin_rules = true\n[" + repeat("b.", 40) + "c]\n"),
            "rules.toml:2: keys and tables nested deeper than 32 levels (a rules file needs 3); refused before "
            "parsing");
  EXPECT_TRUE(error_of("x = " + repeat("{a = ", 100) + "1" + repeat("}", 100)).starts_with("rules.toml:1: keys"));
  EXPECT_TRUE(error_of("x = " + repeat("[", 5000) + repeat("]", 5000)).starts_with("rules.toml:1: keys"));
  // Levels add up: 12 inline tables, each under a 3-level dotted key, are 35 levels; 10 are 31.
  EXPECT_TRUE(error_of("x = " + repeat("{a.b.c = ", 12) + "1" + repeat("}", 12)).starts_with("rules.toml:1: keys"));
  EXPECT_EQ(error_of("x = " + repeat("{a.b.c = ", 10) + "1" + repeat("}", 10)),
            "rules.toml:1: unknown key 'x'; a rules file has builtin_rules, [[rule]], [[webhook]], [[email]] and "
            "[[alertmanager]]");
}

TEST(HardeningRules, DotsInStringsCommentsAndNumbersAreNotNesting) {
  // URLs, e-mail addresses and comments are full of dots; so is a quoted key. None of them is a level.
  const std::string dots(200, '.');
  const std::string file = "# " + dots + "\n[[webhook]]\nurl = \"http://a.b.c.d.e.f.example.org/" + dots + "\" # " +
                           dots + "\n[[rule]]\nname = \"r.1\"\nmetric = 'temp_gpu_c'\nthreshold = 85.5\n" +
                           "message = \'\'\'\n" + dots + "\n\'\'\'\nzone = \"\"\"\n\\\"\"" + dots + "\"\"\"\n";
  EXPECT_EQ(error_of(file), "rules.toml:11: 'zone' is for scope = \"zone\"");
  // The quoted key reaches toml++ and the check after it, which names it.
  EXPECT_TRUE(error_of("\"quoted." + dots + "\" = 1\n").starts_with("rules.toml:1: unknown key 'quoted."));
}

TEST(HardeningRules, TooManyRulesOrNotifiersAreRefusedWithTheirCount) {
  std::string hooks;
  for (int i = 0; i < 10'000; ++i)
    hooks += "[[webhook]]\nurl = \"http://127.0.0.1:9/\"\n";
  EXPECT_EQ(error_of(hooks), fmt::format("rules.toml:33: 10000 notifiers ([[webhook]], [[email]] and [[alertmanager]] "
                                         "together); a rules file holds at most {}, each one a thread",
                                         kMaxNotifiers));
  // The limit itself is fine, across kinds.
  std::string mixed;
  for (size_t i = 0; i < kMaxNotifiers / 2; ++i)
    mixed += "[[webhook]]\nurl = \"http://127.0.0.1:9/\"\n[[alertmanager]]\nurl = \"http://127.0.0.1:9/\"\n";
  EXPECT_EQ(parse_alert_config(mixed, "rules.toml").notifiers.size(), kMaxNotifiers);
  EXPECT_TRUE(error_of(mixed + "[[webhook]]\nurl = \"http://127.0.0.1:9/\"\n").find("17 notifiers") !=
              std::string::npos);

  std::string rules;
  for (size_t i = 0; i <= kMaxAlertRules; ++i)
    rules += fmt::format("[[rule]]\nname = \"r{}\"\nmetric = \"temp_gpu_c\"\nthreshold = 85\n", i);
  EXPECT_EQ(error_of(rules), fmt::format("rules.toml:{}: {} rules; a rules file holds at most {}",
                                         4 * kMaxAlertRules + 1, kMaxAlertRules + 1, kMaxAlertRules));
}

TEST(HardeningRules, ABitsThresholdIsAWholeMaskOfAtMost53Bits) {
  auto bits = [](const std::string& thr) {
    return error_of("[[rule]]\nname = \"t\"\nmetric = \"throttle_reasons\"\nop = \"bits\"\nthreshold = " + thr + "\n");
  };
  const std::string refused =
      "rules.toml:5: op = \"bits\" needs a bit mask: a whole number from 1 to 0x1fffffffffffff (e.g. 0x68)";
  EXPECT_EQ(bits("1e300"), refused);
  EXPECT_EQ(bits("-1"), refused);
  EXPECT_EQ(bits("0"), refused);
  EXPECT_EQ(bits("1.5"), refused);
  EXPECT_EQ(bits("0x20000000000000"), refused); // 2^53
  EXPECT_EQ(bits("0x68"), "accepted");
  EXPECT_EQ(bits("0x1fffffffffffff"), "accepted");
  // Other operators still take any finite number, and clear levels must be finite too.
  EXPECT_EQ(error_of("[[rule]]\nname = \"t\"\nmetric = \"temp_gpu_c\"\nthreshold = 1e300\n"), "accepted");
  EXPECT_EQ(error_of("[[rule]]\nname = \"t\"\nmetric = \"temp_gpu_c\"\nthreshold = 85\nclear_below = -inf\n"),
            "rules.toml:5: clear_below must be a finite number");
}

TEST(HardeningRules, ABitsRuleIgnoresAValueThatIsNoMask) {
  // power_w as a mask: -1 W (a broken reading) cast to an integer was all bits set, and the rule fired.
  AlertRule r = parse_alert_config("builtin_rules = false\n[[rule]]\nname = \"odd\"\nmetric = \"power_w\"\n"
                                   "op = \"bits\"\nthreshold = 0x60\n",
                                   "rules.toml")
                    .rules.at(0);
  AlertEvaluator ev({r});
  std::vector<AlertTransition> out;
  const auto t0 = SteadyClock::now();
  int64_t tick = 0;
  auto frame = [&](double w) {
    Frame f;
    f.tick = tick;
    f.mono = t0 + std::chrono::seconds(tick);
    f.ts_ms = 1'700'000'000'000 + 1000 * tick++;
    GpuSample s;
    s.power_w = w;
    f.gpus = {s};
    ev.evaluate(f, out);
    return out.size();
  };
  EXPECT_EQ(frame(-1), 0u);
  EXPECT_EQ(frame(1e300), 0u);
  EXPECT_EQ(frame(std::nan("")), 0u);
  EXPECT_EQ(frame(0x20), 1u); // a value that is a mask still fires
}

} // namespace
} // namespace unit_hardening_rules
