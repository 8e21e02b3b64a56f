"""--remote-write against the real receivers: Debian's VictoriaMetrics and Prometheus, started here in the test's
temporary directory, fed by the real wattscope binary (fake NVML at the hardware boundary).

- Every series serve's /metrics shows arrives with the same name and labels (and the external label); the fake's
  constant gauges read back as the scenario set them, its energy counter in whole ticks of the scenario's step.
- Prometheus' own receiver takes a short `record`: every sample of the run, the run's id on each series, and the
  staleness markers at the end (an instant query finds nothing once the run is over).
- A receiver stopped for 60 s in the middle of a run, and another behind a proxy that answers 500 and then hangs:
  once both answer again every sample is there, once, in order, and the recording never missed a tick.
- https with a private CA and basic auth; a wrong password is a batch refused for good, and said.
About 100 s, most of it the 60 s outage."""

import http.server
import json
import os
import re
import signal
import socket
import sqlite3
import ssl
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest

BINARY = os.path.abspath(os.environ["WATTSCOPE_BINARY"])
FAKE_NVML = os.path.abspath(os.environ["WATTSCOPE_FAKE_NVML"])
VICTORIA = os.environ.get("WATTSCOPE_VICTORIA_METRICS", "/usr/bin/victoria-metrics")
PROMETHEUS = os.environ.get("WATTSCOPE_PROMETHEUS", "/usr/bin/prometheus")
STALE = None  # VictoriaMetrics exports a staleness marker as null

# Two GPUs whose gauges stay put and whose energy counters step by a known amount each tick.
POWER_W = {0: 250.0, 1: 180.0}
STEP_J = {0: 25.0, 1: 18.0}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, timeout=30.0, every=0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


def scenario(path):
    def device(i):
        return {"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-rw-{i}", "pci_bus_id": f"00000000:{0x3B + i:02X}:00.0",
                "metrics": {"power_instant_mw": int(POWER_W[i] * 1000),
                            "energy_mj": {"linear": [1000000 * (i + 1), int(STEP_J[i] * 1000)]},
                            "temp_gpu": 60 + i, "util_gpu": 50 + 20 * i, "util_mem": 30, "mem_used_bytes": (i + 1) << 30,
                            "mem_total_bytes": 80 << 30}}
    path.write_text(json.dumps({"devices": [device(0), device(1)]}))
    return path


def env_for(tmp):
    env = dict(os.environ, WATTSCOPE_NVML_LIBRARY=FAKE_NVML, WATTSCOPE_FAKE_NVML_SCENARIO=str(scenario(
        tmp / "scenario.json")), WATTSCOPE_CGROUP_ROOT="none", HOME=str(tmp))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def parse_exposition(text):
    """{(name, frozenset(labels)): value} of Prometheus text 0.0.4 as serve writes it."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        assert m, line
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\")
                  for k, v in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or "") if v}
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(3))
    return out


class Victoria:
    """A private VictoriaMetrics: its data in the test's directory, stopped with SIGTERM (it flushes), restartable."""

    def __init__(self, tmp, name, extra=()):
        self.dir, self.port, self.extra, self.proc = tmp / name, free_port(), list(extra), None
        self.scheme, self.ctx, self.auth = "http", None, None
        self.start()

    def start(self):
        self.proc = subprocess.Popen([VICTORIA, f"-storageDataPath={self.dir}/data",
                                      f"-httpListenAddr=127.0.0.1:{self.port}", "-search.latencyOffset=0s",
                                      "-search.disableCache", "-loggerLevel=ERROR", *self.extra],
                                     stdout=open(self.dir.with_suffix(".out"), "a"),
                                     stderr=open(self.dir.with_suffix(".err"), "a"))
        wait_for("VictoriaMetrics to listen", lambda: self._health(), timeout=30)

    def _health(self):
        try:
            return self.get("/health") is not None
        except OSError:
            return False

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)

    @property
    def write_url(self):
        return f"{self.scheme}://127.0.0.1:{self.port}/api/v1/write"

    def get(self, path, params=None):
        url = f"{self.scheme}://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        req = urllib.request.Request(url)
        if self.auth:
            req.add_header("Authorization", self.auth)
        with urllib.request.urlopen(req, timeout=10, context=self.ctx) as r:
            return r.read().decode()

    def export(self, match):
        self.get("/internal/force_flush")
        body = self.get("/api/v1/export", {"match[]": match})
        return [json.loads(line) for line in body.splitlines() if line.strip()]


@pytest.fixture
def tmp(tmp_path):
    if not os.path.exists(VICTORIA):
        pytest.skip(f"{VICTORIA} is not installed (Debian: victoria-metrics; scripts/setup.sh --tests)")
    os.chmod(tmp_path, 0o700)
    yield tmp_path


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


def summary_counts(stderr, url):
    m = re.search(r"remote-write " + re.escape(url) + r": (\d+) samples sent(.*)", stderr)
    assert m, stderr
    return int(m.group(1)), m.group(2)


def test_every_series_of_metrics_arrives_with_its_labels_and_the_fakes_values(tmp, procs):
    vm = Victoria(tmp, "vm")
    procs.append(vm)
    port = free_port()
    serve = subprocess.Popen([BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--interval", "200ms",
                              "--remote-write", vm.write_url, "--remote-write-interval", "200ms",
                              "--external-label", "cluster=ci", "--remote-write-queue", str(tmp / "queue")],
                             env=env_for(tmp), cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def scrape():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                return None
            return body if "wattscope_sampler_ticks_total" in body and re.search(
                r'^wattscope_sampler_ticks_total\{[^}]*\} ([2-9]\d|\d{3,})$', body, re.M) else None
        metrics = parse_exposition(wait_for("20 ticks in /metrics", scrape))
    finally:
        serve.send_signal(signal.SIGTERM)
        _, err = serve.communicate(timeout=30)
    assert serve.returncode == 0, err
    sent, rest = summary_counts(err, vm.write_url)
    assert sent > 0 and "queued" not in rest, err

    stored = wait_for("the samples in VictoriaMetrics", lambda: (lambda e: e if sum(
        len(s["values"]) for s in e) == sent else None)(vm.export('{__name__=~".+"}')), timeout=30)
    by_key = {(s["metric"]["__name__"], frozenset((k, v) for k, v in s["metric"].items() if k != "__name__")): s
              for s in stored}
    # Every series the scrape showed is there, with its labels and the external ones (host where it has none), and
    # nothing /metrics lacks.
    host = dict(next(k for k in metrics if k[0] == "wattscope_run_info")[1])["host"]
    for (name, labels), value in metrics.items():
        key = (name, labels | {("cluster", "ci")} | ({("host", host)} if "host" not in dict(labels) else set()))
        assert key in by_key, f"{name}{dict(labels)} is not in VictoriaMetrics"
    assert {k[0] for k in by_key} == {k[0] for k in metrics}
    for s in stored:
        assert s["metric"]["cluster"] == "ci" and s["metric"]["host"]
        assert s["timestamps"] == sorted(s["timestamps"]), s["metric"]
        assert s["values"][-1] is STALE, s["metric"]  # serve stopped: every series ends with a staleness marker
    # The fake's truth: its constant gauges, and the energy counter in whole steps since the run began.
    for gpu in (0, 1):
        def series(name):
            return next(s for s in stored if s["metric"]["__name__"] == name and s["metric"]["gpu"] == str(gpu))
        power = series("wattscope_gpu_power_watts")["values"][:-1]
        assert len(power) >= 20 and set(power) == {POWER_W[gpu]}
        assert set(series("wattscope_gpu_temperature_celsius")["values"][:-1]) == {60.0 + gpu}
        assert set(series("wattscope_gpu_utilization_ratio")["values"][:-1]) == {(50 + 20 * gpu) / 100}
        assert set(series("wattscope_gpu_memory_used_bytes")["values"][:-1]) == {float((gpu + 1) << 30)}
        energy = series("wattscope_gpu_energy_joules_total")
        assert energy["metric"]["method"] == "counter"
        values = energy["values"][:-1]
        assert values == sorted(values) and values[-1] > 0
        for v in values:
            assert abs(v / STEP_J[gpu] - round(v / STEP_J[gpu])) < 1e-9, (gpu, v)
    # The writer's own counts are among the series, as a scrape shows them.
    assert any(k[0] == "wattscope_remote_write_samples_sent_total" for k in by_key)


def test_prometheus_receiver_takes_a_short_record_and_its_end(tmp):
    if not os.path.exists(PROMETHEUS):
        pytest.skip(f"{PROMETHEUS} is not installed")
    port = free_port()
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 1m}\n")
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/prom",
                             f"--web.listen-address=127.0.0.1:{port}", "--web.enable-remote-write-receiver"],
                            stdout=open(tmp / "prom.out", "w"), stderr=open(tmp / "prom.err", "w"))

    def query(promql):
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())["data"]["result"]
        except OSError:
            return None

    try:
        wait_for("Prometheus to answer", lambda: query("1") is not None)
        url = f"http://127.0.0.1:{port}/api/v1/write"
        rec = subprocess.run([BINARY, "record", "--db", "run.db", "--duration", "3s", "--interval", "250ms",
                              "--remote-write-interval", "250ms", "--remote-write", url,
                              "--remote-write-queue", str(tmp / "queue")],
                             env=env_for(tmp), cwd=tmp, capture_output=True, text=True, timeout=60)
        assert rec.returncode == 0, rec.stderr
        sent, rest = summary_counts(rec.stderr, url)
        assert "queued" not in rest and "refused" not in rest, rec.stderr
        db = sqlite3.connect(tmp / "run.db")
        run_id, = db.execute("SELECT run_id FROM runs").fetchone()
        ticks = sorted(t for t, in db.execute("SELECT ts_ms FROM gpu_samples WHERE gpu_index = 0"))
        power = wait_for("the run in Prometheus", lambda: query('wattscope_gpu_power_watts{gpu="0"}[5m]'))
        assert len(power) == 1 and power[0]["metric"]["run_id"] == run_id
        stamps = [round(float(t) * 1000) for t, _ in power[0]["values"]]
        # Prometheus leaves the staleness marker out of a range: what remains is every tick the run took.
        assert set(stamps) <= set(ticks) and len(stamps) >= len(ticks) - 2, (stamps, ticks)
        assert {float(v) for _, v in power[0]["values"]} == {POWER_W[0]}
        # The run is over: its series are stale at once, not for Prometheus' 5-minute lookback.
        assert query("wattscope_gpu_power_watts") == []
        info = query("wattscope_run_info")
        assert info == [] or all(i["metric"]["run_id"] == run_id for i in info)
        total = sum(len(s["values"]) for s in query('{run_id="%s"}[5m]' % run_id))
        ends = len({(s["metric"]["__name__"], tuple(sorted(s["metric"].items())))
                    for s in query('{run_id="%s"}[5m]' % run_id)})
        assert total == sent - ends, (total, sent, ends)  # every sample but the staleness markers, one per series
    finally:
        prom.terminate()
        prom.wait(timeout=30)


class FlakyReceiver:
    """A receiver in front of a real one: it checks the bearer token and the remote-write headers, and answers as
    told ("forward", "500", "hang": holds the request 30 s, longer than wattscope's --remote-write-timeout)."""

    def __init__(self, upstream, token):
        self.mode, self.seen, self.bad_headers = "forward", {}, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                mode = outer.mode
                outer.seen[mode] = outer.seen.get(mode, 0) + 1
                want = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
                        "X-Prometheus-Remote-Write-Version": "0.1.0", "Authorization": f"Bearer {token}"}
                if any(self.headers.get(k) != v for k, v in want.items()):
                    outer.bad_headers.append(dict(self.headers))
                    self.send_response(401)
                    self.end_headers()
                    return
                if mode == "hang":
                    time.sleep(30)
                    return
                if mode == "500":
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b"busy")
                    return
                req = urllib.request.Request(upstream, data=body, method="POST", headers={
                    k: self.headers[k] for k in ("Content-Encoding", "Content-Type",
                                                 "X-Prometheus-Remote-Write-Version")})
                try:
                    with urllib.request.urlopen(req, timeout=10) as r:
                        status = r.status
                except urllib.error.HTTPError as e:
                    status = e.code
                self.send_response(status)
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/v1/write"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def test_an_outage_a_500_and_a_hang_lose_nothing(tmp, procs):
    vm1, vm2 = Victoria(tmp, "vm1"), Victoria(tmp, "vm2")
    procs += [vm1, vm2]
    token = "t0ken-for-the-receiver-0123456789"
    (tmp / "token").write_text(token + "\n")
    os.chmod(tmp / "token", 0o600)
    flaky = FlakyReceiver(vm2.write_url, token)
    rec = subprocess.Popen([BINARY, "record", "--db", "run.db", "--interval", "200ms", "--remote-write-interval",
                            "200ms", "--remote-write", vm1.write_url, "--remote-write", flaky.url,
                            "--remote-write-bearer-token-file", str(tmp / "token"), "--remote-write-timeout", "1s",
                            "--remote-write-queue", str(tmp / "queue")],
                           env=env_for(tmp), cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        vm1.stop()  # down for 60 s while the run goes on
        down_from = time.time() * 1000
        flaky.mode = "500"
        time.sleep(4)
        flaky.mode = "hang"
        time.sleep(4)
        flaky.mode = "forward"
        time.sleep(52)
        down_until = time.time() * 1000
        vm1.start()
        time.sleep(4)
    finally:
        rec.send_signal(signal.SIGTERM)
        _, err = rec.communicate(timeout=60)
        flaky.close()
    assert rec.returncode == 0, err
    assert flaky.bad_headers == [] and flaky.seen.get("500", 0) >= 1 and flaky.seen.get("hang", 0) >= 1, flaky.seen
    assert "batches wait in" in err and "answering again" in err, err

    db = sqlite3.connect(tmp / "run.db")
    ticks = [t for t, in db.execute("SELECT ts_ms FROM gpu_samples WHERE gpu_index = 0 ORDER BY ts_ms")]
    skipped, = db.execute("SELECT COUNT(*) FROM events WHERE kind = 'source-late'").fetchone()
    for vm, url in ((vm1, vm1.write_url), (vm2, flaky.url)):
        sent, rest = summary_counts(err, url)
        assert "queued" not in rest and "dropped" not in rest and "refused" not in rest, err
        stored = wait_for(f"every sample in {url}", lambda: (lambda e: e if sum(
            len(s["values"]) for s in e) == sent else None)(vm.export('{__name__=~".+"}')), timeout=30)
        power = next(s for s in stored if s["metric"]["__name__"] == "wattscope_gpu_power_watts" and
                     s["metric"]["gpu"] == "0")
        stamps = power["timestamps"][:-1]
        # Once each, in order, only frames the run recorded, and the frames of the outage among them.
        assert stamps == sorted(set(stamps)) and set(stamps) <= set(ticks)
        assert len(stamps) >= 0.95 * len(ticks) - skipped, (len(stamps), len(ticks))
        during = [t for t in ticks if down_from < t < down_until]
        assert len(during) > 250 and len([t for t in stamps if down_from < t < down_until]) >= 0.95 * len(during)
        assert set(power["values"][:-1]) == {POWER_W[0]}


def test_https_with_a_private_ca_and_basic_auth(tmp, procs):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp / "key.pem"), "-out",
                    str(tmp / "cert.pem")], check=True, capture_output=True)
    vm = Victoria.__new__(Victoria)
    vm.dir, vm.port, vm.proc = tmp / "vmtls", free_port(), None
    vm.extra = ["-tls", f"-tlsCertFile={tmp}/cert.pem", f"-tlsKeyFile={tmp}/key.pem", "-httpAuth.username=ws",
                "-httpAuth.password=s3cret-pass"]
    vm.scheme, vm.ctx = "https", ssl.create_default_context(cafile=str(tmp / "cert.pem"))
    import base64
    vm.auth = "Basic " + base64.b64encode(b"ws:s3cret-pass").decode()
    vm.start()
    procs.append(vm)
    for name, password in (("good", "s3cret-pass"), ("bad", "wrong")):
        (tmp / name).write_text(password + "\n")
        os.chmod(tmp / name, 0o600)
    base = [BINARY, "record", "--no-db", "--duration", "2s", "--interval", "250ms", "--remote-write", vm.write_url,
            "--remote-write-ca-file", str(tmp / "cert.pem"), "--remote-write-user", "ws",
            "--remote-write-queue", str(tmp / "queue")]
    ok = subprocess.run(base + ["--remote-write-password-file", str(tmp / "good")], env=env_for(tmp), cwd=tmp,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    sent, rest = summary_counts(ok.stderr, vm.write_url)
    assert sent > 0 and rest == "", ok.stderr
    wait_for("the samples over https", lambda: sum(len(s["values"]) for s in vm.export('{__name__=~".+"}')) == sent)
    # A wrong password: the receiver refuses every batch for good (401); they are dropped and said, not retried.
    bad = subprocess.run(base + ["--remote-write-password-file", str(tmp / "bad")], env=env_for(tmp), cwd=tmp,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 0, bad.stderr
    sent, rest = summary_counts(bad.stderr, vm.write_url)
    assert sent == 0 and re.search(r"\d+ refused by the receiver", rest) and "HTTP 401" in bad.stderr, bad.stderr
    assert "queued" not in rest


def test_bad_remote_write_flags_are_usage_errors_that_name_the_flag(tmp_path):
    (tmp_path / "loose").write_text("s3cret\n")
    os.chmod(tmp_path / "loose", 0o666)
    env = env_for(tmp_path)
    url = "http://127.0.0.1:9/api/v1/write"
    for args, said in ((["--remote-write", "ftp://x/api/v1/write"], "expected an http:// or https:// URL"),
                       (["--remote-write", url, "--remote-write", url], "is given twice"),
                       (["--external-label", "cluster=a"], "need --remote-write URL"),
                       (["--remote-write", url, "--external-label", "__name__=x"], "reserves"),
                       (["--remote-write", url, "--external-label", "cluster"], "is not NAME=VALUE"),
                       (["--remote-write", url, "--remote-write-queue-max", "12 parsecs"], "--remote-write-queue-max"),
                       (["--remote-write", url, "--remote-write-user", "ws"], "go together"),
                       (["--remote-write", url, "--remote-write-user", "ws", "--remote-write-password-file",
                         str(tmp_path / "loose")], "--remote-write-password-file"),
                       (["--remote-write", url, "--remote-write-interval", "5ms"], "--remote-write-interval")):
        r = subprocess.run([BINARY, "record", "--db", "never.db", "--duration", "1s", *args], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and said in r.stderr, (args, r.stderr)
        assert "terminate" not in r.stderr and not (tmp_path / "never.db").exists()
