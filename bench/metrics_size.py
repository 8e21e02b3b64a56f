#!/usr/bin/env python3
"""/metrics per node (issue 18, point 6): its size and its scrape time for a node with 8 GPUs (simulated: the
built-in training scenario's four H100s twice) and 200 processes on them (real sleeping processes, 25 per GPU, in ten
Slurm jobs through a procfs fixture tree whose other entries are this machine's /proc), at serve's default
--top-processes 20 and at --top-processes 200, against the same node with process tracking off (--top-processes 0)
in the same run.

The three serve processes run side by side and are scraped in turn, in a shuffled order each round, so that the
rest of the machine weighs on each alike. Scrape time is taken as Prometheus sees it (a keep-alive HTTP/1.1 GET of
the whole body, client side) over SCRAPES requests per configuration, plus serve's own CPU per scrape (its CPU time
during the scrapes less what it spends sampling in as long without them).

Issue 32: per-process series are opt-in (serve --process-metrics), and /metrics is gzipped for a client that asks. Each
configuration with processes runs with --process-metrics, and each runs twice: scraped as before and scraped with
Accept-Encoding: gzip (Prometheus's own request), so the bytes on the wire and serve's CPU per scrape compare. With
--fresh the scrapes are paced at serve's --interval, so that every one finds a new frame (a new body to compress:
the worst case, one scraper per frame); without it many scrapes reuse the body compressed once per frame. The zlib
line times the compression alone, in this process, on the largest body (the same libz serve links).

--openmetrics sends Prometheus's own Accept header, so that serve answers in OpenMetrics (rewritten from the 0.0.4
text for such a scrape): its cost beside the plain text's.

Usage: bench/metrics_size.py [--binary build/wattscope] [--scrapes 300] [--fresh] [--interval 1s] [--openmetrics]"""

import argparse
import gzip
import http.client
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROCESSES = 200
JOBS = 10


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scenario(path, sleepers):
    with open(os.path.join(ROOT, "src", "simulation", "scenarios", "training.json")) as f:
        s = json.load(f)
    devices = []
    for copy in range(2):
        for d in s["devices"]:
            d = json.loads(json.dumps(d))
            i = len(devices)
            d["uuid"] = f"GPU-5e1a7ed0-0000-4000-8000-{i:012d}"
            d["pci_bus_id"] = f"00000000:{0x18 + 0x10 * i:02X}:00.0"
            d["processes"] = [{"pid": p.pid, "type": "compute", "mem_bytes": 1 << 30, "sm": 3, "mem": 1}
                              for p in sleepers[i * 25:(i + 1) * 25]]
            devices.append(d)
    s["devices"] = devices
    with open(path, "w") as f:
        json.dump(s, f)


def procfs(root, sleepers):
    os.makedirs(root)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            os.symlink(os.path.join("/proc", name), os.path.join(root, name))
    for n, p in enumerate(sleepers):
        d = os.path.join(root, str(p.pid))
        os.makedirs(d)
        for f in ("stat", "statm", "status", "cmdline", "io", "smaps_rollup"):
            os.symlink(f"/proc/{p.pid}/{f}", os.path.join(d, f))
        with open(os.path.join(d, "cgroup"), "w") as f:
            f.write(f"0::/system.slice/slurmstepd.scope/job_{1000 + n % JOBS}/step_0/user/task_{n}\n")


def rapl(root):
    """Two sockets of RAPL zones whose counters a thread advances, as the kernel would."""
    files = []
    for sock in range(2):
        for domain, name in ((f"intel-rapl:{sock}", f"package-{sock}"), (f"intel-rapl:{sock}:0", "core"),
                             (f"intel-rapl:{sock}:1", "dram")):
            d = os.path.join(root, "class", "powercap", domain)
            os.makedirs(d)
            for f, v in (("name", name), ("energy_uj", 0), ("max_energy_range_uj", 262143328850)):
                with open(os.path.join(d, f), "w") as out:
                    out.write(f"{v}\n")
            files.append(os.path.join(d, "energy_uj"))
    stop = threading.Event()

    def run():
        t0 = time.monotonic()
        while not stop.wait(0.2):
            for path in files:
                with open(path, "r+") as f:
                    f.write(f"{int(150e6 * (time.monotonic() - t0))}\n")
                    f.truncate()

    threading.Thread(target=run, daemon=True).start()
    return stop


def start_serve(binary, tmp, top, gz=False, interval="1s"):
    env = dict(os.environ, WATTSCOPE_CGROUP_ROOT="none", WATTSCOPE_LOCK_DIR=os.path.join(tmp, f"locks{top}"),
               HOME=tmp, XDG_CONFIG_HOME=tmp)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["WATTSCOPE_LOCK_DIR"] = os.path.join(tmp, f"locks{top}{'gz' if gz else ''}")
    err = open(os.path.join(tmp, f"serve{top}{'gz' if gz else ''}.err"), "w+")
    serve = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--interval", interval,
                              "--simulate=" + os.path.join(tmp, "scenario.json"), "--top-processes", str(top),
                              "--process-interval", "1s", "--procfs-root", os.path.join(tmp, "proc"),
                              "--sysfs-root", os.path.join(tmp, "sys")] + (["--process-metrics"] if top else []),
                             env=env, stdout=subprocess.DEVNULL, stderr=err)
    for _ in range(400):
        err.seek(0)
        m = re.search(r"serving on http://127\.0\.0\.1:(\d+)/", err.read())
        if m:
            return serve, int(m.group(1))
        if serve.poll() is not None:
            break
        time.sleep(0.05)
    err.seek(0)
    serve.kill()
    raise RuntimeError(err.read())


# What Prometheus 2.x sends (--openmetrics).
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def measure(binary, tmp, tops, scrapes, fresh=False, interval="1s", accept=None):
    """The configurations side by side, scraped in turn (in a shuffled order each round), so that whatever else the
    machine does at a moment weighs on every configuration alike. A configuration is (top, gzip)."""
    serves = {}
    pace = float(interval[:-2]) / 1e3 if interval.endswith("ms") else float(interval[:-1])
    try:
        for top in tops:
            serves[top] = start_serve(binary, tmp, top[0], top[1], interval)
        time.sleep(4)  # a few ticks and process scans: every process has its power and energy
        conns = {top: http.client.HTTPConnection("127.0.0.1", port) for top, (_, port) in serves.items()}

        def headers(top):
            h = {"Accept-Encoding": "gzip"} if top[1] else {}
            if accept:
                h["Accept"] = accept
            return h

        def get(top):
            try:
                conns[top].request("GET", "/metrics", headers=headers(top))
                r = conns[top].getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # serve closes a keep-alive connection idle for 5 s (its header timeout): the idle measurement's
                conns[top] = http.client.HTTPConnection("127.0.0.1", serves[top][1])
                conns[top].request("GET", "/metrics", headers=headers(top))
                r = conns[top].getresponse()
            body = r.read()
            assert (r.getheader("Content-Encoding") == "gzip") == top[1], r.getheaders()
            return body

        bodies = {top: get(top) for top in tops}
        # Each serve's CPU while idle (sampling only), then while scraped.
        c0 = {top: cpu_seconds(p.pid) for top, (p, _) in serves.items()}
        t0 = time.monotonic()
        time.sleep(5)
        idle_rate = {top: (cpu_seconds(p.pid) - c0[top]) / (time.monotonic() - t0) for top, (p, _) in serves.items()}
        c1 = {top: cpu_seconds(p.pid) for top, (p, _) in serves.items()}
        t1 = time.monotonic()
        times = {top: [] for top in tops}
        order = list(tops)
        for _ in range(scrapes):
            if fresh:
                time.sleep(pace)  # a new frame, so a new body to compress
            random.shuffle(order)
            for top in order:
                s = time.perf_counter()
                bodies[top] = get(top)
                times[top].append(time.perf_counter() - s)
        wall = time.monotonic() - t1
        out = {}
        for top, (p, _) in serves.items():
            body = bodies[top]
            wire = len(body)
            if top[1]:
                body = gzip.decompress(body)
            text = body.decode()
            samples = [line for line in text.splitlines() if line and not line.startswith("#")]
            families = {}
            for line in samples:
                name = re.match(r"[a-z_]+", line).group(0)
                families[name] = families.get(name, 0) + 1
            t = sorted(times[top])
            busy = cpu_seconds(p.pid) - c1[top]
            out[top] = {"bytes": len(body), "wire": wire, "body": body, "series": len(samples),
                        "families": families, "p50_ms": 1e3 * t[len(t) // 2],
                        "p99_ms": 1e3 * t[min(len(t) - 1, int(0.99 * len(t)))],
                        "cpu_ms": 1e3 * max(0.0, busy - idle_rate[top] * wall) / scrapes}
        for c in conns.values():
            c.close()
        return out
    finally:
        for p, _ in serves.values():
            p.terminate()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "wattscope"))
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--fresh", action="store_true", help="pace scrapes at --interval: each finds a new frame")
    ap.add_argument("--interval", default="1s", help="serve's --interval (e.g. 250ms)")
    ap.add_argument("--openmetrics", action="store_true", help="ask for OpenMetrics, as Prometheus does")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="wattscope-metrics-bench-") as tmp:
        sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(PROCESSES)]
        stop = None
        try:
            scenario(os.path.join(tmp, "scenario.json"), sleepers)
            procfs(os.path.join(tmp, "proc"), sleepers)
            stop = rapl(os.path.join(tmp, "sys"))
            results = measure(a.binary, tmp, [(t, gz) for t in (0, 20, 200) for gz in (False, True)], a.scrapes,
                              a.fresh, a.interval, PROMETHEUS_ACCEPT if a.openmetrics else None)
        finally:
            if stop:
                stop.set()
            for p in sleepers:
                p.kill()
                p.wait()
    base = results[(0, False)]
    print(f"node: 8 simulated GPUs, 2 RAPL sockets, {PROCESSES} processes on the GPUs in {JOBS} Slurm jobs; "
          f"{a.scrapes} scrapes per configuration over one keep-alive connection each, interleaved"
          f"{', paced at ' + a.interval + ' (a new frame each)' if a.fresh else ''}")
    for (top, gz), r in results.items():
        print(f"--top-processes {top:3d} {'gzip ' if gz else 'plain'}: /metrics {r['bytes']:7d} bytes, {r['wire']:7d} on "
              f"the wire, {r['series']:5d} series ({r['series'] / base['series']:5.2f}x); "
              f"scrape p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms; serve CPU per scrape {r['cpu_ms']:.3f} ms")
    body = results[(200, False)]["body"]
    for level in (1, 6, 9):
        n = 200
        t = time.perf_counter()
        for _ in range(n):
            z = zlib.compress(body, level)
        print(f"zlib level {level}: the {len(body)}-byte body to {len(z)} bytes in "
              f"{1e3 * (time.perf_counter() - t) / n:.3f} ms")
    top = results[(200, False)]["families"]
    big = sorted(top.items(), key=lambda kv: -kv[1])[:6]
    print("largest families at --top-processes 200: " + ", ".join(f"{k} {v}" for k, v in big))


if __name__ == "__main__":
    sys.exit(main())
