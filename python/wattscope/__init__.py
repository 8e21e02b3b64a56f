"""Markers for wattscope: tell the wattscope that runs this program where its phases begin and end, how much work it
did, and what model it trains, so that energy is reported per phase and per unit of work (J/sample, J/token).

    import wattscope

    wattscope.describe_model(model, flops=4.1e9)
    for epoch in range(3):
        with wattscope.phase("epoch", index=epoch):
            for batch in loader:
                train_step(batch)
                wattscope.work(len(batch), unit="samples")
        wattscope.mark("checkpoint")

    @wattscope.phase("evaluate")
    def evaluate(): ...

In a job with several processes per machine (torchrun, Slurm, MPI), phases, marks and the model description are sent
by local rank 0 only, and work by every rank, so work adds up and phases do not nest eight times.

Standard library only. Under `wattscope run` the environment holds WATTSCOPE_SOCKET, a Unix datagram socket; phases,
marks and model descriptions go to it as lines of JSON (the protocol is docs/markers.md in the wattscope repository)
at once; work is summed per unit and sent at most every 100 ms, and always before the next phase boundary, so a loop
may call work() per sample. Nothing ever blocks the program: when wattscope is gone, or its queue is full, work
stays summed for the next send and a phase boundary is retried for at most ~50 ms. Without WATTSCOPE_SOCKET every
call is a no-op, so the same program runs unchanged outside wattscope.

Nor does a marker ever raise into the program: amounts and indices may be anything Python can turn into a number
(numpy scalars, 0-d tensors, Decimal, Fraction); a marker that is still invalid (a negative amount, NaN, a name
wattscope would refuse) is dropped with one MarkerWarning per kind of problem. `wattscope.configure(strict=True)`
(or WATTSCOPE_STRICT=1) makes such a marker raise ValueError instead, for tests and debugging.

Reading the results back (`wattscope.open("wattscope.db").runs()`) is in wattscope.reader.
"""

import atexit
import errno
import functools
import json
import math
import operator
import os
import re
import socket
import sys
import threading
import time
import warnings

__all__ = ["phase", "work", "mark", "describe_model", "enabled", "flush", "count", "batch_size", "Phase", "configure",
           "measure", "begin_window", "end_window", "Measurement", "measurements", "default_socket",
           "MarkerWarning", "open", "Store", "Run", "Records", "StoreError", "StoreWarning"]
__version__ = "0.1.0"

_ENV = "WATTSCOPE_SOCKET"
_lock = threading.RLock()
_sock = None
_sock_pid = None


def _interval_s():
    """How often coalesced work is sent at most (WATTSCOPE_MARKER_INTERVAL_MS, default 100 ms, 0 … 10 s)."""
    try:
        ms = float(os.environ.get("WATTSCOPE_MARKER_INTERVAL_MS", "100"))
    except ValueError:
        ms = 100.0
    return min(max(ms, 0.0), 10000.0) / 1000.0 if math.isfinite(ms) else 0.1


_INTERVAL_S = _interval_s()


class MarkerWarning(UserWarning):
    """A marker was dropped because wattscope would refuse it (a bad amount, index, name or unit)."""


def _limits():
    """The protocol's limits, shared with the binary (CMake generates its constants from the same file)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "marker_limits.json")
    try:
        with open(path, encoding="utf-8") as f:
            limits = json.load(f)
        return {k: int(limits[k]) for k in ("max_marker_line_bytes", "max_phase_name_bytes", "max_work_unit_bytes",
                                            "max_amount")}
    except (OSError, ValueError, KeyError, TypeError) as e:
        # A broken install: markers still go out, and wattscope itself still applies its limits to them.
        warnings.warn(f"wattscope: cannot read {path} ({e}); names and units are not checked for length here",
                      MarkerWarning, stacklevel=2)
        return {"max_marker_line_bytes": None, "max_phase_name_bytes": None, "max_work_unit_bytes": None,
                "max_amount": 10**18}


_LIMITS = _limits()
_MAX_LINE = _LIMITS["max_marker_line_bytes"]
_MAX_NAME = _LIMITS["max_phase_name_bytes"]
_MAX_UNIT = _LIMITS["max_work_unit_bytes"]
_MAX_AMOUNT = _LIMITS["max_amount"]  # per line; a larger coalesced sum goes out in several lines
_MAX_INDEX = 2**63 - 1  # the binary keeps an index or parameter count as an int64
_MAX_WHOLE_FLOAT = 2.0**53  # past it a float no longer holds every whole number (the binary's rule too)
# The listener refuses a datagram over 64 KiB; a work line is ~70 bytes, so a datagram of this many bytes carries
# hundreds of units at once.
_MAX_DATAGRAM = 60000
# A full queue (EAGAIN) is met by a phase boundary with a few short retries, at most this long in all: a boundary is
# rare (per phase, not per batch), and losing one misplaces every later phase. Work never waits: it stays pending.
_BOUNDARY_RETRY_S = (0.001, 0.002, 0.004, 0.008, 0.016, 0.02)

# Work is summed here per unit and sent at most every _INTERVAL_S (and before every begin, end, mark and model, and
# at exit), so a loop that calls work() 100 000 times a second sends ten datagrams a second and loses nothing.
_pending = {}
# unit -> the total declared for it (work(..., total=N)), sent with that unit's next work line.
_totals = {}
_last_flush = 0.0
_wake = threading.Event()
_flusher = None
_undelivered = 0  # phase boundaries, marks and model descriptions that could not be handed over


_strict = None  # configure(strict=...); None: WATTSCOPE_STRICT decides
_warned = set()  # kinds of invalid input warned about already: a loop that repeats a mistake warns once
_good_units = set()  # units checked already: work() is called per batch, the unit rarely changes


def configure(strict=None):
    """`strict=True`: an invalid marker (a negative or NaN amount, a bad index, a name or unit wattscope would refuse)
    raises ValueError (TypeError for a describe_model or count argument of the wrong kind) instead of being dropped
    with a MarkerWarning. The default is WATTSCOPE_STRICT=1 in the environment, else False: a mistake in
    instrumentation should not end a training run. Returns the settings now in force."""
    global _strict
    if strict is not None:
        _strict = bool(strict)
    return {"strict": _is_strict()}


def _is_strict():
    return _strict if _strict is not None else os.environ.get("WATTSCOPE_STRICT") == "1"


def _caller_stacklevel():
    # The warning points at the user's line, however deep in this package it was raised.
    here = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
        frame, level = frame.f_back, level + 1
    return level


def _reject(kind, message, error=ValueError):
    """Invalid input: raised under strict; else warned once per kind, and the marker dropped. Returns None."""
    if _is_strict():
        raise error(message)
    if kind in _warned:
        return None
    _warned.add(kind)
    text = (f"wattscope: {message}; the marker is dropped (later ones with a bad {kind} are dropped without a "
            "word; wattscope.configure(strict=True) raises instead)")
    try:
        warnings.warn(text, MarkerWarning, stacklevel=_caller_stacklevel())
    except Exception:  # a filter that turns warnings into errors: the program still runs on
        try:
            sys.stderr.write(text + "\n")
        except Exception:
            pass
    return None


def _excerpt(value):
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _boolean(value):
    # True counts as 1 everywhere in Python, but work(True) or index=False is a mistake, not a count.
    return isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def _number(value, kind, maximum=None):
    """`value` as an int (exact, when it is a whole number type: numpy integers, integer tensors) or a float (numpy
    floats, 0-d tensors, Decimal, Fraction), finite, >= 0 and <= maximum; None (after _reject) when it is not."""
    if type(value) is int or type(value) is float:  # the common case, quickly
        v = value
    elif isinstance(value, (str, bytes, bytearray)) or _boolean(value):
        return _reject(kind, f"{kind} must be a number, not {_excerpt(value)}")
    else:
        try:
            v = operator.index(value)
        except Exception:
            try:
                v = float(value)
            except Exception:
                return _reject(kind, f"{kind} must be a number, not {_excerpt(value)}")
    if v != v or v < 0 or v == math.inf or (maximum is not None and v > maximum):
        limit = f"from 0 to {maximum:.0e}" if maximum is not None else ">= 0"
        return _reject(kind, f"{kind} must be a finite number {limit}, not {_excerpt(value)}")
    return v


def _whole(value, kind):
    """`value` as an int from 0 to 2^63-1: anything operator.index takes (numpy integers, integer tensors), or a
    float holding a whole number (3.0), as the binary takes it; None (after _reject) otherwise."""
    if type(value) is int:
        v = value
    elif isinstance(value, (str, bytes, bytearray)) or _boolean(value):
        return _reject(kind, f"{kind} must be a whole number, not {_excerpt(value)}")
    else:
        try:
            v = operator.index(value)
        except Exception:
            try:
                f = float(value)
            except Exception:
                f = math.nan
            if not (math.isfinite(f) and f == math.floor(f) and abs(f) <= _MAX_WHOLE_FLOAT):
                return _reject(kind, f"{kind} must be a whole number, not {_excerpt(value)}")
            v = int(f)
    if not 0 <= v <= _MAX_INDEX:
        return _reject(kind, f"{kind} must be a whole number from 0 to 2^63-1, not {_excerpt(value)}")
    return v


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _text(value, kind, max_bytes):
    """`value` if wattscope takes it as a name or unit: a non-empty str of printable UTF-8 (no byte below 0x20, no
    DEL: the binary's own rule) of at most max_bytes bytes; None (after _reject) otherwise."""
    if not isinstance(value, str) or not value:
        return _reject(kind, f"a {kind} must be a non-empty string, not {_excerpt(value)}")
    if _CONTROL.search(value):
        return _reject(kind, f"a {kind} must be printable text (no control characters such as a newline), not "
                             f"{_excerpt(value)}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate
        return _reject(kind, f"a {kind} must be valid Unicode, not {_excerpt(value)}")
    if max_bytes is not None and size > max_bytes:
        return _reject(kind, f"a {kind} is at most {max_bytes} bytes of UTF-8, not {size} ({_excerpt(value)})")
    return value


def _unit(unit):
    if type(unit) is str and unit in _good_units:
        return unit
    if _text(unit, "work unit", _MAX_UNIT) is None:
        return None
    if len(_good_units) < 1024:
        _good_units.add(unit)
    return unit


def default_socket():
    """This user's default marker socket, where `wattscope record --socket` (or `serve --socket`) started without a
    path listens: $XDG_RUNTIME_DIR/wattscope/markers.sock where the session has a runtime directory of this user's,
    else /tmp/wattscope-user-UID/markers.sock. The binary computes the same path."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    try:
        if xdg and xdg.startswith("/"):
            st = os.stat(xdg)
            if os.path.isdir(xdg) and st.st_uid == os.geteuid():
                return os.path.join(xdg, "wattscope", "markers.sock")
    except OSError:
        pass
    return f"/tmp/wattscope-user-{os.geteuid()}/markers.sock"


_found = (0.0, None)  # (when looked, the default socket found then or None): looked up at most once a second


def _meter_path():
    """Where markers go: WATTSCOPE_SOCKET (set by `wattscope run`), else this user's default socket when a wattscope
    listens there (a socket file of this user's; looked for at most once a second), else None."""
    global _found
    path = os.environ.get(_ENV)
    if path:
        return path
    now = time.monotonic()
    looked, found = _found
    if now - looked < 1.0 and looked > 0:
        return found
    found = None
    try:
        candidate = default_socket()
        st = os.lstat(candidate)
        import stat as _stat
        if _stat.S_ISSOCK(st.st_mode) and st.st_uid == os.geteuid():
            found = candidate
    except OSError:
        found = None
    _found = (now, found)
    return found


def enabled():
    """True when a wattscope listens for this program's markers: under `wattscope run` (WATTSCOPE_SOCKET is set),
    or a `wattscope record --socket` of this user's on the machine."""
    return bool(_meter_path())


def _socket():
    global _sock, _sock_pid
    pid = os.getpid()
    if _sock is None or _sock_pid != pid:  # a forked child (DataLoader workers) gets its own
        with _lock:
            if _sock is None or _sock_pid != pid:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                try:
                    # Autobound (an abstract address of its own): wattscope answers a measured window's end here.
                    s.bind("")
                except OSError:
                    pass  # markers still go; windows get no figures back
                s.setblocking(False)
                _sock, _sock_pid = s, pid
    return _sock


def _after_fork_in_child():
    # The parent's pending work is the parent's to send: a child that sent it too would count it twice.
    global _lock, _pending, _totals, _last_flush, _wake, _flusher, _sock, _sock_pid, _undelivered
    _lock = threading.RLock()
    _windows_after_fork()
    _totals = {}
    _pending, _last_flush, _wake, _flusher, _sock, _sock_pid, _undelivered = {}, 0.0, threading.Event(), None, None, None, 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _primary():
    """Phases, marks and model descriptions come from one process per machine: with torchrun, Slurm or MPI every
    rank runs the same code, and eight `begin epoch` would nest eight phases. Work comes from every rank (each does
    its share). The local rank decides; WATTSCOPE_ALL_RANKS=1 lets every process send everything."""
    if os.environ.get("WATTSCOPE_ALL_RANKS") == "1":
        return True
    for var in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"):
        value = os.environ.get(var)
        if value is not None and value.strip() != "":
            return value.strip() == "0"
    return True


def _line(message):
    return (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")


def _sendto(data, path):
    """One datagram; None when delivered, else the errno (never raises, never waits)."""
    try:
        _socket().sendto(data, path)
        return None
    except OSError as e:
        return e.errno or errno.EIO


def _flush_locked(path, tail=None):
    """Sends the pending work, then `tail` (a begin, end, mark or model line), in as few datagrams as fit; the work
    and the marker after it travel in one datagram, so both arrive or neither does, in that order. Work that could
    not be handed over goes back to pending (sent with the next flush); returns True when everything was delivered.
    Called with _lock held: a flush from the background thread cannot overtake a phase boundary."""
    global _pending, _totals, _last_flush, _undelivered
    taken, _pending = _pending, {}
    totals, _totals = _totals, {}
    _last_flush = time.monotonic()
    lines = []  # (bytes, unit, amount, total) for work; (bytes, None, None, None) for the tail
    for unit, amount in taken.items():
        total = totals.get(unit)
        # A declared total goes once, on the unit's first line, even with no work beside it.
        while amount > 0 or total is not None:
            part = amount if amount <= _MAX_AMOUNT else _MAX_AMOUNT
            message = {"kind": "work", "amount": part, "unit": unit}
            if total is not None:
                message["total"] = total
            try:
                lines.append((_line(message), unit, part, total))
            except (ValueError, TypeError):  # cannot happen for what work() accepts; never lose the rest over it
                break
            amount -= part
            total = None
    if tail is not None:
        lines.append((tail, None, None, None))
    ok = True
    i = 0
    while i < len(lines):
        data, j = b"", i
        while j < len(lines) and (not data or len(data) + len(lines[j][0]) <= _MAX_DATAGRAM):
            data += lines[j][0]
            j += 1
        err = _sendto(data, path)
        if err in (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS) and j == len(lines) and tail is not None:
            for pause in _BOUNDARY_RETRY_S:
                time.sleep(pause)
                err = _sendto(data, path)
                if err not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS):
                    break
        if err is not None:
            ok = False
            for _, unit, amount, total in lines[i:j]:
                if unit is not None:
                    _pending[unit] = _pending.get(unit, 0) + amount
                    if total is not None:
                        _totals.setdefault(unit, total)  # unless a newer declaration came meanwhile
                else:
                    _undelivered += 1
        i = j
    return ok


def _send(message):
    """Sends one marker (after the pending work); True when it was handed to wattscope, False when dropped. Never
    raises; waits only as _BOUNDARY_RETRY_S says, and only when wattscope's queue is full."""
    path = _meter_path()
    if not path:
        return False
    try:
        tail = _line(message) if message is not None else None
    except (ValueError, TypeError):
        return False
    if tail is not None and _MAX_LINE is not None and len(tail) - 1 > _MAX_LINE:
        _reject("marker line", f"a marker line of {len(tail) - 1} bytes; wattscope refuses lines over {_MAX_LINE}")
        tail = None  # the work pending before it still goes
    with _lock:
        return _flush_locked(path, tail)


def _flusher_loop():
    # Wakes only while work is pending; then sends it once an interval has passed since the last send.
    while True:
        _wake.wait()
        time.sleep(min(_INTERVAL_S, 0.25))
        path = _meter_path()
        with _lock:
            if not _pending or not path:
                _wake.clear()  # under the lock: work() adds, then sets it again, so no wake-up is lost
            elif time.monotonic() - _last_flush >= _INTERVAL_S:
                _flush_locked(path)  # what is not delivered stays pending and is tried again an interval later
                if not _pending:
                    _wake.clear()


def _start_flusher():
    global _flusher
    with _lock:
        if _flusher is None:
            _flusher = threading.Thread(target=_flusher_loop, name="wattscope-markers", daemon=True)
            _flusher.start()


def flush():
    """Sends the work summed so far now (work() sends at most every 100 ms; phases, marks and the end of the program
    send it too). True when everything was handed to wattscope."""
    path = _meter_path()
    if not path:
        return False
    with _lock:
        return _flush_locked(path) if _pending else True


atexit.register(flush)


class Phase:
    """A named phase: a context manager (`with phase("epoch", index=3):`) and a decorator (`@phase("eval")`). With
    a name or index wattscope would refuse, the body still runs, and neither its begin nor its end is sent (an end
    alone could close an enclosing phase of the same name)."""

    def __init__(self, name, index=None):
        self.name, self.index = name, index
        self._valid = _text(name, "phase name", _MAX_NAME) is not None
        if self._valid and index is not None:
            self.index = _whole(index, "phase index")
            self._valid = self.index is not None

    def __enter__(self):
        msg = None
        if self._valid and _primary():
            # The program's own time (CLOCK_MONOTONIC, wattscope's clock): a marker late in a queue keeps its edge.
            msg = {"kind": "begin", "name": self.name, "mono_ns": time.monotonic_ns()}
            if self.index is not None:
                msg["index"] = self.index
        # Every rank sends its work summed so far before the boundary, so it counts towards the phase it was done in.
        _send(msg)
        return self

    def __exit__(self, exc_type, exc, tb):
        end = {"kind": "end", "name": self.name, "mono_ns": time.monotonic_ns()}
        _send(end if self._valid and _primary() else None)
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:  # no state of its own: one Phase serves every call, recursive ones included
                return func(*args, **kwargs)

        return wrapper


def phase(name, index=None):
    """A phase of the program, e.g. `with wattscope.phase("epoch", index=3):` or `@wattscope.phase("evaluate")`.
    Phases nest; wattscope stores each with the energy every device used during it."""
    return Phase(name, index)


def work(amount, unit="samples", total=None):
    """Work done since the last call, e.g. `wattscope.work(batch_size)` or `wattscope.work(n_tokens, unit="tokens")`.
    wattscope sums it per phase and per run and reports energy per unit (J/sample) and throughput.
    `total` declares how much of this unit the whole run will do (e.g. `total=epochs * len(dataset)`): wattscope then
    forecasts the time and energy to finish. Declaring it once is enough; a later declaration replaces it.

    Calls are summed here per unit and sent at most every 100 ms (WATTSCOPE_MARKER_INTERVAL_MS), and always before
    a phase begins or ends, a mark, and at exit (or `wattscope.flush()`): a loop may call it per sample without
    flooding wattscope, and no amount is lost. `amount` and `total` may be any number Python can convert: an int, a
    float, a numpy scalar, a one-element tensor (`mask.sum()`), a Decimal or a Fraction. Returns True when the amount
    was taken (under wattscope); False outside it, or when the call was dropped as invalid (a MarkerWarning says
    why)."""
    amount = _number(amount, "work amount", _MAX_AMOUNT)
    if amount is None or _unit(unit) is None:
        return False
    if total is not None:
        total = _number(total, "work total", _MAX_AMOUNT)
        if total is None:
            return False
    path = _meter_path()
    if not path:
        return False
    with _lock:
        _pending[unit] = _pending.get(unit, 0) + amount
        if total is not None:
            _totals[unit] = total
        if time.monotonic() - _last_flush >= _INTERVAL_S:
            _flush_locked(path)
            if not _pending:
                return True
    if _flusher is None:
        _start_flusher()
    if not _wake.is_set():
        _wake.set()  # the rest goes out within an interval even if no further call comes
    return True


def batch_size(batch):
    """How many samples a batch holds: a tensor's or array's first dimension; for a DataLoader's `[inputs, labels]`
    or `(inputs, labels)`, or a dict such as `{"input_ids": ...}`, that of its first element; else len(batch)."""
    for _ in range(8):  # ((x, mask), y) is unwrapped a few levels deep at most
        first = None
        if isinstance(batch, dict) and batch:
            first = next(iter(batch.values()))
        elif isinstance(batch, (tuple, list)) and batch:
            # A list of plain samples ([[1, 2], [3, 4]]) is a batch of len() samples; a list of tensors is columns.
            if hasattr(batch[0], "shape") or isinstance(batch[0], dict) or (
                    isinstance(batch, tuple) and isinstance(batch[0], (tuple, list))):
                first = batch[0]
        if first is None:
            break
        batch = first
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    return len(batch)


class _Counted:
    """What count() returns: iterates as the wrapped iterable does, and keeps its len()."""

    def __init__(self, iterable, unit, size):
        self._iterable, self._unit, self._size = iterable, unit, size

    def __len__(self):
        return len(self._iterable)

    def __iter__(self):
        # A batch counts once the loop asks for the next one, or leaves the loop (break: GeneratorExit here).
        for item in self._iterable:
            n = self._measure(item)
            try:
                yield item
            except GeneratorExit:
                self._work(n)
                raise
            self._work(n)

    def _measure(self, item):
        if self._unit is None:
            return None  # counting was refused (a bad unit or size); the batches still pass through
        try:
            return self._size(item)
        except Exception as e:
            if _is_strict():
                raise
            _reject("batch size", f"count() could not size a batch of type {type(item).__name__}: {e!r}")
            return None

    def _work(self, n):
        if n is not None:
            work(n, self._unit)

    def __getattr__(self, name):  # loader.dataset, loader.batch_size, ... as before
        return getattr(self._iterable, name)


def count(iterable, unit="samples", size=batch_size):
    """Wraps a DataLoader (any iterable of batches) so that each batch is marked as work once the loop body has
    processed it: `for x, y in wattscope.count(loader): ...`. `size(batch)` says how much work a batch is (default:
    its first dimension, see batch_size; `size=len` for plain lists). Work is coalesced as work() does. With a bad
    unit or size, the batches pass through uncounted (a MarkerWarning says why)."""
    if not callable(size):
        unit = _reject("count size", f"size must be a function of a batch, such as len, not {_excerpt(size)}",
                       TypeError)
    else:
        unit = _unit(unit)
    return _Counted(iterable, unit, size)


def mark(name):
    """A point in time worth seeing on the charts, e.g. `wattscope.mark("checkpoint")`. True when it was handed to
    wattscope."""
    if _text(name, "mark name", _MAX_NAME) is None:
        return False
    msg = {"kind": "mark", "name": name, "mono_ns": time.monotonic_ns()}
    if not _primary():
        flush()
        return False
    return _send(msg)


def _count(tensor):
    numel = getattr(tensor, "numel", None)
    if callable(numel):
        return int(numel())
    size = getattr(tensor, "size", None)
    if isinstance(size, int):  # numpy arrays
        return size
    shape = getattr(tensor, "shape", None)
    if shape is not None:
        n = 1
        for d in shape:
            n *= int(d)
        return n
    raise TypeError("a parameter has neither numel(), size nor shape")


_FLOP_LAYERS = ("Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                "ConvTranspose3d")


def _flops_per_sample(model, example):
    """Multiply-adds of the model's linear and convolution layers (2 FLOPs each) in one forward pass of `example`,
    divided by its batch size: what most papers call a model's FLOPs per sample. Other layers (activations,
    normalisation, attention's softmax) cost little beside them and are not counted."""
    import sys

    torch = sys.modules.get("torch")
    counted = [0]
    hooks = []

    def hook(module, inputs, output):
        w = getattr(module, "weight", None)
        kind = type(module).__name__
        if w is None or not hasattr(output, "numel"):
            return
        if kind == "Linear":  # weight (out, in): each output element is `in` multiply-adds
            counted[0] += 2 * output.numel() * w.shape[1]
        elif kind == "Bilinear":  # weight (out, in1, in2)
            counted[0] += 2 * output.numel() * w.shape[1] * w.shape[2]
        elif kind.startswith("ConvTranspose"):  # every input element meets the whole kernel once per out channel
            counted[0] += 2 * inputs[0].numel() * _numel(w[0])
        else:  # Conv: weight (out, in/groups, *kernel); each output element is in/groups * kernel multiply-adds
            counted[0] += 2 * output.numel() * _numel(w[0])

    for m in model.modules():
        if type(m).__name__ in _FLOP_LAYERS:
            hooks.append(m.register_forward_hook(hook))
    try:
        if torch is not None:
            with torch.no_grad():
                model(example)
        else:
            model(example)
    finally:
        for h in hooks:
            h.remove()
    return counted[0] / batch_size(example)


def _numel(t):
    n = 1
    for d in t.shape:
        n *= int(d)
    return n


def describe_model(model, flops=None, name=None, example=None):
    """Records the model's parameter count (summed over `model.parameters()`, each parameter's numel(); torch is not
    imported) and its FLOPs: as given (`flops`, per forward pass of one sample, as you count them), or counted from
    one forward pass of `example` (a batch of inputs, run without gradients) over the model's linear and
    convolution layers, per sample. Returns the parameter count; None when the description was dropped as invalid
    (a MarkerWarning says why). `name` defaults to the model's class name."""
    params_fn = getattr(model, "parameters", None)
    if not callable(params_fn):
        return _reject("model", "describe_model needs an object with a parameters() method (a torch.nn.Module, say), "
                                f"not {_excerpt(model)}", TypeError)
    try:
        count = sum(_count(p) for p in params_fn())
    except Exception as e:
        if _is_strict():
            raise
        return _reject("model", f"describe_model could not count the parameters of {type(model).__name__}: {e!r}")
    if _whole(count, "parameter count") is None:
        return None
    model_name = name if name is not None else type(model).__name__
    if _text(model_name, "model name", _MAX_NAME) is None:
        return None
    msg = {"kind": "model", "name": model_name, "parameters": count}
    if flops is None and example is not None:
        if not callable(getattr(model, "modules", None)):
            return _reject("model", "counting FLOPs from an example needs a torch.nn.Module (modules(), forward "
                                    f"hooks), not {type(model).__name__}", TypeError)
        try:
            flops = _flops_per_sample(model, example)
        except Exception as e:
            if _is_strict():
                raise
            return _reject("model", f"describe_model's forward pass of the example failed: {e!r}")
    if flops is not None:
        flops = _number(flops, "flops", _MAX_AMOUNT)
        if flops is None:
            return None
        msg["flops"] = float(flops)
    if _primary():
        _send(msg)
    return count


# Measured windows (the energy of a block of code, back in the program) and the Jupyter magics.
from .windows import Measurement, begin_window, end_window, measure, measurements  # noqa: E402
from .windows import _after_fork as _windows_after_fork  # noqa: E402


def load_ipython_extension(ipython):
    """`%load_ext wattscope`: the `%%wattscope [name]` cell magic and `%wattscope_summary` (wattscope.jupyter)."""
    from . import jupyter

    jupyter.load(ipython)


# Reading the stores back (standard library only; pandas when a DataFrame is asked for).
from .reader import Records, Run, Store, StoreError, StoreWarning, open  # noqa: E402
