"""Measured windows: the energy of one block of code, handed back to the program.

    with wattscope.measure("evaluate") as m:
        evaluate(model)
    print(m.energy_j, m.devices, m.duration_s, m.method)

    wattscope.begin_window("epoch-3")
    ...
    m = wattscope.end_window("epoch-3")

A window is a phase of the run that its program waits for: `begin_window` sends a `begin` marker carrying a window id
of its own, `end_window` an `end` with that id that asks for a reply, and the wattscope listening (`wattscope run`'s,
or a `wattscope record --socket` of this user's) answers once the phase's energy is known: after the reading it makes
of the energy counters at the edge (on a counter that moves every 100 ms, within about 0.1 s of the end, plus the
hand-over), or at its next tick where no counter is read at edges. The figures are those of the phase row stored in
the run (`wattscope show`), so a window is also a phase there. Windows nest and overlap: each closes only itself.

Nothing here raises into the program: without a wattscope listening, a Measurement has its duration (measured here)
and None figures, with one warning; a wattscope that does not answer within `timeout` gives the same, once said.
"""

import collections
import itertools
import json
import os
import select
import threading
import time
import warnings

import wattscope as _ws

_DEFAULT_TIMEOUT_S = 15.0  # past the recorder's own longest wait for an edge (10 s)
_SHORT_TIMEOUT_S = 1.0  # after a window went unanswered: a meter that stays silent costs a loop 1 s, not 15
_MAX_WAITING = 1000  # answers kept for windows not yet asked for (wait=False); older ones dropped
_HISTORY = 10000  # measurements kept for measurements() and %wattscope_summary

_ids = itertools.count(1)
_open = {}  # name -> [(window id, begun at monotonic)], the latest last
_open_lock = threading.Lock()
_answers = collections.OrderedDict()  # window id -> answer (dict), received while another was waited for
_recv = threading.Condition()
_receiving = False
_silent = False  # a window went unanswered: later ones wait _SHORT_TIMEOUT_S until an answer comes again
_said = set()
_history = collections.deque(maxlen=_HISTORY)


def _after_fork():
    """A forked child has its own socket and windows: the parent's answers are the parent's."""
    global _open, _answers, _recv, _receiving, _open_lock
    _open, _answers, _recv, _receiving, _open_lock = {}, collections.OrderedDict(), threading.Condition(), False, \
        threading.Lock()


def _say_once(key, message):
    if key in _said:
        return
    _said.add(key)
    warnings.warn(message, _ws.MarkerWarning, stacklevel=4)


def _timeout_s(timeout):
    if timeout is not None:
        try:
            t = float(timeout)
            if t >= 0 and t == t:
                return t
        except (TypeError, ValueError):
            pass
        _say_once("timeout", f"wattscope: a window's timeout must be a number of seconds >= 0, not {timeout!r}; "
                             f"{_DEFAULT_TIMEOUT_S:g} s is used")
    env = os.environ.get("WATTSCOPE_WINDOW_TIMEOUT_S")
    if env:
        try:
            t = float(env)
            if t >= 0 and t == t:
                return t
        except ValueError:
            pass
        _say_once("timeout-env", f"wattscope: WATTSCOPE_WINDOW_TIMEOUT_S={env!r} is not a number of seconds >= 0; "
                                 f"{_DEFAULT_TIMEOUT_S:g} s is used")
    return _DEFAULT_TIMEOUT_S


class Measurement:
    """One window's figures. `energy_j`: the measured devices together (None where nothing was measured, or no
    wattscope answered); `devices`: {"gpu0": J, "cpu_package": J, ...}; `duration_s`; `method`: how the energy was
    obtained, as everywhere in wattscope (counter, integrated, estimated, simulated, or mixed over the devices, whose
    own methods are in `device_methods`); `bound_j`: the most the energy can be off by, from its edges (None: not
    bounded); `start_edge`/`end_edge`: reading, interpolated or none; `carbon_g`: grams CO2e at the run's carbon
    intensity over the window (PUE included), `carbon_source` where that intensity came from, `cost` and `currency`
    where the run has a price (else None). `attributed_j` is None until wattscope measures it for a window. `error` says why figures are missing. With `wait=False` the figures are
    fetched when first read (or by `result()`)."""

    __slots__ = ("name", "window", "_duration_local", "_answer", "_pending", "_timeout", "error")

    def __init__(self, name, window=None, duration_s=None, error=None):
        self.name = name
        self.window = window
        self._duration_local = duration_s
        self._answer = None
        self._pending = False
        self._timeout = None
        self.error = error

    def result(self, timeout=None):
        """Waits for the figures of a window ended with wait=False (at most `timeout` s); returns self."""
        if self._pending:
            self._pending = False
            answer, error = _await(self.window, _timeout_s(timeout if timeout is not None else self._timeout))
            self._fill(answer, error)
        return self

    def _fill(self, answer, error):
        if answer is not None and answer.get("error"):
            error, answer = f"wattscope: {answer['error']}", None
        self._answer, self.error = answer, error

    def _get(self, key, default=None):
        self.result()
        return default if self._answer is None else self._answer.get(key, default)

    @property
    def duration_s(self):
        d = self._get("duration_s")
        return d if d is not None else self._duration_local

    @property
    def power_w(self):
        e, d = self.energy_j, self.duration_s
        return e / d if e is not None and d else None

    def as_dict(self):
        keys = ("name", "energy_j", "devices", "duration_s", "method", "device_methods", "bound_j", "start_edge",
                "end_edge", "attributed_j", "carbon_g", "run_id", "phase_id", "error")
        return {k: getattr(self, k) for k in keys}

    def __str__(self):
        d = self.duration_s
        took = f"{d:.3g} s" if d is not None else None
        if self.energy_j is None:
            return f"{self.name}: " + (f"{took}, " if took else "") + "energy not measured" + (
                f" ({self.error})" if self.error else "")
        parts = ", ".join(f"{k} {_joules(v)}" for k, v in sorted(self.devices.items()))
        return f"{self.name}: {_joules(self.energy_j)} in {took} ({self.method}; {parts})"

    def __repr__(self):
        return (f"Measurement(name={self.name!r}, energy_j={self.energy_j!r}, duration_s={self.duration_s!r}, "
                f"method={self.method!r})")


# The answer's figures, as read-only attributes (fetched first where the window was ended with wait=False).
for _attr, _key in (("energy_j", "energy_j"), ("method", "method"), ("bound_j", "energy_bound_j"),
                    ("start_edge", "start_edge"), ("end_edge", "end_edge"), ("run_id", "run_id"),
                    ("phase_id", "phase_id"), ("attributed_j", "attributed_j"), ("carbon_g", "carbon_g"),
                    ("carbon_source", "carbon_source"), ("cost", "cost"), ("currency", "currency")):
    setattr(Measurement, _attr, property(lambda self, key=_key: self._get(key)))
Measurement.devices = property(lambda self: dict(self._get("devices") or {}))
Measurement.device_methods = property(lambda self: dict(self._get("device_methods") or {}))
del _attr, _key


def _joules(j):
    for scale, unit in ((1e6, "MJ"), (1e3, "kJ"), (1.0, "J"), (1e-3, "mJ")):
        if abs(j) >= scale or unit == "mJ":
            return f"{j / scale:.3g} {unit}"
    return f"{j:.3g} J"


def _await(window, timeout):
    """The answer for `window` (its dict) or None and why: waits on the helper's own socket, one thread receiving at a
    time; answers for other windows are kept for their waiters."""
    global _receiving, _silent
    if window is None:
        return None, "wattscope: the window was not sent"
    wait = min(timeout, _SHORT_TIMEOUT_S) if _silent else timeout
    deadline = time.monotonic() + wait
    sock = _ws._socket()
    while True:
        with _recv:
            if window in _answers:
                _silent = False
                return _answers.pop(window), None
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if _receiving:  # another thread reads the socket: it keeps this window's answer for us
                _recv.wait(left)
                continue
            _receiving = True
        try:
            try:
                ready, _, _ = select.select([sock], [], [], left)
            except (OSError, ValueError):
                ready = []
            while ready:
                try:
                    data = sock.recv(65536)
                except OSError:  # BlockingIOError: drained
                    break
                with _recv:
                    _keep(data)
        finally:
            with _recv:
                _receiving = False
                _recv.notify_all()
    with _recv:
        if window in _answers:
            _silent = False
            return _answers.pop(window), None
    _silent = True
    _say_once("silent", f"wattscope: no answer for a window within {wait:g} s; its figures are None (later windows "
                        f"wait at most {_SHORT_TIMEOUT_S:g} s until wattscope answers again)")
    return None, f"wattscope did not answer within {wait:g} s"


def _drain():
    """Takes the answers already waiting on the helper's socket (never waits): with wait=False they would otherwise
    fill its queue (the kernel's, a few datagrams long), and the later ones would be lost."""
    if _receiving or _ws._sock is None or _ws._sock_pid != os.getpid():
        return
    with _recv:
        sock = _ws._sock
        for _ in range(_MAX_WAITING):
            try:
                data = sock.recv(65536)
            except OSError:  # BlockingIOError: nothing waiting
                return
            _keep(data)


def _keep(data):
    """Called with _recv held or by the one receiving thread."""
    try:
        answer = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return
    if isinstance(answer, dict) and answer.get("kind") == "window" and isinstance(answer.get("window"), str):
        _answers[answer["window"]] = answer
        while len(_answers) > _MAX_WAITING:
            _answers.popitem(last=False)


def _send_marker(message):
    """(sent, error text)."""
    path = _ws._meter_path()
    if not path:
        _say_once("meter", "wattscope: no wattscope listens for this program (not under `wattscope run`, and no "
                              "`wattscope record --socket` of this user's runs); windows measure their duration only")
        return False, "no wattscope listening"
    if _ws._send(message):
        return True, None
    _say_once("meter", f"wattscope: a window's marker could not be handed to the wattscope at {path} (gone, or "
                             f"its queue is full); that window has no figures")
    return False, "the marker could not be delivered"


def begin_window(name):
    """Starts measuring a window named `name` (also a phase of the run). Returns True when a wattscope listens. Never
    raises: a name wattscope would refuse is warned about and measured for its duration only."""
    begun = time.monotonic()
    valid = _ws._text(name, "window name", _ws._MAX_NAME) is not None
    window = f"{os.getpid()}-{next(_ids)}"
    sent = False
    if valid:
        sent, _ = _send_marker({"kind": "begin", "name": name, "window": window, "mono_ns": time.monotonic_ns()})
    with _open_lock:
        _open.setdefault(name if valid else repr(name), []).append((window if sent else None, begun))
    return sent


def end_window(name, timeout=None, wait=True):
    """Ends the latest window begun under `name` and returns its Measurement, once wattscope has placed its end
    (within about 0.2 s on a counter that moves every 100 ms; up to `timeout` s, default 15 or
    WATTSCOPE_WINDOW_TIMEOUT_S). `wait=False` returns at once; the figures are fetched when first read. Never raises:
    an unknown name gives a Measurement with `error` set."""
    ended = time.monotonic()
    key = name if isinstance(name, str) else repr(name)
    with _open_lock:
        stack = _open.get(key)
        entry = stack.pop() if stack else None
        if stack is not None and not stack:
            del _open[key]
    if entry is None:
        _say_once(("end", key), f"wattscope: end_window({name!r}) without a begin_window of that name")
        return _record(Measurement(key, error="no such window was begun"))
    window, begun = entry
    m = Measurement(key, window, ended - begun)
    if window is None:
        m.error = "no wattscope listening" if not _ws._meter_path() else "the window's begin was not delivered"
        return _record(m)
    _drain()
    sent, error = _send_marker({"kind": "end", "name": key, "window": window, "reply": True,
                                "mono_ns": time.monotonic_ns()})
    if not sent:
        m.error = error
        return _record(m)
    m._pending, m._timeout = True, timeout
    if wait:
        m.result()
    return _record(m)


def _record(m):
    _history.append(m)
    return m


def measurements():
    """The windows measured so far in this process (the latest 10,000), oldest first."""
    return list(_history)


class measure:
    """A measured window as a context manager or a decorator:

        with wattscope.measure("evaluate") as m:
            ...
        print(m.energy_j)

        @wattscope.measure("step")
        def step(batch): ...          # step.last is the latest call's Measurement
    """

    def __init__(self, name="window", timeout=None):
        self.name, self.timeout = name, timeout
        self.last = None

    def __enter__(self):
        begin_window(self.name)
        self._result = Measurement(self.name)
        return self._result

    def __exit__(self, exc_type, exc, tb):
        done = end_window(self.name, timeout=self.timeout)
        r = self._result
        r.window, r._duration_local, r._answer, r.error = done.window, done._duration_local, done._answer, done.error
        if _history and _history[-1] is done:
            _history[-1] = r
        self.last = r
        return False

    def __call__(self, func):
        import functools

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            begin_window(self.name)
            try:
                return func(*args, **kwargs)
            finally:
                wrapper.last = self.last = end_window(self.name, timeout=self.timeout)

        wrapper.last = None
        return wrapper

