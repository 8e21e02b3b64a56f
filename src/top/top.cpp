#include "top/top.hpp"

#include "alerts/engine.hpp" // before ncurses.h, whose macros (timeout, clear, ...) would rename its members

#include <langinfo.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include <ncurses.h>

#include <algorithm>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "top/remote.hpp"

namespace wattscope::top {

namespace {

using Clock = std::chrono::steady_clock;

// ---- where the hosts come from --------------------------------------------------------------------------------

class Feed {
public:
  virtual ~Feed() = default;
  virtual std::vector<HostView> hosts(Clock::time_point now) = 0;
  // True when what --once should print is there (or will not come).
  virtual bool settled(Clock::time_point now) = 0;
};

// This machine, through the pipeline: a Session with no store, its frames folded into one HostView.
class LocalFeed final : public Feed {
public:
  LocalFeed(SessionOptions opts, std::function<std::vector<FiringAlert>()> alerts)
      : track_(opts.track_processes), alerts_(std::move(alerts)) {
    opts.stores.clear();
    opts.on_frame = [this](const std::shared_ptr<const Frame>& f) {
      std::lock_guard lock(mu_);
      apply_frame(view_, *f, devices_);
      if (f->processes) ++scans_;
    };
    session_ = std::make_unique<Session>(std::move(opts));
    session_->open();
    devices_ = session_->devices();
    char name[256] = {};
    view_.name = ::gethostname(name, sizeof name - 1) == 0 ? name : "this machine";
    view_.interval_s = std::chrono::duration<double>(session_->run().interval_ms / 1000.0).count();
    view_.alerts_supported = true;
    session_->start();
  }
  ~LocalFeed() override {
    if (session_) session_->finish(std::nullopt);
  }
  std::vector<HostView> hosts(Clock::time_point) override {
    std::vector<HostView> out;
    {
      std::lock_guard lock(mu_);
      out.push_back(view_);
    }
    if (alerts_) {
      out.front().alerts = alerts_();
    } else if (const AlertEngine* engine = session_->alerts()) { // issue 14: the session's own evaluator
      for (const auto& a : engine->firing())
        out.front().alerts.push_back({a.rule, a.severity, a.scope, a.message});
    }
    if (const AnomalyMonitor* m = session_->anomalies()) // issue 36
      for (const auto& a : m->active())
        if (out.front().anomalies.size() < kMaxHostAnomalies) out.front().anomalies.push_back(a.message);
    out.front().forecast = session_->forecasts().line(); // issue 36
    return out;
  }
  bool settled(Clock::time_point) override {
    std::lock_guard lock(mu_);
    // Two ticks give CPU utilisation; the second process scan gives CPU % per process.
    return view_.last_tick >= 2 && (!track_ || scans_ >= 2);
  }

private:
  bool track_;
  std::function<std::vector<FiringAlert>()> alerts_;
  std::mutex mu_;
  HostView view_;
  int scans_ = 0;
  std::vector<GpuDevice> devices_;
  std::unique_ptr<Session> session_;
};

class RemoteFeed final : public Feed {
public:
  RemoteFeed(const std::vector<std::string>& urls, const std::string& token) {
    init_http_client();
    for (const auto& u : urls) {
      RemoteOptions o;
      o.url = u;
      o.token = token;
      hosts_.push_back(std::make_unique<RemoteHost>(o));
    }
    for (auto& h : hosts_)
      h->start();
  }
  std::vector<HostView> hosts(Clock::time_point now) override {
    std::vector<HostView> out;
    for (auto& h : hosts_)
      out.push_back(h->snapshot(now));
    return out;
  }
  bool settled(Clock::time_point now) override {
    for (auto& h : hosts_) {
      const HostView v = h->snapshot(now);
      if (v.state == HostView::State::Waiting) return false;
      if (v.state == HostView::State::Live && (v.last_tick < 1 || !v.alerts_asked)) return false;
    }
    return true;
  }

private:
  std::vector<std::unique_ptr<RemoteHost>> hosts_;
};

std::string clock_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

bool utf8_locale() {
  const char* cs = nl_langinfo(CODESET);
  return cs && (std::strcmp(cs, "UTF-8") == 0 || std::strcmp(cs, "utf8") == 0);
}

bool no_color() {
  const char* v = std::getenv("NO_COLOR"); // https://no-color.org: present and not empty
  return v && *v;
}

std::pair<int, int> plain_size() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) return {ws.ws_col, ws.ws_row};
  auto env = [](const char* name, int fallback) {
    const char* v = std::getenv(name);
    const int n = v ? std::atoi(v) : 0;
    return n >= 20 && n <= 10000 ? n : fallback;
  };
  return {env("COLUMNS", 100), env("LINES", 40)};
}

// ---- the terminal ---------------------------------------------------------------------------------------------

// What a crash writes to give the terminal back: saved before curses changed anything, read by a signal handler.
struct CrashRestore {
  termios saved{};
  bool have_saved = false;
  char seq[256] = {};
  size_t seq_len = 0;
};
CrashRestore g_crash; // NOLINT: a signal handler can reach nothing else

extern "C" void on_fatal_signal(int sig) {
  if (g_crash.seq_len) (void)!::write(STDOUT_FILENO, g_crash.seq, g_crash.seq_len);
  if (g_crash.have_saved) ::tcsetattr(STDIN_FILENO, TCSANOW, &g_crash.saved);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

enum Pair : short { kPairOk = 1, kPairWarn, kPairAlert, kPairTitle };

class Curses {
public:
  Curses() {
    if (::tcgetattr(STDIN_FILENO, &g_crash.saved) == 0) g_crash.have_saved = true;
    screen_ = newterm(nullptr, stdout, stdin);
    if (!screen_) return;
    set_term(screen_);
    // The sequences endwin would send (normal cursor, leave the alternate screen), for a crash to send.
    std::string seq = "\033[0m";
    for (const char* cap : {"cnorm", "rmcup"}) {
      const char* s = tigetstr(const_cast<char*>(cap));
      if (s && s != reinterpret_cast<const char*>(-1)) seq += s;
    }
    g_crash.seq_len = std::min(seq.size(), sizeof g_crash.seq);
    std::memcpy(g_crash.seq, seq.data(), g_crash.seq_len);
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
      ::sigaction(sig, &sa, nullptr);
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    nodelay(stdscr, TRUE);
    set_escdelay(25);
    curs_set(0);
    color_ = !no_color() && has_colors();
    if (color_) {
      start_color();
      use_default_colors();
      init_pair(kPairOk, COLOR_GREEN, -1);
      init_pair(kPairWarn, COLOR_YELLOW, -1);
      init_pair(kPairAlert, COLOR_RED, -1);
      init_pair(kPairTitle, COLOR_CYAN, -1);
    }
  }
  ~Curses() {
    if (!screen_) return;
    endwin();
    delscreen(screen_);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
      ::signal(sig, SIG_DFL);
    g_crash.seq_len = 0;
  }
  Curses(const Curses&) = delete;
  Curses& operator=(const Curses&) = delete;
  bool ok() const { return screen_ != nullptr; }

  void resize() {
    winsize ws{};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0)
      resizeterm(ws.ws_row, ws.ws_col);
    clearok(curscr, TRUE); // repaint everything: the terminal may have reflowed what was there
  }

  void draw(const Screen& s) {
    erase();
    const size_t rows = std::min<size_t>(static_cast<size_t>(std::max(LINES, 0)), s.size());
    for (size_t row = 0; row < rows; ++row) {
      const Line& l = s[row];
      move(static_cast<int>(row), 0);
      for (const auto& sp : l.spans) {
        attrset(tone_attr(sp.tone) | (l.selected ? A_REVERSE : A_NORMAL));
        addstr(sp.text.c_str());
      }
      if (l.selected) { // the highlight spans the whole row
        attrset(A_REVERSE);
        int cy = 0, cx = 0;
        getyx(stdscr, cy, cx);
        for (; cy == static_cast<int>(row) && cx < COLS - 1; ++cx)
          addch(' ');
      }
      attrset(A_NORMAL);
    }
    refresh();
  }

private:
  attr_t tone_attr(Tone t) const {
    switch (t) {
    case Tone::Normal:
      return A_NORMAL;
    case Tone::Dim:
      return A_DIM;
    case Tone::Ok:
      return color_ ? COLOR_PAIR(kPairOk) : A_NORMAL;
    case Tone::Warn:
      return color_ ? COLOR_PAIR(kPairWarn) : A_NORMAL;
    case Tone::Alert:
      return A_BOLD | (color_ ? COLOR_PAIR(kPairAlert) : A_NORMAL);
    case Tone::Title:
      return A_BOLD | (color_ ? COLOR_PAIR(kPairTitle) : A_NORMAL);
    }
    return A_NORMAL;
  }
  SCREEN* screen_ = nullptr;
  bool color_ = false;
};

// Keys: true when top should quit.
bool on_key(int ch, ViewState& v) {
  const bool gpus = v.focus == ViewState::Focus::Gpus;
  switch (ch) {
  case 'q':
  case 'Q':
    return true;
  case 's':
  case 'S':
    v.sort = next_sort(v.sort);
    v.proc_sel = v.proc_top = 0;
    break;
  case 'h':
  case 'H':
  case '?':
    v.help = !v.help;
    break;
  case KEY_UP:
  case 'k':
    if (gpus && v.gpu_sel > 0) --v.gpu_sel;
    if (!gpus && v.proc_sel > 0) --v.proc_sel;
    break;
  case KEY_DOWN:
  case 'j':
    if (gpus)
      ++v.gpu_sel;
    else
      ++v.proc_sel; // render clamps
    break;
  case KEY_NPAGE:
    v.focus = ViewState::Focus::Processes;
    v.proc_sel += 10;
    break;
  case KEY_PPAGE:
    v.focus = ViewState::Focus::Processes;
    v.proc_sel = v.proc_sel > 10 ? v.proc_sel - 10 : 0;
    break;
  case KEY_LEFT:
  case KEY_RIGHT:
  case '\t':
    v.focus = gpus ? ViewState::Focus::Processes : ViewState::Focus::Gpus;
    break;
  default:
    break;
  }
  return false;
}

sigset_t top_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH})
    sigaddset(&set, s);
  return set;
}

int status_for(int sig) {
  return sig == SIGINT || sig == 0 ? 0 : 128 + sig;
}

} // namespace

int run_top(const TopOptions& opts, const SessionOptions& local) {
  // The signals are taken by this thread alone (signalfd / sigtimedwait): blocked before any thread starts, so the
  // sampler's and the HTTP threads inherit the mask.
  const sigset_t sigs = top_signals();
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::setlocale(LC_CTYPE, ""); // ncursesw draws UTF-8 only under a UTF-8 locale

  const bool fleet = !opts.connect.empty();
  const std::string term = std::getenv("TERM") ? std::getenv("TERM") : "";
  const bool interactive =
      !opts.once && ::isatty(STDOUT_FILENO) && ::isatty(STDIN_FILENO) && !term.empty() && term != "dumb";
  // While curses owns the screen, log lines would scribble over it: they are kept and printed after.
  std::shared_ptr<spdlog::logger> saved_logger = spdlog::default_logger();
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(50);
  if (interactive) {
    auto l = std::make_shared<spdlog::logger>("wattscope", ring);
    l->set_level(saved_logger->level());
    l->set_pattern("wattscope: %l: %v");
    spdlog::set_default_logger(l);
  }
  struct LoggerBack {
    std::shared_ptr<spdlog::logger> saved;
    std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> ring;
    bool on;
    ~LoggerBack() {
      if (!on) return;
      spdlog::set_default_logger(saved);
      for (const auto& m : ring->last_formatted())
        std::fputs(m.c_str(), stderr);
    }
  } logger_back{saved_logger, ring, interactive};

  std::unique_ptr<Feed> feed;
  if (fleet) {
    feed = std::make_unique<RemoteFeed>(opts.connect, opts.token);
  } else {
    SessionOptions so = local;
    so.interval = opts.interval;
    feed = std::make_unique<LocalFeed>(std::move(so), opts.local_alerts);
  }

  ViewState view;
  view.sort = opts.sort;
  RenderOptions ro;
  ro.thresholds = opts.thresholds;
  ro.interval = opts.interval;
  ro.fleet = fleet;
  ro.started = clock_text();
  ro.unicode = utf8_locale();

  const int sigfd = ::signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
  auto take_signal = [&]() -> int {
    signalfd_siginfo si{};
    if (sigfd >= 0 && ::read(sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si))
      return static_cast<int>(si.ssi_signo);
    return -1;
  };
  struct FdClose {
    int fd;
    ~FdClose() {
      if (fd >= 0) ::close(fd);
    }
  } sigfd_close{sigfd};

  // An unknown TERM (no terminfo entry) falls back to plain frames rather than failing.
  std::optional<Curses> curses;
  if (interactive) {
    curses.emplace();
    if (!curses->ok()) {
      curses.reset();
      spdlog::warn("cannot drive this terminal (TERM={}): plain frames instead", term);
    }
  }
  if (!curses) {
    // --once, a pipe, TERM=dumb: plain frames, no escape sequences. --once waits (boundedly) for a full frame.
    const auto deadline = Clock::now() + std::chrono::seconds(5) + 3 * opts.interval;
    auto next = Clock::now() + opts.interval;
    for (;;) {
      if (opts.once) {
        while (!feed->settled(Clock::now()) && Clock::now() < deadline) {
          pollfd p{sigfd, POLLIN, 0};
          if (::poll(&p, 1, 50) > 0) {
            const int sig = take_signal();
            if (sig > 0 && sig != SIGWINCH) return status_for(sig);
          }
        }
      } else {
        pollfd p{sigfd, POLLIN, 0};
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
        if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) > 0) {
          const int sig = take_signal();
          if (sig > 0 && sig != SIGWINCH) return status_for(sig);
          continue;
        }
        next += opts.interval;
      }
      const auto [w, h] = plain_size();
      ro.width = w;
      ro.height = h;
      ro.now = Clock::now();
      ro.unicode = false; // plain text stays ASCII: scripts and logs read it
      const std::string text = plain_text(render(feed->hosts(ro.now), view, ro));
      std::fwrite(text.data(), 1, text.size(), stdout);
      if (!opts.once) std::fputs("\n", stdout);
      std::fflush(stdout);
      if (opts.once) return 0;
    }
  }

  auto next = Clock::now();
  bool dirty = true;
  for (;;) {
    const auto now = Clock::now();
    if (now >= next) {
      dirty = true;
      while (next <= now)
        next += opts.interval;
    }
    if (dirty) {
      ro.width = COLS;
      ro.height = LINES;
      ro.now = now;
      curses->draw(render(feed->hosts(now), view, ro));
      dirty = false;
    }
    pollfd p[2] = {{STDIN_FILENO, POLLIN, 0}, {sigfd, POLLIN, 0}};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    if (::poll(p, 2, static_cast<int>(std::clamp<int64_t>(left, 0, 1000))) <= 0) continue;
    if (p[1].revents & POLLIN) {
      for (int sig; (sig = take_signal()) > 0;) {
        if (sig == SIGWINCH) {
          curses->resize();
          dirty = true;
        } else {
          return status_for(sig);
        }
      }
    }
    if (p[0].revents & (POLLHUP | POLLERR)) return 0; // the terminal went away
    if (p[0].revents & POLLIN) {
      for (int ch; (ch = getch()) != ERR;) {
        if (ch == KEY_RESIZE) curses->resize();
        if (on_key(ch, view)) return 0;
        dirty = true;
      }
    }
  }
}

} // namespace wattscope::top
