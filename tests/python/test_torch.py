"""A real PyTorch training script (Debian's python3-torch, CPU) under `wattscope run` (issue 34.2): epochs, evals, work
and per-phase energy read back through wattscope.open() against the script's own timers and counters, with two
stand-in GPUs at a known constant power."""

import json
import os

import pytest

import wattscope

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/setup.sh installs it)")

SCRIPT = """
import json, sys, time
import torch
import wattscope

torch.manual_seed(0)
torch.set_num_threads(1)
N_TRAIN, N_EVAL, BATCH, EPOCHS = 4096, 1024, 128, 3
x = torch.randn(N_TRAIN + N_EVAL, 32)
y = (x[:, :4].sum(dim=1) > 0).long()
train = torch.utils.data.TensorDataset(x[:N_TRAIN], y[:N_TRAIN])
held_out = torch.utils.data.TensorDataset(x[N_TRAIN:], y[N_TRAIN:])
loader = torch.utils.data.DataLoader(train, batch_size=BATCH, shuffle=True, drop_last=False)
evaluation = torch.utils.data.DataLoader(held_out, batch_size=BATCH)
model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                            torch.nn.Linear(128, 2))
params = wattscope.describe_model(model, example=x[:8])
opt = torch.optim.SGD(model.parameters(), lr=0.05)
loss_fn = torch.nn.CrossEntropyLoss()
mine = {"params": params, "phases": [], "accuracy": []}

def timed(name, index, body):
    t0 = time.time()
    with wattscope.phase(name, index=index):
        n = body()
    mine["phases"].append({"name": name, "index": index, "start": t0, "end": time.time(), "samples": n})

def train_epoch():
    n = 0
    for _ in range(2):  # two passes per epoch: long enough against the 50 ms sampling
        for xb, yb in wattscope.count(loader):
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
            n += len(xb)
    return n

def evaluate():
    n = correct = 0
    with torch.no_grad():
        for xb, yb in wattscope.count(evaluation, unit="eval_samples"):
            for _ in range(3):
                out = model(xb)
            correct += int((out.argmax(dim=1) == yb).sum())
            n += len(xb)
    mine["accuracy"].append(correct / n)
    return n

for epoch in range(EPOCHS):
    timed("epoch", epoch, train_epoch)
    timed("eval", epoch, evaluate)
with open(sys.argv[1], "w") as f:
    json.dump(mine, f)
"""

INTERVAL_S = 0.05
POWER_W = {"gpu0": 200.0, "gpu1": 100.0}


def test_a_real_training_run_reads_back_as_the_script_saw_it(steady_world):
    world = steady_world
    out = os.path.join(world.path, "mine.json")
    prog = world.file("train.py", SCRIPT)
    world.wattscope("run", "--interval", "50ms", "--task", "torch", "--sysfs-root", os.path.join(world.path, "sys"),
                    "--tag", "batch_size=128", "--", "/usr/bin/python3", prog, out)
    with open(out) as f:
        mine = json.load(f)
    assert mine["accuracy"][-1] > 0.8  # it really trained

    store = wattscope.open(os.path.join(world.path, "wattscope.db"))
    (run,) = store.runs(task="torch")
    phases = run.phases
    assert [(p["name"], p["index"]) for p in phases] == [(p["name"], p["index"]) for p in mine["phases"]]
    assert [p["name"] for p in phases] == ["epoch", "eval"] * 3
    for stored, seen in zip(phases, mine["phases"]):
        unit = "samples" if seen["name"] == "epoch" else "eval_samples"
        assert stored["work"] == {unit: seen["samples"]}  # every batch counted, in its own phase
        assert seen["samples"] == (2 * 4096 if seen["name"] == "epoch" else 1024)
        duration = seen["end"] - seen["start"]
        # The phase's times are the markers' arrival (ms), a few µs after the script's own clock readings.
        assert abs(stored["duration_s"] - duration) < 0.02, (stored["duration_s"], duration)
        assert abs(stored["start_ms"] / 1000 - seen["start"]) < 0.02
        # Constant power: the truth is power × duration. A phase's figure may reach at most one sampling interval
        # past each end (the ticks that bracket it), so no more than 2 intervals of power off, and never less.
        for gpu, watts in POWER_W.items():
            truth = watts * duration
            got = stored["devices"][gpu]
            assert truth * 0.995 - watts * 0.02 <= got <= truth * 1.005 + 2 * INTERVAL_S * watts, (gpu, got, truth)
        assert stored["energy_method"] == "counter" and stored["closed_by_run_end"] is False
        print(f"{seen['name']} [{seen['index']}] {duration:.3f} s script, {stored['duration_s']:.3f} s stored, "
              f"gpu0 {stored['devices']['gpu0']:.2f} J for a truth of {200 * duration:.2f} J")
    assert run.work == {"samples": 3 * 2 * 4096, "eval_samples": 3 * 1024}
    assert run.energy_method == "counter"
    assert abs(run.energy_j - sum(POWER_W.values()) * run.duration_s) <= 0.01 * run.energy_j + 2 * INTERVAL_S * 300

    # describe_model against the real module: its parameters, and FLOPs per sample of its three Linear layers.
    (model,) = store.events(run, kind="model")
    assert model["source"] == "Sequential"
    assert model["detail"]["parameters"] == mine["params"] == (32 * 128 + 128) + (128 * 128 + 128) + (128 * 2 + 2)
    assert model["detail"]["flops"] == 2 * (32 * 128 + 128 * 128 + 128 * 2)

    pytest.importorskip("pandas", reason="python3-pandas is not installed (scripts/setup.sh installs it)")
    frame = store.phases(run).df()
    epochs = frame[frame["name"] == "epoch"]
    assert list(epochs["work.samples"]) == [2 * 4096] * 3
    assert epochs["index"].tolist() == [0, 1, 2]
    per_sample = epochs["energy_per_unit_j.samples"]
    assert ((per_sample - epochs["energy_j"] / epochs["work.samples"]).abs() < 1e-12).all()
