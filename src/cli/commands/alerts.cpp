// wattscope alerts check FILE | alerts list [--alerts FILE]: validate a rules file (naming the line of an error) and
// show the rules a recording would use (issue 14).
#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "alerts/notifiers.hpp"
#include "alerts/rules.hpp"
#include "cli/commands/commands.hpp"

namespace wattscope {

namespace {

std::string notifier_line(const NotifierConfig& n) {
  // The URL may carry a token in its path or user part: show the scheme and host only.
  std::string shown = n.url;
  if (const auto scheme = shown.find("://"); scheme != std::string::npos) {
    auto rest = shown.substr(scheme + 3);
    if (const auto at = rest.find('@'); at != std::string::npos && at < rest.find('/')) rest = rest.substr(at + 1);
    shown = shown.substr(0, scheme + 3) + rest.substr(0, rest.find('/')) +
            (rest.find('/') != std::string::npos ? "/…" : "");
  }
  std::string extra;
  if (n.kind == NotifierConfig::Kind::Email) {
    for (const auto& t : n.to)
      extra += (extra.empty() ? " to " : ", ") + t;
    extra += fmt::format(" (starttls {})", n.starttls);
  }
  return fmt::format("  {:<16} {}{}; timeout {} ms, {} retries\n", n.name, shown, extra, n.timeout.count(), n.retries);
}

class AlertsCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    sub.require_subcommand(1);
    auto* check = sub.add_subcommand("check", "Validate a rules file; an error names its line");
    check->add_option("FILE", check_file_, "The rules file (TOML)")->required();
    auto* list = sub.add_subcommand("list", "Show the rules and notifiers in effect");
    list->add_option("--alerts", list_file_,
                     "Rules file (default: ~/.config/wattscope/alerts.toml, else /etc/wattscope/alerts.toml)");
    sub.footer("Examples:\n"
               "  wattscope alerts check deploy/alerts.example.toml\n"
               "  wattscope alerts list\n"
               "  wattscope run --alerts alerts.toml -- python train.py\n"
               "The file format: docs/alerts.md.");
    check_ = check;
  }

  int run(CLI::App&, const CliContext&) override {
    if (check_->parsed()) {
      try {
        const AlertConfig cfg = load_alert_config(check_file_);
        // The files a notifier reads at each delivery, through the same reads delivery makes: a file that would fail
        // then (missing, readable by others, not a regular file) fails here.
        for (const auto& n : cfg.notifiers) {
          try {
            if (n.kind == NotifierConfig::Kind::Email && !n.credentials_file.empty())
              read_credentials(n.credentials_file);
            if (n.kind != NotifierConfig::Kind::Email) header_lines(n.header_file);
          } catch (const std::runtime_error& e) {
            std::fprintf(stderr, "wattscope: error: %s: %s: %s\n", check_file_.c_str(), n.name.c_str(), e.what());
            return 1;
          }
        }
        std::printf("%s: ok, %zu rules (%zu from the file), %zu notifiers\n", check_file_.c_str(), cfg.rules.size(),
                    static_cast<size_t>(std::count_if(cfg.rules.begin(), cfg.rules.end(),
                                                      [](const AlertRule& r) { return !r.builtin; })),
                    cfg.notifiers.size());
        return 0;
      } catch (const AlertConfigError& e) {
        std::fprintf(stderr, "wattscope: error: %s\n", e.what());
        return 1;
      }
    }
    std::string path = list_file_.empty() ? default_alert_config_path() : list_file_;
    AlertConfig cfg;
    if (path.empty()) {
      std::printf("No rules file (~/.config/wattscope/alerts.toml, /etc/wattscope/alerts.toml): alerts are off.\n"
                  "A rules file starts from these built-in rules:\n");
      cfg.rules = builtin_alert_rules();
    } else {
      try {
        cfg = load_alert_config(path);
      } catch (const AlertConfigError& e) {
        std::fprintf(stderr, "wattscope: error: %s\n", e.what());
        return 1;
      }
      std::printf("Rules from %s:\n", path.c_str());
    }
    for (const auto& r : cfg.rules)
      std::printf("  %s\n", describe_rule(r).c_str());
    if (!path.empty()) {
      std::printf("Notifiers:%s\n", cfg.notifiers.empty() ? " none (alerts are recorded as events only)" : "");
      for (const auto& n : cfg.notifiers)
        std::fputs(notifier_line(n).c_str(), stdout);
    }
    return 0;
  }

private:
  CLI::App* check_ = nullptr;
  std::string check_file_;
  std::string list_file_;
};

} // namespace

std::unique_ptr<Command> make_alerts_command() {
  return std::make_unique<AlertsCommand>();
}

} // namespace wattscope
