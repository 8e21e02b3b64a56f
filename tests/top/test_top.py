"""`wattscope top` end to end (issue 16): the real binary in a real pseudo-terminal, its screen reconstructed by a
VT emulator (pyte), against the fake NVML library and against `wattscope serve` processes the tests start. The
assertions are on the text a person would read: values from the scenario, the process order after `s`, a resize,
a serve that stops answering, and the terminal given back after Ctrl-C and SIGTERM."""

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import tempfile
import termios
import time

import pyte
import pytest

BINARY = os.path.abspath(os.environ["WATTSCOPE_BINARY"])
FAKE_NVML = os.path.abspath(os.environ["WATTSCOPE_FAKE_NVML"])
GIB = 1 << 30


def scenario(tmp, pid_a, pid_b):
    """Two GPUs; A runs on GPU 0 (SM 80 %, 10 GiB), B on GPU 1 (SM 30 %, 20 GiB). GPU 0 is busy (util 97 % > 90),
    GPU 1 is hot (88 C > 85) and nearly full (75 of 80 GiB > 80 %)."""
    for name, pid in (("a.pid", pid_a), ("b.pid", pid_b)):
        with open(os.path.join(tmp, name), "w") as f:
            f.write(str(pid))
    common = {"mem_total_bytes": 80 * GIB, "util_mem": 40, "clock_sm": 1980, "clock_mem": 2619, "pstate": 0}
    devs = [
        {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-top-0", "pci_bus_id": "00000000:18:00.0",
         "metrics": dict(common, power_mw=312000, power_limit_mw=700000, util_gpu=97, mem_used_bytes=40 * GIB,
                         temp_gpu=64, energy_mj={"linear": [1000000, 312]}),
         "processes": [{"pid_file": os.path.join(tmp, "a.pid"), "type": "compute", "mem_bytes": 10 * GIB,
                        "sm": 80, "mem": 20}]},
        {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-top-1", "pci_bus_id": "00000000:3B:00.0",
         "metrics": dict(common, power_mw=123000, power_limit_mw=400000, util_gpu=12, mem_used_bytes=75 * GIB,
                         temp_gpu=88, energy_mj={"linear": [5000000, 123]}),
         "processes": [{"pid_file": os.path.join(tmp, "b.pid"), "type": "compute", "mem_bytes": 20 * GIB,
                        "sm": 30, "mem": 10}]},
    ]
    path = os.path.join(tmp, "scenario.json")
    with open(path, "w") as f:
        json.dump({"devices": devs}, f)
    return path


@pytest.fixture
def world():
    """A temporary directory, two worker processes and the scenario naming them; everything removed after."""
    with tempfile.TemporaryDirectory(prefix="wattscope-top-") as tmp:
        workers = [subprocess.Popen(["sleep", "300"]) for _ in range(2)]
        try:
            path = scenario(tmp, workers[0].pid, workers[1].pid)
            os.mkdir(os.path.join(tmp, "sys"))  # an empty sysfs: no RAPL or hwmon of the machine running the tests
            env = dict(os.environ)
            env.pop("CUDA_VISIBLE_DEVICES", None)
            env.pop("NO_COLOR", None)
            env.update({"WATTSCOPE_NVML_LIBRARY": FAKE_NVML, "WATTSCOPE_FAKE_NVML_SCENARIO": path,
                        "WATTSCOPE_LOCK_DIR": os.path.join(tmp, "locks"), "TERM": "xterm-256color",
                        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"})
            yield {"tmp": tmp, "env": env, "a": workers[0].pid, "b": workers[1].pid,
                   "sysfs": os.path.join(tmp, "sys")}
        finally:
            for w in workers:
                w.kill()
                w.wait()


class XtermScreen(pyte.Screen):
    """pyte 0.8 without the three xterm sequences ncurses uses on xterm-256color: REP (CSI n b, repeat the last
    character), SU and SD (CSI n S / T, scroll the region). Added here so the screen is what an xterm shows."""

    _last = " "

    def draw(self, data):
        if data:
            self._last = data[-1]
        super().draw(data)

    def repeat_last(self, count=1, *args, **kwargs):
        super().draw(self._last * max(count, 1))

    def _scroll(self, count, up):
        margins = self.margins or pyte.screens.Margins(0, self.lines - 1)
        x, y = self.cursor.x, self.cursor.y
        self.cursor.y = margins.bottom if up else margins.top
        for _ in range(max(count, 1)):
            self.index() if up else self.reverse_index()
        self.cursor.x, self.cursor.y = x, y

    def scroll_up(self, count=1, *args, **kwargs):
        self._scroll(count, True)

    def scroll_down(self, count=1, *args, **kwargs):
        self._scroll(count, False)


class XtermStream(pyte.ByteStream):
    csi = dict(pyte.ByteStream.csi, b="repeat_last", S="scroll_up", T="scroll_down")


class Pty:
    """The binary on the slave side of a pseudo-terminal (its controlling terminal), the master read into a VT
    emulator of the same size."""

    def __init__(self, args, env, cols=80, rows=24, cwd=None):
        self.master, slave = os.openpty()
        self.resize_pty(slave, cols, rows)
        self.screen = XtermScreen(cols, rows)
        self.stream = XtermStream(self.screen)
        self.raw = b""

        def child_setup():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
                                     preexec_fn=child_setup, close_fds=True)
        os.close(slave)

    @staticmethod
    def resize_pty(fd, cols, rows):
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def pump(self, seconds):
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            r, _, _ = select.select([self.master], [], [], left)
            if not r:
                return
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the slave side closed (the program exited)
                return
            if not data:
                return
            self.raw += data
            self.stream.feed(data)

    def text(self):
        return "\n".join(self.screen.display)

    def wait_for(self, pattern, seconds=15):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.pump(0.2)
            if re.search(pattern, self.text()):
                return self.text()
        raise AssertionError(f"{pattern!r} never appeared on screen:\n{self.text()}\n(exit: {self.proc.poll()})")

    def send(self, data):
        os.write(self.master, data)

    def resize(self, cols, rows):
        self.resize_pty(self.master, cols, rows)  # the kernel sends SIGWINCH to the foreground group
        self.screen.resize(rows, cols)

    def finish(self, seconds=15):
        end = time.monotonic() + seconds
        while self.proc.poll() is None and time.monotonic() < end:
            self.pump(0.1)
        self.pump(0.2)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("top did not exit")
        return self.proc.returncode

    def termios_after(self):
        return termios.tcgetattr(self.master)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def row_of(text, needle):
    for i, line in enumerate(text.splitlines()):
        if needle in line:
            return i
    return None


def pid_rows(text, *pids):
    """Screen rows of the process lines of these pids (the line starts with the pid, right-aligned)."""
    rows = []
    for pid in pids:
        m = [i for i, line in enumerate(text.splitlines()) if re.match(rf"^\s*{pid} ", line)]
        rows.append(m[0] if m else None)
    return rows


def top_args(world, *extra):
    return [BINARY, "top", "--interval", "200ms", "--sysfs-root", world["sysfs"], *extra]


def test_once_prints_the_scenario_values(world):
    out = subprocess.run(top_args(world, "--once"), env=dict(world["env"], COLUMNS="120", LINES="60"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "\x1b" not in text  # plain text: no escape sequences
    assert re.search(r"^ 0 .* 97%! .* 50%  .* 312/700W  .* 64C ", text, re.M), text
    assert re.search(r"^ 1 .* 12%  .* 94%! .* 123/400W  .* 88C!", text, re.M), text
    assert "GPU 0 NVIDIA H100 80GB HBM3: util 97%  mem 40.0G/80.0G  power 312.0 W of 700 W  temp 64 C" in text
    # The workers with their GPU memory and SM share, the heavier GPU's first (sorted by attributed power).
    a, b = pid_rows(text, world["a"], world["b"])
    assert a is not None and b is not None, text
    assert a < b, text
    line_a = text.splitlines()[a]
    assert re.search(r" 10\.0G\s+80\s+312\.\d\d$", line_a), line_a
    line_b = text.splitlines()[b]
    assert re.search(r" 20\.0G\s+30\s+123\.\d\d$", line_b), line_b


def test_once_refuses_bad_flags(world):
    for args, words in ((["--sort", "colour"], "not a sort key"), (["--connect", "ftp://x"], "http://HOST:PORT"),
                        (["--interval", "1ms"], "at most every 100ms"),
                        (["--token-file", "/nonexistent"], "--token-file is for --connect")):
        out = subprocess.run([BINARY, "top", "--once", *args], env=world["env"], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert words in out.stderr, (args, out.stderr)


def test_keys_sort_select_help_and_ctrl_c_restores_the_terminal(world):
    t = Pty(top_args(world), world["env"], cols=80, rows=24)
    try:
        text = t.wait_for(rf"(?m)^\s*{world['b']} ")
        assert "q quit  s sort:power" in text
        assert re.search(r"^ 0 .*312/700W", text, re.M), text
        a, b = pid_rows(text, world["a"], world["b"])
        assert a < b, text  # power: A (312 W) above B (123 W)
        for key in ("cpu", "mem", "gpumem"):
            t.send(b"s")
            text = t.wait_for(f"s sort:{key} ")
        text = t.wait_for(rf"(?m)^\s*{world['b']} ")
        a, b = pid_rows(text, world["a"], world["b"])
        assert b < a, text  # GPU memory: B (20 GiB) above A (10 GiB)
        t.send(b"s")
        text = t.wait_for("s sort:sm ")
        a, b = pid_rows(text, world["a"], world["b"])
        assert a < b, text  # SM: A (80 %) above B (30 %)
        # Down selects GPU 1: its details replace GPU 0's.
        t.send(b"\x1bOB")  # cursor down as xterm sends it in keypad-transmit mode (smkx), which curses set
        t.wait_for("GPU 1 NVIDIA A100-SXM4-40GB: util 12%")
        t.send(b"h")
        t.wait_for("this help")
        t.send(b"h")
        t.wait_for("POWER W")
        # The screen fits 80 columns: no line wraps onto the next.
        assert all(len(line.rstrip()) <= 80 for line in t.text().splitlines())
        t.send(b"\x03")  # Ctrl-C, through the terminal's line discipline as SIGINT
        assert t.finish() == 0
        # Left the alternate screen (rmcup) and showed the cursor again (cnorm), after the last hiding of it.
        assert t.raw.rfind(b"\x1b[?1049l") > t.raw.rfind(b"\x1b[?1049h") >= 0
        assert t.raw.rfind(b"\x1b[?25h") > t.raw.rfind(b"\x1b[?25l") >= 0
        lflag = t.termios_after()[3]
        assert lflag & termios.ICANON and lflag & termios.ECHO, "the terminal was left in raw mode"
    finally:
        t.close()


def test_resize_redraws_at_the_new_size(world):
    t = Pty(top_args(world), world["env"], cols=80, rows=24)
    try:
        t.wait_for(r"q quit")
        assert row_of(t.text(), "q quit") == 23
        t.resize(132, 40)
        text = t.wait_for(r"(?s)q quit.*", 5)
        deadline = time.monotonic() + 10
        while row_of(t.text(), "q quit") != 39 and time.monotonic() < deadline:
            t.pump(0.2)
        text = t.text()
        assert row_of(text, "q quit") == 39, text  # the keys line moved to the new bottom row
        header = [line for line in text.splitlines() if line.startswith("GPU ")][0]
        assert len(header.rstrip()) > 100, header  # the columns widened to 132
        t.proc.send_signal(signal.SIGTERM)
        assert t.finish() == 128 + signal.SIGTERM
        assert t.raw.rfind(b"\x1b[?1049l") > t.raw.rfind(b"\x1b[?1049h") >= 0
        assert t.raw.rfind(b"\x1b[?25h") > t.raw.rfind(b"\x1b[?25l") >= 0
        lflag = t.termios_after()[3]
        assert lflag & termios.ICANON and lflag & termios.ECHO
    finally:
        t.close()


def test_no_color_and_dumb_terminal(world):
    t = Pty(top_args(world), dict(world["env"], NO_COLOR="1"), cols=80, rows=24)
    try:
        t.wait_for(r"q quit")
        t.pump(1)
        assert not re.search(rb"\x1b\[(3\d|9\d|38;5;\d+)m", t.raw), "colour sent under NO_COLOR"
        t.send(b"q")
        assert t.finish() == 0
    finally:
        t.close()
    t = Pty(top_args(world), dict(world["env"], TERM="dumb"), cols=80, rows=24)
    try:
        t.pump(2)
        t.proc.send_signal(signal.SIGINT)
        t.finish()
        assert b"\x1b" not in t.raw, t.raw[:200]
        assert b"q quit" in t.raw and b"312/700W" in t.raw
    finally:
        t.close()


class Serve:
    def __init__(self, world, name, extra=()):
        self.dir = os.path.join(world["tmp"], name)
        os.mkdir(self.dir)
        self.err = open(os.path.join(self.dir, "err"), "w+")
        self.proc = subprocess.Popen([BINARY, "serve", "--listen", "127.0.0.1:0", "--interval", "200ms",
                                      "--sysfs-root", world["sysfs"], *extra],
                                     env=dict(world["env"], HOSTNAME=name), cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=self.err)
        deadline = time.monotonic() + 20
        self.port = None
        while self.port is None and time.monotonic() < deadline:
            with open(self.err.name) as f:
                m = re.search(r"serving on http://127\.0\.0\.1:(\d+)/", f.read())
            if m:
                self.port = int(m.group(1))
            else:
                time.sleep(0.1)
        assert self.port, open(self.err.name).read()
        self.url = f"http://127.0.0.1:{self.port}"

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def close(self):
        if self.proc.poll() is None:
            self.kill()
        self.err.close()


def test_fleet_shows_both_hosts_totals_and_a_lost_host(world):
    s1, s2 = Serve(world, "one"), Serve(world, "two")
    t = None
    try:
        out = subprocess.run([BINARY, "top", "--once", "--connect", s1.url, "--connect", s2.url + "/"],
                             env=dict(world["env"], COLUMNS="120", LINES="50"), capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.count(" live, ") == 2, out.stdout
        assert s1.url in out.stdout and s2.url in out.stdout
        # Each host has both GPUs: 435 W of GPU power apiece; the fleet line sums them.
        m = re.search(r"^FLEET\s+2 hosts, 2 answering\s+power ([\d.]+) W\s+energy", out.stdout, re.M)
        assert m, out.stdout
        assert abs(float(m.group(1)) - 870.0) < 0.5, m.group(0)
        assert "ALERTS" not in out.stdout  # this serve has no /api/v1/alerts (404): nothing shown

        t = Pty([BINARY, "top", "--interval", "200ms", "--connect", s1.url, "--connect", s2.url], world["env"],
                cols=100, rows=30)
        t.wait_for(r"(?s)live, .*live, .*2 hosts, 2 answering")
        s2.kill()
        text = t.wait_for(r"NOT ANSWERING\s+last data \d+s ago", 15)
        lines = text.splitlines()
        down = [line for line in lines if "NOT ANSWERING" in line]
        assert len(down) == 1 and s2.url in down[0], text
        assert "2 hosts, 1 answering" in text, text
        # The remaining host keeps updating: its age stays small while the other's grows.
        live = [line for line in lines if " live, " in line]
        assert len(live) == 1 and s1.url in live[0], text
        t.send(b"q")
        assert t.finish() == 0
    finally:
        if t:
            t.close()
        s1.close()
        s2.close()


def test_token_protected_serve(world):
    tok = os.path.join(world["tmp"], "token")
    with os.fdopen(os.open(tok, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("s3cret-token-for-top-tests\n")
    d = os.path.join(world["tmp"], "tok")
    os.mkdir(d)
    err = open(os.path.join(d, "err"), "w+")
    proc = subprocess.Popen([BINARY, "serve", "--listen", "127.0.0.1:0", "--interval", "200ms", "--token-file", tok,
                             "--sysfs-root", world["sysfs"]], env=world["env"], cwd=d, stdout=subprocess.DEVNULL,
                            stderr=err)
    try:
        port = None
        for _ in range(200):
            m = re.search(r"serving on http://127\.0\.0\.1:(\d+)/", open(err.name).read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.1)
        assert port
        url = f"http://127.0.0.1:{port}"
        env = dict(world["env"], COLUMNS="120", LINES="40")
        without = subprocess.run([BINARY, "top", "--once", "--connect", url], env=env, capture_output=True,
                                 text=True, timeout=60)
        assert "NOT ANSWERING" in without.stdout and "token was refused" in without.stdout, without.stdout
        with_token = subprocess.run([BINARY, "top", "--once", "--connect", url, "--token-file", tok], env=env,
                                    capture_output=True, text=True, timeout=60)
        assert " live, " in with_token.stdout and "312/700W" in with_token.stdout, with_token.stdout
    finally:
        proc.kill()
        proc.wait()
        err.close()


def test_firing_alerts_from_a_serve_that_has_them(world, tmp_path):
    """A real serve evaluating a rules file (issue 14): top --connect reads its /api/v1/alerts and shows what fires.
    GPU 1 of the scenario runs at 88 C; the rule has no `for`, so it fires on serve's first frame."""
    rules = tmp_path / "alerts.toml"
    rules.write_text('builtin_rules = false\n[[rule]]\nname = "gpu-hot"\nmetric = "temp_gpu_c"\nop = ">"\n'
                     'threshold = 85\nfor = "0s"\nseverity = "critical"\n')
    srv = Serve(world, "alerting", ("--alerts", str(rules)))
    try:
        out = subprocess.run([BINARY, "top", "--once", "--connect", srv.url],
                             env=dict(world["env"], COLUMNS="120", LINES="40"), capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        alert_lines = [line for line in out.stdout.splitlines() if line.startswith("ALERTS")]
        assert len(alert_lines) == 1 and alert_lines[0].startswith("ALERTS 1: [critical] gpu-hot gpu1"), out.stdout
    finally:
        srv.close()


def test_simulate_says_so_on_screen(world):
    # Issue 19: top --simulate shows the built-in scenario's four GPUs, and the word, never bare figures.
    env = {k: v for k, v in world["env"].items() if k not in ("WATTSCOPE_NVML_LIBRARY", "WATTSCOPE_FAKE_NVML_SCENARIO")}
    out = subprocess.run([BINARY, "top", "--once", "--simulate"], env=dict(env, COLUMNS="120", LINES="60"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "SIMULATED GPUs, not measurements" in out.stdout, out.stdout
    assert re.search(r"(?m)^ 3 ", out.stdout), out.stdout
    real = subprocess.run(top_args(world, "--once"), env=dict(world["env"], COLUMNS="120", LINES="60"),
                          capture_output=True, text=True, timeout=60)
    assert real.returncode == 0, real.stderr
    assert "SIMULATED" not in real.stdout


def test_local_view_shows_the_sessions_firing_alerts(world, tmp_path):
    # Issue 14 in top: the local view evaluates the rules itself (the built-in ones unless --alerts) and shows what
    # fires on its status line. GPU 1 of the scenario runs at 88 C; a rule with no `for` fires on the first frame.
    rules = tmp_path / "alerts.toml"
    rules.write_text('builtin_rules = false\n[[rule]]\nname = "hot_gpu"\nmetric = "temp_gpu_c"\nop = ">"\n'
                     'threshold = 85\nfor = "0s"\nseverity = "critical"\n'
                     '[[webhook]]\nurl = "http://127.0.0.1:9/never"\n')  # top never notifies
    out = subprocess.run(top_args(world, "--once", "--alerts", str(rules)),
                         env=dict(world["env"], COLUMNS="160", LINES="60"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert re.search(r"(?m)^ALERTS 1: \[critical\] hot_gpu gpu1", out.stdout), out.stdout
    quiet = subprocess.run(top_args(world, "--once"), env=dict(world["env"], COLUMNS="160", LINES="60"),
                           capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0, quiet.stderr
    assert "no alerts firing" in quiet.stdout, quiet.stdout
