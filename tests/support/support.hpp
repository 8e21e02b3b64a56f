// Test helpers: temporary directories, running the real wattscope binary, reading SQLite results.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace wstest {

// A fresh directory under $TMPDIR, removed at destruction.
class TempDir {
public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `argv` (argv[0] a path) with extra environment variables (a value of "\x01" unsets the variable), in `cwd`.
Result run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
           const std::string& cwd = "");
// Starts without waiting: returns the pid; output goes to the given files.
int start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, const std::string& cwd,
          const std::string& out_file, const std::string& err_file);
int wait_exit(int pid);
// The port a `wattscope serve --listen 127.0.0.1:0` started with start() announced on its stderr file ("serving on
// http://127.0.0.1:PORT/"), waiting up to `tries` x 50 ms. Throws with that stderr when it never says.
int wait_for_serve_port(const std::string& err_file, int tries = 200);

std::string wattscope();                                // path of the binary under test
std::string fake_nvml(const std::string& variant = ""); // "", "noenergy", "legacy", "broken"
// The fake Level Zero loader (issue 17): "", "legacy", "sparse", "broken" (tests/fakes/CMakeLists.txt).
std::string fake_level_zero(const std::string& variant = "");

// Rows of a query as strings; NULL becomes std::nullopt.
using Row = std::vector<std::optional<std::string>>;
std::vector<Row> query(const std::string& db, const std::string& sql);
std::string scalar(const std::string& db, const std::string& sql);

} // namespace wstest
