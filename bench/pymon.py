#!/usr/bin/python3
"""A GPU monitor in the style of the pynvml-based Python tools, for bench/overhead.py to compare against: NVML
through ctypes (the calls `wattscope record` and bench/nvml_floor.c make), host CPU and memory through psutil, one
CSV row per GPU per tick.

    pymon.py INTERVAL_MS DURATION_S OUT.csv      (library from WATTSCOPE_NVML_LIBRARY, else libnvidia-ml.so.1)
"""
import ctypes
import os
import signal
import sys
import time



class Util(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class MemV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Value(ctypes.Union):
    _fields_ = [("d", ctypes.c_double), ("ui", ctypes.c_uint), ("ul", ctypes.c_ulong), ("ull", ctypes.c_ulonglong),
                ("sll", ctypes.c_longlong), ("si", ctypes.c_int), ("us", ctypes.c_ushort)]


class Field(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", Value)]


def open_nvml(prog):
    """NVML through ctypes (WATTSCOPE_NVML_LIBRARY, else libnvidia-ml.so.1), initialised, and a handle per GPU; exits
    naming `prog` where it does not initialise. bench/nvml_call_cost.py and bench/nvml_reference.py open it so too."""
    lib = os.environ.get("WATTSCOPE_NVML_LIBRARY", "libnvidia-ml.so.1")
    try:
        nvml = ctypes.CDLL(lib)
    except OSError as e:
        sys.exit(f"{prog}: cannot load {lib} ({e}); install the NVIDIA driver or set WATTSCOPE_NVML_LIBRARY")
    if nvml.nvmlInit_v2() != 0:
        sys.exit(f"{prog}: NVML did not initialise (nvmlInit_v2)")
    n = ctypes.c_uint()
    nvml.nvmlDeviceGetCount_v2(ctypes.byref(n))
    handles = []
    for i in range(n.value):
        h = ctypes.c_void_p()
        nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
        handles.append(h)
    return nvml, handles


def main():
    import psutil  # here, so that bench/nvml_call_cost.py can take the structs above without it
    interval_s = int(sys.argv[1]) / 1000
    duration_s = float(sys.argv[2])
    out = open(sys.argv[3], "w")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    nvml, handles = open_nvml("pymon")
    for h in handles:
        w = ctypes.c_uint()
        nvml.nvmlDeviceGetMaxPcieLinkWidth(h, ctypes.byref(w))
    off = [set() for _ in handles]
    out.write("ts,gpu,power_w,power_avg_w,energy_mj,util_gpu,util_mem,mem_used,temp_gpu,clock_sm,cpu_pct,host_mem\n")
    psutil.cpu_percent(percpu=True)
    ticks = int(duration_s / interval_s)
    per_second = max(1, int(round(1 / interval_s)))
    start = time.monotonic()
    for tick in range(ticks + 1):
        if stop:
            break
        cpu = psutil.cpu_percent(percpu=True)
        host_mem = psutil.virtual_memory().used
        now = time.time()
        for i, h in enumerate(handles):
            u, period, ull, si = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong(), ctypes.c_int()
            fields = (Field * 3)()
            fields[0].fieldId, fields[1].fieldId, fields[2].fieldId = 186, 185, 82
            util, mem = Util(), MemV2()
            mem.version = ctypes.sizeof(MemV2) | (2 << 24)
            calls = [
                ("fields", lambda: nvml.nvmlDeviceGetFieldValues(h, 3, fields)),
                ("energy", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(ull))),
                ("util", lambda: nvml.nvmlDeviceGetUtilizationRates(h, ctypes.byref(util))),
                ("mem", lambda: nvml.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(mem))),
                ("temp", lambda: nvml.nvmlDeviceGetTemperature(h, 0, ctypes.byref(u))),
                ("clock_sm", lambda: nvml.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(u))),
                ("clock_gfx", lambda: nvml.nvmlDeviceGetClockInfo(h, 0, ctypes.byref(u))),
                ("clock_mem", lambda: nvml.nvmlDeviceGetClockInfo(h, 2, ctypes.byref(u))),
                ("width", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(h, ctypes.byref(u))),
                ("fan", lambda: nvml.nvmlDeviceGetFanSpeed(h, ctypes.byref(u))),
                ("pstate", lambda: nvml.nvmlDeviceGetPerformanceState(h, ctypes.byref(si))),
                ("limit", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h, ctypes.byref(u))),
                ("events", lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(h, ctypes.byref(ull))),
                ("enc", lambda: nvml.nvmlDeviceGetEncoderUtilization(h, ctypes.byref(u), ctypes.byref(period))),
                ("dec", lambda: nvml.nvmlDeviceGetDecoderUtilization(h, ctypes.byref(u), ctypes.byref(period))),
            ]
            for name, call in calls:
                if name not in off[i] and call() == 3:  # NVML_ERROR_NOT_SUPPORTED: not asked again
                    off[i].add(name)
            if tick % per_second == 0:
                nvml.nvmlDeviceGetPcieThroughput(h, 0, ctypes.byref(u))
                nvml.nvmlDeviceGetPcieThroughput(h, 1, ctypes.byref(u))
            out.write(f"{now:.3f},{i},{fields[0].value.ui / 1000},{fields[1].value.ui / 1000},{ull.value},"
                      f"{util.gpu},{util.memory},{mem.used},{u.value},{u.value},{sum(cpu) / len(cpu):.1f},"
                      f"{host_mem}\n")
        out.flush()
        delay = start + (tick + 1) * interval_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    nvml.nvmlShutdown()


if __name__ == "__main__":
    main()
