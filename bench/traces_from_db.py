#!/usr/bin/env python3
"""Turns stored runs into the trace files the forecasting and anomaly work reads (tests/fixtures/traces/*.csv,
issue 36): one row per GPU sample, times relative to the run's first sample, with the innermost phase open then.

    traces_from_db.py RUN.db OUT.csv      (the newest run in RUN.db; SQLite store)

Columns: t_ms, gpu, power_w, util_gpu_pct, util_mem_pct, mem_used_bytes, mem_total_bytes, temp_gpu_c, clock_sm_mhz,
energy_j, phase. An empty cell is a reading the device did not give (missing, never 0).
"""
import csv
import sqlite3
import sys

COLS = ["power_w", "util_gpu_pct", "util_mem_pct", "mem_used_bytes", "mem_total_bytes", "temp_gpu_c", "clock_sm_mhz",
        "energy_j"]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: traces_from_db.py RUN.db OUT.csv")
    db = sqlite3.connect(sys.argv[1])
    (run_id,) = db.execute("SELECT run_id FROM runs ORDER BY rowid DESC LIMIT 1").fetchone()
    phases = db.execute("SELECT name, start_ms, end_ms FROM phases WHERE run_id=? ORDER BY start_ms",
                        (run_id,)).fetchall()
    rows = db.execute(f"SELECT ts_ms, gpu_index, {', '.join(COLS)} FROM gpu_samples WHERE run_id=? ORDER BY tick, "
                      "gpu_index", (run_id,)).fetchall()
    t0 = rows[0][0]
    with open(sys.argv[2], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_ms", "gpu"] + COLS + ["phase"])
        for ts, gpu, *vals in rows:
            # The innermost phase: the latest-starting one still open at ts.
            inner = ""
            for name, a, b in phases:
                if a <= ts and (b is None or ts < b):
                    inner = name
            w.writerow([ts - t0, gpu] + ["" if v is None else (round(v, 3) if isinstance(v, float) else v)
                                         for v in vals] + [inner])


if __name__ == "__main__":
    main()
