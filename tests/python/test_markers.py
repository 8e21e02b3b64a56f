"""The Python helper's markers under the real `wattscope run`: a flood loses nothing, numbers of any Python type
arrive as sent, and the helper drops exactly what the binary would refuse."""

import json
import sqlite3

import pytest

from conftest import BINARY


def test_a_tight_loop_of_work_calls_loses_nothing(world):
    # 200,000 work(1) in a tight loop inside a phase: before coalescing, 19,999 to 93,197 items were stored (the
    # socket's queue and the per-tick cap dropped the rest) and the phase's end could be lost with them.
    world.run("""
import wattscope
with wattscope.phase("flood"):
    for _ in range(200000):
        wattscope.work(1)
with wattscope.phase("after"):
    wattscope.work(3, unit="tokens")
""", task="flood")
    db = sqlite3.connect(world.path + "/wattscope.db")
    total, rows = db.execute("SELECT sum(amount), count(*) FROM work WHERE unit = 'samples'").fetchone()
    assert total == 200000
    assert rows < 1000  # coalesced: a bounded rate, not one row per call
    phases = db.execute("SELECT name, closed_by_run_end FROM phases ORDER BY phase_id").fetchall()
    assert phases == [("flood", 0), ("after", 0)]  # the flood's `end` arrived; nothing closed by the run's end
    # Every amount counted towards the phase it was done in.
    assert db.execute("SELECT DISTINCT phase_id FROM work WHERE unit = 'samples'").fetchall() == [(0,)]
    assert db.execute("SELECT phase_id, amount FROM work WHERE unit = 'tokens'").fetchall() == [(1, 3.0)]


def test_a_shell_loop_streams_its_markers_through_one_mark_process(world):
    # `wattscope mark work 1` per item is a process per item and cannot sum; `wattscope mark --stdin` sums the
    # loop's work and sends it at a bounded rate, phase boundaries in order with it.
    world.file("loop.sh", """set -eu
{
  echo 'begin files 0'
  i=0; while [ $i -lt 50000 ]; do echo 'work 1 files'; i=$((i + 1)); done
  echo '# a comment, skipped'
  echo 'end files'
  echo '{"kind":"begin","name":"tail"}'
  echo 'work 2.5'
  echo 'end'
} | "$WATTSCOPE" mark --stdin --strict
""")
    world.env["WATTSCOPE"] = BINARY
    world.wattscope("run", "--interval", "50ms", "--task", "loop", "--", "sh", world.path + "/loop.sh")
    db = sqlite3.connect(world.path + "/wattscope.db")
    assert db.execute("SELECT sum(amount), count(*) < 1000 FROM work WHERE unit = 'files'").fetchone() == (50000, 1)
    assert db.execute("SELECT name, \"index\", closed_by_run_end FROM phases ORDER BY phase_id").fetchall() == [
        ("files", 0, 0), ("tail", None, 0)]
    assert db.execute("SELECT DISTINCT phase_id FROM work WHERE unit = 'files'").fetchall() == [(0,)]
    assert db.execute("SELECT phase_id, amount FROM work WHERE unit = 'samples'").fetchall() == [(1, 2.5)]


def test_mark_stdin_names_a_bad_line(world):
    import subprocess

    for text, why in (("begin a\nwork lots\n", "stdin line 2: 'lots' is not a number"),
                      ("explode x\n", "stdin line 1: unknown marker 'explode'"),
                      ("begin e -3\n", "not a whole number"),
                      ("x" * 5000, "longer than 4096 bytes"),
                      ('{"kind":"work"}\n', "stdin line 1")):
        r = subprocess.run([BINARY, "mark", "--stdin"], input=text, capture_output=True, text=True, timeout=30,
                           env={k: v for k, v in world.env.items() if k != "WATTSCOPE_SOCKET"})
        assert r.returncode == 2 and why in r.stderr, (text[:40], r.returncode, r.stderr)
    r = subprocess.run([BINARY, "mark", "--stdin", "begin", "x"], input="", capture_output=True, text=True)
    assert r.returncode == 2 and "give no marker" in r.stderr


def test_numpy_and_torch_numbers_arrive_as_sent(world):
    pytest.importorskip("numpy", reason="python3-numpy is not installed (scripts/setup.sh installs it)")
    pytest.importorskip("torch", reason="python3-torch is not installed (scripts/setup.sh installs it)")
    # Before, each of these raised ValueError out of the training loop, under wattscope and outside it.
    world.run("""
import decimal, fractions, warnings
import numpy as np, torch, wattscope
warnings.simplefilter("error", wattscope.MarkerWarning)
mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
with wattscope.phase("epoch", index=np.int64(1)):
    wattscope.work(np.int64(64))
    wattscope.work(torch.tensor(64))
    wattscope.work(mask.sum(), unit="tokens")
    wattscope.work(np.float32(0.5), unit="images", total=np.int64(10))
    wattscope.work(decimal.Decimal("0.25"), unit="images")
    wattscope.work(fractions.Fraction(1, 4), unit="images")
wattscope.describe_model(torch.nn.Linear(3, 2), flops=np.float64(12.0))
""", task="scalars")
    db = sqlite3.connect(world.path + "/wattscope.db")
    assert db.execute('SELECT name, "index" FROM phases').fetchall() == [("epoch", 1)]
    work = dict(db.execute("SELECT unit, sum(amount) FROM work WHERE phase_id = 0 GROUP BY unit").fetchall())
    assert work == {"samples": 128, "tokens": 3, "images": 1.0}
    assert db.execute("SELECT max(total) FROM work WHERE unit = 'images'").fetchone() == (10,)
    detail = json.loads(db.execute("SELECT detail FROM events WHERE kind = 'model'").fetchone()[0])
    assert detail == {"parameters": 8, "flops": 12.0}


def test_the_helper_drops_exactly_what_the_binary_refuses(world):
    # Each candidate goes to wattscope twice over: raw, as a line of its own (what the binary keeps is its verdict),
    # and through the helper's own check (its verdict). The two must agree on every one.
    world.run(r"""
import json, os, socket, warnings
import wattscope
warnings.simplefilter("ignore", wattscope.MarkerWarning)
names = ["x" * 128, "x" * 129, "\u00e9" * 64, "\u00e9" * 64 + "x", "\U0001F600" * 32, "\U0001F600" * 32 + "x",
         "a\nb", "tab\tx", "del\x7f", "nul\x00", "c1\x85", "\ud800", "", "\u65e5\u672c"]
units = ["u" * 32, "u" * 33, "\u00fc" * 16, "\u00fc" * 16 + "x", "tok\nens", "\x1b[31m", "", "tokens"]
indices = [0, 3.0, -1, 2**63 - 1, 2**63, 2.0**53, 2.0**53 + 2, 1.5]
amounts = [0, 1e18, 1.0000001e18, -0.5, 2.5]
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
def raw(message):
    sock.sendto((json.dumps(message) + "\n").encode("utf-8", "surrogatepass"), os.environ["WATTSCOPE_SOCKET"])
helper = {"names": [], "units": [], "indices": [], "amounts": []}
for i, n in enumerate(names):
    raw({"kind": "mark", "name": n})
    if wattscope._text(n, "mark name", wattscope._MAX_NAME) is not None:
        helper["names"].append(i)
for i, u in enumerate(units):
    raw({"kind": "work", "amount": i + 1, "unit": u})
    if wattscope._text(u, "work unit", wattscope._MAX_UNIT) is not None:
        helper["units"].append(i)
for i, x in enumerate(indices):
    raw({"kind": "begin", "name": "p%d" % i, "index": x}); raw({"kind": "end", "name": "p%d" % i})
    if wattscope._whole(x, "phase index") is not None:
        helper["indices"].append(i)
for i, a in enumerate(amounts):
    raw({"kind": "work", "amount": a, "unit": "a%d" % i})
    if wattscope._number(a, "work amount", wattscope._MAX_AMOUNT) is not None:
        helper["amounts"].append(i)
with open("helper.json", "w") as f:
    json.dump(helper, f)
""", task="rules")
    with open(world.path + "/helper.json") as f:
        helper = json.load(f)
    db = sqlite3.connect(world.path + "/wattscope.db")
    db.text_factory = lambda b: b.decode("utf-8", "surrogatepass")
    names = ["x" * 128, "x" * 129, "\u00e9" * 64, "\u00e9" * 64 + "x", "\U0001F600" * 32, "\U0001F600" * 32 + "x",
             "a\nb", "tab\tx", "del\x7f", "nul\x00", "c1\x85", "\ud800", "", "\u65e5\u672c"]
    stored = {r[0] for r in db.execute("SELECT source FROM events WHERE kind = 'mark'")}
    assert [i for i, n in enumerate(names) if n in stored] == helper["names"] == [0, 2, 4, 10, 13]
    stored = sorted(int(r[0]) - 1 for r in db.execute("SELECT amount FROM work WHERE unit NOT LIKE 'a_'"))
    assert stored == helper["units"] == [0, 2, 7]
    stored = sorted(int(r[0][1:]) for r in db.execute("SELECT name FROM phases"))
    assert stored == helper["indices"] == [0, 1, 3, 5]
    stored = sorted(int(r[0][1:]) for r in db.execute("SELECT unit FROM work WHERE unit LIKE 'a_'"))
    assert stored == helper["amounts"] == [0, 1, 4]
