#!/usr/bin/env python3
"""What each NVML call wattscope makes costs on this machine's GPU 0: wall time and CPU time (of the whole process,
so threads NVML runs for the call count too), the median over REPS calls each. Run on a real GPU to set the fake
NVML's `call_cost_us` (bench/overhead.py --driver-like) from measurements rather than guesses.

    nvml_call_cost.py [REPS]      (default 200; library from WATTSCOPE_NVML_LIBRARY, else libnvidia-ml.so.1)
"""
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pymon import Field, MemV2, Util, open_nvml  # noqa: E402  (NVML's structs as bench/pymon.py declares them)


class ProcInfo(ctypes.Structure):  # nvmlProcessInfo_v2/v3
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


class UtilSample(ctypes.Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class UtilInfoV1(ctypes.Structure):  # nvmlProcessUtilizationInfo_v1_t
    _fields_ = [("timeStamp", ctypes.c_ulonglong), ("pid", ctypes.c_uint), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint),
                ("jpgUtil", ctypes.c_uint), ("ofaUtil", ctypes.c_uint)]


class UtilInfos(ctypes.Structure):  # nvmlProcessesUtilizationInfo_v1_t
    _fields_ = [("version", ctypes.c_uint), ("processSamplesCount", ctypes.c_uint),
                ("lastSeenTimeStamp", ctypes.c_ulonglong), ("procUtilArray", ctypes.POINTER(UtilInfoV1))]


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    nvml, handles = open_nvml("nvml_call_cost")
    if not handles:
        sys.exit("nvml_call_cost: NVML found no GPU")
    h = handles[0]
    u, period, ull, si = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong(), ctypes.c_int()
    fields = (Field * 3)()
    util, mem = Util(), MemV2()
    procs = (ProcInfo * 64)()
    samples, info_array = (UtilSample * 64)(), (UtilInfoV1 * 64)()

    def util_infos():
        info = UtilInfos(ctypes.sizeof(UtilInfos) | (1 << 24), 64, 0, info_array)
        return nvml.nvmlDeviceGetProcessesUtilizationInfo(h, ctypes.byref(info))
    calls = [
        ("nvmlDeviceGetFieldValues (3 fields)", lambda: nvml.nvmlDeviceGetFieldValues(h, 3, fields)),
        ("nvmlDeviceGetTotalEnergyConsumption", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(ull))),
        ("nvmlDeviceGetPowerUsage", lambda: nvml.nvmlDeviceGetPowerUsage(h, ctypes.byref(u))),
        ("nvmlDeviceGetUtilizationRates", lambda: nvml.nvmlDeviceGetUtilizationRates(h, ctypes.byref(util))),
        ("nvmlDeviceGetMemoryInfo_v2", lambda: nvml.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(mem))),
        ("nvmlDeviceGetTemperature", lambda: nvml.nvmlDeviceGetTemperature(h, 0, ctypes.byref(u))),
        ("nvmlDeviceGetClockInfo", lambda: nvml.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(u))),
        ("nvmlDeviceGetCurrPcieLinkWidth", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(h, ctypes.byref(u))),
        ("nvmlDeviceGetFanSpeed", lambda: nvml.nvmlDeviceGetFanSpeed(h, ctypes.byref(u))),
        ("nvmlDeviceGetPerformanceState", lambda: nvml.nvmlDeviceGetPerformanceState(h, ctypes.byref(si))),
        ("nvmlDeviceGetEnforcedPowerLimit", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h, ctypes.byref(u))),
        ("nvmlDeviceGetCurrentClocksEventReasons",
         lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(h, ctypes.byref(ull))),
        ("nvmlDeviceGetEncoderUtilization",
         lambda: nvml.nvmlDeviceGetEncoderUtilization(h, ctypes.byref(u), ctypes.byref(period))),
        ("nvmlDeviceGetComputeRunningProcesses_v3",
         lambda: nvml.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(ctypes.c_uint(64)), procs)),
        # The process scan's calls (every 5 s per GPU): the lists and the per-process utilisation samples.
        ("nvmlDeviceGetGraphicsRunningProcesses_v3",
         lambda: nvml.nvmlDeviceGetGraphicsRunningProcesses_v3(h, ctypes.byref(ctypes.c_uint(64)), procs)),
        ("nvmlDeviceGetProcessesUtilizationInfo", lambda: util_infos()),
        ("nvmlDeviceGetProcessUtilization",
         lambda: nvml.nvmlDeviceGetProcessUtilization(h, samples, ctypes.byref(ctypes.c_uint(64)),
                                                      ctypes.c_ulonglong(0))),
        ("nvmlDeviceGetTotalEccErrors", lambda: nvml.nvmlDeviceGetTotalEccErrors(h, 0, 1, ctypes.byref(ull))),
        ("nvmlDeviceGetPcieThroughput", lambda: nvml.nvmlDeviceGetPcieThroughput(h, 0, ctypes.byref(u))),
        # The energy counter as a field (NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION), alone and with the three fields
        # wattscope reads every tick: is it the same cost as nvmlDeviceGetTotalEnergyConsumption?
        ("nvmlDeviceGetFieldValues (energy, 83)", lambda: nvml.nvmlDeviceGetFieldValues(h, 1, energy_field)),
        ("nvmlDeviceGetFieldValues (4 with energy)", lambda: nvml.nvmlDeviceGetFieldValues(h, 4, four)),
    ]
    energy_field = (Field * 1)()
    energy_field[0].fieldId = 83
    four = (Field * 4)()
    for i, f in enumerate((186, 185, 82, 83)):
        four[i].fieldId = f
    fields[0].fieldId, fields[1].fieldId, fields[2].fieldId = 186, 185, 82
    mem.version = ctypes.sizeof(MemV2) | (2 << 24)
    print(f"{'call':>42} {'ret':>4} {'wall us':>9} {'cpu us':>8}   (medians of {reps}; PCIe throughput: of 10)")
    for name, call in calls:
        n = 10 if "PcieThroughput" in name else reps
        walls, cpus, ret = [], [], None
        call()
        for _ in range(n):
            c0, w0 = time.process_time_ns(), time.perf_counter_ns()
            ret = call()
            w1, c1 = time.perf_counter_ns(), time.process_time_ns()
            walls.append((w1 - w0) / 1000)
            cpus.append((c1 - c0) / 1000)
        # process_time's resolution is coarse on some kernels: the mean over all calls is the fairer CPU figure.
        print(f"{name:>42} {ret:>4} {statistics.median(walls):9.1f} {statistics.mean(cpus):8.1f}")
    print(f"energy field: return {energy_field[0].nvmlReturn}, value type {energy_field[0].valueType}")
    freshness(nvml, h)
    process_scan(nvml, h)
    # The same while another thread reads PCIe throughput and the energy counter, as wattscope's other threads do:
    # does the driver make one call wait for another, and spend CPU meanwhile?
    import threading
    stop = threading.Event()

    def busy():
        v, e = ctypes.c_uint(), ctypes.c_ulonglong()
        while not stop.is_set():
            nvml.nvmlDeviceGetPcieThroughput(h, 0, ctypes.byref(v))
            nvml.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(e))
    t = threading.Thread(target=busy)
    t.start()
    print("(with another thread reading PCIe throughput and the energy counter all the while)")
    process_scan(nvml, h)
    stop.set()
    t.join()
    nvml.nvmlShutdown()


def freshness(nvml, h, seconds=2.0):
    """How often the energy counter moves, read both ways: the field every 1 ms (value and the driver's timestamp),
    nvmlDeviceGetTotalEnergyConsumption every 50 ms beside it; prints the steps and the two readings' difference."""
    f = (Field * 1)()
    f[0].fieldId = 83
    ull = ctypes.c_ulonglong()
    end = time.perf_counter() + seconds
    last_val, last_ts, steps, stamps, diffs, reads = None, None, [], [], [], 0
    next_direct = 0.0
    while time.perf_counter() < end:
        nvml.nvmlDeviceGetFieldValues(h, 1, f)
        reads += 1
        if f[0].nvmlReturn != 0:
            print(f"energy field: NVML error {f[0].nvmlReturn}")
            return
        val, ts = f[0].value.ull, f[0].timestamp
        if last_val is not None and val != last_val:
            steps.append(val - last_val)
        if last_ts is not None and ts != last_ts:
            stamps.append((ts - last_ts) / 1000)
        last_val, last_ts = val, ts
        now = time.perf_counter()
        if now >= next_direct:
            nvml.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(ull))
            nvml.nvmlDeviceGetFieldValues(h, 1, f)
            diffs.append(int(ull.value) - int(f[0].value.ull))
            next_direct = now + 0.05
        time.sleep(0.001)
    print(f"energy field over {seconds} s ({reads} reads): value changed {len(steps)} times "
          f"(median step {statistics.median(steps) if steps else 0} mJ); its timestamp moved {len(stamps)} times, "
          f"median {statistics.median(stamps) if stamps else 0:.1f} ms apart")
    print(f"direct call minus field read just after it (mJ): median {statistics.median(diffs)}, "
          f"min {min(diffs)}, max {max(diffs)} over {len(diffs)} pairs")


def process_scan(nvml, h, reps=20):
    """The process scan's NVML calls (src/sources/nvml/nvml_processes.cpp): each list asked with no buffer for its
    count (as wattscope did until 2026-11-26), then with room (as it does now); the utilisation samples' count, then
    the samples since the last one seen (the first time: since 0). Wall and CPU of this thread per step, medians of
    REPS scans. On an H100 the samples cost 1.5-2.7 ms, so wattscope asks for them only where a process is listed."""
    steps = {}

    def timed(name, fn):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        r = fn()
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        steps.setdefault(name, []).append(((w1 - w0) / 1000, (c1 - c0) / 1000, r))
        return r

    last_seen = 0
    for rep in range(reps):
        for kind in ("Compute", "Graphics"):
            fn = getattr(nvml, f"nvmlDeviceGet{kind}RunningProcesses_v3")
            n = ctypes.c_uint(0)
            timed(f"{kind} list, count only", lambda: fn(h, ctypes.byref(n), None))
            buf = (ProcInfo * (n.value + 8))()
            m = ctypes.c_uint(n.value + 8)
            timed(f"{kind} list, {n.value} listed", lambda: fn(h, ctypes.byref(m), buf))
        info = UtilInfos(ctypes.sizeof(UtilInfos) | (1 << 24), 0, last_seen, None)
        timed("utilisation info, count only",
              lambda: nvml.nvmlDeviceGetProcessesUtilizationInfo(h, ctypes.byref(info)))
        count = info.processSamplesCount
        arr = (UtilInfoV1 * (count + 8))()
        info = UtilInfos(ctypes.sizeof(UtilInfos) | (1 << 24), count + 8, last_seen, arr)
        timed("utilisation info, samples" if rep else "utilisation info, samples (first: since 0)",
              lambda: nvml.nvmlDeviceGetProcessesUtilizationInfo(h, ctypes.byref(info)))
        for i in range(min(info.processSamplesCount, count + 8)):
            last_seen = max(last_seen, arr[i].timeStamp)
        time.sleep(0.05)
    print(f"\nthe process scan's calls as wattscope makes them ({reps} scans; medians; return codes seen):")
    for name, xs in steps.items():
        wall, cpu = statistics.median(x[0] for x in xs), statistics.median(x[1] for x in xs)
        print(f"{name:>44} {wall:9.1f} us wall {cpu:9.1f} us CPU  max {max(x[0] for x in xs):9.1f} us wall  "
              f"rets {sorted(set(x[2] for x in xs))}")


if __name__ == "__main__":
    main()
