#include "cli/app.hpp"

int main(int argc, char** argv) {
  return wattscope::run_app(argc, argv);
}
