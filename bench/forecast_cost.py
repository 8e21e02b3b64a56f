#!/usr/bin/env python3
"""The whole cost of forecasting and anomaly detection against record's own CPU (docs/forecasts.md).

Runs `wattscope record` on 8 stand-in H100s with the call costs a real H100 driver has (bench/overhead.py's
scenario) at 1 s and 100 ms, takes its CPU per second of run from wait4, then runs
build/bench/wattscope_bench_forecast_alarms with those figures: its last table is the anomaly monitor's and the live
forecaster's cost per second of run (8 GPUs, the same classes record runs) as a share of record's CPU.

    bench/forecast_cost.py [--build build] [--seconds 30] [--quick]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from overhead import scenario  # noqa: E402  (the H100 call costs, measured)


def record_cpu_ms_per_s(build, tmp, interval_ms, seconds):
    scen = os.path.join(tmp, "scenario.json")
    scenario(scen, 8, True)
    env = dict(os.environ, WATTSCOPE_NVML_LIBRARY=os.path.join(build, "fakes", "libnvidia-ml-fake.so"),
               WATTSCOPE_FAKE_NVML_SCENARIO=scen)
    argv = [os.path.join(build, "wattscope"), "-q", "record", "--task", "forecast-cost", "--interval",
            f"{interval_ms}ms", "--duration", f"{seconds}s", "--db", os.path.join(tmp, f"r{interval_ms}.db")]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"record failed: {p.stderr.read().decode(errors='replace')}")
    return (ru.ru_utime + ru.ru_stime) * 1000 / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--quick", action="store_true", help="15 min of each healthy workload instead of an hour")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="wattscope-forecast-cost-")
    try:
        cpu = {ms: record_cpu_ms_per_s(args.build, tmp, ms, args.seconds) for ms in (1000, 100)}
    finally:
        shutil.rmtree(tmp, True)
    for ms, v in cpu.items():
        print(f"record, 8 stand-in H100s with driver-like call costs, {ms} ms: {v:.1f} ms of CPU per second of run")
    cmd = [os.path.join(args.build, "bench", "wattscope_bench_forecast_alarms")]
    cmd += [a for ms, v in cpu.items() for a in ("--record-cpu", f"{ms}:{v:.3f}")]
    if args.quick:
        cmd.append("--quick")
    sys.exit(subprocess.call(cmd, stderr=subprocess.DEVNULL))


if __name__ == "__main__":
    main()
