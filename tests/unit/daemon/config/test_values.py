"""Option values (``config/values.py``): sizes, modes, addresses, levels, numbers, paths and the
vocabularies; one line per mistake, naming the option, the value and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest
from pulsar_bruce.batch.compression import CODECS
from pulsar_bruce.config import ConfigError, load_config, parse_size
from pulsar_bruce.model.vocabulary import Compression
from pulsar_bruce.spool.store import SpoolStore

from tests.unit.daemon.config.helpers import NO_ENV, NO_FLAGS, write_toml

# -- values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["off", "OFF", " off "])
def test_metrics_off(text: str) -> None:
    assert load_config({"metrics_listen": text}, NO_ENV).metrics_listen is None


def test_metrics_ipv6_listen_address() -> None:
    assert load_config({"metrics_listen": "[::1]:9090"}, NO_ENV).metrics_listen == ("::1", 9090)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("256MiB", 256 * 1024**2),
        ("128KiB", 128 * 1024),
        ("10MB", 10 * 1000**2),
        ("4096", 4096),
        ("1GiB", 1024**3),
        ("2kb", 2000),
        ("3k", 3 * 1024),
        ("5 MiB", 5 * 1024**2),
        ("7b", 7),
    ],
)
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected
    assert load_config(
        {"buffer_max_bytes": text, "batch_max_bytes": "1"}, NO_ENV
    ).buffer_max_bytes == (expected)


def test_size_as_toml_integer(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "buffer_max_bytes = 1048576\n")
    assert load_config(NO_FLAGS, NO_ENV, path).buffer_max_bytes == 1048576


@pytest.mark.parametrize("text", ["", "MiB", "1.5MiB", "-1", "0", "12XB", "1 TiB", "ten"])
def test_invalid_sizes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(("text", "mode"), [("0660", 0o660), ("600", 0o600), ("0o640", 0o640)])
def test_socket_mode_is_octal(text: str, mode: int) -> None:
    assert load_config({"socket_mode": text}, NO_ENV).socket_mode == mode


def test_socket_mode_as_toml_string(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'socket_mode = "0600"\n')
    assert load_config(NO_FLAGS, NO_ENV, path).socket_mode == 0o600


def test_socket_mode_toml_octal_literal_is_not_silently_misread(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "socket_mode = 0o660\n")
    try:
        mode = load_config(NO_FLAGS, NO_ENV, path).socket_mode
    except ConfigError:
        return  # refusing the ambiguous integer form would be fine too
    assert mode == 0o660


@pytest.mark.parametrize("level", ["debug", "info", "warning", "error", "critical", "INFO"])
def test_log_levels(level: str) -> None:
    config = load_config({"log_level": level}, NO_ENV)
    assert config.log_level == level.lower()
    assert isinstance(config.log_level_number, int)


@pytest.mark.parametrize("name", ["batch_max_delay_ms", "shutdown_timeout_s", "metadata_refresh_s"])
def test_nan_is_refused(name: str) -> None:
    with pytest.raises(ConfigError):
        load_config({name: "nan"}, NO_ENV)


# -- the vocabularies --------------------------------------------------------------------------


def test_every_compression_name_has_a_codec_and_only_those_are_accepted() -> None:
    assert set(CODECS) == {str(name) for name in Compression}
    for name in Compression:
        assert load_config({"compression": name.upper()}, NO_ENV).compression == name
    with pytest.raises(ConfigError, match=r"^--compression: expected one of none, lz4, zlib, "):
        load_config({"compression": "brotli"}, NO_ENV)


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_every_fsync_policy_is_accepted_by_the_config_and_the_spool(
    tmp_path: Path, policy: str
) -> None:
    config = load_config({"spool_fsync": policy}, NO_ENV)
    assert config.spool_fsync == policy
    assert SpoolStore(tmp_path, 1 << 20, config.spool_fsync).fsync == policy
    with pytest.raises(ConfigError, match=r"^--spool-fsync: expected always, interval or never"):
        load_config({"spool_fsync": "sometimes"}, NO_ENV)


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
    path = write_toml(tmp_path, '[topics."t"]\nbatch_max_delay_ms = 1e308\n')
    with pytest.raises(ConfigError, match=r"topics\.'t'\.batch_max_delay_ms: expected millis"):
        load_config({}, NO_ENV, path)


# -- paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["socket", "stream_socket", "spool_dir", "discard_log", "tls_ca_file"]
)
def test_a_nul_byte_in_a_path_is_refused_when_parsed(tmp_path: Path, key: str) -> None:
    """It passed --check-config, then the start died on it with a traceback."""
    path = write_toml(tmp_path, f'{key} = "{tmp_path}/a\\u0000b"\n')
    with pytest.raises(ConfigError) as raised:
        load_config({}, NO_ENV, path)
    assert str(raised.value) == (
        f"{path}: {key}: expected a path without NUL bytes, got '{tmp_path}/a\\x00b'"
    )
