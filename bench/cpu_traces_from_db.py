#!/usr/bin/env python3
"""Turns a stored `wattscope run` of a CPU-only command (bench/cpu_train.py) into a CPU trace for
tests/fixtures/traces/ (issue 36): one row per process sample of the run's own processes, summed over them.

    cpu_traces_from_db.py RUN.db OUT.csv      (the newest run in RUN.db; SQLite store)

Columns: t_ms (from the first sample), device (`cpu`), util_pct (the run's processes' CPU, % of one core),
mem_used_bytes (their resident memory), power_w (their estimated CPU power, from cpu_energy_j; empty where the
machine gives no CPU energy), phase (empty: the runs carry no markers). The run's own processes rather than the
machine's CPU: the recording machine was shared, and the machine's utilisation is other people's work.
"""
import csv
import sqlite3
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: cpu_traces_from_db.py RUN.db OUT.csv")
    db = sqlite3.connect(sys.argv[1])
    (run_id,) = db.execute("SELECT run_id FROM runs ORDER BY rowid DESC LIMIT 1").fetchone()
    rows = db.execute("SELECT tick, MIN(ts_ms), SUM(cpu_pct), COUNT(cpu_pct), SUM(rss_bytes), SUM(cpu_energy_j), "
                      "COUNT(cpu_energy_j) FROM process_samples WHERE run_id=? GROUP BY tick ORDER BY tick",
                      (run_id,)).fetchall()
    t0 = rows[0][1]
    prev_e = prev_t = None
    with open(sys.argv[2], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_ms", "device", "util_pct", "mem_used_bytes", "power_w", "phase"])
        for _, ts, cpu, n_cpu, rss, energy, n_e in rows:
            power = ""
            if n_e and prev_e is not None and ts > prev_t:
                power = round((energy - prev_e) / ((ts - prev_t) / 1000), 3)
            if n_e:
                prev_e, prev_t = energy, ts
            w.writerow([ts - t0, "cpu", round(cpu, 3) if n_cpu else "", rss if rss is not None else "", power, ""])


if __name__ == "__main__":
    main()
