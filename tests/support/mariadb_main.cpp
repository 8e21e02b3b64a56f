// wattscope_test_mariadb: a private MariaDB (tests/support/mariadb.hpp) for the tests that are not C++ (the browser
// test of the runs pages on MariaDB). Prints the store URL (user ws, password "secret") on one line once the server
// answers, and stops the server when its standard input closes: when the test that started it ends, however it ends.
#include <unistd.h>

#include <cstdio>
#include <exception>

#include "mariadb.hpp"

int main() {
  try {
    wstest::MariaDb db;
    std::printf("%s\n", db.url().c_str());
    std::fflush(stdout);
    char buf[256];
    while (::read(0, buf, sizeof buf) > 0) {
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wattscope_test_mariadb: %s\n", e.what());
    return 1;
  }
  return 0;
}
