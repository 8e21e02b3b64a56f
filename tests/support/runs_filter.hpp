// issue 35: what the runs-query tests share: a filter parsed from a query string (as serve parses it), and the MySQL
// password the store's writers and readers take from the environment while a test's store lives.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <variant>

#include "server/query.hpp"
#include "sinks/runs_query.hpp"

namespace wstest {

inline wattscope::RunsFilter parsed_filter(const std::string& q) {
  auto r = wattscope::query::parse_runs_list(q);
  if (auto* e = std::get_if<wattscope::query::Error>(&r)) {
    ADD_FAILURE() << q << ": " << e->message;
    return {};
  }
  return std::get<wattscope::query::RunsListQuery>(r).filter;
}

// WATTSCOPE_MYSQL_PASSWORD=secret (the test MariaDB's) until it goes out of scope, then as it was.
struct MysqlPassword {
  MysqlPassword() {
    if (const char* v = std::getenv("WATTSCOPE_MYSQL_PASSWORD")) {
      saved = v;
      had = true;
    }
    ::setenv("WATTSCOPE_MYSQL_PASSWORD", "secret", 1);
  }
  ~MysqlPassword() {
    if (had)
      ::setenv("WATTSCOPE_MYSQL_PASSWORD", saved.c_str(), 1);
    else
      ::unsetenv("WATTSCOPE_MYSQL_PASSWORD");
  }
  MysqlPassword(const MysqlPassword&) = delete;
  MysqlPassword& operator=(const MysqlPassword&) = delete;
  std::string saved;
  bool had = false;
};

} // namespace wstest
