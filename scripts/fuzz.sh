#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (in build-fuzz/) and runs each for a bounded time, starting from
# a copy of its seed corpus (fuzz/corpus/<target>/ is never grown by a run). Any crash, sanitizer report, leak,
# timeout or failed invariant fails the script; the input that caused it is kept under build-fuzz/artifacts/.
# Usage: scripts/fuzz.sh [seconds-per-target]   (default: one minute in all, shared among the targets)
# Needs clang, libclang-rt-14-dev and libfuzzer-14-dev (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${WATTSCOPE_JOBS:-2}
dir=build-fuzz

targets=()
for src in fuzz/fuzz_*.cpp; do
  targets+=("$(basename "$src" .cpp)")
done
seconds=${1:-$((60 / ${#targets[@]}))}
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [seconds-per-target]" >&2; exit 2; }

flags=(-DWATTSCOPE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++)
if command -v ccache >/dev/null; then
  flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)} CCACHE_NOHASHDIR=1
fi
echo "== build (fuzz)"
CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$jobs" --target wattscope_fuzz

work=$(mktemp -d "${TMPDIR:-/tmp}/wattscope-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
rm -rf "$dir/artifacts"
status=0
rows=()
echo "== fuzz (${seconds}s per target)"
for t in "${targets[@]}"; do
  corpus=$work/$t
  artifacts=$dir/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  [ -d "fuzz/corpus/$t" ] && cp -R "fuzz/corpus/$t/." "$corpus/"
  seeds=$(find "$corpus" -type f | wc -l)
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
  log=$dir/$t.log
  # -timeout: one input taking 10 s is a hang (generous: CI machines are shared); -rss_limit_mb: a parser that
  # balloons fails.
  if "$dir/fuzz/$t" "$corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    echo "-- $t failed; the end of $log:"
    tail -n 40 "$log"
    for a in "$artifacts"/*; do
      [ -e "$a" ] && echo "-- replay: $dir/fuzz/$t $a"
    done
  fi
  runs=$(awk '/stat::number_of_executed_units:/ {print $2}' "$log")
  eps=$(awk '/stat::average_exec_per_sec:/ {print $2}' "$log")
  units=$(find "$corpus" -type f | wc -l)
  bytes=$(find "$corpus" -type f -printf '%s\n' | awk '{n += $1} END {print n + 0}')
  rows+=("$(printf '%-20s %6s %10s %10s %7s %7s %9s' "$t" "$result" "${runs:-?}" "${eps:-?}" "$seeds" "$units" \
    "$bytes")")
done
echo "== fuzz summary"
printf '%-20s %6s %10s %10s %7s %7s %9s\n' target result execs execs/s seeds corpus bytes
printf '%s\n' "${rows[@]}"
exit $status
