#!/usr/bin/env bash
# Fleet figures, printed for docs/storage.md and docs/serve.md ("Fleet figures"):
#   1. what one MariaDB takes from 300 nodes x 8 GPUs writing at 1 s as `serve --db mysql://... --record` does
#      (bench/fleet_mysql.cpp, through wattscope's own MySQL store and writer), against a private server with
#      Debian's defaults (fsync at every commit) and a 512 MiB buffer pool, with per-core rows at the process-scan
#      period (issue 33), and beside it, in the same run, the bytes per node-day of a few nodes storing per-core rows
#      every tick as before (FLEET_BASELINE_NODES, 0 for none);
#   2. what one VictoriaMetrics takes from nodes x 8 GPUs pushing at 1 s with --remote-write, step by step until it
#      falls behind, and the push's CPU per node against a scrape's (bench/fleet_remote_write.cpp);
#   3. /metrics per node: its size and scrape time with 8 simulated GPUs and 200 processes (bench/metrics_size.py).
# FLEET_NODES (300), FLEET_SECONDS (60), FLEET_CPUS (224, a DGX H100's logical CPUs), FLEET_SPEEDUPS (1.5,2,3),
# FLEET_PER_CORE (period | every-tick | off), FLEET_BASELINE_NODES (30), FLEET_BASELINE_SECONDS (30),
# FLEET_PLAIN_TABLES (no; yes: the fleet's tables uncompressed too, to see what compression costs and saves),
# FLEET_SKIP_MARIADB (no), FLEET_RW_STEPS (250,500,1000,2000), FLEET_RW_SECONDS (30), FLEET_FILL_GB (0: the window on
# an empty database; 1.5: after history three times the 512 MiB buffer pool, a server's steady state after a day).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh release wattscope wattscope_bench_fleet wattscope_bench_fleet_remote_write >/dev/null
out=$(mktemp -d)
mpid=
vpid=
cleanup() {  # the server's data is thrown away: no need for its (long, after a backlog) clean shutdown
  if [ -n "$mpid" ]; then kill -KILL "$mpid" 2>/dev/null; wait "$mpid" 2>/dev/null || true; fi
  if [ -n "$vpid" ]; then kill -KILL "$vpid" 2>/dev/null; wait "$vpid" 2>/dev/null || true; fi
  rm -rf "$out"
}
trap cleanup EXIT

if [ "${FLEET_SKIP_MARIADB:-no}" != yes ]; then
echo "== one MariaDB, a fleet writing to it (bench/fleet_mysql.cpp)"
mdb="$out/mariadb"
mkdir -p "$mdb/tmp"
userflag=(); [ "$(id -u)" = 0 ] && userflag=(--user=root)
mariadb-install-db --no-defaults --datadir="$mdb/data" --auth-root-authentication-method=normal --skip-test-db \
  --tmpdir="$mdb/tmp" "${userflag[@]}" >/dev/null
port=$((20000 + $$ % 20000))
mariadbd --no-defaults --datadir="$mdb/data" --socket="$mdb/sock" --port=$port --bind-address=127.0.0.1 \
  --tmpdir="$mdb/tmp" --log-error="$mdb/error.log" --innodb-buffer-pool-size=512M --max-connections=600 \
  "${userflag[@]}" &
mpid=$!
for _ in $(seq 100); do mariadb --no-defaults -uroot -S "$mdb/sock" -e "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
mariadb --no-defaults -uroot -S "$mdb/sock" -e "CREATE USER 'ws'@'127.0.0.1' IDENTIFIED BY 'bench';
  GRANT ALL ON *.* TO 'ws'@'127.0.0.1'; CREATE DATABASE wattscope CHARACTER SET utf8mb4;
  CREATE DATABASE wattscope_before CHARACTER SET utf8mb4;"
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
WATTSCOPE_MYSQL_PASSWORD=bench WATTSCOPE_SPILL_DIR="$out/spill" build/bench/wattscope_bench_fleet \
  --url "mysql://ws@127.0.0.1:$port/wattscope" --server-pid "$mpid" --nodes "${FLEET_NODES:-300}" \
  --seconds "${FLEET_SECONDS:-60}" --cpus "${FLEET_CPUS:-224}" --speedups "${FLEET_SPEEDUPS:-1.5,2,3}" \
  --per-core "${FLEET_PER_CORE:-period}" --baseline-nodes "${FLEET_BASELINE_NODES:-30}" \
  --baseline-seconds "${FLEET_BASELINE_SECONDS:-30}" --plain-tables "${FLEET_PLAIN_TABLES:-no}" \
  --fill-gb "${FLEET_FILL_GB:-0}"
echo "data directory on disk after the run: $(du -sh "$mdb/data" | cut -f1)"
kill -KILL "$mpid"; wait "$mpid" 2>/dev/null || true
mpid=
fi

echo
echo "== one VictoriaMetrics, a fleet pushing to it with --remote-write (bench/fleet_remote_write.cpp)"
vport=$((20000 + ($$ + 1) % 20000))
victoria-metrics -storageDataPath="$out/vm" -httpListenAddr="127.0.0.1:$vport" -loggerLevel=ERROR \
  >"$out/vm.log" 2>&1 &
vpid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$vport/health" >/dev/null && break; sleep 0.1; done
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
build/bench/wattscope_bench_fleet_remote_write --url "http://127.0.0.1:$vport/api/v1/write" --server-pid "$vpid" \
  --nodes-steps "${FLEET_RW_STEPS:-250,500,1000,2000}" --seconds "${FLEET_RW_SECONDS:-30}"
echo "data directory on disk after the run: $(du -sh "$out/vm" | cut -f1)"
kill -KILL "$vpid"; wait "$vpid" 2>/dev/null || true
vpid=

echo
echo "== /metrics per node: 8 simulated GPUs, 200 processes (bench/metrics_size.py)"
/usr/bin/python3 bench/metrics_size.py
