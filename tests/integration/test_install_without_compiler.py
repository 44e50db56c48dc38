"""Without a C compiler the package still installs, and the daemon runs the pure-Python intake.

The extension is optional in ``setup.py``: a build that cannot compile it
warns and goes on.  ``CC=/bin/false`` stands in for a machine without a compiler;
the wheel is built with the test environment's own setuptools (no download).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def copy_source(tmp_path: Path) -> Path:
    """What a fresh clone has to build from (no compiled module, no build leftovers)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    skip = shutil.ignore_patterns("*.so", "__pycache__", "*.egg-info")
    for tree in ("daemon", "client_lib"):
        shutil.copytree(ROOT / tree, source / tree, ignore=skip)
    return source


def test_an_editable_build_warns_about_nothing(tmp_path: Path) -> None:
    """What `make run` builds: the compiled intake in place, and no setuptools warning
    (the experimental ``[tool.setuptools.ext-modules]`` table gave three, the editable
    finder's notice a fourth)."""
    source = copy_source(tmp_path)
    build = subprocess.run(
        [sys.executable, "-c",
         "import sys; from setuptools import build_meta; build_meta.build_editable(sys.argv[1])",
         str(tmp_path / "wheels")],
        capture_output=True, text=True, timeout=240, cwd=source,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    warned = re.findall(r"^\S+\.py:\d+: (\w+): (.*)$", build.stdout + build.stderr, re.M)
    assert warned == []  # e.g. ('_ExperimentalConfiguration', '`[tool.setuptools.ext-modules]`...')
    assert list((tmp_path / "wheels").glob("pulsar_bruce-*.whl"))
    assert list((source / "daemon" / "pulsar_bruce" / "native").glob("_intake*.so"))  # in place


def test_without_a_compiler_the_wheel_builds_and_the_python_intake_runs(tmp_path: Path) -> None:
    source = copy_source(tmp_path)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(wheels), str(source)],
        capture_output=True, text=True, timeout=240, env={**os.environ, "CC": "/bin/false"},
    )  # fmt: skip
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert 'building extension "pulsar_bruce.native._intake" failed' in build.stdout + build.stderr
    (wheel,) = wheels.glob("pulsar_bruce-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pulsar_bruce/native/__init__.py" in names
    assert not [name for name in names if "_intake" in name and name.endswith(".so")]

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = subprocess.run(
        [sys.executable, "-c",
         "import pulsar_bruce.native as n, pulsar_bruce.route.intake as i; "
         "print(n.__file__); print(n.INTAKE_DESCRIPTION)"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site), "PULSAR_BRUCE_INTAKE": "auto"},
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    where, description = probe.stdout.splitlines()
    assert where.startswith(str(site))
    assert description == "python (the compiled intake was not built: no C compiler at install?)"
