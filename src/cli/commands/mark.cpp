// wattscope mark begin|end|point|work|model ...: the command-line marker client, for shell scripts and any language
// that can run a command. It sends one datagram to the socket in WATTSCOPE_SOCKET (or --socket) and never waits:
// with no wattscope listening the marker is dropped and the command still succeeds (unless --strict), so a script
// runs the same with and without wattscope.
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "core/text.hpp"
#include "phases/marker.hpp"
#include "phases/marker_socket.hpp"

namespace wattscope {

namespace {

// The marker's own time on the clock wattscope measures on (CLOCK_MONOTONIC: steady_clock on Linux).
int64_t mono_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- issue 29.5: `wattscope mark --stdin`, the shell's way to report work per item without flooding wattscope ----
// One process per `wattscope mark work 1` cannot sum across calls; a loop that pipes its markers into one
// `wattscope mark --stdin` can. Work is summed per unit and sent at most every 100 ms, and always before a begin,
// end or point (in the same datagram, so the amount counts towards the phase it was done in) and at the end of the
// input. A sum that could not be delivered (a full queue) is kept for the next send; a phase boundary is retried
// for at most ~50 ms; nothing ever waits longer.
class MarkerStream {
public:
  MarkerStream(std::string path, std::string unit) : path_(std::move(path)), unit_(std::move(unit)) {}

  int run() {
    std::string buf;
    char chunk[8192];
    int64_t line_no = 0;
    for (bool eof = false; !eof;) {
      int timeout = -1;
      if (!pending_.empty())
        timeout = static_cast<int>(std::max<int64_t>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(last_ + kInterval - Clock::now()).count()));
      pollfd p{STDIN_FILENO, POLLIN, 0};
      const int r = ::poll(&p, 1, timeout);
      if (r < 0 && errno != EINTR) throw std::runtime_error(fmt::format("reading stdin: {}", std::strerror(errno)));
      if (r > 0) {
        const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
        if (n < 0 && errno != EINTR && errno != EAGAIN)
          throw std::runtime_error(fmt::format("reading stdin: {}", std::strerror(errno)));
        if (n == 0) eof = true;
        if (n > 0) buf.append(chunk, static_cast<size_t>(n));
        size_t start = 0;
        for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1)
          handle(std::string_view(buf).substr(start, nl - start), ++line_no);
        buf.erase(0, start);
        if (eof && !buf.empty()) handle(buf, ++line_no);
        if (buf.size() > kMaxMarkerLineBytes) bad(line_no + 1, "a line longer than 4096 bytes");
      }
      if (!pending_.empty() && Clock::now() - last_ >= kInterval) flush("");
    }
    flush("");
    return pending_.empty() ? 0 : 1; // 1: some work could not be handed over (as --strict would say)
  }

private:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kInterval = std::chrono::milliseconds(100);

  [[noreturn]] void bad(int64_t line_no, const std::string& why) {
    flush("");
    throw UsageError(fmt::format("stdin line {}: {}", line_no, why));
  }

  // A line: a JSON marker as the protocol has it, or the words of the command line: begin NAME [INDEX],
  // end [NAME], point NAME, work AMOUNT [UNIT]. Empty lines and # comments are skipped.
  void handle(std::string_view raw, int64_t line_no) {
    while (!raw.empty() && (raw.back() == '\r' || raw.back() == ' ' || raw.back() == '\t'))
      raw.remove_suffix(1);
    while (!raw.empty() && (raw.front() == ' ' || raw.front() == '\t'))
      raw.remove_prefix(1);
    if (raw.empty() || raw.front() == '#') return;
    Marker m;
    try {
      m = raw.front() == '{' ? parse_marker(raw) : from_words(raw);
      if (!m.mono_ns) m.mono_ns = mono_now_ns(); // the line's own time, not when its datagram goes
      const std::string line = encode_marker(m);
      parse_marker(std::string_view(line).substr(0, line.size() - 1)); // the listener's own rules
    } catch (const std::exception& e) {
      bad(line_no, e.what());
    }
    if (m.kind == Marker::Kind::Work) {
      pending_[m.unit] += m.amount;
      if (m.total) totals_[m.unit] = *m.total; // issue 36: the latest declared total goes with the next send
      return;
    }
    flush(encode_marker(m));
  }

  Marker from_words(std::string_view line) const {
    std::istringstream in{std::string(line)};
    std::vector<std::string> w;
    for (std::string word; in >> word;)
      w.push_back(word);
    if (w.empty()) throw std::invalid_argument("an empty marker");
    Marker m;
    auto want = [&](size_t min, size_t max, const char* usage) {
      if (w.size() - 1 < min || w.size() - 1 > max) throw std::invalid_argument(fmt::format("expected {}", usage));
    };
    if (w[0] == "begin") {
      want(1, 2, "begin NAME [INDEX]");
      m.kind = Marker::Kind::Begin;
      m.name = w[1];
      if (w.size() > 2) m.index = parse_whole(w[2]);
    } else if (w[0] == "end") {
      want(0, 1, "end [NAME]");
      m.kind = Marker::Kind::End;
      if (w.size() > 1) m.name = w[1];
    } else if (w[0] == "point" || w[0] == "mark") {
      want(1, 1, "point NAME");
      m.kind = Marker::Kind::Point;
      m.name = w[1];
    } else if (w[0] == "work") {
      want(1, 2, "work AMOUNT [UNIT]");
      m.kind = Marker::Kind::Work;
      size_t used = 0;
      try {
        m.amount = std::stod(w[1], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != w[1].size())
        throw std::invalid_argument(fmt::format("'{}' is not a number", excerpt(w[1])));
      m.unit = w.size() > 2 ? w[2] : unit_;
    } else {
      throw std::invalid_argument(fmt::format("unknown marker '{}': use begin, end, point or work", excerpt(w[0])));
    }
    return m;
  }

  static int64_t parse_whole(const std::string& s) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size() || v < 0)
      throw std::invalid_argument(fmt::format("index '{}' is not a whole number >= 0", excerpt(s)));
    return v;
  }

  // Sends the pending work and then `tail` (a marker line, or ""), in as few datagrams as fit.
  void flush(const std::string& tail) {
    last_ = Clock::now();
    std::vector<std::pair<std::string, double>> taken(pending_.begin(), pending_.end());
    std::map<std::string, double> totals;
    pending_.clear();
    totals.swap(totals_);
    std::string data;
    std::vector<std::pair<std::string, double>> in_data;
    std::vector<std::pair<std::string, double>> totals_in_data;
    auto send = [&](bool boundary) {
      if (data.empty()) return;
      bool ok = send_marker(path_, data);
      for (int i = 0; !ok && boundary && i < 6; ++i) { // a phase boundary: a few short tries for room in the queue
        std::this_thread::sleep_for(std::chrono::milliseconds(1 << i));
        ok = send_marker(path_, data);
      }
      if (!ok) {
        for (const auto& [unit, amount] : in_data)
          pending_[unit] += amount; // never lost: goes out with the next send
        for (const auto& [unit, total] : totals_in_data)
          totals_.try_emplace(unit, total); // unless a newer declaration came meanwhile
      }
      data.clear();
      in_data.clear();
      totals_in_data.clear();
    };
    for (auto& [unit, amount] : taken) {
      auto total = totals.find(unit);
      // The protocol's largest amount is 1e18: a larger sum goes in several lines. A declared total goes once, even
      // with no work beside it.
      while (amount > 0 || total != totals.end()) {
        Marker w;
        w.kind = Marker::Kind::Work;
        w.unit = unit;
        w.amount = std::min(amount, kMaxMarkerAmount);
        amount -= w.amount;
        if (total != totals.end()) w.total = total->second;
        const std::string line = encode_marker(w);
        if (data.size() + line.size() > kMaxMarkerDatagramBytes / 2) send(false);
        data += line;
        in_data.emplace_back(unit, w.amount);
        if (total != totals.end()) totals_in_data.emplace_back(unit, total->second);
        total = totals.end();
      }
    }
    data += tail;
    send(!tail.empty());
  }

  std::string path_;
  std::string unit_;
  std::map<std::string, double> pending_;
  std::map<std::string, double> totals_; // unit -> declared total not yet sent
  Clock::time_point last_ = Clock::now() - kInterval;
};
// ---- end issue 29.5

class MarkCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    sub.add_option("action", action_, "begin, end, point, work or model");
    sub.add_option("args", args_, "begin NAME · end [NAME] · point NAME · work AMOUNT [UNIT] · model [NAME]");
    sub.add_option("--index", index_, "begin: the phase's index (e.g. the epoch number)");
    sub.add_option("--unit", unit_, "work: what AMOUNT counts (samples, tokens, images, steps)");
    sub.add_option("--total", total_,
                   "work: the run's total of this unit (e.g. 60000 samples): wattscope forecasts the time and energy "
                   "to finish");
    sub.add_option("--parameters", parameters_, "model: parameter count");
    sub.add_option("--flops", flops_, "model: FLOPs (per forward pass, as you count them)");
    sub.add_option("--socket", socket_, "The socket to send to (default: $WATTSCOPE_SOCKET, set by wattscope run)");
    sub.add_flag("--strict", strict_, "Exit with status 1 when the marker could not be delivered");
    sub.add_flag(
        "--stdin", stdin_,
        "Read markers from stdin, one a line (begin NAME [INDEX] · end [NAME] · point NAME · work AMOUNT "
        "[UNIT], or JSON), summing work and sending it at most every 100 ms: for a shell loop's work per item");
    sub.footer("Examples (inside `wattscope run -- ./train.sh`):\n"
               "  wattscope mark begin epoch --index 3\n"
               "  wattscope mark work 512 samples --total 60000\n"
               "  wattscope mark point checkpoint\n"
               "  wattscope mark end epoch\n"
               "  wattscope mark model resnet50 --parameters 25557032 --flops 4.1e9\n"
               "  for f in *.jpg; do convert \"$f\" ...; echo work 1 images; done | wattscope mark --stdin\n"
               "Outside wattscope (no WATTSCOPE_SOCKET, no `wattscope record --socket` of this user's) a marker is "
               "dropped and the "
               "command succeeds.\n"
               "The protocol (one JSON object per datagram line) is in docs/markers.md.");
  }

  int run(CLI::App& sub, const CliContext&) override {
    if (stdin_) return run_stdin();
    if (action_.empty()) throw UsageError("give a marker (begin, end, point, work or model), or --stdin");
    Marker m = build(sub);
    m.mono_ns = mono_now_ns();
    const std::string line = encode_marker(m);
    // The listener's own rules, applied here too, so a mistake is an error now rather than a warning in the run.
    flag_value("", [&] { return parse_marker(std::string_view(line).substr(0, line.size() - 1)); });
    const std::string path = socket_path();
    const bool sent = !path.empty() && send_marker(path, line);
    if (!sent && strict_) {
      const int why = errno; // send_marker's reason
      std::cerr << "wattscope mark: not delivered ("
                << (path.empty() ? "WATTSCOPE_SOCKET is not set and no wattscope record --socket listens: not "
                                   "running under wattscope"
                                 : marker_send_failure(path, why))
                << ")\n";
      return 1;
    }
    return 0;
  }

private:
  // --socket, else $WATTSCOPE_SOCKET (set by wattscope run), else this user's default socket where a `wattscope
  // record --socket` listens; empty when there is none.
  std::string socket_path() const {
    if (!socket_.empty()) return socket_;
    if (const char* env = std::getenv(kMarkerSocketEnv); env && *env) return env;
    std::string fallback = default_marker_socket_path();
    struct stat st {};
    return ::lstat(fallback.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == ::geteuid() ? fallback
                                                                                                   : std::string();
  }

  int run_stdin() {
    if (!action_.empty()) throw UsageError("--stdin reads the markers from stdin: give no marker on the command line");
    const std::string path = socket_path();
    if (path.empty()) { // outside wattscope: read and check the input all the same, send nothing
      if (strict_)
        throw std::runtime_error("WATTSCOPE_SOCKET is not set and no wattscope record --socket listens: not running "
                                 "under wattscope");
    }
    const int rc = MarkerStream(path, unit_).run();
    return strict_ ? rc : 0;
  }

  Marker build(CLI::App& sub) {
    Marker m;
    auto want = [&](size_t min, size_t max, const char* usage) {
      if (args_.size() < min || args_.size() > max) throw UsageError(fmt::format("usage: wattscope mark {}", usage));
    };
    if (action_ == "begin") {
      want(1, 1, "begin NAME [--index N]");
      m.kind = Marker::Kind::Begin;
      m.name = args_[0];
      if (sub.count("--index")) {
        if (index_ < 0) throw UsageError("--index must not be negative");
        m.index = index_;
      }
    } else if (action_ == "end") {
      want(0, 1, "end [NAME]");
      m.kind = Marker::Kind::End;
      if (!args_.empty()) m.name = args_[0];
    } else if (action_ == "point" || action_ == "mark") {
      want(1, 1, "point NAME");
      m.kind = Marker::Kind::Point;
      m.name = args_[0];
    } else if (action_ == "work") {
      want(1, 2, "work AMOUNT [UNIT]  (or --unit UNIT) [--total N]");
      m.kind = Marker::Kind::Work;
      m.amount = flag_value("work AMOUNT", [&] { return parse_amount(args_[0]); });
      m.unit = args_.size() > 1 ? args_[1] : unit_;
      if (sub.count("--total")) m.total = total_; // parse_marker's rules then refuse a negative or unbounded one
    } else if (action_ == "model") {
      want(0, 1, "model [NAME] --parameters N [--flops F]");
      m.kind = Marker::Kind::Model;
      if (!args_.empty()) m.name = args_[0];
      if (sub.count("--parameters")) m.parameters = parameters_;
      if (sub.count("--flops")) m.flops = flops_;
    } else {
      throw UsageError(fmt::format("unknown marker '{}': use begin, end, point, work or model", excerpt(action_)));
    }
    return m;
  }

  static double parse_amount(const std::string& s) {
    size_t used = 0;
    double d = 0;
    try {
      d = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size()) throw std::invalid_argument(fmt::format("'{}' is not a number", excerpt(s)));
    return d;
  }

  std::string action_;
  std::vector<std::string> args_;
  int64_t index_ = 0;
  std::string unit_ = "samples";
  int64_t parameters_ = 0;
  double flops_ = 0;
  double total_ = 0;
  std::string socket_;
  bool strict_ = false;
  bool stdin_ = false;
};

} // namespace

std::unique_ptr<Command> make_mark_command() {
  return std::make_unique<MarkCommand>();
}

} // namespace wattscope
