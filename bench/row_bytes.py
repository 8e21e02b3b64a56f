#!/usr/bin/env python3
"""Bytes a GPU sample takes in each store: `wattscope record` on 8 stand-in H100s (UUIDs of a real GPU's length and
form, every field the fake answers), then gpu_samples' size in SQLite (its b-tree pages, from dbstat) and in CSV (the
file), each against the same rows in the layout of schema 5, where every row repeated its GPU's uuid, name and vendor
(built in the same run from the view gpu_samples_named). Prints bytes per GPU row and MiB per GPU-hour at 1 s.

    bench/row_bytes.py [--build DIR] [--seconds 30] [--interval-ms 100]
"""
import argparse
import csv
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import overhead  # noqa: E402 (the H100 scenario of the overhead bench)


def table_bytes(db, name):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT sum(pgsize) FROM dbstat WHERE name = ?", (name,)).fetchone()[0] or 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--interval-ms", type=int, default=100)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="wattscope-row-bytes-")
    try:
        scen = os.path.join(tmp, "scenario.json")
        overhead.scenario(scen, 8, False)
        with open(scen) as f:
            s = json.load(f)
        for i, d in enumerate(s["devices"]):  # a real UUID's 40 characters
            d["uuid"] = f"GPU-{0x5f8a2c1e + i:08x}-9c4b-4f1e-8a3d-{0x2b7c9e01a4f6 + i:012x}"
        with open(scen, "w") as f:
            json.dump(s, f)
        env = dict(os.environ, WATTSCOPE_NVML_LIBRARY=os.path.join(args.build, "fakes", "libnvidia-ml-fake.so"),
                   WATTSCOPE_FAKE_NVML_SCENARIO=scen, WATTSCOPE_CGROUP_ROOT="none")
        db, csv_dir = os.path.join(tmp, "w.db"), os.path.join(tmp, "csv")
        subprocess.run([os.path.join(args.build, "wattscope"), "-q", "record", "--task", "row-bytes", "--interval",
                        f"{args.interval_ms}ms", "--duration", f"{args.seconds}s", "--top-processes", "0", "--db", db,
                        "--csv", csv_dir], env=env, check=True)
        with sqlite3.connect(db) as c:
            rows = c.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
            cols = [r[1] for r in c.execute("PRAGMA table_info(gpu_samples_named)")]
            types = {r[1]: r[2] for r in c.execute("PRAGMA table_info(gpu_samples)")}
            types.update({"uuid": "TEXT", "name": "TEXT", "vendor": "TEXT"})
            c.execute("CREATE TABLE wide ({}, PRIMARY KEY (run_id, tick, gpu_index)) WITHOUT ROWID".format(
                ", ".join(f'"{n}" {types[n]}' for n in cols)))
            c.execute("INSERT INTO wide SELECT * FROM gpu_samples_named")
        lean, wide = table_bytes(db, "gpu_samples"), table_bytes(db, "wide")
        name = next(n for n in os.listdir(csv_dir) if n.endswith("_gpu_samples.csv"))
        path = os.path.join(csv_dir, name)
        csv_lean = os.path.getsize(path)
        with open(path, newline="") as f:
            data = list(csv.reader(f))
        devices = next(os.path.join(csv_dir, n) for n in os.listdir(csv_dir) if n.endswith("_gpu_devices.csv"))
        with open(devices, newline="") as f:
            dev = {d["gpu_index"]: d for d in csv.DictReader(f)}
        head, body = data[0], data[1:]
        at = head.index("gpu_index") + 1
        wide_text = ",".join(head[:at] + ["uuid", "name", "vendor"] + head[at:]) + "\n"
        for r in body:
            d = dev[r[head.index("gpu_index")]]
            wide_text += ",".join(r[:at] + [d["uuid"], d["name"], d["vendor"]] + r[at:]) + "\n"
        csv_wide = len(wide_text.encode())
        per_hour = 3600 / 2**20  # a GPU row a second for an hour, in MiB
        print(f"{rows} GPU rows ({args.seconds} s at {args.interval_ms} ms, 8 GPUs)")
        print(f"{'store':8} {'schema 5 B/row':>15} {'schema 6 B/row':>15} {'ratio':>6} {'MiB/GPU-hour at 1 s':>20}")
        for store, before, after in (("SQLite", wide, lean), ("CSV", csv_wide, csv_lean)):
            print(f"{store:8} {before / rows:15.1f} {after / rows:15.1f} {after / before:6.2f} "
                  f"{after / rows * per_hour:20.2f}")
    finally:
        shutil.rmtree(tmp, True)


if __name__ == "__main__":
    main()
