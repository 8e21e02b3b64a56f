"""docs/python.md's example, run as it is written: the PyTorch script under `wattscope run` for three batch sizes, then
the notebook lines that make the table of energy per epoch and per sample, and the plot; with stand-in GPUs, and on a
machine with neither GPU nor RAPL."""

import os
import re
import subprocess

import pytest

from conftest import BINARY, PYTHON, SOURCE_DIR


def blocks():
    with open(os.path.join(SOURCE_DIR, "docs", "python.md")) as f:
        text = f.read()
    found = dict(re.findall(r"<!-- test: (\S+) -->\n```\w*\n(.*?)```", text, flags=re.S))
    assert set(found) == {"train.py", "shell", "shell-cpu-only", "analysis"}, found.keys()
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


def without_gpu_or_rapl(world):
    """The world as a VM without GPUs sees it: no GPU library loads, and `wattscope` (a wrapper first on the PATH)
    reads an empty sysfs, so there is no RAPL either."""
    for var in ("WATTSCOPE_NVML_LIBRARY", "WATTSCOPE_ROCM_SMI_LIBRARY", "WATTSCOPE_LEVEL_ZERO_LIBRARY"):
        world.env[var] = os.path.join(world.path, "absent", "lib.so")
    bin_dir = os.path.join(world.path, "bin")
    os.mkdir(bin_dir)
    wrapper = world.file("bin/wattscope", f'#!/bin/sh\ncmd=$1; shift\nexec {BINARY} "$cmd" --sysfs-root '
                                          f'{os.path.join(world.path, "sys")} "$@"\n')
    os.chmod(wrapper, 0o755)
    return dict(world.env, PATH=f"{bin_dir}:{os.path.dirname(PYTHON)}:/usr/bin:/bin", MPLBACKEND="Agg")


def test_the_python_guide_on_a_machine_without_gpu_or_rapl(world):
    pytest.importorskip("torch", reason="python3-torch is not installed (scripts/setup.sh installs it)")
    pytest.importorskip("pandas", reason="python3-pandas is not installed (scripts/setup.sh installs it)")
    pytest.importorskip("matplotlib", reason="python3-matplotlib is not installed (scripts/setup.sh installs it)")
    b = blocks()
    env = without_gpu_or_rapl(world)
    world.file("train.py", b["train.py"])
    # As the page warns: without --cpu-tdp nothing measures energy, and the analysis says so instead of plotting.
    nothing = os.path.join(world.path, "nothing")
    os.mkdir(nothing)
    r = subprocess.run(["wattscope", "run", "--task", "mlp", "--tag", "batch_size=64", "--", PYTHON,
                        os.path.join(world.path, "train.py"), "64"], cwd=nothing, env=env, capture_output=True,
                       text=True, timeout=200)
    assert r.returncode == 0 and "--cpu-tdp" in r.stderr, r.stderr[-3000:]  # the run itself says what to pass
    r = subprocess.run([PYTHON, "-c", b["analysis"]], cwd=nothing, env=env, capture_output=True, text=True,
                       timeout=200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "No energy was measured" in r.stdout and "--cpu-tdp" in r.stdout, r.stdout
    assert not os.path.exists(os.path.join(nothing, "energy_per_sample.png"))
    # With --cpu-tdp, as the page says: an estimate, the table and the plot.
    r = subprocess.run(["bash", "-euc", b["shell-cpu-only"]], cwd=world.path, env=env, capture_output=True, text=True,
                       timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([PYTHON, "-c", b["analysis"]], cwd=world.path, env=env, capture_output=True, text=True,
                       timeout=200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "No energy was measured" not in r.stdout and "estimated" in r.stdout, r.stdout
    for bs in ("16", "64", "256"):
        assert re.search(rf"^{bs}\s+\d", r.stdout, flags=re.M), r.stdout
    with open(os.path.join(world.path, "energy_per_sample.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
