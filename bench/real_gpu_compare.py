#!/usr/bin/env python3
"""Compares what `wattscope run` stored for a real GPU with an independent reading taken at the same time
(bench/nvml_reference.py: NVML through ctypes every 100 ms) and with `nvidia-smi`'s. Used by bench/real_gpu.sh.

    real_gpu_compare.py RUN.db REF.csv [SMI.csv]

Prints, for the whole run (between its first and last stored ticks) and per phase (between the phase's own start and
end, the marker times: issue 29), wattscope's energy against the reference counter's rise over the same two instants
(interpolated between its readings, every 100 ms), and
the mean power of both; then, sample by sample, the difference between wattscope's power, utilisation, memory,
temperature and SM clock and the reference reading nearest in time; then the energy attributed to processes.
"""
import bisect
import csv
import json
import sqlite3
import statistics
import sys


def load_ref(path):
    by_gpu = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            by_gpu.setdefault(int(r["gpu"]), []).append(r)
    return by_gpu


def interp_energy_j(rows, t):
    """The reference counter (J) at Unix time t, linear between the two readings around it."""
    ts = [float(r["t"]) for r in rows]
    i = bisect.bisect_left(ts, t)
    if i <= 0 or i >= len(ts):
        return None
    t0, t1 = ts[i - 1], ts[i]
    e0, e1 = float(rows[i - 1]["energy_mj"]) / 1000, float(rows[i]["energy_mj"]) / 1000
    return e0 + (e1 - e0) * (t - t0) / (t1 - t0)


def nearest(rows, t):
    ts = [float(r["t"]) for r in rows]
    i = bisect.bisect_left(ts, t)
    best = min((j for j in (i - 1, i) if 0 <= j < len(ts)), key=lambda j: abs(ts[j] - t))
    return rows[best] if abs(ts[best] - t) < 0.15 else None


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: real_gpu_compare.py RUN.db REF.csv [SMI.csv]")
    db = sqlite3.connect(sys.argv[1])
    db.row_factory = sqlite3.Row
    ref = load_ref(sys.argv[2])
    run = db.execute("SELECT * FROM runs ORDER BY rowid DESC LIMIT 1").fetchone()
    run_id = run["run_id"]
    devs = db.execute("SELECT * FROM gpu_devices WHERE run_id=?", (run_id,)).fetchall()
    print(f"run {run_id}: {len(devs)} GPU(s)")
    for d in devs:
        d = dict(d)
        print("  " + ", ".join(f"{k}={d[k]}" for k in ("gpu_index", "name", "energy_method") if k in d))
    for d in devs:
        g = d["gpu_index"]
        samples = db.execute("SELECT * FROM gpu_samples WHERE run_id=? AND gpu_index=? ORDER BY tick",
                             (run_id, g)).fetchall()
        rrows = ref.get(g, [])
        if not samples or not rrows:
            print(f"gpu{g}: no samples or no reference")
            continue
        tick_ts = {s["tick"]: s["ts_ms"] / 1000 for s in samples}
        print(f"\ngpu{g}: energy, wattscope against the reference counter over the same instants")
        print(f"{'phase':>10} {'seconds':>8} {'wattscope J':>12} {'reference J':>12} {'diff':>7} "
              f"{'mean W':>8} {'ref W':>8}")
        spans = [("run", tick_ts[samples[0]["tick"]], tick_ts[samples[-1]["tick"]],
                  samples[-1]["energy_j"] - samples[0]["energy_j"])]
        for p in db.execute("SELECT * FROM phases WHERE run_id=? ORDER BY phase_id", (run_id,)):
            dev_e = json.loads(p["device_energy_j"] or "{}").get(f"gpu{g}")
            end = p["end_ms"] / 1000 if p["end_ms"] is not None else None
            spans.append((p["name"], p["start_ms"] / 1000, end, dev_e))
        for name, a, b, ws_j in spans:
            if b is None or ws_j is None:
                print(f"{name:>10}  (not closed, or no energy for this GPU)")
                continue
            r0, r1 = interp_energy_j(rrows, a), interp_energy_j(rrows, b)
            if r0 is None or r1 is None:
                print(f"{name:>10}  (outside the reference's readings)")
                continue
            ref_j = r1 - r0
            secs = b - a
            print(f"{name:>10} {secs:8.2f} {ws_j:12.1f} {ref_j:12.1f} {100 * (ws_j - ref_j) / ref_j:6.2f}% "
                  f"{ws_j / secs:8.1f} {ref_j / secs:8.1f}")
        print(f"\ngpu{g}: each stored sample against the reference reading nearest in time (within 150 ms)")
        fields = [("power_w", "power_mw", 1, "W"), ("util_gpu_pct", "util_gpu", 1, "%"),
                  ("mem_used_bytes", "mem_used", 1 / (1 << 20), "MiB"), ("temp_gpu_c", "temp_c", 1, "C"),
                  ("clock_sm_mhz", "clock_sm_mhz", 1, "MHz")]
        for col, rcol, scale, unit in fields:
            diffs, n_missing = [], 0
            for s in samples:
                if s[col] is None:
                    n_missing += 1
                    continue
                r = nearest(rrows, s["ts_ms"] / 1000)
                if r is None or r[rcol] == "":
                    continue
                if col == "power_w":
                    r = dict(r, power_mw=float(r["power_mw"]) / 1000)  # the reference reads mW
                diffs.append(abs(s[col] - float(r[rcol])) * scale)
            if diffs:
                print(f"  {col:>15}: {len(diffs)} pairs, median |diff| {statistics.median(diffs):.2f} {unit}, "
                      f"max {max(diffs):.2f} {unit}; {n_missing} samples without a value")
            else:
                print(f"  {col:>15}: no pairs ({n_missing} samples without a value)")
    if len(sys.argv) > 3:
        with open(sys.argv[3]) as f:
            rows = [r for r in csv.reader(f, skipinitialspace=True)]
        if len(rows) > 1:
            head, body = rows[0], rows[1:]
            print(f"\nnvidia-smi: {len(body)} readings; columns {head}")
    print("\nattribution: GPU energy per process (process_gpu_samples) against the GPU's")
    try:
        total = {r[0]: r[1] for r in db.execute(
            "SELECT gpu_index, MAX(energy_j) - MIN(energy_j) FROM gpu_samples WHERE run_id=? GROUP BY gpu_index",
            (run_id,))}
        for r in db.execute(
                "SELECT p.pid, p.comm, g.gpu_index, MAX(g.energy_j) AS e, MAX(g.mem_used_bytes) AS m "
                "FROM process_gpu_samples g JOIN processes p USING (run_id, pid, start_time) "
                "WHERE g.run_id=? GROUP BY p.pid, p.start_time, g.gpu_index ORDER BY e DESC LIMIT 5", (run_id,)):
            t = total.get(r["gpu_index"]) or 0
            print(f"  pid {r['pid']} {r['comm']}: gpu{r['gpu_index']} {r['e'] or 0:.1f} J of {t:.1f} J, "
                  f"peak {(r['m'] or 0) / (1 << 20):.0f} MiB")
    except sqlite3.Error as e:
        print(f"  ({e})")


if __name__ == "__main__":
    main()
