"""The files in systemd/: unit syntax (systemd-analyze verify), sysusers/tmpfiles/sysctl
snippets, the example configuration, and that they agree with each other and the daemon."""

from __future__ import annotations

import dataclasses
import os
import pwd
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from pulsar_bruce.config import OPTIONS_BY_NAME, load_config

from tests.support.processes import ROOT

SYSTEMD = ROOT / "systemd"
SERVICE = SYSTEMD / "pulsar-bruce.service"
SOCKET = SYSTEMD / "pulsar-bruce.socket"
CONFIG = SYSTEMD / "pulsar-bruce.toml"
SYSUSERS = SYSTEMD / "sysusers.d" / "pulsar-bruce.conf"
TMPFILES = SYSTEMD / "tmpfiles.d" / "pulsar-bruce.conf"
SYSCTL = SYSTEMD / "sysctl.d" / "60-pulsar-bruce.conf"


def unit(path: Path) -> dict[str, dict[str, str]]:
    """``{section: {key: value}}``; a repeated key keeps its last value, as systemd does."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current[key.strip()] = value.strip()
    return sections


def needs(tool: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        shutil.which(tool) is None, reason=f"{tool} is not installed (Debian/Ubuntu: systemd)"
    )


# -- systemd-analyze verify ---------------------------------------------------------------------


@needs("systemd-analyze")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """Copies of the units with ExecStart pointing at an executable that exists here."""
    stub = tmp_path / "bin" / "pulsar-bruce"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    units = tmp_path / "units"
    units.mkdir()
    for source in (SERVICE, SOCKET):
        text = source.read_text()
        (units / source.name).write_text(text.replace("/usr/bin/pulsar-bruce", str(stub)))
    result = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            "--man=no",
            str(units / SERVICE.name),
            str(units / SOCKET.name),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    ours = [line for line in result.stderr.splitlines() if "pulsar-bruce" in line]
    assert ours == [], result.stderr
    assert result.returncode == 0, result.stderr


@needs("systemd-analyze")
def test_the_installed_units_only_miss_the_binary_here() -> None:
    """The files as shipped: the one acceptable complaint is a missing /usr/bin/pulsar-bruce."""
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(SERVICE), str(SOCKET)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    complaints = [
        line
        for line in result.stderr.splitlines()
        if "pulsar-bruce" in line and "Command /usr/bin/pulsar-bruce is not executable" not in line
    ]
    assert complaints == [], result.stderr


# -- what the units promise ------------------------------------------------------------------------


def test_service_is_a_notify_service_started_with_the_example_config() -> None:
    service = unit(SERVICE)["Service"]
    assert service["Type"] == "notify"
    assert service["NotifyAccess"] == "main"
    assert (
        service["ExecStart"] == "/usr/bin/pulsar-bruce --config /etc/pulsar-bruce/pulsar-bruce.toml"
    )
    assert "/etc/pulsar-bruce/pulsar-bruce.toml" in CONFIG.read_text()
    assert service["User"] == service["Group"] == "pulsar-bruce"
    assert service["RuntimeDirectoryPreserve"] == "yes"
    # A crash is restarted on the held socket, and the journal in the state directory
    # replays what the dead process had read: nothing it took in is lost.
    assert service["Restart"] == "always"
    assert load_config({}, {}, str(CONFIG)).spool_dir == "/var/lib/" + service["StateDirectory"]
    assert service["StateDirectoryMode"] == "0700"
    assert service["CapabilityBoundingSet"] == ""
    assert set(service["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    for option in ("ProtectSystem", "NoNewPrivileges", "PrivateTmp", "MemoryDenyWriteExecute"):
        assert service[option] in ("yes", "strict"), option


def test_stop_timeout_outlasts_the_daemons_shutdown_timeout() -> None:
    service = unit(SERVICE)["Service"]
    shutdown_timeout = float(OPTIONS_BY_NAME["shutdown_timeout_s"].default)
    assert _seconds(service["TimeoutStopSec"]) > shutdown_timeout
    assert _seconds(service["WatchdogSec"]) >= 2  # pings at half of it from a 5 s status timer


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)\s*(s|sec|min)?", value)
    assert match, value
    return int(match.group(1)) * (60 if match.group(2) == "min" else 1)


def test_socket_unit_listens_where_the_daemon_and_senders_expect() -> None:
    sections = unit(SOCKET)
    socket_unit = sections["Socket"]
    default_socket = OPTIONS_BY_NAME["socket"].default
    assert socket_unit["ListenDatagram"] == default_socket
    assert socket_unit["SocketMode"] == OPTIONS_BY_NAME["socket_mode"].default
    assert socket_unit["SocketUser"] == socket_unit["SocketGroup"] == "pulsar-bruce"
    assert socket_unit["RemoveOnStop"] == "no"
    assert sections["Install"]["WantedBy"] == "sockets.target"
    runtime_dir = "/run/" + unit(SERVICE)["Service"]["RuntimeDirectory"]
    assert os.path.dirname(default_socket) == runtime_dir
    assert f"d     {runtime_dir} " in TMPFILES.read_text()
    service_unit = unit(SERVICE)["Unit"]
    assert "pulsar-bruce.socket" in service_unit["Requires"].split()
    assert "pulsar-bruce.socket" in service_unit["After"].split()


def test_example_config_is_valid(tmp_path: Path) -> None:
    config = load_config({}, {}, str(CONFIG))  # unknown keys and bad values are errors
    assert config.socket == OPTIONS_BY_NAME["socket"].default
    # The commented-out defaults are known keys with valid values too.
    uncommented = tmp_path / "uncommented.toml"
    uncommented.write_text(re.sub(r"^#(\w+ = )", r"\1", CONFIG.read_text(), flags=re.MULTILINE))
    as_is, with_defaults = load_config({}, {}, str(CONFIG)), load_config({}, {}, str(uncommented))
    assert dataclasses.replace(with_defaults, config_file=as_is.config_file) == as_is


def test_sysctl_raises_the_datagram_queue_length() -> None:
    settings = {}
    for line in SYSCTL.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith(("#", ";")):
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    assert set(settings) == {"net.unix.max_dgram_qlen"}
    assert int(settings["net.unix.max_dgram_qlen"]) >= 512


# -- sysusers and tmpfiles, applied to a scratch root -----------------------------------------


@needs("systemd-sysusers")
def test_sysusers_creates_the_user_and_group(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    _apply("systemd-sysusers", SYSUSERS, tmp_path)
    passwd = (tmp_path / "etc" / "passwd").read_text()
    group = (tmp_path / "etc" / "group").read_text()
    assert re.search(r"^pulsar-bruce:x:\d+:\d+:", passwd, re.MULTILINE)
    assert re.search(r"^pulsar-bruce:x:\d+:", group, re.MULTILINE)
    assert "nologin" in passwd


@needs("systemd-tmpfiles")
@needs("systemd-sysusers")
@pytest.mark.skipif(os.geteuid() != 0, reason="systemd-tmpfiles must be root to chown")
def test_tmpfiles_creates_the_runtime_directory(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    _apply("systemd-sysusers", SYSUSERS, tmp_path)
    _apply("systemd-tmpfiles", TMPFILES, tmp_path, "--create")
    info = (tmp_path / "run" / "pulsar-bruce").stat()
    assert stat.S_ISDIR(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o750
    entry = next(
        line.split(":")
        for line in (tmp_path / "etc" / "passwd").read_text().splitlines()
        if line.startswith("pulsar-bruce:")
    )
    assert (info.st_uid, info.st_gid) == (int(entry[2]), int(entry[3]))
    assert info.st_uid != pwd.getpwnam("root").pw_uid


def _apply(tool: str, snippet: Path, root: Path, *args: str) -> None:
    """``tool --root=ROOT -`` reads the snippet from stdin (paths would resolve inside ROOT)."""
    result = subprocess.run(
        [tool, f"--root={root}", *args, "-"],
        input=snippet.read_text(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
