"""Without a C compiler the package still installs, and the daemon runs the pure-Python intake.

The extension is optional in ``pyproject.toml``: a build that cannot compile it
warns and goes on.  ``CC=/bin/false`` stands in for a machine without a compiler;
the wheel is built with the test environment's own setuptools (no download).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_compiler_the_wheel_builds_and_the_python_intake_runs(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    skip = shutil.ignore_patterns("*.so", "__pycache__", "*.egg-info")
    for tree in ("daemon", "client_lib"):
        shutil.copytree(ROOT / tree, source / tree, ignore=skip)
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
