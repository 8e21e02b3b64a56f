#include "support.hpp"

#include <chrono>
#include <regex>
#include <thread>

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace wstest {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "wattscope-test-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}
TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}
std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
void exec_child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                const std::string& cwd) {
  // A run's cgroup would be made under /sys/fs/cgroup, outside the test's temporary directory: none, unless a test
  // asks for one.
  setenv("WATTSCOPE_CGROUP_ROOT", "none", 0);
  for (const auto& [k, v] : env) {
    if (v == "\x01")
      unsetenv(k.c_str());
    else
      setenv(k.c_str(), v.c_str(), 1);
  }
  if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(120);
  std::vector<char*> args;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(121);
}
} // namespace

int start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, const std::string& cwd,
          const std::string& out_file, const std::string& err_file) {
  pid_t pid = fork();
  if (pid == 0) {
    int o = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = open("/dev/null", O_RDONLY);
    dup2(o, 1);
    dup2(e, 2);
    dup2(in, 0);
    exec_child(argv, env, cwd);
  }
  return pid;
}

int wait_exit(int pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

Result run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
           const std::string& cwd) {
  TempDir io;
  Result r;
  r.exit_code = wait_exit(start(argv, env, cwd, io / "out", io / "err"));
  r.out = read_file(io / "out");
  r.err = read_file(io / "err");
  return r;
}

std::string wattscope() {
  return WATTSCOPE_BINARY;
}
std::string fake_nvml(const std::string& variant) {
  return std::string(WATTSCOPE_FAKES_DIR) + "/libnvidia-ml-fake" + (variant.empty() ? "" : "-" + variant) + ".so";
}

std::string fake_level_zero(const std::string& variant) {
  return std::string(WATTSCOPE_FAKES_DIR) + "/libze-fake" + (variant.empty() ? "" : "-" + variant) + ".so";
}

std::vector<Row> query(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    throw std::runtime_error("cannot open " + db);
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    std::string msg = sqlite3_errmsg(h);
    sqlite3_close(h);
    throw std::runtime_error(msg + " in " + sql);
  }
  std::vector<Row> rows;
  while (sqlite3_step(st) == SQLITE_ROW) {
    Row row;
    for (int i = 0; i < sqlite3_column_count(st); ++i) {
      if (sqlite3_column_type(st, i) == SQLITE_NULL)
        row.emplace_back(std::nullopt);
      else
        row.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, i)));
    }
    rows.push_back(std::move(row));
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return rows;
}

std::string scalar(const std::string& db, const std::string& sql) {
  auto rows = query(db, sql);
  if (rows.empty() || rows[0].empty() || !rows[0][0]) return "";
  return *rows[0][0];
}

int wait_for_serve_port(const std::string& err_file, int tries) {
  static const std::regex re("serving on http://127\\.0\\.0\\.1:([0-9]+)/");
  for (int i = 0; i < tries; ++i) {
    std::smatch m;
    const std::string err = read_file(err_file);
    if (std::regex_search(err, m, re)) return std::stoi(m[1].str());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("serve did not start: " + read_file(err_file));
}

} // namespace wstest
