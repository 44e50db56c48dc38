"""What the pages say of the systemd units is what the units in systemd/ hold: the
configuration file they read, and each `Key=value` of theirs that a page quotes."""

from __future__ import annotations

import re

import pytest

from tests.support.processes import ROOT

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
UNITS = {
    path.name: dict(re.findall(r"^([A-Z]\w+)=(.*)$", path.read_text(), re.MULTILINE))
    for path in (ROOT / "systemd").glob("pulsar-bruce*.s*")
}


def test_the_pages_name_the_configuration_file_the_units_read() -> None:
    exec_start = UNITS["pulsar-bruce.service"]["ExecStart"]
    installed = re.search(r"--config (\S+)", exec_start)
    assert installed is not None
    for page in PAGES:
        for named in set(re.findall(r"/etc/pulsar-bruce/[\w.-]+\.toml", page.read_text())):
            assert named == installed.group(1), f"{page.name} names {named}"


@pytest.mark.parametrize("key", ["Restart", "WatchdogSec", "TimeoutStopSec", "RestartSec"])
def test_the_pages_quote_the_services_settings_as_they_are(key: str) -> None:
    actual = UNITS["pulsar-bruce.service"][key]
    for page in PAGES:
        for quoted in re.findall(rf"`{key}=([^`]*)`", page.read_text()):
            assert quoted == actual, f"{page.name}: `{key}={quoted}`, the unit has {actual}"
