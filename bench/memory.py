#!/usr/bin/python3
"""What memory `record` and `serve` hold over long runs, with 8 simulated GPUs, fast-forwarded.

record: a day at 1 s is 86,400 frames. It is driven at a 1 ms interval with one commit per frame (--commit-every 1ms),
so the store sees a day's frames and commits, in a day's order, in about 90 s. Printed: peak RSS (wait4), frames
stored, database size. Peak RSS is VmHWM watched in /proc (see overhead.watch). --hour adds an hour at 10 ms (360,000 frames, ~6 min), committed every 10 frames.

serve: --retain 24h at 1 s. Its history rings are allocated whole when the run starts (bounded by construction;
tests/unit: HistoryMemoryIsFlatOverDays pushes two days), so the figure is its RSS after SECONDS of serving plus a
page view, /metrics scrapes, a 24 h history request and an advice request, and its thread count.

    bench/memory.py [--build DIR] [--hour] [--serve-seconds 60]
"""
import argparse
import atexit
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from overhead import scenario, watch  # noqa: E402  (the same 8 simulated GPUs; /proc watcher)


def record(build, env, tmp, interval, seconds, commit, label):
    db = os.path.join(tmp, f"{label}.db")
    argv = [os.path.join(build, "wattscope"), "-q", "record", "--task", label, "--interval", interval, "--duration",
            f"{seconds}s", "--commit-every", commit, "--db", db]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    seen = {}
    watcher = threading.Thread(target=watch, args=(p.pid, seen), daemon=True)
    watcher.start()
    _, status, _ = os.wait4(p.pid, 0)
    watcher.join()
    wall = time.monotonic() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"record failed: {p.stderr.read().decode(errors='replace')}")
    frames = sqlite3.connect(db).execute("SELECT COUNT(*) FROM cpu_samples").fetchone()[0]
    size = sum(os.path.getsize(db + s) for s in ("", "-wal") if os.path.exists(db + s))
    print(f"record {label:>12}: {frames:>7} frames in {wall:5.0f} s, peak RSS {seen.get('hwm_kib', 0) / 1024:5.1f} MiB, "
          f"database {size / 2**20:6.1f} MiB")


def serve(build, env, tmp, seconds):
    err = os.path.join(tmp, "serve.err")
    argv = [os.path.join(build, "wattscope"), "serve", "--listen", "127.0.0.1:0", "--retain", "24h", "--interval",
            "1s", "--db", os.path.join(tmp, "serve.db")]
    p = subprocess.Popen(argv, env=env, stderr=open(err, "w"))
    port = None
    for _ in range(200):
        m = re.search(r"127\.0\.0\.1:(\d+)", open(err).read())
        if m:
            port = int(m.group(1))
            break
        time.sleep(0.05)
    if port is None:
        p.kill()
        sys.exit(f"serve did not start: {open(err).read()}")
    base = f"http://127.0.0.1:{port}"
    end = time.monotonic() + seconds
    page = urllib.request.urlopen(base + "/").read().decode()
    script = re.search(r'src="(/assets/plotly-[0-9a-f]+\.min\.js)"', page)
    if script:
        urllib.request.urlopen(base + script.group(1)).read()
    while time.monotonic() < end:
        urllib.request.urlopen(base + "/metrics").read()
        time.sleep(5)
    json.loads(urllib.request.urlopen(base + "/api/v1/history?range=24h&step=1m").read())
    json.loads(urllib.request.urlopen(base + "/api/v1/advice").read())  # a recomputation over the last hour
    metrics = urllib.request.urlopen(base + "/metrics").read().decode()
    history = re.search(r"^wattscope_history_bytes (\S+)", metrics, re.M)
    with open(f"/proc/{p.pid}/status") as f:
        status = dict(line.split(":", 1) for line in f)
    p.terminate()
    p.wait()
    print(f"serve --retain 24h, 1 s, {seconds} s: RSS {int(status['VmRSS'].split()[0]) / 1024:.1f} MiB "
          f"(peak {int(status['VmHWM'].split()[0]) / 1024:.1f} MiB), {status['Threads'].strip()} threads, "
          f"history rings {float(history.group(1)) / 2**20 if history else float('nan'):.2f} MiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--hour", action="store_true")
    ap.add_argument("--serve-seconds", type=int, default=60)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="wattscope-memory-")
    atexit.register(shutil.rmtree, tmp, True)  # a day's database is ~120 MB
    scen = os.path.join(tmp, "scenario.json")
    scenario(scen, 8, False)
    env = dict(os.environ, WATTSCOPE_NVML_LIBRARY=os.path.join(args.build, "fakes", "libnvidia-ml-fake.so"),
               WATTSCOPE_FAKE_NVML_SCENARIO=scen)
    record(args.build, env, tmp, "1ms", 87, "1ms", "day-at-1s")
    if args.hour:
        record(args.build, env, tmp, "1ms", 370, "10ms", "hour-at-10ms")
    serve(args.build, env, tmp, args.serve_seconds)


if __name__ == "__main__":
    main()
