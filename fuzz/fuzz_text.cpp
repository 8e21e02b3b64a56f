// Text from the command line that becomes data: --task names, --tag KEY=VALUE, the file names made from a task, and
// the command line stored with a run.
#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "core/text.hpp"

using namespace wattscope;

namespace {

// UTF-8 as Unicode defines it (no overlong forms, no surrogates, nothing above U+10FFFF), checked by decoding each
// code point: a second opinion, written apart from the validator under test.
bool strict_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (b0 < 0x80) {
      len = 1, cp = b0;
    } else if ((b0 & 0xe0) == 0xc0) {
      len = 2, cp = b0 & 0x1f;
    } else if ((b0 & 0xf0) == 0xe0) {
      len = 3, cp = b0 & 0x0f;
    } else if ((b0 & 0xf8) == 0xf0) {
      len = 4, cp = b0 & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

bool printable(std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// How a POSIX shell splits what shell_join wrote, for the quoting it uses (bare words and '...' with '\'' inside).
std::vector<std::string> shell_split(std::string_view line) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ')
      ++i;
    if (i == line.size()) break;
    std::string w;
    while (i < line.size() && line[i] != ' ') {
      if (line[i] == '\'') {
        const size_t end = line.find('\'', i + 1);
        FUZZ_CHECK(end != std::string_view::npos);
        w.append(line.substr(i + 1, end - i - 1));
        i = end + 1;
      } else if (line[i] == '\\') {
        FUZZ_CHECK(i + 1 < line.size());
        w.push_back(line[i + 1]);
        i += 2;
      } else {
        // Outside quotes only characters a shell takes literally.
        FUZZ_CHECK(std::string_view("|&;<>()$`\"\t\n*?[#~").find(line[i]) == std::string_view::npos);
        w.push_back(line[i++]);
      }
    }
    words.push_back(std::move(w));
  }
  return words;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz_text(data, size);
  try {
    validate_task_name(text);
    FUZZ_CHECK(!text.empty() && text.size() <= kMaxTaskNameBytes);
    FUZZ_CHECK(printable(text));
    FUZZ_CHECK(strict_utf8(text));
  } catch (const std::invalid_argument&) {
  }
  try {
    const auto [key, value] = parse_tag(text);
    FUZZ_CHECK(!key.empty() && key.size() <= kMaxTagKeyBytes && value.size() <= kMaxTagValueBytes);
    FUZZ_CHECK(text == key + "=" + value);
    for (char c : key)
      FUZZ_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
    FUZZ_CHECK(printable(value) && strict_utf8(value));
  } catch (const std::invalid_argument&) {
  }
  // A file name made from any text is one plain name in the directory it is written to.
  const std::string safe = file_safe(text);
  FUZZ_CHECK(!safe.empty() && safe[0] != '.' && safe.size() <= text.size() + 1);
  for (char c : safe)
    FUZZ_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
  // The stored command line, pasted into a shell, gives back the same arguments. NUL separates them (argv cannot
  // hold one).
  std::vector<std::string> argv;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('\0', start), text.size());
    argv.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  FUZZ_CHECK(shell_split(shell_join(argv)) == argv);
  return 0;
}
