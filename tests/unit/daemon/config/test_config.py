"""Configuration: defaults from interface.md, precedence, and one clear error per bad value."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pulsar_bruce.batch.compression import CODECS
from pulsar_bruce.config import (
    OPTIONS,
    OPTIONS_BY_NAME,
    TOPIC_OPTIONS,
    Config,
    ConfigError,
    TopicSettings,
    load_config,
    parse_size,
)
from pulsar_bruce.model.vocabulary import Compression
from pulsar_bruce.spool.store import SpoolStore

NO_FLAGS: dict[str, object] = {}
NO_ENV: dict[str, str] = {}
#: Config fields that are not options: from [topics."..."] tables and $PULSAR_BRUCE_AUTH_TOKEN.
NOT_OPTIONS = ("topic_overrides", "auth_token")


def write_toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "pulsar-bruce.toml"
    path.write_text(text)
    return str(path)


# -- defaults -------------------------------------------------------------------------------


def test_defaults_match_the_interface() -> None:
    config = load_config(NO_FLAGS, NO_ENV)
    assert config.socket == "/run/pulsar-bruce/bruce.sock"
    assert config.socket_mode == 0o660
    assert config.service_url == "pulsar://localhost:6650"
    assert config.metrics_listen == ("127.0.0.1", 9090)
    assert config.buffer_max_bytes == 256 * 1024 * 1024
    assert config.log_level == "info"


def test_none_on_the_command_line_means_not_given() -> None:
    flags = {"socket": None, "service_url": None}
    assert load_config(flags, NO_ENV) == load_config(NO_FLAGS, NO_ENV)


def test_unrelated_environment_is_ignored() -> None:
    env = {"SERVICE_URL": "pulsar://x:1", "PULSAR_BRUCE": "y", "HOME": "/root"}
    assert load_config(NO_FLAGS, env) == load_config(NO_FLAGS, NO_ENV)


# -- precedence -----------------------------------------------------------------------------------


def test_file_overrides_defaults(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'service_url = "pulsar://file:6650"\nlog_level = "debug"\n')
    config = load_config(NO_FLAGS, NO_ENV, path)
    assert config.service_url == "pulsar://file:6650"
    assert config.log_level == "debug"


def test_environment_overrides_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'service_url = "pulsar://file:6650"\n')
    env = {"PULSAR_BRUCE_SERVICE_URL": "pulsar://env:6650"}
    assert load_config(NO_FLAGS, env, path).service_url == "pulsar://env:6650"


def test_command_line_overrides_environment_and_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'service_url = "pulsar://file:6650"\n')
    env = {"PULSAR_BRUCE_SERVICE_URL": "pulsar://env:6650"}
    flags = {"service_url": "pulsar://flag:6650"}
    assert load_config(flags, env, path).service_url == "pulsar://flag:6650"


def test_precedence_is_per_option(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path, 'socket = "/file.sock"\nlog_level = "error"\nbuffer_max_bytes = "1MiB"\n'
    )
    env = {"PULSAR_BRUCE_LOG_LEVEL": "warning", "PULSAR_BRUCE_BUFFER_MAX_BYTES": "2MiB"}
    flags = {"buffer_max_bytes": "3MiB"}
    config = load_config(flags, env, path)
    assert config.socket == "/file.sock"
    assert config.log_level == "warning"
    assert config.buffer_max_bytes == 3 * 1024 * 1024


@pytest.mark.parametrize(
    ("env", "field", "expected"),
    [
        ("PULSAR_BRUCE_SOCKET", "socket", "/tmp/x.sock"),
        ("PULSAR_BRUCE_SOCKET_MODE", "socket_mode", 0o600),
        ("PULSAR_BRUCE_SERVICE_URL", "service_url", "pulsar+ssl://h:6651"),
        ("PULSAR_BRUCE_METRICS_LISTEN", "metrics_listen", ("0.0.0.0", 9100)),
        ("PULSAR_BRUCE_BUFFER_MAX_BYTES", "buffer_max_bytes", 64 * 1024 * 1024),
        ("PULSAR_BRUCE_LOG_LEVEL", "log_level", "debug"),
    ],
)
def test_each_interface_option_has_an_environment_variable(
    env: str, field: str, expected: object
) -> None:
    raw = {
        "socket": "/tmp/x.sock",
        "socket_mode": "0600",
        "service_url": "pulsar+ssl://h:6651",
        "metrics_listen": "0.0.0.0:9100",
        "buffer_max_bytes": "64MiB",
        "log_level": "DEBUG",
    }[field]
    assert getattr(load_config(NO_FLAGS, {env: raw}), field) == expected


def test_every_option_has_a_file_key(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        "\n".join(
            [
                'socket = "/f.sock"',
                'socket_mode = "0640"',
                'service_url = "pulsar://f:1"',
                'metrics_listen = "off"',
                'buffer_max_bytes = "512MiB"',
                'log_level = "warning"',
                'max_message_bytes = "2MiB"',
                "batch_max_messages = 10",
                'batch_max_bytes = "64KiB"',
                "batch_max_delay_ms = 2.5",
                'compression = "zlib"',
                "shutdown_timeout_s = 5",
                "metadata_refresh_s = 0",
            ]
        ),
    )
    config = load_config(NO_FLAGS, NO_ENV, path)
    assert config.socket == "/f.sock"
    assert config.socket_mode == 0o640
    assert config.service_url == "pulsar://f:1"
    assert config.metrics_listen is None
    assert config.buffer_max_bytes == 512 * 1024 * 1024
    assert config.log_level == "warning"
    assert config.max_message_bytes == 2 * 1024 * 1024
    assert config.batch_max_messages == 10
    assert config.batch_max_bytes == 64 * 1024
    assert config.batch_max_delay_ms == 2.5
    assert config.compression == "zlib"
    assert config.shutdown_timeout_s == 5.0
    assert config.metadata_refresh_s == 0.0


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


# -- errors name the option -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "flag"),
    [
        ("socket_mode", "999", "--socket-mode"),
        ("socket_mode", "rw", "--socket-mode"),
        ("socket_mode", "1777", "--socket-mode"),
        ("service_url", "http://localhost:6650", "--service-url"),
        ("service_url", "localhost:6650", "--service-url"),
        ("service_url", "pulsar://", "--service-url"),
        ("service_url", "pulsar://host:notaport", "--service-url"),
        ("metrics_listen", "9090", "--metrics-listen"),
        ("metrics_listen", ":9090", "--metrics-listen"),
        ("metrics_listen", "localhost:70000", "--metrics-listen"),
        ("metrics_listen", "localhost:http", "--metrics-listen"),
        ("buffer_max_bytes", "lots", "--buffer-max-bytes"),
        ("buffer_max_bytes", "0", "--buffer-max-bytes"),
        ("log_level", "verbose", "--log-level"),
        ("max_message_bytes", "-5", "--max-message-bytes"),
        ("batch_max_messages", "0", "--batch-max-messages"),
        ("batch_max_messages", "many", "--batch-max-messages"),
        ("batch_max_bytes", "1.5k", "--batch-max-bytes"),
        ("batch_max_delay_ms", "-1", "--batch-max-delay-ms"),
        ("batch_max_delay_ms", "soon", "--batch-max-delay-ms"),
        ("compression", "brotli", "--compression"),
        ("shutdown_timeout_s", "-3", "--shutdown-timeout-s"),
        ("metadata_refresh_s", "x", "--metadata-refresh-s"),
    ],
)
def test_invalid_flag_names_the_flag(name: str, value: str, flag: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({name: value}, NO_ENV)
    message = str(info.value)
    assert message.startswith(flag + ":")
    assert "\n" not in message


def test_invalid_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"^PULSAR_BRUCE_LOG_LEVEL: "):
        load_config(NO_FLAGS, {"PULSAR_BRUCE_LOG_LEVEL": "loud"})


def test_invalid_file_value_names_the_file_and_key(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'buffer_max_bytes = "huge"\n')
    with pytest.raises(ConfigError) as info:
        load_config(NO_FLAGS, NO_ENV, path)
    assert str(info.value).startswith(f"{path}: buffer_max_bytes: ")


def test_invalid_value_is_reported_only_from_the_source_used(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'log_level = "loud"\n')
    config = load_config({"log_level": "debug"}, {"PULSAR_BRUCE_LOG_LEVEL": "nope"}, path)
    assert config.log_level == "debug"


def test_unknown_file_key(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'service_url = "pulsar://a:1"\nservice-url = "pulsar://b:1"\n')
    with pytest.raises(ConfigError, match=r"^--config: .*unknown key 'service-url'"):
        load_config(NO_FLAGS, NO_ENV, path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--config: cannot read "):
        load_config(NO_FLAGS, NO_ENV, str(tmp_path / "absent.toml"))


def test_file_that_is_not_toml(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "service_url = \n")
    with pytest.raises(ConfigError, match=r"^--config: .* is not valid TOML"):
        load_config(NO_FLAGS, NO_ENV, path)




@pytest.mark.parametrize(
    "name",
    [
        pytest.param("socket"),
        "socket_mode",
        pytest.param("service_url"),
        pytest.param("metrics_listen"),
        "buffer_max_bytes",
        pytest.param("log_level"),
        "max_message_bytes",
        "batch_max_messages",
        "batch_max_bytes",
        "batch_max_delay_ms",
        pytest.param("compression"),
        "shutdown_timeout_s",
        "metadata_refresh_s",
    ],
)
def test_wrong_toml_type_is_a_config_error_naming_the_key(tmp_path: Path, name: str) -> None:
    path = write_toml(tmp_path, f"{name} = [1]\n")
    with pytest.raises(ConfigError) as info:
        load_config(NO_FLAGS, NO_ENV, path)
    assert str(info.value).startswith(f"{path}: {name}: ")


def test_numeric_log_level_in_file_is_a_config_error(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "log_level = 3\n")
    with pytest.raises(ConfigError, match=r"log_level"):
        load_config(NO_FLAGS, NO_ENV, path)


def test_batch_larger_than_buffer_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--batch-max-bytes: "):
        load_config({"buffer_max_bytes": "64KiB", "batch_max_bytes": "128KiB"}, NO_ENV)


@pytest.mark.parametrize("name", ["batch_max_delay_ms", "shutdown_timeout_s", "metadata_refresh_s"])
def test_nan_is_refused(name: str) -> None:
    with pytest.raises(ConfigError):
        load_config({name: "nan"}, NO_ENV)


# -- one declaration per option, one definition per vocabulary -----------------------------------


def test_the_model_defaults_are_the_parsed_option_defaults() -> None:
    assert Config() == load_config(NO_FLAGS, NO_ENV)
    for option in OPTIONS:
        assert getattr(Config(), option.name) == option.parse(option.default), option.name


def test_the_option_table_is_the_model_fields() -> None:
    fields = [f.name for f in dataclasses.fields(Config)]
    assert [o.name for o in OPTIONS] == [f for f in fields if f not in NOT_OPTIONS]
    assert tuple(f.name for f in dataclasses.fields(TopicSettings)) == TOPIC_OPTIONS
    assert set(TOPIC_OPTIONS) < set(OPTIONS_BY_NAME)


def test_topic_settings_start_from_the_global_values() -> None:
    config = load_config({"compression": "zlib", "batch_max_messages": "7"}, NO_ENV)
    settings = config.topic_settings("persistent://public/default/t")
    assert type(settings) is TopicSettings
    assert settings == TopicSettings(
        **{name: getattr(config, name) for name in TOPIC_OPTIONS}
    )
    assert (settings.compression, settings.batch_max_messages) == ("zlib", 7)


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


def modules_loaded_by(module: str) -> list[str]:
    """In a fresh interpreter: the daemon's modules that importing ``module`` loads."""
    probe = (
        f"import sys, {module}; "
        "print(' '.join(m for m in sys.modules if m.startswith('pulsar_bruce.')))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    loaded = result.stdout.split()
    assert module in loaded
    return loaded


def test_config_imports_only_leaf_modules() -> None:
    leaves = ("pulsar_bruce.config", "pulsar_bruce.model", "pulsar_bruce.reasons")
    assert [m for m in modules_loaded_by("pulsar_bruce.config") if not m.startswith(leaves)] == []


def test_the_connection_layer_never_imports_config() -> None:
    loaded = modules_loaded_by("pulsar_bruce.connection.security")
    assert [m for m in loaded if m.startswith("pulsar_bruce.config")] == []


def test_compression_level_must_suit_its_codec(tmp_path: Path) -> None:
    ok = load_config({"compression": "zstd", "compression_level": "19"}, NO_ENV)
    assert (ok.compression, ok.compression_level) == ("zstd", 19)
    assert load_config({"compression": "lz4", "compression_level": "12"}, NO_ENV)  # ignored
    with pytest.raises(ConfigError, match=r"^--compression-level: zlib levels are 1..9, got 12$"):
        load_config({"compression": "zlib", "compression_level": "12"}, NO_ENV)
    with pytest.raises(ConfigError, match="between 0 and 22"):
        load_config({"compression_level": "23"}, NO_ENV)
    path = write_toml(tmp_path, 'compression_level = 15\n[topics."logs"]\ncompression = "zlib"\n')
    with pytest.raises(ConfigError, match=r"topics\.'persistent://public/default/logs'.*zlib"):
        load_config(NO_FLAGS, NO_ENV, path)
    fine = write_toml(tmp_path, '[topics."logs"]\ncompression = "zstd"\ncompression_level = 7\n')
    settings = load_config(NO_FLAGS, NO_ENV, fine).topic_settings("persistent://public/default/logs")
    assert (settings.compression, settings.compression_level) == ("zstd", 7)
