// parse_store apart from the stores it names, so that the fuzz build (fuzz/) compiles it alone.
#include <stdexcept>

#include <fmt/format.h>

#include "sinks/store.hpp"
#ifdef WATTSCOPE_HAVE_MYSQL
#include "sinks/mysql/mysql_store.hpp"
#endif

namespace wattscope {

StoreSpec parse_store(std::string_view text) {
  if (text.empty()) throw std::invalid_argument("empty store name; pass a SQLite file path or csv:DIR");
  if (text.starts_with("mysql://") || text.starts_with("mariadb://")) {
#ifdef WATTSCOPE_HAVE_MYSQL
    (void)parse_mysql_url(text); // validated now, so a bad URL fails before anything starts
    return {StoreSpec::Kind::Mysql, std::string(text)};
#else
    throw std::invalid_argument(
        fmt::format("'{}': this build has no MySQL/MariaDB store (configure with -DWATTSCOPE_MYSQL=ON)", text));
#endif
  }
  if (text == "csv:") throw std::invalid_argument("'csv:' names no directory; use csv:DIR, e.g. csv:runs");
  if (text == "sqlite:") throw std::invalid_argument("'sqlite:' names no file; use sqlite:PATH, e.g. sqlite:lab.db");
  if (text.starts_with("csv:")) return {StoreSpec::Kind::Csv, std::string(text.substr(4))};
  if (text.starts_with("sqlite:")) return {StoreSpec::Kind::Sqlite, std::string(text.substr(7))};
  if (auto p = text.find("://"); p != std::string_view::npos)
    throw std::invalid_argument(fmt::format("'{}': unknown store scheme '{}'", text, text.substr(0, p)));
  return {StoreSpec::Kind::Sqlite, std::string(text)};
}

} // namespace wattscope
