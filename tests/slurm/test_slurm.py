"""Slurm jobs recorded by the prolog and epilog (issue 18), against a REAL single-node Slurm from Debian (slurm-wlm,
munge): the test starts munged with its own key, slurmctld and slurmd with a private slurm.conf (free ports, spool and
state in its temporary directory, Prolog/Epilog = deploy/slurm's scripts running the built wattscope), then submits
jobs with sbatch and reads their runs back with `wattscope list --tag` / `show --tag`.

In this VM (and CI's containers) slurmd cannot own a cgroup tree, so the cluster runs ProctrackType=proctrack/linuxproc
and TaskPlugin=task/none: the job's processes are found by SLURM_JOB_ID in their environment (the cgroup path is
covered by the unit tests' fixtures). GPUs: two gres GPUs backed by device nodes the test makes in its own directory,
and the fake NVML library (two GPUs) through WATTSCOPE_NVML_LIBRARY. CPU energy is the --cpu-tdp estimate."""

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time

import pytest

BINARY = os.path.abspath(os.environ["WATTSCOPE_BINARY"])
FAKE_NVML = os.path.abspath(os.environ["WATTSCOPE_FAKE_NVML"])
SOURCE_DIR = os.path.abspath(os.environ["WATTSCOPE_SOURCE_DIR"])
GIB = 1 << 30



def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, timeout=30.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Cluster:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []
        self.env = dict(os.environ, SLURM_CONF=os.path.join(tmp, "slurm.conf"))
        self.env.pop("SLURM_JOB_ID", None)  # a CI runner inside a Slurm job must not leak its job into ours

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def start(self):
        for d in ("munge", "state", "spool", "log", "dev", "jobs", "wattscope"):
            os.makedirs(self.path(d), mode=0o700)
        with open(self.path("munge", "key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(self.path("munge", "key"), 0o600)
        sock = self.path("munge", "sock")
        self.spawn(["munged", "-F", "-f", f"--socket={sock}", f"--key-file={self.path('munge', 'key')}",
                    f"--pid-file={self.path('munge', 'pid')}", f"--log-file={self.path('munge', 'log')}",
                    f"--seed-file={self.path('munge', 'seed')}"], "munged")
        wait_for("munged's socket", lambda: os.path.exists(sock))
        # gres GPUs need character devices: two like /dev/null, in the test's own directory.
        for i in range(2):
            os.mknod(self.path("dev", f"nvidia{i}"), 0o600 | 0o020000, os.makedev(1, 3))
        with open(self.path("gres.conf"), "w") as f:
            f.write(f"NodeName=wsnode Name=gpu File={self.path('dev')}/nvidia[0-1]\n")
        # The wrappers slurm.conf names: the deploy scripts, told where this build and its configuration are. The
        # recorder is handed the WATTSCOPE_* variables of its prolog (the fake NVML's scenario).
        for kind in ("prolog", "epilog"):
            with open(self.path(f"{kind}.sh"), "w") as f:
                f.write("#!/bin/sh\n"
                        f"export WATTSCOPE_BIN='{BINARY}' WATTSCOPE_SLURM_CONFIG='{self.path('wattscope.conf')}'\n"
                        f"export WATTSCOPE_FAKE_NVML_SCENARIO='{self.path('scenario.json')}'\n"
                        # what the hooks say stays out of the machine's syslog (they say it on stderr too)
                        "export WATTSCOPE_SLURM_SYSLOG=0\n"
                        f"exec '{SOURCE_DIR}/deploy/slurm/wattscope-{kind}.sh'\n")
            os.chmod(self.path(f"{kind}.sh"), 0o755)
        self.write_scenario()
        self.configure(f"{self.path('jobs.db')}")
        host = socket.gethostname().split(".")[0]
        conf = f"""ClusterName=wstest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={self.path('state')}
SlurmdSpoolDir={self.path('spool')}
SlurmctldPidFile={self.path('slurmctld.pid')}
SlurmdPidFile={self.path('slurmd.pid')}
SlurmctldLogFile={self.path('log', 'slurmctld.log')}
SlurmdLogFile={self.path('log', 'slurmd.log')}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SchedulerType=sched/builtin
SchedulerParameters=sched_min_interval=100000
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
Prolog={self.path('prolog.sh')}
Epilog={self.path('epilog.sh')}
KillWait=2
NodeName=wsnode NodeAddr=127.0.0.1 CPUs=2 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=wsnode Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.path("slurm.conf"), "w") as f:
            f.write(conf)
        self.spawn(["slurmctld", "-D", "-i", "-f", self.path("slurm.conf")], "slurmctld")
        self.spawn(["slurmd", "-D", "-f", self.path("slurm.conf"), "-N", "wsnode"], "slurmd")
        wait_for("the node to be idle", lambda: self.slurm(["sinfo", "-h", "-o", "%t"], check=False).strip() == "idle",
                 timeout=40, interval=0.3)

    def write_scenario(self):
        devs = [{"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-slurm-{i}", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
                 "metrics": {"power_mw": 200000 + 100000 * i, "util_gpu": 50, "mem_total_bytes": 80 * GIB,
                             "mem_used_bytes": 10 * GIB, "energy_mj": {"linear": [1000000, 50 + 25 * i]}}}
                for i in range(2)]
        with open(self.path("scenario.json"), "w") as f:
            json.dump({"devices": devs}, f)

    def configure(self, db, password=None):
        """The wattscope configuration the prolog reads when a job starts (each job reads it again)."""
        with open(self.path("wattscope.conf"), "w") as f:
            f.write(f"# written by test_slurm.py\nWATTSCOPE_SLURM_DB={db}\n"
                    f"WATTSCOPE_SLURM_STATE_DIR={self.path('wattscope')}\n"
                    "WATTSCOPE_SLURM_RECORD_ARGS=--interval 250ms --cpu-tdp 100\n"
                    f"WATTSCOPE_NVML_LIBRARY={FAKE_NVML}\n"
                    "WATTSCOPE_SLURM_STOP_TIMEOUT=20s\n")
            if password:
                f.write(f"WATTSCOPE_MYSQL_PASSWORD={password}\n")
        os.chmod(self.path("wattscope.conf"), 0o600)

    def spawn(self, argv, name):
        out = open(self.path(f"{name}.out"), "w")
        self.procs.append((name, subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env)))

    def stop(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for name, p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def slurm(self, argv, check=True):
        r = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30)
        if check and r.returncode != 0:
            raise AssertionError(f"{argv}: {r.returncode}\n{r.stdout}{r.stderr}\n{self.logs()}")
        return r.stdout

    def sbatch(self, *args):
        out = self.slurm(["sbatch", "--parsable", "-o", self.path("jobs", "%j.out"), *args])
        return out.strip().split(";")[0]

    def state(self, job):
        out = self.slurm(["scontrol", "-o", "show", "job", job], check=False)
        for word in out.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return ""

    def wait_done(self, job, timeout=40):
        """Until the job has left the queue: its epilog has run (a completing job stays listed as CG until then)."""
        wait_for(f"job {job} to end", lambda: self.state(job) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
                 and not self.slurm(["squeue", "-h", "-j", job], check=False).strip(), timeout=timeout, interval=0.2)

    def logs(self):
        text = ""
        for name in ("wattscope/slurm.log", "log/slurmd.log", "log/slurmctld.log"):
            try:
                with open(self.path(name)) as f:
                    text += f"--- {name} (tail)\n" + "".join(f.readlines()[-30:])
            except OSError:
                pass
        return text


@pytest.fixture(scope="module")
def cluster():
    # Not skipped when something is missing: CI runs as root with scripts/setup.sh's packages, so a gap is a failure.
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "mariadbd"):
        assert shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}"), f"{tool} is missing: run scripts/setup.sh"
    assert os.geteuid() == 0, "slurmd runs the prolog as root: run this test as root (CI does)"
    tmp = tempfile.mkdtemp(prefix="wattscope-slurm-")
    c = Cluster(tmp)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def wattscope(*args, env=None):
    r = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=60, env=env)
    return r


def runs_of(cluster, job, db=None, env=None):
    r = wattscope("list", "--db", db or cluster.path("jobs.db"), "--tag", f"slurm_job_id={job}", "--json", env=env)
    assert r.returncode == 0, r.stderr + cluster.logs()
    return json.loads(r.stdout)


BURN = "python3 -c 'import time\nt=time.time()\nwhile time.time()-t<3: pass'"


def test_a_job_is_recorded_with_its_tags_gpus_processes_and_energy(cluster):
    # A batch step that burns a CPU for 3 s through srun (step 0), on one of the node's two GPUs.
    job = cluster.sbatch("--gres=gpu:1", "--job-name=burn", "--wrap", f"srun {BURN}")
    cluster.wait_done(job)
    runs = runs_of(cluster, job)
    assert len(runs) == 1, cluster.logs()
    run = runs[0]
    tags = run["tags"]
    assert tags["slurm_job_id"] == job
    assert tags["slurm_user"] == "root"
    assert tags["slurm_node"] == "wsnode"
    assert tags["slurm_gpus"] == "0"
    # The batch script and the srun step ran on the node: both steps are named.
    assert tags["slurm_steps"].split(",") == ["0", "batch"], tags
    assert run["task"] == f"slurm-job-{job}"
    assert run["finished"] and run["end"], run
    # Only the job's GPU (Slurm gave it GPU 0 of 2), never the other one.
    assert [g["index"] for g in run["gpus"]] == [0], (run["gpus"], cluster.logs())
    assert run["gpus"][0]["energy_j"] > 0
    assert run["cpu"]["energy_j"] > 0 and run["cpu"]["energy_method"] == "estimated"
    assert run["total_energy_j"] > run["gpus"][0]["energy_j"]
    # Its processes are the job's: the burner (python3, under srun's step), not slurmd nor the recorder itself.
    db = sqlite3.connect(cluster.path("jobs.db"))
    comms = {c for (c,) in db.execute("SELECT comm FROM processes WHERE run_id = ?", (run["run_id"],))}
    db.close()
    assert "python3" in comms, comms
    assert not comms & {"slurmd", "slurmctld", "wattscope", "munged"}, comms
    # Part of the CPU's (estimated) energy is the job's processes', by their CPU time; the rest is the machine's other
    # processes' (on a shared build machine, most of it) and idle. The parts add up to what was measured.
    cpu = run["attribution"]["devices"]["cpu"]
    assert cpu["attributed_j"] > 0, cpu
    assert cpu["attributed_j"] + cpu["other_j"] + cpu["unattributed_j"] == pytest.approx(cpu["measured_j"]), cpu
    # show --tag: the job across its nodes (one here), with the total.
    r = wattscope("show", "--db", cluster.path("jobs.db"), "--tag", f"slurm_job_id={job}")
    assert r.returncode == 0, r.stderr
    assert "1 run tagged slurm_job_id=" + job + " on 1 node" in r.stdout, r.stdout
    assert "wsnode" in r.stdout and "in all" in r.stdout, r.stdout
    r = wattscope("show", "--db", cluster.path("jobs.db"), "--tag", f"slurm_job_id={job}", "--json")
    total = json.loads(r.stdout)
    assert total["nodes"] == ["wsnode"] and total["total_energy_j"] == pytest.approx(run["total_energy_j"])


def test_a_failing_job_and_a_cancelled_one_are_finalised(cluster):
    # Each lives a few seconds: the recorder scans processes once a second (a step shorter than that may be missed).
    failing = cluster.sbatch("--wrap", "sleep 3; exit 1")
    cancelled = cluster.sbatch("--wrap", "sleep 300")
    # The cancelled one is cancelled while it runs, once its recorder has stored its run.
    wait_for("the long job to run", lambda: cluster.state(cancelled) == "RUNNING", timeout=30)
    wait_for("its run", lambda: runs_of(cluster, cancelled), timeout=20)
    time.sleep(2.5)
    cluster.slurm(["scancel", cancelled])
    cluster.wait_done(failing)
    cluster.wait_done(cancelled)
    assert cluster.state(failing) == "FAILED" and cluster.state(cancelled) == "CANCELLED"
    for job in (failing, cancelled):
        runs = runs_of(cluster, job)
        assert len(runs) == 1, cluster.logs()
        assert runs[0]["finished"] and runs[0]["end"], runs[0]
        assert "rebuilt_from_samples" not in runs[0], runs[0]  # finalised by the recorder, not rebuilt
        assert runs[0]["gpus"] == [], runs[0]  # no --gres: none of the node's GPUs is the job's
        assert runs[0]["tags"]["slurm_steps"] == "batch"
    # The epilog said what it did, and left no pid file behind.
    with open(cluster.path("wattscope", "slurm.log")) as f:
        log = f.read()
    assert f"job {cancelled}: recorder" in log and "stopped, run finalised" in log, log
    assert not [n for n in os.listdir(cluster.path("wattscope")) if n.endswith(".pid")]
    # list --tag matches exactly: a job id that is a prefix of another finds nothing of it.
    assert runs_of(cluster, failing[:-1] + "9" * 3) == []


def test_an_array_job_tags_its_tasks(cluster):
    first = cluster.sbatch("--array=0-1", "--wrap", "sleep 1")
    try:
        wait_for("both tasks", lambda: len(runs_by_array(cluster, first)) == 2 and all(
            r["finished"] for r in runs_by_array(cluster, first)), timeout=40, interval=0.3)
    except AssertionError as e:
        r = wattscope("list", "--db", cluster.path("jobs.db"), "--json")
        raise AssertionError(f"{e}\n{[(x['task'], x['tags']) for x in json.loads(r.stdout)]}\n{cluster.logs()}")
    runs = runs_by_array(cluster, first)
    # slurmd 22.05 gives the prolog no array ids: the recorder takes them from the job's processes at the end.
    assert sorted(r["tags"]["slurm_array_task_id"] for r in runs) == ["0", "1"]
    assert sorted(r["tags"]["slurm_job_id"] for r in runs) == sorted([first, str(int(first) + 1)])
    # Both tags at once (every one must match).
    r = wattscope("list", "--db", cluster.path("jobs.db"), "--tag", f"slurm_array_job_id={first}", "--tag",
                  "slurm_array_task_id=1", "--json")
    assert [x["tags"]["slurm_array_task_id"] for x in json.loads(r.stdout)] == ["1"]


def runs_by_array(cluster, array_job):
    r = wattscope("list", "--db", cluster.path("jobs.db"), "--tag", f"slurm_array_job_id={array_job}", "--json")
    return json.loads(r.stdout) if r.returncode == 0 else []


class MariaDb:
    """A private MariaDB (as tests/support/mariadb.cpp starts one): its own data directory, socket and port."""

    def __init__(self, tmp):
        self.dir = os.path.join(tmp, "mariadb")
        os.makedirs(os.path.join(self.dir, "tmp"))
        self.port = free_port()
        env = dict(os.environ, TMPDIR=os.path.join(self.dir, "tmp"))
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={self.dir}/data", "--user=root",
                        "--auth-root-authentication-method=normal", "--skip-test-db", "--innodb-log-file-size=16M",
                        f"--tmpdir={self.dir}/tmp"], check=True, capture_output=True, env=env, timeout=120)
        self.proc = subprocess.Popen(["mariadbd", "--no-defaults", f"--datadir={self.dir}/data",
                                      f"--socket={self.dir}/sock", f"--port={self.port}", "--bind-address=127.0.0.1",
                                      "--skip-name-resolve", "--innodb-log-file-size=16M",
                                      "--innodb-buffer-pool-size=64M", f"--log-error={self.dir}/error.log",
                                      f"--tmpdir={self.dir}/tmp", f"--pid-file={self.dir}/pid", "--user=root"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        wait_for("MariaDB", lambda: self.sql("SELECT 1", check=False) is not None, timeout=60, interval=0.2)
        self.sql("CREATE USER 'ws'@'127.0.0.1' IDENTIFIED BY 'secret'; CREATE DATABASE wattscope CHARACTER SET "
                 "utf8mb4; GRANT ALL ON wattscope.* TO 'ws'@'127.0.0.1';")

    def sql(self, statements, check=True):
        r = subprocess.run(["mariadb", "--no-defaults", "-uroot", "-S", f"{self.dir}/sock", "-e", statements],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            if check:
                raise AssertionError(r.stderr)
            return None
        return r.stdout

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_the_shared_store_is_mariadb(cluster):
    db = MariaDb(cluster.tmp)
    try:
        url = f"mysql://ws@127.0.0.1:{db.port}/wattscope"
        cluster.configure(url, password="secret")
        job = cluster.sbatch("--gres=gpu:2", "--wrap", "sleep 2")
        cluster.wait_done(job)
        env = dict(os.environ, WATTSCOPE_MYSQL_PASSWORD="secret", WATTSCOPE_SPILL_DIR=cluster.path("spill"))
        runs = runs_of(cluster, job, db=url, env=env)
        assert len(runs) == 1, cluster.logs()
        assert runs[0]["finished"] and runs[0]["tags"]["slurm_job_id"] == job
        assert [g["index"] for g in runs[0]["gpus"]] == [0, 1]
        r = wattscope("show", "--db", url, "--tag", f"slurm_job_id={job}", "--json", env=env)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["total_energy_j"] > 0
        # Nothing went to the local spill file: the run is whole in MariaDB.
        assert not os.path.exists(cluster.path("wattscope", "spill")) or not os.listdir(
            cluster.path("wattscope", "spill"))
    finally:
        cluster.configure(cluster.path("jobs.db"))
        db.stop()


def test_a_broken_configuration_never_fails_the_job(cluster):
    with open(cluster.path("wattscope.conf"), "a") as f:
        f.write("WATTSCOPE_SLURM_TYPO=1\n")
    try:
        job = cluster.sbatch("--wrap", "true")
        cluster.wait_done(job)
        assert cluster.state(job) == "COMPLETED"
        # The node is still in service (a failing prolog or epilog would have drained it).
        assert cluster.slurm(["sinfo", "-h", "-o", "%t"]).strip() == "idle"
        assert runs_of(cluster, job) == []
        with open(cluster.path("wattscope", "slurm.log")) as f:
            assert "unknown key 'WATTSCOPE_SLURM_TYPO'" in f.read()
    finally:
        cluster.configure(cluster.path("jobs.db"))
