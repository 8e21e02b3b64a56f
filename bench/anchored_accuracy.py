#!/usr/bin/python3
"""Issue 33: how true the energy is when a costly counter is read once a second and the instant power field shapes
the energy between its reads, against reading the counter every tick (--max-read-cost 0).

One fake H100 (H100 call costs, bench/overhead.py) whose power follows known steps and ramps, and whose energy
counter is that curve's exact integral. `wattscope run` records it while its child marks six phases of 1.1-2.5 s;
the fake writes its first and last counter readings and its start on the wall clock (WATTSCOPE_FAKE_NVML_ENERGY),
so the run's energy and every phase's are checked against the exact integral over their own times.

    bench/anchored_accuracy.py [--build DIR] [--intervals 10,100,1000] [--counter-update-ms 100]
    bench/anchored_accuracy.py --bound [--intervals 10,100,1000]

--bound runs nothing: it computes, from the curve alone, the worst phase error any monitor can have when it knows
the exact energy at ticks `interval` apart and interpolates a phase's edges between them (every edge placement
tried), and the same with the counter exact only once a second and the trapezoid of the instant power between. A
measured figure below the first row's is luck of where the edges fell; above it, timing skew (reads late on a
loaded machine).

--counter-update-ms 100 makes the fake's counter move only every 100 ms, as an H100's does (docs/nvidia.md): a
reading is then up to that old, at the ticks and at the phase edges alike.
"""
import math
import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from overhead import H100_COSTS  # noqa: E402

# The power curve (W): (label, seconds, from, to); a ramp where from != to. No noise: the truth is exact.
SEGMENTS = [("idle", 2.0, 100, 100), ("rise", 3.0, 100, 600), ("spike", 0.4, 700, 700), ("hold", 2.6, 250, 250),
            ("fall", 4.0, 600, 150), ("tail", 3.0, 120, 120)]
# The child's phases: (name, seconds), after a 0.5 s start
PHASES = [("p1", 1.2), ("p2", 2.5), ("p3", 1.1), ("p4", 1.7), ("p5", 2.5), ("p6", 1.3)]


def energy_at(t):
    """J over [0, t] of the curve: exact, the pieces are straight."""
    e, start = 0.0, 0.0
    for _, secs, a, b in SEGMENTS:
        into = min(max(t - start, 0.0), secs)
        e += 0.5 * (a + (a + (b - a) * into / secs)) * into
        start += secs
    return e


def power_at(t):
    start = 0.0
    for _, secs, a, b in SEGMENTS:
        if t < start + secs:
            return a + (b - a) * (t - start) / secs
        start += secs
    return SEGMENTS[-1][3]


def _tick_energy(t, dt, off, shaped):
    """Energy a monitor knows at the tick at or before t: exact, or (shaped) exact at whole seconds from off and the
    instant power's trapezoid since."""
    tk = off + math.floor((t - off) / dt + 1e-9) * dt
    if not shaped:
        return tk, energy_at(tk)
    anchor = off + math.floor((tk - off) + 1e-9)
    e, x = energy_at(anchor), anchor
    while x + dt <= tk + 1e-9:
        e += 0.5 * (power_at(x) + power_at(x + dt)) * dt
        x += dt
    return tk, e


def energy_seen(t, dt, off, shaped):
    """A phase edge's energy: interpolated between the ticks either side of it (DESIGN's "Energy between ticks")."""
    t0, e0 = _tick_energy(t, dt, off, shaped)
    t1, e1 = _tick_energy(t0 + dt + 1e-9, dt, off, shaped)
    return e0 + (e1 - e0) * (t - t0) / dt


def bound(ms, shaped):
    dt, worst = ms / 1000, 0.0
    for slip in range(40):  # the phases start 0.5-0.9 s in, 10 ms apart
        for j in range(10):  # the ticks' offset within an interval
            t = 0.5 + slip / 100
            for _, secs in PHASES:
                exact = energy_at(t + secs) - energy_at(t)
                seen = energy_seen(t + secs, dt, j * dt / 10, shaped) - energy_seen(t, dt, j * dt / 10, shaped)
                worst = max(worst, abs(seen - exact) / exact)
                t += secs + 0.02
    return worst


def scenario(counter_update_ms=0):
    timeline = {"loop": False, "segments": [{"label": l, "s": s} for l, s, _, _ in SEGMENTS]}
    curve = {l: ([a * 1000, b * 1000] if a != b else a * 1000) for l, _, a, b in SEGMENTS}
    energy = {"timeline_integral": curve}
    if counter_update_ms:  # the counter moves only every N ms, as an H100's does every 100 ms
        energy["update_s"] = counter_update_ms / 1000
    m = {"power_instant_mw": {"timeline": curve}, "energy_mj": energy, "util_gpu": 90,
         "util_mem": 40, "mem_used_bytes": 1 << 30, "mem_total_bytes": 85899345920, "temp_gpu": 50,
         "clock_sm": 1980, "pcie_width": 16, "fan_pct": 30}
    return {"driver_version": "580.65.06", "timeline": timeline, "call_cost_us": H100_COSTS,
            "devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-acc", "metrics": m}]}


def one(build, tmp, ms, every_tick, update_ms=0):
    tag = f"{ms}-{'tick' if every_tick else 'anchored'}"
    db, energy = os.path.join(tmp, tag + ".db"), os.path.join(tmp, tag + ".json")
    w = os.path.join(build, "wattscope")
    script = "sleep 0.5"
    for name, secs in PHASES:
        script += f" && {w} mark begin {name} && sleep {secs} && {w} mark end {name}"
    env = dict(os.environ, WATTSCOPE_NVML_LIBRARY=os.path.join(build, "fakes", "libnvidia-ml-fake.so"),
               WATTSCOPE_FAKE_NVML_SCENARIO=os.path.join(tmp, "scenario.json"), WATTSCOPE_FAKE_NVML_ENERGY=energy)
    argv = [w, "-q", "run", "--interval", f"{ms}ms", "--db", db, "--top-processes", "0"]
    if every_tick:
        argv += ["--max-read-cost", "0"]
    subprocess.run(argv + ["--", "sh", "-c", script], env=env, check=True)
    truth = json.load(open(energy))
    con = sqlite3.connect(db)
    run_j = con.execute("SELECT energy_j FROM gpu_samples ORDER BY tick DESC LIMIT 1").fetchone()[0]
    run_truth = (truth["0"]["last_mj"] - truth["0"]["first_mj"]) / 1000
    t0 = truth["t0_wall_ms"]
    worst = worst_counter = 0.0

    def counter_at(t):  # what the counter answers at t: the curve's energy at its last update
        return energy_at(math.floor(t / (update_ms / 1000)) * (update_ms / 1000)) if update_ms else energy_at(t)

    for name, start_ms, end_ms, e in con.execute("SELECT name, start_ms, end_ms, energy_j FROM phases"):
        exact = energy_at((end_ms - t0) / 1000) - energy_at((start_ms - t0) / 1000)
        worst = max(worst, abs(e - exact) / exact)
        counter = counter_at((end_ms - t0) / 1000) - counter_at((start_ms - t0) / 1000)
        worst_counter = max(worst_counter, abs(e - counter) / counter)
    return abs(run_j - run_truth) / run_truth, worst, worst_counter


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--intervals", default="10,100,1000")
    ap.add_argument("--bound", action="store_true", help="the curve's own bound on a phase's error; runs nothing")
    ap.add_argument("--counter-update-ms", type=int, default=0,
                    help="the fake's energy counter moves only every N ms (an H100's: 100); 0: continuous")
    args = ap.parse_args()
    if args.bound:
        print("interval | worst phase, exact energy every tick | worst phase, counter once a second + trapezoid")
        for ms in (int(x) for x in args.intervals.split(",")):
            print(f"{ms:>5} ms | {100 * bound(ms, False):>34.2f} % | {100 * bound(ms, True):>44.2f} %", flush=True)
        return
    tmp = tempfile.mkdtemp(prefix="wattscope-accuracy-")
    try:
        json.dump(scenario(args.counter_update_ms), open(os.path.join(tmp, "scenario.json"), "w"))
        print("interval | counter read            | run energy vs counter | worst phase (>= 1.1 s) vs exact | "
              "vs the counter at the phase's times")
        for ms in (int(x) for x in args.intervals.split(",")):
            for every_tick in (False, True):
                run_err, phase_err, counter_err = one(args.build, tmp, ms, every_tick, args.counter_update_ms)
                # The counter anchors every 5 s (NvmlSource::kAnchorPeriod), or every tick at longer intervals
                how = "every tick" if every_tick else f"every {max(5000, ms) / 1000:g} s, shaped"
                print(f"{ms:>5} ms | {how:<23} | {100 * run_err:>20.4f} % | {100 * phase_err:>30.3f} % | "
                      f"{100 * counter_err:>10.3f} %", flush=True)
    finally:
        shutil.rmtree(tmp, True)


if __name__ == "__main__":
    main()
