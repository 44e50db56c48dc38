"""One line per mistake, naming the option, the value and what was expected.

Covers the mistakes a first day brings: words where numbers go, a NUL byte in a
path, a batch delay that would never send, paths the start would refuse (so
``--check-config`` refuses them too), and an unknown flag.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from pulsar_bruce.cli import main
from pulsar_bruce.config import ConfigError, load_config
from pulsar_bruce.config.paths import SUN_PATH_BYTES

NO_ENV: dict[str, str] = {}


def _toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bruce.toml"
    path.write_text(text)
    return str(path)


def _socket_of_length(tmp_path: Path, size: int, suffix: str = ".sock") -> str:
    head = f"{tmp_path}/"
    return head + "s" * (size - len(head) - len(suffix)) + suffix


# -- numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ({"batch_max_messages": "lots"}, NO_ENV,
         "--batch-max-messages: expected a positive integer, got 'lots'"),
        ({"discard_log_archives": "2.5"}, NO_ENV,
         "--discard-log-archives: expected a non-negative integer, got '2.5'"),
        ({}, {"PULSAR_BRUCE_BATCH_MAX_DELAY_MS": "abc"},
         "PULSAR_BRUCE_BATCH_MAX_DELAY_MS: expected a non-negative number, got 'abc'"),
        ({"rate_limit_interval_s": "soon"}, NO_ENV,
         "--rate-limit-interval-s: expected a non-negative number, got 'soon'"),
    ],
)  # fmt: skip
def test_a_word_where_a_number_goes_says_what_was_expected(
    flags: dict[str, str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(flags, env)
    assert str(raised.value) == message


def test_the_batch_delay_is_at_most_a_minute(tmp_path: Path) -> None:
    """``1e308`` ms was accepted, and a batch then waited for ever to fill."""
    assert load_config({"batch_max_delay_ms": "60000"}, NO_ENV).batch_max_delay_ms == 60000
    for value in ("60001", "1e308"):
        with pytest.raises(ConfigError) as raised:
            load_config({"batch_max_delay_ms": value}, NO_ENV)
        assert str(raised.value) == (
            f"--batch-max-delay-ms: expected milliseconds between 0 and 60000, got {value!r}"
        )
    path = _toml(tmp_path, '[topics."t"]\nbatch_max_delay_ms = 1e308\n')
    with pytest.raises(ConfigError, match=r"topics\.'t'\.batch_max_delay_ms: expected millis"):
        load_config({}, NO_ENV, path)


# -- paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["socket", "stream_socket", "spool_dir", "discard_log", "tls_ca_file"]
)
def test_a_nul_byte_in_a_path_is_refused_when_parsed(tmp_path: Path, key: str) -> None:
    """It passed --check-config, then the start died on it with a traceback."""
    path = _toml(tmp_path, f'{key} = "{tmp_path}/a\\u0000b"\n')
    with pytest.raises(ConfigError) as raised:
        load_config({}, NO_ENV, path)
    assert str(raised.value) == (
        f"{path}: {key}: expected a path without NUL bytes, got '{tmp_path}/a\\x00b'"
    )


def test_a_socket_path_longer_than_sun_path_is_refused(tmp_path: Path) -> None:
    off = {"stream_socket": "off"}
    longest = _socket_of_length(tmp_path, SUN_PATH_BYTES)
    assert load_config({"socket": longest, **off}, NO_ENV).socket == longest
    too_long = _socket_of_length(tmp_path, SUN_PATH_BYTES + 1)
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


# -- the command line ----------------------------------------------------------------------


def _clean_env() -> dict[str, str | None]:
    return {name: None for name in os.environ if name.startswith("PULSAR_BRUCE_")}


def test_an_unknown_flag_is_one_line_with_a_suggestion() -> None:
    result = CliRunner().invoke(main, ["--sockit", "x"], env=_clean_env())
    assert result.exit_code == 2
    assert result.output == (
        "pulsar-bruce: error: No such option '--sockit'. "
        "(Did you mean one of: '--socket', '--socket-group', '--socket-mode'?)\n"
    )


def test_check_config_refuses_what_the_start_would(tmp_path: Path) -> None:
    too_long = _socket_of_length(tmp_path, SUN_PATH_BYTES + 1)
    result = CliRunner().invoke(main, ["--check-config", "--socket", too_long], env=_clean_env())
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert result.output.startswith("pulsar-bruce: error: --socket: ")
