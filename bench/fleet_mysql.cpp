// What one MariaDB takes from a fleet (issue 18, point 6): N nodes of G GPUs each writing to it as `serve --db
// mysql://...` (or `record`) does at 1 s. Each simulated node is what a real one runs: its own connection and run
// (wattscope's MySQL sink, make_mysql_sink), its own writer thread batching frames into one transaction per commit
// (SinkWriter, as --commit-every 1s, the default, does), and the rows append_frame_rows makes of each frame: a
// cpu_samples row, the RAPL zones, one per GPU, every --process-interval (5 s under serve) the top processes' samples
// and their GPU rows, and one row per logical CPU at the same period (issue 33: the default; every tick with
// --per-core every-tick, as wattscope did before). Only the frames are made up; every statement is the store's.
//
// Phases, in one run so that each figure has its baseline beside it:
//   0. (--baseline-nodes, default 30) a few nodes storing per-core rows every tick, as before issue 33, for the
//      database's growth per node-day then, printed beside the fleet's;
//   1. one node alone at 1 s (the commit latency of an unloaded server);
//   2. the fleet at 1 s for --seconds (rows/s sustained against rows/s offered, commit latency against phase 1, the
//      server's CPU, the database's growth per node-day);
//   3. the fleet sped up (--speedups, as if each node sampled that much faster) step by step until the server falls
//      behind: the headroom, as the multiple of the fleet's real load that one server keeps up with.
// With --fill-gb G the fleet first writes history, as fast as the server stores it, until its tables hold G GB: phases
// 2 and 3 then run against a database larger than its buffer pool, as a server does after a day (300 nodes write ~160
// GB a day; a 60 s window on an empty database has every page it touches in memory).
//
// Usage (bench/fleet.sh starts a private server and passes these):
//   WATTSCOPE_MYSQL_PASSWORD=... wattscope_bench_fleet --url mysql://ws@127.0.0.1:PORT/wattscope --server-pid PID
//       [--nodes 100] [--gpus 8] [--cpus 224] [--seconds 60] [--speedups 1.5,2,3,4,6,8]
//       [--per-core period|every-tick|off] [--baseline-nodes 30] [--baseline-seconds 30] [--plain-tables yes|no]
//       [--fill-gb 0]
#include <mysql.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "fleet_common.hpp"

#include "core/frame.hpp"
#include "core/metrics.hpp"
#include "core/processes.hpp"
#include "core/schema.hpp"
#include "core/time_util.hpp"
#include "sinks/mysql/mysql_store.hpp"
#include "sinks/sink_writer.hpp"

using namespace wattscope;
using namespace wattscope::bench;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string url;
  long server_pid = 0;
  int nodes = 100;
  int gpus = 8;
  int cpus = 224;        // logical CPUs of a DGX H100 (2 x 56 cores, SMT): one cpu_core_samples row each per tick
  int zones = 6;         // RAPL: package, core and dram on each of 2 sockets
  int top = 20;          // serve's --top-processes
  int process_every = 5; // serve's --process-interval, in ticks at 1 s
  double seconds = 60;
  std::vector<double> speedups = {1.5, 2, 3, 4, 6, 8};
  std::string per_core = "period"; // issue 33: per-core rows every process_every ticks (period), every tick, or off
  int baseline_nodes = 30;         // 0: no baseline phase
  bool plain_tables = false;       // --plain-tables: the fleet's tables uncompressed too (what compression buys)
  double baseline_seconds = 30;
  double fill_gb = 0; // history written before the fleet's window, until the tables hold this much
  // Ticks between per-core rows: 1 every tick, process_every at the scan period, 0 none.
  int per_core_every() const { return per_core == "every-tick" ? 1 : per_core == "off" ? 0 : process_every; }
};

// Commit latency: every Sink::write is one transaction of one batch (SinkWriter::try_commit).
struct Latencies {
  std::mutex mu;
  std::vector<double> ms;
  void add(double v) {
    std::lock_guard lock(mu);
    ms.push_back(v);
  }
  std::vector<double> take() {
    std::lock_guard lock(mu);
    return std::exchange(ms, {});
  }
};

class TimedSink : public Sink {
public:
  TimedSink(std::unique_ptr<Sink> inner, Latencies& lat) : inner_(std::move(inner)), lat_(lat) {}
  std::string describe() const override { return inner_->describe(); }
  void begin_run(const RunInfo& run) override { inner_->begin_run(run); }
  void write(const RowBatch& batch) override {
    const auto t0 = Clock::now();
    inner_->write(batch);
    lat_.add(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  void end_run(const RunInfo& run) override { inner_->end_run(run); }
  void abandon() noexcept override { inner_->abandon(); }

private:
  std::unique_ptr<Sink> inner_;
  Latencies& lat_;
};

// Runs `sql` (statements separated by ";\n") on the database of `url`.
void exec_all(const MysqlUrl& url, const std::string& sql) {
  MYSQL* c = mysql_init(nullptr);
  const char* pw = std::getenv("WATTSCOPE_MYSQL_PASSWORD");
  if (!mysql_real_connect(c, url.host.empty() ? nullptr : url.host.c_str(), url.user.c_str(), pw, url.database.c_str(),
                          url.port, url.socket.empty() ? nullptr : url.socket.c_str(), 0)) {
    std::string e = mysql_error(c);
    mysql_close(c);
    throw std::runtime_error("cannot connect to " + url.text() + ": " + e);
  }
  size_t at = 0;
  for (size_t end; (end = sql.find(";\n", at)) != std::string::npos; at = end + 2)
    if (mysql_real_query(c, sql.data() + at, end - at) != 0) {
      std::string e = mysql_error(c);
      mysql_close(c);
      throw std::runtime_error(e);
    }
  mysql_close(c);
}

// The schema's bytes (data + indexes) per table, from InnoDB's statistics refreshed by ANALYZE TABLE.
std::map<std::string, double> table_bytes(const MysqlUrl& url) {
  MYSQL* c = mysql_init(nullptr);
  const char* pw = std::getenv("WATTSCOPE_MYSQL_PASSWORD");
  if (!mysql_real_connect(c, url.host.empty() ? nullptr : url.host.c_str(), url.user.c_str(), pw, url.database.c_str(),
                          url.port, url.socket.empty() ? nullptr : url.socket.c_str(), 0)) {
    std::string e = mysql_error(c);
    mysql_close(c);
    throw std::runtime_error("cannot connect for the size query: " + e);
  }
  auto rows = [&](const std::string& q) {
    std::vector<std::vector<std::string>> out;
    if (mysql_query(c, q.c_str())) throw std::runtime_error(q + ": " + mysql_error(c));
    if (MYSQL_RES* r = mysql_store_result(c)) {
      while (MYSQL_ROW row = mysql_fetch_row(r)) {
        std::vector<std::string> one;
        for (unsigned i = 0; i < mysql_num_fields(r); ++i)
          one.emplace_back(row[i] ? row[i] : "");
        out.push_back(std::move(one));
      }
      mysql_free_result(r);
    }
    return out;
  };
  std::map<std::string, double> out;
  for (const auto& t : rows("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"))
    rows("ANALYZE TABLE `" + t[0] + "`");
  for (const auto& r : rows("SELECT table_name, data_length + index_length FROM information_schema.tables "
                            "WHERE table_schema = DATABASE()"))
    out[r[0]] = std::stod(r[1]);
  mysql_close(c);
  return out;
}

// One node's frames: its GPUs, its CPUs, its RAPL zones, and every process_every-th tick a process scan.
class Node {
public:
  Node(int index, const Options& o, const MysqlUrl& url, Latencies& lat, int per_core_every)
      : o_(o), index_(index), per_core_every_(per_core_every) {
    auto devs = std::make_shared<std::vector<GpuDevice>>();
    for (int g = 0; g < o.gpus; ++g) {
      GpuDevice d;
      d.gpu_index = g;
      d.vendor = "nvidia";
      d.uuid = fmt::format("GPU-{:08x}-0000-4000-8000-{:012x}", index, g);
      d.name = "NVIDIA H100 80GB HBM3";
      d.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x18 + g);
      d.mem_total_bytes = int64_t{85899345920};
      d.power_limit_w = 700.0;
      d.energy_method = "counter";
      d.power_source = "instant";
      devs->push_back(d);
    }
    devices_ = devs;
    run_.start_ms = wall_now_ms();
    run_.run_id = new_run_id(run_.start_ms);
    run_.task = "serve";
    run_.host = fmt::format("gpu-node-{:03d}", index);
    run_.cpu_model = "Intel(R) Xeon(R) Platinum 8480C";
    run_.interval_ms = 1000;
    run_.version = "fleet-bench";
    auto sink = std::make_unique<TimedSink>(make_mysql_sink(url, /*spill_on_outage=*/false), lat);
    sink->begin_run(run_);
    writer_ = std::make_unique<SinkWriter>(std::move(sink), CommitPolicy{0, std::chrono::seconds(1)}, run_.run_id);
    writer_->start();
  }

  void tick() {
    auto f = std::make_shared<Frame>();
    const int64_t t = tick_++;
    f->tick = t;
    f->ts_ms = run_.start_ms + t * 1000;
    const double wiggle = std::sin(static_cast<double>(t + index_) * 0.37);
    f->cpu.util_pct = 40 + 20 * wiggle;
    f->cpu.mem_used_bytes = int64_t{412} << 30;
    f->cpu.mem_total_bytes = int64_t{2048} << 30;
    f->cpu.core_util_pct.reserve(static_cast<size_t>(o_.cpus));
    for (int c = 0; c < o_.cpus; ++c)
      f->cpu.core_util_pct.emplace_back(std::fmod(37.0 * c + 11.0 * static_cast<double>(t), 100.0));
    f->cpu.core_rows = per_core_every_ > 0 && t % per_core_every_ == 0;
    static constexpr std::string_view kZones[] = {"package", "core", "dram"};
    static constexpr std::string_view kDomains[] = {"intel-rapl:0", "intel-rapl:0:0", "intel-rapl:0:1",
                                                    "intel-rapl:1", "intel-rapl:1:0", "intel-rapl:1:1"};
    for (int z = 0; z < o_.zones; ++z) {
      PowerZoneSample s;
      s.zone = kZones[z % 3];
      s.domain = kDomains[z % 6];
      s.socket = int64_t{z / 3};
      s.power_w = 180.0 + 30 * wiggle;
      s.energy_j = 180.0 * static_cast<double>(t);
      f->cpu.zones.push_back(s);
    }
    for (int g = 0; g < o_.gpus; ++g) {
      GpuSample s;
      s.gpu_index = g;
      double x = 600 + 40 * wiggle + g;
      for (const auto& m : kGpuMetrics) { // every field a GPU reports, varying as readings do
        if (m.real)
          s.*m.real = x;
        else
          s.*m.integer = static_cast<int64_t>(x * 1000) + t;
        x += 7.5;
      }
      f->gpus.push_back(s);
    }
    if (t == 0) f->device_rows = *devices_;
    if (t % o_.process_every == 0) f->processes = scan(t);
    made_ += static_cast<int64_t>(1 + f->cpu.zones.size() + (f->cpu.core_rows ? f->cpu.core_util_pct.size() : 0) +
                                  f->gpus.size());
    if (f->processes) // the writer counts the processes rows too
      made_ +=
          static_cast<int64_t>(f->processes->procs.size() + f->processes->gpu_procs.size() + f->processes->rows.size());
    writer_->push(std::move(f));
  }

  RunInfo final_run() const {
    RunInfo end = run_;
    end.end_ms = wall_now_ms();
    end.exit_status = 0;
    end.samples = tick_;
    return end;
  }
  // As serve's SIGTERM: the drain starts for every node at once, then one shared deadline.
  void begin_finish() { writer_->begin_finish(final_run()); }
  bool finish(SteadyClock::time_point deadline) { return writer_->finish(final_run(), deadline); }
  int64_t rows_written() const { return writer_->stats().rows_written.load(); }
  int64_t ticks() const { return tick_; }
  int64_t rows_made() const { return made_; } // *_samples rows handed to the writer, as WriterStats counts them

private:
  // The top N processes of a busy node: one training job (a process per GPU) and its helpers; a few new each scan.
  std::shared_ptr<ProcessSnapshot> scan(int64_t t) {
    auto p = std::make_shared<ProcessSnapshot>();
    p->window_s = o_.process_every;
    for (int i = 0; i < o_.top; ++i) {
      ProcessSample s;
      s.id = {4000 + i + (i >= o_.gpus ? static_cast<int>(t / 60) : 0), 123456 + i};
      s.comm = i < o_.gpus ? "python" : "pt_data_worker";
      s.unit = "slurm job 4242";
      s.unit_kind = "slurm-job";
      s.sampled = true;
      s.cpu_pct = 95.0 + i;
      s.rss_bytes = int64_t{12} << 30;
      s.cpu_energy_j = 3.5 * static_cast<double>(t);
      p->procs.push_back(s);
      const bool fresh = t == 0 || (i >= o_.gpus && t % 60 == 0); // helpers come and go once a minute
      if (fresh) {
        ProcessRow r;
        r.id = s.id;
        r.ppid = 3999;
        r.comm = s.comm;
        r.cmdline = "python train.py --config configs/llm-7b.yaml";
        r.uid = 1000;
        r.unit = s.unit;
        r.unit_kind = s.unit_kind;
        r.first_tick = t;
        p->rows.push_back(r);
      }
      if (i < o_.gpus) {
        GpuProcessSample g;
        g.id = s.id;
        g.gpu_index = i;
        g.mem_used_bytes = int64_t{60} << 30;
        g.sm_pct = 97;
        g.mem_pct = 45;
        g.power_w = 610;
        g.energy_j = 610.0 * static_cast<double>(t);
        p->gpu_procs.push_back(g);
      }
    }
    return p;
  }

  const Options& o_;
  int index_;
  int per_core_every_;
  RunInfo run_;
  std::shared_ptr<const std::vector<GpuDevice>> devices_;
  std::unique_ptr<SinkWriter> writer_;
  int64_t tick_ = 0;
  int64_t made_ = 0;
};

// Ticks every node `rate` times a second for `seconds`, spread evenly over each period as independent nodes are.
// Returns the rows the nodes stored meanwhile and how many they had queued but not stored at the end.
struct Window {
  double seconds = 0;
  int64_t ticks = 0;
  int64_t rows_made = 0;
  int64_t rows_stored = 0;
  double server_cpu_s = 0;
  double own_cpu_s = 0;
};

Window drive(std::vector<std::unique_ptr<Node>>& nodes, double rate, double seconds, long server_pid) {
  Window w;
  int64_t rows0 = 0, ticks0 = 0, made0 = 0;
  for (auto& n : nodes) {
    rows0 += n->rows_written();
    ticks0 += n->ticks();
    made0 += n->rows_made();
  }
  const double s0 = server_pid ? cpu_seconds_of(server_pid) : NAN, c0 = own_cpu_seconds();
  const auto start = Clock::now();
  const auto period = std::chrono::duration<double>(1.0 / rate);
  const size_t n = nodes.size();
  const auto periods = static_cast<int64_t>(std::llround(seconds * rate));
  for (int64_t p = 0; p < periods; ++p)
    for (size_t i = 0; i < n; ++i) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                period * (static_cast<double>(p) + static_cast<double>(i) / n)));
      nodes[i]->tick();
    }
  std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(period * periods));
  w.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  w.server_cpu_s = server_pid ? cpu_seconds_of(server_pid) - s0 : NAN;
  w.own_cpu_s = own_cpu_seconds() - c0;
  for (auto& node : nodes) {
    w.rows_stored += node->rows_written();
    w.ticks += node->ticks();
    w.rows_made += node->rows_made();
  }
  w.rows_stored -= rows0;
  w.ticks -= ticks0;
  w.rows_made -= made0;
  return w;
}

// Waits until the writers have stored what they were given (no row stored for 2 s), at most a minute.
void settle(std::vector<std::unique_ptr<Node>>& nodes) {
  auto total = [&] {
    int64_t r = 0;
    for (auto& n : nodes)
      r += n->rows_written();
    return r;
  };
  int64_t last = -1;
  for (int i = 0; i < 60 && total() != last; ++i) {
    last = total();
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

double total_gb(const std::map<std::string, double>& sizes) {
  double b = 0;
  for (const auto& [t, bytes] : sizes)
    b += bytes;
  return b / 1e9;
}

// History before the window: the fleet at 1.2x its load (about what this server stores at full speed; at 3x commits
// wait past the store's 15 s I/O timeout and the nodes spill, as in an outage) in 30 s steps, each stored before the
// next, until the tables hold o.fill_gb (at most 2 h).
void fill(std::vector<std::unique_ptr<Node>>& nodes, const MysqlUrl& url, const Options& o) {
  const auto t0 = Clock::now();
  double gb = total_gb(table_bytes(url));
  int64_t rows = 0, ticks = 0;
  while (gb < o.fill_gb && Clock::now() - t0 < std::chrono::hours(2)) {
    const Window w = drive(nodes, 1.2, 30, o.server_pid);
    rows += w.rows_made;
    ticks += w.ticks;
    settle(nodes);
    gb = total_gb(table_bytes(url));
    fmt::print("  history: {:.2f} GB in the tables after {:.0f} s\n", gb,
               std::chrono::duration<double>(Clock::now() - t0).count());
    std::fflush(stdout);
  }
  fmt::print("history written: {:.2f} GB in the tables ({} rows, {:.1f} min of the fleet at 1 s) in {:.0f} s\n", gb,
             rows, static_cast<double>(ticks) / static_cast<double>(nodes.size()) / 60,
             std::chrono::duration<double>(Clock::now() - t0).count());
}

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    out.push_back(std::stod(x));
  return out;
}

} // namespace

int main(int argc, char** argv) try {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--url")
      o.url = v;
    else if (k == "--server-pid")
      o.server_pid = std::stol(v);
    else if (k == "--nodes")
      o.nodes = std::stoi(v);
    else if (k == "--gpus")
      o.gpus = std::stoi(v);
    else if (k == "--cpus")
      o.cpus = std::stoi(v);
    else if (k == "--seconds")
      o.seconds = std::stod(v);
    else if (k == "--speedups")
      o.speedups = parse_list(v);
    else if (k == "--per-core" && (v == "period" || v == "every-tick" || v == "off"))
      o.per_core = v;
    else if (k == "--plain-tables" && (v == "yes" || v == "no"))
      o.plain_tables = v == "yes";
    else if (k == "--baseline-nodes")
      o.baseline_nodes = std::stoi(v);
    else if (k == "--baseline-seconds")
      o.baseline_seconds = std::stod(v);
    else if (k == "--fill-gb")
      o.fill_gb = std::stod(v);
    else
      throw std::invalid_argument("unknown option " + k);
  }
  if (o.url.empty()) throw std::invalid_argument("--url mysql://USER@HOST:PORT/DB is required");
  const MysqlUrl url = parse_mysql_url(o.url);
  const int every = o.per_core_every();
  const double rows_per_tick_avg = 1 + o.zones + o.gpus + (every ? static_cast<double>(o.cpus) / every : 0) +
                                   static_cast<double>(o.top + o.gpus) / o.process_every;
  fmt::print("fleet: {} nodes x {} GPUs at 1 s into {} (each: its own connection, run and writer thread, commit "
             "every 1 s)\nper node and tick: 1 cpu_samples + {} RAPL zones + {} gpu_samples rows; every {} s {} "
             "process_samples + {} process_gpu_samples; {} cpu_core_samples {}: {:.1f} rows/s per node on average\n",
             o.nodes, o.gpus, url.text(), o.zones, o.gpus, o.process_every, o.top, o.gpus, o.cpus,
             every == 1 ? "every tick"
             : every    ? fmt::format("every {} s (the process-scan period)", every)
                        : "never",
             rows_per_tick_avg);

  Latencies lat;
  if (o.plain_tables) exec_all(url, mysql_schema_sql(/*compress=*/false));
  const auto size0 = table_bytes(url);

  // 0. Before issue 33: per-core rows every tick into plain tables, in a database of its own (DB_before, which
  // fleet.sh creates) so that neither window's growth counts the other's. Only the growth per node-day is taken.
  double baseline_gb_per_node_day = NAN;
  std::string baseline_per_table;
  if (o.baseline_nodes > 0) {
    MysqlUrl before = url;
    before.database += "_before";
    exec_all(before, mysql_schema_sql(/*compress=*/false));
    std::vector<std::unique_ptr<Node>> old;
    for (int i = 0; i < o.baseline_nodes; ++i)
      old.push_back(std::make_unique<Node>(20000 + i, o, before, lat, 1));
    drive(old, 1, 3, o.server_pid);
    settle(old);
    const auto b1 = table_bytes(before);
    const Window bw = drive(old, 1, o.baseline_seconds, o.server_pid);
    settle(old);
    const auto b2 = table_bytes(before);
    const double node_days = bw.seconds * o.baseline_nodes / 86400;
    double grown = 0;
    for (const auto& [t, b] : b2) {
      const double d = b - (b1.count(t) ? b1.at(t) : 0);
      grown += d;
      if (d > 0) baseline_per_table += fmt::format(" {} {:.1f} MB;", t, d / 1e6 / node_days);
    }
    baseline_gb_per_node_day = grown / 1e9 / node_days;
    fmt::print(
        "\n== before issue 33 (per-core rows every tick, plain tables): {} nodes for {:.0f} s: {} of {} rows stored; "
        "database growth {:.2f} GB per node-day\n  per table and node-day:{}\n",
        o.baseline_nodes, bw.seconds, bw.rows_stored, bw.rows_made, baseline_gb_per_node_day, baseline_per_table);
    for (auto& n : old)
      n->finish(SteadyClock::now() + std::chrono::seconds(60));
    lat.take();
    std::fflush(stdout);
  }

  // 1. One node alone.
  std::vector<std::unique_ptr<Node>> one;
  one.push_back(std::make_unique<Node>(9999, o, url, lat, every));
  drive(one, 1, 10, o.server_pid);
  one[0]->finish(SteadyClock::now() + std::chrono::seconds(30));
  const auto lat_one = lat.take();

  // 2. The fleet at 1 s.
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < o.nodes; ++i)
    nodes.push_back(std::make_unique<Node>(i, o, url, lat, every));
  drive(nodes, 1, 3, o.server_pid); // warm-up: first commits, gpu_devices and processes rows
  settle(nodes);                    // its backlog stored before the window opens
  if (o.fill_gb > 0) fill(nodes, url, o);
  lat.take();
  const auto size1 = table_bytes(url);
  const Window w = drive(nodes, 1, o.seconds, o.server_pid);
  const auto lat_fleet = lat.take();
  settle(nodes); // every row of the window stored before its size is taken (the baseline's was too)
  int64_t all_made = 0, all_stored = 0; // since each node began, warm-up included
  for (auto& n : nodes) {
    all_made += n->rows_made();
    all_stored += n->rows_written();
  }
  const auto size2 = table_bytes(url);
  const double offered = static_cast<double>(w.rows_made) / w.seconds;
  const double stored = static_cast<double>(w.rows_stored) / w.seconds;
  fmt::print("\n== {} nodes at 1 s for {:.0f} s\n", o.nodes, w.seconds);
  fmt::print("rows/s offered {:.0f}, stored {:.0f}: {:.3f}x of what the fleet produces; {} rows made in the window, "
             "every row stored {}\n",
             offered, stored, stored / offered, w.rows_made,
             all_stored == all_made ? "(checked once the writers settled)" : "NOT: rows missing");
  fmt::print("commit latency (one transaction of a node's batch): p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms over {} "
             "commits; one node alone: p50 {:.1f} ms, p99 {:.1f} ms: p50 {:.2f}x, p99 {:.2f}x\n",
             percentile(lat_fleet, 50), percentile(lat_fleet, 99), percentile(lat_fleet, 100), lat_fleet.size(),
             percentile(lat_one, 50), percentile(lat_one, 99), percentile(lat_fleet, 50) / percentile(lat_one, 50),
             percentile(lat_fleet, 99) / percentile(lat_one, 99));
  fmt::print("server CPU: {:.1f} % of one core ({:.1f} us per row); this load generator (100 nodes' row building and "
             "client side): {:.1f} % of one core\n",
             100 * w.server_cpu_s / w.seconds, 1e6 * w.server_cpu_s / static_cast<double>(w.rows_stored),
             100 * w.own_cpu_s / w.seconds);
  double grown = 0;
  std::string per_table;
  for (const auto& [t, b] : size2) {
    const double d = b - (size1.count(t) ? size1.at(t) : 0);
    grown += d;
    if (d > 0) per_table += fmt::format(" {} {:.1f} MB;", t, d / 1e6 * 86400 / (w.seconds * o.nodes));
  }
  const double node_days = w.seconds * o.nodes / 86400;
  fmt::print("database growth: {:.1f} MB in this window ({:.0f} bytes per row stored, indexes included): {:.2f} GB "
             "per node-day, {:.0f} GB a day for the fleet\n  per table and node-day:{}\n",
             grown / 1e6, grown / static_cast<double>(w.rows_made), grown / 1e9 / node_days,
             grown / 1e9 / node_days * o.nodes, per_table);
  if (o.baseline_nodes > 0)
    fmt::print("bytes per node-day, same run: before issue 33 (per-core every tick) {:.3f} GB, now ({}) {:.3f} GB: "
               "{:.3f}x ({})\n",
               baseline_gb_per_node_day, o.per_core, grown / 1e9 / node_days,
               grown / 1e9 / node_days / baseline_gb_per_node_day,
               grown / 1e9 / node_days <= baseline_gb_per_node_day / 3 ? "at most a third" : "MORE than a third");
  (void)size0;

  std::fflush(stdout);

  // 3. Headroom: the fleet sped up step by step, until the server stops keeping up (stores under 95 % of what is
  // offered); each step starts once the previous one's backlog is stored.
  double kept_up = 1;
  for (double s : o.speedups) {
    settle(nodes);
    lat.take();
    const Window f = drive(nodes, s, 15, o.server_pid);
    const auto l = lat.take();
    const double off = static_cast<double>(f.rows_made) / f.seconds;
    const double got = static_cast<double>(f.rows_stored) / f.seconds;
    fmt::print("x{:g} the fleet's load ({:.0f} rows/s offered): stored {:.0f} rows/s ({:.2f}x), commit p50 {:.1f} ms "
               "p99 {:.1f} ms, server CPU {:.0f} % of a core\n",
               s, off, got, got / off, percentile(l, 50), percentile(l, 99), 100 * f.server_cpu_s / f.seconds);
    std::fflush(stdout);
    if (got < 0.95 * off) break;
    kept_up = s;
  }
  fmt::print("headroom: this server kept up with {:g}x the fleet's load ({} nodes x {} GPUs at 1 s)\n", kept_up,
             o.nodes, o.gpus);
  const auto t0 = Clock::now();
  const auto deadline = SteadyClock::now() + std::chrono::seconds(120);
  for (auto& n : nodes)
    n->begin_finish();
  size_t finished = 0;
  for (auto& n : nodes)
    finished += n->finish(deadline) ? 1 : 0;
  fmt::print("drained and finalised {} of {} runs in {:.1f} s\n", finished, nodes.size(),
             std::chrono::duration<double>(Clock::now() - t0).count());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "wattscope_bench_fleet: %s\n", e.what());
  return 1;
}
