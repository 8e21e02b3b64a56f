#!/usr/bin/env bash
# Configures and builds wattscope. Usage: scripts/build.sh [release|asan] [TARGET...] (default release, every target).
# release -> build/, asan -> build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer). With TARGETs (e.g.
# `scripts/build.sh release wattscope`, as scripts/demo.sh does) only those and what they need are built.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
shift || true
targets=("$@")
jobs=${WATTSCOPE_JOBS:-2}
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DWATTSCOPE_SANITIZE=ON -DWATTSCOPE_BUILD_BENCH=OFF) ;;
  *) echo "usage: $0 [release|asan]" >&2; exit 2 ;;
esac
# ccache, where installed, makes rebuilds (and builds in several worktrees of one checkout) much cheaper. Paths are
# made relative to the checkout itself, so that two worktrees compile identical command lines and share hits.
# The settings travel in the launcher, so a later plain `cmake --build` keeps them.
if command -v ccache >/dev/null; then
  launcher="env;CCACHE_BASEDIR=$(pwd);CCACHE_NOHASHDIR=1;ccache"
  flags+=("-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher" "-DCMAKE_C_COMPILER_LAUNCHER=$launcher")
fi
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "$dir" -j "$jobs"
fi
