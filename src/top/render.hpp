// Draws the HostViews into a screen of text lines with tones, for a given size: the same frame goes to ncurses (the
// live view) and, as plain text, to --once, TERM=dumb and pipes. No terminal calls here.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "top/model.hpp"

namespace wattscope::top {

// What a span means; the terminal maps it to a colour (or to nothing under NO_COLOR).
enum class Tone { Normal, Dim, Ok, Warn, Alert, Title };

struct Span {
  std::string text; // UTF-8; every character one column wide
  Tone tone = Tone::Normal;
};
struct Line {
  std::vector<Span> spans;
  bool selected = false; // drawn in reverse video
};
using Screen = std::vector<Line>;

enum class SortKey { Power, Cpu, Mem, GpuMem, Sm, Pid };
inline constexpr SortKey kSortKeys[] = {SortKey::Power,  SortKey::Cpu, SortKey::Mem,
                                        SortKey::GpuMem, SortKey::Sm,  SortKey::Pid};
const char* sort_name(SortKey k);
SortKey next_sort(SortKey k);
// "power", "cpu", "mem", "gpumem", "sm", "pid"; throws std::invalid_argument naming the choices.
SortKey parse_sort(const std::string& name);
// Sorts by the key (highest first; pid lowest first); missing values last, ties by pid.
void sort_processes(std::vector<TopProcess>& procs, SortKey key);

struct ViewState {
  SortKey sort = SortKey::Power;
  enum class Focus { Gpus, Processes };
  Focus focus = Focus::Gpus;
  size_t gpu_sel = 0;  // over every host's GPUs, in order
  size_t proc_sel = 0; // in the selected host's sorted process list
  size_t proc_top = 0; // first process row shown (scrolling)
  bool help = false;
};

struct RenderOptions {
  int width = 80;
  int height = 24;
  bool unicode = false; // block characters for bars and sparklines; ASCII otherwise
  Thresholds thresholds = kDefaultThresholds;
  std::chrono::nanoseconds interval = std::chrono::seconds(1);
  bool fleet = false; // --connect: one block per host and fleet totals
  std::chrono::steady_clock::time_point now{};
  std::string started; // when top started, as the energy's "since"
};

// `view` is updated in place: selections are clamped to what exists and the process list scrolled to show the
// selected row.
Screen render(const std::vector<HostView>& hosts, ViewState& view, const RenderOptions& opt);
// One line per screen line, trailing blanks trimmed.
std::string plain_text(const Screen& s);

} // namespace wattscope::top
