#!/usr/bin/env python3
"""A small real PyTorch training loop on the CPU, recorded under `wattscope run` to make the CPU traces in
tests/fixtures/traces/ (issue 36): epochs of training, an evaluation pass without gradients, then a checkpoint
written to disk and a short pause (what a real loop does between epochs), so the traces have the periodic shape
forecasters must learn.

    cpu_train.py mlp|conv|leak EPOCHS

mlp: a 3-layer perceptron on random data; conv: a small conv net (more compute per sample, longer epochs);
leak: the mlp keeping every step's output (resident memory grows each epoch, as a leak does).
One thread, so the run's CPU share shows the loop's phases rather than the scheduler's.
"""
import os
import sys
import tempfile
import time

import torch


def model_for(kind):
    if kind == "conv":
        return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                   torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
                                   torch.nn.Flatten(), torch.nn.Linear(512, 10))
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 10))


def batch(kind, n):
    x = torch.randn(n, 3, 32, 32) if kind == "conv" else torch.randn(n, 256)
    return x, torch.randint(0, 10, (n,))


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("mlp", "conv", "leak"):
        sys.exit("usage: cpu_train.py mlp|conv|leak EPOCHS")
    kind, epochs = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    torch.manual_seed(36)
    model = model_for(kind)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    train_steps, eval_steps, bs = (12, 4, 32) if kind == "conv" else (60, 20, 128)
    kept = []
    with tempfile.TemporaryDirectory() as tmp:
        for epoch in range(epochs):
            model.train()
            for _ in range(train_steps):
                x, y = batch(kind, bs)
                out = model(x)
                loss = loss_fn(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if kind == "leak":
                    kept.append(out.detach().clone().repeat(8, 1))
            model.eval()
            with torch.no_grad():
                correct = 0
                for _ in range(eval_steps):
                    x, y = batch(kind, bs)
                    correct += (model(x).argmax(1) == y).sum().item()
            torch.save(model.state_dict(), os.path.join(tmp, "ckpt.pt"))
            print(f"epoch {epoch} loss {loss.item():.3f} eval acc {correct / (eval_steps * bs):.3f}", flush=True)
            time.sleep(1.5)


if __name__ == "__main__":
    main()
