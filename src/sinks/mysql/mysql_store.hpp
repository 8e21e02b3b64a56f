// MySQL / MariaDB through MariaDB Connector/C: one set of tables shared by every host and run, multi-row inserts
// (as many rows a statement as the server's max_allowed_packet takes) in one transaction per batch, and no sample lost
// when the server goes away: batches go to a local spill file (a SQLite store with the same schema) and are replayed,
// in order and without duplicates, when it is back.
#pragma once

#include <memory>
#include <string>

#include "sinks/sink.hpp"

namespace wattscope {

struct MysqlUrl {
  std::string user;
  std::string host; // empty with a socket
  unsigned int port = 3306;
  std::string database;
  std::string socket;
  std::string text() const; // for messages: never contains a password
};

// mysql://USER@HOST[:PORT]/DATABASE or mysql://USER@localhost/DATABASE?socket=/path/mysqld.sock.
// Throws std::invalid_argument naming the problem; a password in the URL is refused.
MysqlUrl parse_mysql_url(std::string_view url);

// spill_on_outage=false (export): an unreachable server is an error instead of a reason to spill.
std::unique_ptr<Sink> make_mysql_sink(const MysqlUrl& url, bool spill_on_outage = true);
std::unique_ptr<StoreReader> make_mysql_reader(const MysqlUrl& url);
// Where spill files go: $WATTSCOPE_SPILL_DIR, else $XDG_STATE_HOME/wattscope/spill, else
// ~/.local/state/wattscope/spill.
std::string spill_dir();
// compress=false: every table plain, as before issue 33 (the fleet bench's baseline).
std::string mysql_schema_sql(bool compress = true);

} // namespace wattscope
