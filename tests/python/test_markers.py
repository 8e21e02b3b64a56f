"""A marker flood through the Python helper under the real `wattscope run` (issue 29.5): nothing is lost."""

import sqlite3

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
