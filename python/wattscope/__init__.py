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

Standard library only. Under `wattscope run` the environment holds WATTSCOPE_SOCKET, a Unix datagram socket; every
call sends one line of JSON to it (the protocol is docs/markers.md in the wattscope repository) without ever
waiting: when wattscope is gone, or its queue is full, the marker is dropped. Without WATTSCOPE_SOCKET every call is
a no-op, so the same program runs unchanged outside wattscope.
"""

import functools
import json
import math
import os
import socket
import threading

__all__ = ["phase", "work", "mark", "describe_model", "enabled", "Phase"]
__version__ = "0.1.0"

_ENV = "WATTSCOPE_SOCKET"
_lock = threading.Lock()
_sock = None
_sock_pid = None


def enabled():
    """True when running under a wattscope that listens for markers (WATTSCOPE_SOCKET is set)."""
    return bool(os.environ.get(_ENV))


def _socket():
    global _sock, _sock_pid
    pid = os.getpid()
    if _sock is None or _sock_pid != pid:  # a forked child (DataLoader workers) gets its own
        with _lock:
            if _sock is None or _sock_pid != pid:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                s.setblocking(False)
                _sock, _sock_pid = s, pid
    return _sock


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


def _send(message):
    """Sends one marker; returns True when it was handed to wattscope, False when dropped. Never raises, never waits."""
    path = os.environ.get(_ENV)
    if not path:
        return False
    try:
        line = json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n"
        _socket().sendto(line.encode("utf-8"), path)
        return True
    except (OSError, ValueError, TypeError):
        # No wattscope listening, its queue full (EAGAIN), a path too long, an amount that is not a number: drop it.
        return False


def _name(name):
    if not isinstance(name, str) or not name:
        raise ValueError("a phase or mark name must be a non-empty string")
    return name


class Phase:
    """A named phase: a context manager (`with phase("epoch", index=3):`) and a decorator (`@phase("eval")`)."""

    def __init__(self, name, index=None):
        self.name = _name(name)
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
            raise ValueError("index must be a whole number >= 0")
        self.index = index

    def __enter__(self):
        msg = {"kind": "begin", "name": self.name}
        if self.index is not None:
            msg["index"] = self.index
        if _primary():
            _send(msg)
        return self

    def __exit__(self, exc_type, exc, tb):
        if _primary():
            _send({"kind": "end", "name": self.name})
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with Phase(self.name, self.index):
                return func(*args, **kwargs)

        return wrapper


def phase(name, index=None):
    """A phase of the program, e.g. `with wattscope.phase("epoch", index=3):` or `@wattscope.phase("evaluate")`.
    Phases nest; wattscope stores each with the energy every device used during it."""
    return Phase(name, index)


def work(amount, unit="samples"):
    """Work done since the last call, e.g. `wattscope.work(batch_size)` or `wattscope.work(n_tokens, unit="tokens")`.
    wattscope sums it per phase and per run and reports energy per unit (J/sample) and throughput."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount < 0:
        raise ValueError("work amount must be a finite number >= 0")
    if not isinstance(unit, str) or not unit:
        raise ValueError("work unit must be a non-empty string such as 'samples' or 'tokens'")
    return _send({"kind": "work", "amount": amount, "unit": unit})


def mark(name):
    """A point in time worth seeing on the charts, e.g. `wattscope.mark("checkpoint")`."""
    msg = {"kind": "mark", "name": _name(name)}
    return _send(msg) if _primary() else False


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


def describe_model(model, flops=None, name=None):
    """Records the model's parameter count (summed over `model.parameters()`, each parameter's numel(); torch is not
    imported) and, when given, its FLOPs (per forward pass, as you count them). Returns the parameter count.
    `name` defaults to the model's class name."""
    params_fn = getattr(model, "parameters", None)
    if not callable(params_fn):
        raise TypeError("describe_model needs an object with a parameters() method (a torch.nn.Module, say)")
    count = sum(_count(p) for p in params_fn())
    msg = {"kind": "model", "name": name or type(model).__name__, "parameters": count}
    if flops is not None:
        if isinstance(flops, bool) or not isinstance(flops, (int, float)) or not math.isfinite(flops) or flops < 0:
            raise ValueError("flops must be a finite number >= 0")
        msg["flops"] = float(flops)
    if _primary():
        _send(msg)
    return count
