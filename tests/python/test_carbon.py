"""Carbon and cost against the real binary: stand-in GPUs at a constant 200 W and 100 W, so every figure has a hand
computation. An intensity file that changes in the middle of a run, a phase and a window across the change, the
shipped country table, the configuration file; runs started hot and cold compared; a repeat with cool-downs timed
against a GPU whose temperature the test sets (the stand-in reads it from a file, as a thermal chamber would)."""

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

from conftest import BINARY, PYTHON, SOURCE_DIR, World

sys.path.insert(0, os.path.join(SOURCE_DIR, "python"))
import wattscope  # noqa: E402

WATTS = 300.0  # the two stand-in GPUs together


def store(world):
    return wattscope.open(os.path.join(world.path, "wattscope.db"))


def latest(world, task):
    """show --json of the task's latest run."""
    run = max(store(world).runs(task=task), key=lambda r: r.start_ms)
    return world.show(run.run_id)


def samples(world, run_id):
    """(ts_ms of the first sample, of the last): the stretch the run's energy was counted over."""
    ts = [r["ts_ms"] for r in store(world).samples(run_id, "gpu0")]
    return min(ts), max(ts)


def test_grams_follow_the_hour_the_run_ran_in(steady_world):
    w = steady_world
    # The grid changes 3 s from now, well inside the run however long wattscope takes to start: 100 g/kWh before,
    # 400 after (and a row long before, as a provider's file has), in a zone other than UTC. The program times its
    # phase to straddle the change and its window to fall after it.
    change_ms = int(time.time() * 1000) + 3000
    cet = timezone(timedelta(hours=1))
    rows = [(change_ms - 7_200_000, 100.0), (change_ms, 400.0)]
    grid = w.file("grid.csv", "timestamp,g_per_kwh\n" + "".join(
        f"{datetime.fromtimestamp(t / 1000, tz=cet).isoformat(timespec='milliseconds')},{g}\n" for t, g in rows))
    script = f"""
import time, wattscope
def until(ms):
    time.sleep(max(0.0, ms / 1000 - time.time()))
until({change_ms} - 800)
with wattscope.phase("across"):
    until({change_ms} + 800)
with wattscope.measure("after") as m:
    time.sleep(0.5)
print("WINDOW", m.energy_j, m.carbon_g, m.cost, m.currency, m.carbon_source)
time.sleep(0.3)
"""
    r = w.run(script, "--carbon-intensity-file", grid, "--pue", "1.25", "--energy-price", "0.30", "--currency",
              "EUR", task="grid")
    run = latest(w, "grid")
    c, cost = run["carbon"], run["cost"]
    assert "grid.csv (2 steps" in c["source"] and c["assumed"] is False and c["pue"] == 1.25
    first, last = samples(w, run["run_id"])
    before = max(0, min(change_ms, last) - first) / 1000
    after = max(0, last - max(change_ms, first)) / 1000
    assert before > 0.5 and after > 1.5
    hand_g = WATTS * 1.25 / 3.6e6 * (before * 100 + after * 400)
    assert abs(c["grams"] - hand_g) <= 0.01 * hand_g, (c, hand_g)
    assert abs(c["devices"]["gpu0"] - 2 * c["devices"]["gpu1"]) <= 0.01 * c["devices"]["gpu0"]  # 200 W against 100 W
    assert abs(cost["amount"] - run["total_energy_j"] * 1.25 / 3.6e6 * 0.30) <= 1e-9 + 1e-6 * cost["amount"]
    assert cost["currency"] == "EUR"
    # The phase straddles the change: its energy at the time-weighted rate of its own stretch.
    across = next(p for p in run["phases"] if p["name"] == "across")
    t0, t1 = across["start_ms"], across["end_ms"]
    share = (min(max(change_ms, t0), t1) - t0) / (t1 - t0)
    hand_phase = across["energy_j"] * 1.25 / 3.6e6 * (share * 100 + (1 - share) * 400)
    assert abs(across["carbon_g"] - hand_phase) <= 1e-6 * hand_phase, (across, hand_phase)
    assert 0.05 < share < 0.95
    # The window, after the change: 400 g/kWh throughout, answered to the program itself.
    line = next(l for l in r.stdout.splitlines() if l.startswith("WINDOW"))
    _, energy, grams, money, currency, *source = line.split(" ")
    assert abs(float(grams) - float(energy) * 1.25 / 3.6e6 * 400) <= 1e-6 * float(grams)
    assert abs(float(money) - float(energy) * 1.25 / 3.6e6 * 0.30) <= 1e-6 * float(money)
    assert currency == "EUR" and "grid.csv" in " ".join(source)
    # show's lines say the figures and where they came from.
    text = w.wattscope("show", run["run_id"]).stdout
    assert "carbon " in text and "grid.csv (2 steps" in text and "EUR" in text
    # The reader has what show --json has.
    stored = store(w).run(run["run_id"])
    assert stored.carbon["grams"] == c["grams"] and stored.cost["currency"] == "EUR"
    # stats and compare carry them, labelled with their source.
    stats = json.loads(w.wattscope("stats", "--task", "grid", "--json").stdout)
    assert abs(stats["metrics"]["carbon_g"]["mean"] - c["grams"]) <= 1e-9 * c["grams"]
    assert "grid.csv" in stats["metrics"]["carbon_g"]["source"]
    assert abs(stats["metrics"]["cost"]["mean"] - cost["amount"]) <= 1e-9 * cost["amount"]
    assert "EUR" in stats["metrics"]["cost"]["source"]


def test_a_region_a_constant_and_the_configuration_file(steady_world):
    w = steady_world
    w.run("import time; time.sleep(0.5)", "--carbon-region", "fra", task="fr")
    fr = latest(w, "fr")["carbon"]
    assert fr["region"] == "FRA" and "France" in fr["source"] and "Our World in Data" in fr["source"]
    table = {}  # the shipped table, as the docs list it
    for line in open(os.path.join(SOURCE_DIR, "src/accounting/carbon_regions.inc")):
        if line.startswith("{"):
            code, name, year, g = json.loads("[" + line.strip().rstrip(",")[1:-1] + "]")
            table[code] = g
    assert abs(fr["g_per_kwh"] - table["FRA"]) < 1e-9
    # Read with another rate: the run's energy at it; its own charge is kept in the store.
    again = json.loads(w.wattscope("show", latest(w, "fr")["run_id"], "--json", "--carbon-intensity", "500", "--pue",
                                   "2").stdout)
    assert abs(again["carbon"]["grams"] - again["total_energy_j"] / 3.6e6 * 2 * 500) < 1e-9
    assert "--carbon-intensity" in again["carbon"]["source"]
    # Nothing given: the world's yearly figure, and it says it was assumed.
    w.run("import time; time.sleep(0.3)", task="world")
    world = latest(w, "world")["carbon"]
    assert world["assumed"] is True and world["region"] == "WRL" and "assumed" in world["source"]
    # The configuration file, under the flags.
    cfg = w.file("wattscope.toml", '[carbon]\nregion = "DEU"\npue = 1.1\n[cost]\nprice = 0.25\ncurrency = "EUR"\n')
    w.run("import time; time.sleep(0.3)", "--config", cfg, task="cfg")
    j = latest(w, "cfg")
    assert j["carbon"]["region"] == "DEU" and j["carbon"]["pue"] == 1.1 and j["cost"]["currency"] == "EUR"
    w.run("import time; time.sleep(0.3)", "--config", cfg, "--carbon-intensity", "20", task="flag")
    j = latest(w, "flag")
    assert j["carbon"]["region"] is None and abs(j["carbon"]["g_per_kwh"] - 20) < 1e-9 and j["carbon"]["pue"] == 1.1
    # Mistakes are named, before anything runs.
    bad = w.wattscope("run", "--carbon-region", "Frnce", "--", "true", check=False)
    assert bad.returncode == 125 and "FRA (France)" in bad.stderr, bad.stderr
    bad = w.wattscope("run", "--carbon-region", "FRA", "--carbon-intensity", "3", "--", "true", check=False)
    assert bad.returncode == 125 and "give one of" in bad.stderr
    w.file("bad.toml", "[carbon]\nregoin = \"FRA\"\n")
    bad = w.wattscope("run", "--config", os.path.join(w.path, "bad.toml"), "--", "true", check=False)
    assert bad.returncode == 125 and "bad.toml, line 2: unknown key 'regoin'" in bad.stderr, bad.stderr


def hot_world(tmp_path):
    """One GPU at 250 W whose temperature is the number in `temp` (the test's thermal chamber)."""
    w = World(tmp_path, constant_w=(250, 0))
    temp = w.file("temp", "70\n")
    with open(w.scenario) as f:
        s = json.load(f)
    s["devices"] = s["devices"][:1]
    s["devices"][0]["metrics"]["temp_gpu"] = {"file": temp, "default": 50}
    with open(w.scenario, "w") as f:
        json.dump(s, f)
    return w, temp


def test_runs_started_hot_and_cold_are_compared_with_a_warning(tmp_path):
    w, temp = hot_world(tmp_path)
    for task, t in (("cold", 38), ("cold", 39), ("hot", 61), ("hot", 62)):
        with open(temp, "w") as f:
            f.write(f"{t}\n")
        w.run("import time; time.sleep(0.4)", task=task)
    j = json.loads(w.wattscope("compare", "cold", "hot", "--json").stdout)
    temps = [x for x in j["warnings"] if x["kind"] == "temperature"]
    assert len(temps) == 1 and temps[0]["biased"] == "b_up", j["warnings"]
    assert temps[0]["a_mean_start_c"] == 38.5 and temps[0]["b_mean_start_c"] == 61.5
    text = w.wattscope("compare", "cold", "hot").stdout
    assert "WARNING: the runs started at GPU temperatures 24 °C apart" in text and "biased upwards" in text
    same = json.loads(w.wattscope("compare", "hot", "hot", "--json").stdout)
    assert not [x for x in same["warnings"] if x["kind"] == "temperature"]
    show = w.show(j["b"]["runs"][0])
    assert show["quality"]["gpu_temp_start_c"] == 61


def test_a_repeat_cools_down_between_runs_and_prints_the_verdict(tmp_path):
    w, temp = hot_world(tmp_path)
    # The GPU is hot; it cools to 40 C 4 s after the first run ends (the test watches the store for it).
    def cool():
        db = os.path.join(w.path, "wattscope.db")
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as c:
                    if c.execute("SELECT count(*) FROM runs WHERE end_ms IS NOT NULL").fetchone()[0]:
                        break
            except sqlite3.Error:
                pass
            time.sleep(0.05)
        time.sleep(4)
        with open(temp, "w") as f:
            f.write("40\n")
    cooler = threading.Thread(target=cool)
    cooler.start()
    prog_a = w.file("a.py", "import time; time.sleep(0.3)\n")
    prog_b = w.file("b.py", "import time; time.sleep(0.6)\n")
    r = w.wattscope("run", "--interval", "50ms", "--sysfs-root", os.path.join(w.path, "sys"), "--repeat", "2",
                    "--cooldown-until", "45C", "--task", "rep", "--", PYTHON, prog_a, "--vs", "--", PYTHON, prog_b)
    cooler.join()
    runs = sorted(store(w).runs(), key=lambda x: x.start_ms)
    assert [x.task for x in runs] == ["rep", "rep-vs", "rep", "rep-vs"]  # ABAB
    assert [x.tags["variant"] for x in runs] == ["A", "B", "A", "B"]
    assert len({x.tags["repeat_batch"] for x in runs}) == 1
    # The first pause waited for the GPU to cool (4 s and more); the GPU stayed cool after, so the others did not (a
    # pause between runs is then wattscope's own start, well under the 4 s).
    gaps = [(runs[i + 1].start_ms - runs[i].end_ms) / 1000 for i in range(3)]
    assert gaps[0] >= 3.9 and max(gaps[1:]) < 3.0, gaps
    assert "after" in r.stderr and "s of cool-down" in r.stderr
    assert "compare A against B of the 4 runs" in r.stdout
    assert "task rep-vs (2 runs) uses" in r.stdout  # compare's verdict: B ran twice as long at the same power
    # A fixed pause is timed too.
    r = w.wattscope("run", "--interval", "50ms", "--sysfs-root", os.path.join(w.path, "sys"), "--repeat", "2",
                    "--cooldown", "1500ms", "--task", "pause", "--", PYTHON, prog_a)
    pause = sorted((x for x in store(w).runs() if x.task == "pause"),
                   key=lambda x: x.start_ms)
    assert len(pause) == 2 and (pause[1].start_ms - pause[0].end_ms) / 1000 >= 1.45
    assert "stats of the 2 runs" in r.stdout


def test_the_table_script_regenerates_from_the_published_csv(tmp_path):
    """scripts/carbon_regions.py on a few rows in owid-energy-data.csv's layout: each country's latest year with a
    figure, OWID's own codes shortened, the EU named, aggregates left out, in the format the binary compiles."""
    src = tmp_path / "owid-energy-data.csv"
    src.write_text(
        "country,year,iso_code,population,carbon_intensity_elec,coal_share_elec\n"
        "France,2023,FRA,1,56.04,0\nFrance,2024,FRA,1,44.18,0\nFrance,2025,FRA,1,,0\n"
        "World,2024,OWID_WRL,1,473.0,35\nEuropean Union (27),2024,,1,213.3,10\nAsia,2024,,1,570,50\n"
        "\"Cote d'Ivoire\",2023,CIV,1,393.5,0\n")
    out = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "scripts/carbon_regions.py"), str(src),
                          "--source", "test"], capture_output=True, text=True, check=True).stdout
    rows = [l for l in out.splitlines() if l.startswith("{")]
    assert rows == ['{"CIV", "Cote d\'Ivoire", 2023, 393.5},', '{"EU27", "European Union (27)", 2024, 213.3},',
                    '{"FRA", "France", 2024, 44.2},', '{"WRL", "World", 2024, 473.0},']
    assert "// Source: test." in out
    shipped = [l for l in open(os.path.join(SOURCE_DIR, "src/accounting/carbon_regions.inc")) if l.startswith("{")]
    assert len(shipped) > 200 and all(l.rstrip().endswith("},") and l.count(",") >= 4 for l in shipped)


def test_serve_exports_carbon_and_cost_as_counters(steady_world):
    """/metrics: grams and cost per device since serve started, rising at power x rate (200 W and 100 W at
    400 g/kWh: 0.0222 and 0.0111 g/s; at 0.20 EUR/kWh)."""
    import socket
    import urllib.request

    w = steady_world
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve = subprocess.Popen([BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--interval", "250ms", "--sysfs-root",
                              os.path.join(w.path, "sys"), "--carbon-intensity", "400", "--energy-price", "0.20",
                              "--currency", "EUR"], cwd=w.path, env=w.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)

    def counters():
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        out = {}
        for line in text.splitlines():
            for family in ("wattscope_carbon_grams_total{", "wattscope_energy_cost_total{"):
                if line.startswith(family) and 'device="gpu0"' in line:
                    out[family] = (line, float(line.rsplit(" ", 1)[1]))
        return out

    try:
        deadline, seen = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                c = counters()
            except OSError:
                continue
            if len(c) == 2:
                seen.append((time.monotonic(), c))
            if len(seen) >= 2 and seen[-1][0] - seen[0][0] >= 3:
                break
        assert len(seen) >= 2, "no wattscope_carbon_grams_total / wattscope_energy_cost_total for gpu0 in /metrics"
        (t0, a), (t1, b) = seen[0], seen[-1]
        carbon, cost = "wattscope_carbon_grams_total{", "wattscope_energy_cost_total{"
        assert 'assumed="false"' in b[carbon][0] and 'currency="EUR"' in b[cost][0]
        g_rate = (b[carbon][1] - a[carbon][1]) / (t1 - t0)
        assert abs(g_rate - 200 * 400 / 3.6e6) <= 0.15 * 200 * 400 / 3.6e6, g_rate
        eur_rate = (b[cost][1] - a[cost][1]) / (t1 - t0)
        assert abs(eur_rate - 200 * 0.20 / 3.6e6) <= 0.15 * 200 * 0.20 / 3.6e6, eur_rate
    finally:
        serve.terminate()
        serve.wait(timeout=30)
