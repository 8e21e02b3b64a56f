#!/usr/bin/env bash
# Configures and builds wattscope. Usage: scripts/build.sh [release|asan|demo] [TARGET...] (default release, every
# target). release -> build/, asan -> build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer), demo ->
# build-demo/ (the binary only, unoptimised: scripts/demo.sh). With TARGETs (e.g. `scripts/build.sh release wattscope`)
# only those and what they need are built.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
shift || true
targets=("$@")
jobs=${WATTSCOPE_JOBS:-2}
# clang compiles unoptimised code about twice as fast as GCC (one batch of 8 core files with ASan: 32 s of CPU against
# 61 s; at -O0 without it: 16 s against 23 s); at -O2 they are even (46 s against 44 s). So the builds that are not
# optimised use clang when it is there (scripts/setup.sh installs it: scripts/packages/build.txt).
fast_cxx=(); command -v clang++ >/dev/null && fast_cxx=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  # Sanitizer reports need file and line, not variables: line tables only (-g1) build quicker than full -g.
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" -DWATTSCOPE_SANITIZE=ON
                               -DWATTSCOPE_BUILD_BENCH=OFF -DWATTSCOPE_PCH=ON "${fast_cxx[@]}") ;;
  # scripts/demo.sh: the binary only, unoptimised, for a first look in under two minutes (the release build of the
  # same binary takes about four). Everything it shows is the same; it costs more CPU per sample.
  demo) dir=build-demo; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -DNDEBUG"
                               -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O0 -DNDEBUG" -DWATTSCOPE_BUILD_TESTS=OFF
                               -DWATTSCOPE_BUILD_BENCH=OFF -DWATTSCOPE_PCH=ON "${fast_cxx[@]}") ;;
  *) echo "usage: $0 [release|asan|demo] [TARGET...]" >&2; exit 2 ;;
esac
# ccache, where installed, makes rebuilds (and builds in several worktrees of one checkout) much cheaper. Paths are
# made relative to the checkout itself, so that two worktrees compile identical command lines and share hits.
# The settings travel in the launcher, so a later plain `cmake --build` keeps them.
if command -v ccache >/dev/null; then
  # The sloppiness lets ccache cache the files compiled with a precompiled header (WATTSCOPE_PCH).
  launcher="env;CCACHE_BASEDIR=$(pwd);CCACHE_NOHASHDIR=1;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache"
  flags+=("-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher" "-DCMAKE_C_COMPILER_LAUNCHER=$launcher")
fi
# A tree configured earlier with another compiler (build-asan/ was GCC's) starts afresh: CMake would otherwise drop
# its cache on the switch and with it every option given here, ASan included.
if ((${#fast_cxx[@]})) && [ "$kind" != release ] && [ -f "$dir/CMakeCache.txt" ] &&
   ! grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=$(command -v clang++)" "$dir/CMakeCache.txt"; then
  echo "build: $dir/ was configured with another compiler; configuring it again for clang++"
  rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
fi
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "$dir" -j "$jobs"
fi
