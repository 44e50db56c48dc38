"""A bare ``make`` lists the documented targets instead of building a stamp file."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.support.processes import ROOT

MAKE = shutil.which("make")

pytestmark = pytest.mark.skipif(MAKE is None, reason="make not on PATH")


def test_a_bare_make_prints_every_documented_target() -> None:
    assert MAKE is not None
    done = subprocess.run(
        [MAKE, "--no-print-directory"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert "up to date" not in done.stdout
    makefile = (ROOT / "Makefile").read_text()
    documented = re.findall(r"^## ([a-z-]+):", makefile, re.MULTILINE)
    assert {"help", "run", "test", "unit", "lint", "bench", "proto", "clean"} <= set(documented)
    listed = re.findall(r"^  ([a-z-]+) +\S", done.stdout, re.MULTILINE)
    assert listed == documented
    for target in documented:  # each one is a real target
        assert re.search(rf"^{re.escape(target)}:", makefile, re.MULTILINE), target
