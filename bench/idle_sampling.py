#!/usr/bin/python3
"""What adaptive sampling (--idle-interval, issue 18) saves on an idle machine, measured in one run:

  1. storage per idle day: `record` of 8 idle fake GPUs on a quiet fixture /proc, with and without
     --idle-interval, at a compressed time scale (--interval 20ms for 1 s, --idle-interval 200ms for 10 s,
     --idle-after 200ms): rows per table and SQLite bytes per grid slot, from the difference between a long and a
     short run (so the file's fixed part cancels), scaled to the 86,400 slots of a day at 1 s;
  2. CPU at idle: the same 8 GPUs at the real scale (--interval 1s, --idle-interval 10s, --idle-after 5s), user +
     system CPU of the wattscope process (wait4) over --cpu-seconds of wall time, with and without.

Both print the ratio with / without. The CPU here is quiet because /proc is a fixture whose /proc/stat a thread of this
script advances (idle jiffies only): on a real idle host the same happens on its own. Process tracking is off
(--top-processes 0) in both arms, so the figures are the sampler's and the stores'; --driver-like makes each fake NVML
call cost what it took on a real H100 (bench/overhead.py, H100_COSTS).

    bench/idle_sampling.py [--build DIR] [--cpu-seconds N] [--storage-seconds N] [--driver-like]
"""
import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from overhead import scenario  # noqa: E402  (the same 8 simulated H100s as overhead.py, idle)

TABLES = ["gpu_samples", "cpu_samples", "cpu_core_samples", "cpu_power_samples", "events"]


class QuietProc:
    """A /proc with meminfo and a stat whose idle time advances every 10 ms (16 CPUs, busy time fixed)."""

    def __init__(self, d, cpus=16):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "meminfo"), "w") as f:
            f.write("MemTotal:       131072000 kB\nMemAvailable:   120000000 kB\n")
        self.path, self.cpus, self.stop = os.path.join(d, "stat"), cpus, False
        self.write(0)
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def write(self, n):
        lines = [f"cpu  100 0 100 {1000 + self.cpus * n:015d} 0 0 0 0 0 0"]
        lines += [f"cpu{i} 5 0 5 {100 + n:015d} 0 0 0 0 0 0" for i in range(self.cpus)]
        data = ("\n".join(lines) + "\nintr 0\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.pwrite(fd, data, 0)  # in place, fixed width: the reader's open fd sees it whole
        os.close(fd)

    def run(self):
        n = 0
        while not self.stop:
            n += 1
            self.write(n)
            time.sleep(0.01)

    def close(self):
        self.stop = True
        self.t.join()


def record(build, work, tag, seconds, interval, adaptive, env):
    db = os.path.join(work, f"{tag}.db")
    args = [os.path.join(build, "wattscope"), "-q", "record", "--db", db, "--duration", f"{seconds}s",
            "--interval", interval, "--top-processes", "0", "--procfs-root", os.path.join(work, "proc"),
            "--sysfs-root", os.path.join(work, "sys")]
    args += adaptive
    p = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"wattscope record failed: {err}")
    con = sqlite3.connect(db)
    rows = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    ticks = con.execute("SELECT max(tick) + 1 FROM cpu_samples").fetchone()[0]
    con.close()
    return {"rows": rows, "bytes": os.path.getsize(db), "ticks": ticks, "cpu_s": ru.ru_utime + ru.ru_stime}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cpu-seconds", type=float, default=60)
    ap.add_argument("--storage-seconds", type=float, default=20)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--driver-like", action="store_true")
    a = ap.parse_args()
    fake = os.path.join(a.build, "fakes", "libnvidia-ml-fake.so")
    if not os.path.exists(fake):
        sys.exit(f"no fake NVML at {fake}: build the fake_nvml target")
    work = tempfile.mkdtemp(prefix="ws-idle-bench-")
    try:
        os.makedirs(os.path.join(work, "sys"))
        scenario(os.path.join(work, "scenario.json"), a.gpus, a.driver_like, load="idle")
        env = dict(os.environ, WATTSCOPE_NVML_LIBRARY=fake, WATTSCOPE_FAKE_NVML_SCENARIO=os.path.join(work, "scenario.json"))
        env.pop("CUDA_VISIBLE_DEVICES", None)
        proc = QuietProc(os.path.join(work, "proc"))

        # 1. Storage: 20 ms stands for 1 s, 200 ms for 10 s.
        fast = ["--idle-interval", "200ms", "--idle-after", "200ms"]
        short_s, long_s = a.storage_seconds / 4, a.storage_seconds
        per_day = {}
        for name, adaptive in (("without", []), ("with", fast)):
            s = record(a.build, work, f"st-{name}-short", short_s, "20ms", adaptive, env)
            l = record(a.build, work, f"st-{name}-long", long_s, "20ms", adaptive, env)
            slots = l["ticks"] - s["ticks"]
            scale = 86400 / slots
            per_day[name] = {"rows": {t: (l["rows"][t] - s["rows"][t]) * scale for t in TABLES},
                             "bytes": (l["bytes"] - s["bytes"]) * scale}
            per_day[name]["rows_total"] = sum(per_day[name]["rows"].values())
        print(f"storage per idle day ({a.gpus} fake GPUs, 16 CPUs; 1 s interval, 10 s idle interval; SQLite; scaled "
              f"from {long_s:g} s and {short_s:g} s runs at 50x):")
        for name in ("without", "with"):
            d = per_day[name]
            print(f"  {name:>7} --idle-interval: {d['rows_total']:>12,.0f} rows ({', '.join(f'{t} {v:,.0f}' for t, v in d['rows'].items() if v)}),"
                  f" {d['bytes'] / 2**20:8.1f} MiB")
        print(f"  ratio with/without: rows {per_day['with']['rows_total'] / per_day['without']['rows_total']:.3f}, "
              f"bytes {per_day['with']['bytes'] / per_day['without']['bytes']:.3f}")

        # 2. CPU at idle, real scale: the steady cost per second of wall time, from a long and a short run (start-up,
        # shut-down and the first --idle-after at full rate cancel).
        real = ["--idle-interval", "10s", "--idle-after", "5s"]
        long_c, short_c = a.cpu_seconds, max(15.0, a.cpu_seconds / 4)
        cpu = {}
        for name, adaptive in (("without", []), ("with", real)):
            l = record(a.build, work, f"cpu-{name}-long", long_c, "1s", adaptive, env)
            s = record(a.build, work, f"cpu-{name}-short", short_c, "1s", adaptive, env)
            cpu[name] = {"per_s": (l["cpu_s"] - s["cpu_s"]) / (long_c - short_c), "whole": l["cpu_s"],
                         "rows": sum(l["rows"].values())}
        print(f"CPU at idle ({a.gpus} fake GPUs{', driver-like call costs' if a.driver_like else ''}, --interval 1s, "
              f"--idle-interval 10s; steady cost from {long_c:g} s and {short_c:g} s runs):")
        for name in ("without", "with"):
            r = cpu[name]
            print(f"  {name:>7} --idle-interval: {r['per_s'] * 1e6:8.1f} us CPU per second = "
                  f"{100 * r['per_s']:.4f} % of one core (whole {long_c:g} s run: {r['whole'] * 1000:.1f} ms, "
                  f"{r['rows']} rows)")
        print(f"  ratio with/without: CPU per idle second {cpu['with']['per_s'] / cpu['without']['per_s']:.3f}, "
              f"whole run {cpu['with']['whole'] / cpu['without']['whole']:.3f}")
        proc.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
