#!/usr/bin/env python3
"""Real training loops recorded on a lent GPU for the forecasting and anomaly work (issue 36): bench/real_traces.sh
runs each under `wattscope run --interval 100ms` and keeps the stored series as tests/fixtures/traces/*.csv.

    real_train.py KIND SECONDS      KIND: lm | leak | cnn   (needs PyTorch with CUDA)

lm    a small decoder-only transformer (bf16 autocast, AdamW) on random tokens: epochs of ~12 s, each followed by an
      eval phase and a 1 s host-side pause (a checkpoint's write), so the series is periodic as real training is.
leak  the same loop with a leak practitioners hit: every step keeps a slice of its logits on the GPU "for the
      epoch-end metrics" (65 MB a step), so GPU memory grows step by step across epochs (capped at 70 GiB so the
      recording ends cleanly; the growth up to there is the trace's point).
cnn   a convolutional net on random images whose batch size changes every epoch (64, 128, 256): level changes in
      power and memory at epoch boundaries.
Epochs, evals and pauses are sent as wattscope phases, steps as work (`samples`), so the traces carry their phases.
"""
import sys
import time

import torch
import torch.nn as nn

import wattscope


def lm_model(dev):
    layer = nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True,
                                       norm_first=True)
    body = nn.TransformerEncoder(layer, num_layers=8)
    emb = nn.Embedding(32000, 1024)
    head = nn.Linear(1024, 32000)
    return nn.ModuleDict({"emb": emb, "body": body, "head": head}).to(dev)


def lm_step(m, x, mask):
    h = m["body"](m["emb"](x), mask=mask, is_causal=True)
    logits = m["head"](h)
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 32000).float(), x[:, 1:].reshape(-1)), logits


def run_lm(secs, leak):
    dev = torch.device("cuda")
    m = lm_model(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    seq, batch = 512, 16
    mask = nn.Transformer.generate_square_subsequent_mask(seq, device=dev)
    kept = []
    end = time.monotonic() + secs
    epoch = 0
    while time.monotonic() < end:
        with wattscope.phase("epoch"):
            with wattscope.phase("train"):
                t_epoch = time.monotonic() + 12
                while time.monotonic() < min(t_epoch, end):
                    x = torch.randint(0, 32000, (batch, seq), device=dev)
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss, logits = lm_step(m, x, mask)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    if leak and torch.cuda.memory_allocated() < 70 * 2**30:
                        kept.append(logits.detach()[:2].clone())
                    torch.cuda.synchronize()
                    wattscope.work(batch, unit="samples")
            if time.monotonic() >= end:
                break
            with wattscope.phase("eval"), torch.no_grad():
                t_eval = time.monotonic() + 2.5
                while time.monotonic() < min(t_eval, end):
                    x = torch.randint(0, 32000, (batch * 2, seq), device=dev)
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        lm_step(m, x, mask)
                    torch.cuda.synchronize()
            with wattscope.phase("checkpoint"):
                time.sleep(1.0)
        epoch += 1
        print(f"epoch {epoch}: memory {torch.cuda.memory_allocated() / 2**30:.1f} GiB", flush=True)


def run_cnn(secs):
    dev = torch.device("cuda")
    layers = []
    c = 3
    for w in (64, 128, 256, 512):
        layers += [nn.Conv2d(c, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.Conv2d(w, w, 3, padding=1),
                   nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2)]
        c = w
    m = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)).to(dev)
    m = m.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    end = time.monotonic() + secs
    for epoch, batch in enumerate([64, 128, 256] * 100):
        if time.monotonic() >= end:
            break
        with wattscope.phase("epoch"):
            t_epoch = time.monotonic() + 10
            while time.monotonic() < min(t_epoch, end):
                x = torch.randn(batch, 3, 128, 128, device=dev).to(memory_format=torch.channels_last)
                y = torch.randint(0, 1000, (batch,), device=dev)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = nn.functional.cross_entropy(m(x).float(), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                torch.cuda.synchronize()
                wattscope.work(batch, unit="samples")
        torch.cuda.empty_cache()
        print(f"epoch {epoch}: batch {batch}", flush=True)


def main():
    kind, secs = sys.argv[1], float(sys.argv[2])
    with wattscope.phase("warmup"):
        time.sleep(2.0)  # the idle GPU before the job starts, as a real job's data loading
    if kind == "lm":
        run_lm(secs, leak=False)
    elif kind == "leak":
        run_lm(secs, leak=True)
    elif kind == "cnn":
        run_cnn(secs)
    else:
        sys.exit(f"unknown kind {kind!r}: lm, leak or cnn")
    torch.cuda.synchronize()
    time.sleep(2.0)


if __name__ == "__main__":
    main()
