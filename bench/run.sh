#!/usr/bin/env bash
# Prints the figures quoted in the README: micro-benchmarks (Google Benchmark), the NVML tick against its floor
# as a ratio from the same run, and whole-process CPU share and peak RSS of `wattscope record` with 8 fake GPUs
# at 1 Hz and 100 Hz, and rows/s into a private MariaDB server (batch sizes 1 to 10000, and ten million rows).
# BENCH_SECONDS (default 60) sets how long each record runs; BENCH_MYSQL_10M=0 skips the ten-million-row run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
scripts/build.sh release >/dev/null
secs=${BENCH_SECONDS:-60}
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
echo "== wattscope record, 8 fake GPUs, ${secs}s each"
cat > "$out/s.json" <<'JSON'
{"devices": [
JSON
for i in 0 1 2 3 4 5 6 7; do
  sep=","; [ $i = 7 ] && sep=""
  cat >> "$out/s.json" <<JSON
{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-$i", "metrics": {"power_instant_mw": 312000, "power_avg_mw": 300000,
 "energy_mj": {"linear": [1000000, 300]}, "util_gpu": 97, "util_mem": 41, "mem_used_bytes": 75161927680,
 "mem_total_bytes": 85899345920, "temp_gpu": 64, "temp_mem": 71, "clock_sm": 1980, "clock_gfx": 1980, "clock_mem": 2619,
 "pcie_width": 16, "pcie_width_max": 16, "pcie_tx_kbs": 1000, "pcie_rx_kbs": 2000, "fan_pct": 0, "pstate": 0,
 "power_limit_mw": 700000, "clock_events": 0}}$sep
JSON
done
echo "]}" >> "$out/s.json"
for interval in 1s 10ms; do
  /usr/bin/time -f "%U %S %e %M" -o "$out/time" \
    env WATTSCOPE_NVML_LIBRARY="$PWD/build/fakes/libnvidia-ml-fake.so" WATTSCOPE_FAKE_NVML_SCENARIO="$out/s.json" \
    build/wattscope -q record --task bench --interval "$interval" --duration "${secs}s" --db "$out/rec.db"
  read -r user sys wall rss < "$out/time"
  awk -v u="$user" -v s="$sys" -v w="$wall" -v r="$rss" -v i="$interval" \
    'BEGIN { printf "interval %-5s CPU %.3f%% of one core (user %.2fs + sys %.2fs over %.1fs), peak RSS %.1f MiB\n", i, 100 * (u + s) / w, u, s, w, r / 1024 }'
done

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
