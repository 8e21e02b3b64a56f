"""A marker flood through the Python helper under the real `wattscope run` (issue 29.5): nothing is lost."""

import sqlite3


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
