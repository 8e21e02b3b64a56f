// --db: a SQLite path, sqlite:PATH, csv:DIR or mysql://USER@HOST[:PORT]/DB[?socket=PATH].
#include <stdexcept>
#include <string>

#include "check.hpp"
#include "sinks/mysql/mysql_store.hpp"
#include "sinks/store.hpp"

using namespace wattscope;

namespace {
// The password of "scheme://USER:PASSWORD@...", if the text has that shape.
std::string_view password_in(std::string_view text) {
  const auto scheme = text.find("://");
  if (scheme == std::string_view::npos) return {};
  const std::string_view rest = text.substr(scheme + 3);
  const auto at = rest.find('@');
  if (at == std::string_view::npos) return {};
  const auto colon = rest.substr(0, at).find(':');
  if (colon == std::string_view::npos) return {};
  return rest.substr(colon + 1, at - colon - 1);
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz_text(data, size);
  const bool mysql_scheme = text.starts_with("mysql://") || text.starts_with("mariadb://");
  const std::string_view password = mysql_scheme ? password_in(text) : std::string_view();
  const bool has_password = mysql_scheme && password_in(text).data() != nullptr;
  try {
    const StoreSpec spec = parse_store(text);
    FUZZ_CHECK(!spec.location.empty()); // a store names a file, a directory or a database
    FUZZ_CHECK((spec.kind == StoreSpec::Kind::Mysql) == mysql_scheme);
    if (spec.kind == StoreSpec::Kind::Mysql) {
      FUZZ_CHECK(!has_password); // a URL with a password is refused, never stored or shown
      const MysqlUrl u = parse_mysql_url(spec.location);
      FUZZ_CHECK(!u.user.empty() && u.user.find(':') == std::string::npos);
      FUZZ_CHECK(!u.database.empty());
      FUZZ_CHECK(!u.host.empty() || !u.socket.empty());
      FUZZ_CHECK(u.port >= 1 && u.port <= 65535);
      // The text shown in messages reads back as the same connection.
      const MysqlUrl back = parse_mysql_url("mysql://" + u.text());
      FUZZ_CHECK(back.user == u.user && back.database == u.database && back.socket == u.socket);
      if (u.socket.empty()) FUZZ_CHECK(back.host == u.host && back.port == u.port);
    }
  } catch (const std::invalid_argument& e) {
    // The message names the problem but never repeats a password.
    if (has_password && !password.empty())
      FUZZ_CHECK(std::string_view(e.what()).find(":" + std::string(password) + "@") == std::string_view::npos);
  }
  return 0;
}
