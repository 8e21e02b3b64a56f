// The mysql:// URL parser, apart from the store so that the fuzz build (fuzz/) compiles it without MariaDB.
#include <cctype>
#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

#include "sinks/mysql/mysql_store.hpp"

namespace wattscope {

std::string MysqlUrl::text() const {
  if (!socket.empty()) return fmt::format("{}@localhost/{}?socket={}", user, database, socket);
  return fmt::format("{}@{}:{}/{}", user, host, port, database);
}

MysqlUrl parse_mysql_url(std::string_view text) {
  const std::string_view form = "mysql://USER@HOST[:PORT]/DATABASE or mysql://USER@localhost/DATABASE?socket=PATH";
  auto bad = [&](std::string_view why) {
    return std::invalid_argument(fmt::format("'{}': {}; expected {}", text, why, form));
  };
  std::string_view rest = text;
  if (rest.starts_with("mysql://"))
    rest.remove_prefix(8);
  else if (rest.starts_with("mariadb://"))
    rest.remove_prefix(10);
  else
    throw bad("not a mysql:// URL");
  const size_t scheme_len = text.size() - rest.size();
  MysqlUrl u;
  const auto at = rest.find('@');
  if (at == std::string_view::npos || at == 0) throw bad("no user");
  u.user = std::string(rest.substr(0, at));
  if (u.user.find(':') != std::string::npos)
    throw std::invalid_argument(fmt::format("'{}...': a password does not belong in the URL (it would show in the "
                                            "process list and shell history); put it in WATTSCOPE_MYSQL_PASSWORD or "
                                            "the [client] section of ~/.my.cnf",
                                            text.substr(0, scheme_len + u.user.find(':'))));
  rest.remove_prefix(at + 1);
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos) throw bad("no database");
  std::string_view hostport = rest.substr(0, slash);
  std::string_view dbq = rest.substr(slash + 1);
  const auto q = dbq.find('?');
  std::string_view db = dbq.substr(0, q);
  if (q != std::string_view::npos) {
    std::string_view query = dbq.substr(q + 1);
    if (!query.starts_with("socket=") || query.size() == 7) throw bad("the only option is ?socket=PATH");
    u.socket = std::string(query.substr(7));
  }
  if (db.empty()) throw bad("no database");
  for (char c : db)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'))
      throw bad("a database name is letters, digits, _ and $");
  u.database = std::string(db);
  const auto colon = hostport.rfind(':');
  if (colon != std::string_view::npos) {
    unsigned int port = 0;
    auto p = hostport.substr(colon + 1);
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (ec != std::errc() || end != p.data() + p.size() || port == 0 || port > 65535) throw bad("bad port");
    u.port = port;
    hostport = hostport.substr(0, colon);
  }
  u.host = std::string(hostport);
  if (u.host.empty() && u.socket.empty()) throw bad("no host");
  return u;
}

} // namespace wattscope
