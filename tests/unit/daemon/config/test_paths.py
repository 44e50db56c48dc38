"""Paths the start would refuse (``config/paths.py``) are refused when the configuration is
loaded, so ``--check-config`` refuses them too."""

from __future__ import annotations

from pathlib import Path

import pytest
from pulsar_bruce.config import ConfigError, load_config
from pulsar_bruce.config.paths import SUN_PATH_BYTES

from tests.unit.daemon.config.helpers import NO_ENV, socket_of_length


def test_a_socket_path_longer_than_sun_path_is_refused(tmp_path: Path) -> None:
    off = {"stream_socket": "off"}
    longest = socket_of_length(tmp_path, SUN_PATH_BYTES)
    assert load_config({"socket": longest, **off}, NO_ENV).socket == longest
    too_long = socket_of_length(tmp_path, SUN_PATH_BYTES + 1)
    with pytest.raises(ConfigError) as raised:
        load_config({"socket": too_long, **off}, NO_ENV)
    assert str(raised.value) == (
        f"--socket: {too_long!r} is 109 bytes long; a UNIX socket path has at most 108"
    )
    # auto puts the stream socket next to it, 7 bytes longer: that one is named.
    with pytest.raises(ConfigError, match=r"^--stream-socket: ") as raised:
        load_config({"socket": longest}, NO_ENV)
    assert str(raised.value).endswith(
        f"is {SUN_PATH_BYTES + 7} bytes long; a UNIX socket path has at most 108 "
        "(auto: next to --socket; shorten --socket or set --stream-socket)"
    )


def test_paths_the_start_would_refuse_are_refused_when_loaded(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    cases = {
        "spool_dir": (str(a_file), f"--spool-dir: {str(a_file)!r} is not a directory"),
        "socket": (
            f"{a_file}/bruce.sock",
            f"--socket: '{a_file}/bruce.sock': {str(a_file)!r} is not a directory",
        ),
        "discard_log": (str(tmp_path), f"--discard-log: {str(tmp_path)!r} is a directory; "
                        "expected a file"),
    }  # fmt: skip
    for name, (value, message) in cases.items():
        with pytest.raises(ConfigError) as raised:
            load_config({name: value}, NO_ENV)
        assert str(raised.value) == message
    nowhere = tmp_path / "no" / "discards.log"
    with pytest.raises(ConfigError, match=r"^--discard-log: directory '.*/no' does not exist$"):
        load_config({"discard_log": str(nowhere)}, NO_ENV)
    # What the start creates is fine: a spool directory, a socket directory, not there yet.
    config = load_config(
        {"spool_dir": str(tmp_path / "new" / "spool"), "socket": str(tmp_path / "r" / "b.sock")},
        NO_ENV,
    )
    assert config.spool_dir.endswith("/new/spool")
