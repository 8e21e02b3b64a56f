"""The marker helper against a real Unix datagram socket standing in for wattscope (the protocol is in
docs/markers.md), and with no wattscope at all."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import wattscope  # noqa: E402


class Listener:
    """A socket where wattscope would listen; reads back what the helper sent."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(2)

    def read(self, n=1):
        out = []
        for _ in range(n):
            data = self.sock.recv(65536).decode("utf-8")
            assert data.endswith("\n"), data
            out.extend(json.loads(line) for line in data.splitlines())
        return out

    def pending(self):
        self.sock.setblocking(False)
        try:
            self.sock.recv(65536)
            return True
        except BlockingIOError:
            return False
        finally:
            self.sock.settimeout(2)


@pytest.fixture
def listener(tmp_path, monkeypatch):
    l = Listener(str(tmp_path / "markers.sock"))
    monkeypatch.setenv("WATTSCOPE_SOCKET", l.path)
    for var in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "WATTSCOPE_ALL_RANKS"):
        monkeypatch.delenv(var, raising=False)  # this process sends as a job's only (or first) rank
    yield l
    l.sock.close()


def test_phase_context_manager_sends_begin_and_end(listener):
    with wattscope.phase("epoch", index=3):
        pass
    assert listener.read(2) == [{"kind": "begin", "name": "epoch", "index": 3}, {"kind": "end", "name": "epoch"}]


def test_phases_nest_and_end_even_on_an_exception(listener):
    with pytest.raises(RuntimeError):
        with wattscope.phase("train"):
            with wattscope.phase("step", index=0):
                raise RuntimeError("boom")
    assert listener.read(4) == [
        {"kind": "begin", "name": "train"},
        {"kind": "begin", "name": "step", "index": 0},
        {"kind": "end", "name": "step"},
        {"kind": "end", "name": "train"},
    ]


def test_decorator_wraps_every_call(listener):
    @wattscope.phase("evaluate")
    def evaluate(x):
        return x * 2

    assert evaluate(21) == 42
    assert evaluate.__name__ == "evaluate"
    assert listener.read(2) == [{"kind": "begin", "name": "evaluate"}, {"kind": "end", "name": "evaluate"}]


def test_work_and_mark(listener):
    assert wattscope.work(64) is True
    assert wattscope.work(2048, unit="tokens") is True
    assert wattscope.mark("checkpoint") is True
    assert listener.read(3) == [
        {"kind": "work", "amount": 64, "unit": "samples"},
        {"kind": "work", "amount": 2048, "unit": "tokens"},
        {"kind": "mark", "name": "checkpoint"},
    ]


class Tensor:
    def __init__(self, *shape):
        self.shape = shape

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


class TinyNet:
    def parameters(self):
        return iter([Tensor(128, 784), Tensor(128), Tensor(10, 128), Tensor(10)])


def test_describe_model_counts_parameters_without_torch(listener):
    expected = 128 * 784 + 128 + 10 * 128 + 10
    assert wattscope.describe_model(TinyNet(), flops=2 * expected) == expected
    assert listener.read(1) == [{"kind": "model", "name": "TinyNet", "parameters": expected, "flops": 2.0 * expected}]
    assert "torch" not in sys.modules


def test_describe_model_refuses_an_object_without_parameters(listener):
    with pytest.raises(TypeError):
        wattscope.describe_model(object())


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "64", True])
def test_bad_work_is_refused_before_sending(listener, bad):
    with pytest.raises(ValueError):
        wattscope.work(bad)
    assert not listener.pending()


def test_a_noop_without_wattscope(monkeypatch):
    monkeypatch.delenv("WATTSCOPE_SOCKET", raising=False)
    assert not wattscope.enabled()
    with wattscope.phase("epoch", index=0):
        assert wattscope.work(10) is False
        assert wattscope.mark("x") is False
    assert wattscope.describe_model(TinyNet()) > 0


def test_drops_when_wattscope_is_gone(tmp_path, monkeypatch):
    monkeypatch.setenv("WATTSCOPE_SOCKET", str(tmp_path / "gone.sock"))
    assert wattscope.enabled()
    with wattscope.phase("epoch"):
        assert wattscope.work(1) is False


def test_never_blocks_when_the_queue_is_full(listener):
    # Nobody reads: the socket's queue fills, then every marker is dropped at once rather than waiting.
    start = time.monotonic()
    results = [wattscope.work(1) for _ in range(5000)]
    elapsed = time.monotonic() - start
    assert results[0] is True
    assert results[-1] is False
    assert elapsed < 5  # generous: proves no call waited for the reader (a blocking send would hang here)


def test_pip_installs_offline(tmp_path):
    # `pip install ./python` into a fresh venv with the package index switched off: nothing may be downloaded.
    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("python3 -m venv is not available: " + r.stderr[-200:])
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    r = subprocess.run(pip + ["install", "--no-index", "--disable-pip-version-check", os.path.dirname(HERE)],
                       capture_output=True, text=True, cwd=str(tmp_path), timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(venv / "bin" / "python"), "-c", "import wattscope; print(wattscope.__file__)"],
                       capture_output=True, text=True, cwd=str(tmp_path))
    assert r.returncode == 0 and str(venv) in r.stdout, r.stdout + r.stderr


def test_only_local_rank_zero_sends_phases_but_every_rank_sends_work(listener, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    with wattscope.phase("epoch"):
        wattscope.work(8)
        assert wattscope.mark("x") is False
    assert listener.read(1) == [{"kind": "work", "amount": 8, "unit": "samples"}]
    assert not listener.pending()
    monkeypatch.setenv("LOCAL_RANK", "0")
    with wattscope.phase("epoch"):
        pass
    assert listener.read(2) == [{"kind": "begin", "name": "epoch"}, {"kind": "end", "name": "epoch"}]
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("WATTSCOPE_ALL_RANKS", "1")
    assert wattscope.mark("y") is True
    assert listener.read(1) == [{"kind": "mark", "name": "y"}]
