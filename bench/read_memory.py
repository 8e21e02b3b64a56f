#!/usr/bin/python3
"""Peak memory and time of every view of one long stored run, as a user opens them: `show --json`, `advise`,
`report`, and serve's `/runs/ID` page with the run's JSON (`/api/v1/runs/ID`) and a zoomed window (`/series`).

Each run is 8 GPUs with hourly epochs and 8 processes scanned every 5 s (bench/report_24h.cpp builds it into SQLite:
the same rows `record` stores). A command's peak is GNU time's %M (wait4 of a small parent, so no Python in it); serve's
is VmHWM read after the requests, beside its RSS before them.

    bench/read_memory.py [--build DIR] [--hours 1,6,24] [--interval-ms 1000] [--keep DIR] [--views show,advise,...]

--keep DIR keeps the built stores there and reuses them (a 24 h store at 1 s: 174 MB, built in seconds).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(argv, env):
    """Runs argv under GNU time: (seconds, peak RSS in MiB)."""
    t0 = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "%M"] + argv, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, check=False)
    seconds = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{p.stderr}")
    return seconds, int(p.stderr.strip().splitlines()[-1]) / 1024


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def get(url):
    with urllib.request.urlopen(url, timeout=600) as r:
        return r.read()


def serve_views(binary, db, env, run_id, start_ms, end_ms):
    port = free_port()
    p = subprocess.Popen([binary, "-q", "serve", "--db", db, "--listen", f"127.0.0.1:{port}"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                get(base + "/api/v1/runs?limit=1")
                break
            except OSError:
                time.sleep(0.05)
        before = status_kib(p.pid, "VmRSS") / 1024
        t0 = time.monotonic()
        get(f"{base}/runs/{run_id}")
        get(f"{base}/api/v1/runs/{run_id}")
        mid = start_ms + (end_ms - start_ms) // 2
        get(f"{base}/api/v1/runs/{run_id}/series?from={mid}&to={mid + 600000}")
        seconds = time.monotonic() - t0
        return seconds, before, status_kib(p.pid, "VmHWM") / 1024
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--hours", default="1,6,24")
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--keep", help="keep and reuse the built stores in this directory")
    ap.add_argument("--views", default="show,advise,report,serve", help="the views to time (default: all four)")
    a = ap.parse_args()
    binary = os.path.join(a.build, "wattscope")
    builder = os.path.join(a.build, "bench", "wattscope_bench_report_24h")
    for f in (binary, builder):
        if not os.access(f, os.X_OK):
            sys.exit(f"{f} is missing: build it first (scripts/build.sh release)")
    work = a.keep or tempfile.mkdtemp(prefix="wattscope-read-memory-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, WATTSCOPE_CGROUP_ROOT="none", HOME=work)
    print(f"8 GPUs at {a.interval_ms} ms; peak RSS in MiB (serve: before the views -> peak)")
    print(f"{'hours':>6} {'gpu rows':>10} {'db MB':>7}  {'show --json':>15} {'advise':>15} {'report':>15} "
          f"{'serve /runs/ID':>22}")
    try:
        for hours in [float(h) for h in a.hours.split(",")]:
            db = os.path.join(work, f"run-{hours:g}h-{a.interval_ms}ms.db")
            if not os.path.exists(db):
                subprocess.run([builder, "build", db, str(hours), str(a.interval_ms)], check=True,
                               stdout=subprocess.DEVNULL)
            listed = json.loads(subprocess.run([binary, "-q", "list", "--db", db, "--json"], env=env, check=True,
                                               capture_output=True, text=True).stdout)
            run = listed[-1] if isinstance(listed, list) else listed["runs"][-1]
            run_id = run["run_id"]
            start_ms = 1795262400000  # bench/report_24h.cpp: kStartMs
            end_ms = start_ms + int(hours * 3600 * 1000)
            views = a.views.split(",")
            out = {}
            if "show" in views:
                out["show"] = timed([binary, "-q", "show", "--db", db, "--json", run_id], env)
            if "advise" in views:
                out["advise"] = timed([binary, "-q", "advise", "--db", db, run_id], env)
            if "report" in views:
                out["report"] = timed([binary, "-q", "report", "--db", db, "-o", os.path.join(work, "r.html"), run_id],
                                      env)
            serve = "-"
            if "serve" in views:
                s_seconds, s_before, s_peak = serve_views(binary, db, env, run_id, start_ms, end_ms)
                serve = f"{s_before:6.0f} -> {s_peak:4.0f} ({s_seconds:4.1f} s)"
            rows = int(hours * 3600 * 1000 / a.interval_ms) * 8
            cell = lambda k: f"{out[k][1]:6.0f} ({out[k][0]:5.1f} s)" if k in out else "-"  # noqa: E731
            print(f"{hours:6g} {rows:10,d} {os.path.getsize(db) / 1e6:7.0f}  {cell('show'):>15} {cell('advise'):>15} "
                  f"{cell('report'):>15} {serve:>22}", flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
