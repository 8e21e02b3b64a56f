#!/usr/bin/env bash
# Why remote-write's protobuf encoder is wattscope's own (src/remote_write/wire.hpp): what linking Debian's libprotobuf
# would cost every wattscope command, pushing or not. Two programs that print their resident memory and exit, one
# linked against libprotobuf through protoc's code for the one message it never uses unless asked; each started 300
# times. Needs protobuf-compiler and libprotobuf-dev (scripts/setup.sh --tests).
set -euo pipefail
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$out"
cat > m.proto <<'PROTO'
syntax = "proto3";
package m;
message Sample { double value = 1; int64 timestamp = 2; }
PROTO
protoc --cpp_out=. m.proto
cat > main.cpp <<'CPP'
#include <cstdio>
#include <cstring>
#include <string>
#ifdef WITH_PROTOBUF
#include "m.pb.h"
#endif
int main(int argc, char**) {
#ifdef WITH_PROTOBUF
  if (argc > 5) { m::Sample s; s.set_value(1); std::string o; s.SerializeToString(&o); std::printf("%zu\n", o.size()); }
#endif
  (void)argc;
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  while (std::fgets(line, sizeof line, f)) if (!std::strncmp(line, "VmRSS:", 6)) std::fputs(line + 6, stdout);
  return 0;
}
CPP
g++ -O2 -o without main.cpp
g++ -O2 -DWITH_PROTOBUF -o with main.cpp m.pb.cc -lprotobuf
rss() { ./"$1" | awk '{print $1}'; }
starts() { local t0 t1; t0=$(date +%s%N); for _ in $(seq 300); do ./"$1" >/dev/null; done; t1=$(date +%s%N); echo $(( (t1 - t0) / 300000 )); }
w_rss=$(rss without); p_rss=$(rss with)
w_us=$(starts without); p_us=$(starts with)
echo "resident at start: without libprotobuf ${w_rss} kB, with it ${p_rss} kB (+$((p_rss - w_rss)) kB)"
echo "start and exit: without ${w_us} us, with ${p_us} us (+$((p_us - w_us)) us, $(awk -v a="$p_us" -v b="$w_us" 'BEGIN{printf "%.1f", a/b}')x)"
echo "libprotobuf.so: $(stat -L -c %s "$(ldd with | awk '/libprotobuf/ {print $3}')") bytes"
