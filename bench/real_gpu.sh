#!/usr/bin/env bash
# Checks wattscope against a real NVIDIA GPU, its NVML and nvidia-smi, in one pass of about three minutes (for a lent
# GPU machine, where every minute counts). Usage:
#
#   bench/real_gpu.sh BIN_DIR OUT_DIR [SECONDS_PER_PHASE]
#
# BIN_DIR holds `wattscope` and `bench/nvml_floor` (a release build; for a machine without wattscope's libraries, a
# copy with them in BIN_DIR/lib and its run path set there). Needs python3 with PyTorch (CUDA) and psutil.
# 1. what the machine has: nvidia-smi, `wattscope doctor`;
# 2. `wattscope run` of bench/real_gpu_load.py (phases idle, matmul, copy, idle-end, sent through the Python markers)
#    beside two independent readers: bench/nvml_reference.py (NVML through ctypes, every 100 ms) and nvidia-smi;
#    bench/real_gpu_compare.py then compares energy per phase, power, utilisation, memory, temperature and clocks;
# 3. `show --json`, `report`, `advise` and `top --once` on that run, `/metrics` from `serve` next to nvidia-smi;
# 4. bench/overhead.py --real: record against the floor program and a Python monitor on the real NVML.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "$1" && pwd); out=$2; secs=${3:-6}
mkdir -p "$out"
ws="$bin/wattscope"
py=${PYTHON:-python3}
step() { printf '\n=== %s (%s)\n' "$*" "$(date +%T)"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,pci.bus_id,power.limit,power.draw,temperature.gpu,clocks.sm,memory.total \
  --format=csv
"$ws" --version
"$ws" doctor | tee "$out/doctor.txt"
"$ws" doctor --json > "$out/doctor.json"

step "run: bench/real_gpu_load.py ($secs s per phase) with two independent readers"
"$py" bench/nvml_reference.py 100 "$out/ref.csv" &
ref=$!
nvidia-smi --query-gpu=timestamp,index,power.draw,utilization.gpu,memory.used,temperature.gpu,clocks.sm \
  --format=csv,nounits -lms 500 > "$out/smi.csv" &
smi=$!
sleep 1
PYTHONPATH=python${PYTHONPATH:+:$PYTHONPATH} "$ws" run --task real-gpu-check --interval 500ms --db "$out/run.db" -- \
  "$py" bench/real_gpu_load.py "$secs" 2>&1 | tee "$out/run.txt"
sleep 1
kill -TERM $ref $smi; wait $ref $smi 2>/dev/null

step "compare with the reference"
"$py" bench/real_gpu_compare.py "$out/run.db" "$out/ref.csv" "$out/smi.csv" | tee "$out/compare.txt"
"$py" - "$out/smi.csv" "$out/run.db" <<'EOF'
import csv, sqlite3, statistics, sys
# nvidia-smi's power per phase: the mean of its readings inside each phase, against wattscope's stored samples.
db = sqlite3.connect(sys.argv[2])
smi = [r for r in csv.DictReader(open(sys.argv[1]), skipinitialspace=True)]
import datetime
def t(r):
    return datetime.datetime.strptime(r["timestamp"], "%Y/%m/%d %H:%M:%S.%f").timestamp()
key = [k for k in smi[0] if k.startswith("power.draw")][0]
print(f"{'phase':>10} {'nvidia-smi W':>13} {'wattscope W':>12}  (means of each one's readings inside the phase)")
for name, a, b in db.execute("SELECT name, start_ms, end_ms FROM phases ORDER BY phase_id"):
    s = [float(r[key]) for r in smi if a / 1000 <= t(r) <= b / 1000]
    w = [x for (x,) in db.execute("SELECT power_w FROM gpu_samples WHERE gpu_index=0 AND ts_ms BETWEEN ? AND ?", (a, b))]
    if s and w:
        print(f"{name:>10} {statistics.mean(s):13.1f} {statistics.mean(w):12.1f}")
EOF

step "show, advise, report, top"
"$ws" show --db "$out/run.db" | tee "$out/show.txt"
"$ws" show --db "$out/run.db" --json > "$out/show.json"
"$ws" advise --db "$out/run.db" | tee "$out/advise.txt"
"$ws" report --db "$out/run.db" -o "$out/report.html" && ls -l "$out/report.html"
TERM=xterm "$ws" top --once > "$out/top.txt" 2>&1; head -12 "$out/top.txt"

step "serve: /metrics beside nvidia-smi"
"$ws" serve --listen 127.0.0.1:9477 --interval 500ms > "$out/serve.txt" 2>&1 &
srv=$!
sleep 3
curl -fsS http://127.0.0.1:9477/metrics > "$out/metrics.txt"
nvidia-smi --query-gpu=power.draw,utilization.gpu,memory.used,temperature.gpu,clocks.sm --format=csv
grep -E '^wattscope_gpu_(power_watts|utilization_ratio|memory_used_bytes|temperature_celsius|clock_hertz)\{' \
  "$out/metrics.txt" | grep -v 'clock="graphics"\|clock="memory"'
curl -fsS http://127.0.0.1:9477/api/v1/current > "$out/current.json"
kill -TERM $srv; wait $srv

step "overhead: record against the floor and a Python monitor on the real NVML"
[ "${OVERHEAD_INTERVALS:-}" = none ] || "$py" bench/overhead.py --real --build "$bin" --python "$py" --intervals "${OVERHEAD_INTERVALS:-1000,100,10}" \
  --scale "${OVERHEAD_SCALE:-0.5}" --rounds "${OVERHEAD_ROUNDS:-2}" | tee "$out/overhead.txt"
step "done"
