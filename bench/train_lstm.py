#!/usr/bin/env python3
"""Trains the LSTM forecaster that wattscope ships (src/forecast/lstm.cpp, issue 36) and writes its weights as C++
(src/forecast/lstm_weights.inc). Offline, with Debian's PyTorch (python3-torch), on the TRAINING traces only:

    /usr/bin/python3 bench/train_lstm.py [TRACES_DIR] [OUT.inc]

Training traces: the ones named in TRAIN below (the rest of tests/fixtures/traces/ is held out for
bench/forecast_eval), each device's utilisation and power, plus synthetic series (sines of random period, on/off
epochs, ramps, level steps, noise) so that the weights see periodic shapes at many periods, not only those two runs'.
Seeded: the same inputs give the same weights.

The features must be exactly those of lstm.cpp's observe(): per observed value y (NaN skipped), a running mean m and
spread s (exponential, ALPHA), scale = max(s, 1e-3 |m| + 1e-9), inputs clip((y - m)/scale) and clip((y - y_prev)/scale);
outputs: (y_{t+h} - y_t)/scale for h = 1..HORIZONS.
"""
import csv
import math
import os
import sys

import numpy as np
import torch

TRAIN = ["h100_lm.csv", "cpu_mlp.csv"]  # keep in step with kTrainingTraces in src/forecast/evaluate.cpp
HIDDEN, HORIZONS, ALPHA, CLIP, INPUTS = 24, 60, 1.0 / 32, 10.0, 2
METRICS = [("util", ["util_gpu_pct", "util_pct"]), ("power", ["power_w"])]


def load_series(path):
    """One series per device and metric: the values in time order, missing cells dropped (as observe() skips NaN)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    devcol = "gpu" if rows and "gpu" in rows[0] else "device"
    for dev in sorted({r[devcol] for r in rows}):
        rs = [r for r in rows if r[devcol] == dev]
        for _, names in METRICS:
            col = next((c for c in names if c in rs[0]), None)
            if col is None:
                continue
            ys = [float(r[col]) for r in rs if r[col] not in ("", "nan", "NaN")]
            if len(ys) > HORIZONS * 2:
                out.append(np.array(ys))
    return out


def synthetic(rng, n=800):
    t = np.arange(n)
    kind = rng.integers(0, 5)
    base, amp = rng.uniform(0, 300), rng.uniform(1, 200)
    if kind == 0:  # sine of random period
        y = base + amp * np.sin(2 * math.pi * t / rng.uniform(6, 200) + rng.uniform(0, 6.3))
    elif kind == 1:  # on/off epochs with a duty cycle
        period, duty = rng.integers(10, 200), rng.uniform(0.3, 0.9)
        y = base + amp * ((t % period) < duty * period)
    elif kind == 2:  # ramp (a leak)
        y = base + amp * t / n
    elif kind == 3:  # level steps at random times
        y = base + amp * np.cumsum(rng.random(n) < 0.01) % 3
    else:
        y = np.full(n, base)
    return y + rng.normal(0, rng.uniform(0, 0.1) * amp, n)


def features(ys):
    n = len(ys)
    x, target, mask = np.zeros((n, INPUTS)), np.zeros((n, HORIZONS)), np.zeros((n, HORIZONS))
    m = s = 0.0
    prev = ys[0]
    for t, y in enumerate(ys):
        if t == 0:
            m, s = y, 0.0
        else:
            m += ALPHA * (y - m)
            s += ALPHA * (abs(y - m) - s)
        scale = max(s, 1e-3 * abs(m) + 1e-9)
        x[t] = [np.clip((y - m) / scale, -CLIP, CLIP), np.clip((y - prev) / scale, -CLIP, CLIP)]
        prev = y
        k = min(HORIZONS, n - 1 - t)
        target[t, :k] = np.clip((ys[t + 1:t + 1 + k] - y) / scale, -4 * CLIP, 4 * CLIP)
        mask[t, :k] = 1
    return x, target, mask


def scale_of(ys):
    """The running scale after the last value of ys, as features() and lstm.cpp compute it."""
    m, s = ys[0], 0.0
    for y in ys[1:]:
        m += ALPHA * (y - m)
        s += ALPHA * (abs(y - m) - s)
    return max(s, 1e-3 * abs(m) + 1e-9)


def check_series():
    """A fixed input for the C++ reproduction test: a sine of period 20 with a saw on it, 120 steps."""
    t = np.arange(120)
    return 50 + 30 * np.sin(2 * math.pi * t / 20) + 5 * (t % 3)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(INPUTS, HIDDEN, batch_first=True)
        self.head = torch.nn.Linear(HIDDEN, HORIZONS)

    def forward(self, x):
        h, _ = self.lstm(x)
        return self.head(h)


def c_array(name, t):
    vals = ", ".join(f"{v:.8g}f" for v in t.detach().numpy().ravel())
    return f"alignas(32) constexpr float {name}[] = {{{vals}}};\n"


def main():
    traces = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/traces"
    out = sys.argv[2] if len(sys.argv) > 2 else "src/forecast/lstm_weights.inc"
    torch.manual_seed(36)
    torch.set_num_threads(1)
    rng = np.random.default_rng(36)
    series, used = [], []
    for name in TRAIN:
        p = os.path.join(traces, name)
        if os.path.exists(p):
            series += load_series(p)
            used.append(name)
        else:
            print(f"train_lstm: {p} missing, not used", file=sys.stderr)
    n_real = len(series)
    series += [synthetic(rng) for _ in range(int(os.environ.get("TRAIN_LSTM_SYNTHETIC", "64")))]
    L = max(len(s) for s in series)
    X, Y, M = (np.zeros((len(series), L, d)) for d in (INPUTS, HORIZONS, HORIZONS))
    for i, s in enumerate(series):
        x, y, m = features(s)
        X[i, :len(s)], Y[i, :len(s)], M[i, :len(s)] = x, y, m
    # Real series weigh as much as all the synthetic ones together: they are what the model is for.
    w = np.where(np.arange(len(series)) < n_real, (len(series) - n_real) / max(n_real, 1), 1.0)
    X, Y, M = (torch.tensor(a, dtype=torch.float32) for a in (X, Y, M))
    W = torch.tensor(w, dtype=torch.float32)[:, None, None]
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    epochs = int(os.environ.get("TRAIN_LSTM_EPOCHS", "400"))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs, eta_min=2e-4)
    for epoch in range(epochs):
        opt.zero_grad()
        loss = ((net(X) - Y).abs() * M * W).sum() / (M * W).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        if epoch % 25 == 0 or epoch == epochs - 1:
            print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
    # The check the C++ inference is held to (tests/unit/test_forecast_models.cpp, LstmReproducesTorch): a series
    # through this very network, its forecast at every horizon, written next to the weights.
    check_in = check_series()
    xc, _, _ = features(check_in)
    with torch.no_grad():
        d = net(torch.tensor(xc[None], dtype=torch.float32))[0, -1].double().numpy()
    check_out = check_in[-1] + scale_of(check_in) * d
    lstm = net.lstm
    with open(out, "w") as f:
        f.write("// Generated by bench/train_lstm.py (issue 36): do not edit; run it again.\n")
        f.write(f"// Trained on {', '.join(used)} and {len(series) - n_real} synthetic series; "
                f"{epochs} epochs, final L1 loss {loss.item():.4f} (scaled units).\n")
        f.write(f"constexpr int kLstmHidden = {HIDDEN};\nconstexpr int kLstmHorizons = {HORIZONS};\n")
        f.write(f"constexpr int kLstmInputs = {INPUTS};\nconstexpr double kLstmAlpha = {ALPHA!r};\n")
        f.write(f"constexpr double kLstmClip = {CLIP!r};\n")
        f.write(c_array("kLstmWih", lstm.weight_ih_l0))
        f.write(c_array("kLstmWhh", lstm.weight_hh_l0))
        f.write(c_array("kLstmBias", lstm.bias_ih_l0 + lstm.bias_hh_l0))
        f.write(c_array("kLstmHeadW", net.head.weight))
        f.write(c_array("kLstmHeadB", net.head.bias))
        f.write("constexpr double kLstmCheckIn[] = {" + ", ".join(f"{v!r}" for v in check_in) + "};\n")
        f.write("constexpr double kLstmCheckOut[] = {" + ", ".join(f"{v!r}" for v in check_out) + "};\n")
    print(f"train_lstm: wrote {out}")


if __name__ == "__main__":
    main()
