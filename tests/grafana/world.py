"""A small fleet for the Grafana dashboard's tests: two real `wattscope serve` processes and a real Prometheus
(Debian's) scraping both, everything inside one temporary directory.

- `gpu-node`: `serve --simulate=SCENARIO`, the built-in training scenario's four simulated H100s, whose GPU
  processes are two real helper processes of this test.
- `cpu-node`: `serve` on a host without NVML (WATTSCOPE_NVML_LIBRARY names a library that does not exist).

Both read a procfs fixture tree (`--procfs-root`): the machine's own /proc entries through symlinks (so CPU
utilisation and memory are live), a `sys/kernel/hostname` that names the host, and one directory per helper process
whose `stat` and `cmdline` are the real process's but whose `cgroup` puts it in a Slurm job or a Kubernetes pod, so
that `serve` has units to export. RAPL comes from a sysfs fixture tree (`--sysfs-root`) whose counters a thread
advances, as the kernel would. Only the hardware boundary is faked; wattscope and Prometheus run unchanged."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

BINARY = os.path.abspath(os.environ.get("WATTSCOPE_BINARY", "build/wattscope"))
PROMETHEUS = os.environ.get("WATTSCOPE_PROMETHEUS", "/usr/bin/prometheus")
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

GPU_HOST = "gpu-node"
CPU_HOST = "cpu-node"

# Helper processes and the cgroup each one is given in the procfs fixture.
UNITS = {
    "slurm": "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
    "pod": "0::/kubepods.slice/kubepods-burstable.slice/"
           "kubepods-burstable-pod6f1c2d3e_4b5a_4c7d_8e9f_0a1b2c3d4e5f.slice/"
           "cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n",
}

# A light worker: a few per cent of a core, so that its unit is given a share of the CPU's energy.
WORKER = "import time\nwhile True:\n    sum(range(20000))\n    time.sleep(0.02)\n"

RULES = """builtin_rules = false
# GPU 3 of the training scenario idles the whole time: this fires at once on the GPU host.
[[rule]]
name = "test_gpu_idle"
metric = "util_gpu_pct"
op = "<"
threshold = 5
for = "0s"
severity = "info"

# The RAPL fixture's package draws power on both hosts.
[[rule]]
name = "test_package_power"
scope = "zone"
zone = "package"
metric = "power_w"
op = ">"
threshold = 0
for = "0s"
severity = "warning"
"""

RAPL_ZONES = [  # (directory, name, watts): one socket, as the kernel lays it out
    ("intel-rapl:0", "package-0", 48.0),
    ("intel-rapl:0:0", "core", 30.0),
    ("intel-rapl:0:1", "dram", 6.0),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port, path, timeout=5):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read().decode()


class Rapl(threading.Thread):
    """Advances the fixture's energy_uj counters in place (the source keeps them open: same inode)."""

    def __init__(self, root):
        super().__init__(daemon=True)
        self.files = []
        for domain, name, watts in RAPL_ZONES:
            d = os.path.join(root, "class", "powercap", domain)
            os.makedirs(d)
            for f, v in (("name", name), ("energy_uj", 1_000_000), ("max_energy_range_uj", 262143328850)):
                with open(os.path.join(d, f), "w") as out:
                    out.write(f"{v}\n")
            self.files.append((os.path.join(d, "energy_uj"), watts))
        self.stopping = threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        while not self.stopping.wait(0.1):
            dt = time.monotonic() - self.t0
            for path, watts in self.files:
                with open(path, "r+") as f:
                    f.write(f"{1_000_000 + int(watts * dt * 1e6)}\n")
                    f.truncate()


def procfs_fixture(root, host, workers):
    """The machine's /proc through symlinks, a hostname, and the workers with their fixture cgroups."""
    os.makedirs(root)
    for name in os.listdir("/proc"):
        if name.isdigit() or name == "sys":
            continue
        os.symlink(os.path.join("/proc", name), os.path.join(root, name))
    os.makedirs(os.path.join(root, "sys", "kernel"))
    with open(os.path.join(root, "sys", "kernel", "hostname"), "w") as f:
        f.write(host + "\n")
    for kind, proc in workers.items():
        d = os.path.join(root, str(proc.pid))
        os.makedirs(d)
        for f in ("stat", "statm", "status", "cmdline", "io", "smaps_rollup"):
            os.symlink(f"/proc/{proc.pid}/{f}", os.path.join(d, f))
        with open(os.path.join(d, "cgroup"), "w") as f:
            f.write(UNITS[kind])


def gpu_scenario(path, workers):
    """The built-in training scenario, its GPU processes (`"command"` under `run`) made the helper processes: GPUs 0
    and 1 run the Slurm job, GPU 2 the pod, GPU 3 idles."""
    with open(os.path.join(SOURCE_DIR, "src", "simulation", "scenarios", "training.json")) as f:
        scenario = json.load(f)
    owners = ["slurm", "slurm", "pod"]
    for i, dev in enumerate(scenario["devices"]):
        for p in dev.get("processes", []):
            p["pid"] = workers[owners[i]].pid
    with open(path, "w") as f:
        json.dump(scenario, f)


class Fleet:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []
        self.workers = {}
        self.rapl = []

    def start(self):
        tmp = self.tmp
        for kind in UNITS:
            self.workers[kind] = subprocess.Popen([sys.executable, "-c", WORKER])
        rules = os.path.join(tmp, "rules.toml")
        with open(rules, "w") as f:
            f.write(RULES)
        gpu_scenario(os.path.join(tmp, "scenario.json"), self.workers)
        self.ports = {}
        for host in (GPU_HOST, CPU_HOST):
            d = os.path.join(tmp, host)
            os.makedirs(d)
            procfs_fixture(os.path.join(d, "proc"), host, self.workers)
            sysfs = os.path.join(d, "sys")
            rapl = Rapl(sysfs)
            rapl.start()
            self.rapl.append(rapl)
            env = dict(os.environ)
            env.pop("CUDA_VISIBLE_DEVICES", None)
            env.update({"WATTSCOPE_CGROUP_ROOT": "none", "WATTSCOPE_LOCK_DIR": os.path.join(d, "locks"),
                        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": d, "XDG_CONFIG_HOME": d})
            args = [BINARY, "serve", "--listen", "127.0.0.1:0", "--interval", "250ms", "--process-interval", "1s",
                    "--procfs-root", os.path.join(d, "proc"), "--sysfs-root", sysfs, "--alerts", rules]
            if host == GPU_HOST:
                args.append("--simulate=" + os.path.join(tmp, "scenario.json"))
            else:
                env["WATTSCOPE_NVML_LIBRARY"] = os.path.join(d, "no-such-libnvidia-ml.so.1")
            err = open(os.path.join(d, "err"), "w+")
            self.procs.append(subprocess.Popen(args, env=env, cwd=d, stdout=subprocess.DEVNULL, stderr=err))
            self.ports[host] = self.wait_for_port(err, self.procs[-1])
        self.prom_port = free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n")
            for host, port in self.ports.items():
                f.write(f"  - job_name: {host}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
        self.prom_log = open(os.path.join(tmp, "prometheus.log"), "w+")
        self.procs.append(subprocess.Popen(
            [PROMETHEUS, "--config.file=" + config, "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"),
             "--web.listen-address=127.0.0.1:" + str(self.prom_port), "--log.level=warn"],
            cwd=tmp, stdout=self.prom_log, stderr=subprocess.STDOUT))
        return self

    @staticmethod
    def wait_for_port(err, proc):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            err.seek(0)
            m = re.search(r"serving on http://127\.0\.0\.1:(\d+)/", err.read())
            if m:
                return int(m.group(1))
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        err.seek(0)
        raise RuntimeError("serve did not start: " + err.read())

    def wait_until_scraped(self, scrapes=5, timeout=40):
        """Until Prometheus holds `scrapes` scrapes of every target and both hosts' units and alerts are in."""
        deadline = time.monotonic() + timeout
        ready = {}
        while time.monotonic() < deadline:
            try:
                ready = {
                    "scrapes": self.instant(f"count_over_time(up[1m]) >= {scrapes}"),
                    "units": self.instant("count by (host) (wattscope_unit_power_watts{unit!=\"other\"})"),
                    "alerts": self.instant("count by (host) (wattscope_alerts_firing)"),
                }
                if all(len(v) == 2 for v in ready.values()):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        self.prom_log.seek(0)
        raise RuntimeError(f"Prometheus never had all it needs: {ready}\n{self.prom_log.read()}")

    def api(self, path, **params):
        body = json.loads(http_get(self.prom_port, path + "?" + urllib.parse.urlencode(params, doseq=True)))
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def instant(self, query):
        return self.api("/api/v1/query", query=query)["result"]

    def stop(self):
        for r in self.rapl:
            r.stopping.set()
        for p in self.procs + list(self.workers.values()):
            if p.poll() is None:
                p.terminate()
        for p in self.procs + list(self.workers.values()):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for r in self.rapl:
            r.join()

    def serve_errors(self):
        out = []
        for host in (GPU_HOST, CPU_HOST):
            with open(os.path.join(self.tmp, host, "err")) as f:
                out.append(f"--- {host}:\n" + f.read())
        return "\n".join(out)
