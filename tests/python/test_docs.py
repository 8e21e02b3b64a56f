"""docs/python.md's example, run as it is written (issue 34.4): the PyTorch script under `wattscope run` for three batch
sizes, then the notebook lines that make the table of energy per epoch and per sample, and the plot."""

import os
import re
import subprocess

import pytest

from conftest import BINARY, PYTHON, SOURCE_DIR


def blocks():
    with open(os.path.join(SOURCE_DIR, "docs", "python.md")) as f:
        text = f.read()
    found = dict(re.findall(r"<!-- test: (\S+) -->\n```\w*\n(.*?)```", text, flags=re.S))
    assert set(found) == {"train.py", "shell", "analysis"}, found.keys()
    return found


def test_the_analysis_is_under_fifteen_lines():
    assert len(blocks()["analysis"].strip().splitlines()) < 15


def test_the_python_guide_runs_as_written(steady_world):
    pytest.importorskip("torch", reason="python3-torch is not installed (scripts/setup.sh installs it)")
    pytest.importorskip("pandas", reason="python3-pandas is not installed (scripts/setup.sh installs it)")
    pytest.importorskip("matplotlib", reason="python3-matplotlib is not installed (scripts/setup.sh installs it)")
    world = steady_world
    b = blocks()
    world.file("train.py", b["train.py"])
    env = dict(world.env, PATH=f"{os.path.dirname(PYTHON)}:{os.path.dirname(BINARY)}:/usr/bin:/bin",
               MPLBACKEND="Agg")
    r = subprocess.run(["bash", "-euc", b["shell"]], cwd=world.path, env=env, capture_output=True, text=True,
                       timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([PYTHON, "-c", b["analysis"]], cwd=world.path, env=env, capture_output=True, text=True,
                       timeout=200)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "j_per_sample" in out and "epoch_j" in out
    for bs in ("16", "64", "256"):
        assert re.search(rf"^{bs}\s+\d", out, flags=re.M), out  # a row per batch size
    with open(os.path.join(world.path, "energy_per_sample.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # The table's figures are the store's: J per sample of an epoch is its energy over its 4,096 samples.
    import wattscope

    store = wattscope.open(os.path.join(world.path, "wattscope.db"))
    for run in store.runs(task="mlp"):
        epochs = [p for p in run.phases if p["name"] == "epoch"]
        assert [p["index"] for p in epochs] == [0, 1, 2] and all(p["work"] == {"samples": 4096} for p in epochs)
        for p in epochs:
            assert p["energy_per_unit_j"]["samples"] == pytest.approx(p["energy_j"] / 4096)
    frame = store.phases(task="mlp").df()
    assert frame.groupby("run_id")["work.samples"].sum().tolist() == [3 * 4096] * 3
