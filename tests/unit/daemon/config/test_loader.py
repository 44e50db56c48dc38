"""Loading the configuration (``config/loader.py``): defaults from interface.md, precedence
(command line, environment, file, default), one clear error per bad value naming where it
came from, and the checks across options."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pulsar_bruce.config import ConfigError, load_config

from tests.unit.daemon.config.helpers import NO_ENV, NO_FLAGS, write_toml

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


# -- checks across options ---------------------------------------------------------------------


def test_batch_larger_than_buffer_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--batch-max-bytes: "):
        load_config({"buffer_max_bytes": "64KiB", "batch_max_bytes": "128KiB"}, NO_ENV)


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


# -- what loading the configuration imports ----------------------------------------------------


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
