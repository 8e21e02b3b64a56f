"""deploy/grafana-dashboard.json (issue 18): its structure, and every query it makes evaluated against a real
Prometheus scraping real `wattscope serve` processes, one host with (simulated) GPUs and one without NVML
(world.py). Template variables are resolved the way Grafana's Prometheus data source does: `label_values(...)`
through Prometheus's label API, `All` as the regex of every value, multi-values as `(a|b)` with regex characters
escaped."""

import json
import math
import os
import re
import tempfile
import time

import pytest

import world

DASHBOARD_PATH = os.path.join(world.SOURCE_DIR, "deploy", "grafana-dashboard.json")

# NVML's clock-event (throttle) reason bits, nvmlClocksEventReason* in nvml.h, and the reason label serve gives each
# (issue 32: wattscope_gpu_throttle_active, one series per reason).
NVML_REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clock_setting": 0x100,
}

# Grafana's JSON model version (the dashboard's schemaVersion) of each release line: what a dashboard exported by that
# release carries, and the oldest release that imports it without migrating it.
GRAFANA_SCHEMA = {"9.2": 37, "9.3": 37, "9.4": 37, "10.0": 38, "10.1": 38, "10.2": 38}

# Grafana's own variables, with what a 6-hour view of a 1-second-scraped Prometheus would give them.
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "6h", "__range_s": "21600", "__range_ms": "21600000"}


def load(path=DASHBOARD_PATH):
    with open(path) as f:
        return json.load(f)


def all_panels(dash):
    """Every panel, rows included, with the panels of collapsed rows."""
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def queries(dash):
    """(panel, target) for every target with an expression."""
    return [(p, t) for p in all_panels(dash) if p["type"] != "row" for t in p.get("targets", []) if t.get("expr")]


def gpu_only(expr):
    """A query on GPU metrics alone may be empty on a host without GPUs."""
    names = set(re.findall(r"\bwattscope_[a-z_]+", expr))
    return bool(names) and all(n.startswith("wattscope_gpu_") for n in names)


# ---------------------------------------------------------------------------------------------------- structure


def test_four_rows_and_at_least_eighteen_panels():
    dash = load()
    rows = [p for p in dash["panels"] if p["type"] == "row"]
    assert len(rows) == 4, [r["title"] for r in rows]
    others = [p for p in all_panels(dash) if p["type"] != "row"]
    assert len(others) >= 18
    # Each row holds something: no two rows back to back, none at the end.
    kinds = [p["type"] for p in dash["panels"]]
    assert kinds[0] == "row" and kinds[-1] != "row"
    assert all(not (a == "row" and b == "row") for a, b in zip(kinds, kinds[1:]))


def test_ids_are_unique_and_panels_sit_on_the_grid_without_overlapping():
    panels = all_panels(load())
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), ids
    cells = {}
    for p in panels:
        g = p["gridPos"]
        assert set(g) >= {"x", "y", "w", "h"}, p["title"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["y"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def test_every_panel_has_thresholds_and_every_time_series_draws_them():
    for p in all_panels(load()):
        if p["type"] == "row":
            continue
        th = p["fieldConfig"]["defaults"].get("thresholds")
        assert th and th.get("steps"), f"{p['title']} has no thresholds"
        assert th["steps"][0]["value"] is None, f"{p['title']}: the first step is the base (value null)"
        values = [s["value"] for s in th["steps"][1:]]
        assert values == sorted(values) and all(isinstance(v, (int, float)) for v in values), p["title"]
        if p["type"] == "timeseries":
            assert len(th["steps"]) >= 2, f"{p['title']}: a threshold beside the base"
            style = p["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"]
            assert style != "off", f"{p['title']} hides its thresholds"


def color_at(panel, value):
    color = None
    for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]:
        if s["value"] is None or value >= s["value"]:
            color = s["color"]
    return color


def test_gpu_utilisation_busy_is_green_idle_is_not():
    util = [p for p in all_panels(load()) if p.get("targets")
            and any(t["expr"].startswith("wattscope_gpu_utilization_ratio") for t in p["targets"])]
    assert len(util) >= 2  # the gauge and the time series
    for p in util:
        assert color_at(p, 0.97) == "green", p["title"]
        assert color_at(p, 0.02) not in ("green", None), p["title"]


def test_the_data_source_is_an_import_input():
    dash = load()
    inputs = dash["__inputs"]
    assert [(i["name"], i["type"], i["pluginId"]) for i in inputs] == [("DS_PROMETHEUS", "datasource", "prometheus")]
    want = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    for p in all_panels(dash):
        if p["type"] == "row":
            continue
        assert p["datasource"] == want, p["title"]
        for t in p["targets"]:
            assert t.get("datasource", want) == want, (p["title"], t["refId"])
    for v in dash["templating"]["list"]:
        assert v["type"] == "query" and v["datasource"] == want, v["name"]
    # No leftover data-source variable or hard-coded data source uid anywhere.
    text = json.dumps(dash)
    assert "${datasource}" not in text


def test_host_comes_from_a_metric_every_host_exports():
    variables = {v["name"]: v for v in load()["templating"]["list"]}
    host = variables["host"]["query"]
    assert re.fullmatch(r"label_values\((wattscope_run_info|wattscope_build_info)\s*,\s*host\)", host), host
    assert variables["host"]["includeAll"] and variables["host"]["multi"]
    assert "$host" in variables["gpu"]["query"]


def test_every_legend_names_the_host_and_every_query_filters_by_it():
    for p, t in queries(load()):
        assert 'host=~"$host"' in t["expr"], (p["title"], t["refId"])
        if t.get("format") == "table":
            continue  # a table shows the host as a column
        assert "{{host}}" in t.get("legendFormat", ""), (p["title"], t["refId"])


def test_there_are_panels_for_gpu_up_unit_power_and_firing_alerts():
    exprs = " ".join(t["expr"] for _, t in queries(load()))
    for metric in ("wattscope_gpu_up", "wattscope_unit_power_watts", "wattscope_alerts_firing"):
        assert metric in exprs
    # Issue 32: no query decodes bits with floor(x/2^k)%2; serve exports one series per reason.
    for p, t in queries(load()):
        assert "wattscope_gpu_throttle_reasons" not in t["expr"] and "floor(" not in t["expr"], t["expr"]


def test_each_throttle_reason_has_its_row():
    seen = set()
    for p, t in queries(load()):
        m = re.search(r"wattscope_gpu_throttle_active\{[^}]*reason=\"(\w+)\"", t["expr"])
        if m:
            seen.add(m.group(1))
    assert seen == set(NVML_REASON_BITS)


def test_schema_version_is_the_required_grafanas():
    """Issue 32.8: __requires names the Grafana whose JSON model schemaVersion is (38 is Grafana 10's, 9.4 wrote 37),
    and every panel type it lists is one the dashboard uses."""
    dash = load()
    [grafana] = [r for r in dash["__requires"] if r["type"] == "grafana"]
    major_minor = ".".join(grafana["version"].split(".")[:2])
    assert GRAFANA_SCHEMA[major_minor] == dash["schemaVersion"], (grafana["version"], dash["schemaVersion"])
    used = {p["type"] for p in all_panels(dash) if p["type"] != "row"}
    assert {r["id"] for r in dash["__requires"] if r["type"] == "panel"} == used


# ---------------------------------------------------------------------------------------------------- a real fleet


@pytest.fixture(scope="module")
def fleet():
    with tempfile.TemporaryDirectory(prefix="wattscope-grafana-") as tmp:
        f = world.Fleet(tmp)
        try:
            f.start()
            f.wait_until_scraped()
            yield f
        except Exception:
            print(f.serve_errors())
            raise
        finally:
            f.stop()


def regex_escape(value):
    """Grafana's prometheusSpecialRegexEscape: inside a PromQL string, a regex character needs two backslashes."""
    return re.sub(r"([\\$^*{}\[\]'+?.()|])", r"\\\\\1", value)


class Grafana:
    """Resolves the dashboard's variables for a selection and runs its queries, as Grafana would."""

    def __init__(self, fleet, dash):
        self.fleet = fleet
        self.dash = dash
        self.variables = {v["name"]: v for v in dash["templating"]["list"]}

    def interpolate(self, text, values):
        def sub(m):
            name = m.group(1) or m.group(2)
            if name in BUILTINS:
                return BUILTINS[name]
            if name not in values:
                raise AssertionError(f"unknown variable ${name} in {text}")
            vs = [regex_escape(v) for v in values[name]]
            return vs[0] if len(vs) == 1 else "(" + "|".join(vs) + ")"

        return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", sub, text)

    def options(self, name, values):
        """A variable's options: label_values(SELECTOR, LABEL) through /api/v1/label/LABEL/values?match[]=."""
        q = self.interpolate(self.variables[name]["query"], values)
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q)
        assert m, f"${name}: only label_values(selector, label) is resolved here: {q}"
        now = time.time()
        return self.fleet.api(f"/api/v1/label/{m.group(2)}/values", **{"match[]": m.group(1), "start": now - 3600,
                                                                        "end": now})

    def select(self, **chosen):
        """Values for each variable in order: the chosen list, or every option (All)."""
        values = {}
        for v in self.dash["templating"]["list"]:
            if v["type"] == "datasource":  # a data-source picker (the dashboard before __inputs): not in queries
                values[v["name"]] = [v["query"]]
                continue
            values[v["name"]] = chosen.get(v["name"]) or self.options(v["name"], values)
        return values

    def run(self, target, values):
        expr = self.interpolate(target["expr"], values)
        if target.get("instant"):
            result = self.fleet.api("/api/v1/query", query=expr)["result"]
            series = [(r["metric"], [r["value"]]) for r in result]
        else:
            now = time.time()
            result = self.fleet.api("/api/v1/query_range", query=expr, start=now - 30, end=now, step=2)["result"]
            series = [(r["metric"], r["values"]) for r in result]
        return expr, [(labels, pts) for labels, pts in series if any(math.isfinite(float(v)) for _, v in pts)]


def check_selection(grafana, hosts, values, gpu_less):
    """Failures of every query for a selection: empty where data must be, a host outside the selection, or a
    host missing. gpu_less: hosts of the selection whose GPU queries may be empty."""
    failures = []
    for panel, target in queries(grafana.dash):
        expr, series = grafana.run(target, values)
        where = f"{panel['title']} [{target['refId']}] {expr}"
        got = {labels.get("host") for labels, _ in series}
        expected = set(hosts) - (set(gpu_less) if gpu_only(target["expr"]) else set())
        if None in got:
            failures.append(f"{where}: a series without a host label")
        if got - set(hosts):
            failures.append(f"{where}: series of unselected hosts {sorted(got - set(hosts))}")
        if expected - got:
            failures.append(f"{where}: no data for {sorted(expected - got)}")
    return failures


def test_every_host_is_selectable(fleet):
    g = Grafana(fleet, load())
    assert sorted(g.options("host", {})) == sorted([world.GPU_HOST, world.CPU_HOST])
    assert g.options("gpu", {"host": [world.GPU_HOST, world.CPU_HOST]}) == ["0", "1", "2", "3"]
    assert g.options("gpu", {"host": [world.CPU_HOST]}) == []


def test_every_query_has_data_for_the_whole_fleet(fleet):
    g = Grafana(fleet, load())
    values = g.select()  # All hosts, all GPUs
    assert values["host"] == sorted(values["host"]) and len(values["host"]) == 2
    failures = check_selection(g, values["host"], values, gpu_less=[world.CPU_HOST])
    assert not failures, "\n" + "\n".join(failures) + "\n" + fleet.serve_errors()


def test_every_query_has_data_for_the_gpu_host_alone(fleet):
    g = Grafana(fleet, load())
    values = g.select(host=[world.GPU_HOST])
    failures = check_selection(g, [world.GPU_HOST], values, gpu_less=[])
    assert not failures, "\n" + "\n".join(failures)


def test_a_host_without_gpus_keeps_its_cpu_and_host_panels(fleet):
    g = Grafana(fleet, load())
    values = g.select(host=[world.CPU_HOST])
    assert values["gpu"] == []  # Grafana's All of no value: "()", which matches no GPU series
    failures = check_selection(g, [world.CPU_HOST], values, gpu_less=[world.CPU_HOST])
    assert not failures, "\n" + "\n".join(failures)
    # Not vacuous: most panels are about the host, not its GPUs.
    assert sum(not gpu_only(t["expr"]) for _, t in queries(g.dash)) >= 8


def test_one_gpu_selected_narrows_every_gpu_query(fleet):
    g = Grafana(fleet, load())
    values = g.select(host=[world.GPU_HOST], gpu=["3"])
    for panel, target in queries(g.dash):
        if "$gpu" not in target["expr"]:
            continue
        _, series = g.run(target, values)
        assert series, (panel["title"], target["refId"])
        assert {labels.get("gpu") for labels, _ in series} == {"3"}, (panel["title"], target["refId"])


def test_throttle_reasons_decode_the_mask(fleet):
    """The reasons' series, weighted by NVML's bits, add up to the raw mask, GPU by GPU: the names fit the bits."""
    g = Grafana(fleet, load())
    values = g.select(host=[world.GPU_HOST])
    # One evaluation time for the mask and every bit, so they see the same sample.
    at = time.time()
    raw = {r["metric"]["gpu"]: int(float(r["value"][1])) for r in fleet.api(
        "/api/v1/query", query=f'wattscope_gpu_throttle_reasons{{host="{world.GPU_HOST}"}}', time=at)["result"]}
    assert sorted(raw) == ["0", "1", "2", "3"]
    summed = {gpu: 0 for gpu in raw}
    reasons = {}
    for panel, target in queries(g.dash):
        if "wattscope_gpu_throttle_active" not in target["expr"]:
            continue
        expr = g.interpolate(target["expr"], values)
        for r in fleet.api("/api/v1/query", query=expr, time=at)["result"]:
            bit = float(r["value"][1])
            assert bit in (0.0, 1.0), (expr, r)
            reason = r["metric"]["reason"]
            summed[r["metric"]["gpu"]] += int(bit) * NVML_REASON_BITS[reason]
            reasons[(r["metric"]["gpu"], reason)] = bit
    assert summed == raw
    # The training scenario's GPU 3 idles the whole time (the GPU-idle bit), and is never power-capped.
    assert reasons[("3", "gpu_idle")] == 1.0
    assert reasons[("3", "sw_power_cap")] == 0.0


def test_unit_power_shows_the_slurm_job_and_the_pod_on_each_host(fleet):
    g = Grafana(fleet, load())
    values = g.select()
    [(panel, target)] = [(p, t) for p, t in queries(g.dash) if "wattscope_unit_power_watts" in t["expr"]]
    _, series = g.run(target, values)
    units = {(labels["host"], labels["unit"]) for labels, _ in series}
    for host in (world.GPU_HOST, world.CPU_HOST):
        assert (host, "slurm job 4242") in units
        assert (host, "pod 6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f") in units
    # On the GPU host the job runs GPUs 0 and 1 of the simulation: hundreds of watts, not a CPU share.
    job = [pts for labels, pts in series if labels == {"host": world.GPU_HOST, "unit": "slurm job 4242",
                                                       "unit_kind": "slurm-job"}]
    assert job and float(job[0][-1][1]) > 100


def test_alerts_panels_count_and_list_the_firing_rules(fleet):
    g = Grafana(fleet, load())
    values = g.select()
    firing = fleet.instant("wattscope_alerts_firing")
    per_host = {}
    for r in firing:
        per_host[r["metric"]["host"]] = per_host.get(r["metric"]["host"], 0) + 1
    assert per_host == {world.GPU_HOST: 2, world.CPU_HOST: 1}  # GPU 3 idle + the package on both
    for panel, target in queries(g.dash):
        if "wattscope_alerts_firing" not in target["expr"]:
            continue
        _, series = g.run(target, values)
        if target.get("format") == "table":
            assert sorted((s["host"], s["rule"]) for s, _ in series) == sorted(
                (r["metric"]["host"], r["metric"]["rule"]) for r in firing)
        else:
            assert {s["host"]: float(p[-1][1]) for s, p in series} == per_host


def test_the_check_sees_an_empty_query_and_a_missing_host_filter(fleet):
    """The checks above can fail: a misspelt metric is empty, and a query that ignores $host leaks other hosts."""
    dash = load()
    dash["panels"] = [
        {"type": "timeseries", "title": "misspelt", "targets": [
            {"refId": "A", "expr": 'wattscope_gpu_power_wats{host=~"$host", gpu=~"$gpu"}'}]},
        {"type": "timeseries", "title": "no host filter", "targets": [
            {"refId": "A", "expr": "wattscope_cpu_utilization_ratio"}]},
        {"type": "timeseries", "title": "host aggregated away", "targets": [
            {"refId": "A", "expr": 'sum(wattscope_cpu_utilization_ratio{host=~"$host"})'}]},
    ]
    g = Grafana(fleet, dash)
    values = g.select(host=[world.GPU_HOST])
    failures = check_selection(g, [world.GPU_HOST], values, gpu_less=[])
    assert any(f.startswith("misspelt") and "no data" in f for f in failures), failures
    assert any(f.startswith("no host filter") and "unselected hosts" in f for f in failures), failures
    assert any(f.startswith("host aggregated away") and "without a host label" in f for f in failures), failures
