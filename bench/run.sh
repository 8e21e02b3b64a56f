#!/usr/bin/env bash
# Prints the figures quoted in docs/performance.md: micro-benchmarks (Google Benchmark), the NVML tick against its floor
# as a ratio from the same run, what `wattscope record` with 8 fake GPUs costs beside the floor and a Python monitor
# at 1 s, 100 ms and 10 ms (bench/overhead.py), memory over a simulated day (bench/memory.py), and rows/s into a private MariaDB server (batch sizes 1 to 10000, and ten million rows).
# BENCH_ROUNDS (default 2) sets overhead.py's rounds; BENCH_MEMORY_HOUR=1 adds an hour at 10 ms (~6 min);
# BENCH_MYSQL_10M=0 skips the ten-million-row run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests >/dev/null
scripts/build.sh release >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== micro-benchmarks (5 repetitions, randomly interleaved so machine noise hits every benchmark alike)"
build/bench/wattscope_bench --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true \
  --benchmark_filter='^BM_(BuildRows|SqliteRows|CsvRows|CpuSourceTick|NvmlTick)' \
  --benchmark_out="$out/bench.json" --benchmark_out_format=json | grep -E "_mean|_median|Benchmark|---" || true

python_free_ratio() {  # median wattscope tick / median bare-call tick, from the JSON (no python needed)
  local w b
  w=$(grep -A25 '"BM_NvmlTickWattscope_median"' "$out/bench.json" | grep '"cpu_time"' | grep -oE '[0-9][0-9.e+-]*' | head -1)
  b=$(grep -A25 '"BM_NvmlTickBareCalls_median"' "$out/bench.json" | grep '"cpu_time"' | grep -oE '[0-9][0-9.e+-]*' | head -1)
  awk -v w="$w" -v b="$b" 'BEGIN { printf "NVML tick, 8 GPUs: wattscope %.2f us, bare NVML calls %.2f us, ratio %.3fx\n", w, b, w / b }'
}
python_free_ratio

echo
echo "== HTML report of a 1M-row run (125,000 ticks x 8 GPUs)"
WATTSCOPE_BENCH_REPORT_OUT="$out/report-1m.html" build/bench/wattscope_bench --benchmark_filter='^BM_Report1MRows' \
  | grep -E "^BM_" || true
node bench/report_open.mjs "$out/report-1m.html"

echo
echo "== what record costs beside the floor (bench/overhead.py: the same NVML calls in C) and a Python monitor"
/usr/bin/python3 bench/overhead.py --rounds "${BENCH_ROUNDS:-2}"
echo
echo "== the same against a driver-like floor (the fake spends 20 us per call, 20 ms asleep per PCIe read)"
/usr/bin/python3 bench/overhead.py --rounds 1 --driver-like --intervals 1000,100

echo
echo "== memory over long runs, fast-forwarded (bench/memory.py)"
/usr/bin/python3 bench/memory.py ${BENCH_MEMORY_HOUR:+--hour}

echo
echo "== MySQL/MariaDB ingest: private server, one transaction per batch of gpu_samples rows"
mdb="$out/mariadb"
mkdir -p "$mdb/tmp"
userflag=(); [ "$(id -u)" = 0 ] && userflag=(--user=root)
mariadb-install-db --no-defaults --datadir="$mdb/data" --auth-root-authentication-method=normal --skip-test-db \
  --tmpdir="$mdb/tmp" "${userflag[@]}" >/dev/null
port=$((20000 + $$ % 20000))
mariadbd --no-defaults --datadir="$mdb/data" --socket="$mdb/sock" --port=$port --bind-address=127.0.0.1 \
  --tmpdir="$mdb/tmp" --log-error="$mdb/error.log" --innodb-buffer-pool-size=512M "${userflag[@]}" &
mpid=$!
for _ in $(seq 100); do mariadb --no-defaults -uroot -S "$mdb/sock" -e "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
mariadb --no-defaults -uroot -S "$mdb/sock" -e "CREATE USER 'ws'@'127.0.0.1' IDENTIFIED BY 'bench';
  GRANT ALL ON *.* TO 'ws'@'127.0.0.1'; CREATE DATABASE wattscope CHARACTER SET utf8mb4;"
WATTSCOPE_MYSQL_PASSWORD=bench WATTSCOPE_BENCH_MYSQL_URL="mysql://ws@127.0.0.1:$port/wattscope" \
  WATTSCOPE_BENCH_10M=${BENCH_MYSQL_10M:-1} build/bench/wattscope_bench --benchmark_filter='^BM_Mysql' | grep -E "^BM_" || true
kill "$mpid"; wait "$mpid" 2>/dev/null || true
