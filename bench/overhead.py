#!/usr/bin/python3
"""What `wattscope record` costs the machine it watches, against the floor (bench/nvml_floor.c: the same NVML calls,
nothing else) and a Python/ctypes monitor (bench/pymon.py), all three on the same 8 simulated GPUs at the same time.

"wattscope" is `record` as a user runs it; "ws-devices" the same with --top-processes 0 (no process tracking), which
does what the floor does. For each interval (1 s, 100 ms, 10 ms) and round, all four start together, once for a long and once for a short
duration (in random order), and each is timed by the kernel (wait4: user + system CPU, peak RSS, voluntary context
switches, which count wake-ups). Two figures per program:
  - whole run: CPU over the long run, start-up and shut-down included, as % of one core;
  - per tick: (CPU long - CPU short) / (ticks long - ticks short), the steady cost of one more tick, start-up cancelled.
Ratios are against the floor in the same round; the median over rounds is printed.

    bench/overhead.py [--build DIR] [--rounds N] [--scale X] [--driver-like] [--gpus N] [--real] [--python PATH]

--driver-like makes the fake NVML spend what each call took on a real H100 (H100_COSTS, measured with
bench/nvml_call_cost.py: 2.8 ms of CPU for the energy counter, ~1 us for most others, 20 ms for PCIe throughput),
so the ratio is against a driver-like floor. --real uses the machine's own NVML and GPUs instead of the
fake (bench/real_gpu.sh, on a GPU machine); --python names the interpreter that has psutil. --scale multiplies the durations (default 1: 60/15 s at 1 s,
30/8 s at 100 ms, 20/5 s at 10 ms).
"""
import argparse
import atexit
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTERVALS = [(1000, 60, 15), (100, 30, 8), (10, 20, 5)]  # ms, long s, short s


# What each GPU reports, by load: "busy" (a training step at 312 W of 700 W, 97 % utilisation) and "idle" (69 W,
# nothing running, clocks down, the idle clock-event bit set). bench/idle_sampling.py and bench/memory.py use these too.
LOADS = {
    "busy": {"power_instant_mw": 312000, "power_avg_mw": 300000, "energy_mj": {"linear": [1000000, 300]},
             "util_gpu": 97, "util_mem": 41, "mem_used_bytes": 75161927680, "temp_gpu": 64, "temp_mem": 71,
             "clock_sm": 1980, "clock_gfx": 1980, "pcie_tx_kbs": 1000, "pcie_rx_kbs": 2000, "clock_events": 0},
    "idle": {"power_instant_mw": 69000, "power_avg_mw": 70000, "energy_mj": {"linear": [1000000, 70]},
             "util_gpu": 0, "util_mem": 0, "mem_used_bytes": 536870912, "temp_gpu": 31, "temp_mem": 35,
             "clock_sm": 345, "clock_gfx": 345, "pcie_tx_kbs": 10, "pcie_rx_kbs": 10, "clock_events": 1},
}


# What each NVML call costs on a real GPU: bench/nvml_call_cost.py on an NVIDIA H100 80GB HBM3, driver 580.159.04,
# in a Firecracker VM (2026-11-26), medians of 300 calls. The energy counter is the dearest by far (2.8 ms wall,
# 2.8-3.8 ms CPU); power, utilisation, temperature, clocks and the other fields answer in about 1 us (the driver
# caches them); PCIe throughput waits 20 ms. A number under 1000 is spent on the CPU; {"cpu", "sleep"} both.
H100_COSTS = {
    "default": 1,
    "nvmlDeviceGetTotalEnergyConsumption": {"cpu": 2800},
    "nvmlDeviceGetMemoryInfo_v2": 5,
    "nvmlDeviceGetCurrPcieLinkWidth": 25,
    "nvmlDeviceGetFanSpeed": 136,  # issue 33: measured on the same H100 (docs/nvidia.md)
    "nvmlDeviceGetComputeRunningProcesses_v3": 8,
    "nvmlDeviceGetGraphicsRunningProcesses_v3": 8,
    # The process scan's utilisation samples: 2.7 ms of CPU with no process on the GPU, 1.5 ms with one (measured
    # 2026-11-26, third session); the count-only call before it 5 us.
    "nvmlDeviceGetProcessesUtilizationInfo (samples)": {"cpu": 2000},
    "nvmlDeviceGetProcessUtilization (samples)": {"cpu": 2000},
    "nvmlDeviceGetPcieThroughput": {"cpu": 650, "sleep": 20000},
}


def scenario(path, gpus, driver_like, load="busy"):
    """Writes a fake NVML scenario of `gpus` H100s at `load` ("busy" or "idle", see LOADS); --driver-like call costs."""
    if load not in LOADS:
        raise ValueError(f"load must be one of {', '.join(LOADS)}, not {load!r}")
    devs = []
    for i in range(gpus):
        metrics = {**LOADS[load], "mem_total_bytes": 85899345920, "clock_mem": 2619, "pcie_width": 16,
                   "pcie_width_max": 16, "fan_pct": 0, "pstate": 0, "power_limit_mw": 700000, "util_enc": 0,
                   "util_dec": 0}
        devs.append({"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
                     "metrics": metrics})
    s = {"devices": devs}
    if driver_like:
        s["call_cost_us"] = H100_COSTS
    with open(path, "w") as f:
        json.dump(s, f)


def watch(pid, out):
    """Polls /proc/PID/status every 0.2 s until the process is gone: its peak RSS (VmHWM) and thread count. wait4's
    ru_maxrss cannot serve: Linux carries the forking parent's high-water mark across exec, so every child of this
    Python harness would report at least the harness's own RSS."""
    while True:
        try:
            with open(f"/proc/{pid}/status") as f:
                st = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            return
        if "VmHWM" not in st:  # a zombie: exited, not yet reaped
            return
        out["hwm_kib"] = max(out.get("hwm_kib", 0), int(st["VmHWM"].split()[0]))
        out["threads"] = max(out.get("threads", 0), int(st["Threads"]))
        time.sleep(0.2)


def run_timed(argv, env, result, key):
    """Runs argv to its end; stores wait4's CPU figures, and the peak RSS and threads watched in /proc."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = {}
    t = threading.Thread(target=watch, args=(p.pid, seen), daemon=True)
    t.start()
    _, status, ru = os.wait4(p.pid, 0)
    t.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace")
    if p.returncode != 0:  # said here: a SystemExit in this thread would pass silently
        print(f"{argv[0]} failed ({p.returncode}): {err}", file=sys.stderr, flush=True)
        os._exit(1)
    result[key] = {"cpu_s": ru.ru_utime + ru.ru_stime, "rss_kib": seen.get("hwm_kib", 0), "nvcsw": ru.ru_nvcsw,
                   "threads": seen.get("threads")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--driver-like", action="store_true")
    ap.add_argument("--intervals", default="1000,100,10", help="milliseconds, comma-separated")
    ap.add_argument("--real", action="store_true", help="the machine's NVML and GPUs, not the fake")
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter for bench/pymon.py (needs psutil)")
    ap.add_argument("--programs", default="wattscope,ws-devices,floor,python",
                    help="which to run, comma-separated (the floor always runs: the ratios are against it)")
    args = ap.parse_args()
    wanted = {int(x) for x in args.intervals.split(",")}
    tmp = tempfile.mkdtemp(prefix="wattscope-overhead-")
    atexit.register(shutil.rmtree, tmp, True)  # its databases and CSV files
    scen = os.path.join(tmp, "scenario.json")
    if args.real:
        env = {k: v for k, v in os.environ.items() if k not in ("WATTSCOPE_NVML_LIBRARY", "WATTSCOPE_FAKE_NVML_SCENARIO")}
    else:
        scenario(scen, args.gpus, args.driver_like)
        env = dict(os.environ, WATTSCOPE_NVML_LIBRARY=os.path.join(args.build, "fakes", "libnvidia-ml-fake.so"),
                   WATTSCOPE_FAKE_NVML_SCENARIO=scen)
    programs = {
        "wattscope": lambda ms, s, tag: [os.path.join(args.build, "wattscope"), "-q", "record", "--task", "overhead",
                                         "--interval", f"{ms}ms", "--duration", f"{s}s", "--db",
                                         os.path.join(tmp, f"{tag}.db")],
        # The same without process tracking (issue 13's scan of the machine's processes, at most once a second): what
        # the device sampling itself costs, which is what the floor does.
        "ws-devices": lambda ms, s, tag: [os.path.join(args.build, "wattscope"), "-q", "record", "--task", "overhead",
                                          "--interval", f"{ms}ms", "--duration", f"{s}s", "--top-processes", "0",
                                          "--db", os.path.join(tmp, f"{tag}.db")],
        "floor": lambda ms, s, tag: [os.path.join(args.build, "bench", "nvml_floor"), str(ms), str(s)],
        "python": lambda ms, s, tag: [args.python, os.path.join(ROOT, "bench", "pymon.py"), str(ms), str(s),
                                      os.path.join(tmp, f"{tag}.csv")],
    }
    keep = set(args.programs.split(",")) | {"floor"}
    programs = {name: argv for name, argv in programs.items() if name in keep}
    gpus = "the machine's own GPUs through its NVML" if args.real else \
        f"{args.gpus} simulated GPUs{' with driver-like call costs' if args.driver_like else ''}"
    print(f"{gpus}; "
          f"{args.rounds} rounds; medians. CPU as % of one core.")
    print(f"{'interval':>8} {'program':>10} | {'whole run':>10} {'÷ floor':>8} | {'per tick':>10} {'÷ floor':>8} | "
          f"{'peak RSS':>9} {'threads':>7} {'wake-ups/tick':>13}")
    for ms, long_s, short_s in INTERVALS:
        if ms not in wanted:
            continue
        long_s, short_s = long_s * args.scale, short_s * args.scale
        rows = {name: [] for name in programs}
        for r in range(args.rounds):
            figures = {}
            for length in random.sample(["long", "short"], 2):
                secs = long_s if length == "long" else short_s
                threads = []
                for name, argv in programs.items():
                    tag = f"{name}-{ms}-{r}-{length}"
                    threads.append(threading.Thread(target=run_timed,
                                                    args=(argv(ms, secs, tag), env, figures, (name, length))))
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            ticks_long, ticks_short = long_s * 1000 / ms, short_s * 1000 / ms
            for name in programs:
                lo, sh = figures[(name, "long")], figures[(name, "short")]
                rows[name].append({
                    "whole_pct": 100 * lo["cpu_s"] / long_s,
                    "tick_us": 1e6 * max(lo["cpu_s"] - sh["cpu_s"], 0) / (ticks_long - ticks_short),
                    "rss_mib": lo["rss_kib"] / 1024, "threads": lo["threads"],
                    "wakeups": (lo["nvcsw"] - sh["nvcsw"]) / (ticks_long - ticks_short)})
        floor = rows["floor"]
        for name in programs:
            rs = rows[name]
            whole = statistics.median(x["whole_pct"] for x in rs)
            tick = statistics.median(x["tick_us"] for x in rs)
            whole_ratio = statistics.median(x["whole_pct"] / f["whole_pct"] for x, f in zip(rs, floor))
            tick_ratio = statistics.median(x["tick_us"] / max(f["tick_us"], 1e-3) for x, f in zip(rs, floor))
            label = f"{ms} ms" if ms < 1000 else f"{ms // 1000} s"
            print(f"{label:>8} {name:>10} | {whole:9.3f}% {whole_ratio:7.1f}x | {tick:8.1f}us {tick_ratio:7.1f}x | "
                  f"{statistics.median(x['rss_mib'] for x in rs):7.1f}Mi {rs[0]['threads'] or '-':>7} "
                  f"{statistics.median(x['wakeups'] for x in rs):13.1f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
