// Remote-write's pure parts against references: the encoder's bytes parsed (and written) by Debian's libprotobuf from
// the specification's messages, its batches decompressed by Debian's libsnappy; the exposition turned into series
// with Prometheus' label rules; the on-disk queue's order, bound, leftovers and locks.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <snappy-c.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <limits>
#include <thread>

#include <gtest/gtest.h>

#include "../support/support.hpp"
#include "cli/remote_write_flags.hpp"
#include "remote.pb.h" // protoc, from tests/remote_write/remote.proto
#include "remote_write/queue.hpp"
#include "remote_write/series.hpp"
#include "remote_write/wire.hpp"
#include "remote_write/writer.hpp"

namespace rw = wattscope::remote_write;
namespace pb = wattscope_test::prompb;

namespace {

std::string uncompress(const std::string& body) {
  size_t n = 0;
  EXPECT_EQ(snappy_uncompressed_length(body.data(), body.size(), &n), SNAPPY_OK);
  std::string out(n, '\0');
  EXPECT_EQ(snappy_uncompress(body.data(), body.size(), out.data(), &n), SNAPPY_OK);
  out.resize(n);
  return out;
}

// The same series written by libprotobuf.
std::string reference_bytes(const std::vector<rw::Series>& series) {
  pb::WriteRequest req;
  for (const auto& s : series) {
    auto* ts = req.add_timeseries();
    for (const auto& [name, value] : s.labels) {
      auto* l = ts->add_labels();
      l->set_name(name);
      l->set_value(value);
    }
    for (const auto& [t, v] : s.samples) {
      auto* x = ts->add_samples();
      x->set_timestamp(t);
      x->set_value(v);
    }
  }
  std::string out;
  EXPECT_TRUE(req.SerializeToString(&out));
  return out;
}

} // namespace

TEST(RemoteWriteWire, EncodesByteForByteAsLibprotobufDoes) {
  std::vector<rw::Series> series(3);
  series[0].labels = {{"__name__", "wattscope_gpu_power_watts"}, {"gpu", "0"}, {"host", "node-1"}};
  series[0].samples = {{1795935333188, 250.5}, {1795935334188, 0.0}, {0, -3.25}, {-5, 1e300}};
  // A long label value: its length takes a two-byte varint.
  series[1].labels = {{"__name__", "wattscope_run_info"}, {"task", std::string(300, 'x')}};
  series[1].samples = {{1, std::numeric_limits<double>::infinity()}, {2, std::bit_cast<double>(rw::kStaleNaNBits)}};
  series[2].labels = {{"__name__", "up"}};
  const std::string ours = rw::encode_write_request(series);
  EXPECT_EQ(ours, reference_bytes(series));

  pb::WriteRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(ours));
  ASSERT_EQ(parsed.timeseries_size(), 3);
  EXPECT_EQ(parsed.timeseries(0).labels(1).name(), "gpu");
  EXPECT_EQ(parsed.timeseries(0).samples(0).timestamp(), 1795935333188);
  EXPECT_EQ(parsed.timeseries(0).samples(0).value(), 250.5);
  EXPECT_EQ(parsed.timeseries(0).samples(3).timestamp(), -5);
  EXPECT_EQ(parsed.timeseries(1).labels(1).value().size(), 300u);
  EXPECT_EQ(std::bit_cast<uint64_t>(parsed.timeseries(1).samples(1).value()), rw::kStaleNaNBits);
  EXPECT_EQ(rw::encode_write_request({}), "");
}

TEST(RemoteWriteWire, SnappyBlockFormatRoundTrips) {
  std::string raw;
  for (int i = 0; i < 2000; ++i)
    raw += "wattscope_gpu_power_watts{gpu=\"" + std::to_string(i % 8) + "\"}";
  std::string error;
  const auto body = rw::snappy_compress(raw, error);
  ASSERT_TRUE(body) << error;
  EXPECT_LT(body->size(), raw.size() / 4);
  EXPECT_EQ(uncompress(*body), raw);
}

TEST(RemoteWriteSeries, ExpositionBecomesSortedSeriesWithExternalLabels) {
  rw::BatchBuilder b({{"cluster", "east"}, {"host", "not-this-one"}});
  const std::string text = "# HELP wattscope_gpu_power_watts GPU power.\n"
                           "# TYPE wattscope_gpu_power_watts gauge\n"
                           "wattscope_gpu_power_watts{gpu=\"0\",uuid=\"GPU-a\",name=\"H100 \\\"SXM\\\"\",host=\"n1\"} "
                           "250\n"
                           "wattscope_cpu_utilization_ratio{host=\"n1\",empty=\"\"} 0.25\n"
                           "process_cpu_seconds_total 1.5\n"
                           "bad line\n"
                           "odd_value{a=\"b\"} twelve\n";
  EXPECT_EQ(b.add(text, 1000), 3u);
  EXPECT_EQ(b.bad_lines(), 2u);
  const auto series = b.take();
  ASSERT_EQ(series.size(), 3u);
  const rw::Labels want0 = {{"__name__", "wattscope_gpu_power_watts"},
                            {"cluster", "east"},
                            {"gpu", "0"},
                            {"host", "n1"}, // the series' own host wins over an external one
                            {"name", "H100 \"SXM\""},
                            {"uuid", "GPU-a"}};
  EXPECT_EQ(series[0].labels, want0);
  EXPECT_EQ(series[0].samples, (std::vector<std::pair<int64_t, double>>{{1000, 250}}));
  // An empty label value is no label at all.
  EXPECT_EQ(series[1].labels,
            (rw::Labels{{"__name__", "wattscope_cpu_utilization_ratio"}, {"cluster", "east"}, {"host", "n1"}}));
  EXPECT_EQ(series[2].labels.back(), (std::pair<std::string, std::string>{"host", "not-this-one"}));
}

TEST(RemoteWriteSeries, ASeriesThatEndsGetsAStalenessMarker) {
  rw::BatchBuilder b;
  b.add("a{gpu=\"0\"} 1\na{gpu=\"1\"} 2\n", 1000);
  b.add("a{gpu=\"0\"} 3\n", 2000); // GPU 1 is lost
  auto s = b.take();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].samples, (std::vector<std::pair<int64_t, double>>{{1000, 1}, {2000, 3}}));
  ASSERT_EQ(s[1].samples.size(), 2u);
  EXPECT_TRUE(rw::is_stale_marker(s[1].samples[1].second));
  EXPECT_EQ(s[1].samples[1].first, 2000);
  // The next batch knows the series too: the run's end marks the live one stale, the lost one not again.
  EXPECT_EQ(b.end(3000), 1u);
  s = b.take();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].labels[1].second, "0");
  EXPECT_TRUE(rw::is_stale_marker(s[0].samples[0].second));
  EXPECT_FALSE(rw::is_stale_marker(std::numeric_limits<double>::quiet_NaN()));
}

TEST(RemoteWriteSeries, LabelNamesAndFlagsAreChecked) {
  EXPECT_EQ(rw::parse_external_label("cluster=a100-east"),
            (std::pair<std::string, std::string>{"cluster", "a100-east"}));
  for (const char* bad : {"cluster", "=x", "9lives=1", "__name__=x", "a-b=1", "cluster=", "cluster=a\nb"})
    EXPECT_THROW(rw::parse_external_label(bad), std::invalid_argument) << bad;
  EXPECT_EQ(wattscope::parse_byte_size("256MiB"), 256ull << 20);
  EXPECT_EQ(wattscope::parse_byte_size("2GB"), 2000000000ull);
  EXPECT_EQ(wattscope::parse_byte_size("4096"), 4096u);
  for (const char* bad : {"", "MiB", "12 MiB", "5TiB", "-1", "99999999999999999999"})
    EXPECT_THROW(wattscope::parse_byte_size(bad), std::invalid_argument) << bad;
  EXPECT_EQ(rw::redact_url("https://user:secret@vm.example:8428/api/v1/write?token=abc"),
            "https://vm.example:8428/api/v1/write");
}

TEST(RemoteWriteQueue, SegmentsKeepTheirOrderAcrossProcessesAndLocks) {
  wstest::TempDir tmp;
  const std::string root = rw::remote_write_queue_dir(tmp.path(), "http://vm:8428/api/v1/write");
  EXPECT_NE(root, rw::remote_write_queue_dir(tmp.path(), "http://vm:8428/api/v1/write2"));
  {
    auto own = rw::SegmentDir::open_own(root + "/0000000000001-1");
    own.push("first", 10);
    own.push("second", 20);
    own.push("third", 30);
    EXPECT_EQ(own.samples(), 60u);
    EXPECT_EQ(own.bytes(), 16u);
    struct stat st {};
    ASSERT_EQ(::stat(own.dir().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    ASSERT_EQ(::stat(own.front()->path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    // Its writer lives: nobody adopts it.
    EXPECT_FALSE(rw::SegmentDir::open_adopted(own.dir()));
    EXPECT_EQ(*own.read_front(), "first");
    own.pop();
    // A write cut short (never renamed into place) is not a batch.
    wstest::write_file(own.dir() + "/.0000000000000009-5.rw.tmp", "partial");
  }
  const auto owners = rw::queue_owners(root, "0000000000002-2");
  ASSERT_EQ(owners.size(), 1u);
  auto adopted = rw::SegmentDir::open_adopted(owners[0]);
  ASSERT_TRUE(adopted);
  EXPECT_EQ(adopted->size(), 2u);
  EXPECT_EQ(adopted->samples(), 50u);
  EXPECT_EQ(*adopted->read_front(), "second");
  EXPECT_FALSE(std::filesystem::exists(owners[0] + "/.0000000000000009-5.rw.tmp"));
  // Held by this adopter: a second one is refused.
  EXPECT_FALSE(rw::SegmentDir::open_adopted(owners[0]));
  adopted->pop();
  adopted->push("fourth", 40); // numbered after the last one there
  EXPECT_EQ(*adopted->read_front(), "third");
  adopted->pop();
  EXPECT_EQ(*adopted->read_front(), "fourth");
  adopted->pop();
  adopted->remove_if_empty();
  EXPECT_FALSE(std::filesystem::exists(owners[0]));
}

TEST(RemoteWriteQueue, ADirectoryOthersCanWriteIsNotUsed) {
  wstest::TempDir tmp;
  const std::string dir = tmp / "q";
  ASSERT_EQ(::mkdir(dir.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  EXPECT_THROW(rw::SegmentDir::open_own(dir), std::runtime_error);
}

TEST(RemoteWriteWriter, AReceiverThatNeverAnswersLeavesEveryBatchOnDiskForTheNextWriter) {
  wstest::TempDir tmp;
  rw::Options o;
  o.urls = {"http://127.0.0.1:1/api/v1/write"}; // nothing listens on port 1
  o.queue_base = tmp.path();
  o.interval = std::chrono::milliseconds(100);
  o.batch = std::chrono::milliseconds(100);
  o.backoff_min = std::chrono::milliseconds(20);
  int n = 0;
  {
    rw::Writer w(o, [&n] { return "a{gpu=\"0\"} " + std::to_string(++n) + "\n"; });
    w.start();
    for (int i = 0; i < 5; ++i) {
      w.frame(1000 + i * 100);
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    w.finish(std::chrono::steady_clock::now() + std::chrono::milliseconds(200), 2000);
    const auto s = w.stats();
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].sent, 0u);
    EXPECT_EQ(s[0].queued, 6u); // five samples and the end's staleness marker
    EXPECT_GT(s[0].failures, 0u);
    EXPECT_NE(w.summary().find("6 still queued"), std::string::npos) << w.summary();
  }
  rw::Writer next(o, [] { return std::string(); });
  EXPECT_EQ(next.stats()[0].adopted, 6u);
  EXPECT_EQ(next.stats()[0].queued, 6u);
}

TEST(RemoteWriteWriter, AHungReceiverDoesNotHoldTheEndOfARunPastItsDeadline) {
  // A socket that listens and never answers: the kernel takes the connection, the request waits forever.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  wstest::TempDir tmp;
  rw::Options o;
  o.urls = {"http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "/api/v1/write"};
  o.queue_base = tmp.path();
  o.batch = std::chrono::milliseconds(100);
  o.timeout = std::chrono::seconds(60);
  rw::Writer w(o, [] { return std::string("a 1\n"); });
  w.start();
  w.frame(1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(400)); // the batch is out, its request hangs
  const auto t0 = std::chrono::steady_clock::now();
  w.finish(t0 + std::chrono::milliseconds(300), 2000);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)); // not the request's 60 s
  EXPECT_EQ(w.stats()[0].sent, 0u);
  EXPECT_EQ(w.stats()[0].queued, 2u); // the sample and the end's staleness marker, kept for the next writer
  ::close(fd);
}

TEST(RemoteWriteWriter, PastItsBoundTheQueueDropsTheOldestBatchesAndSaysHowMany) {
  wstest::TempDir tmp;
  rw::Options o;
  o.urls = {"http://127.0.0.1:1/api/v1/write"}; // down for the whole test
  o.queue_base = tmp.path();
  o.interval = std::chrono::milliseconds(10);
  o.batch = std::chrono::milliseconds(10);
  o.max_samples_per_batch = 1; // a batch per frame
  o.backoff_min = o.backoff_max = std::chrono::milliseconds(1000);
  // 200 series of distinct values: each batch a few kB after snappy, the bound a few batches.
  int frame = 0;
  auto render = [&] {
    std::string t;
    for (int s = 0; s < 200; ++s)
      t += "m{s=\"" + std::to_string(s) + "\"} " + std::to_string(frame * 1000.5 + s * 3.25) + "\n";
    return t;
  };
  const uint64_t one_batch = [&] {
    std::string err;
    rw::BatchBuilder b;
    b.add(render(), 1);
    return rw::snappy_compress(rw::encode_write_request(b.take()), err)->size();
  }();
  rw::TargetStats s;
  {
    rw::Writer w(o, [&] { return render(); });
    w.start();
    for (frame = 1; frame <= 40; ++frame) {
      w.frame(frame * 100);
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    w.finish(std::chrono::steady_clock::now(), 10000);
    s = w.stats()[0];
  }
  // 256 MiB by default: nothing dropped yet; every batch waits.
  EXPECT_EQ(s.dropped, 0u);
  EXPECT_GT(s.queued_bytes, 5 * one_batch);

  // The same queue reopened with a bound of three batches: the next batch pushes the oldest out, and says how many.
  rw::Options small = o;
  small.queue_max_bytes = 3 * one_batch + one_batch / 2;
  rw::Writer next(small, [&] { return render(); });
  const uint64_t adopted = next.stats()[0].adopted;
  EXPECT_EQ(adopted, s.queued);
  next.start();
  frame = 1000;
  next.frame(100000);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  next.finish(std::chrono::steady_clock::now(), 200000);
  const auto after = next.stats()[0];
  EXPECT_GT(after.dropped, 0u);
  EXPECT_LE(after.queued_bytes, small.queue_max_bytes + one_batch); // the newest batch is always kept
  EXPECT_EQ(after.dropped + after.queued, adopted + 200 + 200);     // a frame's samples and the end's markers
  EXPECT_NE(next.summary().find("dropped from a full queue"), std::string::npos) << next.summary();
}

TEST(RemoteWriteWriter, TheEndOfARunCutsALongBackoffShort) {
  wstest::TempDir tmp;
  rw::Options o;
  o.urls = {"http://127.0.0.1:1/api/v1/write"};
  o.queue_base = tmp.path();
  o.batch = std::chrono::milliseconds(50);
  o.backoff_min = o.backoff_max = std::chrono::seconds(60); // a receiver down long enough to back off a minute
  rw::Writer w(o, [] { return std::string("a 1\n"); });
  w.start();
  w.frame(1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(300)); // the batch failed once: the sender waits its minute
  ASSERT_GT(w.stats()[0].failures, 0u);
  const auto t0 = std::chrono::steady_clock::now();
  w.finish(t0 + std::chrono::milliseconds(500), 2000);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)); // not the backoff's minute
  EXPECT_EQ(w.stats()[0].queued, 2u);
}
