"""deploy/wattscope.service and deploy/wattscope-rapl.conf (issue 18): the unit passes `systemd-analyze verify`
(against a private root holding the system's units and stand-ins for the binaries it names), and the tmpfiles rule
gives the wattscope group, and no one else, read access to every RAPL energy_uj in a fixture /sys."""
import os
import pathlib
import shutil
import stat
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "wattscope.service"
RULE = ROOT / "deploy" / "wattscope-rapl.conf"


def verify(tmp_path, text):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    root = tmp_path / "root"
    units = pathlib.Path("/usr/lib/systemd/system")
    if not units.is_dir():
        pytest.skip("no system units to verify against")
    shutil.copytree(units, root / "usr/lib/systemd/system", symlinks=True)
    for exe in ("usr/local/bin/wattscope", "usr/bin/systemd-tmpfiles"):
        (root / exe).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy("/bin/true", root / exe)
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/systemd/system/wattscope.service").write_text(text)
    return subprocess.run(["systemd-analyze", "verify", f"--root={root}", "/etc/systemd/system/wattscope.service"],
                          capture_output=True, text=True, timeout=120)


def test_unit_verifies_cleanly(tmp_path):
    r = verify(tmp_path, UNIT.read_text())
    assert r.returncode == 0 and "wattscope.service" not in r.stderr, r.stderr


def test_verify_catches_a_broken_unit(tmp_path):
    # systemd-analyze exits 0 on an unparsable line, so the check above also looks at what it says.
    r = verify(tmp_path, UNIT.read_text().replace("Type=simple", "Type=simplex"))
    assert "wattscope.service" in r.stderr


def test_unit_applies_the_rapl_rule_as_root_and_serves_as_its_user():
    lines = [l.strip() for l in UNIT.read_text().splitlines()]
    pre = [l for l in lines if l.startswith("ExecStartPre=")]
    assert pre == ["ExecStartPre=-+/usr/bin/systemd-tmpfiles --create /etc/tmpfiles.d/wattscope-rapl.conf"]
    assert "User=wattscope" in lines
    assert any(l.startswith("ExecStart=/usr/local/bin/wattscope serve") for l in lines)


def test_tmpfiles_rule_opens_energy_uj_to_the_group_only(tmp_path):
    if shutil.which("systemd-tmpfiles") is None:
        pytest.skip("systemd-tmpfiles is not installed")
    if os.geteuid() != 0:
        pytest.skip("changing a file's group to another one needs root")
    root = tmp_path / "root"
    zones = ["intel-rapl:0", "intel-rapl:0:0", "intel-rapl:1", "intel-rapl-mmio:0"]
    for z in zones:
        d = root / "sys/class/powercap" / z
        d.mkdir(parents=True)
        (d / "energy_uj").write_text("123456\n")
        (d / "energy_uj").chmod(0o400)
        (d / "max_energy_range_uj").write_text("262143328850\n")
        (d / "max_energy_range_uj").chmod(0o444)
    (root / "etc").mkdir()
    (root / "etc/group").write_text("root:x:0:\nwattscope:x:987:\n")
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    r = subprocess.run(["systemd-tmpfiles", f"--root={root}", "--create", str(RULE)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    for z in zones:
        st = (root / "sys/class/powercap" / z / "energy_uj").stat()
        assert stat.S_IMODE(st.st_mode) == 0o440 and st.st_gid == 987 and st.st_uid == 0, z
        other = (root / "sys/class/powercap" / z / "max_energy_range_uj").stat()
        assert stat.S_IMODE(other.st_mode) == 0o444 and other.st_gid == 0, "only energy_uj changes"
