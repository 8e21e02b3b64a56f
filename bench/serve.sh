#!/usr/bin/env bash
# Load figures for `wattscope serve` with 8 fake GPUs at a 1 s interval: /metrics latency at 500 req/s and at full
# speed (wrk), 50 event-stream clients held for BENCH_SECONDS (default 60) with every tick counted, and serve's own
# CPU share and peak RSS over the whole run. Then, on a token-protected serve: /metrics timed while 120 slow-header
# (no token), 2,000 idle and 100 never-reading event-stream clients hang on at once (bench/serve_load.py, loopback,
# BENCH_LOAD_SECONDS each, default 30), and serve's CPU per dashboard page load in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests >/dev/null
scripts/build.sh release >/dev/null
secs=${BENCH_SECONDS:-60}
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT

python_free_scenario() {
  printf '{"devices": ['
  for i in 0 1 2 3 4 5 6 7; do
    [ $i -gt 0 ] && printf ','
    printf '{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-%s", "metrics": {"power_instant_mw": 312000, "power_avg_mw": 300000, "energy_mj": {"linear": [1000000, 300]}, "util_gpu": 97, "util_mem": 41, "mem_used_bytes": 75161927680, "mem_total_bytes": 85899345920, "temp_gpu": 64, "temp_mem": 71, "clock_sm": 1980, "clock_gfx": 1980, "clock_mem": 2619, "pcie_width": 16, "pcie_width_max": 16, "pcie_tx_kbs": 1000, "pcie_rx_kbs": 2000, "fan_pct": 30, "pstate": 0, "power_limit_mw": 700000, "clock_events": 0}}' $i
  done
  printf ']}'
}
python_free_scenario > "$out/s.json"
WATTSCOPE_NVML_LIBRARY="$PWD/build/fakes/libnvidia-ml-fake.so" WATTSCOPE_FAKE_NVML_SCENARIO="$out/s.json" \
  build/wattscope serve --listen 127.0.0.1:0 --interval 1s 2> "$out/serve.err" &
pid=$!
for _ in $(seq 100); do grep -q "serving on" "$out/serve.err" && break; sleep 0.1; done
url=$(grep -oE "http://127.0.0.1:[0-9]+" "$out/serve.err" | head -1)
sleep 2
read_cpu() { awk '{print $14 + $15}' /proc/$pid/stat; }
cpu0=$(read_cpu); t0=$(date +%s.%N)

echo "== /metrics with 8 GPUs at 500 req/s (wrk, 10 connections, 20 s)"
WRK_DELAY_MS=20 wrk -t2 -c10 -d20s --latency -s bench/paced.lua "$url/metrics" | grep -E "Requests/sec|50%|90%|99%|Latency"
echo
echo "== /metrics at full speed (wrk, 10 connections, 10 s)"
wrk -t2 -c10 -d10s --latency "$url/metrics" | grep -E "Requests/sec|50%|99%"
echo
echo "== 50 event-stream clients for ${secs}s"
for i in $(seq 50); do curl -sN "$url/api/v1/events" > "$out/sse.$i" & done
ticks0=$(curl -s "$url/metrics" | awk '/^wattscope_sampler_ticks_total/ {print $2}')
sleep "$secs"
ticks1=$(curl -s "$url/metrics" | awk '/^wattscope_sampler_ticks_total/ {print $2}')
kill $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
sleep 0.5
counts=$(for i in $(seq 50); do grep -c "^data: " "$out/sse.$i"; done | sort -n)
echo "ticks while the clients were connected: $((ticks1 - ticks0)); frames received per client: min $(echo "$counts" | head -1), max $(echo "$counts" | tail -1) (each client also gets the current state on connecting)"
cpu1=$(read_cpu); t1=$(date +%s.%N)
hz=$(getconf CLK_TCK)
awk -v c0="$cpu0" -v c1="$cpu1" -v t0="$t0" -v t1="$t1" -v hz="$hz" \
  'BEGIN { printf "serve CPU over the whole benchmark (wrk load included): %.2f%% of one core\n", 100 * (c1 - c0) / hz / (t1 - t0) }'
echo "serve peak RSS: $(awk '/VmHWM/ {printf "%.1f MiB", $2 / 1024}' /proc/$pid/status)"
kill -TERM "$pid"; wait "$pid" || true

echo
echo "== hostile clients against a token-protected serve (bench/serve_load.py)"
load_secs=${BENCH_LOAD_SECONDS:-30}
token=s3cret-bench-token-0123456789
echo "$token" > "$out/token"
WATTSCOPE_NVML_LIBRARY="$PWD/build/fakes/libnvidia-ml-fake.so" WATTSCOPE_FAKE_NVML_SCENARIO="$out/s.json" \
  build/wattscope serve --listen 127.0.0.1:0 --interval 1s --token-file "$out/token" 2> "$out/serve2.err" &
pid=$!
for _ in $(seq 100); do grep -q "serving on" "$out/serve2.err" && break; sleep 0.1; done
url=$(grep -oE "http://127.0.0.1:[0-9]+" "$out/serve2.err" | head -1)
sleep 2
for mode in "held:0" "reconnecting 1 s after each close:1"; do
  echo "-- misbehaving clients ${mode%:*}"
  cpu0=$(read_cpu); t0=$(date +%s.%N)
  python3 bench/serve_load.py --url "$url" --token "$token" --seconds "$load_secs" --rate 50 --reopen-after "${mode##*:}"
  cpu1=$(read_cpu); t1=$(date +%s.%N)
  awk -v c0="$cpu0" -v c1="$cpu1" -v t0="$t0" -v t1="$t1" -v hz="$hz" \
    'BEGIN { printf "serve CPU meanwhile: %.1f%% of one core\n", 100 * (c1 - c0) / hz / (t1 - t0) }'
done
echo "serve threads: $(ls /proc/$pid/task | wc -l)"
echo
echo "== dashboard page load in headless Chromium (accepts br, gzip): serve CPU per load"
node bench/dashboard_load.mjs "$url" "$pid" "$token"
kill -TERM "$pid"; wait "$pid" || true

echo
echo "== serve idle at 1 s, 8 GPUs, ${secs}s, nobody connected"
WATTSCOPE_NVML_LIBRARY="$PWD/build/fakes/libnvidia-ml-fake.so" WATTSCOPE_FAKE_NVML_SCENARIO="$out/s.json" \
  /usr/bin/time -f "%U %S %e %M" -o "$out/time" timeout -s TERM "$secs" build/wattscope -q serve --listen 127.0.0.1:0 \
  --interval 1s || true
read -r user sys wall rss < <(tail -n 1 "$out/time")  # GNU time first notes the exit status of timeout
awk -v u="$user" -v s="$sys" -v w="$wall" -v r="$rss" \
  'BEGIN { printf "CPU %.3f%% of one core, peak RSS %.1f MiB\n", 100 * (u + s) / w, r / 1024 }'
