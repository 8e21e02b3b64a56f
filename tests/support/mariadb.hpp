// A private MariaDB server for one test: its own data directory, socket and port, started from Debian's mariadbd,
// stopped (or killed) by the test. The user ws / password "secret" owns database "wattscope".
#pragma once

#include <string>

#include "support.hpp"

namespace wstest {

class MariaDb {
public:
  MariaDb(); // initialises and starts; throws with the server's log on failure
  ~MariaDb();
  MariaDb(const MariaDb&) = delete;
  MariaDb& operator=(const MariaDb&) = delete;

  void start();
  void stop(); // clean shutdown (SIGTERM)
  void kill(); // SIGKILL: the server vanishes mid-conversation
  // SIGSTOP / SIGCONT: a server that hangs, its connections open, answering nothing (as a host that froze). stop(),
  // kill() and the destructor thaw it first.
  void freeze();
  void thaw();
  std::string url(const std::string& db = "wattscope") const;
  std::string socket_url(const std::string& db = "wattscope") const;
  // Runs SQL as root over the socket; returns rows tab-separated, one per line.
  std::string sql(const std::string& statements) const;
  int port() const { return port_; }

private:
  TempDir dir_;
  int port_ = 0;
  int port_lock_ = -1;
  int pid_ = -1;
  bool frozen_ = false;
};

} // namespace wstest
