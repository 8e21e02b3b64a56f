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
dots, as pandas.json_normalize does (`devices.gpu0`, `work.samples`, `energy_per_unit_j.samples`, `tags.lr`), and
writes missing numbers as NaN, missing times as NaT. A DataFrame of no rows still has its columns.

A damaged store never raises anything but StoreError, which names the store, and the run, table and column where it
can. A listing (runs(), phases(), samples(), ...) skips a damaged row with a StoreWarning that names it; asking for
that run by id (`store.run(id)`) raises StoreError.
"""

import builtins
import csv
import datetime as _dt
import json
import operator
import os
import re
import shutil
import sqlite3
import subprocess
import urllib.parse
import warnings

# The store schema this reader knows (src/core/schema.hpp, kSchemaVersion). A store with a newer one is refused, as
# the binary refuses it: its columns may mean something this reader does not know.
# 6: gpu_samples without uuid, name and vendor: samples() takes them from gpu_devices. 7: in SQLite gpu_samples is a
# view (its rows in gpu_sample_rows under a run key), read as the table was; CSV gpu_samples files leave out run_id.
SCHEMA_VERSION = 7

# Columns that hold text in every store (src/core/schema.cpp, ColType Text); CSV cells of any other column are
# numbers. tests check this list against schema.cpp, so the two cannot drift apart.
TEXT_COLUMNS = frozenset(
    "run_id task command host cpu_model tags wattscope_version summary vendor uuid name pci_bus_id energy_method "
    "power_source power_method zone domain kind source detail comm cmdline unit unit_kind device_energy_j start_edge "
    "end_edge".split())

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
# The columns of the tables the reader offers, as the binary writes them (src/core/schema.cpp; tests compare the two),
# so that a listing of no rows still has them where the store cannot say: a CSV directory has no file of a table that
# has no rows. Where the store has the table, its own columns come first.
_STORED_COLUMNS = {t: tuple(cols.split()) for t, cols in {
    "phases": "run_id phase_id name index parent start_ms end_ms start_tick end_tick energy_j energy_method "
              "device_energy_j attributed_energy_j closed_by_run_end start_edge end_edge energy_bound_j "
              "closed_by_repair gpu_temp_start_c gpu_temp_end_c",
    "work": "run_id seq ts_ms amount unit phase_id total",
    "events": "run_id seq ts_ms kind source detail",
    "processes": "run_id pid start_time ppid comm cmdline uid unit unit_kind first_tick last_tick",
    "cpu_samples": "run_id tick ts_ms util_pct mem_used_bytes mem_total_bytes package_power_w dram_power_w "
                   "package_energy_j dram_energy_j busy_s power_method",
    "cpu_power_samples": "run_id tick ts_ms zone socket domain power_w energy_j",
    "gpu_samples": "run_id tick ts_ms gpu_index power_w power_avg_w energy_j util_gpu_pct "
                   "util_mem_pct mem_used_bytes mem_total_bytes temp_gpu_c temp_mem_c clock_sm_mhz clock_gfx_mhz "
                   "clock_mem_mhz pcie_link_width pcie_link_width_max pcie_tx_bytes_per_s pcie_rx_bytes_per_s fan_pct "
                   "pstate power_limit_w throttle_reasons util_enc_pct util_dec_pct mem_reserved_bytes mem_free_bytes "
                   "clock_video_mhz mig_mode ecc_corrected_errors ecc_uncorrected_errors remapped_rows_correctable "
                   "remapped_rows_uncorrectable remap_pending remap_failed pcie_replays nvlink_tx_bytes_per_s "
                   "nvlink_rx_bytes_per_s throttle_power_s throttle_thermal_s nvlink_tx_bytes nvlink_rx_bytes",
}.items()}
# What a Run record holds, in this order (Run.as_dict; its nested devices and tags follow).
_RUN_FIELDS = ("run_id", "task", "command", "host", "start", "end", "start_ms", "end_ms", "duration_s", "exit_status",
               "interval_s", "samples", "energy_j", "energy_method", "attributed_energy_j", "attributed_energy_method",
               "simulated", "wattscope_version", "carbon", "cost", "measurement")
_MAX_CSV_FIELD = 64 << 20  # as the binary's CSV reader: a longer record is not a wattscope CSV file
# A JSON cell (runs.tags, runs.summary, phases.device_energy_j, events.detail) is parsed only within these bounds:
# Python's json recurses once per level and ends in RecursionError (or, with a raised recursion limit, a crash) on a
# cell nested a few thousand deep. wattscope writes a few levels and a few KiB.
_MAX_JSON_BYTES = 1 << 20
_MAX_JSON_DEPTH = 64
_WARN_ROWS = 5  # damaged rows named one by one in a listing's warning; the rest are counted


class StoreError(RuntimeError):
    """A store that cannot be read: missing, not wattscope's, damaged, or of a newer schema."""


class StoreWarning(UserWarning):
    """A listing skipped damaged rows; the message names the store and, for each row, its run, table and column."""


class _Damage(Exception):
    """A row the reader cannot use: `column` says where, the message what; `over_bounds` when it is a JSON cell past
    the parser's bounds (rather than text that is not JSON)."""

    def __init__(self, column, reason, over_bounds=False):
        super().__init__(reason)
        self.column, self.over_bounds = column, over_bounds


def _short(value):
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _utc(ms, column="ts_ms"):
    if ms is None:
        return None
    try:
        return _dt.datetime.fromtimestamp(ms / 1000.0, tz=_dt.timezone.utc)
    except (OverflowError, OSError, ValueError, TypeError):
        raise _Damage(column, f"{_short(ms)} is not a time (UTC ms)") from None


_JSON_SPECIAL = re.compile(r'[\\"\[\]{}]')


def _json_nesting_within(text, limit):
    """True when no array or object in `text` nests deeper than `limit`: one pass over its brackets and quotes, none
    of them recursive, so a hostile cell costs its length and nothing more."""
    depth, in_string, skip = 0, False, -1
    for m in _JSON_SPECIAL.finditer(text):
        i = m.start()
        if i == skip:  # the character after a backslash in a string
            continue
        c = text[i]
        if in_string:
            if c == "\\":
                skip = i + 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > limit:
                return False
        elif c in "]}":
            depth -= 1
    return True


def _json_object(text, column):
    """A stored JSON object ({} for an empty cell). Raises _Damage for one that is not text, not a JSON object, over
    _MAX_JSON_BYTES or nested deeper than _MAX_JSON_DEPTH."""
    if text is None or text == "":
        return {}
    if not isinstance(text, str):
        raise _Damage(column, f"{type(text).__name__} where JSON text belongs")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > _MAX_JSON_BYTES:
        raise _Damage(column, f"{size} bytes of JSON; the reader's limit is {_MAX_JSON_BYTES}", over_bounds=True)
    if not _json_nesting_within(text, _MAX_JSON_DEPTH):
        raise _Damage(column, f"JSON nested deeper than {_MAX_JSON_DEPTH} levels", over_bounds=True)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise _Damage(column, f"not JSON ({e})") from None
    if not isinstance(value, dict):
        raise _Damage(column, f"JSON {type(value).__name__} where an object belongs")
    return value


def _check_row(row, required=()):
    """Raises _Damage at the first cell of the wrong type: text where a number belongs (SQLite keeps what it is
    given), a number or blob where text belongs, or nothing in a key column."""
    for column, value in row.items():
        if value is None:
            if column in required:
                raise _Damage(column, "missing")
        elif column in TEXT_COLUMNS:
            if not isinstance(value, str):
                raise _Damage(column, f"{_short(value)} where text belongs")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Damage(column, f"{_short(value)} where a number belongs")


def _order_key(value):
    # Sorting rows of a damaged store must not raise: numbers in order, anything else first.
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return (1, value)
    return (0, 0)


class _BadText(bytes):
    """Text from SQLite that is not UTF-8: kept apart so that _check_row names its row, instead of sqlite3 failing
    the whole query."""


def _sqlite_text(data):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return _BadText(data)


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
            elif col in _TIME_FIELDS:
                frame[col] = pd.to_datetime(frame[col], utc=True)
            elif frame[col].dtype == object and not _is_text_field(col) and frame[col].map(
                    lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))).all():
                # A number column with gaps, or with nothing at all (energy_j of runs that measured none): NaN.
                frame[col] = pd.to_numeric(frame[col]).astype("float64")
        return frame


_TIME_FIELDS = frozenset(("start", "end", "time"))
_TEXT_FIELDS = TEXT_COLUMNS | {"attributed_energy_method"}


def _is_text_field(column):
    return column in _TEXT_FIELDS or column.startswith("device_methods.")


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
            self.db.text_factory = _sqlite_text
            names = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        except sqlite3.Error as e:
            raise StoreError(f"'{path}' is not a SQLite database: {e}") from None
        self.describe = f"database '{path}'"
        if "runs" not in names:
            raise StoreError(f"{self.describe} holds no wattscope runs (no table 'runs')")
        stored = None
        if "meta" in names:
            rows = self._select("SELECT value FROM meta WHERE key = 'schema_version'", what="table 'meta'")
            stored = rows[0]["value"] if rows else None
        _check_version(stored, self.describe)
        self.tables = names

    def _select(self, sql, args=(), what=""):
        try:
            cur = self.db.execute(sql, args)
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row)) for row in cur.fetchall()]
        except sqlite3.Error as e:  # a damaged file: "database disk image is malformed", "file is not a database"
            raise StoreError(f"{self.describe}: {what}: {e}") from None

    def runs(self):
        return self._select("SELECT * FROM runs ORDER BY start_ms, run_id", what="table 'runs'")

    def table(self, name, run):
        if name not in self.tables:
            return []
        order = ", ".join(f'"{c}"' for c in _ORDER[name])
        return self._select(f'SELECT * FROM "{name}" WHERE run_id = ? ORDER BY {order}', (run["run_id"],),
                            what=f"run '{run['run_id']}', table '{name}'")

    def columns(self, name):
        if name not in self.tables:
            return None
        return [r["name"] for r in self._select(f'PRAGMA table_info("{name}")', what=f"table '{name}'")]


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

    def _select(self, sql, args=(), what=""):
        try:
            cur = self.db.cursor()
        except Exception as e:  # each connector's own error types
            raise StoreError(f"{self.describe}: {what}: {e}") from None
        try:
            cur.execute(sql, args)
            cols = [d[0] for d in cur.description]
            out = []
            for row in cur.fetchall():
                out.append({c: (_mysql_text(v) if isinstance(v, (bytes, bytearray)) else
                                float(v) if type(v).__name__ == "Decimal" else v) for c, v in zip(cols, row)})
            return out
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(f"{self.describe}: {what}: {e}") from None
        finally:
            cur.close()

    def runs(self):
        return self._select("SELECT * FROM `runs` ORDER BY `start_ms`, `run_id`", what="table 'runs'")

    def table(self, name, run):
        if name not in self.tables:
            return []
        order = ", ".join(f"`{c}`" for c in _ORDER[name])
        return self._select(f"SELECT * FROM `{name}` WHERE `run_id` = {self.param} ORDER BY {order}", (run["run_id"],),
                            what=f"run '{run['run_id']}', table '{name}'")

    def columns(self, name):
        if name not in self.tables:
            return None
        cur = self.db.cursor()
        try:
            cur.execute(f"SELECT * FROM `{name}` LIMIT 0")
            cur.fetchall()
            return [d[0] for d in cur.description]
        except Exception as e:
            raise StoreError(f"{self.describe}: table '{name}': {e}") from None
        finally:
            cur.close()


def _mysql_text(data):
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return _BadText(data)


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
                        # The file itself is cut or garbled (a short last line: its writer was killed): every row
                        # after it would be read into the wrong columns.
                        raise StoreError(f"{self.describe}: {path}, line {n}: {len(fields)} fields, the header has "
                                         f"{len(header)}")
                    rows.append({c: _cell(c, v) for c, v in zip(header, fields)})
                return header, rows
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise StoreError(f"{self.describe}: {path}: {e}") from None

    def runs(self):
        out = []
        for name in sorted(os.listdir(self.dir)):
            if not name.endswith("_runs.csv"):
                continue
            for row in self._read(os.path.join(self.dir, name))[1]:
                if isinstance(row.get("run_id"), str):
                    self.prefix[row["run_id"]] = name[: -len("runs.csv")]
                out.append(row)
        out.sort(key=lambda r: (_order_key(r.get("start_ms")), str(r.get("run_id"))))
        return out

    def table(self, name, run):
        prefix = self.prefix.get(run["run_id"])
        if prefix is None:
            self.runs()
            prefix = self.prefix.get(run["run_id"])
        path = os.path.join(self.dir, f"{prefix}{name}.csv")
        if prefix is None or not os.path.exists(path):
            return []  # a table with no rows for this run has no file
        header, rows = self._read(path)
        if "run_id" in header:
            rows = [r for r in rows if r.get("run_id") == run["run_id"]]
        else:  # a gpu_samples file of schema 7: one run's rows, without the column
            rows = [{"run_id": run["run_id"], **r} for r in rows]
        if name == "phases":
            # A phase has a row when it begins (open: no end) and another when it ends or `wattscope repair` closes
            # it, appended: the last row of a phase_id is the phase as it stands (the SQL stores keep only that one).
            rows = list({r.get("phase_id"): r for r in rows}.values())
        keys = _ORDER[name]
        rows.sort(key=lambda r: tuple(_order_key(r.get(k)) for k in keys))
        return rows

    def columns(self, name):
        # A run with no rows of a table has no file of it; another run's file has the header.
        if not self.prefix:
            self.runs()
        for prefix in sorted(set(self.prefix.values())):
            path = os.path.join(self.dir, f"{prefix}{name}.csv")
            if os.path.exists(path):
                try:
                    with builtins.open(path, newline="", encoding="utf-8") as f:
                        head = next(csv.reader(f), None)
                    # A gpu_samples file of schema 7 leaves out run_id; its rows are given it (table()).
                    return head if head is None or "run_id" in head else ["run_id"] + head
                except (OSError, UnicodeDecodeError, csv.Error) as e:
                    raise StoreError(f"{self.describe}: {path}: {e}") from None
        return None


def _cell(column, text):
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
        return text  # not a number where one belongs: _check_row names the row


# ---------------------------------------------------------------- what the reader gives


def _num(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value):
    return value if isinstance(value, str) else None


class Run:
    """One run: the figures of its summary (`energy_j`, `energy_method`, `duration_s`, `devices`, ...) and, read on
    first use, its phases, work and advice."""

    def __init__(self, store, row):
        """Raises _Damage for a row it cannot read (Store turns that into a StoreWarning or a StoreError)."""
        _check_row(row, required=("run_id",))
        self._store, self._row = store, row
        self.summary = _json_object(row.get("summary"), "summary")
        self.tags = _json_object(row.get("tags"), "tags")
        self.run_id = row["run_id"]
        self.task = row.get("task")
        self.command = row.get("command")
        self.host = row.get("host")
        self.start_ms = row.get("start_ms")
        self.end_ms = row.get("end_ms")
        self.start, self.end = _utc(self.start_ms, "start_ms"), _utc(self.end_ms, "end_ms")
        self.duration_s = row.get("duration_s")
        self.exit_status = row.get("exit_status")
        self.interval_s = row["interval_ms"] / 1000.0 if row.get("interval_ms") is not None else None
        self.samples = row.get("samples")
        self.energy_j = row.get("total_energy_j")
        self.wattscope_version = row.get("wattscope_version")
        self.simulated = self.tags.get("simulated") == "true"
        self.devices, self.device_methods = self._devices()
        self.energy_method = self._method()
        self.attributed_energy_j = self._attributed()
        # The run's own processes' share, measured as the run's total is (show --json has the same two keys).
        self.attributed_energy_method = (None if self.attributed_energy_j is None else
                                         f"attributed ({self.energy_method})" if self.energy_method else "attributed")
        # Carbon and cost as the recorder charged them, with their source (`show --json` gives the same keys); None for
        # a run recorded before wattscope charged carbon (show gives it the world's yearly figure, marked assumed),
        # and for cost, one recorded without a price.
        self.carbon = self._rate("carbon", ("grams", "g_per_kwh", "source", "region", "assumed", "pue", "devices"))
        self.cost = self._rate("cost", ("amount", "price_per_kwh", "currency", "source", "pue", "devices"))
        m = self.summary.get("measurement")
        m = m if isinstance(m, dict) else {}
        # The hottest GPU at the first and last sample, and the warm-up before its power settled.
        self.measurement = {k: (_num(m.get(k)) if k != "settled" else m.get(k) is not False)
                            for k in ("gpu_temp_start_c", "gpu_temp_end_c", "warmup_s", "settled")}
        self._phases = self._work = None

    def _rate(self, key, fields):
        part = self.summary.get(key)
        if not isinstance(part, dict) or _num(part.get(fields[0])) is None:
            return None
        out = {}
        for f in fields:
            v = part.get(f)
            if f == "devices":
                out[f] = {str(k): _num(x) for k, x in v.items()} if isinstance(v, dict) else {}
            elif f in ("source", "region", "currency"):
                out[f] = _str(v)
            elif f == "assumed":
                out[f] = v is True
            else:
                out[f] = _num(v)
        return out

    def _devices(self):
        energy, method = {}, {}
        gpus = self.summary.get("gpus")
        for g in gpus if isinstance(gpus, list) else []:
            if not isinstance(g, dict):
                continue
            name = f"gpu{g.get('index', g.get('gpu_index', len(energy)))}"
            energy[name] = _num(g.get("energy_j"))
            method[name] = _str(g.get("energy_method"))
        cpu = self.summary.get("cpu")
        cpu = cpu if isinstance(cpu, dict) else {}
        for part in ("package", "dram"):
            v = _num(cpu.get(f"{part}_energy_j"))
            if v is not None:
                energy[f"cpu_{part}"] = v
                method[f"cpu_{part}"] = _str(cpu.get("energy_method"))
        return energy, method

    def _attributed(self):
        """Energy attributed to the run's processes: attributed_j summed over the summary's attribution devices (GPUs
        and CPU); None where the run has no attribution (no process was tracked) or no device in it (nothing measured
        energy: 0 J would read as "your processes used none")."""
        attribution = self.summary.get("attribution")
        devices = attribution.get("devices") if isinstance(attribution, dict) else None
        found = [_num(d.get("attributed_j")) for d in devices.values() if isinstance(d, dict)] \
            if isinstance(devices, dict) else []
        found = [v for v in found if v is not None]
        return float(sum(found)) if found else None

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
        d = {k: getattr(self, k) for k in _RUN_FIELDS}
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

    # -- damaged rows
    @staticmethod
    def _damage(table, run_id, damage):
        where = f"run '{_short(run_id)}', " if run_id is not None else ""
        return f"{where}table '{table}', column '{damage.column}': {damage}"

    def _warn_skipped(self, skipped):
        if not skipped:
            return
        more = len(skipped) - _WARN_ROWS
        text = "; ".join(skipped[:_WARN_ROWS]) + (f"; and {more} more" if more > 0 else "")
        from . import _caller_stacklevel  # the package's, loaded by now

        warnings.warn(f"{self.describe}: skipped {len(skipped)} damaged row{'s' if len(skipped) > 1 else ''}: {text}",
                      StoreWarning, stacklevel=_caller_stacklevel())

    def _run(self, row):
        try:
            return Run(self, row)
        except _Damage as d:
            raise StoreError(f"{self.describe}: {self._damage('runs', row.get('run_id'), d)}") from None

    # -- runs
    def runs(self, task=None, tags=None, since=None):
        """Runs in start order, those of `task` (a name or a list of names), with every tag in `tags` (a dict; a
        value None means "has the key"; a number matches a tag of that numeric value, as the DataFrame shows it:
        0.001 matches "1e-3"; text matches text), started at or after `since` (a datetime, ISO text or UTC ms)."""
        since_ms = _as_ms(since)
        tasks = {task} if isinstance(task, str) else set(task) if task is not None else None
        out, skipped = Records(columns=_RUN_FIELDS), []
        for row in self._impl.runs():
            if tasks is not None and row.get("task") not in tasks:
                continue
            try:
                run = Run(self, row)
            except _Damage as d:
                skipped.append(self._damage("runs", row.get("run_id"), d))
                continue
            if since_ms is not None and (run.start_ms or 0) < since_ms:
                continue
            if tags and not all(k in run.tags and _tag_matches(run.tags[k], v) for k, v in tags.items()):
                continue
            out.append(run)
        self._warn_skipped(skipped)
        return out

    def run(self, run_id=None):
        """One run: by id, or a unique prefix or suffix of it (as the binary takes them); the latest without one.
        StoreError when its row is damaged."""
        runs = [r for r in self._impl.runs() if isinstance(r.get("run_id"), str)]
        if not runs:
            raise StoreError(f"{self.describe} holds no runs")
        if run_id is None:
            return self._run(max(runs, key=lambda r: (_order_key(r.get("start_ms")), r["run_id"])))
        exact = [r for r in runs if r["run_id"] == run_id]
        match = exact or [r for r in runs if r["run_id"].startswith(run_id) or r["run_id"].endswith(run_id)]
        if len(match) != 1:
            raise StoreError(f"{self.describe}: {'no run' if not match else 'several runs'} match '{run_id}'")
        return self._run(match[0])

    def _select_runs(self, run=None, task=None, tags=None, since=None):
        if run is None:
            return self.runs(task=task, tags=tags, since=since)
        items = run if isinstance(run, (list, tuple, Records)) else [run]
        return [r if isinstance(r, Run) else self.run(r) for r in items]

    # -- per run tables
    def _columns(self, table, drop=(), add=()):
        """A listing's columns, so that a DataFrame of no rows still has them: the table's as the store has it."""
        stored = list(self._impl.columns(table) or [])
        stored += [c for c in _STORED_COLUMNS.get(table, ("run_id",) + _ORDER[table]) if c not in stored]
        return [c for c in stored if c not in drop] + [c for c in add if c not in stored]

    def _table(self, table, run, skipped):
        """A run's rows of `table`, those of a damaged row left out (and named in `skipped`)."""
        good = []
        for row in self._impl.table(table, run._row):
            try:
                _check_row(row, required=_ORDER[table])
            except _Damage as d:
                skipped.append(self._damage(table, run.run_id, d))
                continue
            good.append(row)
        return good

    def phases(self, run=None, task=None, tags=None, since=None):
        """Phases of a run (a Run, an id, or a list of them) or of the runs that match: per phase its energy (and per
        device), method, duration and the work marked while it was open (its nested phases included) with J per unit
        and throughput per second, as `wattscope show --json` gives them."""
        out = Records(columns=["run_id", "task"] + self._columns("phases", drop=("run_id", "device_energy_j"),
                                                                 add=("start", "end", "duration_s")))
        skipped = []
        for r in self._select_runs(run, task, tags, since):
            rows = []  # (phase row, its devices' energies)
            for p in self._table("phases", r, skipped):
                try:
                    devices = _json_object(p.get("device_energy_j"), "device_energy_j")
                    _utc(p.get("start_ms"), "start_ms"), _utc(p.get("end_ms"), "end_ms")
                except _Damage as d:
                    skipped.append(self._damage("phases", r.run_id, d))
                    continue
                rows.append((p, devices))
            work = self._table("work", r, skipped)
            parent_of = {p["phase_id"]: p.get("parent") for p, _ in rows}
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
            for p, devices in rows:
                rec = {"run_id": r.run_id, "task": r.task}
                rec.update({k: v for k, v in p.items() if k not in ("run_id", "device_energy_j")})
                # end_ms None: open, no end stored yet (the run still records, or died and awaits `wattscope repair`)
                start, end = p.get("start_ms"), p.get("end_ms")
                rec["end_ms"] = end
                rec["start"], rec["end"] = _utc(start), _utc(end)
                rec["duration_s"] = (end - start) / 1000.0 if start is not None and end is not None else None
                for flag in ("closed_by_run_end", "closed_by_repair"):
                    if flag in rec:
                        rec[flag] = bool(rec[flag])
                rec["devices"] = {k: v for k, v in devices.items() if _num(v) is not None}
                amounts = {}
                for pid in sorted(inside[p["phase_id"]]):
                    for unit, amount in by_phase.get(pid, {}).items():
                        amounts[unit] = amounts.get(unit, 0) + amount
                e, dur = rec.get("energy_j"), rec["duration_s"]
                rec["work"] = amounts
                rec["energy_per_unit_j"] = {u: (e / a if e is not None and a > 0 else None) for u, a in amounts.items()}
                rec["throughput_per_s"] = {u: (a / dur if dur else None) for u, a in amounts.items()}
                out.append(rec)
        self._warn_skipped(skipped)
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
            keep = None if device is None else (lambda row: row.get("gpu_index") == device)
            return self._gpu_samples(r, keep)
        return self._rows(table, r, time_col="ts_ms", keep=keep)

    def _gpu_samples(self, run, keep):
        """gpu_samples rows with each GPU's uuid, name and vendor beside gpu_index, as the view gpu_samples_named
        shows them: a store of schema 6 keeps them once in gpu_devices, an older one in every row."""
        identity = ("uuid", "name", "vendor")
        devices = {d.get("gpu_index"): d for d in self._table("gpu_devices", run, [])}

        def name(row):
            d = devices.get(row.get("gpu_index"), {})
            for c in identity:
                if row.get(c) is None:
                    row[c] = d.get(c)

        out = self._rows("gpu_samples", run, time_col="ts_ms", keep=keep, parse=name)
        cols = [c for c in out._columns if c not in identity]
        at = cols.index("gpu_index") + 1 if "gpu_index" in cols else len(cols)
        out._columns = cols[:at] + list(identity) + cols[at:]
        return out

    def processes(self, run):
        """The processes seen during a run (pid, start time, command, cgroup unit, first and last tick)."""
        return self._rows("processes", run)

    def events(self, run, kind=None):
        """A run's events (marks, model descriptions, late sources, alerts), `kind` to keep one kind; a `detail`
        that is a JSON object is parsed."""
        return self._rows("events", run, time_col="ts_ms", keep=(lambda e: e.get("kind") == kind) if kind else None,
                          parse=_event_detail)

    def _rows(self, table, run=None, task=None, tags=None, since=None, time_col=None, keep=None, parse=None):
        out = Records(columns=self._columns(table, add=("time",) if time_col else ()))
        skipped = []
        for r in self._select_runs(run, task, tags, since):
            for row in self._table(table, r, skipped):
                if keep is not None and not keep(row):
                    continue
                try:
                    if time_col is not None:
                        row["time"] = _utc(row.get(time_col), time_col)
                    if parse is not None:
                        parse(row)
                except _Damage as d:
                    skipped.append(self._damage(table, r.run_id, d))
                    continue
                out.append(row)
        self._warn_skipped(skipped)
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
            shown = json.loads(out.stdout)
        except (ValueError, RecursionError):
            return None
        return shown.get("advice") if isinstance(shown, dict) else None


def _event_detail(row):
    # Details are text; those wattscope writes as a JSON object (a model's parameters and FLOPs) are parsed.
    detail = row.get("detail")
    if isinstance(detail, str) and detail.startswith("{"):
        try:
            parsed = _json_object(detail, "detail")
        except _Damage as d:
            if d.over_bounds:
                raise
            return  # free text that happens to start with a brace
        if parsed:
            row["detail"] = parsed


def _tag_matches(stored, wanted):
    """A tag as stored (text) against what runs(tags=...) was given: a number by its numeric value, as .df() shows
    the tag (64 matches "64" and "64.0", 0.001 matches "1e-3"); True and False as "true" and "false"; text as text."""
    if wanted is None:
        return True
    if isinstance(wanted, bool):
        return isinstance(stored, str) and stored.lower() == str(wanted).lower()
    if isinstance(wanted, str):
        return stored == wanted
    number = _user_number(wanted)
    if number is None:
        return stored == str(wanted)
    value = _stored_number(stored)
    return value is not None and value == number


def _user_number(value):
    # numpy scalars, Decimal and Fraction too, as the helper takes them; an int stays exact.
    try:
        return operator.index(value)
    except TypeError:
        pass
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _stored_number(text):
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return text
    if not isinstance(text, str) or "_" in text:  # float() takes 1_000; pandas does not
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
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
