#!/usr/bin/env python3
"""What a measured window (wattscope.measure / begin_window + end_window) costs the loop that opens it, and how many
a loop can afford at 1 % overhead.

    python3 bench/window_cost.py [--build build] [--windows 40] [--intervals 1s,100ms]

Under `wattscope run` on a stand-in H100 (the fake NVML with an H100's call costs, an energy counter that moves every
100 ms, bench/overhead.py), a child opens N windows of 20 ms of work each, one after another, three ways:
- `wait`: end_window waits for the figures (the default): the end's counter reading, taken after the counter's next
  update, and its hand-over;
- `nowait`: end_window(wait=False), the figures fetched after the loop (what a per-step loop would use);
- `phase`: wattscope.phase() (no figures back): the baseline marker cost.
Printed per interval: the median and 90th percentile of the wall time a begin/end pair adds to the loop, its CPU time
in the program, and the pairs per second a loop can afford for 1 % of its wall time (0.01 / added wall time). Each
window's energy is checked against the stand-in's constant power: the median error, and how many windows missed by
more than their own bound_j (20 ms windows on a counter that moves every 100 ms: the bound, not 1 %, is the claim)."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from overhead import H100_COSTS  # noqa: E402

POWER_W = 350.0


def child(mode, n, out_path):
    import wattscope  # from PYTHONPATH: this repository's python/

    work_s = 0.02
    added, cpu, results = [], [], []
    time.sleep(1.0)  # the first ticks
    for i in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        if mode == "phase":
            with wattscope.phase("w"):
                t_in, c_in = time.perf_counter(), time.process_time()
                while time.perf_counter() - t_in < work_s:
                    pass
                t_out, c_out = time.perf_counter(), time.process_time()
        else:
            wattscope.begin_window("w")
            t_in, c_in = time.perf_counter(), time.process_time()
            while time.perf_counter() - t_in < work_s:
                pass
            t_out, c_out = time.perf_counter(), time.process_time()
            results.append(wattscope.end_window("w", wait=(mode == "wait")))
        t1, c1 = time.perf_counter(), time.process_time()
        added.append((t1 - t0) - (t_out - t_in))
        cpu.append((c1 - c0) - (c_out - c_in))  # what the markers add, the busy loop's own CPU left out
        time.sleep(0.05)
    errors, over = [], 0
    for m in results:
        m.result()
        if m.energy_j is None:
            errors.append(None)
            continue
        miss = abs(m.energy_j - POWER_W * m.duration_s)
        errors.append(miss / (POWER_W * m.duration_s) * 100)
        over += m.bound_j is None or miss > m.bound_j + 1e-9
    with open(out_path, "w") as f:
        json.dump({"added_s": added, "cpu_s": cpu, "errors_pct": errors, "over_bound": over}, f)


def scenario():
    m = {"power_mw": POWER_W * 1000, "energy_mj": {"sine_integral": {"base": POWER_W * 1000, "amp": 0, "period_s": 1},
                                                   "update_s": 0.1},
         "util_gpu": 90, "mem_used_bytes": 1 << 30, "mem_total_bytes": 85899345920}
    return {"driver_version": "580.65.06", "call_cost_us": H100_COSTS,
            "devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-window-0", "pci_bus_id": "00000000:18:00.0",
                         "metrics": m}]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--windows", type=int, default=40)
    ap.add_argument("--intervals", default="1s,100ms")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]), args.child[2])
    binary = os.path.join(args.build, "wattscope")
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "scenario.json"), "w") as f:
            json.dump(scenario(), f)
        os.mkdir(os.path.join(tmp, "sys"))
        env = {k: v for k, v in os.environ.items() if k not in ("WATTSCOPE_SOCKET", "CUDA_VISIBLE_DEVICES")}
        env.update(WATTSCOPE_NVML_LIBRARY=os.path.join(args.build, "fakes", "libnvidia-ml-fake.so"),
                   WATTSCOPE_FAKE_NVML_SCENARIO=os.path.join(tmp, "scenario.json"),
                   PYTHONPATH=os.path.join(HERE, "..", "python"), WATTSCOPE_CGROUP_ROOT="none")
        print(f"{'interval':>8} {'mode':>7} {'added p50':>10} {'p90':>9} {'CPU p50':>9} {'pairs/s at 1 %':>15} "
              f"{'median error':>13} {'over bound':>10}")
        for interval in args.intervals.split(","):
            for mode in ("phase", "nowait", "wait"):
                out = os.path.join(tmp, f"{interval}-{mode}.json")
                subprocess.run([binary, "run", "--interval", interval, "--task", "window-cost", "--db", os.path.join(tmp, f"{interval}-{mode}.db"),
                                "--sysfs-root", os.path.join(tmp, "sys"), "--quiet", "--", sys.executable,
                                os.path.abspath(__file__), "--child", mode, str(args.windows), out],
                               env=env, check=True, cwd=tmp, stdout=subprocess.DEVNULL)
                with open(out) as f:
                    r = json.load(f)
                added = sorted(r["added_s"])
                p50, p90 = statistics.median(added), added[int(0.9 * (len(added) - 1))]
                cpu = statistics.median(r["cpu_s"])
                errs = [e for e in r["errors_pct"] if e is not None]
                med = f"{statistics.median(errs):.2f} %" if errs else "–"
                missing = len(r["errors_pct"]) - len(errs)
                over = f"{r['over_bound']}/{len(errs)}" if errs else "–"
                if missing:
                    over += f" ({missing} unmeasured)"
                print(f"{interval:>8} {mode:>7} {p50 * 1e3:>8.2f} ms {p90 * 1e3:>6.2f} ms {cpu * 1e3:>6.3f} ms "
                      f"{0.01 / p50:>15.2f} {med:>13} {over:>10}")


if __name__ == "__main__":
    main()
