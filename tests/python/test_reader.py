"""wattscope.open(): the reader in the Python package against `wattscope show --json` of the same runs, for runs
written by `run`, `record` and `import`, in SQLite, CSV and MariaDB; with and without pandas; and against damaged
and hostile stores, which give StoreError or StoreWarning and nothing else."""

import csv
import datetime
import glob
import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import time
import warnings

import pytest

from conftest import PYTHON, SOURCE_DIR

import wattscope
from wattscope import reader

TRAIN = """
import time, wattscope
for epoch in range(2):
    with wattscope.phase("epoch", index=epoch):
        with wattscope.phase("step"):
            time.sleep(0.2)
            wattscope.work(32)
        time.sleep(0.1)
        wattscope.work(10, unit="tokens")
    wattscope.mark("checkpoint")
with wattscope.phase("eval"):
    time.sleep(0.15)
    wattscope.work(5, unit="images")
"""


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def same_map(a, b):
    assert set(a) == set(b), (a, b)
    for k in a:
        assert close(a[k], b[k]), (k, a[k], b[k])


def check_against_show(world, store, run, store_flags):
    """Every figure the reader gives of `run` equals `show --json`'s."""
    shown = world.show(run.run_id, *store_flags)
    assert run.task == shown["task"] and run.host == shown["host"] and run.command == shown["command"]
    assert close(run.energy_j, shown["total_energy_j"])
    assert close(run.duration_s, shown["duration_s"])
    assert run.exit_status == shown["exit_status"]
    assert close(run.interval_s, shown["interval_s"]) and run.samples == shown["samples"]
    assert run.tags == shown["tags"]
    assert run.start == datetime.datetime.fromisoformat(shown["start"].replace("Z", "+00:00"))
    assert run.start.tzinfo is not None
    for g in shown["gpus"]:
        assert close(run.devices[f"gpu{g['index']}"], g["energy_j"])
        assert run.device_methods[f"gpu{g['index']}"] == g["energy_method"]
    if shown["cpu"].get("package_energy_j") is not None:
        assert close(run.devices["cpu_package"], shown["cpu"]["package_energy_j"])
    phases = store.phases(run)
    assert len(phases) == len(shown["phases"])
    for mine, theirs in zip(phases, shown["phases"]):
        for key in ("phase_id", "name", "index", "parent", "start_ms", "end_ms", "start_tick", "end_tick",
                    "energy_method", "closed_by_run_end", "closed_by_repair"):
            assert mine[key] == theirs[key], (key, mine[key], theirs[key])
        assert close(mine["energy_j"], theirs["energy_j"]) and close(mine["duration_s"], theirs["duration_s"])
        same_map(mine["devices"], theirs["devices"])
        same_map(mine["work"], theirs["work"]["amount"])
        same_map(mine["energy_per_unit_j"], theirs["work"]["energy_per_unit_j"])
        same_map(mine["throughput_per_s"], theirs["work"]["throughput_per_s"])
        assert mine["start"] == datetime.datetime.fromisoformat(theirs["start"].replace("Z", "+00:00"))
    same_map(run.work, shown["work"]["amount"])
    if "attributed_energy_j" in shown:  # the binary's show --json gives the same two figures, by the same rule
        assert close(run.attributed_energy_j, shown["attributed_energy_j"])
        assert run.attributed_energy_method == shown["attributed_energy_method"]
    assert len(store.work(run)) == shown["work"]["records"]
    marks = [e for e in store.events(run, kind="mark")]
    assert [(e["source"], e["ts_ms"]) for e in marks] == [(m["name"], m["ts_ms"]) for m in shown["marks"]]
    return shown


@pytest.fixture
def trained(world):
    """One run with nested phases, three work units, marks, two GPUs and an estimated CPU (a `mixed` total), in a
    SQLite database and a CSV directory at once."""
    world.run(TRAIN, "--cpu-tdp", "65", "--db", "wattscope.db", "--csv", "csv", "--tag", "lr=0.001", "--tag",
              "batch_size=64", task="train")
    return world


def test_sqlite_and_csv_read_as_show_says(trained):
    for spec, flags in (("wattscope.db", ()), ("csv:csv", ("--csv", "csv")), ("csv", ("--csv", "csv"))):
        store = wattscope.open(os.path.join(trained.path, spec) if spec != "csv:csv" else
                               "csv:" + os.path.join(trained.path, "csv"))
        runs = store.runs()
        assert len(runs) == 1
        run = runs[0]
        shown = check_against_show(trained, store, run, [*flags] if flags else ["--db", "wattscope.db"])
        assert run.energy_method == "mixed"  # GPUs by counter, the CPU estimated
        assert shown["phases"][1]["parent"] == 0 and len(run.phases) == 5
        gpu0 = store.samples(run, device="gpu0")
        # Each GPU has a row for each tick it answered: on a loaded machine a tick that waits past its deadline
        # stores that tick without the late GPU ("source-late"), so the count is the device's own, not the run's.
        per_gpu = {g["index"]: g["samples"] for g in shown["gpus"]}
        assert len(gpu0) == per_gpu[0] and all(s["gpu_index"] == 0 for s in gpu0)
        assert 0 < per_gpu[0] <= shown["samples"] and 0 < per_gpu[1] <= shown["samples"]
        assert store.samples(run, device=1)[0]["uuid"] == "GPU-py-1"
        assert len(store.samples(run, device=1)) == per_gpu[1]
        assert len(store.samples(run)) == per_gpu[0] + per_gpu[1]
        assert len(store.samples(run, device="cpu")) == shown["samples"]
        assert gpu0[0]["time"].tzinfo is datetime.timezone.utc
        assert any(p["pid"] for p in store.processes(run))
        assert {e["kind"] for e in store.events(run)} >= {"mark"}


KILLED = """
import os, signal, time, wattscope
with wattscope.phase("train"):
    with wattscope.phase("epoch", index=0):
        time.sleep(1.0)  # both begins stored: the tracker settles a marker within half a second, the writer commits it
        os.kill(os.getppid(), signal.SIGKILL)  # wattscope, as the OOM killer would
        time.sleep(0.2)
"""


def test_phases_a_killed_recorder_left_open_read_as_open_then_as_repair_closed_them(world):
    prog = world.file("killed.py", KILLED)
    r = world.wattscope("run", "--interval", "50ms", "--task", "killed", "--sysfs-root", os.path.join(world.path, "sys"),
                        "--db", "wattscope.db", "--csv", "csv", "--", PYTHON, prog, check=False)
    assert r.returncode != 0
    for spec, flags in (("wattscope.db", ("--db", "wattscope.db")), ("csv:csv", ("--csv", "csv"))):
        store = wattscope.open(os.path.join(world.path, spec) if spec.endswith(".db") else
                               "csv:" + os.path.join(world.path, "csv"))
        phases = store.phases(store.run())
        assert [p["name"] for p in phases] == ["train", "epoch"], spec
        for p in phases:  # open: no end yet, and nothing computed from one
            assert p["end_ms"] is None and p["end"] is None and p["duration_s"] is None and p["energy_j"] is None
            assert p["closed_by_repair"] is False
        world.wattscope("repair", "--db", spec)
        store = wattscope.open(os.path.join(world.path, spec) if spec.endswith(".db") else
                               "csv:" + os.path.join(world.path, "csv"))
        run = store.run()
        phases = check_against_show(world, store, run, flags)["phases"]
        assert [p["closed_by_repair"] for p in store.phases(run)] == [True, True]
        assert phases[1]["parent"] == phases[0]["phase_id"]
        assert all(p["energy_j"] > 0 and p["end_ms"] == run.end_ms for p in phases)


def test_filters_by_task_tags_and_time(trained):
    trained.run("import wattscope\n", "--tag", "lr=0.01", task="other")
    store = wattscope.open(os.path.join(trained.path, "wattscope.db"))
    assert [r.task for r in store.runs()] == ["train", "other"]
    assert [r.task for r in store.runs(task="other")] == ["other"]
    assert [r.task for r in store.runs(task=["train", "other"])] == ["train", "other"]
    assert [r.task for r in store.runs(tags={"lr": "0.01"})] == ["other"]
    assert [r.task for r in store.runs(tags={"lr": 0.001, "batch_size": 64})] == ["train"]
    assert [r.task for r in store.runs(tags={"batch_size": None})] == ["train"]
    later = store.runs()[1].start
    assert [r.task for r in store.runs(since=later)] == ["other"]
    assert [r.task for r in store.runs(since=later.isoformat())] == ["other"]
    assert store.runs(since=later + datetime.timedelta(days=1)) == []
    assert [p["name"] for p in store.phases(task="other")] == []
    assert len(store.phases(task="train")) == 5
    assert store.run(store.runs()[0].run_id[-8:]).task == "train"  # a suffix, as the binary takes it
    assert store.run().task == "other"  # the latest
    odd = os.path.join(trained.path, "runs?v=1#x")  # a path is not a URI: ? and # are part of the name
    os.mkdir(odd)
    shutil.copy(os.path.join(trained.path, "wattscope.db"), odd)
    assert [r.task for r in wattscope.open(os.path.join(odd, "wattscope.db")).runs()] == ["train", "other"]


def test_record_and_import_read_as_show_says(world):
    world.wattscope("record", "--duration", "600ms", "--interval", "100ms", "--task", "rec", "--sysfs-root",
                    os.path.join(world.path, "sys"))
    shutil.copy(os.path.join(SOURCE_DIR, "tests", "fixtures", "nvidia-smi", "a100x2_units.csv"), world.path)
    world.wattscope("import", "nvidia-smi", "a100x2_units.csv", "--task", "imported", "--utc")
    store = wattscope.open(os.path.join(world.path, "wattscope.db"))
    runs = {r.task: r for r in store.runs()}
    for run in runs.values():
        check_against_show(world, store, run, ["--db", "wattscope.db"])
    assert runs["rec"].energy_method == "counter"
    assert runs["imported"].energy_method == "integrated" and runs["imported"].energy_j > 0


def test_a_newer_schema_is_refused_as_the_binary_refuses_it(trained):
    db = os.path.join(trained.path, "newer.db")
    shutil.copy(os.path.join(trained.path, "wattscope.db"), db)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(reader.SCHEMA_VERSION + 1),))
    with pytest.raises(wattscope.StoreError, match="newer than this reader"):
        wattscope.open(db)
    refused = trained.wattscope("show", "--db", "newer.db", check=False)
    assert refused.returncode != 0 and "newer than this wattscope" in refused.stderr
    with sqlite3.connect(db) as c:
        c.execute("UPDATE meta SET value = 'x1' WHERE key = 'schema_version'")
    with pytest.raises(wattscope.StoreError, match="not a version number"):
        wattscope.open(db)


def test_bad_stores_are_clear_errors(tmp_path):
    with pytest.raises(wattscope.StoreError, match="is not a file"):
        wattscope.open(str(tmp_path / "none.db"))
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(wattscope.StoreError, match="not a SQLite database"):
        wattscope.open(str(tmp_path / "junk.db"))
    sqlite3.connect(str(tmp_path / "other.db")).execute("CREATE TABLE x (a)")
    with pytest.raises(wattscope.StoreError, match="no table 'runs'"):
        wattscope.open(str(tmp_path / "other.db"))
    with pytest.raises(wattscope.StoreError, match="not a directory"):
        wattscope.open("csv:" + str(tmp_path / "nowhere"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "t_x_y_runs.csv").write_text("run_id,task\nr1,t,extra\n")
    with pytest.raises(wattscope.StoreError, match="2 fields|3 fields"):
        wattscope.open(str(tmp_path / "c")).runs()
    with pytest.raises(wattscope.StoreError, match="password does not belong"):
        wattscope.open("mysql://ws:secret@localhost/wattscope")
    with pytest.raises(wattscope.StoreError, match="expected mysql://"):
        wattscope.open("mysql://nobody")


def test_the_schema_knowledge_matches_the_binarys():
    # SCHEMA_VERSION and TEXT_COLUMNS are copies of src/core: this test fails when either moves without the other.
    with open(os.path.join(SOURCE_DIR, "src", "core", "schema.hpp")) as f:
        version = int(re.search(r"kSchemaVersion\s*=\s*(\d+)", f.read()).group(1))
    assert reader.SCHEMA_VERSION == version
    with open(os.path.join(SOURCE_DIR, "src", "core", "schema.cpp")) as f:
        text_cols = set(re.findall(r'\{"(\w+)",\s*T\}', f.read()))
    assert text_cols and text_cols == set(reader.TEXT_COLUMNS)


def test_the_readers_columns_are_the_binarys(trained):
    # A listing of no rows takes its columns from this list where the store has no file of the table (CSV).
    with sqlite3.connect(os.path.join(trained.path, "wattscope.db")) as c:
        for table, columns in reader._STORED_COLUMNS.items():
            assert tuple(r[1] for r in c.execute(f'PRAGMA table_info("{table}")')) == columns, table


def test_pandas_frames_are_typed(trained):
    pytest.importorskip("pandas", reason="python3-pandas is not installed (scripts/setup.sh installs it)")
    store = wattscope.open(os.path.join(trained.path, "wattscope.db"))
    runs = store.runs().df()
    assert len(runs) == 1
    assert str(runs["start"].dtype) == "datetime64[ns, UTC]"
    assert runs["tags.batch_size"].iloc[0] == 64 and runs["tags.lr"].iloc[0] == 0.001  # tags as numbers
    run = store.runs()[0]
    assert runs["energy_j"].iloc[0] == run.energy_j and runs["energy_method"].iloc[0] == "mixed"
    assert runs["devices.gpu0"].iloc[0] == run.devices["gpu0"]
    phases = store.phases(task="train").df()
    assert list(phases["name"]) == ["epoch", "step", "epoch", "step", "eval"]
    assert str(phases["end"].dtype) == "datetime64[ns, UTC]"
    shown = trained.show(run.run_id, "--db", "wattscope.db")
    for i, p in enumerate(shown["phases"]):
        assert phases["energy_j"].iloc[i] == p["energy_j"]
        assert phases["devices.gpu1"].iloc[i] == p["devices"]["gpu1"]
        for unit in ("samples", "tokens", "images"):
            want = p["work"]["energy_per_unit_j"].get(unit)
            got = phases[f"energy_per_unit_j.{unit}"].iloc[i]
            assert (math.isnan(got) if want is None else math.isclose(got, want)), (i, unit, got, want)
    assert math.isnan(phases["index"].iloc[4])  # eval has no index: NaN, not 0
    work = store.work(run).df()
    assert work["amount"].sum() == 64 + 20 + 5 and str(work["time"].dtype) == "datetime64[ns, UTC]"
    gpu = store.samples(run, device="gpu0").df()
    assert gpu["power_w"].iloc[-1] == 300.0
    # The store keeps each GPU's name once, in gpu_devices; the samples show it beside gpu_index, as they always did.
    assert list(gpu.columns[:8]) == ["run_id", "tick", "ts_ms", "gpu_index", "uuid", "name", "vendor", "power_w"]
    assert set(gpu["uuid"]) == {"GPU-py-0"} and set(gpu["vendor"]) == {"nvidia"}


def test_without_pandas_records_are_plain_and_df_says_what_to_install(trained):
    program = f"""
import sys
sys.modules["pandas"] = None  # as on a machine without pandas
sys.path.insert(0, {os.path.join(SOURCE_DIR, 'python')!r})
import wattscope
store = wattscope.open({os.path.join(trained.path, 'wattscope.db')!r})
run = store.runs()[0]
assert type(store.phases(run)[0]) is dict and run.energy_j > 0
try:
    store.phases(run).df()
except ImportError as e:
    print(e)
"""
    r = subprocess.run([PYTHON, "-c", program], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "needs pandas" in r.stdout and "python3-pandas" in r.stdout


def test_advice_comes_from_the_binary_when_it_is_there(trained, monkeypatch):
    store = wattscope.open(os.path.join(trained.path, "wattscope.db"))
    run = store.runs()[0]
    monkeypatch.setenv("WATTSCOPE_BINARY", os.environ["WATTSCOPE_BINARY"])
    shown = trained.show(run.run_id, "--db", "wattscope.db")
    assert run.advice == shown["advice"]
    monkeypatch.setenv("WATTSCOPE_BINARY", os.path.join(trained.path, "no-such-binary"))
    monkeypatch.setenv("PATH", trained.path)
    assert run.advice is None


class MariaDb:
    """A private MariaDB server for one test (as tests/support/mariadb.cpp starts one): its own data directory and
    socket, no TCP port; user ws / password "secret" owns database "wattscope"."""

    def __init__(self, path):
        self.path = path
        self.sock = os.path.join(path, "sock")
        os.mkdir(os.path.join(path, "tmp"))
        user = ["--user=root"] if os.geteuid() == 0 else []
        env = dict(os.environ, TMPDIR=os.path.join(path, "tmp"))
        r = subprocess.run(["/usr/bin/mariadb-install-db", "--no-defaults", f"--datadir={path}/data",
                            "--auth-root-authentication-method=normal", "--skip-test-db", "--innodb-log-file-size=16M",
                            f"--tmpdir={path}/tmp", *user], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        self.proc = subprocess.Popen(["/usr/sbin/mariadbd", "--no-defaults", f"--datadir={path}/data",
                                      f"--socket={self.sock}", "--skip-networking", "--innodb-log-file-size=16M",
                                      "--innodb-buffer-pool-size=128M", f"--log-error={path}/error.log",
                                      f"--tmpdir={path}/tmp", f"--pid-file={path}/pid", *user],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            if self.sql("SELECT 1", check=False).returncode == 0:
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.sql("CREATE USER 'ws'@'localhost' IDENTIFIED BY 'secret'; CREATE DATABASE wattscope CHARACTER SET "
                 "utf8mb4; GRANT ALL ON *.* TO 'ws'@'localhost';")

    def sql(self, statements, check=True):
        r = subprocess.run(["/usr/bin/mariadb", "--no-defaults", "-uroot", "-S", self.sock, "-N", "-B", "-e",
                            statements], capture_output=True, text=True, timeout=60)
        if check:
            assert r.returncode == 0, r.stderr
        return r

    def url(self):
        return f"mysql://ws@localhost/wattscope?socket={self.sock}"

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_mariadb_reads_as_show_says(world, monkeypatch):
    if not os.path.exists("/usr/sbin/mariadbd"):
        pytest.skip("mariadb-server is not installed (scripts/setup.sh installs it)")
    if not any(_importable(m) for m in ("MySQLdb", "pymysql", "mysql.connector")):
        pytest.skip("no MySQL connector for Python (python3-pymysql: scripts/setup.sh installs it)")
    server = MariaDb(tempfile.mkdtemp(prefix="ws-maria-", dir=world.path))
    try:
        monkeypatch.setenv("WATTSCOPE_MYSQL_PASSWORD", "secret")
        world.env["WATTSCOPE_MYSQL_PASSWORD"] = "secret"
        world.run(TRAIN, "--db", server.url(), "--tag", "where=maria", task="train")
        store = wattscope.open(server.url())
        runs = store.runs(tags={"where": "maria"})
        assert len(runs) == 1
        check_against_show(world, store, runs[0], ["--db", server.url()])
        assert len(runs[0].phases) == 5
        server.sql("UPDATE wattscope.meta SET value = '999' WHERE `key` = 'schema_version'")
        with pytest.raises(wattscope.StoreError, match="newer than this reader"):
            wattscope.open(server.url())
    finally:
        server.stop()


def _importable(name):
    try:
        __import__(name)
        return True
    except ImportError:
        return False


# ---- tags, empty listings, missing numbers, the run's own processes' energy


def test_a_tag_filter_matches_numbers_as_the_frame_shows_them(world):
    world.run("import wattscope\n", "--tag", "lr=1e-3", "--tag", "batch_size=64", "--tag", "warmup=0.10",
              "--tag", "opt=adam", task="t")
    store = wattscope.open(os.path.join(world.path, "wattscope.db"))
    hits = lambda tags: len(store.runs(tags=tags))  # noqa: E731
    assert hits({"lr": 0.001}) == hits({"lr": 1e-3}) == hits({"lr": "1e-3"}) == 1
    assert hits({"lr": "0.001"}) == 0  # text is compared as text
    assert hits({"batch_size": 64}) == hits({"batch_size": 64.0}) == hits({"batch_size": "64"}) == 1
    assert hits({"batch_size": 65}) == hits({"batch_size": "64.0"}) == hits({"opt": 1}) == 0
    assert hits({"warmup": 0.1}) == 1 and hits({"warmup": "0.1"}) == 0
    assert hits({"lr": 0.001, "batch_size": 64, "opt": "adam"}) == 1 and hits({"lr": 0.001, "opt": "sgd"}) == 0
    np = pytest.importorskip("numpy", reason="python3-numpy is not installed (scripts/setup.sh installs it)")
    assert hits({"batch_size": np.int64(64), "lr": np.float64(0.001)}) == 1
    pd = pytest.importorskip("pandas", reason="python3-pandas is not installed (scripts/setup.sh installs it)")
    frame = store.runs().df()
    assert frame["tags.lr"].iloc[0] == 0.001 and frame["tags.warmup"].iloc[0] == 0.1  # as the filter reads them
    assert pd.api.types.is_numeric_dtype(frame["tags.batch_size"])


def no_energy_world(world):
    """No GPU library and no RAPL: what a VM without GPUs looks like to wattscope."""
    for var in ("WATTSCOPE_NVML_LIBRARY", "WATTSCOPE_ROCM_SMI_LIBRARY", "WATTSCOPE_LEVEL_ZERO_LIBRARY"):
        world.env[var] = os.path.join(world.path, "absent", "lib.so")
    return world


def test_an_empty_listing_keeps_its_columns_and_missing_numbers_are_nan(world):
    pd = pytest.importorskip("pandas", reason="python3-pandas is not installed (scripts/setup.sh installs it)")
    # no markers, no energy
    no_energy_world(world).run("import wattscope\n", "--db", "wattscope.db", "--csv", "csv", task="bare")
    for spec in ("wattscope.db", "csv"):
        store = wattscope.open(os.path.join(world.path, spec))
        run = store.run()
        assert run.energy_j is None and run.energy_method is None  # records: None
        assert run.attributed_energy_j is None and run.attributed_energy_method is None  # nothing was measured
        runs = store.runs().df()
        assert str(runs["energy_j"].dtype) == "float64" and math.isnan(runs["energy_j"].iloc[0])  # frames: NaN
        assert math.isnan(runs["attributed_energy_j"].iloc[0])
        phases = store.phases(run).df()
        assert len(phases) == 0
        for col in ("run_id", "task", "phase_id", "name", "index", "parent", "energy_j", "energy_method",
                    "start", "end", "duration_s", "closed_by_run_end"):
            assert col in phases.columns, (spec, col, list(phases.columns))
        assert len(phases[phases["name"] == "epoch"]) == 0  # what the guide's analysis does
        assert {"amount", "unit", "phase_id", "ts_ms", "time"} <= set(store.work(run).df().columns)
        assert {"kind", "source", "detail", "time"} <= set(store.events(run, kind="no-such-kind").df().columns)
        assert {"gpu_index", "power_w", "energy_j", "time"} <= set(store.samples(run, device="gpu3").df().columns)
        assert {"run_id", "energy_j", "energy_method", "attributed_energy_j", "start"} <= set(
            store.runs(task="no-such-task").df().columns)


def test_the_runs_own_processes_energy_is_summed_from_its_attribution(trained):
    db = os.path.join(trained.path, "wattscope.db")
    store = wattscope.open(db)
    run = store.run()
    attribution = run.summary["attribution"]
    assert set(attribution["devices"]) == {"gpu0", "gpu1", "cpu"}
    assert close(run.attributed_energy_j, sum(d["attributed_j"] for d in attribution["devices"].values()))
    assert run.attributed_energy_method == "attributed (mixed)"
    summary = dict(run.summary, attribution={"devices": {"gpu0": {"attributed_j": 10.0, "method": "counter"},
                                                         "gpu1": {"attributed_j": 2.5}, "cpu": {"other_j": 4.0}}})
    with sqlite3.connect(db) as c:
        c.execute("UPDATE runs SET summary = ?", (json.dumps(summary),))
    run = wattscope.open(db).run()
    assert run.attributed_energy_j == 12.5 and run.as_dict()["attributed_energy_method"] == "attributed (mixed)"
    with sqlite3.connect(db) as c:
        c.execute("UPDATE runs SET summary = ?", (json.dumps(dict(summary, attribution=None)),))
    run = wattscope.open(db).run()
    assert run.attributed_energy_j is None and run.attributed_energy_method is None


# ---- damaged and hostile stores: StoreError or StoreWarning, never sqlite3, Type, Value or RecursionError


def every_call(store):
    """Everything the reader offers, on every run the store lists."""
    runs = store.runs()
    store.phases(), store.work()
    for r in runs:
        store.run(r.run_id), r.work, store.samples(r), store.samples(r, "cpu"), store.processes(r), store.events(r)
    return runs


def test_a_damaged_sqlite_file_is_a_store_error(trained):
    good = os.path.join(trained.path, "wattscope.db")
    size = os.path.getsize(good)
    assert size > 8 * 4096
    for name, damage in (("truncated", lambda f: f.truncate(size // 3)),
                         ("garbled", lambda f: (f.seek(2 * 4096), f.write(os.urandom(size - 2 * 4096))))):
        path = os.path.join(trained.path, name + ".db")
        shutil.copy(good, path)
        with open(path, "r+b") as f:
            damage(f)
        with pytest.raises(wattscope.StoreError) as e:
            every_call(wattscope.open(path))
        assert path in str(e.value) and ("malformed" in str(e.value) or "not a database" in str(e.value))


def damaged_copy(world, name, statements):
    path = os.path.join(world.path, name)
    shutil.copy(os.path.join(world.path, "wattscope.db"), path)
    with sqlite3.connect(path) as c:
        for sql, *args in statements:
            c.execute(sql, *args)
    return path


def test_a_damaged_row_is_skipped_in_listings_and_an_error_when_asked_for(trained):
    trained.run("import wattscope\n", task="other")  # a second, sound run
    store = wattscope.open(os.path.join(trained.path, "wattscope.db"))
    victim = store.runs(task="train")[0].run_id
    deep = "[" * 200000 + "]" * 200000
    cases = {
        "tags": ('{"a": ' + deep + "}", "nested deeper than 64"),
        "summary": ('{"pad": "' + "x" * (2 << 20) + '"}', "bytes of JSON"),
        "start_ms": (10**17, "not a time"),
        "total_energy_j": ("lots", "where a number belongs"),
        "command": (b"\xff\xfe", "where text belongs"),
    }
    for column, (value, why) in cases.items():
        sql = f'UPDATE runs SET "{column}" = ? WHERE run_id = ?'
        if isinstance(value, bytes):
            sql = f'UPDATE runs SET "{column}" = CAST(? AS TEXT) WHERE run_id = ?'  # text, not UTF-8
        path = damaged_copy(trained, f"bad_{column}.db", [(sql, (value, victim))])
        store = wattscope.open(path)
        with pytest.warns(wattscope.StoreWarning) as caught:
            runs = store.runs()
        assert [r.task for r in runs] == ["other"]
        message = str(caught[0].message)
        for part in (path, victim, "table 'runs'", f"column '{column}'", why):
            assert part in message, (part, message)
        with pytest.raises(wattscope.StoreError) as e:
            store.run(victim)
        assert victim in str(e.value) and f"column '{column}'" in str(e.value) and why in str(e.value)
        with pytest.raises(wattscope.StoreError):
            store.phases(victim)
        if column == "start_ms":  # the damaged run claims to be the latest: asked for, it is an error
            with pytest.raises(wattscope.StoreError, match=victim):
                store.run()
        else:
            assert store.run().task == "other"


def test_a_damaged_row_of_a_runs_table_is_skipped_with_a_warning(trained):
    run_id = wattscope.open(os.path.join(trained.path, "wattscope.db")).run().run_id
    path = damaged_copy(trained, "bad_rows.db", [
        ("UPDATE phases SET energy_j = 'x' WHERE phase_id = 1",),
        ("UPDATE phases SET device_energy_j = ? WHERE phase_id = 2", ("[" * 100000,)),
        ("UPDATE work SET amount = 'many' WHERE seq = (SELECT min(seq) FROM work)",),
        ("UPDATE gpu_sample_rows SET ts_ms = 1e300 WHERE tick = 1",),
        ("UPDATE events SET detail = ? WHERE kind = 'mark'", ('{"a":' * 70 + "1" + "}" * 70,)),
    ])
    store = wattscope.open(path)
    run = store.run(run_id)
    with pytest.warns(wattscope.StoreWarning, match=r"skipped 3 damaged rows: .*table 'phases', column 'energy_j'.*"
                                                    r"column 'device_energy_j': JSON nested deeper than 64.*"
                                                    r"table 'work', column 'amount'"):
        assert [p["phase_id"] for p in store.phases(run)] == [0, 3, 4]
    with pytest.warns(wattscope.StoreWarning, match="table 'work', column 'amount'"):
        assert len(store.work(run)) == len(wattscope.open(os.path.join(trained.path, "wattscope.db")).work(run)) - 1
    with pytest.warns(wattscope.StoreWarning, match="table 'gpu_samples', column 'ts_ms'"):
        store.samples(run)
    with pytest.warns(wattscope.StoreWarning, match="table 'events', column 'detail'"):
        assert store.events(run, kind="mark") == []
    assert store.events(run, kind="model") == []  # the train script describes no model; the others pass


def test_a_damaged_csv_store_is_a_store_error_or_a_skipped_row(trained):
    source = os.path.join(trained.path, "csv")
    (phases_file,) = glob.glob(os.path.join(source, "*_phases.csv"))
    short = os.path.join(trained.path, "short")
    shutil.copytree(source, short)
    with open(os.path.join(short, os.path.basename(phases_file)), "a") as f:
        f.write("r,1,epoch\n")  # a writer killed mid-line
    store = wattscope.open(short)
    with pytest.raises(wattscope.StoreError, match=r"phases.csv, line \d+: 3 fields, the header has \d+"):
        store.phases(store.run())
    text = os.path.join(trained.path, "text")
    shutil.copytree(source, text)
    path = os.path.join(text, os.path.basename(phases_file))
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    rows[-1][rows[0].index("energy_j")] = "lots"  # the last row of its phase_id: the one that stands for it
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    store = wattscope.open(text)
    with pytest.warns(wattscope.StoreWarning, match="table 'phases', column 'energy_j': lots where a number belongs"):
        assert len(store.phases(store.run())) == 4
