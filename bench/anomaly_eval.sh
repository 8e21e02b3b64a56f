#!/usr/bin/env bash
# The tables of docs/anomalies.md ("Measured"). The detector on synthetic series with faults at known samples
# (bench/anomaly_eval.cpp), then the live path on the built-in --simulate scenario: what `wattscope record` flags per
# GPU over SIM_SECONDS (default 60 s, three loops of the scenario's 18.5 s cycle) at 250 ms.
#   bench/anomaly_eval.sh [seeds]
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/bench/wattscope_bench_anomaly && -x build/wattscope ]] ||
  WATTSCOPE_JOBS=${WATTSCOPE_JOBS:-1} scripts/build.sh release wattscope wattscope_bench_anomaly >/dev/null
build/bench/wattscope_bench_anomaly "${1:-40}"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
secs=${SIM_SECONDS:-60}
echo
echo "Live: wattscope record --simulate (built-in scenario: GPU 1 power-capped in each first epoch, a 2 s data-loader"
echo "stall in each second epoch on every busy GPU, GPU 3 idle), ${secs} s at 250 ms"
(cd "$out" && WATTSCOPE_CGROUP_ROOT=none "$OLDPWD/build/wattscope" record --simulate --interval 250ms \
  --duration "${secs}s" --task anomaly-eval >/dev/null 2>&1)
echo
echo "| GPU | event | kind | metric | onsets (s into the run) |"
echo "|---|---|---|---|---|"
sqlite3 "$out/wattscope.db" "
  WITH s AS (SELECT MIN(ts_ms) AS t0 FROM gpu_samples)
  SELECT e.source, e.kind, COALESCE(json_extract(e.detail, '\$.anomaly'), ''),
         COALESCE(json_extract(e.detail, '\$.metric'), ''),
         group_concat(printf('%.2f', (json_extract(e.detail, '\$.onset_ms') - s.t0) / 1000.0), ', ')
  FROM events e, s
  WHERE e.kind IN ('anomaly', 'straggler') AND json_extract(e.detail, '\$.state') = 'onset'
  GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4" | awk -F'|' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }'
for g in 0 2 3; do
  n=$(sqlite3 "$out/wattscope.db" "SELECT COUNT(*) FROM events WHERE kind IN ('anomaly','straggler') AND source = 'gpu$g'
      AND json_extract(detail, '\$.state') = 'onset'")
  echo "gpu$g: $n onsets"
done
