#!/usr/bin/python3
"""How true a phase's energy is on an ordinary machine: the energy wattscope stores for each phase against the exact
energy the GPUs used between the program's own edges, per interval, GPU count and CPU load.

The stand-in is the fake NVML with an H100's call costs (bench/overhead.py H100_COSTS: 2.8 ms of CPU per energy
counter read), an energy counter that moves every 100 ms as an H100's does (the exact integral of the power at its
last update), and a power curve on a 37 ms grid (--profile): `steps37`, a seeded pseudo-random level of 100-700 W
every 37 ms; `sawtooth`, 100 W rising to 700 W over 1.48 s, then down at once; `square`, 650 W and 150 W for 0.37 s
each. Each GPU gets its own levels (steps37) or its own shift of the wave, so the GPUs' errors do not simply add.

Under `wattscope run` a child Python program (this file, --child) imports the wattscope helper (python/ of this
repository) and marks 18 phases of 0.3-3 s at seeded random times with `wattscope.phase(...)`, taking its own
time.monotonic() just inside each begin and end. The fake writes its start on CLOCK_MONOTONIC (t0_monotonic_s in
WATTSCOPE_FAKE_NVML_ENERGY), so the truth of a phase is the curve's exact integral between the program's own edges,
summed over the GPUs; the stored figure is the GPUs' part of the phase's device_energy_j in the run's wattscope.db
(the CPU's, where RAPL is readable, left out). Marker delivery, a late tick on a busy CPU and the counter's 100 ms
steps all count as error, as they do for a user.

    bench/phase_truth.py [--build DIR] [--intervals 10,100,1000] [--gpus 1,8] [--busy | --quiet]
                         [--profile steps37|sawtooth|square] [--seed N] [--phases N] [--hang] [--tail S]
                         [--quick] [--json OUT]

Cases are every interval x GPU count x load: `quiet`, or `busy` with two `while True: pass` processes beside the run.
--hang makes GPU 0's reads hang twice: 3 s starting 0.7 s into a phase stretched to 4.5 s for it, and 5 s starting
0.5 s before another phase's begin (placed on the fake's clock from the child's schedule; the child starts about
the probe's and nvmlInit's time later than planned, so "0.7 s" is give or take ~0.1 s). --quick is a smoke run:
100 ms, 1 GPU, 8 phases (under a minute with both loads). The full default (12 cases) takes about 7 minutes.
The child exits as soon as its last phase ends, as a script does; --tail S makes it wait S seconds first, which
tells the run's end apart from the rest where the last phase is the worst.

How to read a row: phases of 1 s or more (`>= 1 s`) by count, median and worst |error| in %, how many are over 1 %,
and `unflagged`: those over 1 % whose |error| in J is not within the stored energy_bound_j (NULL counts as not
within) -- the goal is 0 there: every phase of 1 s or more within 1 % or flagged by a bound that holds. Shorter
phases (`< 1 s`): count, median and worst. `edges` counts the stored start_edge and end_edge values over the case's
phases (r: reading, i: interpolated, n: none, -: NULL); `energy_bound_j` how many phases carry one and how many of
those the true error broke. `load` is the machine's 1-minute load average when the case began: other work on a
shared machine loads the `quiet` cases too. --json writes every phase (its edges on the fake's clock, the truth and
the stored figure per GPU) and each case's summary.
"""
import argparse
import atexit
import json
import math
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from overhead import H100_COSTS  # noqa: E402

SEG_S = 0.037  # the power curve's grid: a new level (or ramp piece) every 37 ms
COUNTER_UPDATE_S = 0.1  # an H100's energy counter moves every 100 ms (docs/nvidia.md)
STEPS_LOOP = 600  # steps37 repeats after 600 levels (22.2 s): the fake integrates the loop once per counter read
LEAD_S = 1.0  # the child's schedule starts this long after wattscope is started (nvmlInit, the first ticks)
BUSY_LOOPS = 2
HANG_INSIDE, HANG_EDGE = 5, 11  # --hang: the phase the 3 s hang falls inside, the phase whose begin the 5 s one spans


def profile(kind, gpu, seed):
    """GPU `gpu`'s power curve: one (from_w, to_w) per SEG_S, straight between, looping."""
    if kind == "steps37":
        rng = random.Random(f"{seed}-power-{gpu}")
        return [(w, w) for w in (round(rng.uniform(100, 700)) for _ in range(STEPS_LOOP))]
    if kind == "sawtooth":  # 40 pieces of a ramp, each GPU 3 pieces further on
        n = 40
        return [(100 + 600 * ((i + 3 * gpu) % n) / n, 100 + 600 * ((i + 3 * gpu) % n + 1) / n) for i in range(n)]
    if kind == "square":  # 10 pieces high, 10 low, each GPU 3 pieces further on
        n = 20
        return [(650, 650) if (i + 3 * gpu) % n < n // 2 else (150, 150) for i in range(n)]
    raise ValueError(f"unknown profile {kind!r}")


class Curve:
    """The exact energy (J) of a looping piecewise-linear curve over [0, t], as the fake's timeline_integral has it."""

    def __init__(self, segs):
        self.segs = segs
        self.cum = [0.0]
        for a, b in segs:
            self.cum.append(self.cum[-1] + 0.5 * (a + b) * SEG_S)
        self.period = len(segs) * SEG_S

    def energy_at(self, t):
        if t <= 0:
            return 0.0
        wraps = math.floor(t / self.period)
        rest = t - wraps * self.period
        i = min(int(rest / SEG_S), len(self.segs) - 1)
        into = rest - i * SEG_S
        a, b = self.segs[i]
        return wraps * self.cum[-1] + self.cum[i] + 0.5 * (a + (a + (b - a) * into / SEG_S)) * into


def schedule(n, seed, hang):
    """The child's phases: [name, start_s, seconds] from the child's origin; a seeded gap of 0.05-0.4 s before each
    (0.5 s before the first) and 0.3-3 s each. With --hang one phase is stretched to hold the 3 s hang."""
    rng = random.Random(f"{seed}-phases")
    out, t = [], 0.5
    for i in range(n):
        secs = rng.uniform(0.3, 3.0)
        if hang and i == HANG_INSIDE:
            secs = 4.5
        out.append([f"p{i:02d}", round(t, 4), round(secs, 4)])
        t += secs + rng.uniform(0.05, 0.4)
    return out


def scenario(kind, gpus, seed, hangs):
    segs = [profile(kind, g, seed) for g in range(gpus)]
    timeline = {"loop": True, "segments": [{"label": f"s{i}", "s": SEG_S} for i in range(len(segs[0]))]}
    devices = []
    for g, curve in enumerate(segs):
        mw = {f"s{i}": (a * 1000 if a == b else [a * 1000, b * 1000]) for i, (a, b) in enumerate(curve)}
        m = {"power_instant_mw": {"timeline": mw},
             "energy_mj": {"timeline_integral": mw, "update_s": COUNTER_UPDATE_S}, "util_gpu": 90, "util_mem": 40,
             "mem_used_bytes": 1 << 30, "mem_total_bytes": 85899345920, "temp_gpu": 50, "clock_sm": 1980,
             "pcie_width": 16, "fan_pct": 30}
        d = {"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-truth-{g}", "pci_bus_id": f"00000000:{0x18 + g:02X}:00.0",
             "metrics": m}
        if g == 0 and hangs:
            d["hang"] = hangs
        devices.append(d)
    return {"driver_version": "580.65.06", "timeline": timeline, "call_cost_us": H100_COSTS, "devices": devices}, \
        [Curve(s) for s in segs]


def child(sched_path, out_path):
    """Runs under wattscope: marks the schedule's phases, writes its own edges (time.monotonic())."""
    import wattscope  # from PYTHONPATH: this repository's python/

    with open(sched_path) as f:
        s = json.load(f)
    origin, edges = s["origin"], []
    for name, start, secs in s["phases"]:
        time.sleep(max(0.0, origin + start - time.monotonic()))
        with wattscope.phase(name):
            begin = time.monotonic()
            time.sleep(max(0.0, begin + secs - time.monotonic()))
            end = time.monotonic()
        edges.append([name, begin, end])
    time.sleep(s["tail_s"])
    with open(out_path, "w") as f:
        json.dump(edges, f)


def stored_phases(db):
    con = sqlite3.connect(db)
    have = {r[1] for r in con.execute("PRAGMA table_info(phases)")}
    cols = ["name", "device_energy_j"] + [c for c in ("start_edge", "end_edge", "energy_bound_j") if c in have]
    rows = {}
    for r in con.execute(f"SELECT {', '.join(cols)} FROM phases"):
        d = dict(zip(cols, r))
        dev = json.loads(d["device_energy_j"] or "{}")
        gpu = [v for k, v in dev.items() if k.startswith("gpu") and v is not None]
        d["gpu_j"] = sum(gpu) if gpu else None
        d["devices"] = {k: v for k, v in dev.items() if k.startswith("gpu")}
        rows[d["name"]] = d
    con.close()
    return rows


def run_case(args, tmp, ms, gpus, load, sched):
    tag = f"{ms}ms-{gpus}gpu-{load}"
    d = os.path.join(tmp, tag)
    os.makedirs(d)
    paths = {k: os.path.join(d, k) for k in ("scenario.json", "schedule.json", "edges.json", "energy.json",
                                            "wattscope.db")}
    hangs = []
    if args.hang:  # placed on the fake's clock from the schedule; the child's origin is LEAD_S after the launch
        inside, edge = sched[HANG_INSIDE], sched[HANG_EDGE]
        hangs = [{"at_s": LEAD_S + inside[1] + 0.7, "ms": 3000}, {"at_s": LEAD_S + edge[1] - 0.5, "ms": 5000}]
    scen, curves = scenario(args.profile, gpus, args.seed, hangs)
    with open(paths["scenario.json"], "w") as f:
        json.dump(scen, f)
    w = os.path.join(args.build, "wattscope")
    env = dict(os.environ, WATTSCOPE_NVML_LIBRARY=os.path.join(args.build, "fakes", "libnvidia-ml-fake.so"),
               WATTSCOPE_FAKE_NVML_SCENARIO=paths["scenario.json"], WATTSCOPE_FAKE_NVML_ENERGY=paths["energy.json"],
               PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    busy = []
    load1 = os.getloadavg()[0]
    try:
        if load == "busy":
            busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(BUSY_LOOPS)]
            time.sleep(0.2)
        with open(paths["schedule.json"], "w") as f:
            json.dump({"origin": time.monotonic() + LEAD_S, "phases": sched, "tail_s": args.tail}, f)
        argv = [w, "-q", "run", "--interval", f"{ms}ms", "--db", paths["wattscope.db"], "--top-processes", "0", "--",
                sys.executable, os.path.abspath(__file__), "--child", paths["schedule.json"], paths["edges.json"]]
        p = subprocess.run(argv, env=env, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            sys.exit(f"{tag}: wattscope run exited {p.returncode}: {p.stderr}")
    finally:
        for b in busy:
            b.kill()
            b.wait()
    with open(paths["energy.json"]) as f:
        t0 = json.load(f)["t0_monotonic_s"]
    with open(paths["edges.json"]) as f:
        edges = json.load(f)
    stored = stored_phases(paths["wattscope.db"])
    phases = []
    for name, begin, end in edges:
        if begin < t0:
            print(f"{tag}: {name} began before nvmlInit; its truth misses the time before", file=sys.stderr)
        by_gpu = {f"gpu{g}": c.energy_at(end - t0) - c.energy_at(begin - t0) for g, c in enumerate(curves)}
        truth = sum(by_gpu.values())
        s = stored.get(name, {})
        got = s.get("gpu_j")
        err = None if got is None else got - truth
        phases.append({"name": name, "seconds": end - begin, "begin_s": begin - t0, "end_s": end - t0,
                       "truth_j": truth, "stored_j": got, "error_j": err,
                       "error_pct": None if err is None else 100 * err / truth,
                       "start_edge": s.get("start_edge"), "end_edge": s.get("end_edge"),
                       "energy_bound_j": s.get("energy_bound_j"), "device_truth_j": by_gpu,
                       "device_stored_j": s.get("devices")})
    case = {"interval_ms": ms, "gpus": gpus, "load": load, "profile": args.profile, "hang": bool(hangs),
            "hangs_at_s": [h["at_s"] for h in hangs], "load1_before": load1, "phases": phases}
    case["summary"] = summarise(phases)
    return case


def summarise(phases):
    def pct(ps):
        errs = sorted(abs(p["error_pct"]) for p in ps if p["error_pct"] is not None)
        return {"n": len(ps), "median_pct": statistics.median(errs) if errs else None,
                "worst_pct": errs[-1] if errs else None}

    long = [p for p in phases if p["seconds"] >= 1.0]
    short = [p for p in phases if p["seconds"] < 1.0]
    over = [p for p in long if p["error_pct"] is None or abs(p["error_pct"]) > 1.0]
    unflagged = [p for p in over if p["error_j"] is None or p["energy_bound_j"] is None
                 or abs(p["error_j"]) > p["energy_bound_j"]]
    bounded = [p for p in phases if p["energy_bound_j"] is not None and p["error_j"] is not None]
    edges = {}
    for p in phases:
        for e in (p["start_edge"], p["end_edge"]):
            key = {"reading": "r", "interpolated": "i", "none": "n"}.get(e, "-" if not e else e)
            edges[key] = edges.get(key, 0) + 1
    return {"long": {**pct(long), "over_1pct": len(over), "unflagged": len(unflagged)}, "short": pct(short),
            "missing": sum(p["stored_j"] is None for p in phases), "edges": edges, "bounds_set": len(bounded),
            "bounds_broken": sum(abs(p["error_j"]) > p["energy_bound_j"] for p in bounded)}


def fmt(x, width=6):
    return f"{x:{width}.2f}" if x is not None else " " * (width - 1) + "-"


def row(case):
    s, lg, sh = case["summary"], case["summary"]["long"], case["summary"]["short"]
    label = f"{case['interval_ms']:>4} ms {case['gpus']} GPU{'s' if case['gpus'] > 1 else ' '} {case['load']:<5}"
    edges = " ".join(f"{k}{v}" for k, v in sorted(s["edges"].items()))
    miss = f" ({s['missing']} not stored)" if s["missing"] else ""
    return (f"{label} {case['load1_before']:5.2f} | {lg['n']:>3} {fmt(lg['median_pct'])} {fmt(lg['worst_pct'])} "
            f"{lg['over_1pct']:>4} {lg['unflagged']:>9} | {sh['n']:>3} {fmt(sh['median_pct'])} {fmt(sh['worst_pct'])}"
            f" | {edges:<14} | {s['bounds_set']:>3} set, {s['bounds_broken']} broken{miss}")


HEADER = ("case                  load |  >= 1 s: n median% worst%  >1% unflagged |  < 1 s: n median% worst% | "
          "edges          | energy_bound_j")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--intervals", help="milliseconds, comma-separated (default 10,100,1000)")
    ap.add_argument("--gpus", help="GPU counts, comma-separated (default 1,8)")
    loads = ap.add_mutually_exclusive_group()
    loads.add_argument("--busy", action="store_true", help="only with two busy loops beside the run")
    loads.add_argument("--quiet", action="store_true", help="only without them")
    ap.add_argument("--profile", choices=("steps37", "sawtooth", "square"), default="steps37")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--phases", type=int, help="default 18")
    ap.add_argument("--hang", action="store_true", help="GPU 0's reads hang 3 s inside a phase and 5 s at an edge")
    ap.add_argument("--tail", type=float, default=0.0,
                    help="seconds the child waits after its last phase before it exits (default 0: at once)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 100 ms, 1 GPU, 8 phases unless given")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (each case's wattscope.db)")
    ap.add_argument("--json", help="write every phase's figures and each case's summary here")
    ap.add_argument("--child", nargs=2, metavar=("SCHEDULE", "EDGES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child)
    args.intervals = args.intervals or ("100" if args.quick else "10,100,1000")
    args.gpus = args.gpus or ("1" if args.quick else "1,8")
    args.phases = args.phases or (8 if args.quick else 18)
    if args.hang and args.phases <= HANG_EDGE:
        sys.exit(f"--hang needs at least {HANG_EDGE + 1} phases")
    intervals = [int(x) for x in args.intervals.split(",")]
    gpu_counts = [int(x) for x in args.gpus.split(",")]
    load_list = ["busy"] if args.busy else ["quiet"] if args.quiet else ["quiet", "busy"]
    sched = schedule(args.phases, args.seed, args.hang)
    tmp = tempfile.mkdtemp(prefix="wattscope-phase-truth-")
    if args.keep:
        print(f"keeping each case's scenario, schedule, edges and wattscope.db in {tmp}")
    else:
        atexit.register(shutil.rmtree, tmp, True)
    print(f"profile {args.profile}, seed {args.seed}, {args.phases} phases "
          f"({sum(p[2] >= 1 for p in sched)} of 1 s or more), H100 call costs, counter every "
          f"{COUNTER_UPDATE_S * 1000:.0f} ms{', GPU 0 hangs 3 s + 5 s' if args.hang else ''}; "
          f"{os.cpu_count()} CPUs; |error| vs the exact energy between the program's own edges")
    print(HEADER, flush=True)
    cases = []
    for load in load_list:
        for gpus in gpu_counts:
            for ms in intervals:
                cases.append(run_case(args, tmp, ms, gpus, load, sched))
                print(row(cases[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"profile": args.profile, "seed": args.seed, "schedule": sched, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
