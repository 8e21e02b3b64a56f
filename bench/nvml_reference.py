#!/usr/bin/env python3
"""An independent reading of the real GPUs for bench/real_gpu.sh to check wattscope against: NVML through ctypes,
none of wattscope's code, one CSV row per GPU every INTERVAL_MS until SIGTERM or SIGINT.

    nvml_reference.py INTERVAL_MS OUT.csv      (library from WATTSCOPE_NVML_LIBRARY, else libnvidia-ml.so.1)

Columns: t (Unix seconds, float), gpu, energy_mj (nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded),
power_mw (nvmlDeviceGetPowerUsage), util_gpu, mem_used (bytes, nvmlDeviceGetMemoryInfo), temp_c, clock_sm_mhz.
A call that fails leaves its column empty.
"""
import ctypes
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pymon import Util, open_nvml  # noqa: E402  (bench code, none of wattscope's)


class Mem(ctypes.Structure):  # nvmlMemory_t, v1: its used includes what v2 reports as reserved (nvidia-smi: not)
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: nvml_reference.py INTERVAL_MS OUT.csv")
    interval = int(sys.argv[1]) / 1000
    nvml, devs = open_nvml("nvml_reference")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    with open(sys.argv[2], "w") as out:
        out.write("t,gpu,energy_mj,power_mw,util_gpu,mem_used,temp_c,clock_sm_mhz\n")
        nxt = time.monotonic()
        while not stop:
            for i, h in enumerate(devs):
                t = time.time()
                e, p, temp, clk = ctypes.c_ulonglong(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
                u, m = Util(), Mem()
                row = [f"{t:.3f}", str(i)]
                row.append(str(e.value) if nvml.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(e)) == 0 else "")
                row.append(str(p.value) if nvml.nvmlDeviceGetPowerUsage(h, ctypes.byref(p)) == 0 else "")
                row.append(str(u.gpu) if nvml.nvmlDeviceGetUtilizationRates(h, ctypes.byref(u)) == 0 else "")
                row.append(str(m.used) if nvml.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m)) == 0 else "")
                row.append(str(temp.value) if nvml.nvmlDeviceGetTemperature(h, 0, ctypes.byref(temp)) == 0 else "")
                row.append(str(clk.value) if nvml.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(clk)) == 0 else "")
                out.write(",".join(row) + "\n")
            out.flush()
            nxt += interval
            time.sleep(max(0.0, nxt - time.monotonic()))
    nvml.nvmlShutdown()


if __name__ == "__main__":
    main()
