"""The Python package against the real binary (issues 29 and 34): runs under `wattscope run` with the fake NVML
library standing in for the GPUs, each in a temporary directory of its own."""

import json
import os
import subprocess
import sys

import pytest

SOURCE_DIR = os.environ.get("WATTSCOPE_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE_DIR, "python"))
BINARY = os.path.abspath(os.environ["WATTSCOPE_BINARY"])
FAKE_NVML = os.path.abspath(os.environ["WATTSCOPE_FAKE_NVML"])
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


class World:
    """A temporary directory with a scenario of two GPUs whose counters rise by known steps, and the environment a
    run there needs."""

    def __init__(self, path, constant_w=None):
        self.path = str(path)
        devices = []
        for i, (power_mw, start_mj, step_mj) in enumerate(((300000, 1000000, 15000), (150000, 5000000, 7500))):
            energy = {"linear": [start_mj, step_mj]}
            if constant_w is not None:  # a counter that rises at exactly constant_w watts of wall time
                power_mw = constant_w[i] * 1000
                energy = {"sine_integral": {"base": power_mw, "amp": 0, "period_s": 1}}
            devices.append({"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-py-{i}",
                            "pci_bus_id": f"00000000:{18 + i}:00.0",
                            "metrics": {"power_mw": power_mw, "energy_mj": energy,
                                        "util_gpu": 60, "mem_used_bytes": 1 << 30, "mem_total_bytes": 80 << 30}})
        self.scenario = os.path.join(self.path, "scenario.json")
        with open(self.scenario, "w") as f:
            json.dump({"devices": devices}, f)
        os.mkdir(os.path.join(self.path, "sys"))  # no RAPL or hwmon of the machine running the tests
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("CUDA_VISIBLE_DEVICES", "WATTSCOPE_SOCKET", "LOCAL_RANK", "SLURM_LOCALID",
                                 "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "WATTSCOPE_ALL_RANKS")}
        self.env.update({"WATTSCOPE_NVML_LIBRARY": FAKE_NVML, "WATTSCOPE_FAKE_NVML_SCENARIO": self.scenario,
                         "PYTHONPATH": os.path.join(SOURCE_DIR, "python"), "PYTHONDONTWRITEBYTECODE": "1"})

    def file(self, name, text):
        p = os.path.join(self.path, name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def wattscope(self, *args, check=True, timeout=240):
        r = subprocess.run([BINARY, *args], cwd=self.path, env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        if check:
            assert r.returncode == 0, f"wattscope {' '.join(args)}: {r.returncode}\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
        return r

    def run(self, script, *flags, task="py"):
        """`wattscope run` of a Python program (the text of `script`) with the helper on its path."""
        prog = self.file(f"{task}.py", script)
        return self.wattscope("run", "--interval", "50ms", "--task", task, "--sysfs-root",
                              os.path.join(self.path, "sys"), *flags, "--", PYTHON, prog)

    def show(self, run_id, *store):
        return json.loads(self.wattscope("show", run_id, "--json", *store).stdout)


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


@pytest.fixture
def steady_world(tmp_path):
    """Two GPUs at a constant 200 W and 100 W: a phase's true energy is the power times its length."""
    return World(tmp_path, constant_w=(200, 100))
