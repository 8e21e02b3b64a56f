"""The marker helper against a real Unix datagram socket standing in for wattscope (the protocol is in
docs/markers.md), and with no wattscope at all."""

import decimal
import fractions
import json
import os
import socket
import subprocess
import sys
import threading
import time
import warnings

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import wattscope  # noqa: E402


def _own_time(message):
    """A boundary or mark carries the program's own time (mono_ns, CLOCK_MONOTONIC in ns, taken when it was made);
    checked here and left out, so the tests compare the rest."""
    if isinstance(message, dict) and message.get("kind") in ("begin", "end", "mark"):
        t = message.pop("mono_ns")
        assert isinstance(t, int) and 0 < t <= time.monotonic_ns(), message
    return message


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
            out.extend(_own_time(json.loads(line)) for line in data.splitlines())
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

    def drain(self):
        """Every datagram waiting now, as lists of parsed lines."""
        out = []
        self.sock.setblocking(False)
        try:
            while True:
                data = self.sock.recv(65536)
                try:
                    out.append([_own_time(json.loads(line)) for line in data.decode("utf-8").splitlines()])
                except ValueError:
                    out.append([None])  # not the helper's
        except BlockingIOError:
            return out
        finally:
            self.sock.settimeout(2)

    def fill(self):
        """Fills this socket's queue from another sender until the kernel refuses more (EAGAIN); returns how many."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        n = 0
        try:
            while True:
                s.sendto(b"x", self.path)
                n += 1
        except BlockingIOError:
            return n
        finally:
            s.close()


def work_total(datagrams, unit="samples"):
    return sum(m["amount"] for d in datagrams for m in d if m and m.get("kind") == "work" and m["unit"] == unit)


@pytest.fixture(autouse=True)
def quiet_helper(monkeypatch):
    """Work stays summed until a test flushes it (or a boundary does): no send happens by the clock unless a test
    sets _INTERVAL_S. Every test starts with nothing pending."""
    with wattscope._lock:
        wattscope._pending.clear()
    monkeypatch.setattr(wattscope, "_INTERVAL_S", 3600.0)
    monkeypatch.setattr(wattscope, "_last_flush", time.monotonic())
    # Nothing warned yet, lenient unless a test says otherwise.
    monkeypatch.setattr(wattscope, "_warned", set())
    monkeypatch.setattr(wattscope, "_strict", None)
    monkeypatch.delenv("WATTSCOPE_STRICT", raising=False)
    yield
    with wattscope._lock:
        wattscope._pending.clear()


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
    assert wattscope.work(36) is True
    assert wattscope.mark("checkpoint") is True
    # Summed per unit, and sent with the mark in one datagram, before it.
    assert listener.read(1) == [
        {"kind": "work", "amount": 100, "unit": "samples"},
        {"kind": "work", "amount": 2048, "unit": "tokens"},
        {"kind": "mark", "name": "checkpoint"},
    ]
    assert not listener.pending()


def test_work_is_coalesced_and_goes_out_before_the_phase_ends(listener):
    with wattscope.phase("epoch", index=0):
        for _ in range(100000):
            wattscope.work(1)
    with wattscope.phase("eval"):
        wattscope.work(0.5, unit="images")
        wattscope.work(0.25, unit="images")
    got = listener.drain()
    assert got == [
        [{"kind": "begin", "name": "epoch", "index": 0}],
        [{"kind": "work", "amount": 100000, "unit": "samples"}, {"kind": "end", "name": "epoch"}],
        [{"kind": "begin", "name": "eval"}],
        [{"kind": "work", "amount": 0.75, "unit": "images"}, {"kind": "end", "name": "eval"}],
    ]


def test_work_goes_out_at_most_once_per_interval(listener, monkeypatch):
    monkeypatch.setattr(wattscope, "_INTERVAL_S", 0.05)
    calls = 0
    start = time.monotonic()
    while time.monotonic() - start < 0.5:
        wattscope.work(1)
        calls += 1
    elapsed = time.monotonic() - start
    assert wattscope.flush() is True
    got = listener.drain()
    assert work_total(got) == calls  # nothing lost
    # One datagram per 50 ms at most (plus the first call's and the final flush), whatever the call rate.
    assert calls > 1000 and len(got) <= elapsed / 0.05 + 2, (calls, len(got))


def test_a_last_amount_goes_out_within_an_interval_without_another_call(listener, monkeypatch):
    monkeypatch.setattr(wattscope, "_INTERVAL_S", 0.05)
    monkeypatch.setattr(wattscope, "_last_flush", 0.0)
    wattscope.work(7)  # sent at once: the first call after a quiet spell of an interval
    wattscope.work(5)  # pending: no later call, no boundary; the background thread sends it
    assert listener.read(2) == [{"kind": "work", "amount": 7, "unit": "samples"},
                                {"kind": "work", "amount": 5, "unit": "samples"}]


def test_sums_survive_a_full_queue(listener, monkeypatch):
    # Nobody reads and the queue is full: every send fails, yet no call waits and nothing is lost.
    monkeypatch.setattr(wattscope, "_INTERVAL_S", 0.0)  # try to send on every call
    listener.fill()
    start = time.monotonic()
    for _ in range(5000):
        assert wattscope.work(1) is True
    assert time.monotonic() - start < 5  # generous: a blocking send would hang here
    assert wattscope.flush() is False
    got = listener.drain()  # room again
    assert wattscope.flush() is True
    got += listener.drain()
    assert work_total(got) == 5000


def test_a_phase_boundary_waits_briefly_for_room_in_a_full_queue(listener):
    wattscope.work(3)
    listener.fill()
    reader = threading.Timer(0.005, listener.drain)  # wattscope catches up a few ms later
    reader.start()
    start = time.monotonic()
    with wattscope.phase("epoch"):
        pass
    reader.join()
    assert time.monotonic() - start < 1
    got = listener.drain()
    assert [{"kind": "work", "amount": 3, "unit": "samples"}, {"kind": "begin", "name": "epoch"}] in got
    assert [{"kind": "end", "name": "epoch"}] in got


def test_a_forked_child_does_not_send_its_parents_work(listener):
    wattscope.work(5)
    pid = os.fork()
    if pid == 0:  # the child: its pending work is empty; it sends its own
        try:
            wattscope.work(2)
            ok = wattscope.flush()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert listener.read(1) == [{"kind": "work", "amount": 2, "unit": "samples"}]
    assert wattscope.flush() is True
    assert listener.read(1) == [{"kind": "work", "amount": 5, "unit": "samples"}]


def test_pending_work_is_sent_at_exit(listener):
    program = "import wattscope\nfor _ in range(1000): wattscope.work(3)\n"
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(HERE), WATTSCOPE_MARKER_INTERVAL_MS="60000"))
    assert r.returncode == 0, r.stderr
    got = listener.drain()
    assert work_total(got) == 3000 and len(got) == 2  # the first call's, then one at exit


def test_count_marks_each_batch_once_processed(listener):
    batches = [[1, 2, 3], [4, 5], [6]]
    counted = wattscope.count(batches, size=len)
    assert len(counted) == 3
    seen = []
    with wattscope.phase("epoch"):
        for b in counted:
            seen.append(b)
    assert seen == batches
    assert work_total(listener.drain()) == 6
    for b in wattscope.count(batches, unit="images", size=len):
        break  # the batch taken counts, the rest do not
    wattscope.flush()
    assert work_total(listener.drain(), "images") == 3


class Columns:
    """A stand-in for a tensor: only its shape matters to batch_size."""

    def __init__(self, *shape):
        self.shape = shape


def test_batch_size_finds_the_batch_dimension():
    assert wattscope.batch_size(Columns(32, 3, 224, 224)) == 32
    assert wattscope.batch_size([Columns(16, 10), Columns(16)]) == 16  # a DataLoader's [inputs, labels]
    assert wattscope.batch_size((Columns(8, 4), Columns(8))) == 8
    assert wattscope.batch_size({"input_ids": Columns(4, 512), "mask": Columns(4, 512)}) == 4
    assert wattscope.batch_size(((Columns(2, 5), Columns(2, 5)), Columns(2))) == 2
    assert wattscope.batch_size([[1, 2], [3, 4], [5, 6]]) == 3  # plain samples
    assert wattscope.batch_size("abcd") == 4


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


def test_describe_model_of_an_object_without_parameters_warns_and_sends_nothing(listener):
    with pytest.warns(wattscope.MarkerWarning, match="parameters"):
        assert wattscope.describe_model(object()) is None
    assert not listener.pending()
    wattscope.configure(strict=True)
    with pytest.raises(TypeError):
        wattscope.describe_model(object())


def test_describe_model_with_bad_flops_warns_and_sends_nothing(listener):
    for bad in (float("nan"), -1.0, "4e9", 1e19):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert wattscope.describe_model(TinyNet(), flops=bad) is None
        assert not listener.pending()
    assert wattscope.describe_model(TinyNet(), flops=decimal.Decimal("4.1e9")) > 0
    assert listener.read(1)[0]["flops"] == 4.1e9


def test_describe_model_survives_a_forward_pass_that_fails(listener):
    torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/setup.sh installs it)")
    model = torch.nn.Linear(4, 2)
    with pytest.warns(wattscope.MarkerWarning, match="forward pass"):
        assert wattscope.describe_model(model, example=torch.zeros(3, 5)) is None  # 5 inputs where 4 belong
    assert not listener.pending()


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), 1e19, "64", True, None, [1, 2], object()])
def test_bad_work_is_dropped_with_a_warning_before_sending(listener, bad):
    with pytest.warns(wattscope.MarkerWarning, match="work amount"):
        assert wattscope.work(bad) is False
    assert wattscope._pending == {}
    assert wattscope.flush() is True and not listener.pending()


@pytest.mark.parametrize("bad", [-1, float("nan"), "64", True])
def test_bad_work_raises_when_strict(listener, bad, monkeypatch):
    wattscope.configure(strict=True)
    with pytest.raises(ValueError, match="work amount"):
        wattscope.work(bad)
    wattscope.configure(strict=False)
    monkeypatch.setenv("WATTSCOPE_STRICT", "1")
    assert wattscope.configure() == {"strict": False}  # an explicit setting wins over the environment
    monkeypatch.setattr(wattscope, "_strict", None)
    assert wattscope.configure() == {"strict": True}
    with pytest.raises(ValueError, match="work amount"):
        wattscope.work(bad)
    assert not listener.pending()


def test_a_repeated_mistake_warns_once_per_kind(listener):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(100):
            wattscope.work(-1)
            wattscope.work(1, unit="")
        wattscope.mark("a\nb")
        wattscope.mark("")
    assert [str(w.message).split(";")[0] for w in caught] == [
        "wattscope: work amount must be a finite number from 0 to 1e+18, not -1",
        "wattscope: a work unit must be a non-empty string, not ''",
        "wattscope: a mark name must be printable text (no control characters such as a newline), not 'a\\nb'",
    ]
    assert all(w.filename == __file__ for w in caught)  # each points at the line that called the helper


def test_a_warning_turned_into_an_error_still_does_not_raise(listener, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert wattscope.work(float("nan")) is False
    assert "work amount" in capsys.readouterr().err


class Tensor0d:
    """A stand-in for a framework's scalar type that converts as numbers do (__index__, __float__), no more."""

    def __init__(self, v):
        self.v = v

    def __index__(self):
        if isinstance(self.v, float):
            raise TypeError("not an integer")
        return self.v

    def __float__(self):
        return float(self.v)


def test_amounts_and_indices_take_any_python_number(listener):
    wattscope.work(decimal.Decimal("2.5"), unit="a")
    wattscope.work(fractions.Fraction(1, 4), unit="a")
    wattscope.work(Tensor0d(7), unit="b")
    wattscope.work(Tensor0d(0.5), unit="c", total=decimal.Decimal(100))
    with wattscope.phase("epoch", index=Tensor0d(2)):
        pass
    with wattscope.phase("epoch", index=3.0):  # a float that is a whole number, as the binary takes it
        pass
    got = listener.drain()
    assert got == [
        [{"kind": "work", "amount": 2.75, "unit": "a"}, {"kind": "work", "amount": 7, "unit": "b"},
         {"kind": "work", "amount": 0.5, "unit": "c", "total": 100.0},
         {"kind": "begin", "name": "epoch", "index": 2}],
        [{"kind": "end", "name": "epoch"}],
        [{"kind": "begin", "name": "epoch", "index": 3}],
        [{"kind": "end", "name": "epoch"}],
    ]
    assert type(got[0][1]["amount"]) is int and type(got[0][0]["amount"]) is float  # a whole number stays exact


def test_numpy_and_torch_scalars_are_numbers(listener):
    np = pytest.importorskip("numpy", reason="python3-numpy is not installed (scripts/setup.sh installs it)")
    torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/setup.sh installs it)")
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these is a mistake
        assert wattscope.work(np.int64(64)) is True
        assert wattscope.work(torch.tensor(64)) is True
        assert wattscope.work(np.float32(0.5), unit="images") is True
        assert wattscope.work(mask.sum(), unit="tokens") is True
        assert wattscope.work(torch.tensor(1.5), unit="images", total=np.int64(1000)) is True
        with wattscope.phase("epoch", index=np.int64(1)):
            pass
        with wattscope.phase("step", index=torch.tensor(4)):
            pass
    got = listener.drain()
    assert got[0] == [{"kind": "work", "amount": 128, "unit": "samples"},
                      {"kind": "work", "amount": 2.0, "unit": "images", "total": 1000},
                      {"kind": "work", "amount": 3, "unit": "tokens"},
                      {"kind": "begin", "name": "epoch", "index": 1}]
    assert got[1:] == [[{"kind": "end", "name": "epoch"}], [{"kind": "begin", "name": "step", "index": 4}],
                       [{"kind": "end", "name": "step"}]]
    # Booleans and arrays of several numbers are mistakes, whatever library they come from.
    for bad in (np.bool_(True), torch.tensor(True), np.array([1, 2]), torch.tensor([1.0, float("nan")]).sum()):
        with pytest.warns(wattscope.MarkerWarning):
            wattscope._warned.clear()
            assert wattscope.work(bad) is False
    with pytest.warns(wattscope.MarkerWarning, match="phase index"):
        with wattscope.phase("epoch", index=np.int64(-1)):
            pass
    assert wattscope.flush() and not listener.pending()


def test_names_and_units_follow_the_binarys_rules(listener):
    limits = wattscope._LIMITS
    ok_name, ok_unit = "é" * (limits["max_phase_name_bytes"] // 2), "u" * limits["max_work_unit_bytes"]
    with wattscope.phase(ok_name):
        assert wattscope.work(1, unit=ok_unit) is True
    assert [m.get("name", m.get("unit")) for d in listener.drain() for m in d] == [ok_name, ok_unit, ok_name]
    bad_names = ["é" * (limits["max_phase_name_bytes"] // 2) + "x", "x" * 200, "a\nb", "tab\t", "del\x7f",
                 "\ud800", "", None, 3]
    for name in bad_names:
        ran = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            wattscope._warned.clear()
            with wattscope.phase(name):
                ran.append(True)  # the body runs, without its phase
            assert wattscope.mark(name) is False
        assert ran == [True] and len(caught) == 2, (name, caught)
    for unit in ("u" * (limits["max_work_unit_bytes"] + 1), "two\nlines", "", 7):
        with pytest.warns(wattscope.MarkerWarning, match="work unit"):
            wattscope._warned.clear()
            assert wattscope.work(1, unit=unit) is False
    assert wattscope.flush() and not listener.pending()


def test_a_phase_with_a_bad_index_sends_neither_begin_nor_end(listener):
    with wattscope.phase("epoch"):
        with pytest.warns(wattscope.MarkerWarning, match="phase index"):
            with wattscope.phase("epoch", index=-1):  # its end alone would close the outer epoch
                pass
    assert listener.drain() == [[{"kind": "begin", "name": "epoch"}], [{"kind": "end", "name": "epoch"}]]


def test_count_with_a_bad_unit_or_size_passes_the_batches_through(listener):
    batches = [[1, 2], [3]]
    with pytest.warns(wattscope.MarkerWarning, match="work unit"):
        assert list(wattscope.count(batches, unit="a\nb", size=len)) == batches
    with pytest.warns(wattscope.MarkerWarning, match="size"):
        assert list(wattscope.count(batches, size=3)) == batches
    unsized = [object(), object()]
    with pytest.warns(wattscope.MarkerWarning, match="could not size"):
        assert list(wattscope.count(unsized)) == unsized
    assert wattscope.flush() and not listener.pending()
    wattscope.configure(strict=True)
    with pytest.raises(TypeError):
        list(wattscope.count([object()]))


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
        assert wattscope.work(1) is True  # taken, kept for a wattscope that listens again
        assert wattscope.mark("x") is False
    assert wattscope.flush() is False


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
    # The limits file travels with the code: without it the helper warns (an error here) and checks no lengths.
    r = subprocess.run([str(venv / "bin" / "python"), "-W", "error", "-c",
                        "import wattscope; print(wattscope.__file__, wattscope._MAX_NAME)"],
                       capture_output=True, text=True, cwd=str(tmp_path))
    assert r.returncode == 0 and str(venv) in r.stdout, r.stdout + r.stderr
    assert r.stdout.split()[1] == str(wattscope._MAX_NAME) != "None"


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


def test_describe_model_and_count_with_a_real_torch_module(listener):
    torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/setup.sh installs it)")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, groups=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, padding=1, groups=2), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 16 * 16, 10))
    params = sum(p.numel() for p in model.parameters())
    # Multiply-adds per sample, by hand: conv1 8x16x16 outputs of 3*3*3; conv2 of (8/2)*3*3; linear 10 of 2048.
    flops = 2 * (8 * 16 * 16 * 27 + 8 * 16 * 16 * 36 + 10 * 2048)
    assert wattscope.describe_model(model, example=torch.zeros(4, 3, 16, 16)) == params
    assert listener.read(1) == [{"kind": "model", "name": "Sequential", "parameters": params, "flops": float(flops)}]
    assert all(p.grad is None for p in model.parameters())  # counted without gradients
    data = torch.utils.data.TensorDataset(torch.zeros(50, 3), torch.zeros(50))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    sizes = [len(x) for x, _ in wattscope.count(loader)]
    assert sizes == [16, 16, 16, 2] and wattscope.flush()
    assert work_total(listener.drain()) == 50


# ---- a declared total of work (the time and energy to finish are forecast from it)
@pytest.fixture
def no_totals():
    with wattscope._lock:
        wattscope._totals.clear()
    yield
    with wattscope._lock:
        wattscope._totals.clear()


def test_a_declared_total_goes_once_with_the_units_next_line(listener, no_totals):
    assert wattscope.work(64, total=60000) is True
    assert wattscope.work(64) is True
    assert wattscope.work(10, unit="tokens") is True
    assert wattscope.flush() is True
    assert listener.read(1) == [
        {"kind": "work", "amount": 128, "unit": "samples", "total": 60000},
        {"kind": "work", "amount": 10, "unit": "tokens"},
    ]
    # Declared once: later lines carry no total; a new declaration replaces it (the latest wins).
    wattscope.work(1)
    wattscope.work(1, total=50000)
    wattscope.work(1, total=70000)
    assert wattscope.flush() is True
    assert listener.read(1) == [{"kind": "work", "amount": 3, "unit": "samples", "total": 70000}]


def test_a_total_alone_is_sent_and_survives_a_full_queue(listener, no_totals):
    listener.fill()
    assert wattscope.work(0, unit="images", total=1000) is True
    assert wattscope.flush() is False  # the queue is full: kept for the next send
    listener.drain()
    assert wattscope.flush() is True
    assert listener.read(1) == [{"kind": "work", "amount": 0, "unit": "images", "total": 1000}]


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), 1e19, "60000", True])
def test_a_bad_total_is_dropped_before_sending(listener, no_totals, bad):
    with pytest.warns(wattscope.MarkerWarning, match="work total"):
        assert wattscope.work(1, total=bad) is False
    assert wattscope._totals == {} and wattscope._pending == {}
    assert wattscope.flush() and not listener.pending()
    wattscope.configure(strict=True)
    with pytest.raises(ValueError, match="work total"):
        wattscope.work(1, total=bad)


def test_trainer_callbacks_take_any_arguments_and_never_raise_without_a_meter(monkeypatch, tmp_path):
    import warnings

    from wattscope.callbacks import EnergyCallback

    monkeypatch.delenv("WATTSCOPE_SOCKET", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no default socket there
    seen = []
    cb = EnergyCallback(every_n_steps=2, on_measurement=seen.append)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cb.set_model(object())
        cb.on_train_begin(None, None, None, model=None)  # Hugging Face: (args, state, control, **kwargs)
        for epoch in range(2):
            cb.on_epoch_begin(epoch, {})  # Keras: (epoch, logs)
            for step in range(3):
                cb.on_step_begin(None, None, None)
                cb.on_step_end(None, None, None)
            cb.on_prediction_step(None, None, None)
            cb.on_evaluate(None, None, None, metrics={})
            cb.on_epoch_end(epoch, {"loss": 1.0})
        cb.on_train_epoch_start("trainer", "module")  # Lightning, then a run stopped mid-epoch
        cb.on_train_end(None, None, None)
        cb.on_anything_else(1, 2, x=3)
    names = [m.name for m in cb.measurements]
    assert names == ["step 0", "step 2", "evaluate", "epoch 0", "step 4", "evaluate", "epoch 1", "epoch 2"]
    assert seen == cb.measurements
    assert all(m.energy_j is None and m.duration_s is not None and m.error for m in cb.measurements)
