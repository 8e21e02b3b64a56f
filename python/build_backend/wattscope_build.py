"""A PEP 517 build backend in the standard library alone, so that `pip install ./python` works offline.

Why not setuptools: pip builds in an isolated environment and installs the backend named in `requires` from the
package index first; with `requires = ["setuptools"]` an offline `pip install ./python` fails ("pip subprocess to
install build dependencies did not run successfully"), even where setuptools is installed. This backend needs
nothing: it zips the one pure-Python package into a wheel (and the tree into an sdist), with metadata from
pyproject.toml's [project] table.
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11: the few keys this file uses, read line by line
    tomllib = None

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _project():
    path = os.path.join(_ROOT, "pyproject.toml")
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    project, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[project]" and "=" in line and not line.startswith("#"):
                key, value = (x.strip() for x in line.split("=", 1))
                project[key] = value.strip('"')
    return project


def _metadata(p):
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if "description" in p:
        lines.append(f"Summary: {p['description']}")
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    return "\n".join(lines) + "\n"


def _package_files():
    pkg = os.path.join(_ROOT, "wattscope")
    for dirpath, _, names in os.walk(pkg):
        for n in sorted(names):
            if n.endswith((".py", ".json")) or n == "py.typed":  # .json: the marker limits, read at import
                full = os.path.join(dirpath, n)
                yield full, os.path.relpath(full, _ROOT).replace(os.sep, "/")


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _dist_info(p):
    return f"{p['name']}-{p['version']}.dist-info"


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p = _project()
    d = os.path.join(metadata_directory, _dist_info(p))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(_metadata(p))
    return _dist_info(p)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    name = f"{p['name']}-{p['version']}-py3-none-any.whl"
    dist = _dist_info(p)
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:

        def add(arc, data):
            z.writestr(zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0)), data)
            record.append(f"{arc},{_digest(data)},{len(data)}")

        for full, arc in _package_files():
            with open(full, "rb") as f:
                add(arc, f.read())
        add(f"{dist}/METADATA", _metadata(p).encode())
        add(f"{dist}/WHEEL", b"Wheel-Version: 1.0\nGenerator: wattscope_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        record.append(f"{dist}/RECORD,,")
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{p['name']}-{p['version']}"
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "build_backend/wattscope_build.py"] + [a for _, a in _package_files()]:
            t.add(os.path.join(_ROOT, rel), arcname=f"{base}/{rel}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata(p).encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
