#include "mariadb.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace fs = std::filesystem;

namespace wstest {

namespace {

// A port no other test server holds: each server keeps an exclusive lock on its port's lock file for its whole life,
// so a port freed by a killed server is not handed to another test process before the restart takes it back.
int reserve_port(int& lock_fd) {
  const std::string dir = (fs::temp_directory_path() / "wattscope-test-ports").string();
  fs::create_directories(dir);
  const int base = 20000 + static_cast<int>(getpid() % 20000);
  for (int i = 0; i < 20000; ++i) {
    const int port = 20000 + (base - 20000 + i * 7) % 25000;
    int fd = open((dir + "/" + std::to_string(port)).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      continue;
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(s);
    if (free) {
      lock_fd = fd;
      return port;
    }
    close(fd);
  }
  throw std::runtime_error("no free port for a test MariaDB server");
}

std::vector<std::string> user_flag() {
  if (geteuid() == 0) return {"--user=root"}; // mariadbd refuses to run as root unless told to
  return {};
}

// mariadb-install-db takes a second or two: done once per test process, then copied for each server.
const std::string& template_datadir() {
  static std::once_flag once;
  static std::string path;
  std::call_once(once, [] {
    static TempDir dir;
    path = dir / "data";
    fs::create_directories(dir / "tmp");
    // A private tmpdir: MariaDB 10.11 servers sharing /tmp for internal Aria temporary tables crash now and then.
    std::vector<std::string> args = {"/usr/bin/mariadb-install-db",
                                     "--no-defaults",
                                     "--datadir=" + path,
                                     "--auth-root-authentication-method=normal",
                                     "--skip-test-db",
                                     "--innodb-log-file-size=16M",
                                     "--tmpdir=" + (dir / "tmp")};
    for (auto& f : user_flag())
      args.push_back(f);
    Result r;
    for (int attempt = 0; attempt < 2; ++attempt) {
      fs::remove_all(path);
      r = run(args, {{"TMPDIR", dir / "tmp"}});
      if (r.exit_code == 0) return;
    }
    throw std::runtime_error("mariadb-install-db failed: " + r.out + r.err);
  });
  return path;
}

} // namespace

MariaDb::MariaDb() {
  fs::copy(template_datadir(), dir_ / "data", fs::copy_options::recursive);
  fs::create_directories(dir_ / "tmp"); // servers sharing /tmp for internal temporary tables crashed MariaDB 10.11
  port_ = reserve_port(port_lock_);
  start();
  sql("CREATE USER 'ws'@'localhost' IDENTIFIED BY 'secret'; CREATE USER 'ws'@'127.0.0.1' IDENTIFIED BY 'secret';"
      "CREATE DATABASE wattscope CHARACTER SET utf8mb4;"
      "GRANT ALL ON *.* TO 'ws'@'localhost'; GRANT ALL ON *.* TO 'ws'@'127.0.0.1';");
}

MariaDb::~MariaDb() {
  stop();
  if (port_lock_ >= 0) close(port_lock_);
}

void MariaDb::start() {
  std::vector<std::string> args = {"/usr/sbin/mariadbd",
                                   "--no-defaults",
                                   "--datadir=" + (dir_ / "data"),
                                   "--socket=" + (dir_ / "sock"),
                                   "--port=" + std::to_string(port_),
                                   "--bind-address=127.0.0.1",
                                   "--skip-name-resolve",
                                   "--innodb-log-file-size=16M",
                                   "--innodb-buffer-pool-size=128M",
                                   "--log-error=" + (dir_ / "error.log"),
                                   "--tmpdir=" + (dir_ / "tmp"),
                                   "--pid-file=" + (dir_ / "pid")};
  for (auto& f : user_flag())
    args.push_back(f);
  pid_ = wstest::start(args, {{"TMPDIR", dir_ / "tmp"}}, "", dir_ / "stdout", dir_ / "stderr");
  for (int i = 0; i < 300; ++i) {
    auto r = run({"/usr/bin/mariadb", "--no-defaults", "-uroot", "-S", dir_ / "sock", "-e", "SELECT 1"});
    if (r.exit_code == 0) return;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("MariaDB did not start: " + read_file(dir_ / "error.log"));
}

void MariaDb::freeze() {
  if (pid_ <= 0 || frozen_) return;
  ::kill(pid_, SIGSTOP);
  frozen_ = true;
}

void MariaDb::thaw() {
  if (pid_ <= 0 || !frozen_) return;
  ::kill(pid_, SIGCONT);
  frozen_ = false;
}

void MariaDb::stop() {
  if (pid_ <= 0) return;
  thaw(); // a stopped process would not act on SIGTERM
  ::kill(pid_, SIGTERM);
  wait_exit(pid_);
  pid_ = -1;
}

void MariaDb::kill() {
  if (pid_ <= 0) return;
  frozen_ = false; // SIGKILL ends a stopped process too
  ::kill(pid_, SIGKILL);
  wait_exit(pid_);
  pid_ = -1;
}

std::string MariaDb::url(const std::string& db) const {
  return "mysql://ws@127.0.0.1:" + std::to_string(port_) + "/" + db;
}
std::string MariaDb::socket_url(const std::string& db) const {
  return "mysql://ws@localhost/" + db + "?socket=" + (dir_ / "sock");
}

std::string MariaDb::sql(const std::string& statements) const {
  auto r = run(
      {"/usr/bin/mariadb", "--no-defaults", "-uroot", "-S", dir_ / "sock", "-N", "-B", "wattscope", "-e", statements});
  if (r.exit_code != 0) {
    // The database may not exist yet (first call creates it).
    r = run({"/usr/bin/mariadb", "--no-defaults", "-uroot", "-S", dir_ / "sock", "-N", "-B", "-e", statements});
    if (r.exit_code != 0) {
      std::string log = read_file(dir_ / "error.log");
      if (log.size() > 3000) log = log.substr(log.size() - 3000);
      throw std::runtime_error("SQL failed: " + r.err + " in " + statements + "\nserver log:\n" + log);
    }
  }
  return r.out;
}

} // namespace wstest
