#!/usr/bin/env python3
"""Whether the 10 ms grid holds: `record --interval 10ms` on 8 stand-in GPUs with an H100's call costs
(bench/overhead.py's H100_COSTS: the energy counter 2.8 ms of CPU a read), running alone for --seconds (60); the ticks
stored against the ticks due, the skipped ones, and the energy counter reads per GPU. Needs the release build."""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import overhead  # noqa: E402

BUILD = os.path.join(HERE, "..", "build")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=60)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scen = os.path.join(tmp, "scenario.json")
        overhead.scenario(scen, 8, True)
        env = dict(os.environ, WATTSCOPE_NVML_LIBRARY=os.path.join(BUILD, "fakes", "libnvidia-ml-fake.so"),
                   WATTSCOPE_FAKE_NVML_SCENARIO=scen, WATTSCOPE_CGROUP_ROOT="none",
                   WATTSCOPE_FAKE_NVML_CALLS=os.path.join(tmp, "calls.json"))
        env.pop("CUDA_VISIBLE_DEVICES", None)
        db = os.path.join(tmp, "g.db")
        subprocess.run([os.path.join(BUILD, "wattscope"), "-q", "record", "--db", db, "--interval", "10ms", "--duration",
                        f"{args.seconds:g}s"], env=env, check=True)
        c = sqlite3.connect(db)
        ticks = [t for t, in c.execute("SELECT tick FROM cpu_samples ORDER BY tick")]
        summary = json.loads(c.execute("SELECT summary FROM runs").fetchone()[0] or "{}")
        calls = json.load(open(os.path.join(tmp, "calls.json")))
    gaps = sum(b - a - 1 for a, b in zip(ticks, ticks[1:]) if b - a > 1)
    print(f"10 ms for {args.seconds:g} s, 8 GPUs with H100 costs: {len(ticks)} ticks stored, last tick {ticks[-1]}, "
          f"{gaps} skipped (the sampler's count: {summary.get('skipped_ticks', '?')})")
    reads = calls.get("nvmlDeviceGetTotalEnergyConsumption", 0)
    print(f"energy counter reads: {reads} ({reads / 8 / args.seconds:.2f} a GPU a second)")


if __name__ == "__main__":
    main()
