#include "sinks/csv/csv_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <fmt/compile.h>
#include <fmt/format.h>

#include "core/fd.hpp"
#include "core/output_file.hpp"
#include "core/text.hpp"
#include "core/time_util.hpp"
#include "sinks/csv/csv_reader.hpp"

namespace wattscope {

namespace fs = std::filesystem;

namespace {
bool needs_quotes(std::string_view s) {
  if (s.empty() || s.front() == ' ' || s.back() == ' ') return true;
  for (char c : s)
    if (c == ',' || c == '"' || c == '\n' || c == '\r') return true;
  return false;
}
} // namespace

void append_csv_cell(std::string& out, const Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) {
    const fmt::format_int f(*i);
    out.append(f.data(), f.size());
  } else if (auto* d = std::get_if<double>(&v)) {
    // Into a stack buffer: locale-independent, shortest round-trip. (FMT_COMPILE is slower for doubles in fmt 9.)
    char tmp[40];
    out.append(tmp, fmt::format_to_n(tmp, sizeof tmp, "{}", *d).out);
  } else if (!is_null(v)) {
    std::string_view s = value_text(v);
    // A quoted empty string is text; an unquoted empty cell is a missing value.
    if (needs_quotes(s)) {
      out.push_back('"');
      for (char c : s) {
        if (c == '"') out.push_back('"');
        out.push_back(c);
      }
      out.push_back('"');
    } else {
      out += s;
    }
  }
}

std::string csv_file_name(const RunInfo& run, TableId t) {
  // {task}_{start}_{id suffix}: the run id's random part keeps two runs of one task in the same second apart.
  const std::string_view id = run.run_id;
  const std::string_view suffix = id.size() > 8 ? id.substr(id.size() - 8) : id;
  return fmt::format("{}_{}_{}_{}.csv", file_safe(run.task), compact_utc(run.start_ms), file_safe(suffix),
                     table(t).name);
}

namespace {

// The first of a table's columns its file holds: run_id (the first) is left out where csv_omits_run_id.
size_t first_column(TableId id) {
  return csv_omits_run_id(id) ? 1 : 0;
}

std::string header(TableId id) {
  const Table& t = table(id);
  std::string h;
  for (size_t i = first_column(id); i < t.columns.size(); ++i)
    h += fmt::format("{}{}", i > first_column(id) ? "," : "", t.columns[i].name);
  h.push_back('\n');
  return h;
}

// A batch's rows as lines of `id`'s file.
void append_lines(std::string& out, TableId id, const TableRows& rows) {
  const size_t ncol = rows.columns(), first = first_column(id);
  for (size_t i = 0; i < rows.cells.size(); ++i) {
    const size_t col = i % ncol;
    if (col < first) continue;
    append_csv_cell(out, rows.cells[i]);
    out.push_back(col + 1 == ncol ? '\n' : ',');
  }
}

// A file per table, written with pwrite at the offset where the last stored batch ended. No stdio buffer: a write
// that fails has nothing left behind in memory to be flushed again later.
struct TableFile {
  UniqueFd fd;
  off_t committed = 0; // bytes of whole batches (header included)
  bool dirty = false;  // a failed batch could not be cut off yet: cut before anything else is written
};

class CsvSink final : public Sink {
public:
  explicit CsvSink(std::string dir) : dir_(std::move(dir)) {}
  std::string describe() const override { return fmt::format("CSV {}/", dir_); }

  void begin_run(const RunInfo& run) override {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec || ::access(dir_.c_str(), W_OK) != 0)
      throw std::runtime_error(fmt::format("cannot write CSV files in '{}': {}; pass --csv with a writable directory",
                                           dir_, ec ? ec.message() : std::strerror(errno)));
    run_ = run;
    // Appending a run that is already here would duplicate its rows (an export run twice, say).
    if (fs::exists(path(TableId::CpuSamples)) || fs::exists(path(TableId::GpuSamples)))
      throw std::runtime_error(fmt::format("CSV files of run {} already exist in '{}'", run.run_id, dir_));
    write_runs_file(run);
  }

  // A batch reaches every table file whole or not at all: on any failure (a full disk, say) every file this batch
  // touched is cut back to where the previous batch ended, and the error goes to the writer, which retries the whole
  // batch later. Readers may see a batch's rows appear, but never a row twice or half a line once it is over.
  void write(const RowBatch& batch) override {
    for (size_t i = 0; i < kTableCount; ++i)
      if (files_[i].dirty) cut_back(static_cast<TableId>(i));
    std::array<off_t, kTableCount> end{};
    std::array<bool, kTableCount> touched{};
    try {
      for (const auto& rows : batch.tables) {
        // The runs file holds one row, rewritten whole by begin_run and end_run; appending would duplicate it.
        if (rows.cells.empty() || rows.table == TableId::Runs) continue;
        const size_t idx = static_cast<size_t>(rows.table);
        TableFile& f = files_[idx];
        if (!f.fd) f.fd = create_table(rows.table);
        touched[idx] = true;
        buf_.clear();
        if (f.committed == 0) buf_ = header(rows.table); // with the first rows, as part of their batch
        append_lines(buf_, rows.table, rows);
        pwrite_all(rows.table, f.committed, buf_);
        end[idx] = f.committed + static_cast<off_t>(buf_.size());
      }
    } catch (...) {
      for (size_t i = 0; i < kTableCount; ++i)
        if (touched[i]) files_[i].dirty = true;
      for (size_t i = 0; i < kTableCount; ++i)
        if (touched[i]) try_cut_back(static_cast<TableId>(i));
      throw;
    }
    for (size_t i = 0; i < kTableCount; ++i)
      if (touched[i]) files_[i].committed = end[i];
  }

  // `wattscope repair`: the run's files are already here. The rows (phases repair closed) are appended to their
  // table's file, where the later row of a key wins; then the runs file is rewritten.
  void finalise_run(const RunInfo& run, const RowBatch& rows) override {
    run_ = run;
    for (const auto& t : rows.tables)
      if (!t.cells.empty() && t.table != TableId::Runs) append_to_existing(t);
    write_runs_file(run);
  }

  void end_run(const RunInfo& run) override {
    // The samples reach the disk before the runs row that says the run is complete.
    for (size_t i = 0; i < kTableCount; ++i) {
      if (!files_[i].fd) continue;
      if (files_[i].dirty) cut_back(static_cast<TableId>(i));
      if (::fdatasync(files_[i].fd.get()) != 0)
        throw std::runtime_error(fmt::format("writing {}: {}", path(static_cast<TableId>(i)), std::strerror(errno)));
    }
    write_runs_file(run);
  }

private:
  std::string path(TableId t) const { return dir_ + "/" + csv_file_name(run_, t); }

  // A new file of this run, never one that is there already (nor a link planted under its name).
  UniqueFd create_table(TableId t) const {
    const std::string p = path(t);
    UniqueFd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666));
    if (!fd) {
      if (errno == EEXIST)
        throw std::runtime_error(fmt::format("'{}' already exists; wattscope writes each run's CSV files new", p));
      throw std::runtime_error(fmt::format("cannot create '{}': {}", p, std::strerror(errno)));
    }
    return fd;
  }

  void pwrite_all(TableId t, off_t at, std::string_view bytes) const {
    const int fd = files_[static_cast<size_t>(t)].fd.get();
    while (!bytes.empty()) {
      const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(fmt::format("writing {}: {}", path(t), std::strerror(errno)));
      bytes.remove_prefix(static_cast<size_t>(n));
      at += n;
    }
  }

  // Appends rows to a table file of this run that a recorder left. A last line cut short (the recorder killed inside a
  // write) was never a whole batch: it is cut off first, as the writer would have. A file that is not there gets its
  // header; one that is not a regular file is refused.
  void append_to_existing(const TableRows& rows) {
    const std::string p = path(rows.table);
    UniqueFd fd(::open(p.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0)
      throw std::runtime_error(fmt::format("cannot open '{}': {}", p, std::strerror(errno)));
    if (!S_ISREG(st.st_mode)) throw std::runtime_error(fmt::format("'{}' is not a regular file", p));
    off_t end = st.st_size;
    char last = '\n';
    while (end > 0 && ::pread(fd.get(), &last, 1, end - 1) == 1 && last != '\n')
      --end;
    const std::string head = header(rows.table);
    if (end > 0) { // rows in this version's columns go only under this version's header
      std::string have(head.size(), '\0');
      if (::pread(fd.get(), have.data(), have.size(), 0) != static_cast<ssize_t>(have.size()) || have != head)
        throw std::runtime_error(fmt::format("'{}' has other columns than this wattscope writes; not appended to", p));
    }
    std::string text = end == 0 ? head : std::string();
    append_lines(text, rows.table, rows);
    if (end != st.st_size && ::ftruncate(fd.get(), end) != 0)
      throw std::runtime_error(fmt::format("cannot cut '{}' back to its last whole line: {}", p, std::strerror(errno)));
    std::string_view bytes = text;
    for (off_t at = end; !bytes.empty();) {
      const ssize_t n = ::pwrite(fd.get(), bytes.data(), bytes.size(), at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(fmt::format("writing {}: {}", p, std::strerror(errno)));
      bytes.remove_prefix(static_cast<size_t>(n));
      at += n;
    }
    if (::fdatasync(fd.get()) != 0) throw std::runtime_error(fmt::format("writing {}: {}", p, std::strerror(errno)));
  }

  bool try_cut_back(TableId t) {
    TableFile& f = files_[static_cast<size_t>(t)];
    if (::ftruncate(f.fd.get(), f.committed) != 0) return false;
    f.dirty = false;
    return true;
  }
  void cut_back(TableId t) {
    if (!try_cut_back(t))
      throw std::runtime_error(
          fmt::format("cannot cut {} back to its last whole batch: {}", path(t), std::strerror(errno)));
  }

  void write_runs_file(const RunInfo& run) {
    TableRows rows;
    rows.table = TableId::Runs;
    append_run_row(run, rows);
    std::string text = header(TableId::Runs);
    append_lines(text, TableId::Runs, rows);
    write_output(path(TableId::Runs), text);
  }

  std::string dir_;
  RunInfo run_;
  std::array<TableFile, kTableCount> files_{};
  std::string buf_;
};

class CsvDirReader final : public StoreReader {
public:
  explicit CsvDirReader(std::string dir) : dir_(std::move(dir)) {
    if (!fs::is_directory(dir_))
      throw std::runtime_error(fmt::format("'{}' is not a directory of wattscope CSV files", dir_));
  }
  std::string describe() const override { return fmt::format("CSV {}/", dir_); }

  std::vector<RunInfo> runs() override {
    std::vector<RunInfo> out;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (name.size() < 9 || name.substr(name.size() - 9) != "_runs.csv") continue;
      read_table_csv(entry.path().string(), TableId::Runs,
                     [&](std::span<const Value> row) { out.push_back(run_from_row(row)); });
    }
    std::sort(out.begin(), out.end(), [](const RunInfo& a, const RunInfo& b) {
      return a.start_ms != b.start_ms ? a.start_ms < b.start_ms : a.run_id < b.run_id;
    });
    return out;
  }

  void scan(TableId t, const RunInfo& run, const RowFn& fn) override {
    const std::string p = dir_ + "/" + csv_file_name(run, t);
    if (!fs::exists(p)) return; // a table with no rows for this run has no file
    const size_t run_col = column_index(t, "run_id");
    if (t != TableId::Processes && t != TableId::Phases) { // appended in key order (time order): streamed as read
      read_table_csv(
          p, t,
          [&](std::span<const Value> row) {
            if (value_text(row[run_col]) == run.run_id) fn(row);
          },
          run.run_id);
      return;
    }
    const auto owned = [](std::span<const Value> row) {
      std::vector<Value> copy;
      copy.reserve(row.size());
      for (const auto& v : row) // owned: the reader's buffer does not outlive the call
        copy.push_back(std::holds_alternative<std::string_view>(v) ? Value(std::string(std::get<std::string_view>(v)))
                                                                   : v);
      return copy;
    };
    if (t == TableId::Phases) {
      // A phase has a row when it begins (open) and another when it ends (or `repair` closes it), appended: the last
      // row of a phase_id is the phase as it stands, as the SQL stores' upsert keeps it. In phase_id order, as they
      // return it.
      const size_t id = column_index(t, "phase_id");
      std::map<int64_t, std::vector<Value>> latest;
      read_table_csv(p, t, [&](std::span<const Value> row) {
        if (value_text(row[run_col]) == run.run_id) latest[value_int(row[id]).value_or(0)] = owned(row);
      });
      for (const auto& [_, r] : latest)
        fn(r);
      return;
    }
    // A process's row is written when it is gone, so the file is in order of leaving, not of key: sorted here, as
    // the SQL stores return it (ORDER BY the key), so every store reads back alike.
    const size_t pid = column_index(t, "pid"), start = column_index(t, "start_time");
    std::vector<std::vector<Value>> rows;
    read_table_csv(p, t, [&](std::span<const Value> row) {
      if (value_text(row[run_col]) != run.run_id) return;
      rows.push_back(owned(row));
    });
    auto key = [&](const std::vector<Value>& r) {
      auto num = [](const Value& v) {
        const auto* i = std::get_if<int64_t>(&v);
        return i ? *i : int64_t{0};
      };
      return std::pair{num(r[pid]), num(r[start])};
    };
    std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
    for (const auto& r : rows)
      fn(r);
  }

private:
  std::string dir_;
};

} // namespace

std::unique_ptr<Sink> make_csv_sink(const std::string& dir) {
  return std::make_unique<CsvSink>(dir);
}
std::unique_ptr<StoreReader> make_csv_reader(const std::string& dir) {
  return std::make_unique<CsvDirReader>(dir);
}

} // namespace wattscope
