// wattscope_gen_runs STORE N [FIRST]: writes the generated runs (tests/support/runs_generator.hpp) into STORE
// (a SQLite path or mysql:// URL), for the browser tests and bench/runs_pages.mjs.
#include <cstdio>
#include <exception>
#include <string>

#include "runs_generator.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: wattscope_gen_runs STORE N [FIRST]\n");
    return 2;
  }
  try {
    wstest::generate_runs(wattscope::parse_store(argv[1]), std::stoll(argv[2]), argc > 3 ? std::stoll(argv[3]) : 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wattscope_gen_runs: %s\n", e.what());
    return 1;
  }
  return 0;
}
