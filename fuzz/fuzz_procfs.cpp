// /proc/PID/stat, smaps_rollup, io and cgroup text as the process tracker reads them (issue 13). Outside input: a
// process names itself (prctl PR_SET_NAME: spaces, parentheses, newlines in its comm), and --procfs-root points at
// any tree. The stat parser is checked against a second reading of the same fields, written apart from it.
#include <charconv>
#include <string>
#include <vector>

#include "check.hpp"
#include "processes/procfs.hpp"

using namespace wattscope;

namespace {

// The fields after the comm's last ')', split on spaces and newlines with empty ones dropped: proc(5) numbering,
// field 3 (state) first.
std::vector<std::string_view> fields_after_comm(std::string_view text) {
  std::vector<std::string_view> out;
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos) return out;
  std::string_view rest = text.substr(close + 1);
  size_t i = 0;
  while (i <= rest.size()) {
    const size_t sp = rest.find_first_of(" \n", i);
    const size_t end = sp == std::string_view::npos ? rest.size() : sp;
    if (end > i) out.push_back(rest.substr(i, end - i));
    if (sp == std::string_view::npos) break;
    i = sp + 1;
  }
  return out;
}

template <class T> bool number(std::string_view s, T& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz_text(data, size);
  PidStat st;
  const bool ok = parse_pid_stat(text, st);
  const auto f = fields_after_comm(text);
  const size_t open = text.find('('), close = text.rfind(')');
  // What the second reading says about the required fields: state (one character), ppid, utime, stime, cutime,
  // cstime, starttime (fields 3, 4, 14-17, 22).
  int64_t ppid = 0, cut = 0, cst = 0;
  uint64_t utime = 0, stime = 0, start = 0;
  const bool expect = open != std::string_view::npos && close != std::string_view::npos && open <= close &&
                      f.size() >= 20 && f[0].size() == 1 && number(f[1], ppid) && number(f[11], utime) &&
                      number(f[12], stime) && number(f[13], cut) && number(f[14], cst) && number(f[19], start);
  FUZZ_CHECK(ok == expect);
  if (ok) {
    FUZZ_CHECK(st.comm == text.substr(open + 1, close - open - 1));
    FUZZ_CHECK(st.state == f[0][0]);
    FUZZ_CHECK(st.ppid == ppid && st.utime == utime && st.stime == stime && st.start_time == start);
    FUZZ_CHECK(st.cutime == static_cast<uint64_t>(cut < 0 ? 0 : cut));
    FUZZ_CHECK(st.cstime == static_cast<uint64_t>(cst < 0 ? 0 : cst));
    int64_t rss = -1;
    if (f.size() < 22 || !number(f[21], rss)) rss = -1;
    FUZZ_CHECK(st.rss_pages == rss);
    uint64_t flags = 0;
    FUZZ_CHECK(st.kernel_thread == (number(f[6], flags) && (flags & 0x00200000) != 0));
  }

  // The others: no crash, and what they find is consistent.
  const PidMemory m = parse_smaps_rollup(text);
  if (m.uss_bytes) FUZZ_CHECK(text.find("Private_Clean") != std::string_view::npos);
  if (m.rss_bytes) FUZZ_CHECK(text.find("Rss") != std::string_view::npos);
  uint64_t ns = 0, first = 0;
  const std::string_view head = text.substr(0, text.find_first_of(" \n"));
  FUZZ_CHECK(parse_schedstat_ns(text, ns) == number(head, first)); // schedstat: its first number
  if (number(head, first)) FUZZ_CHECK(ns == first);
  const PidIo io = parse_pid_io(text);
  if (io.read_bytes) FUZZ_CHECK(text.find("read_bytes") != std::string_view::npos);
  const Unit u = parse_cgroup_unit(text);
  FUZZ_CHECK(u.name.empty() == u.kind.empty()); // a unit is named and of a kind, or neither
  // The v2 path is what follows "0::" on its line, verbatim.
  const std::string path = cgroup_v2_path(text);
  if (!path.empty()) FUZZ_CHECK(text.find("0::" + path) != std::string_view::npos);
  return 0;
}
