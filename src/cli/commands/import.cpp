// wattscope import nvidia-smi FILE --task T: a log people already have, as a run. Power is integrated over the log's
// own timestamps (trapezoid rule) and labelled `integrated`: nvidia-smi's CSV has no energy counter.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "accounting/accounting.hpp"
#include "cli/commands/commands.hpp"
#include "cli/record_flags.hpp"
#include "core/text.hpp"
#include "importers/nvidia_smi.hpp"
#include "runs/run_view.hpp"
#include "wattscope/version.hpp"

namespace wattscope {

namespace {

// Generous for a text log (a week at 1 s of 8 GPUs is about 100 MB); a larger file or stream is refused, not read.
constexpr int64_t kMaxLogBytes = int64_t{4} << 30;
// nvidia-smi's longest line is a few hundred bytes: a longer one (or a NUL byte) is no text log, found out while
// reading, so that /dev/zero or a binary stream is refused at once rather than read until memory runs out.
constexpr size_t kMaxLineBytes = 65536;
// One log is one machine's GPUs (nvidia-smi's index is 0..1023). 200,000 distinct uuids used to take minutes.
constexpr size_t kMaxImportGpus = 1024;

std::string read_log(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error(fmt::format("cannot read '{}': no such file", path));
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
    throw std::runtime_error(fmt::format("'{}' is not a file", path));
  if (S_ISREG(st.st_mode) && st.st_size > kMaxLogBytes)
    throw std::runtime_error(fmt::format("'{}' is {} bytes; the limit is {}", path, st.st_size, kMaxLogBytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot read '{}'", path));
  std::string text;
  if (S_ISREG(st.st_mode)) text.reserve(static_cast<size_t>(st.st_size));
  std::vector<char> buf(1 << 16);
  size_t line_start = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(in.gcount());
    if (n == 0) break;
    if (static_cast<int64_t>(text.size() + n) > kMaxLogBytes)
      throw std::runtime_error(
          fmt::format("'{}' holds more than {} bytes; the limit is {}", path, kMaxLogBytes, kMaxLogBytes));
    const size_t from = text.size();
    text.append(buf.data(), n);
    for (size_t i = from; i < text.size(); ++i) {
      if (text[i] == '\n') {
        line_start = i + 1;
      } else if (text[i] == '\0') {
        throw std::runtime_error(fmt::format("'{}': a NUL byte at offset {}; an nvidia-smi log is text", path, i));
      } else if (i - line_start >= kMaxLineBytes) {
        throw std::runtime_error(fmt::format("'{}': a line of more than {} bytes at offset {}; not an nvidia-smi log",
                                             path, kMaxLineBytes, line_start));
      }
    }
  }
  return text;
}

class ImportCommand final : public Command {
public:
  void add_options(CLI::App& sub) override {
    sub.add_option("format", format_, "What the file is: nvidia-smi")->required();
    sub.add_option("file", file_, "The log: nvidia-smi --query-gpu=timestamp,... --format=csv -l N output")->required();
    sub.add_option("--task,-t", task_, "Task name of the run")->required();
    sub.add_option("--db", db_, "Store to write: FILE.db, csv:DIR or mysql://USER@HOST[:PORT]/DB")
        ->capture_default_str();
    sub.add_option("--host", host_, "Machine the log was taken on (stored with the run)");
    sub.add_flag("--utc", utc_,
                 "Timestamps are UTC (nvidia-smi writes local time; by default they are read as "
                 "local time here, TZ honoured)");
    sub.add_option("--columns", columns_,
                   "The --query-gpu fields of a file written with noheader, comma-separated, e.g. "
                   "timestamp,index,power.draw")
        ->delimiter(',');
    sub.footer("Examples:\n"
               "  nvidia-smi --query-gpu=timestamp,index,name,uuid,power.draw,utilization.gpu,memory.used "
               "--format=csv -l 1 > gpu.csv\n"
               "  wattscope import nvidia-smi gpu.csv --task bert-baseline --utc\n"
               "Energy is the trapezoid integral of power.draw over the timestamps, labelled 'integrated'.\n"
               "Give index, uuid or pci.bus_id in the query when the log has several GPUs.");
  }

  int run(CLI::App&, const CliContext& ctx) override {
    if (format_ != "nvidia-smi")
      throw UsageError(fmt::format("cannot import '{}'; known: nvidia-smi", excerpt(format_)));
    flag_value("--task", [&] {
      validate_task_name(task_);
      return 0;
    });
    const StoreSpec spec = store_flag("--db", db_);
    const std::string text = read_log(file_);
    SmiOptions opts;
    opts.utc = utc_;
    opts.columns = columns_;
    auto in_file = [&](auto&& body) {
      try {
        body();
      } catch (const std::invalid_argument& e) {
        throw std::runtime_error(fmt::format("{}: {}", file_, e.what()));
      }
    };

    // Pass 1: the devices (in order of appearance) and the time span; every line is checked before anything is
    // written, so a malformed file leaves no half-imported run behind.
    std::vector<GpuDevice> devices;
    std::map<std::string, size_t> by_key;
    std::vector<std::string> ignored;
    SmiTimeNotes time_notes;
    int64_t first_ms = 0, last_ms = 0, rows = 0;
    in_file([&] {
      parse_nvidia_smi(
          text, opts,
          [&](const SmiRecord& r) {
            if (rows++ == 0) first_ms = r.ts_ms;
            last_ms = std::max(last_ms, r.ts_ms);
            first_ms = std::min(first_ms, r.ts_ms);
            if (by_key.count(r.key)) return;
            if (devices.size() >= kMaxImportGpus)
              throw std::invalid_argument(fmt::format(
                  "line {}: more than {} distinct GPUs (by index, uuid or pci.bus_id); an nvidia-smi log is one "
                  "machine's GPUs",
                  r.line, kMaxImportGpus));
            GpuDevice d;
            d.gpu_index = r.index ? *r.index : static_cast<int>(devices.size());
            d.vendor = "nvidia";
            d.name = r.name;
            d.uuid = r.uuid;
            d.pci_bus_id = r.pci_bus_id;
            d.mem_total_bytes = r.sample.mem_total_bytes;
            d.power_limit_w = r.sample.power_limit_w;
            d.clock_sm_max_mhz = r.clock_sm_max_mhz;
            d.clock_mem_max_mhz = r.clock_mem_max_mhz;
            d.energy_method = "integrated";
            d.power_source = "nvidia-smi power.draw";
            by_key[r.key] = devices.size();
            devices.push_back(std::move(d));
          },
          &ignored, &time_notes);
    });
    // Say what was done with a local time that occurred twice (the end of daylight saving time), and keep it with
    // the run.
    std::string time_note;
    if (time_notes.ambiguous_rows > 0)
      time_note = fmt::format("{} row(s) from line {} have a local time that occurs twice (clocks set back at the end "
                              "of daylight saving time); placed by the order of the rows: {} in the first pass, {} "
                              "in the repeated hour (a log in UTC, imported with --utc, has no such hour)",
                              time_notes.ambiguous_rows, time_notes.first_ambiguous_line,
                              time_notes.ambiguous_rows - time_notes.second_pass_rows, time_notes.second_pass_rows);
    if (!time_note.empty() && !ctx.quiet) std::fprintf(stderr, "wattscope: %s\n", time_note.c_str());
    if (!ignored.empty()) {
      std::string names;
      for (const auto& n : ignored)
        names += (names.empty() ? "" : ", ") + n;
      if (!ctx.quiet) std::fprintf(stderr, "wattscope: columns not stored: %s\n", names.c_str());
    }

    RunInfo run;
    run.start_ms = first_ms;
    run.run_id = new_run_id(first_ms);
    run.task = task_;
    run.command = "wattscope import nvidia-smi " + file_;
    run.host = host_.empty() ? "unknown" : host_;
    run.version = kVersion;
    nlohmann::json tags = {{"imported_from", "nvidia-smi"}};
    if (time_notes.ambiguous_rows > 0)
      tags["imported_repeated_hour"] =
          fmt::format("{} rows at a local time that occurs twice; {} placed after the clocks went back",
                      time_notes.ambiguous_rows, time_notes.second_pass_rows);
    run.tags = tags.dump();

    // Pass 2: ticks. A tick ends where a GPU already in it appears again (nvidia-smi writes one row per GPU per
    // poll, each with its own timestamp); the tick's time is its first row's.
    Accounting acc(devices);
    auto sink = open_sink(spec, /*spill_on_outage=*/false);
    sink->begin_run(run);
    RowBatch batch;
    Frame frame;
    std::vector<bool> seen(devices.size(), false);
    int64_t ticks = 0;
    std::vector<int64_t> tick_ms;
    auto flush_frame = [&] {
      if (frame.gpus.empty()) return;
      frame.tick = ticks++;
      frame.mono = SteadyClock::time_point{} + std::chrono::milliseconds(frame.ts_ms - first_ms);
      tick_ms.push_back(frame.ts_ms);
      acc.process(frame);
      append_frame_rows(run.run_id, frame, batch);
      frame = Frame{};
      std::fill(seen.begin(), seen.end(), false);
      if (batch.sample_rows() >= 10000) {
        sink->write(batch);
        batch.clear();
      }
    };
    in_file([&] {
      parse_nvidia_smi(text, opts, [&](const SmiRecord& r) {
        const size_t d = by_key.at(r.key);
        if (seen[d]) flush_frame();
        if (frame.gpus.empty()) frame.ts_ms = r.ts_ms;
        seen[d] = true;
        GpuSample s = r.sample;
        s.gpu_index = devices[d].gpu_index;
        frame.gpus.push_back(s);
      });
    });
    flush_frame();
    sink->write(batch);

    const RunSummary sum = acc.summary();
    run.end_ms = last_ms;
    run.samples = sum.samples;
    if (tick_ms.size() >= 2) {
      std::vector<int64_t> gaps;
      for (size_t i = 1; i < tick_ms.size(); ++i)
        gaps.push_back(tick_ms[i] - tick_ms[i - 1]);
      std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2), gaps.end());
      run.interval_ms = static_cast<double>(gaps[gaps.size() / 2]); // the median poll interval (-l N)
    }
    run.total_energy_j = sum.total_energy_j();
    run.summary = sum.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    sink->end_run(run);
    if (!ctx.quiet) std::fputs(("wattscope: imported " + run_text(run, {sink->describe()})).c_str(), stderr);
    return 0;
  }

private:
  std::string format_, file_, task_, db_ = kDefaultDb, host_;
  bool utc_ = false;
  std::vector<std::string> columns_;
};

} // namespace

std::unique_ptr<Command> make_import_command() {
  return std::make_unique<ImportCommand>();
}

} // namespace wattscope
