#!/usr/bin/env python3
"""What `wattscope run` adds to a command's start and end: `run -- true` on 8 stand-in GPUs with free calls, and with
an H100's call costs (bench/overhead.py's H100_COSTS: the energy counter 2.8 ms of CPU, PCIe throughput 20 ms a call),
seven times each; the medians and their difference. Needs the release build (scripts/build.sh release)."""
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import overhead  # noqa: E402

BUILD = os.path.join(HERE, "..", "build")


def main():
    medians = {}
    with tempfile.TemporaryDirectory() as tmp:
        for driver_like in (False, True):
            scen = os.path.join(tmp, "scenario.json")
            overhead.scenario(scen, 8, driver_like)
            env = dict(os.environ, WATTSCOPE_NVML_LIBRARY=os.path.join(BUILD, "fakes", "libnvidia-ml-fake.so"),
                       WATTSCOPE_FAKE_NVML_SCENARIO=scen, WATTSCOPE_CGROUP_ROOT="none")
            env.pop("CUDA_VISIBLE_DEVICES", None)
            times = []
            for _ in range(7):
                t = time.monotonic()
                subprocess.run([os.path.join(BUILD, "wattscope"), "-q", "run", "--db", os.path.join(tmp, "r.db"), "--",
                                "true"], env=env, check=True)
                times.append((time.monotonic() - t) * 1000)
            what = "H100 call costs" if driver_like else "free calls"
            medians[what] = statistics.median(times)
            print(f"run -- true, 8 GPUs, {what}: median {medians[what]:.0f} ms ({', '.join(f'{x:.0f}' for x in times)})")
    print(f"H100 costs add {medians['H100 call costs'] - medians['free calls']:.0f} ms to a command (goal: under 50)")


if __name__ == "__main__":
    main()
