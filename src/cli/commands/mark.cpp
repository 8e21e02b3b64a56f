// wattscope mark begin|end|point|work|model ...: the command-line marker client, for shell scripts and any language
// that can run a command. It sends one datagram to the socket in WATTSCOPE_SOCKET (or --socket) and never waits:
// with no wattscope listening the marker is dropped and the command still succeeds (unless --strict), so a script
// runs the same with and without wattscope.
#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "core/text.hpp"
#include "phases/marker.hpp"
#include "phases/marker_socket.hpp"

namespace wattscope {

namespace {

class MarkCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    sub.add_option("action", action_, "begin, end, point, work or model")->required();
    sub.add_option("args", args_, "begin NAME · end [NAME] · point NAME · work AMOUNT [UNIT] · model [NAME]");
    sub.add_option("--index", index_, "begin: the phase's index (e.g. the epoch number)");
    sub.add_option("--unit", unit_, "work: what AMOUNT counts (samples, tokens, images, steps)");
    sub.add_option("--parameters", parameters_, "model: parameter count");
    sub.add_option("--flops", flops_, "model: FLOPs (per forward pass, as you count them)");
    sub.add_option("--socket", socket_, "The socket to send to (default: $WATTSCOPE_SOCKET, set by wattscope run)");
    sub.add_flag("--strict", strict_, "Exit with status 1 when the marker could not be delivered");
    sub.footer("Examples (inside `wattscope run -- ./train.sh`):\n"
               "  wattscope mark begin epoch --index 3\n"
               "  wattscope mark work 512 samples\n"
               "  wattscope mark point checkpoint\n"
               "  wattscope mark end epoch\n"
               "  wattscope mark model resnet50 --parameters 25557032 --flops 4.1e9\n"
               "Outside wattscope (no WATTSCOPE_SOCKET) a marker is dropped and the command succeeds.\n"
               "The protocol (one JSON object per datagram line) is in docs/markers.md.");
  }

  int run(CLI::App& sub, const CliContext&) override {
    Marker m = build(sub);
    const std::string line = encode_marker(m);
    // The listener's own rules, applied here too, so a mistake is an error now rather than a warning in the run.
    flag_value("", [&] { return parse_marker(std::string_view(line).substr(0, line.size() - 1)); });
    std::string path = socket_;
    if (path.empty())
      if (const char* env = std::getenv(kMarkerSocketEnv)) path = env;
    const bool sent = !path.empty() && send_marker(path, line);
    if (!sent && strict_) {
      const int why = errno; // send_marker's reason
      std::cerr << "wattscope mark: not delivered ("
                << (path.empty() ? "WATTSCOPE_SOCKET is not set: not running under wattscope"
                                 : marker_send_failure(path, why))
                << ")\n";
      return 1;
    }
    return 0;
  }

private:
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
      want(1, 2, "work AMOUNT [UNIT]  (or --unit UNIT)");
      m.kind = Marker::Kind::Work;
      m.amount = flag_value("work AMOUNT", [&] { return parse_amount(args_[0]); });
      m.unit = args_.size() > 1 ? args_[1] : unit_;
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
  std::string socket_;
  bool strict_ = false;
};

} // namespace

std::unique_ptr<Command> make_mark_command() {
  return std::make_unique<MarkCommand>();
}

} // namespace wattscope
