#!/usr/bin/env bash
# Configures and builds wattscope. Usage: scripts/build.sh [release|asan] (default release).
# release -> build/, asan -> build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
jobs=${WATTSCOPE_JOBS:-2}
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DWATTSCOPE_SANITIZE=ON -DWATTSCOPE_BUILD_BENCH=OFF) ;;
  *) echo "usage: $0 [release|asan]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$jobs"
