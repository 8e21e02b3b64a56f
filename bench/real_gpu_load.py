#!/usr/bin/env python3
"""The workload bench/real_gpu.sh records on a real NVIDIA GPU: four phases whose power differs clearly, sent to
wattscope through its Python markers (python/wattscope), so that each phase's energy can be checked against an
independent reading of the GPU's energy counter (bench/nvml_reference.py).

    real_gpu_load.py [SECONDS_PER_PHASE]     (default 6; needs PyTorch with CUDA)

Phases: `idle` (nothing on the GPU, memory allocated), `matmul` (bf16 8192^3 products: the GPU near its power
limit), `copy` (device-to-device copies: memory-bound), `idle-end`. Work is counted in matmuls and copies.
"""
import sys
import time

import torch

import wattscope


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
    dev = torch.device("cuda")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    src = torch.randn(1 << 30, device=dev, dtype=torch.float32)  # 4 GiB
    dst = torch.empty_like(src)
    torch.cuda.synchronize()

    with wattscope.phase("idle"):
        time.sleep(secs)

    with wattscope.phase("matmul"):
        end = time.monotonic() + secs
        n = 0
        while time.monotonic() < end:
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()
            n += 20
            wattscope.work(20, unit="matmuls")
    print(f"matmul: {n} products of 8192^3 in {secs:.0f} s: {2 * 8192**3 * n / secs / 1e12:.0f} TFLOP/s")

    with wattscope.phase("copy"):
        end = time.monotonic() + secs
        n = 0
        while time.monotonic() < end:
            for _ in range(10):
                dst.copy_(src)
            torch.cuda.synchronize()
            n += 10
            wattscope.work(10, unit="copies")
    print(f"copy: {n} copies of 4 GiB in {secs:.0f} s: {2 * 4 * n / secs:.0f} GiB/s read+written")

    del a, b, src, dst
    torch.cuda.empty_cache()
    with wattscope.phase("idle-end"):
        time.sleep(secs)


if __name__ == "__main__":
    main()
