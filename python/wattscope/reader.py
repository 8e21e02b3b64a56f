"""Reading wattscope's stores back: runs, phases, work, samples, processes and events, from a SQLite file, a directory
of CSV files or a MySQL/MariaDB database, as lists of plain records or (when asked, with pandas) DataFrames.

    import wattscope
    store = wattscope.open("wattscope.db")            # or "csv:DIR", a directory, or "mysql://user@host/db"
    run = store.runs(task="train")[-1]
    print(run.energy_j, run.energy_method, run.duration_s)
    store.phases(task="train").df()                   # one row per phase: energy, devices, work and J per unit

The stores are read directly (the wattscope binary need not be on the machine); only `Run.advice` asks the binary.
Standard library only: pandas is imported by `.df()` alone, a MySQL connector (MySQLdb, pymysql or
mysql.connector, whichever is installed) by a mysql:// store alone.

Records are dicts whose keys are the stores' column names (units in the names: `energy_j`, `ts_ms`), times also as
timezone-aware datetimes (`start`, `end`, `time`), missing values None. Nested objects (a phase's per-device
energies and work, a run's tags) are dicts as in `wattscope show --json`; `.df()` flattens them into columns with
dots, as pandas.json_normalize does (`devices.gpu0`, `work.samples`, `energy_per_unit_j.samples`, `tags.lr`).
"""

import builtins
import csv
import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import urllib.parse

# The store schema this reader knows (src/core/schema.hpp, kSchemaVersion). A store with a newer one is refused, as
# the binary refuses it: its columns may mean something this reader does not know.
SCHEMA_VERSION = 5  # 5: work.total (issue 36), a number: nothing for this reader to change

# Columns that hold text in every store (src/core/schema.cpp, ColType Text); CSV cells of any other column are
# numbers. tests check this list against schema.cpp, so the two cannot drift apart.
TEXT_COLUMNS = frozenset(
    "run_id task command host cpu_model tags wattscope_version summary vendor uuid name pci_bus_id energy_method "
    "power_source power_method zone domain kind source detail comm cmdline unit unit_kind device_energy_j".split())

# The tables of one run, in the stores' key order.
_ORDER = {
    "gpu_devices": ("gpu_index",),
    "gpu_samples": ("tick", "gpu_index"),
    "cpu_samples": ("tick",),
    "cpu_core_samples": ("tick", "core"),
    "cpu_power_samples": ("tick", "domain"),
    "events": ("seq",),
    "processes": ("pid", "start_time"),
    "process_samples": ("tick", "pid", "start_time"),
    "process_gpu_samples": ("tick", "pid", "start_time", "gpu_index"),
    "phases": ("phase_id",),
    "work": ("seq",),
}
_MAX_CSV_FIELD = 64 << 20  # as the binary's CSV reader: a longer record is not a wattscope CSV file


class StoreError(RuntimeError):
    """A store that cannot be read: missing, not wattscope's, damaged, or of a newer schema."""


def _utc(ms):
    if ms is None:
        return None
    return _dt.datetime.fromtimestamp(ms / 1000.0, tz=_dt.timezone.utc)


def _json_object(text):
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _check_version(stored, what):
    if stored is None:
        return 0
    try:
        v = int(str(stored).strip())
    except ValueError:
        raise StoreError(f"{what} has schema version '{stored}', which is not a version number; it was not written by "
                         "wattscope or is damaged") from None
    if v > SCHEMA_VERSION:
        raise StoreError(f"{what} has schema version {v}, newer than this reader's {SCHEMA_VERSION}: upgrade the "
                         "wattscope Python package to read it")
    return v


class Records(list):
    """A list of records (dicts); `.df()` makes a pandas DataFrame of them."""

    def __init__(self, rows=(), columns=None):
        super().__init__(rows)
        self._columns = columns

    def df(self):
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Records.df() needs pandas (Debian: apt install python3-pandas; or pip install pandas); "
                              "the records themselves are plain dicts") from None
        flat = [_flatten(r.as_dict() if isinstance(r, Run) else r) for r in self]
        frame = pd.DataFrame(flat, columns=_columns(flat, self._columns))
        for col in frame.columns:
            if col.startswith("tags."):  # tags are text in the stores; "64" and "3e-4" are numbers here
                converted = pd.to_numeric(frame[col], errors="coerce")
                if converted.notna().sum() == frame[col].notna().sum():
                    frame[col] = converted
            elif frame[col].dtype == object and frame[col].map(lambda v: v is None or isinstance(v, _dt.datetime)).all() \
                    and frame[col].notna().any():
                frame[col] = pd.to_datetime(frame[col], utc=True)
            elif frame[col].dtype == object and frame[col].map(
                    lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))).all() \
                    and frame[col].notna().any():
                frame[col] = pd.to_numeric(frame[col])  # a number column with gaps: NaN, not None
        return frame


def _columns(flat, preferred):
    cols, seen = [], set()
    for c in list(preferred or []) + [k for r in flat for k in r]:
        if c not in seen:
            seen.add(c)
            cols.append(c)
    return cols


def _flatten(record, prefix=""):
    out = {}
    for k, v in record.items():
        if isinstance(v, dict) and k in _FLATTENED:
            for k2, v2 in v.items():
                out[f"{k}.{k2}"] = v2
        elif isinstance(v, (dict, list)):
            out[prefix + k] = json.dumps(v)  # rare (summary, attribution): kept whole, as text
        else:
            out[prefix + k] = v
    return out


_FLATTENED = {"tags", "devices", "device_methods", "work", "energy_per_unit_j", "throughput_per_s", "detail"}


# ---------------------------------------------------------------- stores


class _Sqlite:
    def __init__(self, path):
        import sqlite3

        if not os.path.isfile(path):
            raise StoreError(f"'{path}' is not a file: give a wattscope SQLite database (wattscope.db)")
        try:
            # Read-only, so that reading never creates a file or takes a write lock; quoted: a path may hold ? or #.
            self.db = sqlite3.connect("file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro", uri=True)
            names = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            raise StoreError(f"'{path}' is not a SQLite database: {e}") from None
        self.describe = f"database '{path}'"
        if "runs" not in names:
            raise StoreError(f"{self.describe} holds no wattscope runs (no table 'runs')")
        stored = None
        if "meta" in names:
            row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            stored = row[0] if row else None
        _check_version(stored, self.describe)
        self.tables = names

    def _select(self, sql, args=()):
        cur = self.db.execute(sql, args)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    def runs(self):
        return self._select("SELECT * FROM runs ORDER BY start_ms, run_id")

    def table(self, name, run):
        if name not in self.tables:
            return []
        order = ", ".join(f'"{c}"' for c in _ORDER[name])
        return self._select(f'SELECT * FROM "{name}" WHERE run_id = ? ORDER BY {order}', (run["run_id"],))


class _Mysql:
    """mysql://USER@HOST[:PORT]/DATABASE or mysql://USER@localhost/DATABASE?socket=PATH, as the binary takes it; the
    password from WATTSCOPE_MYSQL_PASSWORD or ~/.my.cnf's [client] section, never from the URL."""

    _FORM = "mysql://USER@HOST[:PORT]/DATABASE or mysql://USER@localhost/DATABASE?socket=PATH"

    def __init__(self, url):
        m = re.fullmatch(r"(?:mysql|mariadb)://([^@/]+)@([^/]*)/([A-Za-z0-9_$]+)(?:\?socket=(.+))?", url)
        if not m:
            raise StoreError(f"'{url}': expected {self._FORM}")
        user, hostport, database, sock = m.groups()
        if ":" in user:
            raise StoreError("a password does not belong in the URL; put it in WATTSCOPE_MYSQL_PASSWORD or the [client] "
                             "section of ~/.my.cnf")
        host, port = hostport, 3306
        if ":" in hostport:
            host, _, p = hostport.rpartition(":")
            if not p.isdigit() or not 0 < int(p) < 65536:
                raise StoreError(f"'{url}': bad port; expected {self._FORM}")
            port = int(p)
        if not host and not sock:
            raise StoreError(f"'{url}': no host; expected {self._FORM}")
        self.describe = f"MySQL {user}@{host or 'localhost'}:{port}/{database}"
        self.db, self.param = self._connect(user, host or "localhost", port, database, sock,
                                            os.environ.get("WATTSCOPE_MYSQL_PASSWORD"))
        names = {r["t"] for r in self._select("SELECT table_name AS t FROM information_schema.tables "
                                              f"WHERE table_schema = {self.param}", (database,))}
        if "runs" not in names:
            raise StoreError(f"{self.describe} holds no wattscope runs (no table 'runs')")
        stored = None
        if "meta" in names:
            rows = self._select("SELECT `value` AS v FROM `meta` WHERE `key` = 'schema_version'")
            stored = rows[0]["v"] if rows else None
        _check_version(stored, self.describe)
        self.tables = names

    @staticmethod
    def _connect(user, host, port, database, sock, password):
        cnf = os.path.expanduser("~/.my.cnf")
        errors = []
        try:
            import MySQLdb  # Debian: python3-mysqldb

            kw = dict(user=user, host=host, port=port, db=database, charset="utf8mb4")
            if sock:
                kw["unix_socket"] = sock
            if password is not None:
                kw["passwd"] = password
            elif os.path.exists(cnf):
                kw["read_default_file"] = cnf
            return MySQLdb.connect(**kw), "%s"
        except ImportError:
            pass
        except Exception as e:  # the connector's own error types
            errors.append(e)
        if not errors:
            try:
                import pymysql  # Debian: python3-pymysql

                kw = dict(user=user, host=host, port=port, database=database, charset="utf8mb4")
                if sock:
                    kw["unix_socket"] = sock
                if password is not None:
                    kw["password"] = password
                elif os.path.exists(cnf):
                    kw["read_default_file"] = cnf
                return pymysql.connect(**kw), "%s"
            except ImportError:
                pass
            except Exception as e:
                errors.append(e)
        if not errors:
            try:
                import mysql.connector  # Debian: python3-mysql.connector

                kw = dict(user=user, host=host, port=port, database=database)
                if sock:
                    kw["unix_socket"] = sock
                if password is not None:
                    kw["password"] = password
                elif os.path.exists(cnf):
                    kw["option_files"] = cnf
                return mysql.connector.connect(**kw), "%s"
            except ImportError:
                pass
            except Exception as e:
                errors.append(e)
        if errors:
            raise StoreError(f"cannot connect to MySQL {user}@{host}:{port}/{database}: {errors[0]}") from None
        raise StoreError("reading a mysql:// store needs a MySQL connector for Python: MySQLdb (Debian: apt install "
                         "python3-mysqldb), pymysql (python3-pymysql) or mysql-connector-python; none is installed")

    def _select(self, sql, args=()):
        cur = self.db.cursor()
        try:
            cur.execute(sql, args)
            cols = [d[0] for d in cur.description]
            out = []
            for row in cur.fetchall():
                out.append({c: (v.decode("utf-8") if isinstance(v, (bytes, bytearray)) else
                                float(v) if type(v).__name__ == "Decimal" else v) for c, v in zip(cols, row)})
            return out
        finally:
            cur.close()

    def runs(self):
        return self._select("SELECT * FROM `runs` ORDER BY `start_ms`, `run_id`")

    def table(self, name, run):
        if name not in self.tables:
            return []
        order = ", ".join(f"`{c}`" for c in _ORDER[name])
        return self._select(f"SELECT * FROM `{name}` WHERE `run_id` = {self.param} ORDER BY {order}", (run["run_id"],))


class _CsvDir:
    """A directory of `{task}_{start}_{id}_{table}.csv` files: a run's tables share the prefix of its runs file."""

    def __init__(self, path):
        if not os.path.isdir(path):
            raise StoreError(f"'{path}' is not a directory of wattscope CSV files")
        self.dir = path
        self.describe = f"CSV {path}/"
        self.prefix = {}  # run_id -> the file name prefix of its tables

    def _read(self, path):
        csv.field_size_limit(_MAX_CSV_FIELD)
        try:
            with builtins.open(path, newline="", encoding="utf-8") as f:
                reader = csv.reader(f)
                header = next(reader, None)
                if header is None:
                    raise StoreError(f"{path}: empty file, expected a header line")
                rows = []
                for n, fields in enumerate(reader, start=2):
                    if len(fields) != len(header):
                        raise StoreError(f"{path}:{n}: {len(fields)} fields, the header has {len(header)}")
                    rows.append({c: _cell(c, v, path, n) for c, v in zip(header, fields)})
                return rows
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise StoreError(f"{path}: {e}") from None

    def runs(self):
        out = []
        for name in sorted(os.listdir(self.dir)):
            if not name.endswith("_runs.csv"):
                continue
            for row in self._read(os.path.join(self.dir, name)):
                self.prefix[row["run_id"]] = name[: -len("runs.csv")]
                out.append(row)
        out.sort(key=lambda r: (r.get("start_ms") or 0, r["run_id"]))
        return out

    def table(self, name, run):
        prefix = self.prefix.get(run["run_id"])
        if prefix is None:
            self.runs()
            prefix = self.prefix.get(run["run_id"])
        path = os.path.join(self.dir, f"{prefix}{name}.csv")
        if prefix is None or not os.path.exists(path):
            return []  # a table with no rows for this run has no file
        rows = [r for r in self._read(path) if r.get("run_id") == run["run_id"]]
        keys = _ORDER[name]
        rows.sort(key=lambda r: tuple((r.get(k) is not None, r.get(k) if r.get(k) is not None else 0) for k in keys))
        return rows


def _cell(column, text, path, line):
    if text == "":
        return None  # a missing value (the writer quotes an empty text, which csv cannot tell apart; rare)
    if column in TEXT_COLUMNS:
        return text
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise StoreError(f"{path}:{line}: column '{column}': '{text[:40]}' is not a number") from None


# ---------------------------------------------------------------- what the reader gives


class Run:
    """One run: the figures of its summary (`energy_j`, `energy_method`, `duration_s`, `devices`, ...) and, read on
    first use, its phases, work and advice."""

    def __init__(self, store, row):
        self._store, self._row = store, row
        self.summary = _json_object(row.get("summary"))
        self.tags = {k: v for k, v in _json_object(row.get("tags")).items()}
        self.run_id = row["run_id"]
        self.task = row.get("task")
        self.command = row.get("command")
        self.host = row.get("host")
        self.start_ms = row.get("start_ms")
        self.end_ms = row.get("end_ms")
        self.start, self.end = _utc(self.start_ms), _utc(self.end_ms)
        self.duration_s = row.get("duration_s")
        self.exit_status = row.get("exit_status")
        self.interval_s = row["interval_ms"] / 1000.0 if row.get("interval_ms") is not None else None
        self.samples = row.get("samples")
        self.energy_j = row.get("total_energy_j")
        self.wattscope_version = row.get("wattscope_version")
        self.simulated = self.tags.get("simulated") == "true"
        self.devices, self.device_methods = self._devices()
        self.energy_method = self._method()
        self._phases = self._work = None

    def _devices(self):
        energy, method = {}, {}
        for g in self.summary.get("gpus") or []:
            if not isinstance(g, dict):
                continue
            name = f"gpu{g.get('index', g.get('gpu_index', len(energy)))}"
            energy[name] = g.get("energy_j") if isinstance(g.get("energy_j"), (int, float)) else None
            method[name] = g.get("energy_method")
        cpu = self.summary.get("cpu") or {}
        for part in ("package", "dram"):
            v = cpu.get(f"{part}_energy_j")
            if isinstance(v, (int, float)):
                energy[f"cpu_{part}"] = v
                method[f"cpu_{part}"] = cpu.get("energy_method")
        return energy, method

    def _method(self):
        # The summary's own label where it has one (a newer wattscope); else the devices' labels: one kind for all,
        # or `mixed`. Simulated GPUs make every total that includes them simulated.
        for key in ("energy_method", "total_energy_method"):
            if isinstance(self.summary.get(key), str):
                return self.summary[key]
        if self.energy_j is None:
            return None
        if self.simulated:
            return "simulated"
        kinds = {m for d, m in self.device_methods.items() if m and self.devices.get(d) is not None}
        if not kinds:
            return None
        return kinds.pop() if len(kinds) == 1 else "mixed"

    @property
    def phases(self):
        """The run's phases (records as `store.phases(run)` gives them)."""
        if self._phases is None:
            self._phases = self._store.phases(self)
        return self._phases

    @property
    def work(self):
        """Work over the run by unit: {"samples": 90000.0, ...}."""
        if self._work is None:
            totals = {}
            for w in self._store.work(self):
                totals[w["unit"]] = totals.get(w["unit"], 0) + (w["amount"] or 0)
            self._work = totals
        return self._work

    @property
    def advice(self):
        """What `wattscope advise` says of the run (a list of dicts), from the wattscope binary on the PATH
        (WATTSCOPE_BINARY to name another); None when there is none: the rules live in the binary."""
        return self._store._advice(self)

    def as_dict(self):
        d = {k: getattr(self, k) for k in ("run_id", "task", "command", "host", "start", "end", "start_ms", "end_ms",
                                           "duration_s", "exit_status", "interval_s", "samples", "energy_j",
                                           "energy_method", "simulated", "wattscope_version")}
        d["devices"] = dict(self.devices)
        d["device_methods"] = dict(self.device_methods)
        d["tags"] = dict(self.tags)
        return d

    def __repr__(self):
        e = "energy not measured" if self.energy_j is None else f"{self.energy_j:.1f} J [{self.energy_method}]"
        return f"<Run {self.run_id} task {self.task!r} {e}>"


class Store:
    """An open store; see wattscope.open."""

    def __init__(self, impl, spec):
        self._impl, self.spec = impl, spec
        self.describe = impl.describe

    def __repr__(self):
        return f"<wattscope store {self.describe}>"

    # -- runs
    def runs(self, task=None, tags=None, since=None):
        """Runs in start order, those of `task` (a name or a list of names), with every tag in `tags` (a dict; a
        value None means "has the key"), started at or after `since` (a datetime, ISO text or UTC ms)."""
        since_ms = _as_ms(since)
        tasks = {task} if isinstance(task, str) else set(task) if task is not None else None
        out = Records()
        for row in self._impl.runs():
            run = Run(self, row)
            if tasks is not None and run.task not in tasks:
                continue
            if since_ms is not None and (run.start_ms or 0) < since_ms:
                continue
            if tags and not all(k in run.tags and (v is None or run.tags[k] == str(v)) for k, v in tags.items()):
                continue
            out.append(run)
        return out

    def run(self, run_id=None):
        """One run: by id, or a unique prefix or suffix of it (as the binary takes them); the latest without one."""
        runs = self._impl.runs()
        if not runs:
            raise StoreError(f"{self.describe} holds no runs")
        if run_id is None:
            return Run(self, max(runs, key=lambda r: (r.get("start_ms") or 0, r["run_id"])))
        exact = [r for r in runs if r["run_id"] == run_id]
        match = exact or [r for r in runs if r["run_id"].startswith(run_id) or r["run_id"].endswith(run_id)]
        if len(match) != 1:
            raise StoreError(f"{self.describe}: {'no run' if not match else 'several runs'} match '{run_id}'")
        return Run(self, match[0])

    def _select_runs(self, run=None, task=None, tags=None, since=None):
        if run is None:
            return self.runs(task=task, tags=tags, since=since)
        items = run if isinstance(run, (list, tuple, Records)) else [run]
        return [r if isinstance(r, Run) else self.run(r) for r in items]

    # -- per run tables
    def phases(self, run=None, task=None, tags=None, since=None):
        """Phases of a run (a Run, an id, or a list of them) or of the runs that match: per phase its energy (and per
        device), method, duration and the work marked while it was open (its nested phases included) with J per unit
        and throughput per second, as `wattscope show --json` gives them."""
        out = Records()
        for r in self._select_runs(run, task, tags, since):
            rows = self._impl.table("phases", r._row)
            work = self._impl.table("work", r._row)
            parent_of = {p["phase_id"]: p.get("parent") for p in rows}
            inside = {pid: {pid} for pid in parent_of}  # phase_id -> it and every phase nested in it
            for pid in parent_of:
                up, hops = parent_of[pid], 0
                while up is not None and up in inside and hops < len(parent_of):  # hops: a damaged store's loop
                    inside[up].add(pid)
                    up, hops = parent_of[up], hops + 1
            by_phase = {}  # phase_id -> unit -> amount marked while it was the innermost open phase
            for w in work:
                units = by_phase.setdefault(w.get("phase_id"), {})
                units[w["unit"]] = units.get(w["unit"], 0) + (w["amount"] or 0)
            for p in rows:
                rec = {"run_id": r.run_id, "task": r.task}
                rec.update({k: v for k, v in p.items() if k not in ("run_id", "device_energy_j")})
                start, end = p.get("start_ms"), p.get("end_ms")
                if end is None:
                    end = start
                rec["end_ms"] = end
                rec["start"], rec["end"] = _utc(start), _utc(end)
                rec["duration_s"] = (end - start) / 1000.0 if start is not None else None
                if "closed_by_run_end" in rec:
                    rec["closed_by_run_end"] = bool(rec["closed_by_run_end"])
                rec["devices"] = {k: v for k, v in _json_object(p.get("device_energy_j")).items()
                                  if isinstance(v, (int, float))}
                amounts = {}
                for pid in sorted(inside[p["phase_id"]]):
                    for unit, amount in by_phase.get(pid, {}).items():
                        amounts[unit] = amounts.get(unit, 0) + amount
                e, dur = rec.get("energy_j"), rec["duration_s"]
                rec["work"] = amounts
                rec["energy_per_unit_j"] = {u: (e / a if e is not None and a > 0 else None) for u, a in amounts.items()}
                rec["throughput_per_s"] = {u: (a / dur if dur else None) for u, a in amounts.items()}
                out.append(rec)
        return out

    def work(self, run=None, task=None, tags=None, since=None):
        """Every work marker stored (amount, unit, the phase it counted towards), with its time."""
        return self._rows("work", run, task, tags, since, time_col="ts_ms")

    def samples(self, run, device=None):
        """A run's samples: `device` "gpu0" (or 0) for one GPU's, None for every GPU's (gpu_samples); "cpu" for the
        CPU's (cpu_samples); "cpu_package", "cpu_dram" (or any RAPL domain) for its power zone's rows."""
        r = self._select_runs(run)[0]
        if device == "cpu":
            table, keep = "cpu_samples", None
        elif isinstance(device, str) and device.startswith("cpu_"):
            domain = device[len("cpu_"):]
            table, keep = "cpu_power_samples", lambda row: row.get("domain") == domain or row.get("zone") == domain
        else:
            if isinstance(device, str):
                m = re.fullmatch(r"gpu(\d+)", device)
                if not m:
                    raise ValueError(f"device '{device}': use gpu0, gpu1, ..., cpu, cpu_package or cpu_dram")
                device = int(m.group(1))
            table = "gpu_samples"
            keep = None if device is None else (lambda row: row.get("gpu_index") == device)
        return self._rows(table, r, time_col="ts_ms", keep=keep)

    def processes(self, run):
        """The processes seen during a run (pid, start time, command, cgroup unit, first and last tick)."""
        return self._rows("processes", run)

    def events(self, run, kind=None):
        """A run's events (marks, model descriptions, late sources, alerts), `kind` to keep one kind."""
        rows = self._rows("events", run, time_col="ts_ms", keep=(lambda e: e.get("kind") == kind) if kind else None)
        for e in rows:
            if isinstance(e.get("detail"), str) and e["detail"].startswith("{"):
                parsed = _json_object(e["detail"])
                if parsed:
                    e["detail"] = parsed
        return rows

    def _rows(self, table, run=None, task=None, tags=None, since=None, time_col=None, keep=None):
        out = Records()
        for r in self._select_runs(run, task, tags, since):
            for row in self._impl.table(table, r._row):
                if keep is not None and not keep(row):
                    continue
                if time_col is not None:
                    row["time"] = _utc(row.get(time_col))
                out.append(row)
        return out

    # -- advice, through the binary
    def _advice(self, run):
        binary = os.environ.get("WATTSCOPE_BINARY") or shutil.which("wattscope")
        if not binary:
            return None
        spec = self.spec
        args = [binary, "advise", run.run_id, "--json"]
        args += ["--csv", spec] if isinstance(self._impl, _CsvDir) else ["--db", spec]
        try:
            out = subprocess.run(args, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode != 0:
            return None
        try:
            return json.loads(out.stdout).get("advice")
        except ValueError:
            return None


def _as_ms(since):
    if since is None:
        return None
    if isinstance(since, (int, float)) and not isinstance(since, bool):
        return int(since)
    if isinstance(since, str):
        since = _dt.datetime.fromisoformat(since.replace("Z", "+00:00"))
    if isinstance(since, _dt.datetime):
        if since.tzinfo is None:
            since = since.replace(tzinfo=_dt.timezone.utc)  # as wattscope's own times: UTC
        return int(since.timestamp() * 1000)
    raise TypeError("since: a datetime (naive ones are UTC, as wattscope's times), ISO 8601 text or UTC milliseconds")


def open(store="wattscope.db"):  # noqa: A001 (wattscope.open, as sqlite3.connect: the name users look for)
    """Opens a wattscope store for reading: a SQLite file (`wattscope.db`), a CSV directory (`csv:DIR`, or a
    directory), or `mysql://USER@HOST[:PORT]/DATABASE` (through MySQLdb, pymysql or mysql.connector)."""
    store = os.fspath(store)
    if store.startswith(("mysql://", "mariadb://")):
        return Store(_Mysql(store), store)
    if store.startswith("csv:"):
        return Store(_CsvDir(store[4:]), store[4:])
    if os.path.isdir(store):
        return Store(_CsvDir(store), store)
    return Store(_Sqlite(store), store)
