#!/usr/bin/env python3
"""Bytes a GPU sample takes in each store: `wattscope record` on 8 stand-in H100s (UUIDs of a real GPU's length and
form, every field the fake answers), then the GPU rows' size in SQLite (gpu_sample_rows' b-tree pages, from dbstat)
and in CSV (the file), each against the same rows in the layouts of schema 5, where every row repeated its GPU's uuid,
name and vendor, and of schema 6, where it repeated its run's id (built in the same run from the views
gpu_samples_named and gpu_samples). Prints bytes per GPU row and MiB per GPU-hour at 1 s.

    bench/row_bytes.py [--build DIR] [--seconds 30] [--interval-ms 100] [--migration-hours 24]
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
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import overhead  # noqa: E402 (the H100 scenario of the overhead bench)


def table_bytes(db, name):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT sum(pgsize) FROM dbstat WHERE name = ?", (name,)).fetchone()[0] or 0


def migration(args, env, recorded, tmp):
    """Seconds a one-second `record` takes on a version-6 store of `hours` at 1 s of 8 GPUs (the writer moves every
    row once) and on the same store already at version 7."""
    ticks = int(args.migration_hours * 3600)
    figures = {}
    for version in (6, 7):
        db = os.path.join(tmp, f"day{version}.db")
        shutil.copy(recorded, db)
        with sqlite3.connect(db) as c:
            cols = [r[1] for r in c.execute("PRAGMA table_info(gpu_samples)")]
            types = {r[1]: r[2] for r in c.execute("PRAGMA table_info(gpu_sample_rows)")}
            types["run_id"] = "TEXT"
            run_id = c.execute("SELECT run_id FROM runs").fetchone()[0]
            first = c.execute("SELECT max(tick) + 1 FROM gpu_sample_rows").fetchone()[0]
            # Rows of later ticks, copies of the recorded ones, up to `ticks` ticks of the run.
            c.execute("DROP VIEW gpu_samples_named")
            c.execute("CREATE TEMP TABLE base AS SELECT * FROM gpu_samples")
            c.execute("CREATE TABLE g6 ({}, PRIMARY KEY (run_id, tick, gpu_index)) WITHOUT ROWID".format(
                ", ".join(f'"{n}" {types[n]}' for n in cols)))
            rest = ", ".join(f'b."{n}"' for n in cols if n not in ("run_id", "tick", "ts_ms"))
            c.execute(f"INSERT INTO g6 SELECT * FROM base")
            c.execute(f"""WITH RECURSIVE t(n) AS (SELECT {first} UNION ALL SELECT n + 1 FROM t WHERE n < {ticks - 1})
                          INSERT INTO g6 (run_id, tick, ts_ms, {", ".join(f'"{n}"' for n in cols[3:])})
                          SELECT ?, t.n, b.ts_ms + 1000 * t.n, {rest} FROM t JOIN base b ON b.tick = 0""", (run_id,))
            if version == 6:
                c.execute("DROP VIEW gpu_samples")
                c.execute("DROP TABLE gpu_sample_rows")
                c.execute("DROP TABLE run_keys")
                c.execute("ALTER TABLE g6 RENAME TO gpu_samples")
                c.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
            else:
                c.execute("INSERT OR IGNORE INTO gpu_sample_rows SELECT 1, " + ", ".join(f'"{n}"' for n in cols[1:])
                          + " FROM g6")
                c.execute("DROP TABLE g6")
            rows = c.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
        size = os.path.getsize(db)
        t0 = time.monotonic()
        subprocess.run([os.path.join(args.build, "wattscope"), "-q", "record", "--task", "after", "--duration", "1s",
                        "--top-processes", "0", "--db", db], env=env, check=True)
        figures[version] = (rows, size, time.monotonic() - t0)
    (rows, size6, t6), (_, _, t7) = figures[6], figures[7]
    print(f"first writer of a version-6 store of {rows} GPU rows ({size6 / 2**20:.0f} MiB): {t6:.2f} s, against "
          f"{t7:.2f} s on the same rows at version 7: the copy took {t6 - t7:.2f} s, once")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--interval-ms", type=int, default=100)
    ap.add_argument("--migration-hours", type=float, default=0,
                    help="also time the first writer of a version-6 store holding this many hours of 8 GPUs at 1 s "
                         "(its copy of the rows under run keys), against a writer of a version-7 store as large")
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
            types = {r[1]: r[2] for r in c.execute("PRAGMA table_info(gpu_sample_rows)")}
            types.update({"run_id": "TEXT", "uuid": "TEXT", "name": "TEXT", "vendor": "TEXT"})
            # The same rows in the layouts of schema 5 (each row with its GPU's uuid, name and vendor) and schema 6
            # (each row with its run's id), built in the store's own order as its writer appends them.
            for table, view in (("v5", "gpu_samples_named"), ("v6", "gpu_samples")):
                cols = [r[1] for r in c.execute(f"PRAGMA table_info({view})")]
                c.execute("CREATE TABLE {} ({}, PRIMARY KEY (run_id, tick, gpu_index)) WITHOUT ROWID".format(
                    table, ", ".join(f'"{n}" {types[n]}' for n in cols)))
                c.execute(f"INSERT INTO {table} SELECT * FROM {view} ORDER BY run_id, tick, gpu_index")
        sqlite_bytes = [table_bytes(db, t) for t in ("v5", "v6", "gpu_sample_rows")]
        name = next(n for n in os.listdir(csv_dir) if n.endswith("_gpu_samples.csv"))
        path = os.path.join(csv_dir, name)
        with open(path, newline="") as f:
            data = list(csv.reader(f))
        devices = next(os.path.join(csv_dir, n) for n in os.listdir(csv_dir) if n.endswith("_gpu_devices.csv"))
        with open(devices, newline="") as f:
            dev = {d["gpu_index"]: d for d in csv.DictReader(f)}
        with sqlite3.connect(db) as c:
            run_id = c.execute("SELECT run_id FROM runs").fetchone()[0]
        head, body = data[0], data[1:]
        at = head.index("gpu_index")

        def layout(identity):
            h = ["run_id"] + head[:at + 1] + (["uuid", "name", "vendor"] if identity else []) + head[at + 1:]
            text = ",".join(h) + "\n"
            for r in body:
                d = dev[r[at]]
                text += ",".join([run_id] + r[:at + 1] + ([d["uuid"], d["name"], d["vendor"]] if identity else [])
                                 + r[at + 1:]) + "\n"
            return len(text.encode())

        csv_bytes = [layout(True), layout(False), os.path.getsize(path)]
        if args.migration_hours:
            migration(args, env, db, tmp)
        per_hour = 3600 / 2**20  # a GPU row a second for an hour, in MiB
        print(f"{rows} GPU rows ({args.seconds} s at {args.interval_ms} ms, 8 GPUs)")
        print(f"{'store':8} {'schema 5 B/row':>15} {'schema 6 B/row':>15} {'schema 7 B/row':>15} {'7/5':>6} "
              f"{'MiB/GPU-hour at 1 s':>20}")
        for store, (v5, v6, v7) in (("SQLite", sqlite_bytes), ("CSV", csv_bytes)):
            print(f"{store:8} {v5 / rows:15.1f} {v6 / rows:15.1f} {v7 / rows:15.1f} {v7 / v5:6.2f} "
                  f"{v7 / rows * per_hour:20.2f}")
    finally:
        shutil.rmtree(tmp, True)


if __name__ == "__main__":
    main()
