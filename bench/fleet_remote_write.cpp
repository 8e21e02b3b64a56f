// What one VictoriaMetrics takes from a fleet pushing with --remote-write (docs/remote-write.md, "Fleet figures"), and
// what the push costs a node, beside a scrape of the same node in the same run.
//
// A node's series are serve's own: a LiveState with G GPUs (every registry field set, so the count is an upper
// bound for a real H100) renders /metrics once, and each simulated node pushes that text with its own host label
// through the writer's own path: BatchBuilder (the exposition stamped with the second), encode_write_request,
// snappy, http_post, one request per node every 5 s (the writer's batch), the nodes spread evenly over the 5 s.
//
// Phases, in one run:
//   1. per node: the CPU of the push path per node-second (render + batch + encode + compress), against rendering
//      /metrics once (what a Prometheus scrape of the node costs it) as the baseline;
//   2. fleets of --nodes-steps nodes for --seconds each: samples offered and accepted per second, request latency,
//      the receiver's CPU (from /proc/PID/stat) and this generator's, until the receiver falls behind (accepted under
//      98 % of offered, or a p99 latency over the 5 s batch).
//
// Usage (bench/fleet.sh starts a private VictoriaMetrics and passes these):
//   wattscope_bench_fleet_remote_write --url http://127.0.0.1:PORT/api/v1/write --server-pid PID
//       [--gpus 8] [--seconds 30] [--nodes-steps 250,500,1000,2000] [--senders 16]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "fleet_common.hpp"

#include "core/lazy/http_get.hpp"
#include "core/metrics.hpp"
#include "core/time_util.hpp"
#include "remote_write/series.hpp"
#include "remote_write/wire.hpp"
#include "server/live.hpp"

using namespace wattscope;
using namespace wattscope::bench;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string url;
  long server_pid = 0;
  int gpus = 8;
  double seconds = 30;
  std::vector<int> steps = {250, 500, 1000, 2000};
  int senders = 16;
};

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// A node's live state: G GPUs with every registry field, the CPU, one frame.
struct NodeState {
  std::unique_ptr<LiveState> live;
  explicit NodeState(int gpus, int64_t tick) {
    live = std::make_unique<LiveState>(std::chrono::seconds(1), std::chrono::seconds(1));
    RunInfo run;
    run.start_ms = 1795262609833;
    run.run_id = new_run_id(run.start_ms);
    run.task = "serve";
    run.host = "NODEHOST";
    run.interval_ms = 1000;
    std::vector<GpuDevice> devs(static_cast<size_t>(gpus));
    for (int g = 0; g < gpus; ++g) {
      devs[g].gpu_index = g;
      devs[g].vendor = "nvidia";
      devs[g].uuid = fmt::format("GPU-5f8a2c1e-0000-4000-8000-{:012x}", g);
      devs[g].name = "NVIDIA H100 80GB HBM3";
      devs[g].pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x18 + g);
      devs[g].energy_method = "counter";
    }
    live->set_run(run, devs);
    auto f = std::make_shared<Frame>();
    f->tick = tick;
    f->ts_ms = run.start_ms + tick * 1000;
    double v = 12.5;
    for (const auto& m : kCpuMetrics) {
      if (m.real)
        f->cpu.*m.real = v;
      else
        f->cpu.*m.integer = static_cast<int64_t>(v * 1e6);
      v += 1.25;
    }
    for (int g = 0; g < gpus; ++g) {
      GpuSample s;
      s.gpu_index = g;
      double x = 312.25 + g;
      for (const auto& m : kGpuMetrics) {
        if (m.real)
          s.*m.real = x + static_cast<double>(tick);
        else
          s.*m.integer = static_cast<int64_t>(x) * 1000 + tick;
        x += 7.5;
      }
      f->gpus.push_back(s);
    }
    live->push(f);
  }
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size())
    s.replace(at, from.size(), to);
  return s;
}

// Phase 1: the push path's CPU per node-second against one render of /metrics (a scrape's cost to the node).
size_t per_node(const Options& o) {
  NodeState node(o.gpus, 1);
  const int seconds = 2000;
  double t0 = thread_cpu_seconds();
  size_t bytes = 0;
  for (int i = 0; i < seconds; ++i)
    bytes += node.live->metrics_text().size();
  const double render_us = (thread_cpu_seconds() - t0) / seconds * 1e6;
  remote_write::BatchBuilder b(remote_write::Labels{{"cluster", "bench"}});
  size_t wire = 0, samples = 0;
  t0 = thread_cpu_seconds();
  for (int i = 0; i < seconds; ++i) {
    const std::string t = node.live->metrics_text();
    samples += b.add(t, 1795262609833 + i * 1000);
    if ((i + 1) % 5 == 0) {
      std::string err;
      const auto series = b.take();
      wire += remote_write::snappy_compress(remote_write::encode_write_request(series), err)->size();
    }
  }
  const double push_us = (thread_cpu_seconds() - t0) / seconds * 1e6;
  const size_t series = samples / seconds;
  fmt::print("node: {} GPUs, {} series ({} bytes of /metrics text), {:.0f} compressed bytes per node-second on the "
             "wire\n",
             o.gpus, series, bytes / seconds, static_cast<double>(wire) / seconds);
  fmt::print("per node-second: push path {:.0f} us of CPU (render, batch, encode, snappy) vs a scrape's render {:.0f} "
             "us: {:.2f}x a scrape at the same rate; {:.4f} % of one core at 1 s\n",
             push_us, render_us, push_us / render_us, push_us / 1e4);
  return series;
}

struct StepResult {
  int nodes = 0;
  double target = 0, accepted = 0, failed = 0, p50 = NAN, p99 = NAN, server_cpu = NAN, own_cpu = NAN;
  double late_s = 0; // how far the senders fell behind their schedule at worst
};

// Phase 2: N nodes, each posting every 5 s, spread evenly; `senders` threads carry the requests.
StepResult fleet(const Options& o, const std::string& text, int nodes, size_t series) {
  constexpr int kBatchS = 5;
  std::vector<std::string> node_text(static_cast<size_t>(nodes));
  for (int n = 0; n < nodes; ++n)
    node_text[n] = replace_all(text, "host=\"NODEHOST\"", fmt::format("host=\"node-{:05}\"", n));
  std::vector<remote_write::BatchBuilder> builders;
  builders.reserve(static_cast<size_t>(nodes));
  for (int n = 0; n < nodes; ++n)
    builders.emplace_back(remote_write::Labels{{"cluster", "bench"}, {"host", fmt::format("node-{:05}", n)}});
  std::atomic<uint64_t> accepted{0}, failed{0};
  std::atomic<int64_t> late_ms{0};
  std::mutex lat_mu;
  std::vector<double> lat_ms;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  const int64_t t0_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const double server0 = cpu_seconds_of(o.server_pid), own0 = own_cpu_seconds();
  // Node n posts at n/nodes of each 5 s window, its five seconds of samples; sender s takes nodes s, s+S, ...
  std::vector<std::thread> threads;
  for (int s = 0; s < o.senders; ++s)
    threads.emplace_back([&, s] {
      for (int window = 0;; ++window) {
        for (int n = s; n < nodes; n += o.senders) {
          const auto due = start + std::chrono::milliseconds(window * kBatchS * 1000 + n * kBatchS * 1000 / nodes);
          if (due >= end) return;
          std::this_thread::sleep_until(due);
          const auto behind = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - due).count();
          for (int64_t seen = late_ms.load(); behind > seen && !late_ms.compare_exchange_weak(seen, behind);) {
          }
          auto& b = builders[n];
          for (int k = 0; k < kBatchS; ++k)
            b.add(node_text[n], t0_ms + (window * kBatchS + k) * 1000);
          const size_t samples = b.samples();
          std::string err;
          HttpPost post;
          post.url = o.url;
          post.body = *remote_write::snappy_compress(remote_write::encode_write_request(b.take()), err);
          post.headers = {"Content-Encoding: snappy", "Content-Type: application/x-protobuf",
                          "X-Prometheus-Remote-Write-Version: 0.1.0"};
          post.timeout = std::chrono::seconds(30);
          const auto t = Clock::now();
          const HttpAnswer a = http_post(post);
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
          (a.status / 100 == 2 ? accepted : failed) += samples;
          std::lock_guard lock(lat_mu);
          lat_ms.push_back(ms);
        }
      }
    });
  for (auto& t : threads)
    t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  StepResult r;
  r.nodes = nodes;
  r.target = static_cast<double>(nodes) * static_cast<double>(series);
  r.late_s = static_cast<double>(late_ms.load()) / 1000;
  r.accepted = static_cast<double>(accepted) / wall;
  r.failed = static_cast<double>(failed) / wall;
  r.p50 = percentile(lat_ms, 50);
  r.p99 = percentile(lat_ms, 99);
  r.server_cpu = (cpu_seconds_of(o.server_pid) - server0) / wall;
  r.own_cpu = (own_cpu_seconds() - own0) / wall;
  return r;
}

std::vector<int> parse_list(const std::string& v) {
  std::vector<int> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');)
    out.push_back(std::stoi(item));
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
    else if (k == "--gpus")
      o.gpus = std::stoi(v);
    else if (k == "--seconds")
      o.seconds = std::stod(v);
    else if (k == "--nodes-steps")
      o.steps = parse_list(v);
    else if (k == "--senders")
      o.senders = std::stoi(v);
    else
      throw std::invalid_argument("unknown option " + k);
  }
  if (o.url.empty()) throw std::invalid_argument("--url http://HOST:PORT/api/v1/write is required");
  NodeState node(o.gpus, 1);
  const std::string text = node.live->metrics_text();
  const size_t series = per_node(o);
  fmt::print("{:>6} {:>12} {:>12} {:>10} {:>9} {:>9} {:>8} {:>11} {:>13}\n", "nodes", "samples/s", "accepted/s",
             "failed/s", "p50 ms", "p99 ms", "late s", "server CPU", "generator CPU");
  for (const int n : o.steps) {
    const StepResult r = fleet(o, text, n, series);
    fmt::print("{:>6} {:>12.0f} {:>12.0f} {:>10.0f} {:>9.1f} {:>9.1f} {:>8.1f} {:>10.0f}% {:>12.0f}%\n", r.nodes,
               r.target, r.accepted, r.failed, r.p50, r.p99, r.late_s, r.server_cpu * 100, r.own_cpu * 100);
    std::fflush(stdout);
    if (r.accepted < 0.98 * r.target || r.p99 > 5000 || r.late_s > 5) {
      fmt::print("the receiver fell behind at {} nodes x {} GPUs\n", n, o.gpus);
      break;
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "wattscope_bench_fleet_remote_write: %s\n", e.what());
  return 1;
}
