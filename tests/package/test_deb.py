"""The install the Debian way (issue 34.3): `cmake --install` puts the Python helper where Debian's python3 finds it,
and the .deb that scripts/package.sh builds with CPack carries the binary, the Python package, the systemd unit,
the deploy files, a man page and bash completion generated from the command table, passes lintian without an error,
and installs and purges cleanly with dpkg. dpkg works in a throwaway root (--root) inside the test's temporary
directory: nothing is installed into the machine running the tests."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

SOURCE_DIR = os.environ["WATTSCOPE_SOURCE_DIR"]
BINARY = os.path.abspath(os.environ["WATTSCOPE_BINARY"])
BUILD_DIR = os.environ.get("WATTSCOPE_BUILD_DIR") or os.path.dirname(BINARY)
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def sh(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, timeout=kw.pop("timeout", 600), **kw)
    assert r.returncode == 0, f"{args}: {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    if not shutil.which("dpkg-deb") or not shutil.which("cpack"):
        pytest.skip("dpkg-deb and cpack are needed to build the package")
    out = tmp_path_factory.mktemp("package")
    r = sh([os.path.join(SOURCE_DIR, "scripts", "package.sh"), str(out)],
           env=dict(os.environ, WATTSCOPE_PACKAGE_NO_BUILD="1", WATTSCOPE_BUILD_DIR=BUILD_DIR))
    path = r.stdout.strip().splitlines()[-1]
    assert path.endswith("_amd64.deb") or path.endswith(".deb"), r.stdout
    return path


def test_the_package_holds_what_a_user_needs(deb):
    files = {line.split()[-1].lstrip(".") for line in sh(["dpkg-deb", "-c", deb]).stdout.splitlines()}
    for want in ("/usr/bin/wattscope", "/usr/lib/python3/dist-packages/wattscope/__init__.py",
                 "/usr/lib/python3/dist-packages/wattscope/reader.py",
                 "/usr/lib/python3/dist-packages/wattscope/marker_limits.json", "/lib/systemd/system/wattscope.service",
                 "/usr/lib/sysusers.d/wattscope.conf", "/usr/share/man/man1/wattscope.1.gz",
                 "/usr/share/bash-completion/completions/wattscope", "/usr/share/doc/wattscope/copyright",
                 "/usr/share/doc/wattscope/changelog.gz", "/usr/share/wattscope/alerts.example.toml",
                 "/usr/share/wattscope/grafana-dashboard.json", "/usr/share/wattscope/prometheus.yml",
                 "/usr/share/wattscope/kubernetes/daemonset.yaml", "/usr/share/wattscope/slurm/wattscope-prolog.sh"):
        assert want in files, want
    assert not any(f.startswith("/usr/local") for f in files)
    control = sh(["dpkg-deb", "-f", deb, "Package", "Depends"]).stdout
    assert "Package: wattscope" in control and "libc6" in control  # dependencies found by dpkg-shlibdeps


def test_lintian_finds_no_error(deb):
    if not shutil.which("lintian"):
        pytest.skip("lintian is not installed (scripts/setup.sh installs it)")
    r = subprocess.run(["lintian", "--tag-display-limit", "0", deb], capture_output=True, text=True, timeout=600)
    errors = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("E:")]
    assert errors == [], "\n".join(errors)


def dpkg_install(deb, root):
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"):
        (root / d).mkdir(parents=True)
    for f in ("status", "available"):
        (root / "var/lib/dpkg" / f).write_text("")
    # --force-depends: the throwaway root has no libc6 package (its files are the host's, used below).
    sh(["dpkg", f"--root={root}", "--force-depends", "--force-not-root", "-i", deb])


def test_dpkg_installs_and_purges_it_in_a_throwaway_root(deb, tmp_path):
    root = tmp_path / "root"
    dpkg_install(deb, root)
    status = sh(["dpkg", f"--root={root}", "-s", "wattscope"]).stdout
    assert "Status: install ok installed" in status

    binary = root / "usr/bin/wattscope"
    assert "Usage: wattscope" in sh([str(binary), "--help"]).stdout
    page = sh(["man", "-l", str(root / "usr/share/man/man1/wattscope.1.gz")],
              env={k: v for k, v in dict(os.environ, MANWIDTH="120").items() if k != "MAN_KEEP_FORMATTING"}).stdout
    for command in ("run", "record", "show", "mark", "alerts check", "slurm prolog"):
        assert f"\n   {command}\n" in page, command  # every command of the table has its section
    assert "--strict" in page and "--cpu-tdp" in page
    completion = root / "usr/share/bash-completion/completions/wattscope"
    script = f"""source {completion}
COMP_WORDS=(wattscope ma); COMP_CWORD=1; _wattscope; echo "${{COMPREPLY[*]}}"
COMP_WORDS=(wattscope mark --str); COMP_CWORD=2; _wattscope; echo "${{COMPREPLY[*]}}"
COMP_WORDS=(wattscope -v alerts c); COMP_CWORD=3; _wattscope; echo "${{COMPREPLY[*]}}"
COMP_WORDS=(wattscope run --cpu); COMP_CWORD=2; _wattscope; echo "${{COMPREPLY[*]}}"
"""
    assert sh(["bash", "-c", script]).stdout.splitlines() == ["mark", "--strict", "check", "--cpu-tdp"]
    unit = (root / "lib/systemd/system/wattscope.service").read_text()
    assert "ExecStart=/usr/bin/wattscope serve" in unit
    py = sh([PYTHON, "-c", "import wattscope, wattscope.reader; print(wattscope.__file__)"],
            env=dict(os.environ, PYTHONPATH=str(root / "usr/lib/python3/dist-packages"))).stdout
    assert py.startswith(str(root / "usr/lib/python3/dist-packages/wattscope/"))

    sh(["dpkg", f"--root={root}", "--purge", "wattscope"])
    left = [str(p.relative_to(root)) for p in root.rglob("*") if not str(p.relative_to(root)).startswith("var")]
    assert left == []  # every file and directory it brought is gone


def test_cmake_install_puts_the_helper_on_debians_python_path(tmp_path):
    # `sudo cmake --install build` (prefix /usr/local), staged under DESTDIR here. The install script is run with
    # cmake -P from the temporary directory, so that its manifest is written there and not into the build tree.
    env = dict(os.environ, DESTDIR=str(tmp_path / "stage"), WATTSCOPE_GEN_DIR=str(tmp_path / "generated"))
    sh(["cmake", "-DCMAKE_INSTALL_PREFIX=/usr/local", "-P", os.path.join(BUILD_DIR, "cmake_install.cmake")],
       env=env, cwd=str(tmp_path))
    version = "%d.%d" % tuple(map(int, sh([PYTHON, "-c", "import sys; print(*sys.version_info[:2])"]).stdout.split()))
    target = f"/usr/local/lib/python{version}/dist-packages"
    assert (tmp_path / "stage" / target.lstrip("/") / "wattscope" / "reader.py").is_file()
    path = sh([PYTHON, "-c", "import sys; print('\\n'.join(sys.path))"], env={"PATH": "/usr/bin:/bin"}).stdout
    assert target in path.splitlines(), path  # where Debian's python3 looks, without PYTHONPATH
    assert (tmp_path / "stage/usr/local/bin/wattscope").is_file()
    assert "ExecStart=/usr/local/bin/wattscope" in (tmp_path / "stage/usr/local/lib/systemd/system/wattscope.service").read_text()


def add_shared_libraries(root, program):
    """`program` and what the dynamic loader needs for it, copied into `root` at their own paths (as
    deploy/container/collect-rootfs.sh does), so that it runs under chroot."""
    out = sh(["ldd", program]).stdout
    for word in out.split():
        if word.startswith("/") and os.path.exists(word):
            target = root / word.lstrip("/")
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(os.path.realpath(word), target)


def in_chroot(root, argv, env, timeout=60):
    """Runs argv under chroot in a private mount namespace holding the host's /proc and /dev (the hooks read /proc;
    a recorder started there keeps the namespace after the hook returns)."""
    script = (f'mount --bind /proc "{root}/proc" && mount --bind /dev "{root}/dev" && '
              f'exec chroot "{root}" "$@"')
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_the_packaged_slurm_hooks_record_a_job_from_a_dpkg_install(deb, tmp_path):
    """A site that follows docs/slurm.md with the package (Prolog=/usr/share/wattscope/slurm/wattscope-prolog.sh,
    no WATTSCOPE_BIN) records its jobs: the hooks run the binary the package installed, under chroot in a root dpkg
    installed it into, and the run is in the store the configuration names. A missing binary is said, not
    swallowed."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("chroot"):
        pytest.skip("chroot and a private mount namespace need root (CI runs as root)")
    root = tmp_path / "root"
    dpkg_install(deb, root)
    hooks = root / "usr/share/wattscope/slurm"
    for hook in ("wattscope-prolog.sh", "wattscope-epilog.sh"):
        text = (hooks / hook).read_text()
        assert "${WATTSCOPE_BIN:-/usr/bin/wattscope}" in text, text
        assert os.access(hooks / hook, os.X_OK)
    # The shell the hooks need, the binary's libraries, and what a node has: /proc, /dev, /run, /var/lib.
    shell = os.path.realpath("/bin/sh")
    (root / "bin").mkdir(exist_ok=True)
    shutil.copy2(shell, root / "bin/sh")
    add_shared_libraries(root, shell)
    add_shared_libraries(root, str(root / "usr/bin/wattscope"))
    for d in ("proc", "dev", "run", "tmp", "var/lib/wattscope"):
        (root / d).mkdir(parents=True, exist_ok=True)
    # WATTSCOPE_SLURM_SYSLOG=0: what the hooks say stays out of the machine's syslog (stderr carries it here).
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "WATTSCOPE_SLURM_SYSLOG": "0",
           "SLURM_JOB_ID": "4242", "SLURM_JOB_USER": "alice",
           "SLURMD_NODENAME": "node1", "WATTSCOPE_SLURM_DB": "/var/lib/wattscope/slurm.db", "WATTSCOPE_SLURM_STATE_DIR": "/run/wattscope-slurm",
           "WATTSCOPE_SLURM_RECORD_ARGS": "--interval 200ms", "WATTSCOPE_SLURM_STOP_TIMEOUT": "20s",
           "WATTSCOPE_CGROUP_ROOT": "none"}
    pid_file = root / "run/wattscope-slurm/job-4242.pid"
    try:
        r = in_chroot(root, ["/usr/share/wattscope/slurm/wattscope-prolog.sh"], env)
        assert r.returncode == 0, r.stderr
        assert "job 4242: recording as pid" in r.stderr, r.stderr  # wattscope's own line, passed on, not swallowed
        assert pid_file.exists(), r.stderr
        time.sleep(1.0)
        r = in_chroot(root, ["/usr/share/wattscope/slurm/wattscope-epilog.sh"], env)
        assert r.returncode == 0, r.stderr
        assert "run finalised" in r.stderr, r.stderr
    finally:
        if pid_file.exists():  # the epilog failed: the recorder must not outlive the test
            subprocess.run(["kill", "-9", pid_file.read_text().split()[0]], capture_output=True)
    db = sqlite3.connect(root / "var/lib/wattscope/slurm.db")
    runs = db.execute("SELECT task, end_ms, samples, tags FROM runs").fetchall()
    db.close()
    assert len(runs) == 1, runs
    task, end_ms, samples, tags = runs[0]
    assert task == "slurm-job-4242" and end_ms is not None and samples > 0, runs
    assert json.loads(tags)["slurm_job_id"] == "4242"

    # Where the binary is not, the hooks say so (stderr here; syslog too where the node has one) and exit 0.
    for hook in ("wattscope-prolog.sh", "wattscope-epilog.sh"):
        r = subprocess.run([str(hooks / hook)], capture_output=True, text=True, timeout=30,
                           env=dict(env, WATTSCOPE_BIN=str(root / "usr/bin/absent")))
        assert r.returncode == 0, "a failing hook drains the node"
        assert f"{root}/usr/bin/absent is missing or not executable: job 4242 is not" in r.stderr, r.stderr
