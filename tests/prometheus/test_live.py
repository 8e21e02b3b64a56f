"""The Prometheus side against the real thing: Debian's Prometheus scraping a real `wattscope serve` (fake NVML at the
hardware boundary), and Alertmanager's amtool reading the configuration docs/alerts.md tells users to write.

- serve answers a scrape that asks for OpenMetrics (Prometheus does, first) with OpenMetrics text, which Prometheus
  ingests: `_created` samples, NVLink as counters, two link-width families, the exporter's process metrics, `host`
  on the sampler families.
- A GPU that stops answering: serve drops its series, Prometheus marks them stale, and an alert on them resolves at
  the next evaluation, seconds after the GPU is lost (docs/alerts.md, deploy/alerts.yml), not 5 minutes later.
Everything lives in the test's temporary directory; it takes about 20 s."""

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

BINARY = os.path.abspath(os.environ["WATTSCOPE_BINARY"])
FAKE_NVML = os.path.abspath(os.environ["WATTSCOPE_FAKE_NVML"])
PROMETHEUS = os.environ.get("WATTSCOPE_PROMETHEUS", "/usr/bin/prometheus")
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# What Prometheus 2.x sends: OpenMetrics first, the 0.0.4 text as a fallback.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, headers=None, timeout=5):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.headers.get("Content-Type", ""), r.read().decode()


def wait_for(what, check, timeout=20.0, every=0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


def device(uuid, bus, **extra):
    metrics = {"power_instant_mw": 250000, "energy_mj": {"linear": [1000000, 25000]}, "temp_gpu": 64,
               "util_gpu": 50, "mem_used_bytes": 1 << 30, "mem_total_bytes": 80 << 30, "pcie_width": 8,
               "pcie_width_max": 16, "nvlink_tx_kib": {"linear": [1000000, 50]},
               "nvlink_rx_kib": {"linear": [2000000, 30]}}
    return {"name": "NVIDIA H100 80GB HBM3", "uuid": uuid, "pci_bus_id": bus, "metrics": metrics, **extra}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if not os.path.exists(PROMETHEUS):
        pytest.skip(f"{PROMETHEUS} is not installed (Debian: prometheus; scripts/setup.sh --tests)")
    tmp = tmp_path_factory.mktemp("prom")
    procs = []
    # GPU 1 answers for its first ticks, then is lost (NVML's GPU_IS_LOST), as a GPU that falls off the bus.
    with open(tmp / "scenario.json", "w") as f:
        json.dump({"devices": [device("GPU-live-0", "00000000:3B:00.0"),
                               device("GPU-live-1", "00000000:5E:00.0", lost_at_tick=40)]}, f)
    serve_port = free_port()
    env = dict(os.environ, WATTSCOPE_NVML_LIBRARY=FAKE_NVML, WATTSCOPE_FAKE_NVML_SCENARIO=str(tmp / "scenario.json"),
               WATTSCOPE_CGROUP_ROOT="none", HOME=str(tmp))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    serve = subprocess.Popen([BINARY, "serve", "--listen", f"127.0.0.1:{serve_port}", "--interval", "200ms"],
                             env=env, cwd=tmp, stdout=open(tmp / "serve.out", "w"), stderr=open(tmp / "serve.err", "w"))
    procs.append(serve)
    # A probe rule that fires on every GPU's temperature series at once: it resolves only when a series is gone.
    (tmp / "rules.yml").write_text("groups:\n  - name: probe\n    rules:\n      - alert: probe_temperature\n"
                                   "        expr: wattscope_gpu_temperature_celsius > 0\n")
    prom_port = free_port()
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{tmp}/rules.yml']\n"
        f"scrape_configs:\n  - job_name: wattscope\n    static_configs: [{{targets: ['127.0.0.1:{serve_port}']}}]\n")
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/data",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            cwd=tmp, stdout=open(tmp / "prom.out", "w"), stderr=open(tmp / "prom.err", "w"))
    procs.append(prom)
    t0 = time.monotonic()
    try:
        yield {"serve": serve_port, "prom": prom_port, "tmp": tmp, "t0": t0}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def query(world, promql):
    try:
        _, body = get(world["prom"], "/api/v1/query?query=" + urllib.parse.quote(promql))
    except OSError:
        return []
    return json.loads(body)["data"]["result"]


def test_serve_answers_openmetrics_to_a_scrape_that_asks_and_prometheus_ingests_it(world):
    port = world["serve"]
    wait_for("serve", lambda: os.path.exists(world["tmp"] / "serve.err") and
             "serving on" in (world["tmp"] / "serve.err").read_text())
    ctype, body = wait_for("the GPUs in /metrics", lambda: (lambda r: r if "nvlink_transmit" in r[1] else None)(
        get(port, "/metrics", {"Accept": PROMETHEUS_ACCEPT})))
    assert ctype.startswith("application/openmetrics-text; version=1.0.0"), ctype
    assert body.endswith("# EOF\n"), body[-200:]
    assert "# TYPE wattscope_gpu_energy_joules counter\n" in body
    assert re.search(r'^wattscope_gpu_energy_joules_created\{gpu="0",[^}]*\} \d+\.\d{3}$', body, re.M), body
    assert "# TYPE wattscope_build info\n" in body
    assert "# TYPE wattscope_gpu_nvlink_transmit_bytes counter\n" in body
    # Without asking, the 0.0.4 text as before.
    ctype, plain = get(port, "/metrics")
    assert ctype.startswith("text/plain; version=0.0.4"), ctype
    assert "# EOF" not in plain and "_created" not in plain
    assert "# TYPE wattscope_gpu_energy_joules_total counter\n" in plain

    prom = world
    up = wait_for("Prometheus to scrape serve", lambda: query(prom, 'up{job="wattscope"} == 1'), timeout=30)
    assert up
    targets = json.loads(get(prom["prom"], "/api/v1/targets")[1])["data"]["activeTargets"]
    assert targets and targets[0]["health"] == "up" and targets[0]["lastError"] == "", targets
    # _created only exists in OpenMetrics: Prometheus read serve's answer as such.
    assert wait_for("the _created series", lambda: query(prom, "wattscope_gpu_energy_joules_created"))
    names = {s["metric"]["__name__"] for s in query(prom, '{job="wattscope"}')}
    for want in ("wattscope_gpu_nvlink_transmit_bytes_total", "wattscope_gpu_nvlink_receive_bytes_total",
                 "wattscope_gpu_pcie_link_width", "wattscope_gpu_pcie_link_width_max", "process_cpu_seconds_total",
                 "process_resident_memory_bytes", "process_start_time_seconds", "wattscope_sampler_ticks_total"):
        assert want in names, (want, sorted(names))
    assert "wattscope_gpu_nvlink_transmit_bytes_per_second" not in names
    width = query(prom, 'wattscope_gpu_pcie_link_width{gpu="0"}')
    assert width and "kind" not in width[0]["metric"] and width[0]["value"][1] == "8", width
    assert query(prom, 'wattscope_gpu_pcie_link_width_max{gpu="0"}')[0]["value"][1] == "16"
    assert query(prom, 'wattscope_sampler_ticks_total{host!=""}'), "the sampler families carry host"
    assert query(prom, 'wattscope_history_bytes{host!=""}')
    # The exporter started before Prometheus asked; its start time is this machine's clock's, in seconds.
    start = float(query(prom, "process_start_time_seconds")[0]["value"][1])
    assert abs(start - time.time()) < 600, start
    # NVLink as a counter: rate() over the scrapes sees every KiB the fake counts (50 KiB a call, a call a tick).
    rate = wait_for("a rate of the NVLink counter",
                    lambda: query(prom, 'rate(wattscope_gpu_nvlink_transmit_bytes_total{gpu="0"}[5s]) > 0'))
    assert float(rate[0]["value"][1]) > 0


def test_an_alert_on_a_lost_gpus_series_resolves_at_the_next_evaluation(world):
    prom = world
    wait_for("the probe alert on GPU 1", lambda: query(prom, 'ALERTS{alertname="probe_temperature",gpu="1"}'),
             timeout=30)
    lost = wait_for("GPU 1 lost", lambda: query(prom, 'wattscope_gpu_up{gpu="1"} == 0'), timeout=60, every=0.05)
    assert lost
    t_lost = time.monotonic()
    wait_for("the alert to resolve", lambda: not query(prom, 'ALERTS{alertname="probe_temperature",gpu="1"}'),
             timeout=60, every=0.05)
    took = time.monotonic() - t_lost
    # Staleness markers: within a scrape and an evaluation (1 s each here), never the 5-minute lookback.
    assert took < 10, f"resolved {took:.1f} s after the GPU was lost"
    assert query(prom, 'ALERTS{alertname="probe_temperature",gpu="0"}'), "the GPU that answers still fires"
    assert not query(prom, 'wattscope_gpu_temperature_celsius{gpu="1"}'), "the lost GPU's series is stale"


def test_the_inhibit_rule_docs_alerts_md_gives_is_valid_alertmanager_configuration(tmp_path):
    amtool = shutil.which("amtool")
    if not amtool:
        pytest.skip("amtool is not installed (Debian: prometheus-alertmanager)")
    text = open(os.path.join(SOURCE_DIR, "docs", "alerts.md")).read()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "inhibit_rules:" in b]
    assert blocks, "docs/alerts.md shows no inhibit rule"
    for block in blocks:
        indent = min(len(line) - len(line.lstrip()) for line in block.splitlines() if line.strip())
        body = "\n".join(line[indent:] for line in block.splitlines())
        config = tmp_path / "alertmanager.yml"
        config.write_text("route: {receiver: default}\nreceivers: [{name: default}]\n" + body + "\n")
        r = subprocess.run([amtool, "check-config", str(config)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "inhibit rules: 1" in r.stdout.lower().replace("  ", " ") or "SUCCESS" in r.stdout, r.stdout
