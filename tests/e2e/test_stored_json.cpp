// A store shared by many nodes holds one hostile row: JSON nested 200,000 levels deep, or a cell of tens of MB, in a
// run's tags, summary, a phase's device_energy_j or an event's detail. Every reader (list, show, report, stats,
// export, serve's runs pages and JSON API) must carry on: the good run shown as before, the bad cell read as
// missing, and a warning that names the run and the column. The real binary, on SQLite and CSV stores built here.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "../support/support.hpp"
#include "http_client.hpp"
#include "sinks/store.hpp"

namespace e2e_stored_json { // this file's own names: the tests are compiled in batches (tests/CMakeLists.txt)

using namespace wstest;
using wstest::wattscope; // the binary's path, not namespace wattscope
namespace http = wstest::http;
using json = nlohmann::json;
using wattscope::RowBatch;
using wattscope::RunInfo;
using wattscope::StoreSpec;
using wattscope::TableId;
using wattscope::Value;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kBaseMs = 1'793'491'200'000; // 2026-11-01T00:00:00Z

// Valid JSON, an object whose one member nests `levels` arrays: what a parser accepts and a recursive copy or dump
// of it overflows the stack on.
std::string deep_json(size_t levels) {
  return "{\"a\":" + std::string(levels, '[') + std::string(levels, ']') + "}";
}
// Valid JSON of about `bytes` bytes: an object of many small objects, which a DOM holds at several times its size.
std::string big_json(size_t bytes) {
  std::string s = "{\"a\":[";
  s.reserve(bytes + 16);
  while (s.size() < bytes)
    s += "{\"k\":1},";
  s.back() = ']';
  return s + "}";
}

RunInfo run_info(const std::string& id, int64_t i) {
  RunInfo r;
  r.run_id = id;
  r.task = "train";
  r.host = "node0";
  r.command = "python train.py";
  r.start_ms = kBaseMs + i * 60'000;
  r.end_ms = r.start_ms + 30'000;
  r.exit_status = 0;
  r.interval_ms = 100;
  r.samples = 10;
  r.total_energy_j = 1000 + static_cast<double>(i);
  r.tags = R"({"seed":"1","slurm_job_id":"42"})";
  r.summary = R"({"gpus":[{"index":0,"name":"NVIDIA H100","energy_j":)" + std::to_string(1000 + i) +
              R"(,"energy_method":"counter"}],"events":1})";
  r.version = "test";
  return r;
}

// One row of `t`, columns by name; the others NULL.
void add_row(RowBatch& batch, TableId t, const std::map<std::string, Value>& cells) {
  auto& rows = batch.tables[static_cast<size_t>(t)];
  for (const auto& c : wattscope::table(t).columns) {
    auto it = cells.find(std::string(c.name));
    rows.cells.push_back(it == cells.end() ? Value() : it->second);
  }
}

// A phase with its per-device energy, and a "model" event with its detail.
void add_phase_and_model(RowBatch& b, const RunInfo& r, const std::string& device_energy_j, const std::string& detail) {
  add_row(b, TableId::Phases,
          {{"run_id", r.run_id},
           {"phase_id", int64_t{1}},
           {"name", std::string("epoch")},
           {"start_ms", r.start_ms},
           {"end_ms", *r.end_ms},
           {"start_tick", int64_t{0}},
           {"end_tick", int64_t{9}},
           {"energy_j", 500.0},
           {"energy_method", std::string("counter")},
           {"device_energy_j", device_energy_j},
           {"closed_by_run_end", int64_t{0}}});
  add_row(b, TableId::Events,
          {{"run_id", r.run_id},
           {"seq", int64_t{0}},
           {"ts_ms", r.start_ms},
           {"kind", std::string("model")},
           {"source", std::string("bert")},
           {"detail", detail}});
}

struct BadRun {
  RunInfo run;
  std::string device_energy_j = R"({"gpu0":500})";
  std::string detail = R"({"parameters":110000000})";
};

// A good run ("good-run", first) and the bad runs, each as its own writer wrote it.
void write_store(const StoreSpec& spec, const std::vector<BadRun>& bad) {
  std::vector<BadRun> all;
  all.push_back({run_info("good-run", 0)});
  all.insert(all.end(), bad.begin(), bad.end());
  for (const auto& b : all) {
    auto sink = wattscope::open_sink(spec, false);
    sink->begin_run(b.run);
    RowBatch rows;
    add_phase_and_model(rows, b.run, b.device_energy_j, b.detail);
    sink->write(rows);
    sink->end_run(b.run);
  }
}

bool names(const std::string& err, const std::string& run_id, const std::string& column) {
  return err.find("run '" + run_id + "': stored " + column + " refused") != std::string::npos;
}

// Every reading command over `store`: none may crash, each still shows the good run, and each names the bad cells
// it met (`bad`: run id -> the columns that command reads for it).
void expect_every_reader_carries_on(const TempDir& dir, const std::vector<std::string>& store,
                                    const std::map<std::string, std::vector<std::string>>& bad) {
  auto cmd = [&](std::vector<std::string> args) {
    args.insert(args.begin(), wattscope());
    args.insert(args.end(), store.begin(), store.end());
    return run(args, {}, dir.path());
  };
  // What list and stats read of every run: its runs row.
  auto names_runs_columns = [&](const std::string& err) {
    for (const auto& [id, cols] : bad)
      for (const auto& col : cols)
        if (col.starts_with("runs.") && !names(err, id, col)) return testing::AssertionFailure() << id << " " << col;
    return testing::AssertionSuccess();
  };

  for (const char* json_flag : {"", "--json"}) {
    std::vector<std::string> args = {"list"};
    if (*json_flag) args.push_back(json_flag);
    const Result r = cmd(args);
    ASSERT_EQ(r.exit_code, 0) << "list " << json_flag << ": " << r.err;
    EXPECT_NE(r.out.find("good-run"), std::string::npos) << r.out;
    for (const auto& [id, cols] : bad)
      EXPECT_NE(r.out.find(id), std::string::npos) << "list " << json_flag;
    if (*json_flag) {
      const json j = json::parse(r.out);
      ASSERT_EQ(j.size(), bad.size() + 1);
      EXPECT_EQ(j[0]["run_id"], "good-run");
      EXPECT_EQ(j[0]["tags"]["slurm_job_id"], "42");
      EXPECT_EQ(j[0]["total_energy_j"], 1000.0);
      EXPECT_EQ(j[0]["energy_method"], "counter");
      EXPECT_TRUE(names_runs_columns(r.err)) << r.err;
    }
  }

  {
    const Result good = cmd({"show", "good-run", "--json"});
    ASSERT_EQ(good.exit_code, 0) << good.err;
    const json j = json::parse(good.out);
    EXPECT_EQ(j["phases"][0]["devices"]["gpu0"], 500.0);
    EXPECT_EQ(j["model"]["parameters"], 110000000);
    EXPECT_EQ(good.err.find("refused"), std::string::npos) << good.err;
  }
  for (const auto& [id, cols] : bad) {
    for (const char* json_flag : {"", "--json"}) {
      std::vector<std::string> args = {"show", id};
      if (*json_flag) args.push_back(json_flag);
      const Result r = cmd(args);
      ASSERT_EQ(r.exit_code, 0) << "show " << id << " " << json_flag << ": " << r.err;
      EXPECT_NE(r.out.find(id), std::string::npos) << r.out.substr(0, 2000);
      for (const auto& col : cols)
        EXPECT_TRUE(names(r.err, id, col)) << "show " << id << " " << col << ": " << r.err;
      // The rest of the run is shown as stored: its energy, its phase.
      EXPECT_NE(r.out.find("epoch"), std::string::npos) << r.out.substr(0, 2000);
      if (*json_flag) {
        const json j = json::parse(r.out);
        EXPECT_EQ(j["run_id"], id);
        EXPECT_TRUE(j["total_energy_j"].is_number());
      }
    }
  }

  // Every run together: the job's view (by tag), stats over the task, a report of every run.
  {
    const Result r = cmd({"show", "--tag", "slurm_job_id=42"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("good-run"), std::string::npos) << r.out;
  }
  {
    const Result r = cmd({"stats", "--task", "train", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(json::parse(r.out)["run_energy_methods"].contains("good-run")) << r.out;
    EXPECT_TRUE(names_runs_columns(r.err)) << r.err;
  }
  {
    const Result r = cmd({"report", "good-run", "-o", dir / "good.html"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(read_file(dir / "good.html").find("good-run"), std::string::npos);
    for (const auto& [id, cols] : bad) {
      const Result b = cmd({"report", id, "-o", dir / "bad.html"});
      ASSERT_EQ(b.exit_code, 0) << id << ": " << b.err;
      for (const auto& col : cols)
        EXPECT_TRUE(names(b.err, id, col)) << "report " << id << " " << col << ": " << b.err;
    }
  }
}

// `serve --db STORE`: the runs list, each run's JSON and page, the job's JSON.
void expect_serve_carries_on(const TempDir& dir, const std::string& store,
                             const std::map<std::string, std::vector<std::string>>& bad) {
  const int pid = start(
      {wattscope(), "serve", "--listen", "127.0.0.1:0", "--interval", "1s", "--db", store, "--top-processes", "0"}, {},
      dir.path(), dir / "serve.out", dir / "serve.err");
  const int port = wait_for_serve_port(dir / "serve.err");
  auto get = [&](const std::string& target) { return http::get(port, target, {}, 10s); };

  const auto list = get("/api/v1/runs?limit=50");
  ASSERT_EQ(list.status, 200) << list.body.substr(0, 2000);
  const json runs = json::parse(list.body);
  bool good_seen = false;
  for (const auto& r : runs)
    if (r["run_id"] == "good-run") {
      good_seen = true;
      EXPECT_EQ(r["tags"]["seed"], "1");
      EXPECT_EQ(r["total_energy_j"], 1000.0);
    }
  EXPECT_TRUE(good_seen) << list.body.substr(0, 2000);
  for (const auto& [id, cols] : bad) {
    const auto one = get("/api/v1/runs/" + id);
    ASSERT_EQ(one.status, 200) << id << ": " << one.body.substr(0, 2000);
    EXPECT_EQ(json::parse(one.body)["run_id"], id);
    const auto page = get("/runs/" + id);
    EXPECT_EQ(page.status, 200) << id << ": " << page.body.substr(0, 2000);
  }
  const auto job = get("/api/v1/jobs/42");
  ASSERT_EQ(job.status, 200) << job.body.substr(0, 2000);
  EXPECT_NE(job.body.find("good-run"), std::string::npos);
  EXPECT_EQ(get("/runs").status, 200);
  // Still serving.
  EXPECT_EQ(get("/metrics").status, 200);

  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
  const std::string err = read_file(dir / "serve.err");
  for (const auto& [id, cols] : bad)
    for (const auto& col : cols)
      EXPECT_TRUE(names(err, id, col)) << "serve " << id << " " << col << ": " << err;
}

const std::map<std::string, std::vector<std::string>> kDeepColumns = {
    {"deep-tags", {"runs.tags"}},
    {"deep-summary", {"runs.summary"}},
    {"deep-rows", {"phases.device_energy_j", "events.detail"}}};

std::vector<BadRun> deep_runs() {
  const std::string deep = deep_json(200'000);
  BadRun tags{run_info("deep-tags", 1)}, summary{run_info("deep-summary", 2)}, rows{run_info("deep-rows", 3)};
  tags.run.tags = deep;
  summary.run.summary = deep;
  rows.device_energy_j = deep;
  rows.detail = deep;
  return {tags, summary, rows};
}

} // namespace

TEST(StoredJson, DeeplyNestedCellsInASqliteStoreAreSkippedAndNamed) {
  TempDir dir;
  write_store({StoreSpec::Kind::Sqlite, dir / "shared.db"}, deep_runs());
  expect_every_reader_carries_on(dir, {"--db", dir / "shared.db"}, kDeepColumns);
  // export copies the rows as they are (the next reader applies the same caps), and never crashes on them.
  const Result e = run({wattscope(), "export", "--from", dir / "shared.db", "--to", dir / "copy.db"}, {}, dir.path());
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_EQ(scalar(dir / "copy.db", "SELECT count(*) FROM runs"), "4");
  EXPECT_EQ(scalar(dir / "copy.db", "SELECT length(tags) FROM runs WHERE run_id = 'deep-tags'"),
            std::to_string(deep_json(200'000).size()));
  expect_serve_carries_on(dir, dir / "shared.db", kDeepColumns);
}

TEST(StoredJson, DeeplyNestedCellsInACsvStoreAreSkippedAndNamed) {
  TempDir dir;
  write_store({StoreSpec::Kind::Csv, dir / "csv"}, deep_runs());
  expect_every_reader_carries_on(dir, {"--db", "csv:" + (dir / "csv")}, kDeepColumns);
  const Result e =
      run({wattscope(), "export", "--from", "csv:" + (dir / "csv"), "--to", dir / "copy.db"}, {}, dir.path());
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_EQ(scalar(dir / "copy.db", "SELECT count(*) FROM runs"), "4");
}

// A 50 MB tags cell and a 2 MB summary: over the 1 MiB cap, never parsed. (The CSV store refuses a record over 16 MiB
// itself, so its big cells are 8 MB.)
TEST(StoredJson, HugeCellsAreNotParsed) {
  for (const bool csv : {false, true}) {
    SCOPED_TRACE(csv ? "csv" : "sqlite");
    TempDir dir;
    BadRun big{run_info("big-cells", 1)};
    big.run.tags = big_json(csv ? (8u << 20) : (50u << 20));
    big.run.summary = big_json(2u << 20);
    big.device_energy_j = big_json(2u << 20);
    const StoreSpec spec{csv ? StoreSpec::Kind::Csv : StoreSpec::Kind::Sqlite, csv ? dir / "csv" : dir / "big.db"};
    write_store(spec, {big});
    const std::string store = csv ? "csv:" + (dir / "csv") : dir / "big.db";
    const Result l = run({wattscope(), "list", "--json", "--db", store}, {}, dir.path());
    ASSERT_EQ(l.exit_code, 0) << l.err;
    const json j = json::parse(l.out);
    ASSERT_EQ(j.size(), 2u);
    EXPECT_EQ(j[1]["run_id"], "big-cells");
    EXPECT_EQ(j[1]["tags"], json::object());
    EXPECT_EQ(j[1]["total_energy_j"], 1001.0);
    EXPECT_TRUE(names(l.err, "big-cells", "runs.tags")) << l.err;
    EXPECT_TRUE(names(l.err, "big-cells", "runs.summary")) << l.err;
    EXPECT_NE(l.err.find("over the 1.0 MiB cap"), std::string::npos) << l.err;
    const Result s = run({wattscope(), "show", "big-cells", "--db", store}, {}, dir.path());
    ASSERT_EQ(s.exit_code, 0) << s.err;
    EXPECT_TRUE(names(s.err, "big-cells", "phases.device_energy_j")) << s.err;
    const Result st = run({wattscope(), "stats", "--task", "train", "--db", store}, {}, dir.path());
    EXPECT_EQ(st.exit_code, 0) << st.err;
  }
}

// A store of many bad rows: each command names a few, then says more went unnamed, instead of a line per row.
TEST(StoredJson, WarningsAboutManyBadRowsAreRateLimited) {
  TempDir dir;
  std::vector<BadRun> bad;
  for (int i = 1; i <= 200; ++i) {
    BadRun b{run_info("bad-" + std::to_string(i), i)};
    b.run.tags = "[" + std::string(100, '[');
    bad.push_back(std::move(b));
  }
  const StoreSpec spec{StoreSpec::Kind::Sqlite, dir / "many.db"};
  write_store(spec, bad);
  const Result r = run({wattscope(), "list", "--json", "--db", dir / "many.db"}, {}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).size(), 201u);
  size_t lines = 0;
  for (char c : r.err)
    lines += c == '\n';
  EXPECT_LE(lines, 12u) << r.err;
  EXPECT_NE(r.err.find("more stored JSON refused"), std::string::npos) << r.err;
}

} // namespace e2e_stored_json
