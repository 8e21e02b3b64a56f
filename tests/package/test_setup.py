"""scripts/setup.sh as a guest: installing every package the scripts name never removes or downgrades one the machine
has. apt's own simulation (apt-get -s) decides, beside a scientific Python stack (scipy, numba) that an earlier
setup once removed through a Boost conflict."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LISTS = [os.path.join(ROOT, "scripts", "packages", name) for name in ("build.txt", "test.txt")]
CHECK = os.path.join(ROOT, "scripts", "apt-check.sh")
# A researcher's workstation has these; setup must install beside them.
SCIENTIFIC = ["python3-scipy", "python3-numba", "python3-matplotlib", "python3-sklearn"]


def named_packages():
    names = []
    for path in LISTS:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    names.append(line)
    # as setup.sh does: a node and npm already on the PATH (nodesource's, nvm's) serve, and Debian's npm conflicts
    # with nodesource's nodejs
    if not (shutil.which("node") and shutil.which("npm")):
        names += ["nodejs", "npm"]
    return names


def simulate(packages):
    env = dict(os.environ, LC_ALL="C")
    return subprocess.run(["apt-get", "-s", "-o", "Debug::NoLocking=1", "install", "--no-install-recommends",
                           *packages], capture_output=True, text=True, env=env, timeout=300)


def test_the_package_lists_name_one_package_a_line():
    names = named_packages()
    assert len(names) == len(set(names)), "a package is named twice"
    for name in names:
        assert re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", name), f"not a Debian package name: {name!r}"
    # Debian 12's default Boost, never a versioned one that conflicts with it
    assert "libboost-dev" in names and not any(re.fullmatch(r"libboost1\.\d+-dev", n) for n in names)


def test_installing_everything_beside_a_scientific_stack_removes_nothing():
    out = simulate(named_packages() + SCIENTIFIC)
    assert out.returncode == 0, f"apt could not plan the install:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    removed = [l for l in out.stdout.splitlines() if l.startswith("Remv ")]
    assert not removed, "installing wattscope's packages would remove:\n" + "\n".join(removed)
    # the same verdict from the check setup.sh runs before it installs anything
    check = subprocess.run([CHECK, *named_packages(), *SCIENTIFIC], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


def installed(package):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return out.returncode == 0 and "install ok installed" in out.stdout


def test_the_check_names_what_a_conflict_would_remove():
    # Boost 1.81's headers conflict with Debian's default 1.74 (what the build installs): apt would remove the latter.
    if not installed("libboost1.74-dev"):
        pytest.skip("libboost1.74-dev is not installed here, so nothing conflicts with libboost1.81-dev")
    check = subprocess.run([CHECK, "libboost1.81-dev"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 1, check.stdout + check.stderr
    assert re.search(r"^would remove: libboost1\.74-dev \S+", check.stdout, re.M), check.stdout


def test_the_check_says_when_apt_cannot_plan():
    check = subprocess.run([CHECK, "no-such-package-wattscope-test"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 2
    assert "could not plan" in check.stderr and "no-such-package-wattscope-test" in check.stderr


def test_setup_refuses_an_unknown_option():
    out = subprocess.run([os.path.join(ROOT, "scripts", "setup.sh"), "--frobnicate"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "unknown option '--frobnicate'" in out.stderr
